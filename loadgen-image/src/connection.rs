//! What one connection does in the measured phase, per behavior.
//!
//! Every behavior owns its stream (no `split`, which locks per poll), writes with `feed` and one
//! `flush` per burst unless per-message flushing is asked for, and records into its worker's
//! statistics (or into a discard bin during warm-up).

use crate::answer::{self, Answer, Asked};
use crate::counters::SlotRef;
use crate::dial::Ws;
use crate::measure::{Dropped, FrameKind, FrameTally, Measure, UNSOLICITED};
use crate::model::{Behavior, PingCfg};
use crate::schedule::Schedule;
use crate::script::{Fill, Incoming, Out, Recognised, Script, SendTime};
use crate::stall::{self, Stall};
use bytes::BytesMut;
use futures_util::{FutureExt, SinkExt, StreamExt};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use wsload_spec::PingKind;
use wsload_ws::{Recv, failure_code};

/// What the connections of one worker share in the measured phase: its clock, its statistics,
/// its live slot and its scratch space. (A fanout's connections are served with one before
/// it too, its instants out of reach: see `fanout::Serving`.)
pub struct WorkerState {
    /// When the phase (warm-up included) started: the origin of schedules.
    pub start: Instant,
    /// The cell's start and this shard's offset on the conductor's clock, and `start` read
    /// on it (Unix microseconds): what a fanout stamps and compares across shards.
    pub cell_clock: crate::clock::CellClock,
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
}

/// A worker's shared message arena. Borrowed only inside a poll, never across an await.
#[derive(Default)]
pub struct Scratch {
    /// Messages with an id (pings, paced messages) are cut from it: a message is copied into
    /// the write buffer and dropped at once, so the block is free again by the next one and
    /// no message allocates, while no connection keeps a block of its own (1 KiB each at
    /// 64 B messages, most of a paced connection's memory when idle).
    pub(crate) arena: RefCell<BytesMut>,
    /// Where a connection peeks at what it left unread at its deadline (see `unread`).
    peek: RefCell<Vec<u8>>,
    /// Where the measured message's id was in the last answer a counting read took.
    memo: RefCell<wsload_spec::json_path::Memo>,
    /// Where a counting loop makes the conversation's measured message before queueing it.
    render: RefCell<crate::script::Prebuilt>,
}

impl WorkerState {
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
    pub(crate) fn sent(&self, now: Instant, n: u64, bytes: u64) {
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
    fn received(&self, at: Instant, n: u64, bytes: u64) {
        let mut m = self.bin(at).borrow_mut();
        m.counts.received += n;
        m.counts.bytes_received += bytes;
        self.slot.received(n, bytes);
    }
    /// Frames that answered nothing sent.
    fn unsolicited(&self, now: Instant, kind: FrameKind, frames: u64, bytes: u64) {
        if frames > 0 {
            self.bin(now)
                .borrow_mut()
                .counts
                .unsolicited(kind, frames, bytes);
        }
    }
    /// Server messages that matched the conversation's `push`.
    fn pushed(&self, now: Instant, frames: u64, bytes: u64) {
        if frames > 0 {
            let mut m = self.bin(now).borrow_mut();
            m.counts.pushes.frames += frames;
            m.counts.pushes.bytes += bytes;
        }
    }
    fn replied(&self, n: u64) {
        self.stats.borrow_mut().counts.replies += n;
    }
    fn mismatched(&self, now: Instant) {
        self.bin(now).borrow_mut().counts.mismatched += 1;
    }
    fn rtt(&self, now: Instant, corrected: Duration, raw: Duration) {
        let mut m = self.bin(now).borrow_mut();
        m.hists.rtt.record(corrected);
        m.hists.rtt_raw.record(raw);
        self.slot.rtt(corrected);
    }
    fn expected(&self, now: Instant, n: u64) {
        self.bin(now).borrow_mut().counts.expected += n;
        self.slot.expected(n);
    }
    fn lost(&self, now: Instant, n: u64) {
        if n > 0 {
            self.bin(now).borrow_mut().counts.lost += n;
            self.slot.lost(n);
        }
    }
    fn close_code(&self, code: u16) {
        *self
            .stats
            .borrow_mut()
            .counts
            .close_codes
            .entry(code.to_string())
            .or_default() += 1;
    }
    fn dropped(&self, why: Dropped) {
        self.stats.borrow_mut().counts.drop(why);
        self.slot.dropped(why);
    }
    /// Counts how long a connection that ended for `why` had been in its measured phase
    /// (warm-up included: a heartbeat's timeout runs from the open, not from the window).
    fn lived(&self, why: Dropped, began: u32) {
        let ms = ms_since(self.start).saturating_sub(began);
        self.stats.borrow_mut().counts.lived(why, u64::from(ms));
    }
    /// Keeps `text()` as the evidence of `why` unless the worker has one already: described
    /// once per reason, on the failure path only.
    fn witness(&self, why: Dropped, text: impl FnOnce() -> String) {
        let mut m = self.stats.borrow_mut();
        if !m.counts.has_evidence(why.label()) {
            m.counts.witness(why.label(), &text());
        }
    }
}

/// Milliseconds since `origin`, saturating (49 days).
pub(crate) fn ms_since(origin: Instant) -> u32 {
    u32::try_from(origin.elapsed().as_millis()).unwrap_or(u32::MAX)
}

pub(crate) fn data_len(msg: &Message) -> Option<u64> {
    match msg {
        Message::Text(t) => Some(t.len() as u64),
        Message::Binary(b) => Some(b.len() as u64),
        _ => None,
    }
}

/// Why a read's error ended the connection; the error is the reason's evidence.
fn drop_of(ctx: &WorkerState, err: &WsError) -> Dropped {
    let why = classify(err);
    ctx.witness(why, || match (failure_code(err), err) {
        (Some(code), _) => format!("{err} (close {code} sent)"),
        (None, WsError::WriteBufferFull(_)) => PENDING_WRITE_EVIDENCE.to_string(),
        (None, _) => err.to_string(),
    });
    why
}

/// What a connection whose replies passed `connect.limits.maxPendingWriteBytes` shows.
const PENDING_WRITE_EVIDENCE: &str = "replies (pongs, automatic replies) waiting to be written passed connect.limits.maxPendingWriteBytes: the server sends and reads nothing";

/// A violation by the server is a reason of its own, by the close code it was answered with
/// (1009 for the frame or message limit; 1002 and 1007 for the rules of RFC 6455); the stream
/// ending without a close frame is a reset. Replies piling up past the pending-write limit
/// are the server not reading.
fn classify(err: &WsError) -> Dropped {
    match (err, failure_code(err)) {
        (_, Some(1009)) => Dropped::MessageTooBig,
        (WsError::WriteBufferFull(_), _) => Dropped::ServerNotReading,
        (_, Some(_)) => Dropped::ProtocolError,
        (WsError::ConnectionClosed | WsError::AlreadyClosed, _) => Dropped::ServerClose,
        (WsError::Protocol(_), _) => Dropped::Reset,
        (WsError::Io(e), _)
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            Dropped::Reset
        }
        _ => Dropped::Error,
    }
}

/// The close code a close frame without a status stands for (RFC 6455 7.1.5): never sent
/// on the wire, so a report can name it without confusion.
const NO_STATUS: u16 = 1005;

/// What one read gave: a close frame's code is kept, and a close or an error ends the
/// connection. Data frames are counted once recognised (`settle`, `poll_answer`).
fn account(
    ctx: &WorkerState,
    polled: Option<Result<Message, WsError>>,
) -> Result<Message, Dropped> {
    match polled {
        None => Err(Dropped::Reset),
        Some(Err(e)) => Err(drop_of(ctx, &e)),
        Some(Ok(Message::Close(frame))) => {
            let code = frame.as_ref().map_or(NO_STATUS, |f| u16::from(f.code));
            ctx.close_code(code);
            ctx.witness(Dropped::ServerClose, || match &frame {
                Some(f) if !f.reason.is_empty() => format!("close {code} {:?}", f.reason.as_str()),
                Some(_) => format!("close {code}"),
                None => format!("a close frame without a status code ({NO_STATUS})"),
            });
            Err(Dropped::ServerClose)
        }
        Some(Ok(msg)) => Ok(msg),
    }
}

