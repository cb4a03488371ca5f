//! The operator's side of the shard control protocol (docs/operator.md): ask a shard its
//! state, release it at the common start instant, fetch its result, let it exit.

use crate::names::SHARD_PORT;
use crate::{Error, Result};
use serde::Deserialize;
use std::time::Duration;
use wsload_metrics::http_client;

/// What `GET /control` answers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlState {
    pub state: RunState,
    #[serde(default)]
    pub start_at: Option<u64>,
    #[serde(default)]
    pub started_at_micros: Option<u64>,
    #[serde(default)]
    pub finished_at_micros: Option<u64>,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Waiting,
    Armed,
    Running,
    Done,
    Failed,
}

#[derive(Debug, Clone)]
pub struct ShardClient {
    base: String,
    timeout: Duration,
}

impl ShardClient {
    pub fn new(pod_ip: &str, timeout: Duration) -> Self {
        let host = if pod_ip.contains(':') {
            format!("[{pod_ip}]")
        } else {
            pod_ip.to_string()
        };
        ShardClient {
            base: format!("http://{host}:{SHARD_PORT}"),
            timeout,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn state(&self) -> Result<ControlState> {
        let url = self.url("/control");
        let r = http_client::get(&url, self.timeout)
            .await
            .map_err(|e| Error::Shard(e.to_string()))?;
        if r.status != 200 {
            return Err(Error::Shard(format!("GET {url}: HTTP {}", r.status)));
        }
        serde_json::from_str(&r.body).map_err(|e| Error::Shard(format!("GET {url}: {e}")))
    }

    /// Releases the shard at `start_at` (Unix ms). Retrying with the same instant is safe.
    pub async fn start(&self, start_at: u64) -> Result<ControlState> {
        let url = self.url("/control/start");
        let body = serde_json::json!({ "startAt": start_at }).to_string();
        let r = http_client::post_json(&url, &body, self.timeout)
            .await
            .map_err(|e| Error::Shard(e.to_string()))?;
        if !(200..300).contains(&r.status) {
            return Err(Error::Shard(format!(
                "POST {url}: HTTP {}: {}",
                r.status,
                r.body.trim()
            )));
        }
        serde_json::from_str(&r.body).map_err(|e| Error::Shard(format!("POST {url}: {e}")))
    }

    /// The shard's RunResult JSON, once it is done; `None` while it still runs.
    pub async fn result(&self) -> Result<Option<String>> {
        let url = self.url("/control/result");
        let r = http_client::get(&url, self.timeout)
            .await
            .map_err(|e| Error::Shard(e.to_string()))?;
        match r.status {
            200 => Ok(Some(r.body)),
            409 => Ok(None),
            s => Err(Error::Shard(format!("GET {url}: HTTP {s}"))),
        }
    }

    /// Lets the shard exit: its result is stored.
    pub async fn finish(&self) -> Result<()> {
        let url = self.url("/control/finish");
        let r = http_client::post_json(&url, "{}", self.timeout)
            .await
            .map_err(|e| Error::Shard(e.to_string()))?;
        if (200..300).contains(&r.status) {
            Ok(())
        } else {
            Err(Error::Shard(format!("POST {url}: HTTP {}", r.status)))
        }
    }
}
