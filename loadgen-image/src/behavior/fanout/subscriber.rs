//! A fanout's subscriber: counts and times what its topics deliver in the measured window,
//! by the sequence number and publish instant each delivery carries.

use super::window::{Window, tally};
use crate::behavior::beat::Beat;
use crate::behavior::read::{
    ReplyPace, answer_kind, converse, count_unsolicited, read, read_ready,
};
use crate::behavior::worker::{WorkerState, data_of};
use crate::behavior::write::write_reading;
use crate::connect::Ws;
use crate::conversation::{Delivery, Published};
use crate::machine::clock;
use crate::model::FanoutPlan;
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::fanout::{Sequence, SubscriberTally, keep_slowest};
use wsload_report::measure::{Dropped, NumberField};
use wsload_spec::json_path::Memo;

/// One of a subscriber's topics, as it received it.
struct Stream {
    topic: u32,
    seq: Sequence,
    /// The lowest and highest number of the window received (0: none).
    first: u64,
    last: u64,
    max_latency_us: u64,
}

/// What a subscriber counts in its task; added to its worker's figures once, at its end.
pub(super) struct Subscriber {
    conn: u64,
    streams: Vec<Stream>,
    outside: u64,
    unreadable: u64,
    before_publish: u64,
    /// Where the delivery rule found the sequence number and the instant last time.
    memo: [Memo; 2],
    /// How fast the connection's automatic replies go.
    pace: ReplyPace,
    /// The window of its last drop (`spec.reconnect`), whose figures its gaps since go to.
    dropped_in: Option<usize>,
    /// Its streams' gaps already given to a window.
    gaps_told: u64,
    /// Its last delivery, kept when it may resume from the position it carries
    /// (`conversation.resume`, `delivery.resumeFrom`): read there only at a drop, not at
    /// every delivery (the message is shared, not copied).
    position: Option<Option<Message>>,
    /// Since its last return, when it resumed: when it was away (conductor microseconds,
    /// from its drop to its return) and the drop's window, where what it reads published
    /// meanwhile is counted `recovered`.
    away: Option<(u64, u64, usize)>,
    /// Back from a drop in this window, and no delivery of the measured window read since.
    unfed: Option<usize>,
}

impl Subscriber {
    pub(super) fn new(plan: &FanoutPlan, conn: u64) -> Subscriber {
        Subscriber {
            conn,
            streams: plan
                .spec
                .topics_of(conn)
                .map(|topic| Stream {
                    topic,
                    seq: Sequence::default(),
                    first: 0,
                    last: 0,
                    max_latency_us: 0,
                })
                .collect(),
            outside: 0,
            unreadable: 0,
            before_publish: 0,
            memo: Default::default(),
            pace: ReplyPace::default(),
            dropped_in: None,
            gaps_told: 0,
            position: None,
            away: None,
            unfed: None,
        }
    }

    /// Keeps the position each delivery carries from here on: its conversation resumes.
    pub(super) fn keep_position(&mut self) {
        self.position = Some(None);
    }

    /// The variables its `resume` steps start from: `vars`, and the position it last read
    /// where deliveries carry one. `None` (open and subscribe anew) when they do and it has
    /// read none yet.
    pub(super) fn resume_with(
        &self,
        script: &crate::conversation::Script,
        vars: &[bytes::Bytes],
    ) -> Option<Vec<bytes::Bytes>> {
        let mut vars = vars.to_vec();
        if let Some(i) = script.resume_from {
            let last = self.position.as_ref()?.as_ref()?;
            let (_, data) = data_of(last)?;
            let position = script.delivery()?.position(data)?;
            *vars.get_mut(i)? = bytes::Bytes::copy_from_slice(position);
        }
        Some(vars)
    }

    /// Back after its drop at `down` (conductor microseconds) in window `window`, `resumed`
    /// or subscribed anew. Only a subscriber that resumed counts what it recovers: one
    /// subscribed anew may read live the last publish before its return (sent after its
    /// subscription), which is no replay.
    pub(super) fn back(&mut self, (resumed, down, window): (bool, u64, usize)) {
        self.away = resumed.then(|| (down, clock::conductor_micros(), window));
        self.unfed = Some(window);
    }

