//! Timed messages: a ping (a WebSocket ping frame, or the conversation's message) sent, and
//! its answer recognised by what it carries, timed, or counted lost. Shared by the
//! behaviors that time each message: hold, ping, pingpong, paced.

use super::read::{
    ReplyPace, account, converse, count_unreadable_answer, count_unsolicited, heard_meanwhile,
};
use super::sender::Outgoing;
use super::stall::Stall;
use super::worker::{WorkerState, data_len};
use super::write::poll_write_reading;
use crate::connect::Ws;
use crate::conversation::Out;
use crate::conversation::answer::{self, Answer, Asked};
use crate::model::PingCfg;
use futures_util::StreamExt;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::measure::Dropped;
use wsload_spec::PingKind;

/// Builds pings and recognizes their answers (see `answer`); the connection's own part of
/// every read its behavior makes (its number, the pace of its automatic replies).
pub(super) struct Pinger {
    pub(super) cfg: PingCfg,
    /// The conversation's message, as this connection sends it: app pings are made from it,
    /// and a frame ping's id is its `${seq}`.
    pub(super) out: Outgoing,
    /// How fast the connection's automatic replies go, in every read of its behavior.
    pub(super) pace: ReplyPace,
}

impl Pinger {
    pub(super) fn new(cfg: PingCfg, message: Arc<Out>, conn: u64) -> Self {
        Pinger {
            cfg,
            out: Outgoing::new(message, conn),
            pace: ReplyPace::default(),
        }
    }

    /// The connection's number (`${conn}`).
    pub(super) fn conn(&self) -> u64 {
        self.out.conn
    }

    /// Whether anything answers its pings: a WebSocket ping's pong always does; a message
    /// without an answer rule is only sent.
    pub(super) fn awaits(&self, ctx: &WorkerState) -> bool {
        self.cfg.kind == PingKind::Frame || ctx.script.is_answered()
    }

    /// The next ping and its id.
    pub(super) fn next(&mut self, ctx: &WorkerState) -> (Message, u64) {
        let msg = match self.cfg.kind {
            PingKind::Frame => {
                let id = self.out.next_fill(ctx.size).seq;
                Message::Ping(bytes::Bytes::copy_from_slice(&id.to_le_bytes()))
            }
            PingKind::App => self.out.next_message(ctx),
        };
        (msg, self.out.seq)
    }

    fn asked<'a>(&self, ctx: &'a WorkerState) -> Asked<'a> {
        match self.cfg.kind {
            PingKind::Frame => Asked::FramePing,
            PingKind::App => Asked::Script(&ctx.script),
        }
    }

    /// What `msg` is to the pings sent: an id never sent answers nothing; an app ping's id
    /// written in binary wraps (MQTT's 16-bit packet id), and stands for the latest ping sent
    /// with it.
    pub(super) fn answer(&self, msg: &Message, ctx: &WorkerState) -> Answer {
        match answer::answer(self.asked(ctx), msg) {
            Answer::To(id) => {
                let sent = match self.cfg.kind {
                    PingKind::App => ctx.script.sent_seq(id, self.out.seq),
                    PingKind::Frame => (id != 0 && id <= self.out.seq).then_some(id),
                };
                sent.map_or_else(|| answer::unsolicited(msg), Answer::To)
            }
            other => other,
        }
    }
}

/// How a ping's wait ended (a closed connection ends it too, as an `Err`).
pub(super) enum Reply {
    Answered,
    TimedOut,
    /// The cell's deadline (and its grace) came first: unanswered, so lost, but the
    /// connection's health is not judged on a wait the cell cut short.
    Cut,
}

/// How long after a timed cell's deadline a ping sent before it may still be answered: long
/// enough for a round trip in flight, short enough that the cell ends on time.
const ANSWER_GRACE: Duration = Duration::from_millis(250);

/// Whether a ping due now may still be sent: only if its answer, as slow as the slowest this
/// worker's connections had in the phase (and twice the grace at least), would arrive before
/// the cell's end and its grace; else the deadline, not the server, would lose it. A Python
/// server under load lost 22 of 6,000 queries so with a fixed grace, and 30 of 5,696 (answers
/// up to 3.1 s) with a grace of 250 ms. Bounded by the ping timeout: no answer slower than it
/// is counted, so at worst the last `ping.timeout` of a cell sends no ping.
pub(super) fn may_send(ctx: &WorkerState, now: Instant) -> bool {
    let reach = ctx.slowest_ping.get().max(ANSWER_GRACE * 2);
    !ctx.timed || now + reach < ctx.deadline + ANSWER_GRACE
}

/// Past when a connection's write may not wait, in a timed cell: its deadline and the grace
/// of a round trip in flight. (pingLatency's count of pings is not timed.)
pub(super) fn cutoff(ctx: &WorkerState) -> Option<Instant> {
    ctx.timed.then(|| ctx.deadline + ANSWER_GRACE)
}

/// When the wait for a ping sent at `sent_at` ends: its timeout, or the cell's deadline
/// (plus the grace), whichever comes first, in a timed cell.
pub(super) fn answer_due(ctx: &WorkerState, sent_at: Instant, timeout: Duration) -> Instant {
    let due = sent_at + timeout;
    if ctx.timed {
        due.min(ctx.deadline + ANSWER_GRACE)
    } else {
        due
    }
}

/// Sends the next ping (written out and flushed) and counts it as sent at `sent_at`: its id
/// and that instant. The caller reads the clock once, to decide to send and to time the ping:
/// read twice, a ping let through just before the deadline could be counted past it, sent
/// to the server yet in no figure. While the write waits, what arrives is read and answered
/// (`heard_meanwhile`). The ping is made at the call. A hand-made future: an `async` one would hold the write's state twice
/// (rust-lang/rust#62958), in every held connection's state.
pub(super) fn send_ping<'a>(
    ws: &'a mut Ws,
    ctx: &'a WorkerState,
    pinger: &'a mut Pinger,
    sent_at: Instant,
) -> impl std::future::Future<Output = Result<(u64, Instant), Dropped>> + 'a {
    let (msg, id) = pinger.next(ctx);
    let awaited = pinger.awaits(ctx);
    let len = data_len(&msg);
    let conn = pinger.out.conn;
    let pace = &mut pinger.pace;
    let mut msg = Some(msg);
    let mut stall = Stall::until(cutoff(ctx));
    std::future::poll_fn(move |cx| {
        let mut heard = |ws: &mut Ws, m: &Message| heard_meanwhile(ws, ctx, conn, pace, m);
        std::task::ready!(poll_write_reading(
            ws, ctx, &mut msg, true, &mut stall, &mut heard, cx
        ))?;
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
pub(super) fn settle_ping(
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

/// Sends one ping, timed from `now`, and waits for its answer (see `settle_ping`).
pub(super) async fn ping_once(
    ws: &mut Ws,
    ctx: &WorkerState,
    pinger: &mut Pinger,
    now: Instant,
) -> Result<(), Dropped> {
    let (id, sent_at) = send_ping(ws, ctx, pinger, now).await?;
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
pub(super) fn poll_answer(
    ws: &mut Ws,
    ctx: &WorkerState,
    pinger: &mut Pinger,
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
        if converse(ws, ctx, pinger.out.conn, &mut pinger.pace, &msg)? {
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
            Answer::Unreadable => count_unreadable_answer(ctx, &msg),
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
    if rtt > ctx.slowest_ping.get() {
        ctx.slowest_ping.set(rtt);
    }
    Reply::Answered
}
