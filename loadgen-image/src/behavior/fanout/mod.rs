//! The fanout scenario's connections: subscribers that count and time what their topics
//! deliver, and wsload's publishers, one per topic, on an open-loop schedule.
//!
//! Only what was published in the measured window counts. Every process decides it alike from
//! the publish instant a message carries, on the conductor's clock: a publisher stamps each
//! message with its intended instant there (its clock's offset taken out), and the window is
//! the cell's start on that clock plus the warm-up, for the cell's duration. A publisher counts
//! the window's publishes of its topic; a subscriber counts what it received of them; the
//! conductor multiplies each topic's publishes by its subscribers (`wsload_report::fanout`).
//!
//! A fanout's connections are read from their open ([`Serving`]): what a subscriber receives
//! before the measured phase is counted outside the window, like what was published before
//! it and arrives later.

//!
//! [`subscriber`] and [`publisher`] are the two parts a connection plays; [`window`] is the
//! measured window they count by, and the worker's tallies they add to.

pub mod publisher;
pub mod subscriber;
pub mod window;

use super::beat::Beat;
use super::end::finish;
use super::read::{read, read_ready};
use super::reconnect::{come_back, shut};
use super::serving::Serving;
use super::worker::{WorkerState, ms_since};
use super::write::write_reading;
use crate::connect::{Role, Ws};
use crate::conversation::Out;
use crate::model::{Behavior, Cell, FanoutPlan};
use publisher::Publisher;
use std::rc::Rc;
use std::sync::Arc;
use subscriber::Subscriber;
use tokio_tungstenite::tungstenite::Message;
use window::Window;
use wsload_report::fanout::Fanout;
use wsload_report::measure::{Dropped, Measure};

/// The number and part of the cell's `i`-th connection of this process: its subscribers
/// first, then its publishers.
pub fn role(plan: &FanoutPlan, cell: &Cell, i: u32) -> (u64, Role) {
    let name = |t: u32| bytes::Bytes::from(plan.spec.topic_name(t));
    match i.checked_sub(cell.connections) {
        None => {
            let n = cell.first + u64::from(i);
            (
                n,
                Role::Subscriber(plan.spec.topics_of(n).map(name).collect()),
            )
        }
        Some(p) => {
            let topic = plan.publishing[p as usize];
            (plan.publisher_conn(topic), Role::Publisher(name(topic)))
        }
    }
}

/// Counts a publisher connection that opened, or failed to.
pub fn publisher_opened(m: &mut Measure, ok: bool) {
    let f = m.counts.fanout.get_or_insert_with(Fanout::default);
    if ok {
        f.publishers += 1;
    } else {
        f.publishers_failed += 1;
    }
}

/// Connection `n`'s task in a fanout cell: served from its open until the measured phase
/// begins, its measured phase ([`Part::run`]), then its close, counted as `behavior::run`
/// counts the others'. Dropped, it comes back as the cell's policy says ([`come_back`]),
/// subscribed again, and goes on where it was: a subscriber's sequences and a publisher's
/// schedule are kept, so what a subscriber missed meanwhile shows as its gaps.
#[allow(clippy::manual_async_fn)] // as behavior::run: the arguments are stored once
pub(super) fn task(
    mut ws: Ws,
    n: u64,
    serving: Rc<Serving>,
    behavior: Behavior,
    mut message: Arc<Out>,
    mut vars: Vec<bytes::Bytes>,
) -> impl std::future::Future<Output = ()> {
    async move {
        // Serving::open gives a hold's connections `held`.
        let Behavior::Fanout(plan) = &behavior else {
            return;
        };
        let mut part = Part::of(plan, n);
        if let Part::Subscriber(sub) = &mut part
            && !vars.is_empty()
            && serving.early.script.resume_from.is_some()
        {
            sub.keep_position();
        }
        // One heartbeat schedule over the connection's life, before and in the window.
        let mut beat = Beat::start(&serving.early);
        let early = Box::pin(part.serve(&mut ws, &serving, plan, n, &mut beat)).await;
        let ctx = serving.measured().await;
        let ctx = &*ctx;
        let mut began = ms_since(ctx.start);
        let mut from = early;
        // Where a `close` disruption may pick it from: the phase's start, or its return.
        let mut resumed = ctx.measure_from;
        loop {
            let ended = match from {
                Ok(()) => {
                    let close = close_at(ctx, &part, n, resumed);
                    Box::pin(part.run(&mut ws, ctx, plan, &message, &mut beat, close)).await
                }
                Err(why) => Err(why),
            };
            Box::pin(finish(&mut ws, ctx, &behavior, ended, began)).await;
            // A drop in the drain (a subscriber reads past the deadline) is past every
            // window: no reconnect to count it in.
            let (Err(_), Some(comeback)) = (ended, &ctx.comeback) else {
                part.settle(ctx, plan, ended);
                return;
            };
            if tokio::time::Instant::now() >= ctx.deadline {
                part.settle(ctx, plan, ended);
                return;
            }
            shut(&ws);
            let down = crate::machine::clock::conductor_micros();
            let role = part.role(plan);
            let resume = part.resume_with(&ctx.script, &vars);
            let (window, back) = Box::pin(come_back(
                &serving,
                ctx,
                comeback,
                n,
                &role,
                resume.as_deref(),
            ))
            .await;
            part.dropped(ctx, window);
            let Some(back) = back else {
                part.settle(ctx, plan, ended);
                return;
            };
            ws = back.ws;
            // What its steps on open captured this time: a publisher's message may carry it.
            message = serving.message_for(&back.vars);
            if !vars.is_empty() {
                vars = back.vars;
            }
            began = ms_since(ctx.start);
            resumed = tokio::time::Instant::now();
            let away = (resume.is_some(), down, window);
            from = part.back(&mut ws, ctx, plan, away, &back.early);
        }
    }
}

