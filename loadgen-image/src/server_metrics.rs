//! Reads the server's own received-message counter from its Prometheus endpoint, so the
//! report can reconcile what clients sent with what the server got.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// One scrape target: a counter name and the labels its series must carry.
#[derive(Debug, Clone)]
pub struct Counter {
    pub url: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

impl Counter {
    /// The sum of every matching series.
    pub fn read(&self) -> Result<u64, String> {
        let body = get(&self.url)?;
        Ok(sum(&body, &self.name, &self.labels) as u64)
    }
}

fn get(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// metrics URLs are supported"))?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/metrics".to_string()), |(h, p)| {
            (h, format!("/{p}"))
        });
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("{url}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("{url}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("{url}: {e}"))?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("{url}: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{url}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(format!("{url}: {}", head.lines().next().unwrap_or("")));
    }
    Ok(body.to_string())
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
}