    /// Back and fed nothing of the window since: told to its drop's window, at its next drop
    /// or its end.
    fn tell_unfed(&mut self, ctx: &WorkerState) {
        let (Some(window), Some(comeback)) = (self.unfed.take(), &ctx.comeback) else {
            return;
        };
        ctx.stats
            .borrow_mut()
            .reconnect
            .get_or_insert_with(|| comeback.figures())
            .unfed(window);
    }

    /// Its topics, in the order it subscribes to them.
    pub(super) fn topics(&self) -> impl Iterator<Item = u32> + '_ {
        self.streams.iter().map(|s| s.topic)
    }

    /// Dropped in `window`: its gaps so far go to its previous drop's window (or to those of
    /// the gaps no drop explains), the ones from here on to this one's. A subscriber reads
    /// nothing while down, so its gap across the drop shows with its first delivery after.
    pub(super) fn dropped(&mut self, ctx: &WorkerState, window: usize) {
        self.tell_gaps(ctx);
        self.tell_unfed(ctx);
        self.dropped_in = Some(window);
    }

    fn tell_gaps(&mut self, ctx: &WorkerState) {
        let Some(comeback) = &ctx.comeback else {
            return;
        };
        let total: u64 = self.streams.iter().map(|s| s.seq.counts().missing).sum();
        // A late delivery fills a gap counted before: never told twice, never taken back.
        let new = total.saturating_sub(self.gaps_told);
        self.gaps_told = self.gaps_told.max(total);
        let mut m = ctx.stats.borrow_mut();
        m.reconnect
            .get_or_insert_with(|| comeback.figures())
            .gaps(self.dropped_in, new);
    }

    /// Reads until the window's end plus the drain, whatever the server sends, sending the
    /// conversation's heartbeat when due; dropped at `close` (a `close` disruption that
    /// picks it) as a client that vanished.
    pub(super) async fn receive(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        window: &Window,
        beat: &mut Beat,
        close: Option<Instant>,
    ) -> Result<(), Dropped> {
        let until = ctx.deadline + plan.drain;
        // Reading stops at whichever comes first.
        let stop = close.map_or(until, |c| c.min(until));
        loop {
            let now = Instant::now();
            if now >= stop {
                return if now >= until {
                    Ok(())
                } else {
                    Err(Dropped::Disrupted)
                };
            }
            if let Some(m) = beat.take(ctx, self.conn) {
                let mut heard = |ws: &mut Ws, m: &Message| self.take(ws, ctx, plan, window, m);
                write_reading(ws, ctx, Some(m), true, Some(until), &mut heard).await?;
            }
            let msg = match tokio::time::timeout_at(beat.wake(stop), read(ws, ctx)).await {
                Err(_) => continue,
                Ok(r) => r?,
            };
            self.take(ws, ctx, plan, window, &msg)?;
            // What else is buffered, without a timer per message; taking turns with the
            // worker's other connections (a socket that is never empty must not leave them
            // unread: they would all fall behind but this one).
            while Instant::now() < stop
                && let Some(r) = read_ready(ws, ctx)
            {
                self.take(ws, ctx, plan, window, &r?)?;
                tokio::task::consume_budget().await;
            }
        }
    }

    /// One server message: a delivery counted and timed, or the conversation's (a reply, a
    /// push), or unsolicited. `Err` when the conversation ends the connection (its replies ran
    /// away).
    pub(super) fn take(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        window: &Window,
        msg: &Message,
    ) -> Result<(), Dropped> {
        let Some((text, data)) = data_of(msg) else {
            return Ok(());
        };
        let Some(rule) = ctx.script.delivery() else {
            return Ok(());
        };
        let d = match rule.read(text, data, &mut self.memo) {
            Delivery::Yes(d) => {
                if let Some(last) = &mut self.position {
                    *last = Some(msg.clone());
                }
                // Fed since its return, in the window or not (a return after its topic's
                // last publish of the window is no server's fault).
                self.unfed = None;
                d
            }
            Delivery::Unreadable => {
                self.unreadable += 1;
                ctx.unreadable(NumberField::Sequence, || {
                    rule.unreadable_example(NumberField::Sequence, data)
                });
                return Ok(());
            }
            Delivery::No => {
                if !converse(ws, ctx, self.conn, &mut self.pace, msg)? {
                    count_unsolicited(ctx, Instant::now(), answer_kind(msg), msg);
                }
                return Ok(());
            }
        };
        let published_us = match d.published {
            Published::At(us) => Some(us),
            Published::NotRead => None,
            // Counted by when it arrived, as an untimed delivery is.
            Published::Unreadable => {
                ctx.unreadable(NumberField::PublishedAt, || {
                    rule.unreadable_example(NumberField::PublishedAt, data)
                });
                None
            }
        };
        self.count(ctx, plan, window, d, published_us, data.len() as u64);
        Ok(())
    }

    /// A delivery read: counted against its topic's sequence and timed, when it was published
    /// in the window.
    fn count(
        &mut self,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        window: &Window,
        d: crate::conversation::Delivered<'_>,
        published_us: Option<u64>,
        len: u64,
    ) {
        let received_us = clock::conductor_micros();
        let now = Instant::now();
        let arrived_in_window = now >= ctx.measure_from && now < ctx.deadline;
        let at = match (self.streams.len(), d.topic) {
            (1, _) => Some(0),
            (_, Some(name)) => plan
                .spec
                .topic_index(name)
                .and_then(|t| self.streams.iter().position(|s| s.topic == t)),
            (_, None) => None,
        };
        {
            // What the subscribers take in, kept up or not, and the pace the publisher kept
            // (from every timed delivery, in the window or not): in the worker's tally, where
            // they add up over its subscribers.
            let mut m = ctx.stats.borrow_mut();
            let f = tally(&mut m, plan);
            f.read_in_window += u64::from(arrived_in_window);
            if let (Some(i), Some(at)) = (at, published_us)
                && let Some(t) = f.topics.get_mut(self.streams[i].topic as usize)
            {
                t.paced(d.seq, at);
            }
        }
        let counted = match published_us {
            Some(at) => window.holds(at),
            // Untimed deliveries count by when they arrive.
            None => arrived_in_window,
        };
        if !counted {
            self.outside += 1;
            return;
        }
        let stream = at.and_then(|i| self.streams.get_mut(i));
        let Some(stream) = stream else {
            self.unreadable += 1;
            return;
        };
        stream.seq.record(d.seq);
        stream.first = if stream.first == 0 {
            d.seq
        } else {
            stream.first.min(d.seq)
        };
        stream.last = stream.last.max(d.seq);
        let mut m = ctx.stats.borrow_mut();
        // Published while it was away, read since: only a server that replays what it missed
        // delivers it (or a publisher later than the subscriber's downtime: see the docs).
        if let (Some((from, until, w)), Some(at), Some(comeback)) =
            (self.away, published_us, &ctx.comeback)
            && (from..until).contains(&at)
        {
            m.reconnect
                .get_or_insert_with(|| comeback.figures())
                .recovered(w, 1);
        }
        m.counts.received += 1;
        m.counts.bytes_received += len;
        ctx.slot.received(1, len);
        if let Some(at) = published_us {
            if received_us < at {
                self.before_publish += 1;
            }
            let latency_us = received_us.saturating_sub(at);
            stream.max_latency_us = stream.max_latency_us.max(latency_us);
            let latency = Duration::from_micros(latency_us);
            m.hists.fanout.record(latency);
            ctx.slot.rtt(latency);
        }
    }

    /// Adds what this subscriber counted to its worker's figures.
    pub(super) fn settle(&mut self, ctx: &WorkerState, plan: &FanoutPlan) {
        self.tell_gaps(ctx);
        self.tell_unfed(ctx);
        let mut m = ctx.stats.borrow_mut();
        let f = tally(&mut m, plan);
        f.outside += self.outside;
        f.unreadable += self.unreadable;
        f.before_publish += self.before_publish;
        for s in &self.streams {
            if let Some(t) = f.topics.get_mut(s.topic as usize) {
                t.add_subscriber(&s.seq, s.first, s.last);
            }
            f.slowest.push(SubscriberTally {
                conn: self.conn,
                topic: s.topic,
                delivered: s.seq.counts().delivered,
                max_latency_us: s.max_latency_us,
            });
        }
        // Kept short as subscribers end: a worker may hold a hundred thousand.
        if f.slowest.len() > 4 * wsload_report::fanout::SLOWEST {
            keep_slowest(&mut f.slowest);
        }
    }
}
