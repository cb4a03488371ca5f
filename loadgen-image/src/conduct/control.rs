//! `wsload shard --await-start`: the shard side of the shard control protocol
//! (wsload_control::protocol; docs/operator.md, "Shard control protocol"), which the operator
//! and `wsload run` over shard processes both conduct.
//!
//! The shard loads its spec and gets ready (target resolved, dialer built), then waits on its
//! endpoint for `POST /control/start {"startAt": unix_ms}`. A worker thread sleeps until that
//! wall-clock instant and runs the first cell. A shard of several says when its share of a
//! cell is open (`connected`) and measures from the instant the conductor then names
//! (`POST /control/measure`, crate::cell::rendezvous). After each cell it is `between` until the
//! conductor orders the next (`POST /control/cell`, all shards at one instant) or the end
//! (`POST /control/end`). It then stores the result, and the main thread waits for
//! `POST /control/finish` (the conductor has the result) or `--linger`, whichever comes first.
//! Delivery and the verdict are the conductor's to judge over every shard, so neither decides
//! the exit code here.

use super::error::RunError;
use crate::cell::rendezvous::{Go, Meeting, Rendezvous};
use crate::conduct::background::spawn_background;
use crate::conduct::gate::{self, Gate};
use crate::conduct::run::{self, Instruments};
use crate::model::Shard;
use crate::model::options::Options;
use crate::model::plan::Plan;
use crate::observe::exposition::LiveMetrics;
use std::net::TcpListener;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use wsload_control::endpoint::{self, Admit, ShardEndpoint, json};
use wsload_control::protocol::{
    CellOrder, ClockReading, ConnectSummary, MeasureOrder, Phase, StartRequest, State,
};
use wsload_control::{CellKey, Conductor, Token};
use wsload_http::prometheus_client::registry::Registry;
use wsload_http::{Exposition, Reply, Request};
use wsload_report::report::{CellResult, RunResult};
use wsload_spec::LoadTest;

/// What the conductor asked the run thread for and it has not taken yet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Order {
    /// A cell at an instant; without a key, the spec's first cell.
    Cell {
        start_at: u64,
        cell: Option<CellKey>,
        /// The instant on the conductor's clock (Unix ms), and this shard's offset from it.
        conductor_at: Option<u64>,
        offset_micros: i64,
    },
    /// No more cells: build the result.
    End,
}

/// How the control session ended.
#[derive(Debug)]
pub enum Exit {
    /// `POST /control/finish`: the operator has what it needs.
    Finished,
    /// Nobody came for the result within `--linger`; `failed` if the run broke off.
    Lingered { failed: bool },
    /// SIGTERM (the pod is being deleted); `done` if the result was ready.
    Terminated { done: bool },
    /// The shard could not get ready (invalid input, unreachable target).
    Fatal(RunError),
}

#[derive(Default)]
struct Inner {
    state: State,
    /// Ready to be started: `/readyz` answers 200.
    prepared: bool,
    /// The start request and the last cell order accepted: a retry of either is answered
    /// alike, anything else is a conflict.
    started: Option<StartRequest>,
    last_order: Option<CellOrder>,
    /// The measure order taken for the cell this shard said it connected last.
    measure_order: Option<MeasureOrder>,
    ended_cells: bool,
    order: Option<Order>,
    /// The RunResult JSON, once done or failed after starting.
    result: Option<Arc<str>>,
    /// When the state became done or failed: `--linger` counts from here.
    ended: Option<Instant>,
    finish: bool,
    terminated: bool,
    fatal: Option<RunError>,
}

/// The shared state of a control session: its endpoint's view and the threads' rendezvous.
pub struct Control {
    inner: Mutex<Inner>,
    changed: Condvar,
    /// The test's control token: every control request must carry it.
    token: Token,
    /// Reads the live counters at each scrape.
    registry: Registry,
    /// The conductor's word to the workers waiting for the other shards (crate::cell::rendezvous).
    go: watch::Sender<Go>,
}

use crate::machine::clock::{self, unix_ms};

impl Control {
    pub fn new(exposition: &Arc<LiveMetrics>, token: Token) -> Control {
        Control {
            inner: Mutex::new(Inner::default()),
            changed: Condvar::new(),
            token,
            registry: exposition.registry(),
            go: watch::Sender::new(Go::Wait),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state stays meaningful after a panic elsewhere; keep answering.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut Inner)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }

    pub fn state(&self) -> State {
        self.lock().state.clone()
    }

