//! What one connection does once open: one file per way a connection behaves, and what they
//! share. [`run`] is the one place a cell's [`Behavior`] becomes its loop:
//!
//! | behavior | file | scenarios |
//! |---|---|---|
//! | close at once | [`end`] (how a storm's goodbye is judged) | connectionStorm |
//! | hold, pinging every interval | [`hold`] | sustainedHold, connectionLimit's probes |
//! | pings one after another | [`ping`] | pingLatency |
//! | one message in flight | [`pingpong`] | pingpong |
//! | as fast as possible, answers counted | [`saturate`] | throughput, payloadMatrix, formatComparison |
//! | write only | [`blast`] | blast |
//! | open loop on a schedule | [`paced`] | echo, constantRate |
//! | subscribers and publishers | [`fanout`] (its subscriber and publisher) | fanout |
//!
//! Shared by them: [`worker`] (the worker's clock, figures and scratch space every
//! connection records into), [`read`] and [`write`] (every frame accounted for; writes
//! watched for a server that stops reading, [`stall`]), [`pinger`] (timed messages and their
//! answers), [`sender`] (counted messages), [`answered`] (which counted messages were answered), [`serving`] (connections served from their open,
//! before the measured phase: [`serve`]), [`end`] (the close, and how the connection ended).
//!
//! Every behavior owns its stream (no `split`, which locks per poll), writes with `feed` and one
//! `flush` per burst unless per-message flushing is asked for, and records into its worker's
//! statistics (or into a discard bin during warm-up).

pub mod answered;
pub mod beat;
pub mod blast;
pub mod end;
pub mod fanout;
pub mod hold;
pub mod paced;
pub mod ping;
pub mod pinger;
pub mod pingpong;
pub mod read;
pub mod reconnect;
pub mod saturate;
pub mod sender;
pub mod serving;
pub mod stall;
pub mod worker;
pub mod write;

pub use serving::Serving;
pub use worker::{Scratch, WorkerState};

use crate::connect::Ws;
use crate::conversation::Out;
use crate::model::Behavior;
use blast::blast;
use end::finish;
use hold::hold;
use paced::paced;
use ping::pings;
use pinger::Pinger;
use pingpong::pingpong;
use saturate::saturate;
use sender::Sender;
use std::rc::Rc;
use std::sync::Arc;
use worker::ms_since;

/// Connection `n` of a cell whose connections are served from their open (a hold's, a
/// fanout's: see [`Serving`]), just opened with what its steps on open captured: its task
/// spawned, to run until its end.
pub fn serve(serving: &Rc<Serving>, ws: Ws, n: u64, vars: &[bytes::Bytes]) {
    let message = serving.message_for(vars);
    match &serving.behavior {
        // A held connection's task is its own future: inside `fanout::task` it would be as
        // large as a fanout subscriber's state, for every one of a hundred thousand.
        Behavior::Hold { every, ping } => {
            serving.spawn(hold::held(ws, n, serving.clone(), *every, *ping, message));
        }
        behavior => {
            // Kept only when a subscriber back may resume with them.
            let vars = if serving.early.script.resume.is_empty() {
                Vec::new()
            } else {
                vars.to_vec()
            };
            let task = fanout::task(ws, n, serving.clone(), behavior.clone(), message, vars);
            serving.spawn(task);
        }
    }
}

