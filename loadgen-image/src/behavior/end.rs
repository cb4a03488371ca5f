//! A connection's end: the closing handshake of a healthy one (bounded), the linger of one
//! failed for a violation, whether it fell behind what the server sent, and how it ended
//! counted (survived, or dropped and why).

use super::read::{drop_of, violation_after_close};
use super::worker::WorkerState;
use crate::connect::Ws;
use crate::model::Behavior;
use futures_util::{SinkExt, StreamExt};
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use wsload_report::measure::{CLOSING_HANDSHAKE_BOUND, Dropped};
use wsload_ws::failure_code;

/// Ends the connection (a goodbye, or a failed connection's linger) and counts how it ended.
/// Boxed by its callers: one await for both, as a second suspension point would grow every
/// held connection's task.
pub(super) async fn finish(
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
                // What the server sent broke RFC 6455 or a limit: that, with its evidence, not
                // a reset (the read that failed named the rule).
                (Behavior::Close, Goodbye::Violated(why)) => ctx.dropped(why),
                // Other behaviors read until the deadline: they were healthy then, whatever the
                // goodbye brings.
                (_, goodbye) => {
                    let mut m = ctx.stats.borrow_mut();
                    m.counts.survived += 1;
                    if matches!(goodbye, Goodbye::Unanswered) {
                        m.counts.close_unanswered += 1;
                    }
                }
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
        // The server still reads: it is told why (1008, policy violation) before the end.
        Err(Dropped::ReplyLoop) => {
            let close = CloseFrame {
                code: CloseCode::Policy,
                reason: "reply loop".into(),
            };
            if ws.start_send_unpin(Message::Close(Some(close))).is_ok() {
                ws.linger(Instant::now() + LINGER).await;
            }
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
    // A storm's connection never read: what came with the 101 is read before its close.
    let read_first = matches!(behavior, Behavior::Close);
    goodbye(ws, ctx, allowance, read_first).await
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

/// How the closing handshake went.
pub(super) enum Goodbye {
    /// The server answered our close.
    Answered,
    /// The server never answered our close within [`CLOSING_HANDSHAKE_BOUND`] (or pushed on
    /// past its allowance instead): still open when the wait ended.
    Unanswered,
    /// The first close frame from the server carried this code: it had closed on its own.
    ServerClosed(u16),
    /// The stream ended or failed before any close frame from the server.
    Broken,
    /// The server broke RFC 6455 or a limit in what it sent (counted as the read loop counts
    /// it, its evidence witnessed).
    Violated(Dropped),
}

/// How many frames a storm's connection reads before its close goes out: what a server sends
/// with or right after its 101, not a stream to drain.
const READ_FIRST_FRAMES: usize = 16;

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
///
/// With `read_first` (a connection that never read), what is already there is read before
/// our close goes out: a violation in it is answered with its own code (the codec sends
/// 1002, 1007 or 1009) instead of a close without one. A violation read after our close is
/// counted the same, though no second close can go out.
async fn goodbye(
    ws: &mut Ws,
    ctx: &WorkerState,
    allowance: Option<usize>,
    read_first: bool,
) -> Goodbye {
    let mut sent = false;
    let mut after_close = 0usize;
    let mut first_close: Option<Option<u16>> = None;
    let mut violated: Option<Dropped> = None;
    let mut read_first = read_first.then_some(READ_FIRST_FRAMES);
    let until = Instant::now() + CLOSING_HANDSHAKE_BOUND;
    let handshake = std::future::poll_fn(|cx| {
        while let Some(left) = read_first.as_mut().filter(|n| **n > 0) {
            *left -= 1;
            match ws.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(Message::Close(frame)))) => {
                    first_close.get_or_insert(frame.map(|f| u16::from(f.code)));
                }
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(e))) => {
                    if failure_code(&e).is_some() {
                        violated = Some(drop_of(ctx, &e));
                    }
                    return Poll::Ready(true);
                }
                Poll::Ready(None) => return Poll::Ready(true),
                Poll::Pending => break,
            }
        }
        read_first = None;
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
                Poll::Ready(Some(Err(e))) => {
                    if failure_code(&e).is_some() {
                        let why = violation_after_close(ctx, &e);
                        violated = Some(why);
                    }
                    return Poll::Ready(true);
                }
                Poll::Ready(None) => return Poll::Ready(true),
                Poll::Pending => return Poll::Pending,
            }
        }
    });
    let finished = tokio::time::timeout_at(until, handshake)
        .await
        .unwrap_or(false);
    if let Some(why) = violated {
        if !sent {
            // The codec queued its close with the violation's code: let it reach the server.
            ws.linger(Instant::now() + LINGER).await;
        }
        return Goodbye::Violated(why);
    }
    match first_close {
        Some(Some(code)) if code != NORMAL_CLOSE => Goodbye::ServerClosed(code),
        Some(_) => Goodbye::Answered,
        None if finished => Goodbye::Broken,
        None => Goodbye::Unanswered,
    }
}
