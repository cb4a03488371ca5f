//! Writing a connection: by hand-made futures (the combinators' hold the message twice, in
//! every held connection's state), a wait watched for a server that stopped reading
//! ([`super::stall`]), and reads taken while a write waits.

use super::read::account;
use super::stall::{self, Stall, Stalled};
use super::worker::WorkerState;
use crate::connect::Ws;
use futures_util::{SinkExt, StreamExt};
use std::task::Poll;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use wsload_report::measure::Dropped;

/// What a failed write ends the connection with.
pub(super) fn write_drop(e: WsError) -> Dropped {
    if matches!(e, WsError::Io(_)) {
        Dropped::Reset
    } else {
        Dropped::Error
    }
}

/// A write step is waiting on the socket: still `Pending` while the server may read, and
/// `server_not_reading` (with the socket's state as evidence) once nothing was written for
/// `writeTimeout`, or at the watch's cutoff.
pub(super) fn stalled(
    ws: &mut Ws,
    ctx: &WorkerState,
    stall: &mut Stall,
    cx: &mut std::task::Context<'_>,
) -> Poll<Result<(), Dropped>> {
    match std::task::ready!(stall.poll_stalled(ws, ctx.write_timeout, cx)) {
        Stalled::NoProgress => ctx.witness(Dropped::ServerNotReading, || {
            stall::evidence(ws, ctx.write_timeout)
        }),
        Stalled::Cutoff => ctx.witness(Dropped::ServerNotReading, || stall::evidence_at_cutoff(ws)),
    }
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

/// Queues `msg` (`feed`), writing first if enough is queued; a wait is watched for a stall.
pub(super) async fn feed(ws: &mut Ws, ctx: &WorkerState, msg: Message) -> Result<(), Dropped> {
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
pub(super) async fn flush(ws: &mut Ws, ctx: &WorkerState) -> Result<(), Dropped> {
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
/// every message read is counted and handed to `on_read`, whose `Err` ends the connection.
///
/// A server that answers (an echo server) stops reading us once its answers fill the socket
/// towards us; a sender that does not read while its own write waits then waits forever
/// (seen with 64 KiB messages at a few thousand per second, or a 64-message window of
/// 256 KiB ones). Reading while waiting lets both sides move.
///
/// With `until`, the write may not wait past it (`server_not_reading` then, the evidence
/// saying so): a server flooding us while it reads nothing always leaves something to read,
/// so the stall alone would never end a wait that would outlast the cell.
pub(super) async fn write_reading(
    ws: &mut Ws,
    ctx: &WorkerState,
    msg: Option<Message>,
    flush: bool,
    until: Option<Instant>,
    on_read: &mut dyn FnMut(&mut Ws, &Message) -> Result<(), Dropped>,
) -> Result<(), Dropped> {
    let mut msg = msg;
    let mut stall = Stall::until(until);
    std::future::poll_fn(|cx| poll_write_reading(ws, ctx, &mut msg, flush, &mut stall, on_read, cx))
        .await
}

/// One poll of [`write_reading`], for the hand-made futures that keep its state themselves
/// (a ping's, in every held connection's state).
pub(super) fn poll_write_reading(
    ws: &mut Ws,
    ctx: &WorkerState,
    msg: &mut Option<Message>,
    flush: bool,
    stall: &mut Stall,
    on_read: &mut dyn FnMut(&mut Ws, &Message) -> Result<(), Dropped>,
    cx: &mut std::task::Context<'_>,
) -> Poll<Result<(), Dropped>> {
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
                Poll::Ready(item) => {
                    if let Err(why) = account(ctx, item).and_then(|m| on_read(ws, &m)) {
                        return Poll::Ready(Err(why));
                    }
                }
                Poll::Pending => return stalled(ws, ctx, stall, cx),
            },
        }
    }
}