/// The connection's measured phase and its close. A plain fn returning an `async move` block
/// rather than an `async fn`: an async fn stores its arguments and the locals they move into
/// separately (rust-lang/rust#62958), doubling the 1.4 KB stream in every task.
#[allow(clippy::manual_async_fn)] // deliberately not an async fn: see above
pub fn run(
    mut ws: Ws,
    n: u64,
    ctx: Rc<WorkerState>,
    behavior: Behavior,
    message: Arc<Out>,
) -> impl std::future::Future<Output = ()> {
    async move {
        let ctx = &*ctx;
        // Milliseconds from the phase's start, not an `Instant`: 4 bytes in every held
        // connection's task instead of 16.
        let began = ms_since(ctx.start);
        // Boxed: a task's future would otherwise be as large as the largest behavior's state
        // machine, for every one of 100K connections. Except the hold's, the behavior that
        // idles at scale: small (see `hold::hold`), inline it spares every held connection an
        // allocation, for ~330 bytes more in the other behaviors' tasks.
        // `Ok`: healthy at the deadline (or its work done), so we close it; `Err`: the server or
        // the network dropped it, and why.
        let ended = match &behavior {
            Behavior::Close => Ok(()),
            Behavior::Hold { every, ping } => {
                hold(
                    &mut ws,
                    ctx,
                    *every,
                    Pinger::new(*ping, message, n),
                    hold::NEVER,
                    false,
                )
                .await
            }
            Behavior::Ping {
                count,
                interval,
                ping,
            } => {
                let pinger = Pinger::new(*ping, message, n);
                Box::pin(pings(&mut ws, ctx, *count, *interval, pinger)).await
            }
            Behavior::Saturate {
                window,
                per_message_flush,
            } => {
                let out = Sender::new(message, n);
                Box::pin(saturate(&mut ws, ctx, *window, *per_message_flush, out)).await
            }
            Behavior::Blast { per_message_flush } => {
                let out = Sender::new(message, n);
                Box::pin(blast(&mut ws, ctx, *per_message_flush, out)).await
            }
            Behavior::PingPong { ping } => {
                let pinger = Pinger::new(*ping, message, n);
                Box::pin(pingpong(&mut ws, ctx, pinger)).await
            }
            Behavior::Paced {
                schedule,
                ping,
                per_message_flush,
            } => {
                let pinger = Pinger::new(*ping, message, n);
                Box::pin(paced(&mut ws, ctx, n, schedule, pinger, *per_message_flush)).await
            }
            // A fanout's connections run `fanout::task` (`behavior::serve` spawns it at their
            // open), never this.
            Behavior::Fanout(_) => unreachable!("a fanout connection runs fanout::task"),
        };
        Box::pin(finish(&mut ws, ctx, &behavior, ended, began)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Encoding, Script};
    use crate::model::PingCfg;
    use std::time::Duration;
    use tokio::time::Instant;
    use wsload_spec::PingKind;
    use wsload_ws::{Io, Ws};

    /// A client connection over loopback, its address and the server's side (kept open).
    async fn connected() -> (Ws, std::net::SocketAddr, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let (c, s) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        let server = s.expect("accept").0;
        (Ws::new(Io::Plain(c.expect("connect")), 1024), addr, server)
    }

    /// A held connection's task is its `run` future plus 104 bytes of tokio's task header and
    /// trailer, rounded up to 128 bytes (tokio 1.54 on x86_64): 640 bytes since holds ping
    /// without a select! and a ping future of their own (1.2 KB in two allocations before),
    /// most of an idle connection's memory; 768 since the conversation (see below).
    #[tokio::test]
    async fn a_held_connection_stays_small() {
        let (ws, _, _server) = connected().await;
        let slot = Arc::new(crate::counters::Counters::new(1)).slot_ref(0);
        let now = Instant::now();
        let c = wsload_spec::builtin::conversation(wsload_spec::Protocol::Echo).expect("parses");
        let script = Script::compile(&c)
            .expect("compiles")
            .for_cell(true, Encoding::AsWritten, 64);
        let message = script.shared_message().expect("no variables");
        let ctx = Rc::new(WorkerState {
            start: now,
            cell_clock: Default::default(),
            start_on_conductor_us: 0,
            connections: 1,
            measure_from: now,
            deadline: now,
            write_timeout: Duration::from_secs(10),
            timed: true,
            script: Arc::new(script),
            size: 64,
            stats: Default::default(),
            discard: Default::default(),
            slot,
            scratch: Default::default(),
            comeback: None,
            slowest_ping: Default::default(),
        });
        let ping = PingCfg {
            kind: PingKind::App,
            timeout: Duration::from_secs(1),
        };
        // 144 with the connection's limits (three u32, `connect.limits`); it was 128, two
        // cache lines.
        assert!(
            std::mem::size_of::<Ws>() <= 144,
            "{}",
            std::mem::size_of::<Ws>()
        );
        let task = run(ws, 0, ctx, Behavior::Hold { every: None, ping }, message);
        let size = std::mem::size_of_val(&task);
        // 592 measured with the conversation (it was at most 536): the pinger carries the
        // connection's measured message (an `Arc`) and its number for `${conn}`, the hold the
        // heartbeat's schedule (as u32 milliseconds), and the read loop the connection's
        // number for the replies. A 768-byte task allocation instead of 640. 608 with the
        // connection's limits in its `Ws`; 616 with the pace of its automatic replies (a
        // reply loop's watch, 8 bytes in the pinger): 720 bytes with tokio's, still the same
        // 768-byte allocation. 648 with a ping's write that reads while it waits, its watch
        // cut off at the deadline (a server that floods and never reads left both sides
        // blocked writing: issue 39); 688 with the heartbeat going on while a ping's answer
        // is awaited (its wait boxed, yet its await point costs 24 bytes): 792 with tokio's,
        // 40 bytes a connection more than before (12 MB in 300,000). 680 with a close
        // disruption's instant (4 bytes) and the heartbeat's interval read from the script
        // where needed rather than kept (16 bytes fewer).
        assert!(size <= 680, "a held connection's future is {size} bytes");
    }

    /// The same for a held connection served from its open ([`hold::held`], the path every
    /// hold takes): its whole life, the phase before the start and a drop's reconnection
    /// included: 792 bytes, before reconnecting and with it (measured side by side; with
    /// the close disruptions' instant too, the heartbeat's interval no longer kept): the
    /// reconnection's state is boxed, paid only by a connection that drops.
    #[tokio::test]
    async fn a_served_held_connection_stays_small() {
        let (ws, addr, _server) = connected().await;
        let spec = wsload_spec::fixtures::spec(&format!(
            "  target: {{url: \"ws://{addr}/\"}}\n  scenario: sustainedHold\n  reconnect: {{policy: immediate}}\n"
        ));
        let plan = crate::model::plan::Plan::new(&spec, crate::model::Shard::WHOLE).expect("plans");
        let cell = plan.cells().into_iter().next().expect("a cell").cell;
        let slot = Arc::new(crate::counters::Counters::new(1)).slot_ref(0);
        let early = WorkerState::new(
            &cell,
            worker::Instants::before_start(),
            Default::default(),
            slot,
        );
        let dialer =
            Arc::new(crate::connect::Dialer::new(&spec, &format!("ws://{addr}/")).expect("dialer"));
        let ping = PingCfg {
            kind: PingKind::App,
            timeout: Duration::from_secs(1),
        };
        let serving = Rc::new(Serving::new(early, cell.behavior.clone(), dialer));
        let message = serving.message_for(&[]);
        let task = hold::held(ws, 0, serving, None, ping, message);
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= 792,
            "a served held connection's future is {size} bytes"
        );
    }
}
