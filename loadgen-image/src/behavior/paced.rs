//! The open loop (echo, constantRate): messages leave at their scheduled instants whatever the
//! answers do, and each answer is timed from the instant its message was due.

use super::pinger::Pinger;
use super::read::{
    answer_kind, converse, count_unreadable_answer, count_unsolicited, read, read_ready,
};
use super::worker::{WorkerState, data_len};
use super::write::write_reading;
use crate::connect::Ws;
use crate::conversation::answer::Answer;
use crate::model::Schedule;
use std::collections::VecDeque;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::measure::Dropped;
use wsload_spec::PingKind;

/// Open loop: messages leave at their scheduled instants whatever the answers do. When the
/// sender falls behind (a stalled server, a full socket), the late messages go out at once
/// and their latency still counts from the instant they were due, so a stall shows in the
/// percentiles instead of being omitted (coordinated omission).
pub(super) async fn paced(
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
            write_reading(ws, ctx, Some(msg), per_message, None, &mut |ws, m| {
                settle(ws, ctx, &mut pinger, m, pending)
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
            write_reading(ws, ctx, None, true, None, &mut |ws, m| {
                settle(ws, ctx, &mut pinger, m, pending)
            })
            .await?;
        }
        let wake = due.map_or(ctx.deadline, |t| t.min(ctx.deadline));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            r = read(ws, ctx) => {
                let msg = r?;
                settle(ws, ctx, &mut pinger, &msg, pending)?;
                // What else is buffered, but not past the next message due: a server that
                // always has more must not hold the schedule up.
                while Instant::now() < wake
                    && let Some(r) = read_ready(ws, ctx)
                {
                    settle(ws, ctx, &mut pinger, &r?, pending)?;
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
            Ok(r) => settle(ws, ctx, &mut pinger, &r?, pending)?,
        }
    }
    Ok(())
}

/// Matches an answer to the outstanding message with its id (a copy of a message without an
/// id to the oldest); older ones it skipped were lost. Anything else is unsolicited, and an
/// answer to a message already given up on is mismatched. `Err` when the conversation ends
/// the connection (its replies ran away).
fn settle(
    ws: &mut Ws,
    ctx: &WorkerState,
    pinger: &mut Pinger,
    msg: &Message,
    pending: &mut VecDeque<(u64, Instant, Instant)>,
) -> Result<(), Dropped> {
    if converse(ws, ctx, pinger.out.conn, &mut pinger.pace, msg)? {
        return Ok(());
    }
    settle_answer(ctx, pinger, msg, pending);
    Ok(())
}

/// What a message that is not the conversation's is to the messages outstanding.
fn settle_answer(
    ctx: &WorkerState,
    pinger: &Pinger,
    msg: &Message,
    pending: &mut VecDeque<(u64, Instant, Instant)>,
) {
    let now = Instant::now();
    let id = match pinger.answer(msg, ctx) {
        Answer::Control => return,
        Answer::Unsolicited(kind) => return count_unsolicited(ctx, now, kind, msg),
        Answer::Unreadable => return count_unreadable_answer(ctx, msg),
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
