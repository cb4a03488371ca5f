//! `spec.disruptions` on one machine: at each disruption's instant of every cell's measured
//! phase, the managed server's replicas are killed (SIGKILL, as a crash), and started again
//! `restartAfter` later, or before the next cell. On a thread of its own, off the workers'
//! and the sampler's: a kill waits for the process to be reaped, a restart for its address.

use crate::conduct::local_server::LocalServers;
use crate::counters::Counters;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wsload_spec::reconnect::Disruption;

/// The thread that disrupts; stopped (and joined) when dropped, before the servers stop.
pub struct Disruptor {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Disruptor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// How often the thread looks at the run's course for a measured phase's start: the
/// disruption itself is timed from that start, not from when it was seen.
const LOOK: Duration = Duration::from_millis(5);

/// One thing to do at an instant: kill `count` replicas, start replica `i` again, or
/// restart every replica in turn.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Kill {
        count: u32,
        restart_after: Option<Duration>,
    },
    Restart(usize),
    Roll {
        pause: Duration,
    },
}

/// Starts the thread that runs `disruptions` on `servers` in every cell `counters` reports;
/// `None` when there are none.
pub fn spawn(
    disruptions: &[Disruption],
    servers: Arc<Mutex<LocalServers>>,
    counters: Arc<Counters>,
) -> std::io::Result<Option<Disruptor>> {
    let plan: Vec<(Duration, Act)> = disruptions
        .iter()
        .filter_map(|d| {
            if let Some(r) = &d.restart {
                let pause = r.pause.map(|p| p.get()).unwrap_or_default();
                return Some((d.at.get(), Act::Roll { pause }));
            }
            let kill = d.kill.as_ref()?;
            Some((
                d.at.get(),
                Act::Kill {
                    count: kill.replicas,
                    restart_after: kill.restart_after.map(|r| r.get()),
                },
            ))
        })
        .collect();
    if plan.is_empty() {
        return Ok(None);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let handle = std::thread::Builder::new()
        .name("wsload-disrupt".into())
        .spawn(move || run(&plan, &servers, &counters, &stopped))?;
    Ok(Some(Disruptor {
        stop,
        handle: Some(handle),
    }))
}

/// Why `wsload run` cannot run these disruptions, if it cannot (said after `spec.disruptions`):
/// a Deployment rolled through the Kubernetes API is the operator's.
pub fn cluster_only(disruptions: &[Disruption]) -> Option<String> {
    disruptions.iter().enumerate().find_map(|(i, d)| {
        let name = d.restart.as_ref()?.deployment.as_ref()?;
        Some(format!(
            "entry {i} rolls deployment {name} (restart.deployment): the operator does that through the Kubernetes API, in a cluster (kubectl apply -f the same file); wsload run has no cluster to roll it in"
        ))
    })
}

fn lock(servers: &Mutex<LocalServers>) -> std::sync::MutexGuard<'_, LocalServers> {
    servers.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run(
    plan: &[(Duration, Act)],
    servers: &Mutex<LocalServers>,
    counters: &Counters,
    stop: &AtomicBool,
) {
    let mut done: Option<usize> = None;
    let mut pending: Vec<(Instant, Act)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let course = counters.course();
        let cell = course.cell.as_ref().map(|p| p.index);
        if course.ended || cell != done {
            // What a cell scheduled is its own: nothing of it runs into the next (whose
            // replicas the run started again before it began: `restart_all`).
            pending.clear();
        }
        if let (false, Some(i), Some(from)) = (course.ended, cell, course.measured_from)
            && done != Some(i)
        {
            done = Some(i);
            pending = plan.iter().map(|(at, act)| (from + *at, *act)).collect();
        }
        let now = Instant::now();
        pending.sort_by_key(|(t, _)| *t);
        while let Some(&(t, act)) = pending.first()
            && t <= now
        {
            pending.remove(0);
            match act {
                Act::Kill {
                    count,
                    restart_after,
                } => {
                    let killed = lock(servers).kill(count);
                    let late = now.saturating_duration_since(t);
                    tracing::info!(
                        ?killed,
                        late_ms = late.as_millis(),
                        "disruption: replicas killed"
                    );
                    crate::observe::terminal::eprintln_above!(
                        "disruption: killed server replica{} {killed:?} ({} ms after its instant)",
                        if killed.len() == 1 { "" } else { "s" },
                        late.as_millis()
                    );
                    if let Some(after) = restart_after {
                        pending.extend(killed.into_iter().map(|i| (t + after, Act::Restart(i))));
                    }
                }
                Act::Roll { pause } => roll(servers, pause, &|| {
                    let c = counters.course();
                    stop.load(Ordering::Relaxed)
                        || c.ended
                        || c.cell.as_ref().map(|p| p.index) != done
                }),
                Act::Restart(i) => match lock(servers).restart(i) {
                    Ok(()) => tracing::info!(replica = i, "disruption: replica started again"),
                    Err(e) => {
                        crate::observe::terminal::eprintln_above!(
                            "disruption: replica {i} did not start again: {e}"
                        );
                    }
                },
            }
        }
        let wake = pending
            .first()
            .map_or(now + LOOK, |(t, _)| (*t).min(now + LOOK));
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
    }
}

/// A rolling restart: each replica in turn stopped as a deploy stops it, started again on its
/// ports and ready (it announced its addresses), then `pause`, then the next; given up when
/// `over` says the cell (or the run) ended, so that a roll longer than its cell never reaches
/// into the next or holds the run's end. The lock is taken per replica, not for the roll.
fn roll(servers: &Mutex<LocalServers>, pause: Duration, over: &dyn Fn() -> bool) {
    let began = Instant::now();
    let n = lock(servers).count();
    for i in 0..n {
        if over() {
            crate::observe::terminal::eprintln_above!(
                "disruption: rolling restart cut at replica {i} of {n}: the cell ended"
            );
            return;
        }
        let mut s = lock(servers);
        s.stop(i);
        if let Err(e) = s.restart(i) {
            crate::observe::terminal::eprintln_above!(
                "disruption: replica {i} did not start again in the rolling restart: {e}"
            );
        }
        drop(s);
        let resume = Instant::now() + pause;
        while i + 1 < n && Instant::now() < resume && !over() {
            std::thread::sleep(LOOK.min(resume.saturating_duration_since(Instant::now())));
        }
    }
    crate::observe::terminal::eprintln_above!(
        "disruption: rolling restart of {n} replicas done in {} ms",
        began.elapsed().as_millis()
    );
}

/// Starts every replica a disruption left down, on the caller's thread: the run's, before a
/// cell (the servers it starts live as long as it does: `--exit-with-parent`).
pub fn restart_all(servers: &Mutex<LocalServers>) {
    let mut s = lock(servers);
    for i in s.down() {
        if let Err(e) = s.restart(i) {
            crate::observe::terminal::eprintln_above!(
                "disruption: replica {i} did not start again: {e}"
            );
        }
    }
}