/// When a `close` disruption at or after `from` drops subscriber `n`, if one picks it. A
/// fanout's closes pick among its subscribers: a publisher dropped would leave a gap in
/// every subscriber of its topic, and the figures are of the ones dropped.
fn close_at(
    ctx: &WorkerState,
    part: &Part,
    n: u64,
    from: tokio::time::Instant,
) -> Option<tokio::time::Instant> {
    let Part::Subscriber(_) = part else {
        return None;
    };
    let after = from.saturating_duration_since(ctx.measure_from);
    let at = ctx.comeback.as_ref()?.next_close(n, after)?;
    Some(ctx.measure_from + at)
}

/// A connection's part in the fanout.
enum Part {
    Subscriber(Subscriber),
    Publisher(Publisher),
}

impl Part {
    fn of(plan: &FanoutPlan, n: u64) -> Part {
        if n < u64::from(plan.subscribers) {
            Part::Subscriber(Subscriber::new(plan, n))
        } else {
            Part::Publisher(Publisher::new(plan, n))
        }
    }

    /// Reads until the measured phase begins, answering what the conversation answers (a
    /// server's heartbeat) and sending the conversation's own heartbeat; a subscriber's
    /// deliveries then are outside the window, as those published before it that arrive
    /// later are. `Err` when the connection ended meanwhile.
    async fn serve(
        &mut self,
        ws: &mut Ws,
        serving: &Serving,
        plan: &FanoutPlan,
        n: u64,
        beat: &mut Beat,
    ) -> Result<(), Dropped> {
        let ctx = &serving.early;
        let begun = serving.begun.notified();
        tokio::pin!(begun);
        loop {
            if serving.measured.get().is_some() {
                return Ok(());
            }
            if let Some(m) = beat.take(ctx, n) {
                let mut heard = |ws: &mut Ws, m: &Message| self.before_start(ws, ctx, plan, m);
                write_reading(ws, ctx, Some(m), true, None, &mut heard).await?;
            }
            let due = beat.due();
            tokio::select! {
                biased;
                _ = &mut begun => {}
                () = async {
                    match due {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {}
                r = read(ws, ctx) => {
                    self.before_start(ws, ctx, plan, &r?)?;
                    while serving.measured.get().is_none()
                        && let Some(r) = read_ready(ws, ctx)
                    {
                        self.before_start(ws, ctx, plan, &r?)?;
                        // Taking turns with the other connections (see Subscriber::receive).
                        tokio::task::consume_budget().await;
                    }
                }
            }
        }
    }

    fn before_start(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        msg: &Message,
    ) -> Result<(), Dropped> {
        match self {
            Part::Subscriber(sub) => sub.take(ws, ctx, plan, &Window::NONE, msg),
            Part::Publisher(p) => p.heard(ws, ctx, msg),
        }
    }

    /// How it opens: subscribed to its topics, or as its topic's publisher.
    fn role(&self, plan: &FanoutPlan) -> Role {
        let name = |t: u32| bytes::Bytes::from(plan.spec.topic_name(t));
        match self {
            Part::Subscriber(sub) => Role::Subscriber(sub.topics().map(name).collect()),
            Part::Publisher(p) => Role::Publisher(name(p.topic())),
        }
    }

    /// The variables its `resume` steps start from, when it comes back resuming: a
    /// subscriber's, with a position to resume from if its deliveries carry one.
    fn resume_with(
        &self,
        script: &crate::conversation::Script,
        vars: &[bytes::Bytes],
    ) -> Option<Vec<bytes::Bytes>> {
        match self {
            Part::Subscriber(sub) if !script.resume.is_empty() => sub.resume_with(script, vars),
            _ => None,
        }
    }

    /// Back after its drop at `down` (conductor microseconds) in window `window`, resumed or
    /// not: a subscriber reads first what its steps read past.
    fn back(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        away: (bool, u64, usize),
        early: &crate::connect::early::Early,
    ) -> Result<(), Dropped> {
        let Part::Subscriber(sub) = self else {
            return Ok(());
        };
        sub.back(away);
        let measured = Window::of(ctx);
        for m in &early.msgs {
            sub.take(ws, ctx, plan, &measured, m)?;
        }
        Ok(())
    }

    /// Dropped in reconnect window `window`.
    fn dropped(&mut self, ctx: &WorkerState, window: usize) {
        if let Part::Subscriber(sub) = self {
            sub.dropped(ctx, window);
        }
    }

    /// The measured phase: a subscriber's (until `close`, if a disruption picks it) or a
    /// publisher's.
    async fn run(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        message: &Out,
        beat: &mut Beat,
        close: Option<tokio::time::Instant>,
    ) -> Result<(), Dropped> {
        let window = Window::of(ctx);
        match self {
            Part::Subscriber(sub) => sub.receive(ws, ctx, plan, &window, beat, close).await,
            Part::Publisher(p) => p.publish(ws, ctx, plan, &window, message, beat).await,
        }
    }

    /// Adds what the connection counted to its worker's figures.
    fn settle(&mut self, ctx: &WorkerState, plan: &FanoutPlan, ended: Result<(), Dropped>) {
        match self {
            Part::Subscriber(sub) => sub.settle(ctx, plan),
            Part::Publisher(p) => {
                if ended.is_err() {
                    publisher_opened(&mut ctx.stats.borrow_mut(), false);
                }
                p.settle(ctx, plan);
            }
        }
    }
}