/// Reads one frame; data frames are counted. `Err` ends the connection.
pub(crate) async fn read(ws: &mut Ws, ctx: &WorkerState) -> Result<Message, Dropped> {
    account(ctx, ws.next().await)
}

/// The message read now if one is already buffered; `None` if none is.
pub(crate) fn read_ready(ws: &mut Ws, ctx: &WorkerState) -> Option<Result<Message, Dropped>> {
    // Same accounting as `read`: a close seen here keeps its code too.
    Some(account(ctx, ws.next().now_or_never()?))
}

/// The conversation's part in a read: a message a reply rule answers is answered (queued;
/// the next read pushes it out without waiting) and one that matches `push` is counted.
/// `true` when it was either: then it is neither an answer nor unsolicited.
pub(crate) fn converse(ws: &mut Ws, ctx: &WorkerState, conn: u64, msg: &Message) -> bool {
    let script = &*ctx.script;
    let (text, data) = match msg {
        Message::Text(t) => (true, t.as_bytes()),
        Message::Binary(b) => (false, &b[..]),
        _ => return false,
    };
    match script.incoming(text, data) {
        Incoming::Reply(i) => {
            let fill = Fill {
                conn,
                seq: 0,
                size: ctx.size,
            };
            let answer = script.reply(i, &mut ctx.scratch.arena.borrow_mut(), &fill);
            if let Some((text, answer)) = answer {
                ws.queue_reply(text, &answer);
                ctx.replied(1);
            }
            true
        }
        Incoming::Push => {
            ctx.pushed(Instant::now(), 1, data.len() as u64);
            true
        }
        Incoming::Other => false,
    }
}

/// Builds pings and recognizes their answers (see `answer`).
struct Pinger {
    cfg: PingCfg,
    /// The last id sent: ids only grow, so an id above it was never sent.
    seq: u64,
    /// The conversation's message, as this connection sends it: app pings are made from it.
    message: Arc<Out>,
    /// The connection's number (`${conn}`).
    conn: u64,
}

impl Pinger {
    fn new(cfg: PingCfg, message: Arc<Out>, conn: u64) -> Self {
        Pinger {
            cfg,
            seq: 0,
            message,
            conn,
        }
    }

    /// Whether anything answers its pings: a WebSocket ping's pong always does; a message
    /// without an answer rule is only sent.
    fn awaits(&self, ctx: &WorkerState) -> bool {
        self.cfg.kind == PingKind::Frame || ctx.script.is_answered()
    }

    /// The next ping and its id.
    fn next(&mut self, ctx: &WorkerState) -> (Message, u64) {
        self.seq += 1;
        let msg = match self.cfg.kind {
            PingKind::Frame => {
                Message::Ping(bytes::Bytes::copy_from_slice(&self.seq.to_le_bytes()))
            }
            PingKind::App => {
                let fill = Fill {
                    conn: self.conn,
                    seq: self.seq,
                    size: ctx.size,
                };
                self.message
                    .message(&mut ctx.scratch.arena.borrow_mut(), &fill)
            }
        };
        (msg, self.seq)
    }

    fn asked<'a>(&self, ctx: &'a WorkerState) -> Asked<'a> {
        match self.cfg.kind {
            PingKind::Frame => Asked::FramePing,
            PingKind::App => Asked::Script(&ctx.script),
        }
    }

    /// What `msg` is to the pings sent: an id never sent answers nothing.
    fn answer(&self, msg: &Message, ctx: &WorkerState) -> Answer {
        match answer::answer(self.asked(ctx), msg) {
            Answer::To(id) if id == 0 || id > self.seq => answer::unsolicited(msg),
            other => other,
        }
    }
}

/// Counts a frame that answered nothing sent in the measured phase as unsolicited, by kind
/// and payload bytes.
pub(crate) fn count_unsolicited(ctx: &WorkerState, now: Instant, kind: FrameKind, msg: &Message) {
    let bytes = match msg {
        Message::Text(t) => t.len(),
        Message::Binary(b) | Message::Pong(b) => b.len(),
        _ => 0,
    } as u64;
    ctx.unsolicited(now, kind, 1, bytes);
    // The first one kept: a server message nobody answered (a heartbeat) explains a server's
    // close later; described once per worker, not per frame.
    let mut m = ctx.stats.borrow_mut();
    if kind != FrameKind::Pong && !m.counts.has_evidence(UNSOLICITED) {
        let text = match msg {
            Message::Text(t) => format!("{:?}", t.as_str()),
            other => format!("{} binary bytes", other.len()),
        };
        m.counts.witness(UNSOLICITED, &text);
    }
}

/// What a failed write ends the connection with.
fn write_drop(e: WsError) -> Dropped {
    if matches!(e, WsError::Io(_)) {
        Dropped::Reset
    } else {
        Dropped::Error
    }
}

/// A write step is waiting on the socket: still `Pending` while the server may read, and
/// `server_not_reading` (with the socket's state as evidence) once nothing was written for
/// `writeTimeout`.
fn stalled(
    ws: &mut Ws,
    ctx: &WorkerState,
    stall: &mut Stall,
    cx: &mut std::task::Context<'_>,
) -> Poll<Result<(), Dropped>> {
    std::task::ready!(stall.poll_stalled(ws, ctx.write_timeout, cx));
    ctx.witness(Dropped::ServerNotReading, || {
        stall::evidence(ws, ctx.write_timeout)
    });
    Poll::Ready(Err(Dropped::ServerNotReading))
}

/// `step` once: its error ends the connection, and a wait is watched by `stall`.
fn watched(
    step: Poll<Result<(), WsError>>,
    ws: &mut Ws,
    ctx: &WorkerState,
    stall: &mut Stall,
    cx: &mut std::task::Context<'_>,
) -> Poll<Result<(), Dropped>> {
    match step {
        Poll::Ready(r) => Poll::Ready(r.map_err(write_drop)),
        Poll::Pending => stalled(ws, ctx, stall, cx),
    }
}

/// Queues `msg` and, if `flush`, writes it out (`SinkExt::send`, or `feed`). By hand: the
/// combinators' futures hold the message twice, and this one is part of every held
/// connection's state (its pings). Not watched for a stall: a ping is small, and a server
/// that reads nothing leaves it unanswered (lost) long before its socket is full.
fn write(
    ws: &mut Ws,
    msg: Message,
    flush: bool,
) -> impl std::future::Future<Output = Result<(), Dropped>> + '_ {
    let mut msg = Some(msg);
    std::future::poll_fn(move |cx| {
        if msg.is_some() {
            std::task::ready!(ws.poll_ready_unpin(cx)).map_err(write_drop)?;
            if let Some(m) = msg.take() {
                ws.start_send_unpin(m).map_err(write_drop)?;
            }
        }
        if flush {
            std::task::ready!(ws.poll_flush_unpin(cx)).map_err(write_drop)?;
        }
        Poll::Ready(Ok(()))
    })
}

/// Queues `msg` (`feed`), writing first if enough is queued; a wait is watched for a stall.
async fn feed(ws: &mut Ws, ctx: &WorkerState, msg: Message) -> Result<(), Dropped> {
    let mut msg = Some(msg);
    let mut stall = Stall::default();
    std::future::poll_fn(|cx| {
        let step = ws.poll_ready_unpin(cx);
        std::task::ready!(watched(step, ws, ctx, &mut stall, cx))?;
        if let Some(m) = msg.take() {
            ws.start_send_unpin(m).map_err(write_drop)?;
        }
        Poll::Ready(Ok(()))
    })
    .await
}

/// Writes out what is queued; a failed write is a reset.
async fn flush(ws: &mut Ws, ctx: &WorkerState) -> Result<(), Dropped> {
    let mut stall = Stall::default();
    std::future::poll_fn(|cx| {
        let step = ws.poll_flush_unpin(cx);
        watched(step, ws, ctx, &mut stall, cx).map_err(|why| match why {
            Dropped::ServerNotReading => why,
            _ => Dropped::Reset,
        })
    })
    .await
}

