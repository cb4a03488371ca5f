//! The servers' received-message counter, summed over every replica: each managed server pod
//! is scraped on its own metrics port by pod IP (the Service would answer for one replica at
//! a time), or the one URL `spec.serverMetrics.url` names for an external server.

use crate::pods;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::time::Duration;
use wsload_http::http_client::Client;
use wsload_http::scrape;
use wsload_spec::LoadTestSpec;

/// At most this many replicas are scraped at once.
const CONCURRENCY: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    #[error("server replica {replica} has no pod address")]
    NoAddress { replica: u32 },
    #[error(transparent)]
    Scrape(#[from] scrape::Error),
}

/// Where the counter is read, and which series count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCounter {
    /// One per replica (managed server), or the one external URL.
    pub urls: Vec<String>,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl ServerCounter {
    /// The counter of a test whose server replicas are `servers` (by replica index); `None`
    /// when there is none to read (an external server without `serverMetrics.url`).
    pub fn of(
        spec: &LoadTestSpec,
        servers: &BTreeMap<u32, Pod>,
    ) -> Result<Option<ServerCounter>, CounterError> {
        let (name, labels) = match &spec.server_metrics {
            Some(m) => (m.received.clone(), m.labels.clone()),
            None => (
                wsload_spec::DEFAULT_RECEIVED_METRIC.to_string(),
                BTreeMap::new(),
            ),
        };
        if let Some(url) = spec.server_metrics.as_ref().and_then(|m| m.url.clone()) {
            return Ok(Some(ServerCounter {
                urls: vec![url],
                name,
                labels,
            }));
        }
        let Some(server) = &spec.target.server else {
            return Ok(None);
        };
        let urls = (0..server.replicas.max(1))
            .map(|replica| {
                let ip = servers
                    .get(&replica)
                    .and_then(pods::ip)
                    .ok_or(CounterError::NoAddress { replica })?;
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip
                };
                Ok(format!("http://{host}:{}/metrics", server.metrics_port))
            })
            .collect::<Result<Vec<_>, CounterError>>()?;
        Ok(Some(ServerCounter { urls, name, labels }))
    }

    /// Every URL scraped at once through `http` and summed. One that fails fails the
    /// reading: a sum missing a replica would read as loss.
    pub async fn read(&self, http: &Client, timeout: Duration) -> Result<u64, CounterError> {
        // Futures built up front, owning what they need (see reconcile/fanout.rs).
        let reads: Vec<_> = self
            .urls
            .iter()
            .map(|url| {
                let (url, name, labels) = (url.clone(), self.name.clone(), self.labels.clone());
                let http = http.clone();
                async move { Ok(scrape::read(&http, &url, &name, &labels, timeout).await?) }
            })
            .collect();
        let readings: Vec<Result<u64, CounterError>> = futures_util::stream::iter(reads)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        readings
            .into_iter()
            .try_fold(0u64, |sum, r| Ok(sum.saturating_add(r?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(yaml: &str) -> LoadTestSpec {
        wsload_spec::yaml::parse(yaml).expect("spec")
    }

    fn pod(ip: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": {"podIP": ip}}))
            .expect("pod")
    }

    #[test]
    fn every_managed_replica_is_scraped_by_pod_ip() {
        let s = spec("target: {server: {replicas: 2, metricsPort: 9191}}\nscenario: throughput\n");
        let servers = BTreeMap::from([(0, pod("10.0.0.1")), (1, pod("fd00::2"))]);
        let c = ServerCounter::of(&s, &servers)
            .expect("ok")
            .expect("a counter");
        assert_eq!(
            c.urls,
            [
                "http://10.0.0.1:9191/metrics",
                "http://[fd00::2]:9191/metrics"
            ]
        );
        assert_eq!(c.name, wsload_spec::DEFAULT_RECEIVED_METRIC);
        // A replica without an address cannot be summed: no reading at all.
        let one = BTreeMap::from([(0, pod("10.0.0.1"))]);
        let e = ServerCounter::of(&s, &one).expect_err("replica 1 missing");
        assert_eq!(e.to_string(), "server replica 1 has no pod address");
    }

    #[test]
    fn server_metrics_name_labels_and_url_are_used_as_given() {
        let s = spec(
            "target: {server: {}}\nscenario: throughput\nserverMetrics: {received: rx_total, labels: {app: a}}\n",
        );
        let servers = BTreeMap::from([(0, pod("10.0.0.1"))]);
        let c = ServerCounter::of(&s, &servers)
            .expect("ok")
            .expect("a counter");
        assert_eq!(c.urls, ["http://10.0.0.1:9090/metrics"]);
        assert_eq!((c.name.as_str(), c.labels.len()), ("rx_total", 1));
        let ext = spec(
            "target: {url: \"ws://ext:80/\"}\nscenario: throughput\nserverMetrics: {url: \"http://ext:9000/m\"}\n",
        );
        let c = ServerCounter::of(&ext, &BTreeMap::new())
            .expect("ok")
            .expect("a counter");
        assert_eq!(c.urls, ["http://ext:9000/m"]);
        let none = spec("target: {url: \"ws://ext:80/\"}\nscenario: throughput\n");
        assert_eq!(
            ServerCounter::of(&none, &BTreeMap::new()).expect("ok"),
            None
        );
    }

    #[tokio::test]
    async fn the_reading_is_the_sum_over_replicas() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut urls = Vec::new();
        for value in ["40 1700000000000", "2"] {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            urls.push(format!("http://{}/metrics", l.local_addr().expect("addr")));
            let body = format!("# TYPE rx counter\nrx_total{{p=\"echo\"}} {value}\n");
            tokio::spawn(async move {
                while let Ok((mut s, _)) = l.accept().await {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(answer.as_bytes()).await;
                }
            });
        }
        let c = ServerCounter {
            urls: urls.clone(),
            name: "rx_total".into(),
            labels: BTreeMap::new(),
        };
        let http = Client::new();
        assert_eq!(
            c.read(&http, Duration::from_secs(5)).await.expect("read"),
            42
        );
        // One replica unreachable: no sum.
        let mut broken = c.clone();
        broken.urls.push("http://127.0.0.1:1/metrics".into());
        assert!(broken.read(&http, Duration::from_secs(5)).await.is_err());
    }
}
