//! The one blocking GET: the load generator reads the server's counter between cells, on a
//! plain thread (`scrape::read_blocking`). It asks in HTTP/1.0, so that the answer is framed by
//! its length or by the end of the connection, never chunked, and parses the head with
//! `httparse`.

use crate::http_client::{Error, MAX_ANSWER, NotHttp, Response, Result};
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::{Duration, Instant};

const GET: &str = "GET";

/// `GET url`, all of it (resolving, connecting, writing, reading) within `timeout`.
pub fn get(url: &str, timeout: Duration) -> Result<Response> {
    let e = Errors { url, timeout };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| e.url("only http:// URLs are supported"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    if authority.is_empty() {
        return Err(e.url("no host"));
    }
    let bracketed_v6 = authority.starts_with('[') && authority.ends_with(']');
    let address = if authority.contains(':') && !bracketed_v6 {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let deadline = Instant::now() + timeout;
    // What is left of the budget; an expired one is the timeout, not a zero timeout (which
    // std refuses).
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| e.timeout())
    };
    let mut stream = None;
    let mut last = String::from("no address");
    for a in address.to_socket_addrs().map_err(|x| e.connect(x))? {
        match TcpStream::connect_timeout(&a, left()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(x) => last = x.to_string(),
        }
    }
    let mut stream = stream.ok_or_else(|| e.connect(last))?;
    let io = |x: std::io::Error| match x.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => e.timeout(),
        _ => e.io(x),
    };
    stream.set_write_timeout(Some(left()?)).map_err(io)?;
    // One write: `write!` on the bare stream would send the request in pieces.
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nUser-Agent: wsload\r\nAccept: */*\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut answer = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        stream.set_read_timeout(Some(left()?)).map_err(io)?;
        let n = stream.read(&mut chunk).map_err(io)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
        if answer.len() > MAX_ANSWER {
            return Err(e.malformed(NotHttp::TooLarge(MAX_ANSWER)));
        }
        // A server may keep the connection open despite HTTP/1.0: stop at the framed end.
        if let Ok(Some(r)) = parse(&answer) {
            return Ok(r);
        }
    }
    match parse(&answer) {
        Ok(Some(r)) => Ok(r),
        Ok(None) if answer.is_empty() => Err(e.malformed(NotHttp::Nothing)),
        Ok(None) => Err(e.malformed(NotHttp::CutShort)),
        Err(reason) => Err(e.malformed(reason)),
    }
    .or_else(|err| until_close(&answer).ok_or(err))
}

/// A complete answer framed by `Content-Length`; `None` while more is needed (or when the
/// answer runs to the end of the connection: [`until_close`]).
fn parse(answer: &[u8]) -> std::result::Result<Option<Response>, NotHttp> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut headers);
    let head_len = match head.parse(answer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(x) => return Err(x.into()),
    };
    let status = head.code.ok_or(NotHttp::NoStatus)?;
    let value = |name: &str| {
        head.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    if value("transfer-encoding").is_some_and(|v| v != "identity") {
        return Err(NotHttp::TransferEncoded);
    }
    let Some(length) = value("content-length") else {
        return Ok(None);
    };
    let length: usize = length.parse().map_err(|_| NotHttp::BadLength)?;
    let Some(body) = answer.get(head_len..head_len.saturating_add(length)) else {
        return Ok(None);
    };
    let body = String::from_utf8(body.to_vec()).map_err(|_| NotHttp::NotUtf8)?;
    Ok(Some(Response { status, body }))
}

/// An answer without `Content-Length`, read to the end of the connection.
fn until_close(answer: &[u8]) -> Option<Response> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(n) = head.parse(answer).ok()? else {
        return None;
    };
    let unframed = head.headers.iter().all(|h| {
        !h.name.eq_ignore_ascii_case("content-length")
            && !h.name.eq_ignore_ascii_case("transfer-encoding")
    });
    let body = String::from_utf8(answer[n..].to_vec()).ok()?;
    unframed.then_some(Response {
        status: head.code?,
        body,
    })
}

struct Errors<'a> {
    url: &'a str,
    timeout: Duration,
}

impl Errors<'_> {
    fn url(&self, reason: &str) -> Error {
        Error::Url {
            method: GET,
            url: self.url.into(),
            reason: reason.into(),
        }
    }
    fn connect(&self, reason: impl ToString) -> Error {
        Error::Connect {
            method: GET,
            url: self.url.into(),
            reason: reason.to_string(),
        }
    }
    fn io(&self, x: std::io::Error) -> Error {
        Error::Io {
            method: GET,
            url: self.url.into(),
            reason: x.to_string(),
        }
    }
    fn timeout(&self) -> Error {
        Error::Timeout {
            method: GET,
            url: self.url.into(),
            timeout: self.timeout,
        }
    }
    fn malformed(&self, reason: NotHttp) -> Error {
        Error::Malformed {
            method: GET,
            url: self.url.into(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_by_length_or_to_the_close() {
        let by_length = b"HTTP/1.1 409 Conflict\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(
            parse(by_length).expect("parses"),
            Some(Response {
                status: 409,
                body: "hello".into()
            })
        );
        assert_eq!(parse(&by_length[..by_length.len() - 1]), Ok(None));
        let close = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it";
        assert_eq!(parse(close), Ok(None));
        assert_eq!(until_close(close).expect("to the close").body, "all of it");
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            Err(NotHttp::TransferEncoded)
        );
        assert!(matches!(
            parse(b"SSH-2.0-OpenSSH\r\n\r\n"),
            Err(NotHttp::Head(_))
        ));
        let e = Errors {
            url: "http://h/metrics",
            timeout: Duration::from_secs(1),
        };
        assert_eq!(
            e.malformed(NotHttp::CutShort).to_string(),
            "GET http://h/metrics: not an HTTP answer: cut short"
        );
        assert!(until_close(b"SSH-2.0-OpenSSH\r\n\r\n").is_none());
    }
}
