//! Runs one cell (a tier, a matrix cell, a limit probe) of this process's share.
//!
//! One OS thread per worker, each with a current-thread runtime (the oha model): a
//! connection's task never leaves its thread, statistics live in the worker (`Rc<RefCell>`,
//! no locks, no atomics) and are merged once at the end. Workers connect their part of each
//! batch, meet at a barrier, and all start the measured phase at one instant. A fanout's and
//! a hold's connections are served meanwhile (`fanout::Serving`); the others wait unread.

use crate::clock::{self, CellClock};
use crate::connection::{self, WorkerState};
use crate::counters::{Counters, SlotRef};
use crate::dial::{Dialer, Role, Ws};
use crate::fanout;
use crate::measure::Measure;
use crate::model::{Behavior, Cell};
use crate::rendezvous::Meeting;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Barrier;
use tokio::time::Instant;

/// The outcome of one cell in this process.
pub struct CellOutcome {
    pub measure: Measure,
    /// First dial to last connection established (or failed).
    pub connect_secs: f64,
    /// The measured window (after warm-up), as it actually lasted.
    pub measured_secs: f64,
    /// Spread of the workers' start instants (microseconds): the in-process start skew.
    pub start_skew_us: u64,
    /// When the measured phase (warm-up first) began, Unix µs on this process's clock; `None`
    /// when it never did (nothing connected).
    pub measured_from_micros: Option<u64>,
}

/// The worker threads a cell runs on, and the live counters they feed (a slot each).
pub struct Workers {
    pub threads: usize,
    pub counters: Arc<Counters>,
}

/// Where the workers meet: the connect phase's common clock, then the barrier before the
/// measured phase and the one instant it starts at.
struct StartLine {
    barrier: Barrier,
    /// The instant, the cell's clock (clock::take_cell, once per cell), the instant on
    /// the conductor's clock and on this process's (Unix µs).
    start: OnceLock<(Instant, CellClock, u64, u64)>,
    /// The cell's clock as the conductor armed it, and the instant every shard's measured
    /// phase begins at when they must begin together (see [`common_start`]).
    armed: OnceLock<(CellClock, Option<Instant>)>,
    connect_start: Instant,
    /// The other shards of the test, when the measured phase waits for them; and the instant
    /// the conductor named (`None` inside: at once).
    meeting: Option<Meeting>,
    met: OnceLock<Option<Instant>>,
}

/// When shards must begin a cell's measured phase together, the instant on the conductor's
/// clock they do: a fanout's publishers and subscribers are on every shard, and a publish
/// made before another shard's subscribers are subscribed would be a gap that is no
/// server's. Each shard has until the last connect batch's start plus `connect.timeout` to
/// be connected (its own clock cannot tell when the others are), the cell's release
/// instant being the origin. `None` for other cells, and without a conductor.
fn common_start(cell: &Cell, armed: &CellClock) -> Option<u64> {
    let Behavior::Fanout(plan) = &cell.behavior else {
        return None;
    };
    if !armed.conducted {
        return None;
    }
    let dials = cell.connections + u32::try_from(plan.publishing.len()).unwrap_or(u32::MAX);
    let batches = dials.div_ceil(cell.batch_size.max(1));
    let allowance = cell.batch_interval * batches.saturating_sub(1) + plan.connect_timeout;
    Some(armed.epoch_micros + u64::try_from(allowance.as_micros()).unwrap_or(u64::MAX))
}

