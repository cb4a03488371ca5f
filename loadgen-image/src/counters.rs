//! The load generator's live counters: one cache-line-aligned slot of atomics per worker
//! thread, so updates never contend, summed when read (a scrape, the bar, a timeline step);
//! and where the running cell is. Execution writes them through a `&Slot`; everything above
//! reads them. The exact figures of a result come from the workers' HDR histograms instead.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wsload_http::AtomicHistogram;
use wsload_http::buckets::{self, Counts};
use wsload_report::measure::{ConnectError, Dropped};

pub const FAIL_REASONS: [ConnectError; 12] = [
    ConnectError::Refused,
    ConnectError::Timeout,
    ConnectError::FileLimit,
    ConnectError::NoPorts,
    ConnectError::UpgradeRejected,
    ConnectError::UpgradeInvalid,
    ConnectError::ClosedEarly,
    ConnectError::AuthFailed,
    ConnectError::Tls,
    ConnectError::ExpectTimeout,
    ConnectError::CaptureMissed,
    ConnectError::Other,
];
pub const DROP_REASONS: [Dropped; 9] = [
    Dropped::ServerClose,
    Dropped::Reset,
    Dropped::Error,
    Dropped::PingTimeout,
    Dropped::ProtocolError,
    Dropped::MessageTooBig,
    Dropped::ServerNotReading,
    Dropped::ReplyLoop,
    Dropped::Disrupted,
];

#[repr(align(128))]
pub struct Slot {
    sent: AtomicU64,
    received: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    opened: AtomicU64,
    failed: [AtomicU64; FAIL_REASONS.len()],
    dropped: [AtomicU64; DROP_REASONS.len()],
    closed: AtomicU64,
    /// Pings (and echoed or paced messages) written that expect an answer.
    expected: AtomicU64,
    lost: AtomicU64,
    rtt: AtomicHistogram,
    connect: AtomicHistogram,
    /// Reconnect attempts begun after a drop, and the connections they opened again.
    reconnect_attempts: AtomicU64,
    reconnected: AtomicU64,
}

impl Slot {
    fn new() -> Self {
        Slot {
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            failed: std::array::from_fn(|_| AtomicU64::new(0)),
            dropped: std::array::from_fn(|_| AtomicU64::new(0)),
            closed: AtomicU64::new(0),
            expected: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            rtt: AtomicHistogram::default(),
            connect: AtomicHistogram::default(),
            reconnect_attempts: AtomicU64::new(0),
            reconnected: AtomicU64::new(0),
        }
    }
    pub fn reconnect_attempt(&self) {
        self.reconnect_attempts.fetch_add(1, Relaxed);
    }
    /// A dropped connection open again (also counted as opened: it is one more open).
    pub fn reconnected(&self, connect: Duration) {
        self.reconnected.fetch_add(1, Relaxed);
        self.opened(connect);
    }
    #[inline]
    pub fn sent(&self, n: u64, bytes: u64) {
        self.sent.fetch_add(n, Relaxed);
        self.bytes_sent.fetch_add(bytes, Relaxed);
    }
    #[inline]
    pub fn received(&self, n: u64, bytes: u64) {
        self.received.fetch_add(n, Relaxed);
        self.bytes_received.fetch_add(bytes, Relaxed);
    }
    pub fn opened(&self, connect: Duration) {
        self.opened.fetch_add(1, Relaxed);
        self.connect.observe(connect);
    }
    pub fn failed(&self, why: ConnectError) {
        if let Some(i) = FAIL_REASONS.iter().position(|r| *r == why) {
            self.failed[i].fetch_add(1, Relaxed);
        }
    }
    pub fn dropped(&self, why: Dropped) {
        if let Some(i) = DROP_REASONS.iter().position(|r| *r == why) {
            self.dropped[i].fetch_add(1, Relaxed);
        }
    }
    pub fn closed(&self) {
        self.closed.fetch_add(1, Relaxed);
    }
    #[inline]
    pub fn expected(&self, n: u64) {
        self.expected.fetch_add(n, Relaxed);
    }
    pub fn lost(&self, n: u64) {
        self.lost.fetch_add(n, Relaxed);
    }
    #[inline]
    pub fn rtt(&self, d: Duration) {
        self.rtt.observe(d);
    }
}

/// One worker's slot, owned: what a connection writes its counts through.
#[derive(Clone)]
pub struct SlotRef {
    counters: Arc<Counters>,
    index: usize,
}

impl std::ops::Deref for SlotRef {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.counters.slots[self.index]
    }
}

/// The running cell's label and the rate its load model asks for, for the gauges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Phase {
    pub cell: String,
    /// Messages per second over the whole test (0: closed loop).
    pub target_rate: f64,
}

/// Every worker's slot, and the course of the run.
pub struct Counters {
    slots: Box<[Slot]>,
    phase: Mutex<Phase>,
    /// Where the running cell is, and the counters when it began.
    course: Mutex<(Course, Snapshot)>,
    /// Wakes whoever waits for the course to change (a cell's measured phase got its start).
    course_changed: tokio::sync::Notify,
}

impl Counters {
    pub fn new(workers: usize) -> Counters {
        Counters {
            slots: (0..workers.max(1)).map(|_| Slot::new()).collect(),
            phase: Mutex::new(Phase::default()),
            course: Mutex::new((Course::default(), Snapshot::default())),
            course_changed: tokio::sync::Notify::new(),
        }
    }

    pub fn slot(&self, worker: usize) -> &Slot {
        &self.slots[worker % self.slots.len()]
    }

