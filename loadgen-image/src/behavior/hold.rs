//! Holding a connection (sustainedHold, connectionLimit's probes): open until the deadline,
//! pinging every interval and sending the conversation's heartbeat, everything else read and
//! answered. The state of every held connection: kept small (see `hold`). A held connection
//! is served from its open ([`held`], [`keep_until`]), not only from the measured phase.

use super::beat::Beat;
use super::end::finish;
use super::pinger::{
    Pinger, Reply, answer_due, cutoff, may_send, poll_answer, send_ping, settle_ping,
};
use super::read::{ReplyPace, account, converse, count_unsolicited, heard_meanwhile};
use super::reconnect::{come_back, shut};
use super::serving::Serving;
use super::worker::{WorkerState, ms_since};
use super::write::{write_drop, write_reading};
use crate::connect::{Role, Ws};
use crate::conversation::answer::{self, Answer};
use crate::conversation::{Fill, Out};
use crate::model::PingCfg;
use futures_util::{SinkExt, StreamExt};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::measure::Dropped;

/// Stays open until the deadline, reading (data counted) and pinging every `every`.
///
/// Written as two polled loops around one timer (the next ping, then the answer's timeout)
/// rather than a `select!` and a ping future: this is the state of every held connection's
/// task, ~330 bytes inline instead of a 680-byte box, and a ping round allocates nothing.
/// Not an `async fn`, for the reason `behavior::run` gives.
#[allow(clippy::manual_async_fn)] // deliberately not an async fn: see above
///
/// `beat`: when the conversation's heartbeat is next due (`since`), if the connection kept it
/// before the phase (`keep_until`): its schedule goes on, rather than restarting an interval
/// in (a gap of up to two intervals, past a server's deadline: Engine.IO 3 closed connections
/// that took long to open). `NEVER`: an interval in. (Milliseconds, not an `Instant`: this is
/// the state of every held connection.)
///
/// `resumed`: the connection came back after a drop: a `close` disruption picks it only at
/// instants after now. Otherwise every close of the phase does, however late the hold began.
pub(super) fn hold<'a>(
    ws: &'a mut Ws,
    ctx: &'a WorkerState,
    every: Option<Duration>,
    mut pinger: Pinger,
    beat: u32,
    resumed: bool,
) -> impl std::future::Future<Output = Result<(), Dropped>> + 'a {
    async move {
        // The conversation's heartbeat shares the pings' timer, which wakes for whichever is
        // due first. Both are kept as milliseconds from the phase's start: this is the state
        // of every held connection, and an `Instant` is 16 bytes.
        let now = Instant::now();
        // Every connection's first ping a share of the interval in (its number's among the
        // process's connections): begun at one instant, 300,000 held connections pinging
        // together put a 300,000-ping burst before the server every interval (p99 22 s).
        // (In a block: nothing of it outlives the computation in the task's state.)
        let mut next_ping = {
            let connections = u64::from(ctx.connections.max(1));
            // In (0, 1]: a lone connection pings one interval in, as every one used to.
            let phase = (pinger.conn() % connections + 1) as f64 / connections as f64;
            since(
                ctx,
                every.map_or(ctx.deadline, |e| (now + e.mul_f64(phase)).min(ctx.deadline)),
            )
        };
        let mut next_beat = match (beat_every(ctx), beat) {
            (None, _) => NEVER,
            (Some(e), NEVER) => since(ctx, now + e),
            (Some(_), kept) => kept,
        };
        // A `close` disruption that picks this connection (spec.disruptions): the third thing
        // the timer wakes for.
        let next_close = close_due(ctx, pinger.conn(), if resumed { now } else { ctx.start });
        let mut timer = std::pin::pin!(tokio::time::sleep_until(at(
            ctx,
            next_ping.min(next_beat).min(next_close)
        )));
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
                            if !converse(ws, ctx, pinger.out.conn, &mut pinger.pace, &msg)?
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
            if now >= at(ctx, next_close) {
                // Dropped as a client that vanished: no close frame, the socket just closed.
                return Err(Dropped::Disrupted);
            }
            // (No binding of the interval here, nor below: its storage would last across the
            // await, in every held connection's state.)
            if now >= at(ctx, next_beat) && beat_every(ctx).is_some() {
                next_beat = beat_every(ctx).map_or(NEVER, |e| since(ctx, now + e));
                Box::pin(send_beat(ws, ctx, &mut pinger)).await?;
            }
            if every.is_some() && now >= at(ctx, next_ping) && !may_send(ctx, now) {
                // Too late for a ping's answer: the deadline is the next thing to wake for.
                next_ping = since(ctx, ctx.deadline);
            } else if every.is_some() && now >= at(ctx, next_ping) {
                let (id, sent_at) = send_ping(ws, ctx, &mut pinger, Instant::now()).await?;
                if pinger.awaits(ctx) {
                    let reply = match beat_every(ctx) {
                        None => {
                            timer
                                .as_mut()
                                .reset(answer_due(ctx, sent_at, pinger.cfg.timeout));
                            std::future::poll_fn(|cx| {
                                poll_answer(ws, ctx, &mut pinger, id, sent_at, timer.as_mut(), cx)
                            })
                            .await
                        }
                        // Boxed, its arguments made in the call: a local here would keep
                        // its storage in every held connection's state across the await.
                        Some(_) => {
                            Box::pin(answer_beating(
                                ws,
                                ctx,
                                &mut pinger,
                                Sent { id, at: sent_at },
                                timer.as_mut(),
                                beat_every(ctx),
                                &mut next_beat,
                            ))
                            .await
                        }
                    };
                    settle_ping(ctx, sent_at, reply)?;
                }
                let due = every.map_or(ctx.deadline, |e| (Instant::now() + e).min(ctx.deadline));
                next_ping = since(ctx, due);
            }
            timer
                .as_mut()
                .reset(at(ctx, next_ping.min(next_beat).min(next_close)));
        }
    }
}

