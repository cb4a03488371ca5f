//! Reading one counter from a Prometheus endpoint: the text exposition (format 0.0.4) and
//! OpenMetrics 1.0, parsed as far as a sum of matching series needs. Both the load generator
//! (scraping its local server processes) and the operator (scraping every server replica pod)
//! reconcile what clients sent with what servers counted through it, so it must read what real
//! servers expose, not only wsload-server's output:
//!
//! - sample timestamps (`x{a="b"} 5 1700000000000`: the value is 5);
//! - label values with escaped quotes, backslashes and newlines, and commas or braces inside;
//! - `+Inf`, `-Inf`, `NaN`, exponents;
//! - comments, `# HELP`, `# TYPE`, blank lines, OpenMetrics' `# EOF` (nothing after it counts)
//!   and exemplars (`... 5 # {trace_id="x"} 1`);
//! - counter naming: a counter asked for as `x_total` is read from `x` when the endpoint has
//!   no `x_total` (older clients), and asked for as `x`, from `x_total` (OpenMetrics names the
//!   sample `x_total` for the family `x`). An exact name always wins, so nothing is counted
//!   twice.
//!
//! ```text
//! pub fn sum(body: &str, name: &str, labels: &BTreeMap<String, String>) -> f64
//! pub fn find(body: &str, name: &str, labels: &BTreeMap<String, String>) -> Option<f64>
//! pub fn by_label(body: &str, name: &str, label: &str) -> BTreeMap<String, f64>
//! pub fn count(url: &str, body: &str, name: &str, labels: &BTreeMap<String, String>) -> Result<Option<u64>>
//! pub fn count_by_label(url: &str, body: &str, name: &str, label: &str) -> Result<BTreeMap<String, u64>>
//! pub async fn fetch(client: &http_client::Client, url: &str, timeout: Duration) -> Result<String>
//! pub fn fetch_blocking(url: &str, timeout: Duration) -> Result<String>
//! pub fn buckets(body: &str, name: &str) -> Vec<(f64, f64)>
//! pub async fn read(client: &http_client::Client, url: &str, name: &str, labels: &BTreeMap<String, String>, timeout: Duration) -> Result<u64>
//! pub fn read_blocking(url: &str, name: &str, labels: &BTreeMap<String, String>, timeout: Duration) -> Result<u64>
//! ```

