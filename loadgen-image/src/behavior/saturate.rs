//! The counting loop (throughput, payloadMatrix, formatComparison): bursts of the measured
//! message written straight into the worker's write buffer, at most a window of them
//! unanswered when the server answers, answers counted per read without building messages.

use super::answered::Answered;
use super::read::{ReplyPace, account, count_unsolicited, drop_of, reply};
use super::sender::Sender;
use super::stall::{self, Stall, Stalled};
use super::worker::WorkerState;
use crate::connect::Ws;
use crate::conversation::{Fill, Incoming, Out, Recognised};
use std::task::Poll;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use wsload_report::measure::{Dropped, FrameKind, FrameTally, NumberField, PushTallies};
use wsload_ws::Recv;

/// What a counting loop has queued and had answered. An answer is recognised by the answer
/// rule, by the `${seq}` it carries (one of those queued, answered once: a copy is no answer)
/// or in order, and never more of them are counted than were queued: answers beyond that are
/// copies.
struct Echoes {
    /// Whether the server answers at all (a window is kept): if not, every frame is
    /// unsolicited.
    awaited: bool,
    queued: u64,
    echoed: u64,
    /// Which messages, by `${seq}`, were answered.
    answered: Answered,
    /// How fast the connection's automatic replies go.
    pace: ReplyPace,
}

