//! `/metrics`, `/healthz` and `/readyz` on their own port.
//!
//! A few GET paths answered with `Connection: close` need no HTTP framework: Prometheus and
//! kubelet probes speak plain HTTP/1.1 and read to the end of the body.

use std::sync::Arc;
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
