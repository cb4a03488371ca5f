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

use crate::clock;
use crate::connection::{
    self, WorkerState, answer_kind, converse, count_unsolicited, data_len, finish, ms_since, read,
    read_ready, write_reading,
};
use crate::dial::{Role, Ws};
use crate::measure::{Dropped, Measure};
use crate::model::{Behavior, Cell, FanoutPlan};
use crate::script::{Delivery, Fill, Out, SendTime};
use std::cell::{OnceCell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use wsload_report::fanout::{Fanout, Sequence, SubscriberTally, TopicTally, keep_slowest};
use wsload_spec::json_path::Memo;

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

/// Where a worker's fanout connections are served from their open until their measured
/// phase begins, and the tasks they run in. A connection left unread until then would miss
/// its server's heartbeat (Socket.IO closes it after 3 s) and fill with what a server that
/// publishes on its own sends before the window, read only after the window's end.
pub struct Serving {
    /// What serving before the start needs: the conversation, the worker's statistics and
    /// live slot; every instant of it lies past any cell (`NEVER`), so what it bins as of the
    /// measured phase goes to its discard bin.
    early: WorkerState,
    /// The measured message of the connections that captured nothing it uses.
    common: Option<Arc<Out>>,
    behavior: Behavior,
    measured: OnceCell<Rc<WorkerState>>,
    begun: Notify,
    tasks: RefCell<JoinSet<()>>,
}

/// How far in the future the instants of the state before the start lie: beyond any cell.
pub const NEVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl Serving {
    /// `early` is the worker's state as it is known before the start, its instants `NEVER`
    /// away; `behavior` the cell's (a fanout).
    pub fn new(early: WorkerState, behavior: Behavior) -> Serving {
        Serving {
            common: early.script.shared_message(),
            behavior,
            early,
            measured: OnceCell::new(),
            begun: Notify::new(),
            tasks: RefCell::new(JoinSet::new()),
        }
    }

    /// Connection `n`, just opened with what its steps on open captured: served from now on,
    /// in its own task until its end.
    pub fn open(self: &Rc<Self>, ws: Ws, n: u64, vars: &[bytes::Bytes]) {
        let message = self.early.script.message_for(vars, &self.common);
        // A held connection's task is its own future: inside `task` it would be as large as a
        // fanout subscriber's state, for every one of a hundred thousand.
        if let Behavior::Hold { every, ping } = self.behavior {
            let fut = held(ws, n, self.clone(), every, ping, message);
            self.tasks.borrow_mut().spawn_local(fut);
            return;
        }
        let fut = task(ws, n, self.clone(), self.behavior.clone(), message);
        self.tasks.borrow_mut().spawn_local(fut);
    }

    /// The measured phase begins for every connection served, with `ctx`.
    pub fn begin(&self, ctx: Rc<WorkerState>) {
        if self.measured.set(ctx).is_ok() {
            self.begun.notify_waiters();
        }
    }

    /// Until every connection's task has ended.
    pub async fn join(&self) {
        let mut tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        while tasks.join_next().await.is_some() {}
    }

    /// The measured phase's state, once it begins.
    async fn measured(&self) -> Rc<WorkerState> {
        loop {
            let begun = self.begun.notified();
            if let Some(ctx) = self.measured.get() {
                return ctx.clone();
            }
            begun.await;
        }
    }
}

/// Connection `n`'s task in a fanout cell: served from its open until the measured phase
/// begins, its measured phase ([`Part::run`]), then its close, counted as `connection::run`
/// counts the others'.
#[allow(clippy::manual_async_fn)] // as connection::run: the arguments are stored once
fn task(
    mut ws: Ws,
    n: u64,
    serving: Rc<Serving>,
    behavior: Behavior,
    message: Arc<Out>,
) -> impl std::future::Future<Output = ()> {
    async move {
        // Serving::open gives a hold's connections `held`.
        let Behavior::Fanout(plan) = &behavior else {
            return;
        };
        let mut part = Part::of(plan, n);
        let early = Box::pin(part.serve(&mut ws, &serving, plan)).await;
        let ctx = serving.measured().await;
        let ctx = &*ctx;
        let began = ms_since(ctx.start);
        let ended = match early {
            Ok(()) => Box::pin(part.run(&mut ws, ctx, plan, &message)).await,
            Err(why) => Err(why),
        };
        part.settle(ctx, plan, ended);
        Box::pin(finish(&mut ws, ctx, &behavior, ended, began)).await;
    }
}

/// A held connection from its open: kept alive while the rest open (`connection::keep_until`),
/// then its measured hold and its close. The stream stays in this task's state, borrowed by
/// each phase in turn: moved into `connection::run` it would be stored twice
/// (rust-lang/rust#62958). Not an `async fn`, for the same reason.
#[allow(clippy::manual_async_fn)] // deliberately not an async fn: see above
fn held(
    mut ws: Ws,
    n: u64,
    serving: Rc<Serving>,
    every: Option<Duration>,
    ping: crate::model::PingCfg,
    message: Arc<Out>,
) -> impl std::future::Future<Output = ()> {
    async move {
        let begun = serving.measured();
        let early = connection::keep_until(&mut ws, &serving.early, n, every, begun).await;
        let ctx = serving.measured().await;
        let ctx = &*ctx;
        let began = ms_since(ctx.start);
        let ended = match early {
            Ok(()) => connection::held(&mut ws, ctx, every, ping, message, n).await,
            Err(why) => Err(why),
        };
        Box::pin(finish(&mut ws, ctx, &serving.behavior, ended, began)).await;
    }
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
            Part::Publisher(Publisher {
                topic: u32::try_from(n - u64::from(plan.subscribers)).unwrap_or(u32::MAX),
                conn: n,
                seq: 0,
                in_window: 0,
            })
        }
    }

    /// Reads until the measured phase begins, answering what the conversation answers (a
    /// heartbeat); a subscriber's deliveries then are outside the window, as those published
    /// before it that arrive later are. `Err` when the connection ended meanwhile.
    async fn serve(
        &mut self,
        ws: &mut Ws,
        serving: &Serving,
        plan: &FanoutPlan,
    ) -> Result<(), Dropped> {
        let ctx = &serving.early;
        let begun = serving.begun.notified();
        tokio::pin!(begun);
        loop {
            if serving.measured.get().is_some() {
                return Ok(());
            }
            tokio::select! {
                biased;
                _ = &mut begun => {}
                r = read(ws, ctx) => {
                    self.before_start(ws, ctx, plan, &r?);
                    while serving.measured.get().is_none()
                        && let Some(r) = read_ready(ws, ctx)
                    {
                        self.before_start(ws, ctx, plan, &r?);
                    }
                }
            }
        }
    }

    fn before_start(&mut self, ws: &mut Ws, ctx: &WorkerState, plan: &FanoutPlan, msg: &Message) {
        match self {
            Part::Subscriber(sub) => sub.take(ws, ctx, plan, &Window::NONE, msg),
            Part::Publisher(p) => p.heard(ws, ctx, msg),
        }
    }

    /// The measured phase: a subscriber's or a publisher's.
    async fn run(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        message: &Out,
    ) -> Result<(), Dropped> {
        let window = Window::of(ctx);
        match self {
            Part::Subscriber(sub) => sub.receive(ws, ctx, plan, &window).await,
            Part::Publisher(p) => p.publish(ws, ctx, plan, &window, message).await,
        }
    }

    /// Adds what the connection counted to its worker's figures.
    fn settle(&self, ctx: &WorkerState, plan: &FanoutPlan, ended: Result<(), Dropped>) {
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

/// The measured window on the conductor's clock, Unix microseconds: `[from, to)`.
#[derive(Debug, Clone, Copy)]
struct Window {
    from: u64,
    to: u64,
}

impl Window {
    /// Holds nothing: what is read before the measured phase.
    const NONE: Window = Window {
        from: u64::MAX,
        to: u64::MAX,
    };

    fn of(ctx: &WorkerState) -> Window {
        let warmup = ctx.measure_from.saturating_duration_since(ctx.start);
        let duration = ctx.deadline.saturating_duration_since(ctx.measure_from);
        let from = ctx.cell_clock.epoch_micros + micros(warmup);
        Window {
            from,
            to: from + micros(duration),
        }
    }

    fn holds(&self, us: u64) -> bool {
        us >= self.from && us < self.to
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

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
struct Subscriber {
    conn: u64,
    streams: Vec<Stream>,
    outside: u64,
    unreadable: u64,
    before_publish: u64,
    /// Where the delivery rule found the sequence number and the instant last time.
    memo: [Memo; 2],
}

impl Subscriber {
    fn new(plan: &FanoutPlan, conn: u64) -> Subscriber {
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
        }
    }

    /// Reads until the window's end plus the drain, whatever the server sends.
    async fn receive(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        window: &Window,
    ) -> Result<(), Dropped> {
        let until = ctx.deadline + plan.drain;
        loop {
            if Instant::now() >= until {
                return Ok(());
            }
            let msg = match tokio::time::timeout_at(until, read(ws, ctx)).await {
                Err(_) => return Ok(()),
                Ok(r) => r?,
            };
            self.take(ws, ctx, plan, window, &msg);
            // What else is buffered, without a timer per message.
            while Instant::now() < until
                && let Some(r) = read_ready(ws, ctx)
            {
                self.take(ws, ctx, plan, window, &r?);
            }
        }
    }

    /// One server message: a delivery counted and timed, or the conversation's (a reply, a
    /// push), or unsolicited.
    fn take(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        window: &Window,
        msg: &Message,
    ) {
        let (text, data) = match msg {
            Message::Text(t) => (true, t.as_bytes()),
            Message::Binary(b) => (false, &b[..]),
            _ => return,
        };
        let Some(rule) = ctx.script.delivery() else {
            return;
        };
        let d = match rule.read(text, data, &mut self.memo) {
            Delivery::Yes(d) => d,
            Delivery::Unreadable => {
                self.unreadable += 1;
                return;
            }
            Delivery::No => {
                if !converse(ws, ctx, self.conn, msg) {
                    count_unsolicited(ctx, Instant::now(), answer_kind(msg), msg);
                }
                return;
            }
        };
        let received_us = clock::conductor_micros();
        let counted = match d.published_us {
            Some(at) => window.holds(at),
            // Untimed deliveries count by when they arrive.
            None => {
                let now = Instant::now();
                now >= ctx.measure_from && now < ctx.deadline
            }
        };
        if !counted {
            self.outside += 1;
            return;
        }
        let stream = match (self.streams.len(), d.topic) {
            (1, _) => self.streams.first_mut(),
            (_, Some(name)) => plan
                .spec
                .topic_index(name)
                .and_then(|t| self.streams.iter_mut().find(|s| s.topic == t)),
            (_, None) => None,
        };
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
        let len = data.len() as u64;
        let mut m = ctx.stats.borrow_mut();
        m.counts.received += 1;
        m.counts.bytes_received += len;
        ctx.slot.received(1, len);
        if let Some(at) = d.published_us {
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
    fn settle(&self, ctx: &WorkerState, plan: &FanoutPlan) {
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

/// The worker's fanout tallies, made on first use with a slot for every topic.
fn tally<'a>(m: &'a mut Measure, plan: &FanoutPlan) -> &'a mut Fanout {
    let f = m.counts.fanout.get_or_insert_with(Fanout::default);
    let topics = plan.spec.topics as usize;
    if f.topics.len() < topics {
        f.topics.resize(topics, TopicTally::default());
    }
    f.by_server = plan.by_server();
    f
}

/// A publisher of one topic: its sequence numbers and the window's publishes.
struct Publisher {
    topic: u32,
    conn: u64,
    seq: u64,
    in_window: u64,
}

impl Publisher {
    /// Publishes on the topic's schedule until the window's end: each message carries the
    /// topic's next number and its intended instant on the conductor's clock. Late messages
    /// go out at once, stamped with the instant they were due (coordinated omission).
    async fn publish(
        &mut self,
        ws: &mut Ws,
        ctx: &WorkerState,
        plan: &FanoutPlan,
        window: &Window,
        message: &Out,
    ) -> Result<(), Dropped> {
        let schedule = plan
            .schedule
            .for_connection(u64::from(self.topic), plan.spec.topics);
        let origin = ctx.start;
        let mut due = schedule.first(origin);
        let conn = self.conn;
        let mut on_read = |ws: &mut Ws, m: &Message| heard(ws, ctx, conn, m);
        loop {
            let now = Instant::now();
            if now >= ctx.deadline {
                return Ok(());
            }
            let mut burst = 0u32;
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
                write_reading(ws, ctx, Some(msg), false, &mut on_read).await?;
                ctx.sent(t, 1, len);
                if window.holds(at) {
                    self.in_window += 1;
                }
                burst += 1;
                due = schedule.next(origin, t, ctx.deadline);
            }
            if burst > 0 {
                write_reading(ws, ctx, None, true, &mut on_read).await?;
            }
            let wake = due.map_or(ctx.deadline, |t| t.min(ctx.deadline));
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                r = read(ws, ctx) => {
                    on_read(ws, &r?);
                    while Instant::now() < wake
                        && let Some(r) = read_ready(ws, ctx)
                    {
                        on_read(ws, &r?);
                    }
                }
            }
        }
    }

    /// What the server sent a publisher, before the start or in its measured phase.
    fn heard(&self, ws: &mut Ws, ctx: &WorkerState, m: &Message) {
        heard(ws, ctx, self.conn, m);
    }

    fn settle(&self, ctx: &WorkerState, plan: &FanoutPlan) {
        let mut m = ctx.stats.borrow_mut();
        if let Some(t) = tally(&mut m, plan).topics.get_mut(self.topic as usize) {
            t.published += self.in_window;
        }
    }
}

/// A publisher's read: the conversation's (a heartbeat answered) or unsolicited.
fn heard(ws: &mut Ws, ctx: &WorkerState, conn: u64, m: &Message) {
    if !converse(ws, ctx, conn, m) && matches!(m, Message::Text(_) | Message::Binary(_)) {
        count_unsolicited(ctx, Instant::now(), answer_kind(m), m);
    }
}