/// Writes `msg` (if any) and flushes (if `flush`), reading whenever the write has to wait;
/// every message read is counted and handed to `on_read`.
///
/// A server that answers (an echo server) stops reading us once its answers fill the socket
/// towards us; a sender that does not read while its own write waits then waits forever
/// (seen with 64 KiB messages at a few thousand per second, or a 64-message window of
/// 256 KiB ones). Reading while waiting lets both sides move.
pub(crate) async fn write_reading(
    ws: &mut Ws,
    ctx: &WorkerState,
    msg: Option<Message>,
    flush: bool,
    on_read: &mut dyn FnMut(&mut Ws, &Message),
) -> Result<(), Dropped> {
    let mut msg = msg;
    let mut stall = Stall::default();
    std::future::poll_fn(|cx| {
        loop {
            let step = if msg.is_some() {
                ws.poll_ready_unpin(cx)
            } else if flush {
                ws.poll_flush_unpin(cx)
            } else {
                return Poll::Ready(Ok(()));
            };
            match step {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(write_drop(e))),
                Poll::Ready(Ok(())) => match msg.take() {
                    Some(m) => {
                        if let Err(e) = ws.start_send_unpin(m) {
                            return Poll::Ready(Err(write_drop(e)));
                        }
                    }
                    None => return Poll::Ready(Ok(())),
                },
                Poll::Pending => match ws.poll_next_unpin(cx) {
                    Poll::Ready(item) => match account(ctx, item) {
                        Ok(m) => on_read(ws, &m),
                        Err(why) => return Poll::Ready(Err(why)),
                    },
                    Poll::Pending => return stalled(ws, ctx, &mut stall, cx),
                },
            }
        }
    })
    .await
}

/// The connection's measured phase and its close. A plain fn returning an `async move` block
/// rather than an `async fn`: an async fn stores its arguments and the locals they move into
/// separately (rust-lang/rust#62958), doubling the 1.4 KB stream in every task.
#[allow(clippy::manual_async_fn)] // deliberately not an async fn: see above
pub fn run(
    mut ws: Ws,
    n: u64,
    ctx: Rc<WorkerState>,
    behavior: Behavior,
    message: Arc<Out>,
) -> impl std::future::Future<Output = ()> {
    async move {
        let ctx = &*ctx;
        // Milliseconds from the phase's start, not an `Instant`: 4 bytes in every held
        // connection's task instead of 16.
        let began = ms_since(ctx.start);
        // Boxed: a task's future would otherwise be as large as the largest behavior's state
        // machine, for every one of 100K connections. Except the hold's, the behavior that
        // idles at scale: small (see `hold`), inline it spares every held connection an
        // allocation, for ~330 bytes more in the other behaviors' tasks.
        // `Ok`: healthy at the deadline (or its work done), so we close it; `Err`: the server or
        // the network dropped it, and why.
        let ended = match &behavior {
            Behavior::Close => Ok(()),
            Behavior::Hold { every, ping } => {
                hold(&mut ws, ctx, *every, Pinger::new(*ping, message, n)).await
            }
            Behavior::Ping {
                count,
                interval,
                ping,
            } => {
                let pinger = Pinger::new(*ping, message, n);
                Box::pin(pings(&mut ws, ctx, *count, *interval, pinger)).await
            }
            Behavior::Saturate {
                window,
                per_message_flush,
            } => {
                let out = Sender::new(message, n);
                Box::pin(saturate(&mut ws, ctx, *window, *per_message_flush, out)).await
            }
            Behavior::Blast { per_message_flush } => {
                let out = Sender::new(message, n);
                Box::pin(blast(&mut ws, ctx, *per_message_flush, out)).await
            }
            Behavior::PingPong { ping } => {
                let pinger = Pinger::new(*ping, message, n);
                Box::pin(pingpong(&mut ws, ctx, pinger)).await
            }
            Behavior::Paced {
                schedule,
                ping,
                per_message_flush,
            } => {
                let pinger = Pinger::new(*ping, message, n);
                Box::pin(paced(&mut ws, ctx, n, schedule, pinger, *per_message_flush)).await
            }
            // A fanout's connections run `fanout::task` (`fanout::Serving` spawns it at their
            // open), never this.
            Behavior::Fanout(_) => unreachable!("a fanout connection runs fanout::task"),
        };
        Box::pin(finish(&mut ws, ctx, &behavior, ended, began)).await;
    }
}

/// Ends the connection (a goodbye, or a failed connection's linger) and counts how it ended.
/// Boxed by its callers: one await for both, as a second suspension point would grow every
/// held connection's task.
pub(crate) async fn finish(
    ws: &mut Ws,
    ctx: &WorkerState,
    behavior: &Behavior,
    ended: Result<(), Dropped>,
    began: u32,
) {
    let goodbye = end(ws, ctx, behavior, ended).await;
    concluded(ctx, behavior, ended, goodbye, began);
}

/// Counts how a connection ended: survived, or dropped and why (`ended`, then its `goodbye`).
fn concluded(
    ctx: &WorkerState,
    behavior: &Behavior,
    ended: Result<(), Dropped>,
    goodbye: Goodbye,
    began: u32,
) {
    {
        match (ended, goodbye) {
            (Ok(()), goodbye) => match (behavior, goodbye) {
                // A storm connection is never read before this goodbye, so a server that took the
                // upgrade and then refused the connection (over `--max-connections` the reference
                // server closes with 1013 at once) is only seen now: the first close frame is the
                // server's own. Counting it as survived would report a refused connection as held.
                (Behavior::Close, Goodbye::ServerClosed(code)) => {
                    ctx.close_code(code);
                    ctx.dropped(Dropped::ServerClose);
                }
                // The stream ended or failed with no close frame at all: the server had already
                // dropped it (after refusing it, then giving up waiting for our close).
                (Behavior::Close, Goodbye::Broken) => ctx.dropped(Dropped::Reset),
                // Other behaviors read until the deadline: they were healthy then, whatever the
                // goodbye brings.
                _ => ctx.stats.borrow_mut().counts.survived += 1,
            },
            (Err(why), _) => {
                ctx.dropped(why);
                ctx.lived(why, began);
            }
        }
        ctx.slot.closed();
    }
}

/// The connection's end: the closing handshake of a healthy one (see `wind_up`); for one failed for a
/// violation, the wait for its close frame to reach the server (see `Ws::linger`); nothing
/// for the others.
async fn end(
    ws: &mut Ws,
    ctx: &WorkerState,
    behavior: &Behavior,
    ended: Result<(), Dropped>,
) -> Goodbye {
    match ended {
        Ok(()) => wind_up(ws, ctx, behavior).await,
        Err(Dropped::ProtocolError | Dropped::MessageTooBig) => {
            ws.linger(Instant::now() + LINGER).await;
            Goodbye::Broken
        }
        Err(_) => Goodbye::Broken,
    }
}

/// How long a connection failed for a violation waits for the server to read its close
/// frame and close.
const LINGER: Duration = Duration::from_secs(1);

/// A healthy connection's end: whether it fell behind, then the closing handshake. One boxed
/// step, so a held connection's task keeps none of its state.
async fn wind_up(ws: &mut Ws, ctx: &WorkerState, behavior: &Behavior) -> Goodbye {
    let allowance = allowance(ctx, behavior);
    if let Some(allowance) = allowance {
        behind(ws, ctx, allowance).await;
    }
    goodbye(ws, allowance).await
}

/// Unread bytes at a connection's deadline beyond what it was owed past which it is counted
/// as behind: well above a few answers in flight.
const BEHIND_SLACK: usize = 64 * 1024;
/// Frame header bytes an answer may carry besides its payload (RFC 6455 5.2, at most).
const FRAME_HEADER_MAX: usize = 14;

