//! Binding, accepting, the HTTP upgrade, admission, dispatch to a profile, and the drain.

use crate::config::{Config, Profile, Timestamp};
use crate::handshake::HandshakeInfo;
use crate::session::{self, Discard, Echo};
use crate::state::ServerState;
use crate::stats::{AcceptError, Rejected};
use crate::{Error, Result, files, pubsub, topics, wse};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::task::TaskTracker;
use wsload_contract::announce::ServerLine;
use wsload_http::prometheus_client::collector::Collector;
use wsload_http::prometheus_client::encoding::DescriptorEncoder;
use wsload_http::prometheus_client::registry::Registry;

/// errno values of accept(2) when this process or the system is out of file descriptors.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

/// Reads the counters at each scrape. It holds the whole of `ServerState` so that `Stats` stays
/// inline there: one pointer fewer on every message's counter increment.
struct Scraped(Arc<ServerState>);

impl std::fmt::Debug for Scraped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.stats.fmt(f)
    }
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.0.stats.encode_families(&mut encoder)?;
        if self.0.config.serves_topics() {
            self.0.topics.counters.encode(&mut encoder)?;
        }
        Ok(())
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
struct Endpoint {
    shared: Arc<ServerState>,
    registry: Registry,
}

impl Endpoint {
    fn new(shared: Arc<ServerState>) -> Endpoint {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scraped(shared.clone())));
        Endpoint { shared, registry }
    }
}

impl wsload_http::Exposition for Endpoint {
    fn render(&self) -> String {
        wsload_http::encode(&self.registry)
    }
    fn ready(&self) -> bool {
        self.shared.stats.is_ready()
    }
}

