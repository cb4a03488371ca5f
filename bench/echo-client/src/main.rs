//! Benchmark client for `bench/server`: drives any WebSocket echo server the same way so that
//! wsload-server, the Go peer and the Node peer are measured by one client with one set of settings.
//!
//! `throughput` pipelines messages with a bounded window per connection and counts echoes in a
//! measured window; `idle` opens many connections and holds them so the caller can read the
//! server's RSS. Results are one JSON object per line on stdout.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{WebSocketStream, client_async_with_config};

type Ws = WebSocketStream<TcpStream>;

/// At most this many error strings are kept for the report; the rest are only counted.
const MAX_REPORTED_ERRORS: usize = 5;

#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Echo server URL, e.g. ws://127.0.0.1:18080/
    #[arg(long, global = true, default_value = "ws://127.0.0.1:8080/")]
    url: String,
    /// Handshakes in flight at once; keeps the server's accept backlog from overflowing.
    #[arg(long, global = true, default_value_t = 200)]
    connect_concurrency: usize,
    /// Give up on one TCP connect + WebSocket handshake after this many seconds.
    #[arg(long, global = true, default_value_t = 10.0)]
    connect_timeout: f64,
    /// Free-form name copied into the JSON output (e.g. the server under test).
    #[arg(long, global = true, default_value = "")]
    label: String,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Pipelined echo throughput over N connections.
    Throughput(ThroughputArgs),
    /// Open N connections, report when all are open, hold them idle, then close.
    Idle(IdleArgs),
}

#[derive(clap::Args, Debug)]
struct ThroughputArgs {
    #[arg(long, short = 'n', default_value_t = 100)]
    connections: usize,
    /// Payload bytes per message.
    #[arg(long, short = 's', default_value_t = 64)]
    payload: usize,
    /// Messages outstanding (sent, echo not yet received) per connection.
    #[arg(long, short = 'w', default_value_t = 64)]
    window: usize,
    /// Seconds of load before the measured window starts.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Length of the measured window in seconds.
    #[arg(long, short = 'd', default_value_t = 10.0)]
    duration: f64,
    /// Send text frames instead of binary ones.
    #[arg(long)]
    text: bool,
    /// PID of the server process: its CPU time (utime+stime) over the measured window is reported.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Kernel clock ticks per second for /proc/PID/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
}

