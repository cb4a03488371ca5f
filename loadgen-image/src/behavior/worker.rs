//! What the connections of one worker share in the measured phase: its clock, its figures
//! (recorded per worker, no lock, merged once at the cell's end), its live slot and its
//! scratch space; and the few conversions every behavior uses.

use crate::conversation::{Prebuilt, Script};
use crate::counters::SlotRef;
use crate::machine::clock::CellClock;
use crate::model::Cell;
use crate::model::comeback::Comeback;
use bytes::BytesMut;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::measure::{Dropped, FrameKind, Measure, NumberField, UNWRITTEN};
use wsload_spec::json_path::Memo;

/// What the connections of one worker share in the measured phase: its clock, its statistics,
/// its live slot and its scratch space. (A fanout's connections are served with one before
/// it too, its instants out of reach: see [`Instants::before_start`].)
pub struct WorkerState {
    /// When the phase (warm-up included) started: the origin of schedules.
    pub start: Instant,
    /// The cell's start and this shard's offset on the conductor's clock, and `start` read
    /// on it (Unix microseconds): what a fanout stamps and compares across shards.
    pub cell_clock: CellClock,
    pub start_on_conductor_us: u64,
    /// Connections of this process in the cell (phase offsets of schedules).
    pub connections: u32,
    pub measure_from: Instant,
    pub deadline: Instant,
    /// How long writes may make no progress before the connection ends as
    /// `server_not_reading`.
    pub write_timeout: Duration,
    /// Whether the cell ends at `deadline` (else after its pings): what a timed cell reads
    /// after its deadline is not credited to it.
    pub timed: bool,
    /// The conversation, as the cell holds it (`Script::for_cell`): replies, pushes, the
    /// heartbeat, the message sent and how its answer is recognised.
    pub script: Arc<Script>,
    /// The cell's message size: what the measured message's `${pad}` fills to.
    pub size: usize,
    pub stats: Rc<RefCell<Measure>>,
    pub discard: Rc<RefCell<Measure>>,
    /// The worker's live counters.
    pub slot: SlotRef,
    /// What the worker's connections take turns with (their read and write buffers are the
    /// worker thread's too: wsload-ws's `Spare`).
    pub scratch: Scratch,
    /// How the cell's held connections come back when dropped (`None`: neither reconnects
    /// nor disrupts).
    pub comeback: Option<Arc<Comeback>>,
    /// The slowest answer to a ping the worker's connections have had in this phase: what a
    /// ping sent near the deadline must expect to wait (`pinger::may_send`).
    pub slowest_ping: std::cell::Cell<Duration>,
}

/// A worker's shared message arena. Borrowed only inside a poll, never across an await.
#[derive(Default)]
pub struct Scratch {
    /// Messages with an id (pings, paced messages) are cut from it: a message is copied into
    /// the write buffer and dropped at once, so the block is free again by the next one and
    /// no message allocates, while no connection keeps a block of its own (1 KiB each at
    /// 64 B messages, most of a paced connection's memory when idle).
    pub(super) arena: RefCell<BytesMut>,
    /// Where a connection peeks at what it left unread at its deadline (see `end::unread`).
    pub(super) peek: RefCell<Vec<u8>>,
    /// Where the measured message's id was in the last answer a counting read took.
    pub(super) memo: RefCell<Memo>,
    /// Where a counting loop makes the conversation's measured message before queueing it.
    pub(super) render: RefCell<Prebuilt>,
}

/// The instants a worker's connections measure by.
#[derive(Debug, Clone, Copy)]
pub struct Instants {
    pub start: Instant,
    pub cell_clock: CellClock,
    pub start_on_conductor_us: u64,
    pub measure_from: Instant,
    pub deadline: Instant,
}

/// How far in the future the instants of the state before the start lie: beyond any cell.
const BEYOND_ANY_CELL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl Instants {
    /// Before the measured phase, while a cell's connections open (a fanout's and a hold's
    /// are served meanwhile): every instant beyond any cell, so that nothing read then counts
    /// as measured (what it bins as of the measured phase goes to the discard bin).
    pub fn before_start() -> Instants {
        let never = Instant::now() + BEYOND_ANY_CELL;
        Instants {
            start: never,
            cell_clock: CellClock::default(),
            start_on_conductor_us: 0,
            measure_from: never,
            deadline: never,
        }
    }
}

impl WorkerState {
    /// The state of a worker's connections in `cell`, at `instants`, recording into `stats`
    /// and `slot`.
    pub fn new(
        cell: &Cell,
        instants: Instants,
        stats: Rc<RefCell<Measure>>,
        slot: SlotRef,
    ) -> Self {
        WorkerState {
            start: instants.start,
            cell_clock: instants.cell_clock,
            start_on_conductor_us: instants.start_on_conductor_us,
            connections: cell.connections,
            measure_from: instants.measure_from,
            deadline: instants.deadline,
            write_timeout: cell.write_timeout,
            timed: cell.behavior.is_timed(),
            script: cell.script.clone(),
            size: cell.size,
            stats,
            discard: Rc::new(RefCell::new(Measure::default())),
            slot,
            scratch: Scratch::default(),
            comeback: cell.comeback.clone(),
            slowest_ping: std::cell::Cell::new(Duration::ZERO),
        }
    }