/// How many bytes a connection may still have to read at its deadline, answers it is owed
/// included, before it counts as behind; `None` for a blast, which never reads (its echoes pile
/// up by design), and a storm, which never runs.
fn allowance(ctx: &WorkerState, behavior: &Behavior) -> Option<usize> {
    let owed = match behavior {
        Behavior::Close | Behavior::Blast { .. } => return None,
        Behavior::Saturate {
            window: Some(w), ..
        } => *w as usize * (ctx.script.message_len(ctx.size) + FRAME_HEADER_MAX),
        _ => 0,
    };
    Some(owed + BEHIND_SLACK)
}

/// Counts the connection as behind if, at the end of its measured phase, more than `limit`
/// bytes were waiting to be read: the server sent faster than this client read, and what it
/// sent after is not in the figures. Asked once per connection.
async fn behind(ws: &Ws, ctx: &WorkerState, limit: usize) {
    let unread = ws.buffered() + unread(ws, ctx, limit + 1).await;
    if unread > limit {
        let mut m = ctx.stats.borrow_mut();
        m.counts.behind += 1;
        m.counts.unread_bytes += unread as u64;
    }
}

/// Bytes waiting in the connection's socket, up to `max`: peeked (copied, not taken) into the
/// worker's scratch buffer, once. A peek rather than FIONREAD: its ioctl is unsafe code, which
/// the workspace forbids. Through TLS it counts the encrypted bytes.
async fn unread(ws: &Ws, ctx: &WorkerState, max: usize) -> usize {
    let tcp = match ws.get_ref() {
        wsload_ws::Io::Plain(s) => s,
        wsload_ws::Io::Tls(s) => s.get_ref().0,
    };
    std::future::poll_fn(|cx| {
        let mut buf = ctx.scratch.peek.borrow_mut();
        if buf.len() < max {
            buf.resize(max, 0);
        }
        let mut rb = tokio::io::ReadBuf::new(&mut buf[..max]);
        Poll::Ready(match tcp.poll_peek(cx, &mut rb) {
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(_)) | Poll::Pending => 0,
        })
    })
    .await
}

/// Close code 1000. A server answering our close (sent without a code) echoes no code, or
/// this one; any other code in the first close frame we get was the server's own decision.
const NORMAL_CLOSE: u16 = 1000;

/// How long the closing handshake may take.
const GOODBYE_WAIT: Duration = Duration::from_secs(2);

/// How the closing handshake went.
pub(crate) enum Goodbye {
    /// The server answered our close, or never answered within the bound (still open).
    Answered,
    /// The first close frame from the server carried this code: it had closed on its own.
    ServerClosed(u16),
    /// The stream ended or failed before any close frame from the server.
    Broken,
}

/// The client's closing handshake, bounded (a server that never answers the close must not
/// stall the cell).
///
/// Reads go on while our close frame waits to be written (a server blocked writing replies
/// nobody read, as in a blast against an echo server, reads our close only after we read
/// those), and after the write failed (the server's own close frame may be waiting to be
/// read even though it has gone).
///
/// With an `allowance`, a server that sends more data than that after our close went out is
/// not closing but pushing (a flood): the wait ends there, rather than reading its backlog.
async fn goodbye(ws: &mut Ws, allowance: Option<usize>) -> Goodbye {
    let mut sent = false;
    let mut after_close = 0usize;
    let mut first_close: Option<Option<u16>> = None;
    let until = Instant::now() + GOODBYE_WAIT;
    let handshake = std::future::poll_fn(|cx| {
        if !sent {
            match ws.poll_close_unpin(cx) {
                Poll::Ready(_) => sent = true,
                Poll::Pending => {}
            }
        }
        loop {
            match ws.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(Message::Close(frame)))) => {
                    first_close.get_or_insert(frame.map(|f| u16::from(f.code)));
                }
                // Read after the deadline: counted nowhere. A server that keeps sending
                // instead of closing must not hold the goodbye past its bound.
                Poll::Ready(Some(Ok(msg))) => {
                    if sent {
                        after_close += msg.len();
                    }
                    if Instant::now() >= until || allowance.is_some_and(|a| after_close > a) {
                        return Poll::Ready(false);
                    }
                }
                Poll::Ready(_) => return Poll::Ready(true),
                Poll::Pending => return Poll::Pending,
            }
        }
    });
    let finished = tokio::time::timeout_at(until, handshake)
        .await
        .unwrap_or(false);
    match first_close {
        Some(Some(code)) if code != NORMAL_CLOSE => Goodbye::ServerClosed(code),
        Some(_) => Goodbye::Answered,
        None if finished => Goodbye::Broken,
        None => Goodbye::Answered,
    }
}

/// How a ping's wait ended (a closed connection ends it too, as an `Err`).
enum Reply {
    Answered,
    TimedOut,
    /// The cell's deadline (and its grace) came first: unanswered, so lost, but the
    /// connection's health is not judged on a wait the cell cut short.
    Cut,
}

/// How long after a timed cell's deadline a ping sent before it may still be answered: long
/// enough for a round trip in flight, short enough that the cell ends on time.
const ANSWER_GRACE: Duration = Duration::from_millis(250);

/// When the wait for a ping sent at `sent_at` ends: its timeout, or the cell's deadline
/// (plus the grace), whichever comes first, in a timed cell.
fn answer_due(ctx: &WorkerState, sent_at: Instant, timeout: Duration) -> Instant {
    let due = sent_at + timeout;
    if ctx.timed {
        due.min(ctx.deadline + ANSWER_GRACE)
    } else {
        due
    }
}

/// Stays open until the deadline, reading (data counted) and pinging every `every`.
///
/// Written as two polled loops around one timer (the next ping, then the answer's timeout)
/// rather than a `select!` and a ping future: this is the state of every held connection's
/// task, ~330 bytes inline instead of a 680-byte box, and a ping round allocates nothing.
/// Not an `async fn`, for the reason `run` gives.
#[allow(clippy::manual_async_fn)] // deliberately not an async fn: see above
fn hold<'a>(
    ws: &'a mut Ws,
    ctx: &'a WorkerState,
    every: Option<Duration>,
    mut pinger: Pinger,
) -> impl std::future::Future<Output = Result<(), Dropped>> + 'a {
    async move {
        // The conversation's heartbeat shares the pings' timer, which wakes for whichever is
        // due first. Both are kept as milliseconds from the phase's start: this is the state
        // of every held connection, and an `Instant` is 16 bytes.
        let every_beat = ctx.script.heartbeat().map(|b| b.0);
        let now = Instant::now();
        // Every connection's first ping a share of the interval in (its number's among the
        // process's connections): begun at one instant, 300,000 held connections pinging
        // together put a 300,000-ping burst before the server every interval (p99 22 s).
        // (In a block: nothing of it outlives the computation in the task's state.)
        let mut next_ping = {
            let connections = u64::from(ctx.connections.max(1));
            // In (0, 1]: a lone connection pings one interval in, as every one used to.
            let phase = (pinger.conn % connections + 1) as f64 / connections as f64;
            since(
                ctx,
                every.map_or(ctx.deadline, |e| (now + e.mul_f64(phase)).min(ctx.deadline)),
            )
        };
        let mut next_beat = every_beat.map_or(NEVER, |e| since(ctx, now + e));
        let mut timer = std::pin::pin!(tokio::time::sleep_until(at(ctx, next_ping.min(next_beat))));
        loop {
            // Idle: whatever arrives answers nothing (no ping is out), until the timer fires;
            // a socket that is never empty must not postpone it, so the clock is read after
            // every frame (a vDSO read, no syscall).
            std::future::poll_fn(|cx| {
                loop {
                    match ws.poll_next_unpin(cx) {
                        Poll::Ready(item) => {
                            let msg = account(ctx, item)?;
                            let now = Instant::now();
                            if !converse(ws, ctx, pinger.conn, &msg)
                                && let Answer::Unsolicited(kind) = answer::unsolicited(&msg)
                            {
                                count_unsolicited(ctx, now, kind, &msg);
                            }
                            if now >= timer.deadline() {
                                return Poll::Ready(Ok::<(), Dropped>(()));
                            }
                        }
                        Poll::Pending => {
                            std::task::ready!(timer.as_mut().poll(cx));
                            return Poll::Ready(Ok::<(), Dropped>(()));
                        }
                    }
                }
            })
            .await?;
            let now = Instant::now();
            if now >= ctx.deadline {
                return Ok(());
            }
            if now >= at(ctx, next_beat)
                && let Some((e, out)) = ctx.script.heartbeat()
            {
                next_beat = since(ctx, now + e);
                let fill = Fill {
                    conn: pinger.conn,
                    seq: 0,
                    size: ctx.size,
                };
                let msg = out.message(&mut ctx.scratch.arena.borrow_mut(), &fill);
                write(ws, msg, true).await?;
            }
            if every.is_some() && now >= at(ctx, next_ping) {
                let (id, sent_at) = send_ping(ws, ctx, &mut pinger).await?;
                if pinger.awaits(ctx) {
                    timer
                        .as_mut()
                        .reset(answer_due(ctx, sent_at, pinger.cfg.timeout));
                    let reply = std::future::poll_fn(|cx| {
                        poll_answer(ws, ctx, &pinger, id, sent_at, timer.as_mut(), cx)
                    })
                    .await;
                    settle_ping(ctx, sent_at, reply)?;
                }
                let due = every.map_or(ctx.deadline, |e| (Instant::now() + e).min(ctx.deadline));
                next_ping = since(ctx, due);
            }
            timer.as_mut().reset(at(ctx, next_ping.min(next_beat)));
        }
    }
}

