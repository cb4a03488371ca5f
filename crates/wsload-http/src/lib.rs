//! `/metrics`, `/healthz` and `/readyz` on their own port, and whatever else an
//! [`Exposition`] answers (the load generator's shard control API: docs/operator.md), served
//! over HTTP/1.1 by hyper ([`serve`]); [`http_client`], the client of those endpoints (the
//! operator's and `wsload run`'s); [`blocking`], the load generator's one blocking GET.
//! Nothing here is on a measured path. [`scrape`] reads a counter back from such an endpoint
//! (or any Prometheus one). The exposition text itself is prometheus-client's ([`encode`],
//! [`CONTENT_TYPE`]); [`family`] writes the families of a custom collector, one call each.

pub use prometheus_client;

pub mod blocking;
pub mod buckets;
pub mod family;
pub mod http_client;
pub mod scrape;
mod serve;

pub use buckets::LATENCY_BUCKETS;
pub use serve::{DRAIN_LIMIT, MAX_BODY, MAX_HEADERS, REQUEST_TIMEOUT, serve};

use prometheus_client::encoding::{MetricEncoder, NoLabelSet};
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

const TEXT: &str = "text/plain; charset=utf-8";

/// One request as the endpoint read it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Without the query string.
    pub path: &'a str,
    pub body: &'a [u8],
    /// The `Authorization` header's value, when there is one (readable text only): the shard
    /// control API checks its bearer token.
    pub authorization: Option<&'a str>,
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
    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]), as [`encode`] writes a registry.
    fn render(&self) -> String;
    /// Whether `/readyz` answers 200.
    fn ready(&self) -> bool;
    /// Answers any other path, any method; `None` is 404.
    fn handle(&self, _request: &Request<'_>) -> Option<Reply> {
        None
    }
    /// Called for a request other than GET and HEAD (answered with `Connection: close`) once
    /// its reply is written and the connection shut down, for what must follow the answer
    /// rather than precede it (exiting after a finish request).
    fn answered(&self, _request: &Request<'_>) {}
}

/// What `/metrics` answers: prometheus-client writes OpenMetrics 1.0 (`_total` sample names of
/// counters, `# EOF`), which Prometheus parses only when told so.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The text exposition of `registry`, for [`Exposition::render`].
pub fn encode(registry: &Registry) -> String {
    let mut out = String::with_capacity(16 * 1024);
    // Writing to a String fails only when a metric's encoder does; what was written stays.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "metrics encoding failed");
    }
    out
}

