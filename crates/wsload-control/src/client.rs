//! The conductor's side of the shard control protocol over HTTP (the operator against pod
//! IPs, `wsload run` against its shard processes on loopback). Every control request carries
//! the test's token.

use crate::auth::Token;
use crate::clock::{self, Sample};
use crate::protocol::{
    self, CellKey, CellOrder, ClockReading, MeasureOrder, Release, StartRequest, State,
};
use crate::{Error, Result};
use std::time::{Duration, Instant};
use wsload_http::http_client::{Client, Response};

/// One shard's endpoint. Clones share one connection pool: build it within the Tokio runtime
/// that uses it.
#[derive(Debug, Clone)]
pub struct ShardClient {
    base: String,
    /// Per request, the whole exchange.
    timeout: Duration,
    http: Client,
    token: Token,
}

impl ShardClient {
    /// A shard at `host:port` (an IPv6 address is bracketed here) of the test whose token is
    /// `token`, with a pool of its own.
    pub fn new(host: &str, port: u16, token: Token, timeout: Duration) -> Self {
        ShardClient::with_http(Client::new(), host, port, token, timeout)
    }

    /// A shard at `host:port` asked through `http`: a conductor of many shards passes one
    /// pool to them all, so that each poll reuses the shard's kept-alive connection instead
    /// of opening a new one.
    pub fn with_http(http: Client, host: &str, port: u16, token: Token, timeout: Duration) -> Self {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        ShardClient {
            base: format!("http://{host}:{port}"),
            timeout,
            http,
            token,
        }
    }

    async fn get(&self, url: &str) -> Result<Response> {
        Ok(self
            .http
            .get_bearer(url, self.token.expose(), self.timeout)
            .await?)
    }

    async fn post_raw(&self, url: &str, body: &str) -> Result<Response> {
        Ok(self
            .http
            .post_json_bearer(url, body, self.token.expose(), self.timeout)
            .await?)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Whether the shard answers `/readyz` with 200.
    pub async fn ready(&self) -> bool {
        self.http
            .get(&self.url("/readyz"), self.timeout)
            .await
            .is_ok_and(|r| r.status == 200)
    }

    pub async fn state(&self) -> Result<State> {
        let url = self.url(protocol::STATE);
        let r = self.get(&url).await?;
        if r.status != 200 {
            return Err(status(GET, &url, r.status));
        }
        serde_json::from_str(&r.body).map_err(|source| answer(GET, &url, source))
    }

    async fn post(&self, path: &str, body: String) -> Result<State> {
        let url = self.url(path);
        let r = self.post_raw(&url, &body).await?;
        accepted(&url, r)
    }

    /// Releases the shard's first cell at `release.start_at` (Unix ms, its clock). Retrying with the same body
    /// is safe.
    pub async fn start(&self, release: Release, cell: Option<CellKey>) -> Result<State> {
        let body = json(&StartRequest {
            start_at: release.start_at,
            cell,
            conductor_at: release.conductor_at,
            offset_micros: release.offset_micros,
        })?;
        self.post(protocol::START, body).await
    }

    /// Releases the next cell at `release.start_at` (Unix ms, its clock). Retrying with the same body is safe.
    pub async fn cell(&self, release: Release, cell: CellKey) -> Result<State> {
        let body = json(&CellOrder {
            start_at: release.start_at,
            cell,
            conductor_at: release.conductor_at,
            offset_micros: release.offset_micros,
        })?;
        self.post(protocol::CELL, body).await
    }

    /// Every shard opened its share of cell `cell`: measure from `release.start_at` (Unix ms,
    /// its clock). Retrying with the same body is safe.
    pub async fn measure(&self, release: Release, cell: u32) -> Result<State> {
        let body = json(&MeasureOrder {
            cell,
            start_at: release.start_at,
            conductor_at: release.conductor_at,
        })?;
        self.post(protocol::MEASURE, body).await
    }

    /// No more cells: the shard builds its result.
    pub async fn end(&self) -> Result<State> {
        self.post(protocol::END, "{}".into()).await
    }

    /// The shard's RunResult JSON, once it is done; `None` while it still runs.
    pub async fn result(&self) -> Result<Option<String>> {
        let url = self.url(protocol::RESULT);
        let r = self.get(&url).await?;
        match r.status {
            200 => Ok(Some(r.body)),
            409 => Ok(None),
            s => Err(status(GET, &url, s)),
        }
    }

    /// One probe of the shard's clock (crate::clock). The round trip is the whole exchange
    /// as this end sees it, so a probe that had to open a connection is merely a poor one.
    pub async fn clock(&self) -> Result<Sample> {
        let url = self.url(protocol::CLOCK);
        let sent = clock::conductor_micros();
        let began = Instant::now();
        let r = self.get(&url).await?;
        let round_trip = began.elapsed();
        if r.status != 200 {
            return Err(status(GET, &url, r.status));
        }
        let reading: ClockReading =
            serde_json::from_str(&r.body).map_err(|source| answer(GET, &url, source))?;
        Ok(Sample::new(sent, reading, round_trip))
    }

    /// Lets the shard exit: its result is stored.
    pub async fn finish(&self) -> Result<()> {
        let url = self.url(protocol::FINISH);
        let r = self.post_raw(&url, "{}").await?;
        if (200..300).contains(&r.status) {
            Ok(())
        } else {
            Err(status(POST, &url, r.status))
        }
    }
}

fn json(value: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(Error::Order)
}

fn accepted(url: &str, r: Response) -> Result<State> {
    if !(200..300).contains(&r.status) {
        return Err(Error::Refused {
            url: url.to_string(),
            status: r.status,
            reason: r.body.trim().to_string(),
        });
    }
    serde_json::from_str(&r.body).map_err(|source| answer(POST, url, source))
}

const GET: &str = "GET";
const POST: &str = "POST";

fn status(method: &'static str, url: &str, status: u16) -> Error {
    Error::Status {
        method,
        url: url.to_string(),
        status,
    }
}

fn answer(method: &'static str, url: &str, source: serde_json::Error) -> Error {
    Error::Answer {
        method,
        url: url.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_with_its_reason_and_a_garbled_answer_keeps_its_cause() {
        let url = "http://10.0.0.7:9464/control/start";
        let refused = Response {
            status: 409,
            body: "not ready: cell 2 runs\n".into(),
        };
        let e = accepted(url, refused).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "POST http://10.0.0.7:9464/control/start: HTTP 409: not ready: cell 2 runs"
        );
        let garbled = Response {
            status: 200,
            body: "{".into(),
        };
        let e = accepted(url, garbled).expect_err("not JSON");
        assert!(matches!(e, Error::Answer { .. }), "{e}");
        assert!(std::error::Error::source(&e).is_some(), "{e}");
        assert_eq!(
            status(GET, url, 503).to_string(),
            "GET http://10.0.0.7:9464/control/start: HTTP 503"
        );
    }
}
