//! `/metrics`, `/healthz` and `/readyz` on their own port, and whatever else an
//! [`Exposition`] answers (the load generator's shard control API: docs/operator.md).
//!
//! One request per connection, answered with `Connection: close`, needs no HTTP framework:
//! Prometheus, kubelet probes and [`http_client`] speak plain HTTP/1.1 and read to the end of
//! the body. A request (headers and body) is read into one fixed buffer; nothing here is on a
//! measured path. [`scrape`] reads a counter back from such an endpoint (or any Prometheus
//! one).

pub mod http_client;
pub mod scrape;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Headers and body of one request: control requests are a few dozen bytes of JSON.
const MAX_REQUEST: usize = 8 * 1024;
const TEXT: &str = "text/plain; charset=utf-8";
/// An oversized body is read and dropped up to this much before the 413.
const DRAIN_LIMIT: usize = 1024 * 1024;

/// One request as the endpoint read it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Without the query string.
    pub path: &'a str,
    pub body: &'a [u8],
}

/// An answer from [`Exposition::handle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    pub fn json(status: u16, body: String) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body,
        }
    }

    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: TEXT,
            body: body.into(),
        }
    }
}

/// What the endpoint exposes.
pub trait Exposition: Send + Sync + 'static {
    /// The Prometheus text exposition (format 0.0.4).
    fn render(&self) -> String;
    /// Whether `/readyz` answers 200.
    fn ready(&self) -> bool;
    /// Answers any other path, any method; `None` is 404.
    fn handle(&self, _request: &Request<'_>) -> Option<Reply> {
        None
    }
    /// Called once the reply to `request` is written and the connection shut down, for what
    /// must follow the answer rather than precede it (exiting after a finish request).
    fn answered(&self, _request: &Request<'_>) {}
}

/// Serves the endpoint on `listener` until the task is dropped.
pub async fn serve<E: Exposition>(listener: TcpListener, exposition: Arc<E>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let exposition = exposition.clone();
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(REQUEST_TIMEOUT, respond(stream, &*exposition)).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Why a request could not be read; answered without consulting the exposition.
enum Unreadable {
    TooLarge,
    Malformed,
}

/// Reads one request into `buf`: (head length, whole length, with the body).
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut [u8; MAX_REQUEST],
) -> std::io::Result<Result<(usize, usize), Unreadable>> {
    let mut n = 0;
    let head_end = loop {
        if let Some(i) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if n == buf.len() {
            return Ok(Err(Unreadable::TooLarge));
        }
        let read = stream.read(&mut buf[n..]).await?;
        if read == 0 {
            return Ok(Err(Unreadable::Malformed));
        }
        n += read;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let mut length = 0;
    let mut expect_continue = false;
    for line in head.split("\r\n").skip(1) {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                match value.trim().parse::<usize>() {
                    Ok(l) => length = l,
                    Err(_) => return Ok(Err(Unreadable::Malformed)),
                }
            } else if name.eq_ignore_ascii_case("expect")
                && value.trim().eq_ignore_ascii_case("100-continue")
            {
                expect_continue = true;
            }
        }
    }
    let total = head_end.saturating_add(length);
    if total > buf.len() {
        // Read what was sent before answering: closing on unread data resets the connection,
        // and the client may then lose the 413 too.
        let mut unread = total.saturating_sub(n).min(DRAIN_LIMIT);
        while unread > 0 {
            let read = stream.read(&mut buf[..unread.min(MAX_REQUEST)]).await?;
            if read == 0 {
                break;
            }
            unread -= read;
        }
        return Ok(Err(Unreadable::TooLarge));
    }
    if expect_continue && n < total {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    while n < total {
        let read = stream.read(&mut buf[n..total]).await?;
        if read == 0 {
            return Ok(Err(Unreadable::Malformed));
        }
        n += read;
    }
    Ok(Ok((head_end, total)))
}