/// A Prometheus histogram of durations over [`LATENCY_BUCKETS`], updated with relaxed atomics.
#[derive(Debug)]
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
    pub fn add_counts_to(&self, into: &mut buckets::Counts) {
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

impl AtomicHistogram {
    /// Encodes the sum of `hists` as one histogram series, read now: a custom
    /// [`Collector`](prometheus_client::collector::Collector) calls this at scrape time.
    pub fn encode_sum(hists: &[&AtomicHistogram], encoder: MetricEncoder<'_>) -> fmt::Result {
        let mut counts = buckets::EMPTY;
        let mut sum_nanos = 0u64;
        for h in hists {
            sum_nanos = sum_nanos.saturating_add(h.sum_nanos.load(Relaxed));
            h.add_counts_to(&mut counts);
        }
        let count = counts.iter().sum();
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(counts)
            .collect();
        let mut encoder = encoder;
        encoder.encode_histogram::<NoLabelSet>(sum_nanos as f64 / 1e9, count, &buckets, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::net::TcpListener;

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

    /// Sends `raw` on `stream` and reads one answer framed by its Content-Length: (head, body).
    async fn exchange(stream: &mut tokio::net::TcpStream, raw: &str) -> (String, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        stream.write_all(raw.as_bytes()).await.expect("write");
        let mut got = Vec::new();
        loop {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(T, stream.read(&mut chunk))
                .await
                .expect("an answer in time")
                .expect("read");
            assert!(n > 0, "closed before a whole answer: {got:?}");
            got.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")?
                            .trim()
                            .parse()
                            .ok()
                    })
                    .expect("a content-length");
                // A HEAD answer has the length of the body it does not carry.
                if body.len() >= length || raw.starts_with("HEAD ") {
                    return (head.to_string(), body.to_string());
                }
            }
        }
    }

    /// Whether the server closes `stream` within `within` (reading and dropping what comes).
    async fn closes(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
        use tokio::io::AsyncReadExt as _;
        let mut chunk = [0u8; 4096];
        let until = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(until, stream.read(&mut chunk)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }

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
        let url = format!("{base}/metrics");
        let blocking = tokio::task::spawn_blocking(move || blocking::get(&url, T))
            .await
            .expect("join")
            .expect("get");
        assert_eq!(
            (blocking.status, blocking.body.as_str()),
            (200, "x_total 1\n")
        );
    }

    #[tokio::test]
    async fn gets_keep_the_connection_and_other_methods_close_it() {
        let (base, echo) = endpoint().await;
        let addr = base.trim_start_matches("http://");
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        for path in ["/metrics", "/healthz", "/metrics"] {
            let (head, _) =
                exchange(&mut s, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).await;
            assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
            assert!(
                !head.to_ascii_lowercase().contains("connection: close"),
                "{head}"
            );
        }
        let (head, body) = exchange(&mut s, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(head.contains("content-length: 10"), "{head}");
        assert_eq!(body, "", "HEAD answers without the body");
        let (head, body) = exchange(
            &mut s,
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n[7]",
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 202 Accepted"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("connection: close"),
            "{head}"
        );
        assert_eq!(body, "[7]");
        assert!(closes(&mut s, T).await, "a POST's connection is closed");
        assert_eq!(echo.answered.load(Relaxed), 1);
        // The pooled client reuses one connection for its GETs.
        let client = http_client::Client::new();
        for _ in 0..3 {
            let r = client
                .get(&format!("{base}/healthz"), T)
                .await
                .expect("get");
            assert_eq!(r.status, 200);
        }
    }

    #[tokio::test]
    async fn an_oversized_body_is_refused() {
        let (base, echo) = endpoint().await;
        let huge = "x".repeat(MAX_BODY + 1);
        let r = http_client::post_json(&format!("{base}/echo"), &huge, T)
            .await
            .expect("post");
        assert_eq!(r.status, 413, "{}", r.body);
        // Just at the limit is fine.
        let full = "y".repeat(MAX_BODY);
        let r = http_client::post_json(&format!("{base}/echo"), &full, T)
            .await
            .expect("post");
        assert_eq!((r.status, r.body.len()), (202, MAX_BODY));
        // Declared far beyond what is worth reading: answered at once, not read.
        let addr = base.trim_start_matches("http://");
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (head, _) = exchange(
            &mut s,
            &format!(
                "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\nxx",
                DRAIN_LIMIT * 4
            ),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 413"), "{head}");
        assert!(closes(&mut s, T).await);
        // Refused requests are not `answered`; the one at the limit was.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(echo.answered.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn a_slow_client_is_cut_off() {
        use tokio::io::AsyncWriteExt as _;
        let (base, _) = endpoint().await;
        let addr = base.trim_start_matches("http://");
        let started = tokio::time::Instant::now();
        // Half a head, then nothing.
        let mut head = tokio::net::TcpStream::connect(addr).await.expect("connect");
        head.write_all(b"GET /metrics HTTP/1.1\r\nHost:")
            .await
            .expect("write");
        // A whole head, half a body, then nothing.
        let mut body = tokio::net::TcpStream::connect(addr).await.expect("connect");
        body.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n[1")
            .await
            .expect("write");
        // Idle after one answer.
        let mut idle = tokio::net::TcpStream::connect(addr).await.expect("connect");
        exchange(&mut idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let bound = REQUEST_TIMEOUT + Duration::from_secs(2);
        assert!(closes(&mut head, bound).await, "half a head is cut off");
        assert!(closes(&mut body, bound).await, "half a body is cut off");
        assert!(
            closes(&mut idle, bound).await,
            "an idle connection is closed"
        );
        assert!(started.elapsed() >= REQUEST_TIMEOUT - Duration::from_millis(100));
    }

    #[tokio::test]
    async fn the_client_reads_chunked_answers() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/metrics", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
                    .await;
                // Held open: the answer's own framing ends it.
                tokio::time::sleep(T).await;
            }
        });
        let r = http_client::get(&url, Duration::from_secs(2))
            .await
            .expect("get");
        assert_eq!((r.status, r.body.as_str()), (200, "hello world"));
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
        let e = tokio::task::spawn_blocking(move || blocking::get(&u, short))
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
        let u = url.clone();
        let e = tokio::task::spawn_blocking(move || blocking::get(&u, T))
            .await
            .expect("join")
            .expect_err("refused");
        assert!(matches!(e, http_client::Error::Connect { .. }), "{e}");
    }

    /// Two histograms summed into one labelled series, and one alone without labels.
    #[derive(Debug, Default)]
    struct Hists(AtomicHistogram, AtomicHistogram);

    impl prometheus_client::collector::Collector for Hists {
        fn encode(
            &self,
            mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
        ) -> fmt::Result {
            use prometheus_client::metrics::MetricType::Histogram;
            let mut x = encoder.encode_descriptor("x", "Summed.", None, Histogram)?;
            AtomicHistogram::encode_sum(&[&self.0, &self.1], x.encode_family(&[("p", "1")])?)?;
            let y = encoder.encode_descriptor("y", "Alone.", None, Histogram)?;
            AtomicHistogram::encode_sum(&[&self.0], y)
        }
    }

    #[test]
    fn histogram_sums_and_accumulates() {
        let hists = Arc::new(Hists::default());
        hists.0.observe(Duration::from_micros(30));
        hists.1.observe(Duration::from_millis(3));
        hists.1.observe(Duration::from_secs(60));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(hists.clone()));
        let out = encode(&registry);
        // prometheus-client writes `le` first and bounds as dtoa does ("10.0"); Prometheus
        // orders labels itself and reads bounds as numbers.
        assert!(
            out.contains("x_bucket{le=\"0.00005\",p=\"1\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("x_bucket{le=\"0.003\",p=\"1\"} 2\n"));
        assert!(out.contains("x_bucket{le=\"10.0\",p=\"1\"} 2\n"));
        assert!(out.contains("x_bucket{le=\"+Inf\",p=\"1\"} 3\n"));
        assert!(out.contains("x_count{p=\"1\"} 3\n"));
        assert!(out.contains("x_sum{p=\"1\"} 60.00303\n"), "{out}");
        assert!(out.contains("# TYPE x histogram\n"));
        assert!(out.contains("y_bucket{le=\"+Inf\"} 1\n"), "{out}");
        assert!(out.ends_with("# EOF\n"), "{out}");
    }
}