/// A held connection before the measured phase begins (`begun`), while the cell's other
/// connections still open: what the server sends is read and answered (a ping's pong, the
/// conversation's replies) and counted nowhere, and every `every` an unsolicited pong (RFC
/// 6455 5.5.3: a heartbeat that wants no answer) tells a server that times idle connections
/// out that this one is alive. Left unread instead, the first connections of a long connect
/// phase met wsload-server's 60 s idle timeout (300,000 connections took four minutes to
/// open here) and the server's pings went unanswered. `Err`: the connection ended meanwhile.
#[allow(clippy::manual_async_fn)] // not an async fn: it would store `begun` twice (see `run`)
pub(crate) fn keep_until<'a>(
    ws: &'a mut Ws,
    early: &'a WorkerState,
    conn: u64,
    every: Option<Duration>,
    begun: impl std::future::Future + 'a,
) -> impl std::future::Future<Output = Result<(), Dropped>> + 'a {
    async move {
        let mut begun = std::pin::pin!(begun);
        let first = every.map_or(early.deadline, |e| Instant::now() + e);
        let mut timer = std::pin::pin!(tokio::time::sleep_until(first));
        let mut beat_due = false;
        std::future::poll_fn(|cx| {
            loop {
                if begun.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ok(()));
                }
                if let Poll::Ready(item) = ws.poll_next_unpin(cx) {
                    let msg = account(early, item)?;
                    if !converse(ws, early, conn, &msg)
                        && let Answer::Unsolicited(kind) = answer::unsolicited(&msg)
                    {
                        count_unsolicited(early, Instant::now(), kind, &msg);
                    }
                    continue;
                }
                if !beat_due && timer.as_mut().poll(cx).is_ready() {
                    beat_due = true;
                }
                if beat_due && let Poll::Ready(ready) = ws.poll_ready_unpin(cx) {
                    ready.map_err(write_drop)?;
                    ws.start_send_unpin(Message::Pong(Default::default()))
                        .map_err(write_drop)?;
                    beat_due = false;
                    if let Some(e) = every {
                        timer.as_mut().reset(Instant::now() + e);
                    }
                    continue;
                }
                // The pong and any reply out, without waiting on a server that reads slowly.
                if let Poll::Ready(flushed) = ws.poll_flush_unpin(cx) {
                    flushed.map_err(write_drop)?;
                }
                return Poll::Pending;
            }
        })
        .await
    }
}

/// A held connection's measured phase, on a connection served since its open (see
/// `keep_until`): `hold` with its pinger.
pub(crate) fn held<'a>(
    ws: &'a mut Ws,
    ctx: &'a WorkerState,
    every: Option<Duration>,
    ping: PingCfg,
    message: Arc<Out>,
    conn: u64,
) -> impl std::future::Future<Output = Result<(), Dropped>> + 'a {
    hold(ws, ctx, every, Pinger::new(ping, message, conn))
}

/// A hold's "not scheduled" (see `since`).
const NEVER: u32 = u32::MAX;

/// An instant of a held connection's schedule, as milliseconds from the phase's start
/// (rounded up, so it is never early); 49 days at most.
fn since(ctx: &WorkerState, t: Instant) -> u32 {
    let d = t.saturating_duration_since(ctx.start);
    u32::try_from(d.as_micros().div_ceil(1000)).unwrap_or(NEVER - 1)
}

/// The instant `ms` milliseconds after the phase's start (`NEVER`: far past any deadline).
fn at(ctx: &WorkerState, ms: u32) -> Instant {
    ctx.start + Duration::from_millis(u64::from(ms))
}

/// Sends the next ping (written out and flushed) and counts it: its id and when it left.
/// The ping is made at the call. A hand-made future: an `async` one would hold the write's
/// future twice (rust-lang/rust#62958), in every held connection's state.
fn send_ping<'a>(
    ws: &'a mut Ws,
    ctx: &'a WorkerState,
    pinger: &mut Pinger,
) -> impl std::future::Future<Output = Result<(u64, Instant), Dropped>> + 'a {
    let (msg, id) = pinger.next(ctx);
    let awaited = pinger.awaits(ctx);
    let len = data_len(&msg);
    let sent_at = Instant::now();
    let mut written = write(ws, msg, true);
    std::future::poll_fn(move |cx| {
        std::task::ready!(written.poll_unpin(cx))?;
        if let Some(len) = len {
            ctx.sent(sent_at, 1, len);
        }
        if awaited {
            ctx.expected(sent_at, 1);
        }
        Poll::Ready(Ok((id, sent_at)))
    })
}

/// A ping's outcome from its answer's: a timeout counts as lost and, in a hold, ends the
/// connection's survival.
fn settle_ping(
    ctx: &WorkerState,
    sent_at: Instant,
    reply: Result<Reply, Dropped>,
) -> Result<(), Dropped> {
    match reply {
        Ok(Reply::Answered) => Ok(()),
        Ok(Reply::Cut) => {
            ctx.lost(sent_at, 1);
            Ok(())
        }
        Ok(Reply::TimedOut) => {
            ctx.lost(sent_at, 1);
            Err(Dropped::PingTimeout)
        }
        // The connection ended with this ping unanswered: it is lost too, so that every
        // expected answer ends as a round trip or a loss.
        Err(end) => {
            ctx.lost(sent_at, 1);
            Err(end)
        }
    }
}

/// Sends one ping and waits for its answer (see `settle_ping`).
async fn ping_once(ws: &mut Ws, ctx: &WorkerState, pinger: &mut Pinger) -> Result<(), Dropped> {
    let (id, sent_at) = send_ping(ws, ctx, pinger).await?;
    if !pinger.awaits(ctx) {
        // Nothing to wait for: let the worker's other connections run between sends.
        tokio::task::yield_now().await;
        return Ok(());
    }
    let mut timeout = std::pin::pin!(tokio::time::sleep_until(answer_due(
        ctx,
        sent_at,
        pinger.cfg.timeout
    )));
    let reply =
        std::future::poll_fn(|cx| poll_answer(ws, ctx, pinger, id, sent_at, timeout.as_mut(), cx))
            .await;
    settle_ping(ctx, sent_at, reply)
}

