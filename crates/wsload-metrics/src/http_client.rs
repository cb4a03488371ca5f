//! A tiny HTTP/1.1 client: one request per connection (`Connection: close`), `http://` only.
//! The operator uses it to drive shards (docs/operator.md, "Shard control protocol") and the
//! load generator to scrape the server's own counter; neither needs more than this, and
//! neither should pull an HTTP stack in for it.
//!
//! ```text
//! pub async fn get(url: &str, timeout: Duration) -> Result<Response>
//! pub async fn post_json(url: &str, body: &str, timeout: Duration) -> Result<Response>
//! pub fn get_blocking(url: &str, timeout: Duration) -> Result<Response>
//! pub fn post_json_blocking(url: &str, body: &str, timeout: Duration) -> Result<Response>
//!
//! pub struct Response { pub status: u16, pub body: String }
//! ```
//!
//! `timeout` bounds the whole exchange: resolving, connecting, writing and reading the answer.
//! Every status is a [`Response`] (what a 409 means is the caller's business); [`Error`] is for
//! what kept an answer from arriving, and its message names the method and URL. The async
//! functions need a Tokio runtime with the `net` and `time` drivers; the blocking ones use
//! `std::net` and suit plain threads.

use std::io::{Read as _, Write as _};
use std::net::ToSocketAddrs as _;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// An answer larger than this is refused rather than buffered: nothing wsload serves comes
/// near it (a shard's result with its histograms is a few hundred KiB).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{method} {url}: {reason}")]
    Url {
        method: &'static str,
        url: String,
        reason: &'static str,
    },
    #[error("{method} {url}: cannot connect: {source}")]
    Connect {
        method: &'static str,
        url: String,
        source: std::io::Error,
    },
    #[error("{method} {url}: {source}")]
    Io {
        method: &'static str,
        url: String,
        source: std::io::Error,
    },
    #[error("{method} {url}: no complete answer within {timeout:?}")]
    Timeout {
        method: &'static str,
        url: String,
        timeout: Duration,
    },
    #[error("{method} {url}: not an HTTP answer: {reason}")]
    Malformed {
        method: &'static str,
        url: String,
        reason: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `GET url`.
pub async fn get(url: &str, timeout: Duration) -> Result<Response> {
    exchange(Call::new("GET", url, None)?, timeout).await
}

/// `POST url` with `body` as `application/json`.
pub async fn post_json(url: &str, body: &str, timeout: Duration) -> Result<Response> {
    exchange(Call::new("POST", url, Some(body))?, timeout).await
}

/// [`get`] on the calling thread.
pub fn get_blocking(url: &str, timeout: Duration) -> Result<Response> {
    exchange_blocking(Call::new("GET", url, None)?, timeout)
}

/// [`post_json`] on the calling thread.
pub fn post_json_blocking(url: &str, body: &str, timeout: Duration) -> Result<Response> {
    exchange_blocking(Call::new("POST", url, Some(body))?, timeout)
}

/// One request, parsed and serialized before any I/O.
struct Call<'a> {
    method: &'static str,
    url: &'a str,
    /// `host:port`, for connecting (port 80 added when the URL has none).
    address: String,
    request: Vec<u8>,
}