impl Workers {
    /// Runs `cell` on the workers, each on its own thread, and merges their figures. With a
    /// `meeting`, the measured phase begins when the conductor says every shard's share is
    /// open (a fanout's shards keep their common instant instead: [`common_start`]).
    pub fn run(&self, cell: &Cell, dialer: &Arc<Dialer>, meeting: Option<Meeting>) -> CellOutcome {
        let count = self.threads.clamp(1, cell.connections.max(1) as usize);
        let meeting = meeting.filter(|_| !matches!(cell.behavior, Behavior::Fanout(_)));
        let start_line = Arc::new(StartLine {
            barrier: Barrier::new(count),
            start: OnceLock::new(),
            armed: OnceLock::new(),
            connect_start: Instant::now() + Duration::from_millis(5),
            meeting,
            met: OnceLock::new(),
        });
        let outs: Vec<WorkerOut> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..count)
                .map(|index| {
                    let start_line = start_line.clone();
                    let (dialer, counters) = (dialer.clone(), self.counters.clone());
                    s.spawn(move || {
                        let worker = Worker {
                            index,
                            count,
                            cell,
                            dialer,
                            slot: counters.slot_ref(index),
                            counters,
                            stats: Rc::default(),
                        };
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("a current-thread runtime builds");
                        let local = tokio::task::LocalSet::new();
                        local.block_on(&rt, worker.run(&start_line))
                    })
                })
                .collect();
            let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            // A worker that panicked took its connections' figures with it: the cell cannot
            // be reported as measured. Every worker is joined first, so none outlives the cell.
            joined
                .into_iter()
                .map(|j| j.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        });
        let mut outcome = merge(&outs);
        outcome.measured_from_micros = start_line.start.get().map(|s| s.3);
        outcome
    }
}

/// What one worker measured, and when its phases began and ended.
struct WorkerOut {
    measure: Measure,
    first_dial: Instant,
    last_connected: Instant,
    measured: Duration,
    started: Instant,
}

/// The cell's figures from its workers'.
fn merge(outs: &[WorkerOut]) -> CellOutcome {
    let mut measure = Measure::default();
    for o in outs {
        measure.add(&o.measure);
    }
    let first = outs.iter().map(|o| o.first_dial).min();
    let last = outs.iter().map(|o| o.last_connected).max();
    let connect_secs = first
        .zip(last)
        .map_or(0.0, |(a, b)| b.saturating_duration_since(a).as_secs_f64());
    let measured_secs = outs
        .iter()
        .map(|o| o.measured)
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    let starts: Vec<Instant> = outs.iter().map(|o| o.started).collect();
    let skew = starts
        .iter()
        .max()
        .zip(starts.iter().min())
        .map_or(0, |(a, b)| a.duration_since(*b).as_micros() as u64);
    CellOutcome {
        measure,
        connect_secs,
        measured_secs,
        start_skew_us: skew,
        measured_from_micros: None,
    }
}

/// One worker's share of a cell: the connections whose number modulo `count` is `index`.
struct Worker<'a> {
    index: usize,
    count: usize,
    cell: &'a Cell,
    dialer: Arc<Dialer>,
    /// Where the cell's course is marked (its measured phase's start).
    counters: Arc<Counters>,
    slot: SlotRef,
    /// Where the worker's connections record, dials and measured phase alike.
    stats: Rc<RefCell<Measure>>,
}

/// The connections that opened, with their numbers and what their steps on open captured.
type Opened = Vec<(u64, Ws, Vec<bytes::Bytes>)>;

/// What the connect phase hands the measured phase.
struct Connected {
    opened: Opened,
    first_dial: Instant,
    last_connected: Instant,
}