    /// Arms the run thread with `order` at `start_at` (saying so when the instant has passed).
    fn arm(inner: &mut Inner, start_at: u64, order: Order) {
        inner.state.arm(start_at, unix_ms());
        inner.order = Some(order);
    }

    /// A conductor's order: read from `body` (a 400 when it does not parse), admitted against
    /// the state (a retry of the order last taken is answered alike, an order out of turn is a
    /// conflict), then taken, and the threads waiting on the state woken.
    fn order<R>(
        &self,
        body: &[u8],
        parse: fn(&[u8]) -> Result<R, Reply>,
        admit: impl FnOnce(&Inner, &R) -> Admit,
        take: impl FnOnce(&mut Inner, R),
    ) -> Reply {
        let request = match parse(body) {
            Ok(r) => r,
            Err(reply) => return reply,
        };
        let mut inner = self.lock();
        if let Some(reply) = admit(&inner, &request).settled(&inner.state) {
            return reply;
        }
        take(&mut inner, request);
        let reply = json(202, &inner.state);
        drop(inner);
        self.changed.notify_all();
        reply
    }

    /// `POST /control/start`: the first cell.
    pub fn start(&self, body: &[u8]) -> Reply {
        self.order(
            body,
            endpoint::parse_start,
            |inner, request| {
                endpoint::admit_start(inner.started.as_ref(), inner.state.state, request)
            },
            |inner, request| {
                let order = Order::Cell {
                    start_at: request.start_at,
                    cell: request.cell.clone(),
                    conductor_at: request.conductor_at,
                    offset_micros: request.offset_micros,
                };
                Self::arm(inner, request.start_at, order);
                inner.started = Some(request);
            },
        )
    }

    /// `POST /control/cell`: the next cell, once the last one is over.
    pub fn cell(&self, body: &[u8]) -> Reply {
        self.order(
            body,
            endpoint::parse_cell,
            |inner, request| {
                let last = inner.last_order.as_ref();
                endpoint::admit_cell(last, &inner.state, inner.ended_cells, request)
            },
            |inner, request| {
                let order = Order::Cell {
                    start_at: request.start_at,
                    cell: Some(request.cell.clone()),
                    conductor_at: request.conductor_at,
                    offset_micros: request.offset_micros,
                };
                Self::arm(inner, request.start_at, order);
                inner.last_order = Some(request);
            },
        )
    }

    /// `POST /control/measure`: every shard's share of the cell this one waits on is open.
    pub fn measure(&self, body: &[u8]) -> Reply {
        self.order(
            body,
            endpoint::parse_measure,
            |inner, request| {
                endpoint::admit_measure(inner.measure_order.as_ref(), &inner.state, request)
            },
            |inner, request| {
                let now = unix_ms();
                inner.state.state = Phase::Running;
                if let Some(c) = &mut inner.state.connected {
                    c.measure_at = Some(request.start_at);
                }
                if request.start_at < now {
                    inner.state.note = Some(format!(
                        "measure startAt {} was {} ms in the past when it arrived: measuring now",
                        request.start_at,
                        now - request.start_at
                    ));
                }
                inner.measure_order = Some(request);
                self.go.send_replace(Go::At {
                    cell: request.cell,
                    unix_ms: request.start_at,
                });
            },
        )
    }

    /// `POST /control/end`: no more cells.
    pub fn end(&self) -> Reply {
        let mut inner = self.lock();
        if let Some(reply) =
            endpoint::admit_end(inner.ended_cells, inner.state.state).settled(&inner.state)
        {
            return reply;
        }
        inner.ended_cells = true;
        inner.order = Some(Order::End);
        let reply = json(202, &inner.state);
        drop(inner);
        self.changed.notify_all();
        reply
    }

    /// `GET /control/result`.
    pub fn result(&self) -> Reply {
        let inner = self.lock();
        match &inner.result {
            Some(r) => Reply::json(200, r.to_string()),
            None => json(409, &inner.state),
        }
    }