/// Reads until the answer to ping `id`, sent at `sent_at`, arrives: `Answered`; `TimedOut`
/// once `timeout` fires (`Cut` if the cell's deadline set it). Frames that answer nothing are
/// counted as unsolicited, and answers to earlier pings as mismatched. The clock is read after
/// every frame, so a server that never lets the socket go empty cannot postpone the timeout.
fn poll_answer(
    ws: &mut Ws,
    ctx: &WorkerState,
    pinger: &Pinger,
    id: u64,
    sent_at: Instant,
    mut timeout: std::pin::Pin<&mut tokio::time::Sleep>,
    cx: &mut std::task::Context<'_>,
) -> Poll<Result<Reply, Dropped>> {
    let expired = |timeout: &tokio::time::Sleep| {
        if timeout.deadline() < sent_at + pinger.cfg.timeout {
            Reply::Cut
        } else {
            Reply::TimedOut
        }
    };
    loop {
        let msg = match ws.poll_next_unpin(cx) {
            Poll::Ready(item) => account(ctx, item)?,
            Poll::Pending => {
                std::task::ready!(timeout.as_mut().poll(cx));
                return Poll::Ready(Ok(expired(&timeout)));
            }
        };
        let now = Instant::now();
        if converse(ws, ctx, pinger.conn, &msg) {
            if now >= timeout.deadline() {
                return Poll::Ready(Ok(expired(&timeout)));
            }
            continue;
        }
        match pinger.answer(&msg, ctx) {
            // One ping is out at a time, so a copy of the template answers it.
            Answer::To(got) if got == id => {
                return Poll::Ready(Ok(answered(ctx, &msg, sent_at, now)));
            }
            Answer::Copy => return Poll::Ready(Ok(answered(ctx, &msg, sent_at, now))),
            // An earlier ping's answer, after its wait ended.
            Answer::To(_) => ctx.mismatched(now),
            Answer::Unsolicited(kind) => count_unsolicited(ctx, now, kind, &msg),
            Answer::Control => {}
        }
        if now >= timeout.deadline() {
            return Poll::Ready(Ok(expired(&timeout)));
        }
    }
}

/// Counts the answer `msg` to a ping sent at `sent_at`, read at `now`.
fn answered(ctx: &WorkerState, msg: &Message, sent_at: Instant, now: Instant) -> Reply {
    if let Some(len) = data_len(msg) {
        ctx.received(sent_at, 1, len);
    }
    let rtt = now - sent_at;
    ctx.rtt(sent_at, rtt, rtt);
    Reply::Answered
}