#[derive(clap::Args, Debug)]
struct IdleArgs {
    #[arg(long, short = 'n', default_value_t = 10_000)]
    connections: usize,
    /// Hold at most this many seconds; SIGINT/SIGTERM ends the hold earlier.
    #[arg(long, default_value_t = 120.0)]
    hold: f64,
    /// Client read buffer per connection; small because only the server's memory is of interest.
    #[arg(long, default_value_t = 4096)]
    read_buffer: usize,
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let result = match &cli.mode {
        Mode::Throughput(args) => throughput(&cli, args).await,
        Mode::Idle(args) => idle(&cli, args).await,
    };
    if let Err(e) = result {
        eprintln!("wsload-bench-client: {e}");
        std::process::exit(1);
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn print_json<T: Serialize>(value: &T) -> Result<(), BoxError> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

async fn connect_one(
    url: String,
    config: WebSocketConfig,
    timeout: Duration,
) -> Result<Ws, String> {
    let attempt = async {
        let addr = host_port(&url)?;
        let tcp = TcpStream::connect(&addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        // Without this, Nagle holds back small frames and the numbers measure the delayed-ACK timer.
        tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
        let (ws, _) = client_async_with_config(url.as_str(), tcp, Some(config))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        Ok(ws)
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| format!("connect + handshake timed out after {timeout:?}"))?
}

/// `ws://host:port/path` -> `host:port` (port 80 if absent). Only plain ws:// is supported: the
/// benchmark is loopback-only and TLS would measure the TLS stack, not the servers.
fn host_port(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("ws://")
        .ok_or_else(|| format!("only ws:// URLs are supported, got {url}"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    if authority.is_empty() {
        return Err(format!("no host in {url}"));
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty());
    Ok(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    })
}

struct Connected {
    sockets: Vec<Ws>,
    failed: usize,
    errors: Vec<String>,
}

/// Opens `n` connections with at most `concurrency` handshakes in flight, spread over the runtime's
/// workers so that handshake cost does not serialise on one thread.
async fn connect_all(cli: &Cli, n: usize, config: WebSocketConfig) -> Connected {
    let permits = Arc::new(Semaphore::new(cli.connect_concurrency.max(1)));
    let timeout = Duration::from_secs_f64(cli.connect_timeout);
    let mut set = JoinSet::new();
    for _ in 0..n {
        let permits = Arc::clone(&permits);
        let url = cli.url.clone();
        set.spawn(async move {
            let _permit = permits.acquire_owned().await;
            connect_one(url, config, timeout).await
        });
    }
    let mut out = Connected {
        sockets: Vec::with_capacity(n),
        failed: 0,
        errors: Vec::new(),
    };
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok(ws)) => out.sockets.push(ws),
            Ok(Err(e)) => {
                out.failed += 1;
                if out.errors.len() < MAX_REPORTED_ERRORS {
                    out.errors.push(e);
                }
            }
            Err(e) => {
                out.failed += 1;
                if out.errors.len() < MAX_REPORTED_ERRORS {
                    out.errors.push(format!("connect task: {e}"));
                }
            }
        }
    }
    out
}

/// utime + stime of a process in clock ticks, all threads included.
fn proc_cpu_ticks(pid: &str) -> Result<u64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // comm (field 2) may contain spaces and parentheses; the fields after the last ')' are fixed.
    let tail = stat
        .rsplit_once(')')
        .ok_or("unexpected /proc/PID/stat format")?
        .1;
    let fields: Vec<&str> = tail.split_whitespace().collect();
    // fields[0] is field 3 (state), so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11).ok_or("no utime")?.parse()?;
    let stime: u64 = fields.get(12).ok_or("no stime")?.parse()?;
    Ok(utime + stime)
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

#[derive(Default)]
struct ConnStats {
    /// Echoes received inside the measured window.
    measured_msgs: u64,
    measured_bytes: u64,
    error: Option<String>,
}

#[derive(Serialize)]
struct ThroughputReport<'a> {
    mode: &'static str,
    label: &'a str,
    url: &'a str,
    connections: usize,
    connected: usize,
    payload_bytes: usize,
    window: usize,
    frame: &'static str,
    warmup_s: f64,
    measured_s: f64,
    messages: u64,
    msgs_per_s: f64,
    payload_mib_per_s: f64,
    server_pid: Option<u32>,
    server_cpu_s: Option<f64>,
    msgs_per_server_cpu_s: Option<f64>,
    client_cpu_s: Option<f64>,
    failed_connections: usize,
    errors: Vec<String>,
}