    /// Worker `worker`'s slot, to keep: all a connection sees of the counters.
    pub fn slot_ref(self: &Arc<Self>, worker: usize) -> SlotRef {
        SlotRef {
            counters: self.clone(),
            index: worker % self.slots.len(),
        }
    }

    pub fn set_phase(&self, cell: &str, target_rate: f64) {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = Phase {
            cell: cell.to_string(),
            target_rate,
        };
    }

    pub fn phase(&self) -> Phase {
        self.phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn sum(&self, f: impl Fn(&Slot) -> u64) -> u64 {
        self.slots.iter().map(f).sum()
    }

    /// The counters summed now.
    pub fn snapshot(&self) -> Snapshot {
        let mut rtt = buckets::EMPTY;
        for s in self.slots.iter() {
            s.rtt.add_counts_to(&mut rtt);
        }
        Snapshot {
            opened: self.sum(|s| s.opened.load(Relaxed)),
            closed: self.sum(|s| s.closed.load(Relaxed)),
            failed: self.sum(|s| s.failed.iter().map(|f| f.load(Relaxed)).sum()),
            sent: self.sum(|s| s.sent.load(Relaxed)),
            received: self.sum(|s| s.received.load(Relaxed)),
            bytes_sent: self.sum(|s| s.bytes_sent.load(Relaxed)),
            bytes_received: self.sum(|s| s.bytes_received.load(Relaxed)),
            expected: self.sum(|s| s.expected.load(Relaxed)),
            lost: self.sum(|s| s.lost.load(Relaxed)),
            rtt,
        }
    }

    /// Reconnect attempts begun, and the connections they opened again.
    pub fn reconnects(&self) -> (u64, u64) {
        (
            self.sum(|s| s.reconnect_attempts.load(Relaxed)),
            self.sum(|s| s.reconnected.load(Relaxed)),
        )
    }

    /// Failed connection attempts by reason, in [`FAIL_REASONS`]' order.
    pub fn failed_by_reason(&self) -> [u64; FAIL_REASONS.len()] {
        std::array::from_fn(|i| self.sum(|s| s.failed[i].load(Relaxed)))
    }

    /// Connections the server or the network ended, by reason, in [`DROP_REASONS`]' order.
    pub fn dropped_by_reason(&self) -> [u64; DROP_REASONS.len()] {
        std::array::from_fn(|i| self.sum(|s| s.dropped[i].load(Relaxed)))
    }

    /// Every slot's round-trip histogram, for an exposition that sums them.
    pub fn rtt_histograms(&self) -> Vec<&AtomicHistogram> {
        self.slots.iter().map(|s| &s.rtt).collect()
    }

    /// Every slot's connect-time histogram.
    pub fn connect_histograms(&self) -> Vec<&AtomicHistogram> {
        self.slots.iter().map(|s| &s.connect).collect()
    }

    fn course_mut<R>(&self, f: impl FnOnce(&mut (Course, Snapshot)) -> R) -> R {
        f(&mut self.course.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The `index`-th cell of the run begins: `connections` over the whole test.
    pub fn begin_cell(&self, index: usize, label: &str, connections: u32) {
        let base = self.snapshot();
        self.course_mut(|c| {
            *c = (
                Course {
                    cell: Some(Place {
                        index,
                        label: label.to_string(),
                        connections,
                    }),
                    begun: Some(Instant::now()),
                    ..Course::default()
                },
                base,
            )
        });
    }

    /// The running cell's connections are open: its warm-up begins at `at`, its measured
    /// phase `warmup` later.
    pub fn measuring(&self, at: Instant, warmup: Duration) {
        self.course_mut(|c| {
            c.0.measuring = Some(at);
            c.0.measured_from = Some(at + warmup);
        });
        self.course_changed.notify_one();
    }

    /// The running cell's connections are done.
    pub fn end_cell(&self) {
        self.course_mut(|c| c.0.ended = true);
    }

    /// Where the running cell is.
    pub fn course(&self) -> Course {
        self.course_mut(|c| c.0.clone())
    }

    /// The counters when the running cell began.
    pub fn course_base(&self) -> Snapshot {
        self.course_mut(|c| c.1)
    }

    /// Resolves when the course changed since the last call (a measured phase got its start).
    pub async fn course_changed(&self) {
        self.course_changed.notified().await;
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters")
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

/// Where the running cell is, set by the thread that runs it (a few times per cell).
#[derive(Debug, Clone, Default)]
pub struct Course {
    /// Which cell runs; `None` before the first.
    pub cell: Option<Place>,
    pub begun: Option<Instant>,
    /// When its warm-up (then the measured window) began; `None` while connecting.
    pub measuring: Option<Instant>,
    /// When its measured window begins (after the warm-up), once it is known.
    pub measured_from: Option<Instant>,
    /// Its connections are done: the gate settles and judges it.
    pub ended: bool,
}

/// A cell's place in the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Its index among the run's cells.
    pub index: usize,
    pub label: String,
    /// Its connections over the whole test (every shard).
    pub connections: u32,
}

/// The live counters summed over the workers at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    pub opened: u64,
    pub closed: u64,
    pub failed: u64,
    pub sent: u64,
    pub received: u64,
    /// Payload bytes written and read.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Pings (and echoed or paced messages) sent that expect an answer.
    pub expected: u64,
    pub lost: u64,
    /// Round trips by latency bucket: their sum is the answers.
    pub rtt: Counts,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            opened: 0,
            closed: 0,
            failed: 0,
            sent: 0,
            received: 0,
            bytes_sent: 0,
            bytes_received: 0,
            expected: 0,
            lost: 0,
            rtt: buckets::EMPTY,
        }
    }
}

impl Snapshot {
    pub fn answered(&self) -> u64 {
        self.rtt.iter().sum()
    }
}