async fn pings(
    ws: &mut Ws,
    ctx: &WorkerState,
    count: u32,
    interval: Duration,
    mut pinger: Pinger,
) -> Result<(), Dropped> {
    for i in 0..count {
        if i > 0 && !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
        match ping_once(ws, ctx, &mut pinger).await {
            // A lost ping is counted and the next one goes out: the connection is still open.
            Err(Dropped::PingTimeout) => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
}

async fn pingpong(ws: &mut Ws, ctx: &WorkerState, mut pinger: Pinger) -> Result<(), Dropped> {
    while Instant::now() < ctx.deadline {
        match ping_once(ws, ctx, &mut pinger).await {
            Err(Dropped::PingTimeout) => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
}

/// What a counting loop has queued and had answered. An answer is recognised by the answer
/// rule, by the `${seq}` it carries (one of those queued) or in order, and never more of them
/// are counted than were queued: answers beyond that answer nothing.
struct Echoes {
    /// Whether the server answers at all (a window is kept): if not, every frame is
    /// unsolicited.
    awaited: bool,
    queued: u64,
    echoed: u64,
    /// Whether the messages go as text frames (else binary): what answers are counted as.
    text: bool,
}

/// What the conversation took out of one counting read: replies due and pushes, and how
/// much of the unsolicited tallies they are.
#[derive(Default)]
struct Taken {
    replies: Vec<usize>,
    pushes: FrameTally,
    text: FrameTally,
    binary: FrameTally,
}

impl Taken {
    fn add(&mut self, text: bool, len: usize) {
        let t = if text {
            &mut self.text
        } else {
            &mut self.binary
        };
        t.frames += 1;
        t.bytes += len as u64;
    }
}

/// Whether the frame is an answer in a counting read.
fn counted_answer(
    ctx: &WorkerState,
    echoes: (bool, u64),
    taken: &mut Taken,
    text: bool,
    data: &[u8],
) -> bool {
    let (awaited, queued) = echoes;
    let script = &*ctx.script;
    match script.incoming(text, data) {
        Incoming::Reply(i) => {
            taken.replies.push(i);
            taken.add(text, data.len());
            return false;
        }
        Incoming::Push => {
            taken.pushes.frames += 1;
            taken.pushes.bytes += data.len() as u64;
            taken.add(text, data.len());
            return false;
        }
        Incoming::Other => {}
    }
    awaited
        && match script.recognise_with(text, data, &mut ctx.scratch.memo.borrow_mut()) {
            Recognised::Id(id) => (1..=queued).contains(&id),
            Recognised::Next => true,
            Recognised::No => false,
        }
}

/// Reads what is there (waiting for at least something), every frame checked in place by the
/// answer rule; answers as one count, with one clock read for the lot. `Ok(n)`: `n` answers;
/// a close or an error ends the connection.
fn poll_echoes(
    ws: &mut Ws,
    ctx: &WorkerState,
    echoes: &mut Echoes,
    cx: &mut std::task::Context<'_>,
) -> Poll<Result<u32, Dropped>> {
    let awaited = echoes.awaited;
    let mut taken = Taken::default();
    let state = (awaited, echoes.queued);
    let mut is_echo = |text: bool, data: &[u8]| counted_answer(ctx, state, &mut taken, text, data);
    let polled = std::task::ready!(ws.poll_recv(cx, &mut is_echo));
    converse_counted(ws, ctx, &taken);
    Poll::Ready(match polled {
        Some(Ok(Recv::Data {
            expected,
            mut text,
            mut binary,
        })) => {
            let now = Instant::now();
            text.frames = text.frames.saturating_sub(taken.text.frames);
            text.bytes = text.bytes.saturating_sub(taken.text.bytes);
            binary.frames = binary.frames.saturating_sub(taken.binary.frames);
            binary.bytes = binary.bytes.saturating_sub(taken.binary.bytes);
            let got = if awaited {
                expected.frames.min(echoes.queued - echoes.echoed)
            } else {
                0
            };
            echoes.echoed += got;
            // Answers need not be as long as what they answer.
            let len = expected.bytes / expected.frames.max(1);
            ctx.received(now, got, got * len);
            let extra = expected.frames - got;
            let kind = if echoes.text {
                FrameKind::Text
            } else {
                FrameKind::Binary
            };
            ctx.unsolicited(now, kind, extra, extra * len);
            ctx.unsolicited(now, FrameKind::Text, text.frames, text.bytes);
            ctx.unsolicited(now, FrameKind::Binary, binary.frames, binary.bytes);
            Ok(got as u32)
        }
        // A ping is answered already.
        Some(Ok(Recv::Other(Message::Ping(_)))) => Ok(0),
        // No ping was sent: a pong answers nothing.
        Some(Ok(Recv::Other(pong @ Message::Pong(_)))) => {
            count_unsolicited(ctx, Instant::now(), FrameKind::Pong, &pong);
            Ok(0)
        }
        Some(Ok(Recv::Other(other))) => account(ctx, Some(Ok(other))).map(|_| 0),
        Some(Err(e)) => Err(drop_of(ctx, &e)),
        None => Err(Dropped::Reset),
    })
}

/// The replies and pushes a counting read took: replies queued (the next read pushes them
/// out), pushes counted.
fn converse_counted(ws: &mut Ws, ctx: &WorkerState, taken: &Taken) {
    if taken.pushes.frames > 0 {
        ctx.pushed(Instant::now(), taken.pushes.frames, taken.pushes.bytes);
    }
    let script = &*ctx.script;
    for &i in &taken.replies {
        let answer = script.reply(i, &mut ctx.scratch.arena.borrow_mut(), &Fill::default());
        if let Some((text, answer)) = answer {
            ws.queue_reply(text, &answer);
            ctx.replied(1);
        }
    }
}

/// What a counting or blasting loop sends: the conversation's message, made per message
/// with its `${seq}` (or the same bytes each time, when every message is alike).
struct Sender {
    message: Arc<Out>,
    conn: u64,
    seq: u64,
    /// `${sendTime}` of the burst being made (see `Sender::burst`).
    time: SendTime,
}

impl Sender {
    fn new(message: Arc<Out>, conn: u64) -> Sender {
        Sender {
            message,
            conn,
            seq: 0,
            time: SendTime::default(),
        }
    }

    /// A burst begins: its messages are made now, and carry this instant as their
    /// `${sendTime}` (one clock read per burst instead of one per message).
    fn burst(&mut self) {
        if self.message.has_time() {
            self.time = SendTime::now();
        }
    }

    /// Whether it sends text frames (else binary).
    fn text(&self) -> bool {
        self.message.is_text()
    }

    /// Queues the next message on `ws`; its length.
    fn queue(&mut self, ws: &mut Ws, ctx: &WorkerState) -> u64 {
        let out = &self.message;
        self.seq += 1;
        if let Some(bytes) = out.constant() {
            ws.queue_data(out.is_text(), bytes);
            return bytes.len() as u64;
        }
        let fill = Fill {
            conn: self.conn,
            seq: self.seq,
            size: ctx.size,
        };
        if out.transforms() {
            // MsgPack or zlib: made whole, then encoded.
            let bytes = out.bytes(&mut ctx.scratch.arena.borrow_mut(), &fill);
            ws.queue_data(out.is_text(), &bytes);
            return bytes.len() as u64;
        }
        // Copied into the write buffer at once: made in the worker's scratch, from the last
        // message made there with its numbers written over.
        let mut pre = ctx.scratch.render.borrow_mut();
        let bytes = pre.make(out, &fill, &self.time);
        ws.queue_data(out.is_text(), bytes);
        bytes.len() as u64
    }

    /// The next message.
    fn message(&mut self, ctx: &WorkerState) -> Message {
        self.seq += 1;
        let fill = Fill {
            conn: self.conn,
            seq: self.seq,
            size: ctx.size,
        };
        self.message
            .message(&mut ctx.scratch.arena.borrow_mut(), &fill)
    }
}

/// Writes what is queued (all of it if `all`, else until below the soft limit), reading
/// echoes whenever the write has to wait (see `write_reading`), until the deadline at most.
async fn write_out_counting(
    ws: &mut Ws,
    ctx: &WorkerState,
    all: bool,
    echoes: &mut Echoes,
) -> Result<(), Dropped> {
    let mut stall = Stall::default();
    std::future::poll_fn(|cx| {
        loop {
            let step = if all {
                ws.poll_flush_all(cx)
            } else {
                ws.poll_room(cx)
            };
            match step {
                Poll::Ready(Ok(())) => return Poll::Ready(Ok(())),
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(if matches!(e, WsError::Io(_)) {
                        Dropped::Reset
                    } else {
                        Dropped::Error
                    }));
                }
                Poll::Pending => match poll_echoes(ws, ctx, echoes, cx) {
                    // A server that sends without end must not keep the write waiting past
                    // the deadline; what is queued goes out before the close.
                    Poll::Ready(Ok(_)) if Instant::now() >= ctx.deadline => {
                        return Poll::Ready(Ok(()));
                    }
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(why)) => return Poll::Ready(Err(why)),
                    Poll::Pending => return stalled(ws, ctx, &mut stall, cx),
                },
            }
        }
    })
    .await
}

/// Waits for echoes until `deadline`: `Ok(None)` at the deadline.
async fn echoes_until(
    ws: &mut Ws,
    ctx: &WorkerState,
    echoes: &mut Echoes,
    deadline: Instant,
) -> Result<Option<u32>, Dropped> {
    match tokio::time::timeout_at(
        deadline,
        std::future::poll_fn(|cx| poll_echoes(ws, ctx, echoes, cx)),
    )
    .await
    {
        Err(_) => Ok(None),
        Ok(r) => r.map(Some),
    }
}

/// The counting loop: bursts of frames written straight from the template into the worker's
/// shared write buffer, echoes counted per read without building messages.
async fn saturate(
    ws: &mut Ws,
    ctx: &WorkerState,
    window: Option<u32>,
    per_message: bool,
    mut sender: Sender,
) -> Result<(), Dropped> {
    let mut in_flight: u32 = 0;
    let mut echoes = Echoes {
        awaited: window.is_some(),
        queued: 0,
        echoed: 0,
        text: sender.text(),
    };
    // Without echoes, bursts are sized to fill the write buffer without waiting on it.
    let burst = window.unwrap_or(64);
    loop {
        let now = Instant::now();
        if now >= ctx.deadline {
            break;
        }
        let n = burst.saturating_sub(in_flight);
        // Echoes read while a write waits count against the window.
        let echoed_before = echoes.echoed;
        let mut bytes = 0u64;
        sender.burst();
        let written = async {
            for _ in 0..n {
                if per_message || ws.over_soft_limit() {
                    write_out_counting(ws, ctx, per_message, &mut echoes).await?;
                }
                bytes += sender.queue(ws, ctx);
                echoes.queued += 1;
            }
            write_out_counting(ws, ctx, true, &mut echoes).await
        }
        .await;
        written?;
        ctx.sent(now, u64::from(n), bytes);
        if window.is_some() {
            let echoed = (echoes.echoed - echoed_before) as u32;
            in_flight = (in_flight + n).saturating_sub(echoed);
            if in_flight > 0 {
                // At least one echo, and whatever else one read brings.
                match echoes_until(ws, ctx, &mut echoes, ctx.deadline).await? {
                    None => break,
                    Some(got) => in_flight = in_flight.saturating_sub(got),
                }
            }
        }
        // Then whatever else is there already (without echoes: what the server sends, and a
        // close): the next burst is the larger for it, and a burst's write is what wakes the
        // server. Not past the deadline: a server that always has more must not hold it.
        while Instant::now() < ctx.deadline
            && let Poll::Ready(r) =
                std::future::poll_fn(|cx| Poll::Ready(poll_echoes(ws, ctx, &mut echoes, cx))).await
        {
            let got = r?;
            if window.is_some() {
                in_flight = in_flight.saturating_sub(got);
            }
        }
    }
    Ok(())
}

async fn blast(
    ws: &mut Ws,
    ctx: &WorkerState,
    per_message: bool,
    mut sender: Sender,
) -> Result<(), Dropped> {
    const BURST: u64 = 64;
    loop {
        let now = Instant::now();
        if now >= ctx.deadline {
            return Ok(());
        }
        // A blast never reads, so against a server that answers (an echo server) the replies
        // fill both sockets, the server stops reading and our writes block for good: the
        // deadline bounds them. What was handed to the socket's writer counts as sent even
        // when the burst is cut short: the closing handshake writes it out before the close.
        let (mut fed, mut bytes) = (0u64, 0u64);
        let burst = async {
            for _ in 0..BURST {
                let msg = sender.message(ctx);
                let len = data_len(&msg).unwrap_or(0);
                feed(ws, ctx, msg).await?;
                fed += 1;
                bytes += len;
                if per_message {
                    flush(ws, ctx).await?;
                }
            }
            if !per_message {
                flush(ws, ctx).await?;
            }
            Ok(())
        };
        let r = tokio::time::timeout_at(ctx.deadline, burst).await;
        ctx.sent(now, fed, bytes);
        match r {
            Err(_) => return Ok(()),
            Ok(r) => r?,
        }
    }
}

/// Open loop: messages leave at their scheduled instants whatever the answers do. When the
/// sender falls behind (a stalled server, a full socket), the late messages go out at once
/// and their latency still counts from the instant they were due, so a stall shows in the
/// percentiles instead of being omitted (coordinated omission).
async fn paced(
    ws: &mut Ws,
    ctx: &WorkerState,
    n: u64,
    schedule: &Schedule,
    pinger: Pinger,
    per_message: bool,
) -> Result<(), Dropped> {
    // (id, intended, actual) of every message awaiting its answer, in send order.
    let mut pending: VecDeque<(u64, Instant, Instant)> = VecDeque::new();
    let outcome =
        paced_until_answered(ws, ctx, n, schedule, pinger, per_message, &mut pending).await;
    // Whatever is still outstanding was never answered, whether the timeout ran out or the
    // connection dropped: a dead server's unanswered messages are loss, not silence.
    for (_, intended, _) in pending.drain(..) {
        ctx.lost(intended, 1);
    }
    outcome
}

/// The schedule, then the wait for the last answers; leaves in `pending` what was never
/// answered.
async fn paced_until_answered(
    ws: &mut Ws,
    ctx: &WorkerState,
    n: u64,
    schedule: &Schedule,
    mut pinger: Pinger,
    per_message: bool,
    pending: &mut VecDeque<(u64, Instant, Instant)>,
) -> Result<(), Dropped> {
    let schedule = schedule.for_connection(n, ctx.connections);
    let origin = ctx.start;
    let awaited = pinger.awaits(ctx);
    let mut due = schedule.first(origin);
    loop {
        let now = Instant::now();
        if now >= ctx.deadline {
            break;
        }
        // Everything due by now goes out in one burst.
        let mut burst = 0u64;
        while let Some(t) = due
            && t <= now
            && burst < 1024
        {
            let (msg, id) = pinger.next(ctx);
            let len = data_len(&msg).unwrap_or(0);
            write_reading(ws, ctx, Some(msg), per_message, &mut |ws, m| {
                settle(ws, ctx, &pinger, m, pending)
            })
            .await?;
            ctx.sent(t, 1, len);
            if awaited {
                ctx.expected(t, 1);
                // The raw round trip starts when this message was written, not when the
                // burst began: a write that waited is the sender's lateness, which only the
                // corrected figure (from `t`) is meant to include.
                pending.push_back((id, t, Instant::now()));
            }
            burst += 1;
            due = schedule.next(origin, t, ctx.deadline);
        }
        if burst > 0 && !per_message {
            write_reading(ws, ctx, None, true, &mut |ws, m| {
                settle(ws, ctx, &pinger, m, pending)
            })
            .await?;
        }
        let wake = due.map_or(ctx.deadline, |t| t.min(ctx.deadline));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            r = read(ws, ctx) => {
                let msg = r?;
                settle(ws, ctx, &pinger, &msg, pending);
                // What else is buffered, but not past the next message due: a server that
                // always has more must not hold the schedule up.
                while Instant::now() < wake
                    && let Some(r) = read_ready(ws, ctx)
                {
                    settle(ws, ctx, &pinger, &r?, pending);
                }
            }
        }
    }
    // Answers to the last messages may still be on their way. The clock is read after every
    // frame: a `timeout_at` around each read would never fire while frames keep coming.
    let until = Instant::now() + pinger.cfg.timeout;
    while !pending.is_empty() && Instant::now() < until {
        match tokio::time::timeout_at(until, read(ws, ctx)).await {
            Err(_) => break,
            Ok(r) => settle(ws, ctx, &pinger, &r?, pending),
        }
    }
    Ok(())
}