impl Worker<'_> {
    async fn run(self, start_line: &StartLine) -> WorkerOut {
        let cell = self.cell;
        let script = Arc::new(self.dialer.script().for_cell(
            cell.behavior.times_each(),
            cell.encoding,
            cell.size,
        ));
        // A fanout's and a hold's connections are served from their open (see
        // `fanout::Serving`): a subscriber must read what is published before the start, and a
        // held connection must answer the server and keep alive while the rest open (minutes at
        // hundreds of thousands). The others wait unread until the measured phase: they are
        // busy from its start.
        let serving =
            matches!(cell.behavior, Behavior::Fanout(_) | Behavior::Hold { .. }).then(|| {
                let early = self.state_before_start(&script);
                Rc::new(fanout::Serving::new(early, cell.behavior.clone()))
            });
        let connected = self.connect(start_line, serving.as_ref()).await;
        self.measure(connected, start_line, script, serving).await
    }

    /// The worker's state as known before the measured phase begins: its instants are
    /// `fanout::NEVER` away, so that nothing read before the start counts as measured.
    fn state_before_start(&self, script: &Arc<crate::script::Script>) -> WorkerState {
        let never = Instant::now() + fanout::NEVER;
        WorkerState {
            start: never,
            cell_clock: CellClock::default(),
            start_on_conductor_us: 0,
            connections: self.cell.connections,
            measure_from: never,
            deadline: never,
            write_timeout: self.cell.write_timeout,
            timed: self.cell.behavior.is_timed(),
            script: script.clone(),
            size: self.cell.size,
            stats: self.stats.clone(),
            discard: Rc::new(RefCell::new(Measure::default())),
            slot: self.slot.clone(),
            scratch: Default::default(),
        }
    }

    /// The connect phase: this worker's part of each batch, batches on a common clock. The
    /// connect rate is timed from the first dial, not from before the common start.
    async fn connect(
        &self,
        start_line: &StartLine,
        serving: Option<&Rc<fanout::Serving>>,
    ) -> Connected {
        let (cell, w, workers) = (self.cell, self.index, self.count);
        let opened: Rc<RefCell<Opened>> = Rc::new(RefCell::new(Vec::new()));
        tokio::time::sleep_until(start_line.connect_start).await;
        let first_dial = Instant::now();
        let batch = cell.batch_size.max(1);
        let mut dials = tokio::task::JoinSet::new();
        // At most one batch in flight: a batch starts at its time AND once the previous one has
        // landed. Unbounded, a slow server leaves every handshake's buffers (~8 KB each) alive at
        // once, interleaved with the connections' long-lived ones, and memory stays fragmented
        // long after (measured: 18 KiB per idle connection instead of 7).
        let in_flight = Arc::new(tokio::sync::Semaphore::new(
            (batch as usize).div_ceil(workers).max(1),
        ));
        let fanout = match &cell.behavior {
            Behavior::Fanout(plan) => Some(plan.clone()),
            _ => None,
        };
        // A fanout's publishers are dialed after its subscribers, in the same batches.
        let total = cell.connections
            + fanout
                .as_ref()
                .map_or(0, |p| u32::try_from(p.publishing.len()).unwrap_or(u32::MAX));
        let mut b = 0u32;
        while b * batch < total {
            tokio::time::sleep_until(start_line.connect_start + cell.batch_interval * b).await;
            let end = ((b + 1) * batch).min(total);
            for i in (b * batch..end).filter(|i| *i as usize % workers == w) {
                let (n, role) = match &fanout {
                    Some(plan) => fanout::role(plan, cell, i),
                    None => (cell.first + u64::from(i), Role::Any),
                };
                let Ok(permit) = in_flight.clone().acquire_owned().await else {
                    break;
                };
                let (dialer, stats, opened) =
                    (self.dialer.clone(), self.stats.clone(), opened.clone());
                let slot = self.slot.clone();
                let serving = serving.cloned();
                dials.spawn_local(async move {
                    stats.borrow_mut().counts.attempted += 1;
                    let dialed = dialer.dial_as(n, &role).await;
                    drop(permit);
                    if matches!(role, Role::Publisher(_)) {
                        fanout::publisher_opened(&mut stats.borrow_mut(), dialed.is_ok());
                    }
                    match dialed {
                        Ok(d) => {
                            let total = d.tcp + d.upgrade + d.ready.unwrap_or_default();
                            let mut m = stats.borrow_mut();
                            m.counts.connected += 1;
                            m.counts.sent_with_warmup += d.greetings_sent;
                            if let Some(n) = &d.negotiated {
                                m.counts.witness(crate::dial::NEGOTIATED, n);
                            }
                            m.counts.replies += d.replies;
                            m.hists.tcp.record(d.tcp);
                            m.hists.upgrade.record(d.upgrade);
                            if let Some(r) = d.ready {
                                m.hists.ready.record(r);
                            }
                            m.hists.connect.record(total);
                            slot.opened(total);
                            drop(m);
                            match &serving {
                                Some(serving) => serving.open(d.ws, n, &d.vars),
                                None => opened.borrow_mut().push((n, d.ws, d.vars)),
                            }
                        }
                        Err(e) => {
                            let why = e.why;
                            let mut m = stats.borrow_mut();
                            m.counts.fail(why);
                            if let Some(evidence) = &e.evidence {
                                m.counts.witness(why.label(), evidence);
                            }
                            if let Some(step) = e.step {
                                *m.counts.expect_missed.entry(step).or_default() += 1;
                            }
                            slot.failed(why);
                            tracing::debug!(
                                connection = n,
                                reason = why.label(),
                                evidence = e.evidence.as_deref().unwrap_or_default(),
                                "connect failed"
                            );
                        }
                    }
                });
                // A finished task's memory goes only when its handle is joined: reap as we go, or
                // every dial of the cell stays allocated until the last one lands.
                while dials.try_join_next().is_some() {}
            }
            b += 1;
        }
        while dials.join_next().await.is_some() {}
        let last_connected = Instant::now();
        let opened = std::mem::take(&mut *opened.borrow_mut());
        Connected {
            opened,
            first_dial,
            last_connected,
        }
    }

    /// The measured phase: every worker starts at one instant, after the barrier; warm-up
    /// first, then the measured window.
    async fn measure(
        self,
        connected: Connected,
        start_line: &StartLine,
        script: Arc<crate::script::Script>,
        serving: Option<Rc<fanout::Serving>>,
    ) -> WorkerOut {
        let cell = self.cell;
        let leader = start_line.barrier.wait().await.is_leader();
        if let Some(meeting) = &start_line.meeting {
            // One worker speaks for the shard; the others wait at the barrier, serving their
            // connections meanwhile, as all of them do while the conductor's word is awaited.
            if leader {
                let (now, base) = (self.counters.snapshot(), self.counters.course_base());
                let at = meeting
                    .wait(now.opened - base.opened, now.failed - base.failed)
                    .await;
                let _ = start_line.met.set(at);
            }
            start_line.barrier.wait().await;
        }
        let (armed, wake) = *start_line.armed.get_or_init(|| {
            let armed = clock::take_cell();
            match common_start(cell, &armed) {
                Some(at) => {
                    let now = clock::conductor_micros();
                    if now > at {
                        tracing::warn!(
                            late_ms = (now - at) / 1000,
                            "connected after the instant every shard was to begin measuring; this shard begins late"
                        );
                    }
                    let wait = Duration::from_micros(at.saturating_sub(now));
                    (
                        CellClock {
                            epoch_micros: at,
                            ..armed
                        },
                        Some(Instant::now() + wait),
                    )
                }
                None => (armed, start_line.met.get().copied().flatten()),
            }
        });
        if let Some(at) = wake {
            tokio::time::sleep_until(at).await;
        }
        let (start, cell_clock, start_on_conductor_us, _) = *start_line.start.get_or_init(|| {
            let now = Instant::now();
            let on_conductor = clock::conductor_micros();
            self.counters.measuring(now.into_std(), cell.warmup);
            (now, armed, on_conductor, clock::unix_micros())
        });
        let started = Instant::now();
        let measure_from = start + cell.warmup;
        let deadline = measure_from + cell.duration;
        let shared = Rc::new(WorkerState {
            start,
            cell_clock,
            start_on_conductor_us,
            connections: cell.connections,
            measure_from,
            deadline,
            write_timeout: cell.write_timeout,
            timed: cell.behavior.is_timed(),
            script,
            size: cell.size,
            stats: self.stats.clone(),
            discard: Rc::new(RefCell::new(Measure::default())),
            slot: self.slot.clone(),
            scratch: Default::default(),
        });
        let mut tasks = tokio::task::JoinSet::new();
        // One measured message for all the connections that captured nothing it uses.
        let common = shared.script.shared_message();
        for (n, ws, vars) in connected.opened {
            let message = shared.script.message_for(&vars, &common);
            let shared = shared.clone();
            let behavior = cell.behavior.clone();
            // Spawned directly, not wrapped in an `async move` block: a wrapper keeps its own copy
            // of the captured stream beside the inner future's (4.4 KB per task instead of 2).
            let fut = connection::run(ws, n, shared, behavior, message);
            tasks.spawn_local(fut);
        }
        if let Some(serving) = &serving {
            serving.begin(shared.clone());
            drop(shared);
            serving.join().await;
        }
        while tasks.join_next().await.is_some() {}
        let elapsed = Instant::now().saturating_duration_since(measure_from);
        let measured = if cell.behavior.is_timed() {
            elapsed.min(cell.duration)
        } else {
            elapsed
        };
        let measure = self.stats.borrow().clone();
        WorkerOut {
            measure,
            first_dial: connected.first_dial,
            last_connected: connected.last_connected,
            measured,
            started,
        }
    }
}
