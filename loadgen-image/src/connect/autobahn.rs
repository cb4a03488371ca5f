//! `wsload autobahn-client` (hidden): the load generator's own WebSocket client ([`Ws`], the
//! handshake and framing every dial uses) driven by the Autobahn|Testsuite fuzzingserver, which
//! judges a client by what it echoes. `scripts/autobahn.sh --client` runs it.
//!
//! Per case: open `/runCase?case=N&agent=AGENT`, echo every data message back as received
//! (`Ws` reassembles fragments, checks UTF-8, answers pings and the server's close), then
//! wait for the server to end the connection. `/updateReports` writes the report last.
//!
//! Every upgrade offers permessage-deflate as a LoadTest's `compression: {}` does: the
//! compression cases (12.*, 13.*) accept it, each with its own window and context
//! takeover; the others decline it and run uncompressed.

use super::error::Cause;
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::generate_request;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use wsload_ws::{DeflateOffer, Io, Offer, Ws};

/// Why the client could not be driven (a case's own failures are what the server tests, and
/// only logged).
#[derive(Debug, thiserror::Error)]
pub enum AutobahnError {
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The URL does not make a request: the input's fault.
    #[error("{url}: {source}")]
    Url {
        url: String,
        #[source]
        source: Cause,
    },
    #[error("{url}: only ws:// URLs")]
    NotWs { url: String },
    #[error("{url}: no host")]
    NoHost { url: String },
    #[error("target: {what}: {source}")]
    Unreachable {
        what: String,
        #[source]
        source: Cause,
    },
    /// What the server sent instead of the number of cases.
    #[error("target: getCaseCount: not a count: {text:?}")]
    NotACount { text: String },
    #[error("target: getCaseCount: no count received")]
    NoCount,
}

impl AutobahnError {
    /// Whether the input is at fault (else the fuzzingserver).
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            AutobahnError::Url { .. } | AutobahnError::NotWs { .. } | AutobahnError::NoHost { .. }
        )
    }
}

fn url_error(url: &str, source: impl Into<Cause>) -> AutobahnError {
    AutobahnError::Url {
        url: url.to_string(),
        source: source.into(),
    }
}

fn unreachable(what: &str, source: impl Into<Cause>) -> AutobahnError {
    AutobahnError::Unreachable {
        what: what.to_string(),
        source: source.into(),
    }
}

/// Reads aim at this much: the 9.* cases send up to 16 MiB messages.
const READ_SIZE: usize = 64 * 1024;
/// A case that takes longer is abandoned (the report then shows it failed); the slowest of
/// 1-10 (9.1.6, 16 MiB of text) takes a few seconds.
const CASE_TIMEOUT: Duration = Duration::from_secs(120);
/// After failing a connection the client waits this long for the server to close TCP, so the
/// close frame is read before the socket goes (closing first with unread data would reset it).
const LINGER: Duration = Duration::from_secs(5);

/// Runs the fuzzingserver at `base` (`ws://host:port`): `cases` (1-based, as
/// `/getCaseCount` counts them; all when empty), then `/updateReports`. Returns the number of
/// cases run. A case's protocol failures are what the server tests, so they are logged, not
/// errors; only not reaching the server is.
pub fn run(base: &str, agent: &str, cases: &[u32]) -> Result<u32, AutobahnError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AutobahnError::Runtime)?;
    rt.block_on(async {
        let base = base.trim_end_matches('/');
        let count = case_count(base).await?;
        let selected: Vec<u32> = if cases.is_empty() {
            (1..=count).collect()
        } else {
            cases.to_vec()
        };
        for &n in &selected {
            let url = format!("{base}/runCase?case={n}&agent={agent}");
            match tokio::time::timeout(CASE_TIMEOUT, async {
                echo(connect(&url).await?).await;
                Ok::<(), AutobahnError>(())
            })
            .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(case = n, "{e}"),
                Err(_) => tracing::warn!(case = n, "timed out after {CASE_TIMEOUT:?}"),
            }
        }
        let ws = connect(&format!("{base}/updateReports?agent={agent}")).await?;
        echo(ws).await;
        Ok(selected.len() as u32)
    })
}

/// `/getCaseCount`: one text message, the number of cases. The server closes right after
/// it, sometimes resetting the connection as the close reply arrives: once the count is in,
/// how the connection ends does not matter.
async fn case_count(base: &str) -> Result<u32, AutobahnError> {
    let mut ws = connect(&format!("{base}/getCaseCount")).await?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                return t.trim().parse().map_err(|_| AutobahnError::NotACount {
                    text: t.to_string(),
                });
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(unreachable("getCaseCount", e)),
            None => return Err(AutobahnError::NoCount),
        }
    }
}

/// Opens `url` (plain `ws://`) with the load generator's handshake.
async fn connect(url: &str) -> Result<Ws, AutobahnError> {
    let mut req = url.into_client_request().map_err(|e| url_error(url, e))?;
    let deflate = DeflateOffer::default();
    let offer = HeaderValue::from_str(&deflate.header_value()).map_err(|e| url_error(url, e))?;
    req.headers_mut().insert("sec-websocket-extensions", offer);
    if req.uri().scheme_str() != Some("ws") {
        return Err(AutobahnError::NotWs {
            url: url.to_string(),
        });
    }
    let host = req
        .uri()
        .host()
        .ok_or_else(|| AutobahnError::NoHost {
            url: url.to_string(),
        })?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = req.uri().port_u16().unwrap_or(80);
    let (request, key) = generate_request(req).map_err(|e| url_error(url, e))?;
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| unreachable(url, e))?;
    let _ = tcp.set_nodelay(true);
    let mut ws = Ws::new(Io::Plain(tcp), READ_SIZE);
    let offer = Offer {
        protocols: None,
        deflate: Some(&deflate),
    };
    let agreed = ws
        .handshake(&request)
        .await
        .and_then(|head| head.verify(&derive_accept_key(key.as_bytes()), &offer))
        .map_err(|e| unreachable(url, e))?;
    if let Some(params) = agreed.deflate {
        ws.use_deflate(params);
    }
    Ok(ws)
}

/// Echoes data messages until the connection ends; a failure (which sent the server its
/// close frame) is logged and followed by a wait for the server to close.
async fn echo(mut ws: Ws) {
    let failure: WsError = loop {
        match ws.next().await {
            None => return,
            Some(Ok(msg @ (Message::Text(_) | Message::Binary(_)))) => {
                if let Err(e) = ws.send(msg).await {
                    break e;
                }
            }
            // Pings and the server's close are answered inside `Ws`.
            Some(Ok(_)) => {}
            Some(Err(e)) => break e,
        }
    };
    tracing::info!("connection failed: {failure}");
    let mut io = ws.into_io();
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}
