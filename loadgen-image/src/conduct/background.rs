//! The run's background thread: the metrics endpoint (if any), the timelines' sampling and
//! the achieved-rate gauge (crate::observe::sampler), and the terminal's bar. Nothing of it is on the
//! workers' threads.

use super::error::RunError;
use crate::observe::progress::{Outline, Progress};
use crate::observe::sampler::{CELL_STEP, RUN_STEP, Sampler};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The background thread: the HTTP endpoint (if any), the achieved-rate ticker, the
/// terminal progress line. Stopped by dropping it.
pub struct Background {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Starts the background thread, serving `endpoint` (a bound listener and what it exposes)
/// if given, and drawing the progress of `progress`'s run if stderr is a terminal.
pub fn spawn_background<E: wsload_http::Exposition>(
    sampler: Arc<Sampler>,
    endpoint: Option<(std::net::TcpListener, Arc<E>)>,
    progress: Option<Outline>,
) -> Result<Background, RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    let progress = progress.filter(|_| std::io::stderr().is_terminal());
    let stopped = stop.clone();
    let handle = std::thread::Builder::new()
        .name("wsload-http".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Some((l, exposition)) = endpoint
                    && let Ok(l) = tokio::net::TcpListener::from_std(l)
                {
                    tokio::spawn(wsload_http::serve(l, exposition));
                }
                let mut progress = progress.map(Progress::new);
                // Interrupted at a terminal: the bar is taken off before the process ends as
                // SIGINT would end it. Elsewhere SIGINT keeps its default.
                let watch = progress.is_some();
                let mut interrupted = std::pin::pin!(async move {
                    if watch && tokio::signal::ctrl_c().await.is_ok() {
                        return;
                    }
                    std::future::pending::<()>().await
                });
                // The cell's report timeline is sampled every step; the rate gauge, the
                // --plot timeline and the bar once a second.
                let per_second = (RUN_STEP.as_millis() / CELL_STEP.as_millis().max(1)).max(1);
                let mut tick = tokio::time::interval(CELL_STEP);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut ticks: u128 = 0;
                while !stopped.load(Ordering::Relaxed) {
                    let cell_start = sampler.cell_start_pending();
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = sampler.cell_armed() => continue,
                        () = async {
                            match cell_start {
                                Some(at) => tokio::time::sleep_until(at.into()).await,
                                None => std::future::pending().await,
                            }
                        } => {
                            // A cell's measured phase begins: its timeline starts now and
                            // its steps are counted from here.
                            sampler.sample_cell(Instant::now());
                            tick.reset_after(CELL_STEP);
                            continue;
                        }
                        () = &mut interrupted => {
                            if let Some(p) = &progress {
                                p.interrupted();
                            }
                            std::process::exit(130);
                        }
                    }
                    sampler.sample_cell(Instant::now());
                    ticks += 1;
                    if (ticks - 1) % per_second != 0 {
                        continue;
                    }
                    sampler.tick(Instant::now());
                    if let Some(p) = &mut progress {
                        p.draw(sampler.counters());
                    }
                }
            });
        })
        .map_err(|e| RunError::io("cannot start the background thread", e))?;
    Ok(Background {
        stop,
        handle: Some(handle),
    })
}
