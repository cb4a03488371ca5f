//! Reads the server's own received-message counter from its Prometheus endpoint, so the
//! report can reconcile what clients sent with what the server got.

use std::collections::BTreeMap;
use std::time::Duration;
use wsload_metrics::http_client;

/// A scrape that takes longer than this is a server in trouble; the run notes it and goes on.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error(transparent)]
    Http(#[from] http_client::Error),
    #[error("GET {url}: HTTP {status}")]
    Status { url: String, status: u16 },
}

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
        let url = with_default_path(&self.url);
        let answer = http_client::get_blocking(&url, SCRAPE_TIMEOUT)?;
        if answer.status != 200 {
            return Err(ScrapeError::Status {
                url,
                status: answer.status,
            });
        }
        Ok(sum(&answer.body, &self.name, &self.labels) as u64)
    }
}

/// `http://host:port` means its `/metrics`, as Prometheus would read it.
fn with_default_path(url: &str) -> String {
    let authority = url.strip_prefix("http://").unwrap_or(url);
    if authority.contains('/') {
        url.to_string()
    } else {
        format!("{url}/metrics")
    }
}

/// Sums the series of `name` whose labels include every pair of `want`.
pub fn sum(body: &str, name: &str, want: &BTreeMap<String, String>) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if n != name {
                return None;
            }
            let have: BTreeMap<&str, &str> = labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
                .collect();
            want.iter()
                .all(|(k, v)| have.get(k.as_str()) == Some(&v.as_str()))
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_matching_series() {
        let body = "# TYPE x counter\nx{profile=\"echo\",format=\"text\"} 5\nx{profile=\"echo\",format=\"binary\"} 7\nx{profile=\"sink\",format=\"text\"} 100\nxy 3\n";
        let mut want = BTreeMap::new();
        assert_eq!(sum(body, "x", &want), 112.0);
        want.insert("profile".to_string(), "echo".to_string());
        assert_eq!(sum(body, "x", &want), 12.0);
        assert_eq!(sum(body, "xy", &BTreeMap::new()), 3.0);
    }

    #[test]
    fn a_bare_address_means_its_metrics_path() {
        assert_eq!(with_default_path("http://h:9090"), "http://h:9090/metrics");
        assert_eq!(with_default_path("http://h:9090/m"), "http://h:9090/m");
    }
}
