//! Reading a connection: every frame accounted for (a close keeps its code, an error names
//! why the connection ended), the conversation's part taken (a reply rule answered, a push
//! counted), and what answers nothing counted as unsolicited.

use super::worker::WorkerState;
use crate::connect::Ws;
use crate::conversation::answer::{self, Answer};
use crate::conversation::{Fill, Incoming};
use futures_util::{FutureExt, StreamExt};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use wsload_report::measure::{Dropped, FrameKind, NumberField, UNSOLICITED};
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
/// the next read pushes it out without waiting) and one that matches `push` is counted.
/// `true` when it was either: then it is neither an answer nor unsolicited.
pub(super) fn converse(ws: &mut Ws, ctx: &WorkerState, conn: u64, msg: &Message) -> bool {
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
