//! Reading a connection: every frame accounted for (a close keeps its code, an error names
//! why the connection ended), the conversation's part taken (a reply rule answered, with its
//! pace watched for a runaway exchange; a push counted by its rule), and what answers nothing
//! counted as unsolicited.

use super::worker::{WorkerState, data_of};
use crate::connect::Ws;
use crate::conversation::answer::{self, Answer};
use crate::conversation::{Fill, Incoming};
use futures_util::{FutureExt, StreamExt};
use std::sync::LazyLock;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use wsload_report::measure::{
    Dropped, FrameKind, MAX_REPLIES_PER_SECOND, NumberField, UNSOLICITED,
};
use wsload_ws::failure_code;

/// Why a read's error ended the connection; the error is the reason's evidence.
pub(super) fn drop_of(ctx: &WorkerState, err: &WsError) -> Dropped {
    let why = classify(err);
    ctx.witness(why, || match (failure_code(err), err) {
        (Some(code), _) => format!("{err} (close {code} sent)"),
        (None, WsError::WriteBufferFull(_)) => PENDING_WRITE_EVIDENCE.to_string(),
        (None, _) => err.to_string(),
    });
    why
}

/// A violation read after wsload's own close went out: counted as [`drop_of`] counts it, the
/// evidence saying that its code could not be sent (a close was sent already).
pub(super) fn violation_after_close(ctx: &WorkerState, err: &WsError) -> Dropped {
    let why = classify(err);
    ctx.witness(why, || {
        format!("{err} (read after wsload's close: no second close sent)")
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
pub(super) fn account(
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
pub(super) async fn read(ws: &mut Ws, ctx: &WorkerState) -> Result<Message, Dropped> {
    account(ctx, ws.next().await)
}

/// The message read now if one is already buffered; `None` if none is.
pub(super) fn read_ready(ws: &mut Ws, ctx: &WorkerState) -> Option<Result<Message, Dropped>> {
    // Same accounting as `read`: a close seen here keeps its code too.
    Some(account(ctx, ws.next().now_or_never()?))
}

/// The conversation's part in a read: a message a reply rule answers is answered (queued;
/// the next read pushes it out without waiting) and one that matches a push rule is counted
/// under it. `Ok(true)` when it was either: then it is neither an answer nor unsolicited.
/// `Err(ReplyLoop)` when the connection's replies pass their bound (see [`ReplyPace`]).
pub(super) fn converse(
    ws: &mut Ws,
    ctx: &WorkerState,
    conn: u64,
    pace: &mut ReplyPace,
    msg: &Message,
) -> Result<bool, Dropped> {
    let script = &*ctx.script;
    let Some((text, data)) = data_of(msg) else {
        return Ok(false);
    };
    match script.incoming(text, data) {
        Incoming::Reply(i) => {
            let fill = Fill {
                conn,
                seq: 0,
                size: ctx.size,
            };
            reply(ws, ctx, pace, i, &fill)?;
            Ok(true)
        }
        Incoming::Push(rule) => {
            ctx.pushed(Instant::now(), rule, 1, data.len() as u64);
            Ok(true)
        }
        Incoming::Other => Ok(false),
    }
}

/// Answers a server message with reply rule `i`, unless the connection's replies have run
/// away: then the connection ends as `reply_loop`, the rule named in the evidence.
pub(super) fn reply(
    ws: &mut Ws,
    ctx: &WorkerState,
    pace: &mut ReplyPace,
    i: usize,
    fill: &Fill,
) -> Result<(), Dropped> {
    if let Some(took) = pace.count() {
        ctx.witness(Dropped::ReplyLoop, || {
            format!(
                "replies[{i}] (when {}) matched {} server messages within {took} ms, past {MAX_REPLIES_PER_SECOND} a second: the server sends the trigger back for every reply (close 1008 sent)",
                ctx.script.reply_when(i),
                MAX_REPLIES_PER_SECOND + 1,
            )
        });
        return Err(Dropped::ReplyLoop);
    }
    let script = &*ctx.script;
    if let Some((text, answer)) = script.reply(i, &mut ctx.scratch.arena.borrow_mut(), fill) {
        ws.queue_reply(text, &answer);
        ctx.replied(1);
    }
    Ok(())
}

/// How fast one connection's automatic replies go: a server that answers each reply with the
/// message that triggers it again (an echo, or a ping that wants the ping back and returns
/// it) would keep the two sides exchanging as fast as they can for the whole cell. Past
/// [`MAX_REPLIES_PER_SECOND`] replies within a second the connection ends as `reply_loop`.
///
/// Eight bytes in every connection's state; the clock is read at a window's first reply and
/// at its bound only, never per reply of a heartbeat.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ReplyPace {
    /// Replies in the window.
    count: u32,
    /// The window's first reply, milliseconds since [`PACE_EPOCH`] (wrapping).
    since_ms: u32,
}

/// What the replies' windows are read against: a `u32` of milliseconds from it is half an
/// `Instant`, in every connection's state.
static PACE_EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn pace_ms() -> u32 {
    // Wraps after 49 days: windows are compared by difference, which wraps alike.
    PACE_EPOCH.elapsed().as_millis() as u32
}

impl ReplyPace {
    /// Counts one reply: `Some(ms)` when it is past the bound, the bound's replies having
    /// taken `ms` milliseconds (under a second).
    #[inline]
    pub(super) fn count(&mut self) -> Option<u32> {
        if self.count == 0 {
            self.since_ms = pace_ms();
        }
        self.count += 1;
        if self.count <= MAX_REPLIES_PER_SECOND {
            return None;
        }
        let now = pace_ms();
        let took = now.wrapping_sub(self.since_ms);
        if took < 1000 {
            return Some(took);
        }
        // A window over a second: a new one from this reply.
        self.count = 1;
        self.since_ms = now;
        None
    }
}

/// What a connection read while it waited to write: the conversation's (a reply queued), or
/// unsolicited. Read rather than left: a server that floods us while it reads nothing would
/// otherwise leave both sides blocked writing; its pings' pongs then pile up to the
/// pending-write limit instead (`server_not_reading`). Nothing read then answers what is
/// being written: it is not out yet.
pub(super) fn heard_meanwhile(
    ws: &mut Ws,
    ctx: &WorkerState,
    conn: u64,
    pace: &mut ReplyPace,
    msg: &Message,
) -> Result<(), Dropped> {
    if !converse(ws, ctx, conn, pace, msg)?
        && let Answer::Unsolicited(kind) = answer::unsolicited(msg)
    {
        count_unsolicited(ctx, Instant::now(), kind, msg);
    }
    Ok(())
}

/// Counts a frame that answered nothing sent in the measured phase as unsolicited, by kind
/// and payload bytes.
pub(super) fn count_unsolicited(ctx: &WorkerState, now: Instant, kind: FrameKind, msg: &Message) {
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

/// Counts an answer whose id could not be read ([`Answer::Unreadable`]); the worker's first
/// is described.
pub(super) fn count_unreadable_answer(ctx: &WorkerState, msg: &Message) {
    ctx.unreadable(NumberField::AnswerId, || match msg {
        Message::Text(t) => ctx.script.unreadable_answer(true, t.as_bytes()),
        Message::Binary(b) => ctx.script.unreadable_answer(false, b),
        _ => String::new(),
    });
}

/// The kind a frame answering nothing is counted under.
pub(super) fn answer_kind(msg: &Message) -> FrameKind {
    match answer::unsolicited(msg) {
        Answer::Unsolicited(kind) => kind,
        _ => FrameKind::Binary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_past_the_bound_within_a_second_are_a_loop_and_heartbeats_never() {
        let mut pace = ReplyPace::default();
        for _ in 0..MAX_REPLIES_PER_SECOND {
            assert_eq!(pace.count(), None);
        }
        assert!(pace.count().is_some_and(|ms| ms < 1000));
        // A window older than a second starts again at its bound: a thousand heartbeats over
        // hours are no loop.
        let mut pace = ReplyPace {
            count: MAX_REPLIES_PER_SECOND,
            since_ms: pace_ms().wrapping_sub(1_500),
        };
        assert_eq!(pace.count(), None);
        assert_eq!(pace.count, 1);
        for _ in 1..MAX_REPLIES_PER_SECOND {
            assert_eq!(pace.count(), None);
        }
        assert!(pace.count().is_some());
    }
}