/// Binds one WebSocket listener. `backlog`: pending connections the kernel queues (capped by
/// `net.core.somaxconn`); storms overflow the usual 128 at once, hence `--listen-backlog`'s
/// large default.
fn bind(addr: SocketAddr, reuse_port: bool, backlog: u32) -> Result<TcpListener> {
    let err = |source: std::io::Error| {
        let hint = match (source.kind(), reuse_port) {
            (std::io::ErrorKind::AddrInUse, false) => {
                "; another process holds it: pick another port, or give every replica that \
                 shares it --reuse-port"
            }
            (std::io::ErrorKind::AddrInUse, true) => {
                "; the process holding it did not set --reuse-port (or runs as another user)"
            }
            _ => "",
        };
        Error::Bind {
            what: "WebSocket listener",
            addr,
            source,
            hint,
        }
    };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    if reuse_port {
        // Replicas bind the same ADDR:PORT; the kernel hashes each new connection to one of
        // their listeners, so N processes share the load and each stays under its own
        // open-file limit.
        socket.set_reuseport(true).map_err(err)?;
    }
    // Latency tests measure the server, not Nagle's algorithm. Accepted sockets inherit the
    // option from the listener on Linux, which saves a system call per connection.
    socket.set_nodelay(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(backlog).map_err(err)
}

/// Runs the server until `shutdown_signal` resolves, then drains within `--drain-timeout`.
/// Prints one `listening` line per socket on stdout once every socket is bound.
pub async fn run(config: Config, shutdown_signal: impl Future<Output = ()>) -> Result<()> {
    let open_files_limit = files::raise_open_file_limit();
    if let Some(limit) = open_files_limit
        && let Some(warning) = files::capacity_warning(config.max_connections, limit)
    {
        tracing::warn!("{warning}");
    }
    let listeners = config
        .listeners
        .iter()
        .map(|l| {
            Ok((
                bind(l.addr, config.reuse_port, config.listen_backlog)?,
                l.profile,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let metrics = TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|source| Error::Bind {
            what: "metrics listener",
            addr: config.metrics_listen,
            hint: if source.kind() == std::io::ErrorKind::AddrInUse {
                "; every replica needs its own --metrics-listen port"
            } else {
                ""
            },
            source,
        })?;

    let shared = Arc::new(ServerState::new(config, open_files_limit));

    let metrics_addr = metrics.local_addr()?;
    tokio::spawn(wsload_http::serve(
        metrics,
        Arc::new(Endpoint::new(shared.clone())),
    ));
    if let Some(tx) = &shared.broadcast {
        // The feed keeps its pace on a thread of its own: as a task on the runtime's workers
        // its 1 ms tick waited its turn behind the connections' writes, and at full speed
        // (100 messages a tick) with 1,000 connections it published 2.6K messages a second,
        // not 100K.
        let feed = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let (tx, shared) = (tx.clone(), shared.clone());
        std::thread::Builder::new()
            .name("broadcast-feed".into())
            .spawn(move || feed.block_on(publish(tx, shared)))?;
    }
    if let Some(ticker) = shared.config.topics.ticker {
        let shared = shared.clone();
        tokio::spawn(async move {
            topics::ticker::run(&shared.topics, ticker, shared.shutdown.clone()).await;
        });
    }
    let tracker = TaskTracker::new();
    for (listener, pinned) in listeners {
        let addr = listener.local_addr()?;
        let profile = pinned.map_or("by path", Profile::label);
        println!(
            "{}",
            ServerLine::Listening(format!("ws://{addr}")).print(profile)
        );
        tracing::info!(%addr, profile, "listening");
        tracker.spawn(accept_loop(
            listener,
            pinned,
            shared.clone(),
            tracker.clone(),
        ));
    }
    // Ready before the line that announces the server: whoever reads it (a test, `wsload run`)
    // may ask /readyz at once, and a server preempted between the two answered 503.
    shared.stats.set_ready(true);
    println!(
        "{}",
        ServerLine::Metrics(format!("http://{metrics_addr}/metrics")).print("")
    );

    shutdown_signal.await;
    let open = shared.admitted();
    tracing::info!(
        open,
        "draining: no new connections, closing open ones with 1001"
    );
    shared.stats.set_ready(false);
    shared.shutdown.cancel();
    tracker.close();
    match tokio::time::timeout(shared.config.drain_timeout, tracker.wait()).await {
        Ok(()) => tracing::info!("drained"),
        Err(_) => tracing::warn!(
            still_open = shared.admitted(),
            timeout = ?shared.config.drain_timeout,
            "drain timeout; exiting with connections open"
        ),
    }
    Ok(())
}

async fn accept_loop(
    listener: TcpListener,
    pinned: Option<Profile>,
    shared: Arc<ServerState>,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _)) => {
                tracker.spawn(connection(stream, pinned, shared.clone()));
            }
            Err(e) => {
                let out_of_files = matches!(e.raw_os_error(), Some(EMFILE | ENFILE));
                let kind = if out_of_files {
                    AcceptError::FileLimit
                } else {
                    AcceptError::Other
                };
                shared.stats.accept_error(kind);
                if let Some(suppressed) = shared.accept_error_log.due(Instant::now()) {
                    if out_of_files {
                        let limit = shared
                            .stats
                            .open_files_limit()
                            .map_or_else(|| "unknown".to_string(), |l| l.to_string());
                        tracing::warn!(
                            error = %e,
                            open_files_limit = %limit,
                            admitted = shared.admitted(),
                            suppressed,
                            "accept failed: out of file descriptors; new connections wait in the \
                             listen backlog until some close. Raise the hard open-file limit \
                             (ulimit -Hn, the container runtime's nofile) or run more replicas \
                             (target.server.replicas)"
                        );
                    } else {
                        tracing::warn!(error = %e, suppressed, "accept failed");
                    }
                }
                // Out of descriptors the listener stays readable, so retrying at once would spin
                // a core; the pending connections wait in the backlog meanwhile.
                tokio::time::sleep(Duration::from_millis(if out_of_files { 100 } else { 5 })).await;
            }
        }
    }
}

async fn connection(stream: TcpStream, pinned: Option<Profile>, shared: Arc<ServerState>) {
    let started = Instant::now();
    let mut info = HandshakeInfo::default();
    // The error type is fixed by tungstenite's `Callback` signature.
    #[allow(clippy::result_large_err)]
    let callback = |req: &Request, resp: Response| {
        info = HandshakeInfo::from_request(req);
        Ok(resp)
    };
    let upgrade =
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(shared.ws_config));
    let mut ws = match tokio::time::timeout(shared.config.handshake_timeout, upgrade).await {
        Err(_) => return shared.stats.rejected(Rejected::HandshakeTimeout),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "handshake failed");
            return shared.stats.rejected(Rejected::HandshakeError);
        }
        Ok(Ok(ws)) => ws,
    };
    let profile = shared.config.route(pinned, &info.path);
    if shared.shutdown.is_cancelled() {
        shared.stats.rejected(Rejected::Draining);
        return session::close(&mut ws, CloseCode::Away, "server shutting down").await;
    }
    let Some(_admission) = shared.admit() else {
        shared.stats.rejected(Rejected::Capacity);
        return session::close(&mut ws, CloseCode::Again, "try again later").await;
    };
    shared.stats.accepted(profile, started.elapsed());
    let why = match profile {
        Profile::Echo => session::run(&mut ws, &shared, profile, &mut Echo, None, None).await,
        Profile::Sink => session::run(&mut ws, &shared, profile, &mut Discard, None, None).await,
        Profile::Broadcast => {
            let rx = shared.broadcast.as_ref().map(broadcast::Sender::subscribe);
            session::run(&mut ws, &shared, profile, &mut Discard, rx, None).await
        }
        Profile::Wse => wse::serve(&mut ws, &shared, info).await,
        Profile::Pubsub => pubsub::serve(&mut ws, &shared).await,
    };
    shared.stats.closed(profile, why);
}

