//! Reads the server's own received-message counter from its Prometheus endpoint, so the
//! report can reconcile what clients sent with what the server got, and in a fanout its topic
//! counters. The parsing is `wsload_http::scrape`'s, shared with the operator, which scrapes
//! every replica pod.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use wsload_control::{server_connections, server_topics};
use wsload_http::scrape;
use wsload_report::fanout::ServerTopics;
use wsload_report::server_connections::{
    self as connections, ReplicaConnections, ServerConnections,
};
use wsload_spec::LoadTestSpec;
use wsload_spec::scenario::Motion;

/// A scrape that takes longer than this is a server in trouble; the run notes it and goes on.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the counter could not be read.
pub type ScrapeError = scrape::Error;

/// One scrape target: a counter name and the labels its series must carry.
#[derive(Debug, Clone)]
pub struct Counter {
    pub url: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl Counter {
    /// The sum of every matching series. Blocking: called between cells, never in a runtime.
    pub fn read(&self) -> Result<u64, ScrapeError> {
        scrape::read_blocking(&self.url, &self.name, &self.labels, SCRAPE_TIMEOUT)
    }
}

/// The servers' topic counters over each cell of a fanout (`CellResult.server_topics`), read
/// where the received counter is: before the first cell, then once each cell is over.
#[derive(Debug, Default)]
pub struct TopicCounters {
    /// Every replica's metrics endpoint; empty when not a fanout.
    urls: Vec<String>,
    /// The sum when the running cell began; `None` when unread, or the servers have none.
    before: Option<ServerTopics>,
}

impl TopicCounters {
    /// A fanout's, at the endpoints of its received counters (`counters`).
    pub fn of(spec: &LoadTestSpec, counters: &[Counter]) -> Self {
        let mut urls: Vec<String> = if spec.scenario.profile().motion == Motion::Fanout {
            counters.iter().map(|c| c.url.clone()).collect()
        } else {
            Vec::new()
        };
        urls.dedup();
        TopicCounters { urls, before: None }
    }

    /// Reads the counters before the first cell.
    pub fn begin(&mut self) -> Result<(), ScrapeError> {
        if self.urls.is_empty() {
            return Ok(());
        }
        self.before = server_topics::read_blocking(&self.urls, SCRAPE_TIMEOUT)?;
        Ok(())
    }

    /// What the counters grew by during the cell just over, read once what the servers still
    /// had queued was written or dropped (deliveries go on during the drain; a cell is over
    /// after it), or [`server_topics::SETTLE`] passed. `None` without a reading before.
    pub fn end(&mut self) -> Result<Option<ServerTopics>, ScrapeError> {
        let Some(before) = self.before.take() else {
            return Ok(None);
        };
        let since = Instant::now();
        loop {
            let Some(after) = server_topics::read_blocking(&self.urls, SCRAPE_TIMEOUT)? else {
                return Ok(None);
            };
            let cell = server_topics::increase(&before, &after);
            if server_topics::settled(&cell) || since.elapsed() >= server_topics::SETTLE {
                self.before = Some(after);
                return Ok(Some(cell));
            }
            std::thread::sleep(wsload_control::settle::POLL);
        }
    }
}

/// Every replica's connection counters over each cell (`CellResult.server_connections`), read
/// where the received counters are: before the first cell, then once each cell is over.
#[derive(Debug, Default)]
pub struct ConnectionCounters {
    /// Every replica's metrics endpoint.
    urls: Vec<String>,
    /// The readings when the running cell began; `None` when unread.
    before: Option<Vec<ReplicaConnections>>,
}

impl ConnectionCounters {
    /// At the endpoints of the received counters (`counters`).
    pub fn of(counters: &[Counter]) -> Self {
        let mut urls: Vec<String> = counters.iter().map(|c| c.url.clone()).collect();
        urls.dedup();
        ConnectionCounters { urls, before: None }
    }

    /// Reads the counters before the first cell.
    pub fn begin(&mut self) -> Result<(), ScrapeError> {
        if !self.urls.is_empty() {
            self.before = Some(server_connections::read_blocking(
                &self.urls,
                SCRAPE_TIMEOUT,
            )?);
        }
        Ok(())
    }

    /// The replicas' increase during the cell just over, summed; `None` without a reading
    /// before (or servers without these counters).
    pub fn end(&mut self) -> Result<Option<ServerConnections>, ScrapeError> {
        let Some(before) = self.before.take() else {
            return Ok(None);
        };
        let after = server_connections::read_blocking(&self.urls, SCRAPE_TIMEOUT)?;
        let cell = connections::increase(&before, &after);
        self.before = Some(after);
        Ok(connections::summarize(&cell))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    /// Serves `body` once as /metrics on a loopback port.
    fn serve_once(body: &'static str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        format!("http://{addr}")
    }

    #[test]
    fn reads_the_sum_of_matching_series_with_timestamps() {
        let url = serve_once("# TYPE x counter\nx{p=\"a\"} 5 1700000000000\nx{p=\"b\"} 7\n");
        let c = Counter {
            url,
            name: "x".into(),
            labels: BTreeMap::from([("p".to_string(), "a".to_string())]),
        };
        assert_eq!(c.read().expect("read"), 5);
    }

    #[test]
    fn nan_is_not_a_count() {
        let url = serve_once("x NaN\n");
        let c = Counter {
            url,
            name: "x".into(),
            labels: BTreeMap::new(),
        };
        let e = c.read().expect_err("NaN");
        assert!(e.to_string().contains("not a count"), "{e}");
    }
}
