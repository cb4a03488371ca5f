//! A fanout's publisher (wsload's, one per topic): publishes on the topic's open-loop
//! schedule, each message stamped with its number and intended instant on the conductor's
//! clock, and counts the window's publishes.

use super::window::{Window, micros, tally};
use crate::behavior::beat::Beat;
use crate::behavior::read::{
    ReplyPace, answer_kind, converse, count_unsolicited, read, read_ready,
};
use crate::behavior::worker::{WorkerState, data_len, data_of};
use crate::behavior::write::write_reading;
use crate::connect::Ws;
use crate::conversation::{Delivery, Fill, Out, SendTime};
use crate::model::FanoutPlan;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::measure::Dropped;

/// A publisher of one topic: its sequence numbers and the window's publishes.
pub(super) struct Publisher {
    topic: u32,
    conn: u64,
    seq: u64,
    in_window: u64,
    /// How fast the connection's automatic replies go.
    pace: ReplyPace,
    /// Its schedule's next publish, once it began (`Some(None)`: none left): kept across a
    /// drop, so a publisher back from one publishes what fell due meanwhile, late and
    /// stamped with when it was due.
    next: Option<Option<Instant>>,
}

impl Publisher {
    /// Connection `n`, the publisher of the topic its number says (numbered after every
    /// subscriber).
    pub(super) fn new(plan: &FanoutPlan, n: u64) -> Publisher {
        Publisher {
            topic: u32::try_from(n - u64::from(plan.subscribers)).unwrap_or(u32::MAX),
            conn: n,
            seq: 0,
            in_window: 0,
            pace: ReplyPace::default(),
            next: None,
        }
    }

    pub(super) fn topic(&self) -> u32 {
        self.topic
    }

    /// Publishes on the topic's schedule until the window's end: each message carries the
    /// topic's next number and its intended instant on the conductor's clock. Late messages
    /// go out at once, stamped with the instant they were due (coordinated omission).
    pub(super) async fn publish(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        window: &Window,
        message: &Out,
        beat: &mut Beat,
    ) -> Result<(), Dropped> {
        let schedule = plan
            .schedule
            .for_connection(u64::from(self.topic), plan.spec.topics);
        let origin = ctx.start;
        let mut due = *self.next.get_or_insert_with(|| schedule.first(origin));
        let (conn, mut pace) = (self.conn, self.pace);
        let mut on_read = |ws: &mut Ws, m: &Message| heard(ws, ctx, conn, &mut pace, m);
        loop {
            let now = Instant::now();
            if now >= ctx.deadline {
                return Ok(());
            }
            if let Some(m) = beat.take(ctx, conn) {
                write_reading(ws, ctx, Some(m), true, None, &mut on_read).await?;
            }
            // A burst is kept only once flushed: queued messages reach the socket at the
            // flush, where a drop shows, so one that fails takes the whole burst back and the
            // publisher, back, publishes it again under the same numbers (a number never
            // published would be a gap in every subscriber's deliveries). A burst cut by a
            // drop part-way may so reach a subscriber twice: counted as duplicates.
            let kept = (self.seq, self.next, self.in_window);
            let mut burst = 0u32;
            let mut wrote = Ok(());
            while let Some(t) = due
                && t <= now
                && burst < 1024
            {
                self.seq += 1;
                let at = ctx.start_on_conductor_us + micros(t.saturating_duration_since(origin));
                let fill = Fill {
                    conn,
                    seq: self.seq,
                    size: ctx.size,
                };
                let msg = message.message_at(
                    &mut ctx.scratch.arena.borrow_mut(),
                    &fill,
                    &SendTime::from_micros(at),
                );
                let len = data_len(&msg).unwrap_or(0);
                wrote = write_reading(ws, ctx, Some(msg), false, None, &mut on_read).await;
                if wrote.is_err() {
                    break;
                }
                ctx.sent(t, 1, len);
                if window.holds(at) {
                    self.in_window += 1;
                }
                burst += 1;
                due = schedule.next(origin, t, ctx.deadline);
                self.next = Some(due);
            }
            if wrote.is_ok() && burst > 0 {
                wrote = write_reading(ws, ctx, None, true, None, &mut on_read).await;
            }
            if let Err(why) = wrote {
                (self.seq, self.next, self.in_window) = kept;
                return Err(why);
            }
            let wake = beat.wake(due.map_or(ctx.deadline, |t| t.min(ctx.deadline)));
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                r = read(ws, ctx) => {
                    on_read(ws, &r?)?;
                    while Instant::now() < wake
                        && let Some(r) = read_ready(ws, ctx)
                    {
                        on_read(ws, &r?)?;
                    }
                }
            }
        }
    }

    /// What the server sent a publisher, before the start or in its measured phase.
    pub(super) fn heard(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        m: &Message,
    ) -> Result<(), Dropped> {
        heard(ws, ctx, self.conn, &mut self.pace, m)
    }

    pub(super) fn settle(&self, ctx: &WorkerState, plan: &FanoutPlan) {
        let mut m = ctx.stats.borrow_mut();
        if let Some(t) = tally(&mut m, plan).topics.get_mut(self.topic as usize) {
            t.published += self.in_window;
        }
    }
}
/// A publisher's read: the conversation's (a heartbeat answered), a delivery (a server that
/// broadcasts every publish to every connection sends the publisher its own and the
/// others': counted by the subscribers, not here), or unsolicited.
pub(super) fn heard(
    ws: &mut Ws,
    ctx: &WorkerState,
    conn: u64,
    pace: &mut ReplyPace,
    m: &Message,
) -> Result<(), Dropped> {
    let Some((text, data)) = data_of(m) else {
        return Ok(());
    };
    if converse(ws, ctx, conn, pace, m)? {
        return Ok(());
    }
    let delivered = ctx.script.delivery().is_some_and(|rule| {
        !matches!(rule.read(text, data, &mut Default::default()), Delivery::No)
    });
    if !delivered {
        count_unsolicited(ctx, Instant::now(), answer_kind(m), m);
    }
    Ok(())
}