impl<'a> Call<'a> {
    fn new(method: &'static str, url: &'a str, body: Option<&str>) -> Result<Call<'a>> {
        let bad = |reason| Error::Url {
            method,
            url: url.to_string(),
            reason,
        };
        let rest = url
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
            .map(|_| &url[7..])
            .ok_or_else(|| bad("only http:// URLs are supported"))?;
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let has_port = match authority.strip_prefix('[') {
            Some(v6) => !v6.ends_with(']'),
            None => authority.contains(':'),
        };
        let address = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: wsload\r\nAccept: */*\r\nConnection: close\r\n"
        )
        .into_bytes();
        if let Some(body) = body {
            request.extend_from_slice(
                format!(
                    "Content-Type: application/json\r\nContent-Length: {}\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            request.extend_from_slice(b"\r\n");
            request.extend_from_slice(body.as_bytes());
        } else {
            request.extend_from_slice(b"\r\n");
        }
        Ok(Call {
            method,
            url,
            address,
            request,
        })
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            method: self.method,
            url: self.url.to_string(),
            source,
        }
    }

    fn connect_error(&self, source: std::io::Error) -> Error {
        Error::Connect {
            method: self.method,
            url: self.url.to_string(),
            source,
        }
    }

    fn timeout(&self, timeout: Duration) -> Error {
        Error::Timeout {
            method: self.method,
            url: self.url.to_string(),
            timeout,
        }
    }

    fn malformed(&self, reason: impl Into<String>) -> Error {
        Error::Malformed {
            method: self.method,
            url: self.url.to_string(),
            reason: reason.into(),
        }
    }

    fn too_large(&self, answer: &[u8]) -> Result<()> {
        if answer.len() > MAX_ANSWER {
            return Err(self.malformed(format!("larger than {MAX_ANSWER} bytes")));
        }
        Ok(())
    }

    /// The answer as read (to its end, or to its end of framing) as a [`Response`].
    fn parse(&self, answer: &[u8]) -> Result<Response> {
        let head_end =
            find(answer, b"\r\n\r\n").ok_or_else(|| self.malformed("no end of headers"))?;
        let head = std::str::from_utf8(&answer[..head_end])
            .map_err(|_| self.malformed("headers are not UTF-8"))?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .strip_prefix("HTTP/1.")
            .and_then(|s| s.get(2..5))
            .and_then(|code| code.parse::<u16>().ok())
            .ok_or_else(|| self.malformed(format!("status line {status_line:?}")))?;
        let framing = framing(head);
        let rest = &answer[head_end + 4..];
        let body = match framing {
            Framing::Length(n) => rest
                .get(..n)
                .ok_or_else(|| self.malformed(format!("{} of {n} body bytes", rest.len())))?
                .to_vec(),
            Framing::Chunked => dechunk(rest).ok_or_else(|| self.malformed("bad chunked body"))?,
            Framing::UntilClose => rest.to_vec(),
        };
        let body = String::from_utf8(body).map_err(|_| self.malformed("body is not UTF-8"))?;
        Ok(Response { status, body })
    }
}

enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

fn framing(head: &str) -> Framing {
    for line in head.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length")
            && let Ok(n) = value.parse()
        {
            return Framing::Length(n);
        }
        if name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().contains("chunked")
        {
            return Framing::Chunked;
        }
    }
    Framing::UntilClose
}

/// Whether `answer` already holds a whole response, so that a server that keeps the
/// connection open despite `Connection: close` does not cost the caller its timeout.
fn complete(answer: &[u8]) -> bool {
    let Some(head_end) = find(answer, b"\r\n\r\n") else {
        return false;
    };
    let Ok(head) = std::str::from_utf8(&answer[..head_end]) else {
        return true; // parse() will say what is wrong
    };
    let rest = &answer[head_end + 4..];
    match framing(head) {
        Framing::Length(n) => rest.len() >= n,
        Framing::Chunked => rest.ends_with(b"0\r\n\r\n") && dechunk(rest).is_some(),
        Framing::UntilClose => false,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Decodes a chunked body (extensions and trailers ignored); `None` if it is malformed or
/// incomplete.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::with_capacity(rest.len());
    loop {
        let line_end = find(rest, b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

async fn exchange(call: Call<'_>, timeout: Duration) -> Result<Response> {
    let run = async {
        let mut stream = tokio::net::TcpStream::connect(&call.address)
            .await
            .map_err(|e| call.connect_error(e))?;
        stream
            .write_all(&call.request)
            .await
            .map_err(|e| call.io(e))?;
        let mut answer = Vec::with_capacity(4096);
        loop {
            let n = stream.read_buf(&mut answer).await.map_err(|e| call.io(e))?;
            if n == 0 || complete(&answer) {
                break;
            }
            call.too_large(&answer)?;
        }
        call.parse(&answer)
    };
    tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| call.timeout(timeout))?
}

fn exchange_blocking(call: Call<'_>, timeout: Duration) -> Result<Response> {
    let deadline = Instant::now() + timeout;
    // What is left of the budget; an expired one is the timeout error, not a zero timeout
    // (which std refuses).
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| call.timeout(timeout))
    };
    let addresses = call
        .address
        .to_socket_addrs()
        .map_err(|e| call.connect_error(e))?;
    let mut last_error = None;
    let mut stream = None;
    for address in addresses {
        match std::net::TcpStream::connect_timeout(&address, left()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let mut stream = stream.ok_or_else(|| {
        call.connect_error(
            last_error
                .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")),
        )
    })?;
    let timed_out = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => call.timeout(timeout),
        _ => call.io(e),
    };
    stream
        .set_write_timeout(Some(left()?))
        .map_err(|e| call.io(e))?;
    stream.write_all(&call.request).map_err(timed_out)?;
    let mut answer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        stream
            .set_read_timeout(Some(left()?))
            .map_err(|e| call.io(e))?;
        let n = stream.read(&mut chunk).map_err(timed_out)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
        if complete(&answer) {
            break;
        }
        call.too_large(&answer)?;
    }
    call.parse(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(url: &str) -> Call<'_> {
        Call::new("GET", url, None).expect("valid url")
    }

    #[test]
    fn urls() {
        let c = call("http://10.0.0.7:9464/control/result");
        assert_eq!(c.address, "10.0.0.7:9464");
        assert!(
            String::from_utf8_lossy(&c.request)
                .starts_with("GET /control/result HTTP/1.1\r\nHost: 10.0.0.7:9464\r\n")
        );
        assert_eq!(call("http://svc").address, "svc:80");
        assert_eq!(call("http://[fd00::1]").address, "[fd00::1]:80");
        assert_eq!(call("http://[fd00::1]:9464/x").address, "[fd00::1]:9464");
        assert!(String::from_utf8_lossy(&call("http://h:1?a=b").request).starts_with("GET /?a=b "));
        let e = Call::new("GET", "https://h/metrics", None)
            .err()
            .expect("https refused");
        assert_eq!(
            e.to_string(),
            "GET https://h/metrics: only http:// URLs are supported"
        );
        let post =
            Call::new("POST", "http://h:1/control/start", Some("{\"startAt\":1}")).expect("valid");
        let text = String::from_utf8_lossy(&post.request);
        assert!(text.contains("Content-Length: 13\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n{\"startAt\":1}"), "{text}");
    }

    #[test]
    fn answers_by_length_chunks_or_close() {
        let c = call("http://h:1/");
        let by_length = b"HTTP/1.1 409 Conflict\r\nContent-Length: 5\r\n\r\nhello";
        assert!(complete(by_length));
        assert!(!complete(&by_length[..by_length.len() - 1]));
        assert_eq!(
            c.parse(by_length).expect("parses"),
            Response {
                status: 409,
                body: "hello".into()
            }
        );
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert!(complete(chunked));
        assert_eq!(c.parse(chunked).expect("parses").body, "hello world");
        let close = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert!(!complete(close));
        assert_eq!(c.parse(close).expect("parses").body, "all of it");
        let short = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhalf";
        assert!(
            c.parse(short)
                .expect_err("short body")
                .to_string()
                .contains("4 of 9 body bytes")
        );
        assert!(c.parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    }
}