/// What the conversation took out of one counting read: replies due and pushes (by rule),
/// and how much of the unsolicited tallies they are.
#[derive(Default)]
struct Taken {
    replies: Vec<usize>,
    pushed: bool,
    pushes: PushTallies,
    text: FrameTally,
    binary: FrameTally,
    /// Answers to messages answered before.
    copies: u64,
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

/// How a counting read reads its frames: whether answers are awaited, how many messages were
/// queued, and the measured message when its echoes are read the short way first (with the
/// kind of frame they come in).
#[derive(Clone, Copy)]
struct Reading<'a> {
    awaited: bool,
    queued: u64,
    short: Option<(&'a Out, bool)>,
}

/// Whether the frame is an answer in a counting read.
#[inline]
fn counted_answer(
    ctx: &WorkerState,
    reading: Reading<'_>,
    answered: &mut Answered,
    taken: &mut Taken,
    text: bool,
    data: &[u8],
) -> bool {
    // The echo conversation's (throughput's) answers, nearly every frame: their `${seq}` read
    // in place without the rules and the general walk (a `${seq}` of the short way never
    // wraps; none was 0 or above the last queued).
    if let Some((out, is_text)) = reading.short
        && text == is_text
        && let Some(seq) = out.short_seq(data)
    {
        return first_answer(
            answered,
            taken,
            (1..=reading.queued).contains(&seq).then_some(seq),
            text,
            data,
        );
    }
    slow_answer(ctx, reading, answered, taken, text, data)
}

/// Whether the answer to message `seq` (`None`: one never sent) counts: the first to it does,
/// a copy is counted apart.
#[inline]
fn first_answer(
    answered: &mut Answered,
    taken: &mut Taken,
    seq: Option<u64>,
    text: bool,
    data: &[u8],
) -> bool {
    match seq {
        Some(seq) if answered.first(seq) => true,
        Some(_) => {
            taken.copies += 1;
            taken.add(text, data.len());
            false
        }
        None => false,
    }
}

/// [`counted_answer`] for any conversation: the reply and push rules first, then the answer
/// rule.
#[inline(never)]
fn slow_answer(
    ctx: &WorkerState,
    reading: Reading<'_>,
    answered: &mut Answered,
    taken: &mut Taken,
    text: bool,
    data: &[u8],
) -> bool {
    let Reading {
        awaited, queued, ..
    } = reading;
    let script = &*ctx.script;
    match script.incoming(text, data) {
        Incoming::Reply(i) => {
            taken.replies.push(i);
            taken.add(text, data.len());
            return false;
        }
        Incoming::Push(rule) => {
            // Fewer rules than the array holds: the script refuses more.
            if let Some(t) = taken.pushes.get_mut(rule) {
                t.frames += 1;
                t.bytes += data.len() as u64;
                taken.pushed = true;
            }
            taken.add(text, data.len());
            return false;
        }
        Incoming::Other => {}
    }
    if !awaited {
        return false;
    }
    let recognised = script.recognise_with(text, data, &mut ctx.scratch.memo.borrow_mut());
    match recognised {
        Recognised::Id(id) => {
            first_answer(answered, taken, script.sent_seq(id, queued), text, data)
        }
        Recognised::Next => true,
        Recognised::Unreadable => {
            // Counted by its field, so neither an answer nor unsolicited.
            ctx.unreadable(NumberField::AnswerId, || {
                script.unreadable_answer(text, data)
            });
            taken.add(text, data.len());
            false
        }
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
    let short = ctx.script.short_echo().filter(|_| awaited);
    let reading = Reading {
        awaited,
        queued: echoes.queued,
        short: short.map(|out| (out, out.is_text())),
    };
    let answered = &mut echoes.answered;
    let mut is_echo =
        |text: bool, data: &[u8]| counted_answer(ctx, reading, answered, &mut taken, text, data);
    let polled = std::task::ready!(ws.poll_recv(cx, &mut is_echo));
    // A reply loop ends the connection once what this read took is counted.
    let conversed = converse_counted(ws, ctx, &taken, &mut echoes.pace);
    let read = match polled {
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
            // Answers beyond those outstanding (a message alike every time, so without an
            // id) are copies, as are those whose id was answered before.
            ctx.copies(now, expected.frames - got + taken.copies);
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
    };
    Poll::Ready(conversed.and(read))
}

/// The replies and pushes a counting read took: replies queued (the next read pushes them
/// out), pushes counted by rule. `Err(ReplyLoop)` when the replies ran away.
fn converse_counted(
    ws: &mut Ws,
    ctx: &WorkerState,
    taken: &Taken,
    pace: &mut ReplyPace,
) -> Result<(), Dropped> {
    if taken.pushed {
        let now = Instant::now();
        for (rule, t) in taken.pushes.iter().enumerate() {
            ctx.pushed(now, rule, t.frames, t.bytes);
        }
    }
    for &i in &taken.replies {
        reply(ws, ctx, pace, i, &Fill::default())?;
    }
    Ok(())
}

/// How a counting loop's write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrote {
    /// Everything asked for went out.
    Out,
    /// The deadline came first: the server was taking what was queued slower than it was
    /// written, or not at all (but for less than `writeTimeout`). What is still queued is not
    /// sent, and the cell ends on time.
    Cut,
}

/// Writes what is queued (all of it if `all`, else until below the soft limit), reading
/// echoes whenever the write has to wait (see `write_reading`), until the deadline at most;
/// `stall` watches the wait (`server_not_reading` after `writeTimeout` with nothing written).
async fn write_out_counting(
    ws: &mut Ws,
    ctx: &WorkerState,
    all: bool,
    echoes: &mut Echoes,
    stall: &mut Stall,
) -> Result<Wrote, Dropped> {
    std::future::poll_fn(|cx| {
        loop {
            let step = if all {
                ws.poll_flush_all(cx)
            } else {
                ws.poll_room(cx)
            };
            match step {
                Poll::Ready(Ok(())) => return Poll::Ready(Ok(Wrote::Out)),
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(if matches!(e, WsError::Io(_)) {
                        Dropped::Reset
                    } else {
                        Dropped::Error
                    }));
                }
                Poll::Pending => match poll_echoes(ws, ctx, echoes, cx) {
                    // A server that sends without end must not keep the write waiting past
                    // the deadline.
                    Poll::Ready(Ok(_)) if Instant::now() >= ctx.deadline => {
                        return Poll::Ready(Ok(Wrote::Cut));
                    }
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(why)) => return Poll::Ready(Err(why)),
                    Poll::Pending => {
                        return match std::task::ready!(stall.poll_stalled(
                            ws,
                            ctx.write_timeout,
                            cx
                        )) {
                            Stalled::NoProgress => {
                                ctx.witness(Dropped::ServerNotReading, || {
                                    stall::evidence(ws, ctx.write_timeout)
                                });
                                Poll::Ready(Err(Dropped::ServerNotReading))
                            }
                            Stalled::Cutoff => Poll::Ready(Ok(Wrote::Cut)),
                        };
                    }
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
pub(super) async fn saturate(
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
        answered: Answered::default(),
        pace: ReplyPace::default(),
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
        let mut queued = 0u32;
        sender.burst();
        // Bounded by the deadline: a server that reads slowly, or has stopped reading for
        // less than `writeTimeout`, does not hold the cell past its duration.
        let mut stall = Stall::until(Some(ctx.deadline));
        let written = async {
            for _ in 0..n {
                if (per_message || ws.over_soft_limit())
                    && write_out_counting(ws, ctx, per_message, &mut echoes, &mut stall).await?
                        == Wrote::Cut
                {
                    return Ok(Wrote::Cut);
                }
                bytes += sender.queue(ws, ctx);
                queued += 1;
                echoes.queued += 1;
            }
            write_out_counting(ws, ctx, true, &mut echoes, &mut stall).await
        }
        .await;
        if written? == Wrote::Cut {
            // What was queued and not begun is taken back and never sent: what counts as sent
            // is what the server can have received (the frame being written is finished
            // before the close).
            let waiting = ws.queued();
            if waiting > 0 {
                ctx.unwritten(waiting, || stall::evidence_waiting(ws, stall.idle()));
            }
            let (frames, payload) = ws.withdraw_unwritten();
            ctx.sent(
                now,
                u64::from(queued).saturating_sub(frames),
                bytes.saturating_sub(payload),
            );
            break;
        }
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