async fn throughput(cli: &Cli, args: &ThroughputArgs) -> Result<(), BoxError> {
    if args.window == 0 || args.connections == 0 {
        return Err("--window and --connections must be at least 1".into());
    }
    let Connected {
        sockets,
        mut failed,
        mut errors,
    } = connect_all(cli, args.connections, WebSocketConfig::default()).await;
    if sockets.is_empty() {
        return Err(format!("no connection could be opened: {errors:?}").into());
    }
    let connected = sockets.len();

    let payload = Bytes::from(vec![b'x'; args.payload]);
    let message = if args.text {
        // 'x' bytes are valid UTF-8, so this cannot fail.
        Message::Text(
            tungstenite::Utf8Bytes::try_from(payload)
                .map_err(|e| format!("text payload is not UTF-8: {e}"))?,
        )
    } else {
        Message::Binary(payload)
    };

    // One relaxed load per message of a line written three times per run: the only shared state
    // on the hot path. Counts stay in each task and are merged when the tasks end.
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let mut tasks = JoinSet::new();
    for ws in sockets {
        tasks.spawn(pump(
            ws,
            message.clone(),
            args.payload,
            args.window,
            Arc::clone(&phase),
        ));
    }

    let server_pid = args.server_pid.map(|p| p.to_string());
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;

    let server_start = server_pid.as_deref().map(proc_cpu_ticks).transpose()?;
    let client_start = proc_cpu_ticks("self").ok();
    let started = Instant::now();
    phase.store(MEASURE, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    phase.store(STOP, Ordering::Relaxed);
    let measured = started.elapsed().as_secs_f64();
    let server_end = server_pid.as_deref().map(proc_cpu_ticks).transpose()?;
    let client_end = proc_cpu_ticks("self").ok();

    let mut messages = 0u64;
    let mut bytes = 0u64;
    let collect = async {
        while let Some(joined) = tasks.join_next().await {
            let stats = match joined {
                Ok(s) => s,
                Err(e) => ConnStats {
                    error: Some(format!("pump task: {e}")),
                    ..ConnStats::default()
                },
            };
            messages += stats.measured_msgs;
            bytes += stats.measured_bytes;
            if let Some(e) = stats.error {
                failed += 1;
                if errors.len() < MAX_REPORTED_ERRORS {
                    errors.push(e);
                }
            }
        }
    };
    // A server that stops answering must not hang the benchmark; its counts so far are kept.
    if tokio::time::timeout(Duration::from_secs(10), collect)
        .await
        .is_err()
    {
        errors.push("some connections did not finish within 10 s after the window".into());
    }

    let tck = args.clk_tck.max(1) as f64;
    let server_cpu_s = match (server_start, server_end) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / tck),
        _ => None,
    };
    let client_cpu_s = match (client_start, client_end) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / tck),
        _ => None,
    };
    print_json(&ThroughputReport {
        mode: "throughput",
        label: &cli.label,
        url: &cli.url,
        connections: args.connections,
        connected,
        payload_bytes: args.payload,
        window: args.window,
        frame: if args.text { "text" } else { "binary" },
        warmup_s: args.warmup,
        measured_s: measured,
        messages,
        msgs_per_s: messages as f64 / measured,
        payload_mib_per_s: bytes as f64 / measured / (1024.0 * 1024.0),
        server_pid: args.server_pid,
        server_cpu_s,
        msgs_per_server_cpu_s: server_cpu_s
            .filter(|c| *c > 0.0)
            .map(|c| messages as f64 / c),
        client_cpu_s,
        failed_connections: failed,
        errors,
    })
}

/// Keeps `window` messages outstanding on one connection until the phase is STOP.
async fn pump(
    mut ws: Ws,
    message: Message,
    payload_len: usize,
    window: usize,
    phase: Arc<AtomicU8>,
) -> ConnStats {
    let mut stats = ConnStats::default();
    let mut outstanding = 0usize;
    let result: Result<(), String> = async {
        loop {
            if phase.load(Ordering::Relaxed) == STOP {
                return Ok(());
            }
            if outstanding < window {
                // feed buffers; the single flush turns the whole burst into few write syscalls.
                while outstanding < window {
                    ws.feed(message.clone())
                        .await
                        .map_err(|e| format!("send: {e}"))?;
                    outstanding += 1;
                }
                ws.flush().await.map_err(|e| format!("flush: {e}"))?;
            }
            let first = ws.next().await;
            on_echo(first, payload_len, &phase, &mut stats, &mut outstanding)?;
            // Take every echo already buffered before refilling, so refills come in bursts instead
            // of one flush per received message.
            while outstanding > 0 {
                match ws.next().now_or_never() {
                    Some(next) => on_echo(next, payload_len, &phase, &mut stats, &mut outstanding)?,
                    None => break,
                }
            }
        }
    }
    .await;
    match result {
        Ok(()) => close_quietly(ws).await,
        Err(e) => stats.error = Some(e),
    }
    stats
}