    /// Where a figure observed at `now` goes: warm-up figures are discarded.
    /// Where what happened at `now` (a send, or an answer credited to its send) counts: the
    /// measured window, or nowhere it counts (warm-up; past a timed cell's deadline, where a
    /// message sent at the deadline would otherwise count as sent while its answer, credited
    /// to the same instant, did not, and neither as lost).
    fn bin(&self, now: Instant) -> &RefCell<Measure> {
        if now >= self.measure_from && !(self.timed && now >= self.deadline) {
            &self.stats
        } else {
            &self.discard
        }
    }
    pub(super) fn sent(&self, now: Instant, n: u64, bytes: u64) {
        {
            let mut m = self.bin(now).borrow_mut();
            m.counts.sent += n;
            m.counts.bytes_sent += bytes;
        }
        self.stats.borrow_mut().counts.sent_with_warmup += n;
        self.slot.sent(n, bytes);
    }

    /// Answers received, credited to `at`: when what they answer was sent, or when a
    /// counting read took them.
    pub(super) fn received(&self, at: Instant, n: u64, bytes: u64) {
        let mut m = self.bin(at).borrow_mut();
        m.counts.received += n;
        m.counts.bytes_received += bytes;
        self.slot.received(n, bytes);
    }
    /// Frames that answered nothing sent.
    pub(super) fn unsolicited(&self, now: Instant, kind: FrameKind, frames: u64, bytes: u64) {
        if frames > 0 {
            self.bin(now)
                .borrow_mut()
                .counts
                .unsolicited(kind, frames, bytes);
        }
    }
    /// Server messages that matched the conversation's push rule `rule` (by index).
    pub(super) fn pushed(&self, now: Instant, rule: usize, frames: u64, bytes: u64) {
        if frames > 0 {
            self.bin(now)
                .borrow_mut()
                .counts
                .pushed(rule, frames, bytes);
        }
    }
    /// A server message whose number in `field` could not be read: counted over the whole
    /// cell (as the fan-out's tallies are), the first one described by `example()`.
    pub(super) fn unreadable(&self, field: NumberField, example: impl FnOnce() -> String) {
        self.stats.borrow_mut().counts.unreadable(field, example);
    }
    pub(super) fn replied(&self, n: u64) {
        self.stats.borrow_mut().counts.replies += n;
    }
    pub(super) fn mismatched(&self, now: Instant) {
        self.copies(now, 1);
    }
    /// Answers that answer nothing outstanding: copies of answers counted before, or answers
    /// to messages already given up on (counted as `mismatched`, never as answers).
    pub(super) fn copies(&self, now: Instant, n: u64) {
        if n > 0 {
            self.bin(now).borrow_mut().counts.mismatched += n;
        }
    }
    pub(super) fn rtt(&self, now: Instant, corrected: Duration, raw: Duration) {
        let mut m = self.bin(now).borrow_mut();
        m.hists.rtt.record(corrected);
        m.hists.rtt_raw.record(raw);
        self.slot.rtt(corrected);
    }
    pub(super) fn expected(&self, now: Instant, n: u64) {
        self.bin(now).borrow_mut().counts.expected += n;
        self.slot.expected(n);
    }
    pub(super) fn lost(&self, now: Instant, n: u64) {
        if n > 0 {
            self.bin(now).borrow_mut().counts.lost += n;
            self.slot.lost(n);
        }
    }
    pub(super) fn close_code(&self, code: u16) {
        *self
            .stats
            .borrow_mut()
            .counts
            .close_codes
            .entry(code.to_string())
            .or_default() += 1;
    }
    pub(super) fn dropped(&self, why: Dropped) {
        self.stats.borrow_mut().counts.drop(why);
        self.slot.dropped(why);
    }
    /// Counts how long a connection that ended for `why` had been in its measured phase
    /// (warm-up included: a heartbeat's timeout runs from the open, not from the window).
    pub(super) fn lived(&self, why: Dropped, began: u32) {
        let ms = ms_since(self.start).saturating_sub(began);
        self.stats.borrow_mut().counts.lived(why, u64::from(ms));
    }
    /// Keeps `text()` as the evidence of `why` unless the worker has one already: described
    /// once per reason, on the failure path only.
    /// A connection whose write still waited at the deadline with `bytes` queued: counted
    /// over the whole cell (as `behind` is), the first one's queues as the evidence.
    pub(super) fn unwritten(&self, bytes: usize, evidence: impl FnOnce() -> String) {
        let mut m = self.stats.borrow_mut();
        m.counts.unwritten += 1;
        m.counts.unwritten_bytes += bytes as u64;
        if !m.counts.has_evidence(UNWRITTEN) {
            m.counts.witness(UNWRITTEN, &evidence());
        }
    }
    pub(super) fn witness(&self, why: Dropped, text: impl FnOnce() -> String) {
        let mut m = self.stats.borrow_mut();
        if !m.counts.has_evidence(why.label()) {
            m.counts.witness(why.label(), &text());
        }
    }
}

/// Milliseconds since `origin`, saturating (49 days).
pub(super) fn ms_since(origin: Instant) -> u32 {
    u32::try_from(origin.elapsed().as_millis()).unwrap_or(u32::MAX)
}

/// A data frame's kind (text or binary) and payload; `None` for a control frame.
pub(super) fn data_of(msg: &Message) -> Option<(bool, &[u8])> {
    match msg {
        Message::Text(t) => Some((true, t.as_bytes())),
        Message::Binary(b) => Some((false, &b[..])),
        _ => None,
    }
}

pub(super) fn data_len(msg: &Message) -> Option<u64> {
    match msg {
        Message::Text(t) => Some(t.len() as u64),
        Message::Binary(b) => Some(b.len() as u64),
        _ => None,
    }
}