    /// Blocks until the conductor orders something (or the session ends: `None`).
    fn wait_order(&self) -> Option<Order> {
        let mut inner = self.lock();
        loop {
            if inner.finish || inner.terminated {
                return None;
            }
            if let Some(order) = inner.order.take() {
                return Some(order);
            }
            inner = self
                .changed
                .wait(inner)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Blocks until the session should end.
    fn wait_exit(&self, linger: Duration) -> Exit {
        let mut inner = self.lock();
        loop {
            if let Some(e) = inner.fatal.take() {
                return Exit::Fatal(e);
            }
            if inner.finish {
                return Exit::Finished;
            }
            if inner.terminated {
                return Exit::Terminated {
                    done: inner.state.state == Phase::Done,
                };
            }
            let wait = match inner.ended {
                Some(ended) => match linger.checked_sub(ended.elapsed()) {
                    Some(left) if !left.is_zero() => left,
                    _ => {
                        return Exit::Lingered {
                            failed: inner.state.state == Phase::Failed,
                        };
                    }
                },
                None => Duration::from_secs(3600),
            };
            inner = self
                .changed
                .wait_timeout(inner, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// SIGTERM: end the session now.
    pub fn terminate(&self) {
        // Sent under the lock, as every word is, so that a shard saying it is connected at the
        // same moment cannot put `Wait` after it.
        self.update(|i| {
            i.terminated = true;
            self.go.send_replace(Go::Stop);
        });
    }
}

impl Exposition for Control {
    fn render(&self) -> String {
        wsload_http::encode(&self.registry)
    }

    fn ready(&self) -> bool {
        let inner = self.lock();
        inner.prepared && inner.fatal.is_none()
    }

    fn handle(&self, request: &Request<'_>) -> Option<Reply> {
        endpoint::route(self, request)
    }

    fn answered(&self, request: &Request<'_>) {
        if endpoint::is_finish(self, request) {
            self.update(|i| {
                i.finish = true;
                self.go.send_replace(Go::Stop);
            });
        }
    }
}

impl ShardEndpoint for Control {
    fn token(&self) -> &Token {
        &self.token
    }

    fn state(&self) -> State {
        Control::state(self)
    }

    fn start(&self, body: &[u8]) -> Reply {
        Control::start(self, body)
    }

    fn cell(&self, body: &[u8]) -> Reply {
        Control::cell(self, body)
    }

    fn measure(&self, body: &[u8]) -> Reply {
        Control::measure(self, body)
    }

    fn end(&self) -> Reply {
        Control::end(self)
    }

    fn result(&self) -> Reply {
        Control::result(self)
    }

    fn clock(&self) -> ClockReading {
        ClockReading {
            unix_micros: clock::unix_micros(),
        }
    }
}

/// Runs a control session for shard `opts.shard` of `lt`: serves `listener` (its control
/// requests only with `token`), waits for the start, runs, hands `report` the result
/// (printing, `--out`), then waits to be finished.
pub fn serve(
    lt: LoadTest,
    opts: Options,
    listener: TcpListener,
    token: Token,
    linger: Duration,
    report: impl FnOnce(&RunResult) + Send + 'static,
) -> Result<Exit, RunError> {
    let instruments = Instruments::new(&lt, &opts);
    let control = Arc::new(Control::new(&instruments.exposition, token));
    let _background = spawn_background(
        instruments.sampler.clone(),
        Some((listener, control.clone())),
        None,
    )?;
    spawn_sigterm_watch(control.clone())?;
    let session = control.clone();
    // The run lives on its own thread so that a finish or SIGTERM while it runs ends the
    // process at once: returning from main does not wait for it (nor stop a managed local
    // server, which only `wsload run`-style local use has).
    std::thread::Builder::new()
        .name("wsload-shard".into())
        .spawn(move || run_session(&lt, &opts, &instruments, &session, report))
        .map_err(|e| RunError::io("cannot start the run thread", e))?;
    match control.wait_exit(linger) {
        Exit::Fatal(e) => Err(e),
        exit => Ok(exit),
    }
}

fn run_session(
    lt: &LoadTest,
    opts: &Options,
    instruments: &Instruments,
    control: &Arc<Control>,
    report: impl FnOnce(&RunResult),
) {
    let shard = opts.shard.unwrap_or(Shard::WHOLE);
    let planned = Plan::new(&lt.spec, shard).map_err(RunError::from);
    let prepared = match planned
        .and_then(|plan| run::prepare(lt, opts, instruments, plan, run::Disruptions::Conductor))
    {
        Ok(p) => p,
        Err(e) => {
            control.update(|i| {
                i.state.state = Phase::Failed;
                i.state.error = Some(e.to_string());
                i.ended = Some(Instant::now());
                i.fatal = Some(e);
            });
            return;
        }
    };
    control.update(|i| i.prepared = true);
    tracing::info!("ready; waiting for POST /control/start");
    let mut gate = ControlGate {
        control,
        first: Conductor::first(&lt.spec),
        index: 0,
        stopped: false,
        // A lone shard has nobody to wait for, unless the operator disrupts the server: it
        // times the kills and restarts from the instant it gives the shards to measure from.
        rendezvous: (lt.spec.shards > 1 || wsload_spec::reconnect::on_server(&lt.spec.disruptions))
            .then(|| control.clone() as Arc<dyn Rendezvous>),
    };
    let (mut result, error) = run::measure(lt, opts, &prepared, &mut gate);
    if gate.stopped {
        // Finished or terminated before the end of the cells: nobody waits for a result.
        return;
    }
    drop(prepared);
    let note = control.state().note;
    if let Some(n) = note {
        result.notes.insert(0, n);
    }
    report(&result);
    let info = result.shard_info.first().cloned();
    let json = serde_json::to_string(&result).map(Arc::<str>::from);
    control.update(|i| {
        if let Some(info) = &info {
            i.state.started_at_micros = Some(info.started_at_micros);
            i.state.finished_at_micros = Some(info.finished_at_micros);
        }
        match (json, error) {
            (Ok(json), None) => {
                i.state.state = Phase::Done;
                i.result = Some(json);
            }
            (Ok(json), Some(e)) => {
                i.state.state = Phase::Failed;
                i.state.error = Some(e);
                i.result = Some(json);
            }
            (Err(e), _) => {
                i.state.state = Phase::Failed;
                i.state.error = Some(format!("cannot serialize the result: {e}"));
            }
        }
        i.ended = Some(Instant::now());
    });
}

/// The shard's cells as the conductor orders them over the control protocol.
struct ControlGate<'a> {
    control: &'a Control,
    /// What a start without a named cell runs.
    first: Option<CellKey>,
    /// The index of the cell running.
    index: u32,
    /// The session ended before the conductor ended the cells.
    stopped: bool,
    rendezvous: Option<Arc<dyn Rendezvous>>,
}

impl Rendezvous for Control {
    fn connected(&self, index: u32, opened: u64, failed: u64) -> watch::Receiver<Go> {
        let mut inner = self.lock();
        inner.state.state = Phase::Connected;
        inner.state.connected = Some(ConnectSummary {
            index,
            opened,
            failed,
            measure_at: None,
        });
        inner.measure_order = None;
        let ending = inner.finish || inner.terminated;
        self.go
            .send_replace(if ending { Go::Stop } else { Go::Wait });
        let word = self.go.subscribe();
        drop(inner);
        self.changed.notify_all();
        word
    }
}

impl Gate for ControlGate<'_> {
    fn meeting(&self, index: u32) -> Option<Meeting> {
        Some(Meeting {
            index,
            rendezvous: self.rendezvous.clone()?,
        })
    }

    fn next(&mut self, done: Option<&mut CellResult>) -> Option<CellKey> {
        if let Some(cell) = done {
            let summary = gate::summary(self.index, cell);
            self.control.update(|i| {
                i.state.state = Phase::Between;
                i.state.cells_done = self.index + 1;
                i.state.last_cell = Some(summary);
                i.state.start_at = None;
            });
        }
        let (start_at, key, on_conductor) = match self.control.wait_order() {
            None => {
                self.stopped = true;
                return None;
            }
            Some(Order::End) => return None,
            Some(Order::Cell {
                start_at,
                cell,
                conductor_at,
                offset_micros,
            }) => (
                start_at,
                cell.or_else(|| self.first.clone())?,
                clock::CellClock {
                    epoch_micros: conductor_at.unwrap_or(start_at).saturating_mul(1000),
                    offset_micros,
                    conducted: true,
                },
            ),
        };
        self.index = key.index;
        let now = unix_ms();
        if start_at > now {
            tracing::info!(cell = %key.label, wait_ms = start_at - now, "armed; waiting for the cell's start");
        }
        clock::arm_cell(on_conductor);
        clock::sleep_until_unix_ms(start_at);
        self.control.update(|i| {
            i.state.state = Phase::Running;
            i.state
                .started_at_micros
                .get_or_insert_with(clock::unix_micros);
        });
        Some(key)
    }
}

/// A pod deletion sends SIGTERM; PID 1 ignores it unless handled, and the pod would then wait
/// out its grace period.
fn spawn_sigterm_watch(control: Arc<Control>) -> Result<(), RunError> {
    let mut term = {
        // The signal driver must be created inside the runtime that polls it.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| RunError::io("cannot build the signal runtime", e))?;
        let signal = rt
            .block_on(async {
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            })
            .map_err(|e| RunError::io("cannot handle SIGTERM", e))?;
        (rt, signal)
    };
    std::thread::Builder::new()
        .name("wsload-sigterm".into())
        .spawn(move || {
            let (rt, signal) = &mut term;
            if rt.block_on(signal.recv()).is_some() {
                tracing::info!("SIGTERM: exiting");
                control.terminate();
            }
        })
        .map_err(|e| RunError::io("cannot start the signal thread", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::Counters;
    use crate::observe::exposition::Labels;
    use crate::observe::sampler::Sampler;

    fn control() -> Control {
        let sampler = Arc::new(Sampler::new(Arc::new(Counters::new(1))));
        let labels = Labels {
            test: "t".into(),
            shard: 0,
            scenario: "echo",
        };
        Control::new(&Arc::new(LiveMetrics::new(sampler, labels)), token())
    }

    const TOKEN: &str = "5ec2e75ec2e75ec2e75ec2e75ec2e75e";

    fn token() -> Token {
        Token::new(TOKEN).expect("a token")
    }

    const BEARER: &str = "Bearer 5ec2e75ec2e75ec2e75ec2e75ec2e75e";

    fn state(reply: &Reply) -> State {
        serde_json::from_str(&reply.body).expect("a state")
    }

    fn post<'a>(path: &'a str, body: &'a [u8]) -> Request<'a> {
        Request {
            method: "POST",
            path,
            body,
            authorization: Some(BEARER),
        }
    }

    fn get(path: &str) -> Request<'_> {
        Request {
            method: "GET",
            path,
            body: b"",
            authorization: Some(BEARER),
        }
    }

    /// Without the token, or with another, nothing is heard: 401 and no change; the result
    /// stays unread even once it is there.
    #[test]
    fn requests_without_the_token_are_refused_and_change_nothing() {
        let c = control();
        let wrong = "Bearer 0000000000000000000000000000000000";
        let start = format!("{{\"startAt\": {}}}", unix_ms() + 60_000);
        for authorization in [None, Some(wrong), Some(TOKEN)] {
            let before = c.state();
            for request in [
                post("/control/start", start.as_bytes()),
                post("/control/end", b"{}"),
                post("/control/finish", b"{}"),
                get("/control"),
                get("/control/clock"),
                get("/control/result"),
                get("/control/unknown"),
            ] {
                let request = Request {
                    authorization,
                    ..request
                };
                let reply = c.handle(&request).expect("a control path");
                assert_eq!(reply.status, 401, "{} {}", request.method, request.path);
                assert!(!reply.body.contains(TOKEN));
                c.answered(&request);
            }
            assert_eq!(c.state(), before, "a refused request changed the state");
            assert_eq!(c.lock().order, None);
            assert!(!c.lock().finish, "a refused finish let the shard go");
        }
        // With the token: the same state is read, and the start is taken.
        let read = c.handle(&get("/control")).expect("handled");
        assert_eq!((read.status, state(&read).state), (200, Phase::Waiting));
        let started = c.handle(&post("/control/start", start.as_bytes()));
        assert_eq!(started.map(|r| r.status), Some(202));
        // A result that is ready is still not served without the token.
        c.update(|i| {
            i.state.state = Phase::Done;
            i.result = Some(Arc::from("{\"test\":\"t\"}"));
        });
        let anonymous = as_anonymous(get("/control/result"));
        assert_eq!(c.handle(&anonymous).map(|r| r.status), Some(401));
        let result = c.handle(&get("/control/result")).expect("handled");
        assert_eq!(
            (result.status, result.body.as_str()),
            (200, "{\"test\":\"t\"}")
        );
        // Health and metrics stay open to the kubelet and Prometheus.
        assert!(c.handle(&as_anonymous(get("/readyz"))).is_none());
    }

    fn as_anonymous(r: Request<'_>) -> Request<'_> {
        Request {
            authorization: None,
            ..r
        }
    }

    #[test]
    fn start_is_idempotent_and_conflicts_are_refused() {
        let c = control();
        let at = unix_ms() + 60_000;
        let body = format!("{{\"startAt\": {at}}}");
        let first = c.start(body.as_bytes());
        assert_eq!(first.status, 202);
        assert_eq!(state(&first).state, Phase::Armed);
        assert_eq!(state(&first).start_at, Some(at));
        assert_eq!(state(&first).note, None);
        let again = c.start(body.as_bytes());
        assert_eq!((again.status, state(&again)), (202, state(&first)));
        let other = c.start(format!("{{\"startAt\": {}}}", at + 1).as_bytes());
        assert_eq!(other.status, 409);
        assert_eq!(state(&other).start_at, Some(at));
        assert_eq!(
            c.wait_order(),
            Some(Order::Cell {
                start_at: at,
                cell: None,
                conductor_at: None,
                offset_micros: 0,
            })
        );
        assert_eq!(c.start(b"{\"startAt\": \"soon\"}").status, 400);
        assert_eq!(c.start(b"").status, 400);
    }

    #[test]
    fn a_start_in_the_past_says_so() {
        let c = control();
        let reply = c.start(format!("{{\"startAt\": {}}}", unix_ms() - 5_000).as_bytes());
        assert_eq!(reply.status, 202);
        let note = state(&reply).note.expect("a note");
        assert!(
            note.contains("in the past") && note.contains("starting now"),
            "{note}"
        );
    }

    #[test]
    fn result_waits_for_the_run_and_finish_follows_the_answer() {
        let c = control();
        let result = get("/control/result");
        let before = c.handle(&result).expect("handled");
        assert_eq!((before.status, state(&before).state), (409, Phase::Waiting));
        c.update(|i| {
            i.state.state = Phase::Done;
            i.result = Some(Arc::from("{\"test\":\"t\"}"));
            i.ended = Some(Instant::now());
        });
        let after = c.handle(&result).expect("handled");
        assert_eq!(
            (after.status, after.body.as_str()),
            (200, "{\"test\":\"t\"}")
        );
        // Done and not finished: lingers out.
        assert!(matches!(
            c.wait_exit(Duration::ZERO),
            Exit::Lingered { failed: false }
        ));
        let finish = post("/control/finish", b"{}");
        assert_eq!(c.handle(&finish).expect("handled").status, 200);
        c.answered(&finish);
        assert!(matches!(
            c.wait_exit(Duration::from_secs(3600)),
            Exit::Finished
        ));
        let wrong = get("/control/start");
        assert_eq!(c.handle(&wrong).expect("handled").status, 405);
        assert!(c.handle(&post("/other", b"")).is_none());
    }

    #[test]
    fn cells_are_ordered_one_at_a_time_and_end_once() {
        let c = control();
        let key = |index: u32| CellKey {
            index,
            label: "100".into(),
            connections: 100,
            size: 64,
            format: wsload_spec::Format::Json,
        };
        let order = |index: u32, at: u64| {
            serde_json::to_vec(&CellOrder {
                start_at: at,
                cell: key(index),
                conductor_at: None,
                offset_micros: 0,
            })
            .expect("json")
        };
        // Before the first cell finished: nothing to order yet.
        assert_eq!(c.cell(&order(1, 5)).status, 409);
        assert_eq!(c.end().status, 409);
        c.update(|i| {
            i.state.state = Phase::Between;
            i.state.cells_done = 1;
        });
        // The next cell is 1: an order for another is a conflict.
        assert_eq!(c.cell(&order(2, 5)).status, 409);
        let at = unix_ms() + 60_000;
        let first = c.cell(&order(1, at));
        assert_eq!((first.status, state(&first).state), (202, Phase::Armed));
        // A retry of the same order is answered alike.
        assert_eq!(c.cell(&order(1, at)).status, 202);
        assert_eq!(
            c.wait_order(),
            Some(Order::Cell {
                start_at: at,
                cell: Some(key(1)),
                conductor_at: None,
                offset_micros: 0,
            })
        );
        c.update(|i| {
            i.state.state = Phase::Between;
            i.state.cells_done = 2;
        });
        assert_eq!(c.end().status, 202);
        assert_eq!(c.end().status, 202);
        assert_eq!(c.wait_order(), Some(Order::End));
        assert_eq!(c.cell(&order(2, at)).status, 409);
        assert_eq!(c.cell(b"{}").status, 400);
    }

    #[test]
    fn a_start_after_the_shard_failed_is_refused() {
        let c = control();
        c.update(|i| {
            i.state.state = Phase::Failed;
            i.state.error = Some("target: unreachable".into());
        });
        let reply = c.start(b"{\"startAt\": 1}");
        assert_eq!(reply.status, 409);
        assert_eq!(state(&reply).error.as_deref(), Some("target: unreachable"));
    }
}