/// Matches an answer to the outstanding message with its id (a copy of a message without an
/// id to the oldest); older ones it skipped were lost. Anything else is unsolicited, and an
/// answer to a message already given up on is mismatched.
fn settle(
    ws: &mut Ws,
    ctx: &WorkerState,
    pinger: &Pinger,
    msg: &Message,
    pending: &mut VecDeque<(u64, Instant, Instant)>,
) {
    if converse(ws, ctx, pinger.conn, msg) {
        return;
    }
    let now = Instant::now();
    let id = match pinger.answer(msg, ctx) {
        Answer::Control => return,
        Answer::Unsolicited(kind) => return count_unsolicited(ctx, now, kind, msg),
        Answer::Copy if pending.is_empty() => {
            // More copies than messages sent: the extra ones answer nothing.
            return count_unsolicited(ctx, now, answer_kind(msg), msg);
        }
        Answer::To(id) => Some(id),
        Answer::Copy => None,
    };
    if pinger.cfg.kind == PingKind::App
        && let Some(id) = id
    {
        return settle_by_id(ctx, pinger, msg, id, now, pending);
    }
    while let Some((pid, intended, actual)) = pending.pop_front() {
        if id.is_none() || id == Some(pid) {
            if let Some(len) = data_len(msg) {
                ctx.received(intended, 1, len);
            }
            ctx.rtt(intended, now - intended, now - actual);
            return;
        }
        if id.is_some_and(|i| i < pid) {
            // An answer to something already given up on: put the head back.
            pending.push_front((pid, intended, actual));
            ctx.mismatched(now);
            return;
        }
        ctx.lost(intended, 1);
    }
    ctx.mismatched(now);
}

/// A conversation's answer carrying `id`: answers may come in any order (a server answering
/// concurrent requests), so it takes its own message wherever that is in `pending`. Messages
/// left unanswered for longer than the timeout are lost, so that `pending` stays bounded.
fn settle_by_id(
    ctx: &WorkerState,
    pinger: &Pinger,
    msg: &Message,
    id: u64,
    now: Instant,
    pending: &mut VecDeque<(u64, Instant, Instant)>,
) {
    match pending.iter().position(|(pid, ..)| *pid == id) {
        Some(i) => {
            if let Some((_, intended, actual)) = pending.remove(i) {
                if let Some(len) = data_len(msg) {
                    ctx.received(intended, 1, len);
                }
                ctx.rtt(intended, now - intended, now - actual);
            }
        }
        // Answered already, or given up on.
        None => ctx.mismatched(now),
    }
    while let Some(&(_, intended, actual)) = pending.front()
        && now.saturating_duration_since(actual) > pinger.cfg.timeout
    {
        pending.pop_front();
        ctx.lost(intended, 1);
    }
}

/// The kind a frame answering nothing is counted under.
pub(crate) fn answer_kind(msg: &Message) -> FrameKind {
    match answer::unsolicited(msg) {
        Answer::Unsolicited(kind) => kind,
        _ => FrameKind::Binary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use wsload_ws::{Io, Ws};

    /// A held connection's task is its `run` future plus 104 bytes of tokio's task header and
    /// trailer, rounded up to 128 bytes (tokio 1.54 on x86_64): 640 bytes since holds ping
    /// without a select! and a ping future of their own (1.2 KB in two allocations before),
    /// most of an idle connection's memory; 768 since the conversation (see below).
    #[tokio::test]
    async fn a_held_connection_stays_small() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let (c, s) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        let _server = s.expect("accept");
        let ws = Ws::new(Io::Plain(c.expect("connect")), 1024);
        let slot = Arc::new(crate::counters::Counters::new(1)).slot_ref(0);
        let now = Instant::now();
        let c = wsload_spec::builtin::conversation(wsload_spec::Protocol::Echo).expect("parses");
        let script = Script::compile(&c).expect("compiles").for_cell(
            true,
            crate::encoding::Encoding::AsWritten,
            64,
        );
        let message = script.shared_message().expect("no variables");
        let ctx = Rc::new(WorkerState {
            start: now,
            cell_clock: Default::default(),
            start_on_conductor_us: 0,
            connections: 1,
            measure_from: now,
            deadline: now,
            write_timeout: Duration::from_secs(10),
            timed: true,
            script: Arc::new(script),
            size: 64,
            stats: Default::default(),
            discard: Default::default(),
            slot,
            scratch: Default::default(),
        });
        let ping = PingCfg {
            kind: PingKind::App,
            timeout: Duration::from_secs(1),
        };
        // 144 with the connection's limits (three u32, `connect.limits`); it was 128, two
        // cache lines.
        assert!(
            std::mem::size_of::<Ws>() <= 144,
            "{}",
            std::mem::size_of::<Ws>()
        );
        let task = run(ws, 0, ctx, Behavior::Hold { every: None, ping }, message);
        let size = std::mem::size_of_val(&task);
        // 592 measured with the conversation (it was at most 536): the pinger carries the
        // connection's measured message (an `Arc`) and its number for `${conn}`, the hold the
        // heartbeat's schedule (as u32 milliseconds), and the read loop the connection's
        // number for the replies. A 768-byte task allocation instead of 640. 608 with the
        // connection's limits in its `Ws`.
        assert!(size <= 608, "a held connection's future is {size} bytes");
    }
}
