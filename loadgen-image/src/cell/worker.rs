//! One worker's share of a cell, on its own thread: the connect phase (its part of each
//! batch, on the cell's common clock), then the measured phase from the start line's instant,
//! every connection in its own task on this thread.

use super::start_line::StartLine;
use crate::behavior::fanout::{self, publisher_opened};
use crate::behavior::worker::{Instants, WorkerState};
use crate::behavior::{self, Serving};
use crate::connect::{self, Dialed, Dialer, NEGOTIATED, Role, Ws};
use crate::counters::{Counters, SlotRef};
use crate::model::{Behavior, Cell};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wsload_report::measure::Measure;

/// One worker's share of a cell: the connections whose number modulo `count` is `index`.
pub(super) struct Worker<'a> {
    pub index: usize,
    pub count: usize,
    pub cell: &'a Cell,
    pub dialer: Arc<Dialer>,
    /// Where the cell's course is marked (its measured phase's start).
    pub counters: Arc<Counters>,
    pub slot: SlotRef,
    /// Where the worker's connections record, dials and measured phase alike.
    pub stats: Rc<RefCell<Measure>>,
}

/// What one worker measured, and when its phases began and ended.
pub(super) struct WorkerOut {
    pub measure: Measure,
    pub first_dial: Instant,
    pub last_connected: Instant,
    pub measured: Duration,
    pub started: Instant,
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
    pub(super) async fn run(self, start_line: &StartLine) -> WorkerOut {
        let cell = self.cell;
        // Every window of a cell that reconnects or disrupts is in its result, those in which
        // nothing dropped too.
        if let Some(c) = &cell.comeback {
            self.stats.borrow_mut().reconnect = Some(c.figures());
        }
        // A fanout's and a hold's connections are served from their open (see `Serving`): a
        // subscriber must read what is published before the start, and a held connection
        // must answer the server and keep alive while the rest open (minutes at hundreds of
        // thousands). The others wait unread until the measured phase: they are busy from its
        // start.
        let serving =
            matches!(cell.behavior, Behavior::Fanout(_) | Behavior::Hold { .. }).then(|| {
                let early = self.state(Instants::before_start());
                Rc::new(Serving::new(
                    early,
                    cell.behavior.clone(),
                    self.dialer.clone(),
                ))
            });
        let connected = self.connect(start_line, serving.as_ref()).await;
        self.measure(connected, start_line, serving).await
    }

    /// The state the worker's connections share, with the phase's instants.
    fn state(&self, instants: Instants) -> WorkerState {
        WorkerState::new(self.cell, instants, self.stats.clone(), self.slot.clone())
    }

    /// The connect phase: this worker's part of each batch, batches on a common clock. The
    /// connect rate is timed from the first dial, not from before the common start.
    async fn connect(&self, start_line: &StartLine, serving: Option<&Rc<Serving>>) -> Connected {
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
                let (dialer, script) = (self.dialer.clone(), cell.script.clone());
                let (stats, slot) = (self.stats.clone(), self.slot.clone());
                let (opened, serving) = (opened.clone(), serving.cloned());
                dials.spawn_local(async move {
                    stats.borrow_mut().counts.attempted += 1;
                    let dialed = connect::open(&dialer, &script, n, &role).await;
                    drop(permit);
                    if matches!(role, Role::Publisher(_)) {
                        publisher_opened(&mut stats.borrow_mut(), dialed.is_ok());
                    }
                    let Some(d) = record_dial(&stats, &slot, n, dialed) else {
                        return;
                    };
                    match &serving {
                        Some(serving) => behavior::serve(serving, d.ws, n, &d.vars),
                        None => opened.borrow_mut().push((n, d.ws, d.vars)),
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

    /// The measured phase: every worker starts at one instant, after the start line; warm-up
    /// first, then the measured window.
    async fn measure(
        self,
        connected: Connected,
        start_line: &StartLine,
        serving: Option<Rc<Serving>>,
    ) -> WorkerOut {
        let cell = self.cell;
        let start = start_line.cross(cell, &self.counters).await;
        let started = Instant::now();
        let shared = Rc::new(self.state(start.instants(cell)));
        let measure_from = shared.measure_from;
        let mut tasks = tokio::task::JoinSet::new();
        // One measured message for all the connections that captured nothing it uses.
        let common = shared.script.shared_message();
        for (n, ws, vars) in connected.opened {
            let message = shared.script.message_for(&vars, &common);
            let shared = shared.clone();
            let behavior = cell.behavior.clone();
            // Spawned directly, not wrapped in an `async move` block: a wrapper keeps its own copy
            // of the captured stream beside the inner future's (4.4 KB per task instead of 2).
            let fut = behavior::run(ws, n, shared, behavior, message);
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
        let mut measure = self.stats.borrow().clone();
        // Pushes were counted by rule index; the result names them.
        measure.counts.name_pushes(cell.script.push_names());
        WorkerOut {
            measure,
            first_dial: connected.first_dial,
            last_connected: connected.last_connected,
            measured,
            started,
        }
    }
}

/// Counts how a dial went into the worker's figures and live slot: what it took, phase by
/// phase, or why it failed. The connection, if it opened.
fn record_dial(
    stats: &RefCell<Measure>,
    slot: &SlotRef,
    n: u64,
    dialed: Result<Dialed, connect::DialError>,
) -> Option<Dialed> {
    let mut m = stats.borrow_mut();
    match dialed {
        Ok(d) => {
            let total = d.tcp + d.upgrade + d.ready.unwrap_or_default();
            m.counts.connected += 1;
            m.counts.sent_with_warmup += d.greetings_sent;
            if let Some(n) = &d.negotiated {
                m.counts.witness(NEGOTIATED, n);
            }
            m.counts.replies += d.replies;
            m.hists.tcp.record(d.tcp);
            m.hists.upgrade.record(d.upgrade);
            if let Some(r) = d.ready {
                m.hists.ready.record(r);
            }
            m.hists.connect.record(total);
            slot.opened(total);
            Some(d)
        }
        Err(e) => {
            let why = e.why;
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
            None
        }
    }
}