/// The broadcast feed: `--broadcast-batch` timestamped messages per tick, shared by every
/// subscriber. Missed ticks are skipped, not made up in a burst: a burst larger than the
/// backlog would make every subscriber skip at once; the pace the messages carry (their
/// numbers and instants) is what a client owes, so a slower tick is no lie.
async fn publish(tx: broadcast::Sender<Message>, shared: Arc<ServerState>) {
    let config = &shared.config;
    let pad = "x".repeat(config.broadcast_payload_size);
    let mut ticker = tokio::time::interval(config.broadcast_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut seq: u64 = 0;
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        for _ in 0..config.broadcast_batch {
            seq += 1;
            let text = tick_message(seq, SystemTime::now(), config.broadcast_timestamp, &pad);
            // No subscribers is not an error: the feed runs whether or not anyone listens.
            let _ = tx.send(Message::Text(text.into()));
        }
    }
}

/// One broadcast message: its number, its publish instant `now` in the form asked, its padding.
fn tick_message(seq: u64, now: SystemTime, form: Timestamp, pad: &str) -> String {
    let us = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    match form {
        Timestamp::Us => format!(r#"{{"t":"tick","seq":{seq},"ts_us":{us},"pad":"{pad}"}}"#),
        // Written from the integer microseconds, not through an f64, so that the fraction is
        // exactly the microseconds and reads back without rounding.
        Timestamp::Ms => format!(
            r#"{{"t":"tick","seq":{seq},"ts":{}.{:03},"pad":"{pad}"}}"#,
            us / 1000,
            us % 1000
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_carries_its_instant_in_the_form_asked() {
        let at = UNIX_EPOCH + Duration::from_micros(1_795_864_874_129_012);
        assert_eq!(
            tick_message(7, at, Timestamp::Us, "xx"),
            r#"{"t":"tick","seq":7,"ts_us":1795864874129012,"pad":"xx"}"#
        );
        let ms = tick_message(8, at, Timestamp::Ms, "");
        assert_eq!(
            ms,
            r#"{"t":"tick","seq":8,"ts":1795864874129.012,"pad":""}"#
        );
        let v: serde_json::Value = serde_json::from_str(&ms).expect("JSON");
        assert_eq!(v["ts"].as_f64(), Some(1_795_864_874_129.012));
        // A whole millisecond keeps its three decimals: the value is a float either way.
        let whole = UNIX_EPOCH + Duration::from_millis(1_795_864_874_129);
        assert!(tick_message(1, whole, Timestamp::Ms, "").contains(r#""ts":1795864874129.000,"#));
    }

    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let listener = bind("127.0.0.1:0".parse().expect("addr"), false, 128).expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        assert!(accepted.nodelay().expect("nodelay"), "Nagle left on");
        assert!(
            !client.nodelay().expect("nodelay"),
            "the control socket has Nagle on"
        );
    }

    #[tokio::test]
    async fn reuse_port_lets_two_listeners_share_an_address() {
        let first = bind("127.0.0.1:0".parse().expect("addr"), true, 128).expect("bind");
        let addr = first.local_addr().expect("local addr");
        let second = bind(addr, true, 128).expect("a second listener on the same port");
        assert_eq!(second.local_addr().expect("local addr"), addr);
        let err = bind(addr, false, 128).expect_err("without SO_REUSEPORT the port is taken");
        let text = err.to_string();
        assert!(
            text.contains(&format!("cannot bind the WebSocket listener on {addr}"))
                && text.contains("--reuse-port"),
            "{text}"
        );
    }
}
