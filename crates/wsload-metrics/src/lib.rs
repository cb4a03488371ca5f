//! `/metrics`, `/healthz` and `/readyz` on their own port.
//!
//! A few GET paths answered with `Connection: close` need no HTTP framework: Prometheus and
//! kubelet probes speak plain HTTP/1.1 and read to the end of the body.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the endpoint exposes.
pub trait Exposition: Send + Sync + 'static {
    /// The Prometheus text exposition (format 0.0.4).
    fn render(&self) -> String;
    /// Whether `/readyz` answers 200.
    fn ready(&self) -> bool;
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

async fn respond<E: Exposition>(mut stream: TcpStream, exposition: &E) -> std::io::Result<()> {
    let mut buf = [0u8; 4096];
    let mut n = 0;
    while n < buf.len() {
        let read = stream.read(&mut buf[n..]).await?;
        if read == 0 {
            break;
        }
        n += read;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let request = String::from_utf8_lossy(&buf[..n]);
    let mut words = request.split_whitespace();
    let method = words.next().unwrap_or("");
    let path = words.next().unwrap_or("/").split('?').next().unwrap_or("/");
    let (status, content_type, body) = route(method, path, exposition);
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if method != "HEAD" {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

fn route<E: Exposition>(
    method: &str,
    path: &str,
    exposition: &E,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", TEXT, "only GET and HEAD\n".into());
    }
    match path {
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            exposition.render(),
        ),
        "/healthz" => ("200 OK", TEXT, "ok\n".into()),
        "/readyz" if exposition.ready() => ("200 OK", TEXT, "ready\n".into()),
        "/readyz" => (
            "503 Service Unavailable",
            TEXT,
            "not ready (starting or draining)\n".into(),
        ),
        _ => (
            "404 Not Found",
            TEXT,
            "try /metrics, /healthz or /readyz\n".into(),
        ),
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
