//! Binding, accepting, the HTTP upgrade, admission, dispatch to a profile, and the drain.

use crate::config::{Config, Profile};
use crate::session::{self, Discard, Echo};
use crate::stats::{AcceptError, Rejected, Stats};
use crate::{Error, Result, files, wse};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use wsload_contract::announce::ServerLine;
use wsload_http::prometheus_client::collector::Collector;
use wsload_http::prometheus_client::encoding::DescriptorEncoder;
use wsload_http::prometheus_client::registry::Registry;
use wsload_proto::jwt::Validation;

/// Broadcast messages a slow connection may fall behind before it skips some.
const BROADCAST_BACKLOG: usize = 1024;

/// errno values of accept(2) when this process or the system is out of file descriptors.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

/// State shared by every task of the server.
pub struct Shared {
    pub config: Config,
    pub stats: Stats,
    pub shutdown: CancellationToken,
    pub validation: Validation,
    ws_config: WebSocketConfig,
    broadcast: Option<broadcast::Sender<Message>>,
    admitted: AtomicU64,
    accept_error_log: AcceptErrorLog,
}

impl Shared {
    /// Takes one of `--max-connections` places; the guard gives it back.
    fn admit(&self) -> Option<Admission<'_>> {
        let before = self.admitted.fetch_add(1, Ordering::AcqRel);
        let cap = self.config.max_connections;
        if cap > 0 && before >= cap {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Admission(&self.admitted))
    }
}

struct Admission<'a>(&'a AtomicU64);
impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads the counters at each scrape. It holds the whole of `Shared` so that `Stats` stays
/// inline there: one pointer fewer on every message's counter increment.
struct Scraped(Arc<Shared>);

impl std::fmt::Debug for Scraped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.stats.fmt(f)
    }
}

impl Collector for Scraped {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.0.stats.encode(encoder)
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
struct Endpoint {
    shared: Arc<Shared>,
    registry: Registry,
}

impl Endpoint {
    fn new(shared: Arc<Shared>) -> Endpoint {
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

/// What the upgrade request said that a profile needs later.
#[derive(Debug, Default)]
pub struct HandshakeInfo {
    pub path: String,
    /// From the `access_token` cookie, else `Authorization: Bearer`.
    pub token: Option<String>,
    /// `format=msgpack` in the query string.
    pub msgpack: bool,
}

impl HandshakeInfo {
    fn from_request(req: &Request) -> Self {
        let cookie_token = req
            .headers()
            .get_all("cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|kv| kv.trim().strip_prefix("access_token=").map(str::to_string));
        let bearer = || {
            req.headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("bearer "))
                })
                .map(|t| t.trim().to_string())
        };
        let msgpack = req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|kv| kv.eq_ignore_ascii_case("format=msgpack"))
        });
        HandshakeInfo {
            path: req.uri().path().to_string(),
            token: cookie_token.or_else(bearer),
            msgpack,
        }
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

    let ws_config = WebSocketConfig::default()
        .read_buffer_size(config.read_buffer_size)
        .write_buffer_size(64 * 1024)
        .max_write_buffer_size(64 * 1024 + 2 * config.max_message_size)
        .max_message_size(Some(config.max_message_size))
        .max_frame_size(Some(config.max_message_size));
    let broadcast = config
        .serves(Profile::Broadcast)
        .then(|| broadcast::channel(BROADCAST_BACKLOG).0);
    let stats = Stats::new(config.profiles());
    if let Some(limit) = open_files_limit {
        stats.set_open_files_limit(limit);
    }
    let shared = Arc::new(Shared {
        stats,
        validation: Validation {
            issuer: config.jwt_issuer.clone(),
            audience: config.jwt_audience.clone(),
        },
        shutdown: CancellationToken::new(),
        ws_config,
        broadcast,
        admitted: AtomicU64::new(0),
        accept_error_log: AcceptErrorLog::new(),
        config,
    });

    let metrics_addr = metrics.local_addr()?;
    tokio::spawn(wsload_http::serve(
        metrics,
        Arc::new(Endpoint::new(shared.clone())),
    ));
    if let Some(tx) = &shared.broadcast {
        tokio::spawn(publish(tx.clone(), shared.clone()));
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
    println!(
        "{}",
        ServerLine::Metrics(format!("http://{metrics_addr}/metrics")).print("")
    );
    shared.stats.set_ready(true);

    shutdown_signal.await;
    let open = shared.admitted.load(Ordering::Relaxed);
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
            still_open = shared.admitted.load(Ordering::Relaxed),
            timeout = ?shared.config.drain_timeout,
            "drain timeout; exiting with connections open"
        ),
    }
    Ok(())
}

/// Accept failures are logged at most once a second (for all listeners together): out of
/// descriptors, accept fails on every retry until a connection closes, and a line per retry
/// would flood the log.
struct AcceptErrorLog {
    epoch: Instant,
    /// Milliseconds from `epoch` to the last line written; `NEVER` before the first.
    last_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl AcceptErrorLog {
    const EVERY_MS: u64 = 1000;
    const NEVER: u64 = u64::MAX;

    fn new() -> Self {
        AcceptErrorLog {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(Self::NEVER),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(failures not logged since the last line)` when a line may be written now.
    fn due(&self, now: Instant) -> Option<u64> {
        let now_ms = u64::try_from(now.saturating_duration_since(self.epoch).as_millis())
            .unwrap_or(Self::NEVER - 1);
        let last = self.last_ms.load(Ordering::Relaxed);
        let quiet = last == Self::NEVER || now_ms >= last.saturating_add(Self::EVERY_MS);
        // The exchange makes one listener the writer when several fail at the same moment.
        if quiet
            && self
                .last_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

async fn accept_loop(
    listener: TcpListener,
    pinned: Option<Profile>,
    shared: Arc<Shared>,
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
                            admitted = shared.admitted.load(Ordering::Relaxed),
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

async fn connection(stream: TcpStream, pinned: Option<Profile>, shared: Arc<Shared>) {
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
        Profile::Echo => session::run(&mut ws, &shared, profile, &mut Echo, None).await,
        Profile::Sink => session::run(&mut ws, &shared, profile, &mut Discard, None).await,
        Profile::Broadcast => {
            let rx = shared.broadcast.as_ref().map(broadcast::Sender::subscribe);
            session::run(&mut ws, &shared, profile, &mut Discard, rx).await
        }
        Profile::Wse => wse::serve(&mut ws, &shared, info).await,
    };
    shared.stats.closed(profile, why);
}

/// The broadcast feed: one timestamped message per tick, shared by every subscriber.
async fn publish(tx: broadcast::Sender<Message>, shared: Arc<Shared>) {
    let pad = "x".repeat(shared.config.broadcast_payload_size);
    let mut ticker = tokio::time::interval(shared.config.broadcast_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut seq: u64 = 0;
    loop {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        seq += 1;
        let ts_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        let text = format!(r#"{{"t":"tick","seq":{seq},"ts_us":{ts_us},"pad":"{pad}"}}"#);
        // No subscribers is not an error: the feed runs whether or not anyone listens.
        let _ = tx.send(Message::Text(text.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn accept_errors_are_logged_at_most_once_a_second() {
        let log = AcceptErrorLog::new();
        let t0 = Instant::now();
        assert_eq!(log.due(t0), Some(0));
        for ms in [100, 500, 999] {
            assert_eq!(log.due(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(log.due(t0 + Duration::from_millis(1000)), Some(3));
        assert_eq!(log.due(t0 + Duration::from_millis(1500)), None);
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