/// A ping sent: its id, and when it left.
struct Sent {
    id: u64,
    at: Instant,
}

/// Awaits the answer to ping `sent` as `poll_answer` does, the
/// conversation's heartbeat going on meanwhile (every `every`, next at `next_beat`): the timer
/// wakes for whichever comes first (a ping's timeout is longer than many a server's
/// keep-alive: Engine.IO 3's, MQTT's). Boxed by its caller: only a conversation with a
/// heartbeat pays for its state.
async fn answer_beating(
    ws: &mut Ws,
    ctx: &WorkerState,
    pinger: &mut Pinger,
    sent: Sent,
    mut timer: std::pin::Pin<&mut tokio::time::Sleep>,
    every: Option<Duration>,
    next_beat: &mut u32,
) -> Result<Reply, Dropped> {
    let Sent { id, at: sent_at } = sent;
    let due = answer_due(ctx, sent_at, pinger.cfg.timeout);
    let every = every.unwrap_or(Duration::MAX);
    loop {
        timer.as_mut().reset(due.min(at(ctx, *next_beat)));
        let reply = std::future::poll_fn(|cx| {
            poll_answer(ws, ctx, pinger, id, sent_at, timer.as_mut(), cx)
        })
        .await;
        let now = Instant::now();
        match reply {
            Ok(Reply::TimedOut | Reply::Cut) if now < due => {
                *next_beat = now.checked_add(every).map_or(NEVER, |t| since(ctx, t));
                send_beat(ws, ctx, pinger).await?;
            }
            // The wait's own end: cut by the cell's deadline, or timed out.
            Ok(Reply::TimedOut | Reply::Cut) => {
                let cut = due < sent_at + pinger.cfg.timeout;
                return Ok(if cut { Reply::Cut } else { Reply::TimedOut });
            }
            other => return other,
        }
    }
}

/// Sends the conversation's heartbeat, reading while the write waits. Boxed by its callers:
/// a heartbeat is rare, and its write's state would grow every held connection's task.
async fn send_beat(ws: &mut Ws, ctx: &WorkerState, pinger: &mut Pinger) -> Result<(), Dropped> {
    let Some((_, out)) = ctx.script.heartbeat() else {
        return Ok(());
    };
    let fill = Fill {
        conn: pinger.conn(),
        seq: 0,
        size: ctx.size,
    };
    let msg = out.message(&mut ctx.scratch.arena.borrow_mut(), &fill);
    let (conn, pace) = (pinger.out.conn, &mut pinger.pace);
    let mut heard = |ws: &mut Ws, m: &Message| heard_meanwhile(ws, ctx, conn, pace, m);
    write_reading(ws, ctx, Some(msg), true, cutoff(ctx), &mut heard).await
}