use crate::http_client;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Http(#[from] http_client::Error),
    #[error("GET {url}: HTTP {status}")]
    Status { url: String, status: u16 },
    /// The matching series add up to something no message count can be (NaN, infinite,
    /// negative): a wrong metric named, or a broken exporter.
    #[error("{url}: {name} is {value}, not a count")]
    NotACount {
        url: String,
        name: String,
        value: f64,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One sample line, borrowed from the body.
#[derive(Debug, Clone, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

/// Sums the series of `name` whose labels include every pair of `want` (0 when none match).
pub fn sum(body: &str, name: &str, want: &BTreeMap<String, String>) -> f64 {
    find(body, name, want).unwrap_or(0.0)
}

/// [`sum`], or `None` when no series matches: a counter the endpoint does not have.
pub fn find(body: &str, name: &str, want: &BTreeMap<String, String>) -> Option<f64> {
    let samples: Vec<Sample<'_>> = samples(body).collect();
    let total = |name: &str| -> Option<f64> {
        let mut matched = false;
        let mut total = 0.0;
        for s in samples
            .iter()
            .filter(|s| s.name == name && has_labels(s, want))
        {
            matched = true;
            total += s.value;
        }
        matched.then_some(total)
    };
    let alternative = match name.strip_suffix("_total") {
        Some(family) => family.to_string(),
        None => format!("{name}_total"),
    };
    total(name).or_else(|| total(&alternative))
}

/// The series of `name` summed by the value of their label `label` (series without it
/// left out); empty when the endpoint has no such counter. Counter naming as in [`find`].
pub fn by_label(body: &str, name: &str, label: &str) -> BTreeMap<String, f64> {
    let samples: Vec<Sample<'_>> = samples(body).collect();
    let group = |name: &str| -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in samples.iter().filter(|s| s.name == name) {
            if let Some((_, v)) = s.labels.iter().find(|(k, _)| *k == label) {
                *out.entry(v.clone()).or_insert(0.0) += s.value;
            }
        }
        out
    };
    let exact = group(name);
    if !exact.is_empty() {
        return exact;
    }
    match name.strip_suffix("_total") {
        Some(family) => group(family),
        None => group(&format!("{name}_total")),
    }
}

/// The cumulative buckets of histogram `name` (its `name_bucket` series) summed over every
/// series, by their `le` bound in ascending order (`+Inf` last).
pub fn buckets(body: &str, name: &str) -> Vec<(f64, f64)> {
    let series = format!("{name}_bucket");
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    for s in samples(body).filter(|s| s.name == series) {
        let Some(le) = s
            .labels
            .iter()
            .find(|(k, _)| *k == "le")
            .and_then(|(_, v)| parse_value(v))
        else {
            continue;
        };
        match by_le.iter_mut().find(|(b, _)| *b == le) {
            Some((_, total)) => *total += s.value,
            None => by_le.push((le, s.value)),
        }
    }
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    by_le
}

fn has_labels(s: &Sample<'_>, want: &BTreeMap<String, String>) -> bool {
    want.iter()
        .all(|(k, v)| s.labels.iter().any(|(n, have)| n == k && have == v))
}

/// Every sample of the body that parses; a line that does not is skipped (a scrape must not
/// fail over a series nobody asked for).
fn samples(body: &str) -> impl Iterator<Item = Sample<'_>> {
    body.lines()
        .map(str::trim)
        .take_while(|l| *l != "# EOF")
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

fn parse_line(line: &str) -> Option<Sample<'_>> {
    if !line.starts_with(is_name_start) {
        return None;
    }
    let end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let (name, mut rest) = line.split_at(end);
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    // The value is the first field after the series; a timestamp or an exemplar may follow.
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Parses `a="x",b="y\"z"}` (after the `{`): the labels and what follows the `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(&str, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        if !s.starts_with(is_name_start) {
            return None;
        }
        let end = s.find(|c: char| !is_name_char(c))?;
        let (label, rest) = s.split_at(end);
        let rest = rest.trim_start().strip_prefix('=')?.trim_start();
        let rest = rest.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let close = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((label, value));
        s = rest[close + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return None;
        }
    }
}

/// A sample value as Prometheus writes it (Go's float formatting and its special values).
fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        "NaN" | "nan" => Some(f64::NAN),
        _ => v.parse().ok(),
    }
}

/// `http://host:port` means its `/metrics`, as Prometheus would read it.
pub fn with_default_path(url: &str) -> String {
    let authority = url.strip_prefix("http://").unwrap_or(url);
    if authority.contains('/') {
        url.to_string()
    } else {
        format!("{url}/metrics")
    }
}

/// The body of a 200 answer.
fn ok_body(url: String, r: http_client::Response) -> Result<(String, String)> {
    if r.status != 200 {
        return Err(Error::Status {
            url,
            status: r.status,
        });
    }
    Ok((url, r.body))
}

/// The exposition at `url` (a bare `http://host:port` means its `/metrics`), for reading
/// several counters from one scrape with [`find`] and [`count`].
pub async fn fetch(client: &http_client::Client, url: &str, timeout: Duration) -> Result<String> {
    let url = with_default_path(url);
    let r = client.get(&url, timeout).await?;
    Ok(ok_body(url, r)?.1)
}

/// [`fetch`] on the calling thread.
pub fn fetch_blocking(url: &str, timeout: Duration) -> Result<String> {
    let url = with_default_path(url);
    let r = crate::blocking::get(&url, timeout)?;
    Ok(ok_body(url, r)?.1)
}

/// The counter `name` of a fetched `body`, as a count: `None` when the endpoint has no such
/// series; an error when the series add up to no count (`url` names it).
pub fn count(
    url: &str,
    body: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Option<u64>> {
    find(body, name, labels)
        .map(|value| as_count(url, name, value))
        .transpose()
}

/// [`by_label`] of a fetched `body`, each sum as a count (`url` names the endpoint in errors).
pub fn count_by_label(
    url: &str,
    body: &str,
    name: &str,
    label: &str,
) -> Result<BTreeMap<String, u64>> {
    by_label(body, name, label)
        .into_iter()
        .map(|(value, sum)| Ok((value, as_count(url, name, sum)?)))
        .collect()
}

fn as_count(url: &str, name: &str, value: f64) -> Result<u64> {
    if !value.is_finite() || value < 0.0 {
        return Err(Error::NotACount {
            url: url.to_string(),
            name: name.to_string(),
            value,
        });
    }
    // Counters are integers carried as floats; exact up to 2^53 messages.
    Ok(value.round() as u64)
}

fn answer(
    url: String,
    r: http_client::Response,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<u64> {
    let (url, body) = ok_body(url, r)?;
    as_count(&url, name, sum(&body, name, labels))
}

/// Scrapes `url` (a bare `http://host:port` means its `/metrics`) with `client` and sums the
/// counter `name` over the series carrying `labels`. The caller's client, so that repeated
/// scrapes of one endpoint reuse its kept-alive connection.
pub async fn read(
    client: &http_client::Client,
    url: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<u64> {
    let url = with_default_path(url);
    let r = client.get(&url, timeout).await?;
    answer(url, r, name, labels)
}

/// [`read`] on the calling thread.
pub fn read_blocking(
    url: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<u64> {
    let url = with_default_path(url);
    let r = crate::blocking::get(&url, timeout)?;
    answer(url, r, name, labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn by_label_sums_series_by_one_label_and_reads_the_family_name_too() {
        let body = "# TYPE x counter
x_total{profile=\"echo\",reason=\"idle_timeout\"} 3
x_total{profile=\"sink\",reason=\"idle_timeout\"} 4
x_total{profile=\"echo\",reason=\"client\"} 5 1700000000000
x_total{profile=\"echo\"} 100
y_total{reason=\"client\"} 7
";
        let want: BTreeMap<String, f64> = [
            ("client".to_string(), 5.0),
            ("idle_timeout".to_string(), 7.0),
        ]
        .into();
        assert_eq!(by_label(body, "x_total", "reason"), want);
        assert_eq!(by_label(body, "x", "reason"), want);
        assert!(by_label(body, "z", "reason").is_empty());
        assert!(by_label(body, "x", "nope").is_empty());
    }

    #[test]
    fn sums_matching_series_and_only_those() {
        let body = "# TYPE x counter\nx{profile=\"echo\",format=\"text\"} 5\nx{profile=\"echo\",format=\"binary\"} 7\nx{profile=\"sink\",format=\"text\"} 100\nxy 3\n";
        assert_eq!(sum(body, "x", &labels(&[])), 112.0);
        assert_eq!(sum(body, "x", &labels(&[("profile", "echo")])), 12.0);
        assert_eq!(
            sum(
                body,
                "x",
                &labels(&[("profile", "echo"), ("format", "text")])
            ),
            5.0
        );
        assert_eq!(sum(body, "xy", &labels(&[])), 3.0);
        assert_eq!(sum(body, "x", &labels(&[("profile", "none")])), 0.0);
        assert_eq!(sum(body, "nothing", &labels(&[])), 0.0);
    }

    #[test]
    fn a_timestamp_after_the_value_is_not_the_value() {
        let body = "x{a=\"b\"} 5 1700000000000\nx{a=\"c\"} 2 1700000000.5\ny 7 -12\n";
        assert_eq!(sum(body, "x", &labels(&[("a", "b")])), 5.0);
        assert_eq!(sum(body, "x", &labels(&[])), 7.0);
        assert_eq!(sum(body, "y", &labels(&[])), 7.0);
    }

    #[test]
    fn escaped_quotes_commas_braces_and_backslashes_in_label_values() {
        let body = concat!(
            "x{path=\"a,b\",q=\"say \\\"hi\\\"\"} 1\n",
            "x{path=\"c:\\\\dir\\\\\",q=\"}{\"} 2\n",
            "x{path=\"line\\nbreak\" , q = \"=\" ,} 4\n",
        );
        assert_eq!(sum(body, "x", &labels(&[("path", "a,b")])), 1.0);
        assert_eq!(sum(body, "x", &labels(&[("q", "say \"hi\"")])), 1.0);
        assert_eq!(sum(body, "x", &labels(&[("path", "c:\\dir\\")])), 2.0);
        assert_eq!(sum(body, "x", &labels(&[("q", "}{")])), 2.0);
        assert_eq!(sum(body, "x", &labels(&[("path", "line\nbreak")])), 4.0);
        assert_eq!(sum(body, "x", &labels(&[("q", "=")])), 4.0);
        assert_eq!(sum(body, "x", &labels(&[])), 7.0);
        // A naive split on ',' or '=' would have seen a label `b"` here.
        assert_eq!(sum(body, "x", &labels(&[("b\"", "")])), 0.0);
    }

    #[test]
    fn special_values_and_exponents() {
        let body = "a +Inf\nb -Inf\nc NaN\nd 1.5e+06\ne 2E-3\nf{le=\"+Inf\"} 3\n";
        assert_eq!(sum(body, "a", &labels(&[])), f64::INFINITY);
        assert_eq!(sum(body, "b", &labels(&[])), f64::NEG_INFINITY);
        assert!(sum(body, "c", &labels(&[])).is_nan());
        assert_eq!(sum(body, "d", &labels(&[])), 1_500_000.0);
        assert_eq!(sum(body, "e", &labels(&[])), 0.002);
        assert_eq!(sum(body, "f", &labels(&[("le", "+Inf")])), 3.0);
    }

    #[test]
    fn histogram_buckets_add_over_series_in_bound_order() {
        let body = "h_bucket{le=\"0.5\",shard=\"0\"} 1\nh_bucket{le=\"+Inf\",shard=\"0\"} 3\n\
                    h_bucket{shard=\"1\",le=\"0.5\"} 2\nh_bucket{le=\"0.1\",shard=\"1\"} 1\n\
                    h_bucket{le=\"+Inf\",shard=\"1\"} 2\nh_count 5\nother_bucket{le=\"0.1\"} 9\n";
        assert_eq!(
            buckets(body, "h"),
            [(0.1, 1.0), (0.5, 3.0), (f64::INFINITY, 5.0)]
        );
        assert!(buckets(body, "missing").is_empty());
    }

    #[test]
    fn comments_help_type_blank_lines_and_eof() {
        let body = "# HELP x Messages, \"received\" x 9\n# TYPE x counter\n\n# x 100\n   x 1\nx 2\n# EOF\nx 1000\n";
        assert_eq!(sum(body, "x", &labels(&[])), 3.0);
    }

    #[test]
    fn openmetrics_counters_exemplars_and_total_naming() {
        let om = "# TYPE x counter\n# HELP x Received.\nx_total{a=\"b\"} 5 # {trace_id=\"abc\"} 1.0 1700000000\nx_created{a=\"b\"} 1700000000\n# EOF\n";
        // Asked for by its sample name or by its family name.
        assert_eq!(sum(om, "x_total", &labels(&[])), 5.0);
        assert_eq!(sum(om, "x", &labels(&[("a", "b")])), 5.0);
        // An old client names the counter without _total; the exact name still wins when
        // both exist, so nothing is counted twice.
        assert_eq!(sum("x 4\n", "x_total", &labels(&[])), 4.0);
        assert_eq!(sum("x 4\nx_total 6\n", "x_total", &labels(&[])), 6.0);
        assert_eq!(sum("x 4\nx_total 6\n", "x", &labels(&[])), 4.0);
    }

    #[test]
    fn malformed_lines_are_skipped_not_fatal() {
        let body = "x{a=\"b} 9\nx{a=b} 9\nx{a=\"b\"}9\nx{a=\"b\"} nine\n9x 9\nx 1\n";
        assert_eq!(sum(body, "x", &labels(&[])), 1.0);
    }

    #[test]
    fn a_bare_address_means_its_metrics_path() {
        assert_eq!(with_default_path("http://h:9090"), "http://h:9090/metrics");
        assert_eq!(with_default_path("http://h:9090/m"), "http://h:9090/m");
    }

    #[tokio::test]
    async fn reads_over_http_blocking_and_async() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let (status, body) = if request.starts_with("GET /metrics ") {
                    (
                        "200 OK",
                        "x_total{a=\"b\"} 41 1700000000000\nx_total{a=\"c\"} 1\n",
                    )
                } else {
                    ("404 Not Found", "")
                };
                let answer = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        let url = format!("http://{addr}");
        let t = Duration::from_secs(5);
        let client = http_client::Client::new();
        let got = read(&client, &url, "x_total", &labels(&[("a", "b")]), t).await;
        assert_eq!(got.expect("read"), 41);
        let blocking = {
            let url = url.clone();
            tokio::task::spawn_blocking(move || read_blocking(&url, "x", &labels(&[]), t))
                .await
                .expect("join")
        };
        assert_eq!(blocking.expect("read"), 42);
        let e = read(&client, &format!("{url}/nope"), "x", &labels(&[]), t)
            .await
            .expect_err("404");
        assert_eq!(e.to_string(), format!("GET {url}/nope: HTTP 404"));
    }
}
