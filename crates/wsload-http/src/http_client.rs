//! The HTTP/1.1 client of the operator (driving shards, docs/operator.md "Shard control
//! protocol", and scraping server replicas) and of `wsload run` (driving its shard processes):
//! hyper-util's pooled client, `http://` only.
//!
//! `timeout` bounds the whole exchange: connecting (or taking a pooled connection), writing
//! and reading the answer to its end. Every status is a [`Response`] (what a 409 means is the
//! caller's business); [`Error`] is for what kept an answer from arriving, and its message
//! names the method and URL. Needs a Tokio runtime with the `net` and `time` drivers.
//! [`crate::blocking`] has the one blocking GET.

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use hyper_util::client::legacy::Client as Pooled;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::time::Duration;

/// An answer larger than this is refused rather than buffered: nothing wsload serves comes
/// near it (a shard's result with its histograms is a few hundred KiB).
pub const MAX_ANSWER: usize = 64 * 1024 * 1024;
/// A pooled connection idle this long is closed: shorter than the endpoints'
/// [`crate::REQUEST_TIMEOUT`] (5 s), so that the client does not reuse one the server is
/// closing, and longer than the operator's default poll (2 s) plus a reconcile, so that its
/// polls of a shard reuse one connection.
const POOL_IDLE: Duration = Duration::from_secs(4);

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
        reason: String,
    },
    #[error("{method} {url}: cannot connect: {reason}")]
    Connect {
        method: &'static str,
        url: String,
        reason: String,
    },
    #[error("{method} {url}: {reason}")]
    Io {
        method: &'static str,
        url: String,
        reason: String,
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
        #[source]
        reason: NotHttp,
    },
}

/// Why an answer is not HTTP, or not HTTP this client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotHttp {
    #[error(transparent)]
    Head(#[from] httparse::Error),
    #[error("no status")]
    NoStatus,
    #[error("a transfer-encoded answer to HTTP/1.0")]
    TransferEncoded,
    #[error("bad content-length")]
    BadLength,
    #[error("body is not UTF-8")]
    NotUtf8,
    #[error("larger than {0} bytes")]
    TooLarge(usize),
    #[error("no answer")]
    Nothing,
    #[error("cut short")]
    CutShort,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A pooled client: cheap to clone (clones share the pool). Use it within one Tokio runtime:
/// its connections are tasks of the runtime that opened them.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Pooled<HttpConnector, Full<Bytes>>,
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

impl Client {
    pub fn new() -> Client {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let inner = Pooled::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(connector);
        Client { inner }
    }

    /// `GET url`.
    pub async fn get(&self, url: &str, timeout: Duration) -> Result<Response> {
        self.exchange(hyper::Method::GET, url, None, None, timeout)
            .await
    }

    /// `POST url` with `body` as `application/json`.
    pub async fn post_json(&self, url: &str, body: &str, timeout: Duration) -> Result<Response> {
        self.exchange(hyper::Method::POST, url, Some(body), None, timeout)
            .await
    }

    /// `GET url` with `Authorization: Bearer <token>`.
    pub async fn get_bearer(&self, url: &str, token: &str, timeout: Duration) -> Result<Response> {
        self.exchange(hyper::Method::GET, url, None, Some(token), timeout)
            .await
    }

    /// `POST url` with `body` as `application/json` and `Authorization: Bearer <token>`.
    pub async fn post_json_bearer(
        &self,
        url: &str,
        body: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<Response> {
        self.exchange(hyper::Method::POST, url, Some(body), Some(token), timeout)
            .await
    }

    async fn exchange(
        &self,
        method: hyper::Method,
        url: &str,
        body: Option<&str>,
        bearer: Option<&str>,
        timeout: Duration,
    ) -> Result<Response> {
        let name = if method == hyper::Method::GET {
            "GET"
        } else {
            "POST"
        };
        let fail = |reason: String| Error::Io {
            method: name,
            url: url.to_string(),
            reason,
        };
        let request = request(method, name, url, body, bearer)?;
        let run = async {
            let answer = self.inner.request(request).await.map_err(|e| {
                // The cause chain says why (refused, reset): the top error alone does not.
                let reason = chain(&e);
                if e.is_connect() {
                    Error::Connect {
                        method: name,
                        url: url.to_string(),
                        reason,
                    }
                } else {
                    fail(reason)
                }
            })?;
            let status = answer.status().as_u16();
            let bytes = Limited::new(answer.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| fail(chain(&*e)))?
                .to_bytes();
            let body = String::from_utf8(bytes.to_vec()).map_err(|_| Error::Malformed {
                method: name,
                url: url.to_string(),
                reason: NotHttp::NotUtf8,
            })?;
            Ok(Response { status, body })
        };
        tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| Error::Timeout {
                method: name,
                url: url.to_string(),
                timeout,
            })?
    }
}

/// `GET url` on a connection of its own.
pub async fn get(url: &str, timeout: Duration) -> Result<Response> {
    Client::new().get(url, timeout).await
}

/// `POST url` with `body` as `application/json`, on a connection of its own.
pub async fn post_json(url: &str, body: &str, timeout: Duration) -> Result<Response> {
    Client::new().post_json(url, body, timeout).await
}

fn request(
    method: hyper::Method,
    name: &'static str,
    url: &str,
    body: Option<&str>,
    bearer: Option<&str>,
) -> Result<hyper::Request<Full<Bytes>>> {
    let bad = |reason: String| Error::Url {
        method: name,
        url: url.to_string(),
        reason,
    };
    let uri: hyper::Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// URLs are supported".into()));
    }
    let mut request =
        hyper::Request::new(Full::new(Bytes::from(body.unwrap_or_default().to_string())));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.insert(USER_AGENT, HeaderValue::from_static("wsload"));
    if body.is_some() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    if let Some(token) = bearer {
        // The token's own text is never part of the error: it names the header only.
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| bad("the bearer token is not a valid header value".into()))?;
        // Kept out of hyper's Debug output and HPACK tables.
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(request)
}

/// An error and its causes, `: `-separated.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls() {
        let e = request(hyper::Method::GET, "GET", "https://h/metrics", None, None)
            .expect_err("https refused");
        assert_eq!(
            e.to_string(),
            "GET https://h/metrics: only http:// URLs are supported"
        );
        let r = request(
            hyper::Method::POST,
            "POST",
            "http://[fd00::1]:9464/control/start",
            Some("{}"),
            Some("abc"),
        )
        .expect("valid");
        assert_eq!(r.uri().port_u16(), Some(9464));
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(r.headers()[AUTHORIZATION], "Bearer abc");
        assert!(r.headers()[AUTHORIZATION].is_sensitive());
        let e = request(hyper::Method::GET, "GET", "http://h/x", None, Some("a\nb"))
            .expect_err("a newline is no header");
        assert!(!e.to_string().contains("a\nb"), "{e}");
    }
}