async fn respond<E: Exposition>(mut stream: TcpStream, exposition: &E) -> std::io::Result<()> {
    let mut buf = [0u8; MAX_REQUEST];
    let (reply, request) = match read_request(&mut stream, &mut buf).await? {
        Ok((head_end, total)) => {
            let head = std::str::from_utf8(&buf[..head_end]).unwrap_or("");
            let mut words = head.split_whitespace();
            let method = words.next().unwrap_or("");
            let path = words.next().unwrap_or("/");
            let path = path.split('?').next().unwrap_or(path);
            let request = Request {
                method,
                path,
                body: &buf[head_end..total],
            };
            (route(&request, exposition), Some(request))
        }
        Err(Unreadable::TooLarge) => (
            Reply::text(413, format!("a request is at most {MAX_REQUEST} bytes\n")),
            None,
        ),
        Err(Unreadable::Malformed) => (Reply::text(400, "not an HTTP request\n"), None),
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if request.is_none_or(|r| r.method != "HEAD") {
        stream.write_all(reply.body.as_bytes()).await?;
    }
    stream.shutdown().await?;
    if let Some(request) = request {
        exposition.answered(&request);
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Content Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

fn route<E: Exposition>(request: &Request<'_>, exposition: &E) -> Reply {
    let get = matches!(request.method, "GET" | "HEAD");
    match request.path {
        "/metrics" | "/healthz" | "/readyz" if !get => {
            Reply::text(405, format!("{}: only GET and HEAD\n", request.path))
        }
        "/metrics" => Reply {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: exposition.render(),
        },
        "/healthz" => Reply::text(200, "ok\n"),
        "/readyz" if exposition.ready() => Reply::text(200, "ready\n"),
        "/readyz" => Reply::text(503, "not ready (starting or draining)\n"),
        _ => exposition
            .handle(request)
            .unwrap_or_else(|| Reply::text(404, "try /metrics, /healthz or /readyz\n")),
    }
}

/// Writes `# HELP` and `# TYPE` lines.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Bucket bounds (seconds) fine enough for `histogram_quantile` from 50 us to 10 s.
pub const LATENCY_BUCKETS: [f64; 33] = [
    0.000_05, 0.000_075, 0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_5, 0.000_75, 0.001, 0.001_5,
    0.002, 0.003, 0.005, 0.007_5, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
    0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
];

/// A Prometheus histogram of durations over [`LATENCY_BUCKETS`], updated with relaxed atomics.
pub struct AtomicHistogram {
    /// Per bucket, not cumulative; the exposition accumulates.
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        AtomicHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

impl AtomicHistogram {
    #[inline]
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS.partition_point(|b| *b < secs);
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_nanos
            .fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Relaxed);
    }

    /// Adds this histogram's counts into `into`: one entry per bucket of [`LATENCY_BUCKETS`]
    /// (not cumulative), then one for observations above the last bound. For samplers that
    /// diff two snapshots (the load generator's per-second run plot), not for the hot path.
    pub fn add_counts_to(&self, into: &mut [u64; LATENCY_BUCKETS.len() + 1]) {
        let mut bucketed = 0;
        for (slot, b) in into.iter_mut().zip(&self.buckets) {
            let n = b.load(Relaxed);
            *slot += n;
            bucketed += n;
        }
        // Read after the buckets: an observation racing this read may show in `count` and
        // not yet in its bucket, which only moves it to the overflow slot for this snapshot.
        let count = self.count.load(Relaxed);
        into[LATENCY_BUCKETS.len()] += count.saturating_sub(bucketed);
    }
}

/// Writes the `_bucket`, `_sum` and `_count` series of the sum of `hists`, with `labels`
/// (`a="b",c="d"`, or empty) on every series.
pub fn render_histogram(out: &mut String, name: &str, labels: &str, hists: &[&AtomicHistogram]) {
    use std::fmt::Write as _;
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += hists
            .iter()
            .map(|h| h.buckets[i].load(Relaxed))
            .sum::<u64>();
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
        );
    }
    let count: u64 = hists.iter().map(|h| h.count.load(Relaxed)).sum();
    let sum = hists.iter().map(|h| h.sum_nanos.load(Relaxed)).sum::<u64>() as f64 / 1e9;
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers POST /echo with its body; counts what was answered.
    #[derive(Default)]
    struct Echo {
        answered: AtomicU64,
    }

    impl Exposition for Echo {
        fn render(&self) -> String {
            "x_total 1\n".into()
        }
        fn ready(&self) -> bool {
            false
        }
        fn handle(&self, request: &Request<'_>) -> Option<Reply> {
            (request.method == "POST" && request.path == "/echo")
                .then(|| Reply::json(202, String::from_utf8_lossy(request.body).into_owned()))
        }
        fn answered(&self, request: &Request<'_>) {
            if request.path == "/echo" {
                self.answered.fetch_add(1, Relaxed);
            }
        }
    }

    async fn endpoint() -> (String, Arc<Echo>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let echo = Arc::new(Echo::default());
        tokio::spawn(serve(listener, echo.clone()));
        (base, echo)
    }

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn routes_builtin_and_exposed_paths() {
        use http_client::{get, post_json};
        let (base, echo) = endpoint().await;
        let m = get(&format!("{base}/metrics?x=1"), T).await.expect("get");
        assert_eq!((m.status, m.body.as_str()), (200, "x_total 1\n"));
        assert_eq!(
            get(&format!("{base}/readyz"), T).await.expect("get").status,
            503
        );
        assert_eq!(
            get(&format!("{base}/healthz"), T)
                .await
                .expect("get")
                .status,
            200
        );
        let body = r#"{"startAt": 1700000000000}"#;
        let e = post_json(&format!("{base}/echo"), body, T)
            .await
            .expect("post");
        assert_eq!((e.status, e.body.as_str()), (202, body));
        // `answered` runs after the client has its answer: wait for it, boundedly.
        let deadline = std::time::Instant::now() + T;
        while echo.answered.load(Relaxed) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "answered() was not called"
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(
            post_json(&format!("{base}/metrics"), "{}", T)
                .await
                .expect("post")
                .status,
            405
        );
        assert_eq!(
            get(&format!("{base}/echo"), T).await.expect("get").status,
            404
        );
        let huge = "x".repeat(MAX_REQUEST);
        assert_eq!(
            post_json(&format!("{base}/echo"), &huge, T)
                .await
                .expect("post")
                .status,
            413
        );
        let url = format!("{base}/echo");
        let blocking =
            tokio::task::spawn_blocking(move || http_client::post_json_blocking(&url, "[1]", T))
                .await
                .expect("join")
                .expect("post");
        assert_eq!((blocking.status, blocking.body.as_str()), (202, "[1]"));
    }

    #[tokio::test]
    async fn client_errors_name_the_url() {
        // Accepts and never answers.
        let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/control", silent.local_addr().expect("addr"));
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                held.push(s);
            }
        });
        let short = Duration::from_millis(200);
        let e = http_client::get(&url, short).await.expect_err("times out");
        assert!(matches!(e, http_client::Error::Timeout { .. }), "{e}");
        assert!(e.to_string().starts_with(&format!("GET {url}: ")), "{e}");
        let u = url.clone();
        let e = tokio::task::spawn_blocking(move || http_client::get_blocking(&u, short))
            .await
            .expect("join")
            .expect_err("times out");
        assert!(matches!(e, http_client::Error::Timeout { .. }), "{e}");
        hold.abort();

        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!(
            "http://{}/control/start",
            closed.local_addr().expect("addr")
        );
        drop(closed);
        let e = http_client::post_json(&url, "{}", T)
            .await
            .expect_err("refused");
        assert!(matches!(e, http_client::Error::Connect { .. }), "{e}");
        assert!(e.to_string().contains(&url), "{e}");
    }

    #[test]
    fn histogram_sums_and_accumulates() {
        let (a, b) = (AtomicHistogram::default(), AtomicHistogram::default());
        a.observe(Duration::from_micros(30));
        b.observe(Duration::from_millis(3));
        b.observe(Duration::from_secs(60));
        let mut out = String::new();
        render_histogram(&mut out, "x", "p=\"1\"", &[&a, &b]);
        assert!(
            out.contains("x_bucket{p=\"1\",le=\"0.00005\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("x_bucket{p=\"1\",le=\"0.003\"} 2\n"));
        assert!(out.contains("x_bucket{p=\"1\",le=\"10\"} 2\n"));
        assert!(out.contains("x_bucket{p=\"1\",le=\"+Inf\"} 3\n"));
        assert!(out.contains("x_count{p=\"1\"} 3\n"));
        let mut bare = String::new();
        render_histogram(&mut bare, "y", "", &[&a]);
        assert!(bare.contains("y_bucket{le=\"+Inf\"} 1\n"), "{bare}");
    }
}
