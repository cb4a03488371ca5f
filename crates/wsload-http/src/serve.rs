//! The endpoint's HTTP/1.1 server: hyper's `http1` connection API, one task per connection.
//!
//! - Keep-alive: GET and HEAD answers keep the connection open (Prometheus and the operator's
//!   polls reuse it); any other method is answered with `Connection: close`, and
//!   [`Exposition::answered`] runs once that answer is written and the connection shut down.
//! - Limits: headers of at most [`MAX_HEADERS`] bytes (431 above); a body of at most
//!   [`MAX_BODY`] bytes (413 above, after reading and dropping up to [`DRAIN_LIMIT`] of it, so
//!   that the client is not reset before it reads the 413).
//! - Slow clients: the head of each request (and the wait for the next one on a kept-alive
//!   connection) must arrive within [`REQUEST_TIMEOUT`], and so must the body.
//! - Dropping [`serve`]'s future ends every connection it accepted, kept-alive ones included.

use crate::{Exposition, Reply, Request};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// For a request's head (or the next one on an idle connection), and for its body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A request body: control requests are a few dozen bytes of JSON.
pub const MAX_BODY: usize = 8 * 1024;
/// The request line and headers.
pub const MAX_HEADERS: usize = 8 * 1024;
/// An oversized body is read and dropped up to this much before the 413.
pub const DRAIN_LIMIT: usize = 1024 * 1024;

/// Serves the endpoint on `listener` until the future is dropped.
pub async fn serve<E: Exposition>(listener: TcpListener, exposition: Arc<E>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, exposition.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// A request answered with `Connection: close`, kept for [`Exposition::answered`].
struct Closing {
    method: String,
    path: String,
    body: Bytes,
    authorization: Option<String>,
}

async fn connection<E: Exposition>(stream: TcpStream, exposition: Arc<E>) {
    let closing: Arc<Mutex<Option<Closing>>> = Arc::default();
    let service = {
        let (exposition, closing) = (exposition.clone(), closing.clone());
        service_fn(move |request| {
            let (exposition, closing) = (exposition.clone(), closing.clone());
            async move { Ok::<_, Infallible>(respond(request, &*exposition, &closing).await) }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_TIMEOUT)
        .max_header_size(MAX_HEADERS)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    let closing = closing.lock().map(|mut c| c.take()).unwrap_or_default();
    match served {
        Ok(()) => {
            if let Some(c) = closing {
                exposition.answered(&Request {
                    method: &c.method,
                    path: &c.path,
                    body: &c.body,
                    authorization: c.authorization.as_deref(),
                });
            }
        }
        Err(e) => tracing::debug!(error = %e, "metrics connection ended"),
    }
}

/// What became of a request body.
enum Body {
    Read(Bytes),
    TooLarge,
    TooSlow,
    Broken,
}

/// Reads the body, up to [`MAX_BODY`]; past that, drops up to [`DRAIN_LIMIT`] of it.
async fn read_body(mut body: Incoming) -> Body {
    let read = async {
        let mut kept = Vec::new();
        let mut seen = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Body::Broken;
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            seen = seen.saturating_add(data.len());
            if seen <= MAX_BODY {
                kept.extend_from_slice(&data);
            } else if seen > DRAIN_LIMIT {
                break;
            }
        }
        if seen > MAX_BODY {
            Body::TooLarge
        } else {
            Body::Read(kept.into())
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, read)
        .await
        .unwrap_or(Body::TooSlow)
}

async fn respond<E: Exposition>(
    request: hyper::Request<Incoming>,
    exposition: &E,
    closing: &Mutex<Option<Closing>>,
) -> hyper::Response<Full<Bytes>> {
    let (head, body) = request.into_parts();
    let declared = head
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let body = if declared.is_some_and(|n| n > DRAIN_LIMIT as u64) {
        // Not worth reading: answered at once, and the connection closed on the rest.
        Body::TooLarge
    } else {
        read_body(body).await
    };
    let body = match body {
        Body::Read(b) => b,
        Body::TooLarge => {
            let reply = Reply::text(413, format!("a request body is at most {MAX_BODY} bytes\n"));
            return response(reply, true);
        }
        Body::TooSlow => {
            return response(Reply::text(408, "the request body was too slow\n"), true);
        }
        Body::Broken => return response(Reply::text(400, "the request body broke off\n"), true),
    };
    let method = head.method.as_str();
    let request = Request {
        method,
        path: head.uri.path(),
        body: &body,
        authorization: head
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    };
    let reply = route(&request, exposition);
    let close = !matches!(method, "GET" | "HEAD");
    if close && let Ok(mut c) = closing.lock() {
        *c = Some(Closing {
            method: method.to_string(),
            path: request.path.to_string(),
            body: body.clone(),
            authorization: request.authorization.map(str::to_string),
        });
    }
    response(reply, close)
}

fn response(reply: Reply, close: bool) -> hyper::Response<Full<Bytes>> {
    let mut r = hyper::Response::new(Full::new(Bytes::from(reply.body)));
    *r.status_mut() = hyper::StatusCode::from_u16(reply.status)
        .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let headers = r.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if close {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

fn route<E: Exposition>(request: &Request<'_>, exposition: &E) -> Reply {
    let get = matches!(request.method, "GET" | "HEAD");
    match request.path {
        "/metrics" | "/healthz" | "/readyz" if !get => {
            Reply::text(405, format!("{}: only GET and HEAD\n", request.path))
        }
        "/metrics" => Reply {
            status: 200,
            content_type: crate::CONTENT_TYPE,
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
