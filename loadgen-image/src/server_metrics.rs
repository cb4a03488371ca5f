//! Reads the server's own received-message counter from its Prometheus endpoint, so the
//! report can reconcile what clients sent with what the server got. The parsing is
//! `wsload_http::scrape`'s, shared with the operator, which scrapes every replica pod.

use std::collections::BTreeMap;
use std::time::Duration;
use wsload_http::scrape;

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
