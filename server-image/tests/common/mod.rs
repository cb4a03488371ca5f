//! Test harness: runs the real `wsload-server` binary and talks to it over loopback sockets.
#![allow(dead_code)] // each test binary uses a different part of the harness

use futures_util::{SinkExt, StreamExt};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Message, protocol::frame::coding::CloseCode};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use wsload_contract::announce;

pub type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub const SECRET: &str = "integration-secret";

/// A running server process; killed when dropped.
pub struct Server {
    child: Child,
    /// `ws://ADDR` of each listener, in flag order.
    pub ws: Vec<String>,
    pub metrics: String,
    /// Everything the server wrote on stderr so far, when started with `capture_stderr`.
    stderr: Option<Arc<Mutex<String>>>,
}

impl Server {
    /// Starts the server on ephemeral loopback ports with `args` added.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with_listeners(&["127.0.0.1:0"], args)
    }

    pub fn start_with_listeners(listeners: &[&str], args: &[&str]) -> Server {
        Self::spawn(Self::command(listeners, args), false)
    }

    /// The server's command line: `listeners`, an ephemeral metrics port, `args`, logs at warn.
    pub fn command(listeners: &[&str], args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_wsload-server"));
        for l in listeners {
            cmd.args(["--listen", l]);
        }
        cmd.args(["--metrics-listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn");
        cmd
    }

    /// Runs `cmd` (a server command line, possibly wrapped) and waits for its addresses.
    pub fn spawn(mut cmd: Command, capture_stderr: bool) -> Server {
        cmd.stdout(Stdio::piped()).stderr(if capture_stderr {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
        let mut child = cmd.spawn().expect("spawn wsload-server");
        let stderr = child.stderr.take().map(|pipe| {
            let text = Arc::new(Mutex::new(String::new()));
            let sink = text.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    eprintln!("{line}");
                    let mut t = sink.lock().expect("stderr lock");
                    t.push_str(&line);
                    t.push('\n');
                }
            });
            text
        });
        let stdout = child.stdout.take().expect("stdout");
        let announced = announce::await_server(stdout, Duration::from_secs(20), |_| {})
            .expect("server printed its addresses");
        let ws = announced.ws;
        let metrics = announced
            .metrics
            .trim_start_matches("http://")
            .trim_end_matches("/metrics")
            .to_string();
        Server {
            child,
            ws,
            metrics,
            stderr,
        }
    }

    /// What the server logged so far (started with `capture_stderr`).
    pub fn stderr(&self) -> String {
        self.stderr
            .as_ref()
            .expect("started with capture_stderr")
            .lock()
            .expect("stderr lock")
            .clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.ws[0])
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One `GET` on the metrics port: (status code, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(&self.metrics, path)
    }

    /// The value of one exact series, e.g. `name{a="b"}`; panics when absent.
    pub fn metric(&self, series: &str) -> f64 {
        let (_, body) = self.get("/metrics");
        parse_metric(&body, series).unwrap_or_else(|| panic!("series {series} not in\n{body}"))
    }

    /// Waits until `series` reaches `want` (counters settle after the client's last frame).
    pub fn wait_metric(&self, series: &str, want: f64) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.metric(series);
            if v == want || Instant::now() > deadline {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// Waits for the process to exit; `None` if it outlives `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = StdTcpStream::connect(addr).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // Read to the end below: the endpoint keeps HTTP/1.1 connections alive unless asked not to.
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("write request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read response");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// utime+stime of process `pid` in clock ticks, from /proc/PID/stat.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // The command name (field 2) may hold spaces; fields after its ')' are fixed.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

pub fn parse_metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}

pub async fn connect(url: &str) -> Client {
    tokio_tungstenite::connect_async(url)
        .await
        .expect("connect")
        .0
}

/// Connects with extra request headers.
pub async fn connect_with(url: &str, headers: &[(&str, String)]) -> Client {
    let mut req = url.into_client_request().expect("request");
    for (k, v) in headers {
        let name: tokio_tungstenite::tungstenite::http::HeaderName =
            k.parse().expect("header name");
        req.headers_mut()
            .insert(name, v.parse().expect("header value"));
    }
    tokio_tungstenite::connect_async(req)
        .await
        .expect("connect")
        .0
}

/// The next data message, skipping pings and pongs; panics on close or timeout.
pub async fn next_data(ws: &mut Client) -> Message {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a message within 10 s")
            .expect("stream open")
            .expect("no error");
        match msg {
            Message::Text(_) | Message::Binary(_) => return msg,
            Message::Close(f) => panic!("unexpected close {f:?}"),
            _ => {}
        }
    }
}

/// Reads until the server closes; returns the close code (`None`: closed without a frame).
pub async fn close_code(ws: &mut Client, within: Duration) -> Option<CloseCode> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("server closed in time")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return None,
        }
    }
}

pub async fn send_all(ws: &mut Client, msgs: impl IntoIterator<Item = Message>) {
    for m in msgs {
        ws.feed(m).await.expect("feed");
    }
    ws.flush().await.expect("flush");
}

pub fn token(claims_ttl: i64, secret: &str) -> String {
    let claims = wsload_proto::jwt::standard_claims("user-7", "wse-bench", "wse-bench", claims_ttl);
    wsload_proto::jwt::sign(&claims, secret.as_bytes())
}
