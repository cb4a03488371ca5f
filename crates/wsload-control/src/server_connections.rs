//! The reference server's connection counters (`wsload_contract::server_metrics`), read by the
//! conductor from every replica before the first cell and after each one, so that the report
//! can say, beside what the clients saw, what each server replica did with their connections.

use crate::replicas;
use std::time::Duration;
use wsload_contract::server_metrics as metric;
use wsload_http::http_client::Client;
use wsload_http::scrape;
use wsload_report::server_connections::ReplicaConnections;

/// The counters of one replica's exposition (`url` names it); `None` when it has none (a
/// server other than wsload-server).
pub fn parse(url: &str, body: &str) -> Result<Option<ReplicaConnections>, scrape::Error> {
    let Some(accepted) =
        scrape::count(url, body, metric::CONNECTIONS_ACCEPTED, &Default::default())?
    else {
        return Ok(None);
    };
    Ok(Some(ReplicaConnections {
        replica: url.to_string(),
        accepted,
        rejected: scrape::count_by_label(url, body, metric::CONNECTIONS_REJECTED, metric::REASON)?,
        closed: scrape::count_by_label(url, body, metric::CONNECTIONS_CLOSED, metric::REASON)?,
    }))
}

/// Every replica's counters at `urls`, those that have them. A replica that cannot be
/// scraped fails the reading: a missing one would read as a quiet replica.
pub async fn read(
    http: &Client,
    urls: &[String],
    timeout: Duration,
) -> Result<Vec<ReplicaConnections>, scrape::Error> {
    // A replica without the counters is left out (`Some(None)`), not the end of the reading.
    let each = replicas::read(http, urls, timeout, |url, body| parse(url, body).map(Some)).await?;
    Ok(each.into_iter().flatten().flatten().collect())
}

/// [`read`] on the calling thread.
pub fn read_blocking(
    urls: &[String],
    timeout: Duration,
) -> Result<Vec<ReplicaConnections>, scrape::Error> {
    let each = replicas::read_blocking(urls, timeout, |url, body| parse(url, body).map(Some))?;
    Ok(each.into_iter().flatten().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_accepted_and_each_reason_as_wsload_server_exposes_them() {
        let body = "# TYPE wsload_server_connections_accepted counter
wsload_server_connections_accepted_total{profile=\"echo\"} 90
wsload_server_connections_accepted_total{profile=\"sink\"} 10
wsload_server_connections_rejected_total{reason=\"capacity\"} 0
wsload_server_connections_rejected_total{reason=\"handshake_timeout\"} 7
wsload_server_connections_closed_total{profile=\"echo\",reason=\"idle_timeout\"} 3
wsload_server_connections_closed_total{profile=\"sink\",reason=\"idle_timeout\"} 2
wsload_server_connections_closed_total{profile=\"echo\",reason=\"client\"} 40
# EOF
";
        let r = parse("http://a/metrics", body)
            .expect("parses")
            .expect("has the counters");
        assert_eq!(r.replica, "http://a/metrics");
        assert_eq!(r.accepted, 100);
        assert_eq!(r.rejected_for("handshake_timeout"), 7);
        assert_eq!(r.rejected_for("capacity"), 0);
        assert_eq!(r.closed_for("idle_timeout"), 5);
        assert_eq!(r.closed_for("client"), 40);
    }

    #[test]
    fn a_server_without_them_has_none_and_a_broken_count_is_an_error() {
        assert_eq!(parse("u", "other_total 5\n").expect("parses"), None);
        let broken = "wsload_server_connections_accepted_total 1
wsload_server_connections_closed_total{reason=\"client\"} NaN
";
        assert!(parse("u", broken).is_err());
    }
}