/// A held connection before the measured phase begins (`begun`), while the cell's other
/// connections still open: what the server sends is read and answered (a ping's pong, the
/// conversation's replies) and counted nowhere, every `every` an unsolicited pong (RFC
/// 6455 5.5.3: a heartbeat that wants no answer) tells a server that times idle connections
/// out that this one is alive, and the conversation's heartbeat goes out on its schedule. Left unread instead, the first connections of a long connect
/// phase met wsload-server's 60 s idle timeout (300,000 connections took four minutes to
/// open here) and the server's pings went unanswered. `Err`: the connection ended meanwhile.
#[allow(clippy::manual_async_fn)] // not an async fn: it would store `begun` twice (see `behavior::run`)
pub(super) fn keep_until<'a>(
    ws: &'a mut Ws,
    early: &'a WorkerState,
    conn: u64,
    every: Option<Duration>,
    conv: &'a mut Beat,
    pace: &'a mut ReplyPace,
    begun: impl std::future::Future + 'a,
) -> impl std::future::Future<Output = Result<(), Dropped>> + 'a {
    async move {
        let mut begun = std::pin::pin!(begun);
        // Two schedules on one timer: the unsolicited pong every `every`, and the
        // conversation's own heartbeat (an MQTT PINGREQ: a broker counts only its protocol's
        // packets against its keep-alive, not WebSocket pongs).
        let mut next_pong = every.map(|e| Instant::now() + e);
        let wake = |next_pong: Option<Instant>, conv: &Beat| {
            conv.wake(next_pong.unwrap_or(early.deadline))
        };
        let mut timer = std::pin::pin!(tokio::time::sleep_until(wake(next_pong, conv)));
        let mut beat_due = false;
        std::future::poll_fn(|cx| {
            loop {
                if begun.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Ok(()));
                }
                if let Poll::Ready(item) = ws.poll_next_unpin(cx) {
                    let msg = account(early, item)?;
                    if !converse(ws, early, conn, pace, &msg)?
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
                    let now = Instant::now();
                    // One at a time: when both are due, the timer fires again at once.
                    let msg = match conv.take(early, conn) {
                        Some(m) => Some(m),
                        None if next_pong.is_some_and(|t| now >= t) => {
                            next_pong = every.map(|e| now + e);
                            Some(Message::Pong(Default::default()))
                        }
                        None => None,
                    };
                    if let Some(m) = msg {
                        ws.start_send_unpin(m).map_err(write_drop)?;
                    }
                    beat_due = false;
                    timer.as_mut().reset(wake(next_pong, conv));
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

/// How often the conversation's heartbeat goes out, if it has one: read from the script
/// where needed rather than kept (16 bytes in every held connection's task).
fn beat_every(ctx: &WorkerState) -> Option<Duration> {
    ctx.script.heartbeat().map(|b| b.0)
}

/// When connection `conn` is next closed by a `close` disruption at or after `from`, as
/// `since` counts; `NEVER` when none picks it.
fn close_due(ctx: &WorkerState, conn: u64, from: Instant) -> u32 {
    let Some(comeback) = &ctx.comeback else {
        return NEVER;
    };
    let from = from.saturating_duration_since(ctx.measure_from);
    comeback
        .next_close(conn, from)
        .map_or(NEVER, |d| since(ctx, ctx.measure_from + d))
}

/// A hold's "not scheduled" (see `since`).
pub(super) const NEVER: u32 = u32::MAX;

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
/// A held connection from its open: kept alive while the rest open ([`keep_until`]), then
/// its measured hold and its close; dropped, it comes back as the cell's policy says
/// ([`come_back`]) and holds again, until the deadline. The stream stays in this task's
/// state, borrowed by each phase in turn: moved into `behavior::run` it would be stored twice
/// (rust-lang/rust#62958). Not an `async fn`, for the same reason.
#[allow(clippy::manual_async_fn)] // deliberately not an async fn: see above
pub(super) fn held(
    mut ws: Ws,
    n: u64,
    serving: Rc<Serving>,
    every: Option<Duration>,
    ping: PingCfg,
    message: Arc<Out>,
) -> impl Future<Output = ()> {
    async move {
        let begun = serving.measured();
        let mut beat = Beat::start(&serving.early);
        // One pace of automatic replies from the open: a loop that began while the tier
        // opened is not given a second bound's worth in the measured phase.
        let mut pinger = Pinger::new(ping, message, n);
        let early = keep_until(
            &mut ws,
            &serving.early,
            n,
            every,
            &mut beat,
            &mut pinger.pace,
            begun,
        )
        .await;
        let ctx = serving.measured().await;
        let ctx = &*ctx;
        let mut began = ms_since(ctx.start);
        // Where the hold begins: its heartbeat's schedule, or how it ended before it began.
        let mut from = early.map(|()| beat.due().map_or(NEVER, |t| since(ctx, t)));
        let mut resumed = false;
        loop {
            let ended = match from {
                Ok(beat) => hold(&mut ws, ctx, every, pinger, beat, resumed).await,
                Err(why) => Err(why),
            };
            Box::pin(finish(&mut ws, ctx, &serving.behavior, ended, began)).await;
            let (Err(_), Some(comeback)) = (ended, &ctx.comeback) else {
                return;
            };
            shut(&ws);
            // Down from here (its close done, if it had one to linger for) until it is back.
            // (No instant kept across `finish`: 16 bytes in every held connection's task.)
            let (_, Some(back)) =
                Box::pin(come_back(&serving, ctx, comeback, n, &Role::Any, None)).await
            else {
                return;
            };
            ws = back.ws;
            began = ms_since(ctx.start);
            pinger = Pinger::new(ping, serving.message_for(&back.vars), n);
            from = Ok(NEVER);
            resumed = true;
        }
    }
}