fn on_echo(
    next: Option<Result<Message, tungstenite::Error>>,
    payload_len: usize,
    phase: &AtomicU8,
    stats: &mut ConnStats,
    outstanding: &mut usize,
) -> Result<(), String> {
    let len = match next {
        Some(Ok(Message::Binary(b))) => b.len(),
        Some(Ok(Message::Text(t))) => t.len(),
        // Pongs are answered by tungstenite itself; none of these is an echo.
        Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => return Ok(()),
        Some(Ok(Message::Close(frame))) => return Err(format!("server closed: {frame:?}")),
        Some(Err(e)) => return Err(format!("receive: {e}")),
        None => return Err("server ended the stream".into()),
    };
    if len != payload_len {
        return Err(format!("echo of {len} bytes, sent {payload_len}"));
    }
    *outstanding = outstanding.saturating_sub(1);
    if phase.load(Ordering::Relaxed) == MEASURE {
        stats.measured_msgs += 1;
        stats.measured_bytes += len as u64;
    }
    Ok(())
}

/// Close handshake, bounded: echoes still in flight are read and dropped until the server's Close.
async fn close_quietly(mut ws: Ws) {
    let closing = async {
        if ws.close(None).await.is_err() {
            return;
        }
        while let Some(Ok(_)) = ws.next().await {}
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), closing).await;
}

#[derive(Serialize)]
struct IdleReport<'a> {
    mode: &'static str,
    event: &'static str,
    label: &'a str,
    url: &'a str,
    connections: usize,
    open: usize,
    failed_connections: usize,
    elapsed_s: f64,
    errors: Vec<String>,
}

async fn idle(cli: &Cli, args: &IdleArgs) -> Result<(), BoxError> {
    let started = Instant::now();
    let config = WebSocketConfig::default()
        .read_buffer_size(args.read_buffer)
        .write_buffer_size(0);
    let Connected {
        sockets,
        failed,
        errors,
    } = connect_all(cli, args.connections, config).await;
    let open = sockets.len();

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut holders = JoinSet::new();
    for ws in sockets {
        holders.spawn(hold(ws, stop_rx.clone()));
    }
    print_json(&IdleReport {
        mode: "idle",
        event: "open",
        label: &cli.label,
        url: &cli.url,
        connections: args.connections,
        open,
        failed_connections: failed,
        elapsed_s: started.elapsed().as_secs_f64(),
        errors,
    })?;

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("SIGTERM handler: {e}"))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm.recv() => {}
        _ = tokio::time::sleep(Duration::from_secs_f64(args.hold)) => {}
    }

    let _ = stop_tx.send(true);
    let mut closed_by_server = 0usize;
    let drain = async {
        while let Some(joined) = holders.join_next().await {
            if let Ok(true) = joined {
                closed_by_server += 1;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(15), drain).await;
    holders.abort_all();
    print_json(&IdleReport {
        mode: "idle",
        event: "closed",
        label: &cli.label,
        url: &cli.url,
        connections: args.connections,
        open: open.saturating_sub(closed_by_server),
        failed_connections: failed,
        elapsed_s: started.elapsed().as_secs_f64(),
        errors: if closed_by_server > 0 {
            vec![format!(
                "{closed_by_server} connections were closed by the server during the hold"
            )]
        } else {
            Vec::new()
        },
    })
}

/// Holds one idle connection, answering pings, until told to stop. Returns true if the server
/// ended it first (which would make an idle-memory reading meaningless).
async fn hold(mut ws: Ws, mut stop: watch::Receiver<bool>) -> bool {
    loop {
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    close_quietly(ws).await;
                    return false;
                }
            }
            next = ws.next() => match next {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return true,
                Some(Ok(_)) => {}
            },
        }
    }
}
