//! The reference server's topic counters (docs/server.md "Topics"), read by the conductor
//! before and after each fanout cell like the received counter, so that what the servers say
//! they delivered is set beside what the subscribers received. Every counter of every replica
//! comes from one scrape of that replica, so the five figures of a reading belong together.

use crate::replicas;
use std::collections::BTreeMap;
use std::time::Duration;
use wsload_http::http_client::Client;
use wsload_http::scrape;
use wsload_report::fanout::ServerTopics;

/// How long the conductor waits, once a cell is over, for deliveries still in the servers'
/// queues to be written or dropped (see [`settled`]); past it, the reading stands as it is.
pub const SETTLE: Duration = Duration::from_secs(2);

/// The counters' names and labels, as wsload-server exposes them.
const PUBLISHED: &str = "wsload_server_topic_published_total";
const FANOUT: &str = "wsload_server_topic_fanout_total";
const DELIVERED: &str = "wsload_server_topic_delivered_total";
const DROPPED: &str = "wsload_server_topic_dropped_total";

/// The counters of one exposition (`url` names it in errors); `None` when it has no topic
/// counters (a server other than wsload-server, or one without topics).
pub fn parse(url: &str, body: &str) -> Result<Option<ServerTopics>, scrape::Error> {
    let none = BTreeMap::new();
    let reason = |r: &str| BTreeMap::from([("reason".to_string(), r.to_string())]);
    let Some(published) = scrape::count(url, body, PUBLISHED, &none)? else {
        return Ok(None);
    };
    let read = |name: &str, labels: &BTreeMap<String, String>| {
        scrape::count(url, body, name, labels).map(Option::unwrap_or_default)
    };
    Ok(Some(ServerTopics {
        published,
        fanout: read(FANOUT, &none)?,
        delivered: read(DELIVERED, &none)?,
        dropped_slow_consumer: read(DROPPED, &reason("slow_consumer"))?,
        dropped_closed: read(DROPPED, &reason("closed"))?,
    }))
}

/// Every replica's counters at `urls`, summed; `None` when one of them has none (a sum
/// missing a replica would read as loss).
pub async fn read(
    http: &Client,
    urls: &[String],
    timeout: Duration,
) -> Result<Option<ServerTopics>, scrape::Error> {
    let each = replicas::read(http, urls, timeout, parse).await?;
    Ok(each.as_deref().map(total))
}

/// [`read`] on the calling thread.
pub fn read_blocking(
    urls: &[String],
    timeout: Duration,
) -> Result<Option<ServerTopics>, scrape::Error> {
    let each = replicas::read_blocking(urls, timeout, parse)?;
    Ok(each.as_deref().map(total))
}

fn total(each: &[ServerTopics]) -> ServerTopics {
    each.iter()
        .fold(ServerTopics::default(), |total, t| sum(&total, t))
}

pub fn sum(a: &ServerTopics, b: &ServerTopics) -> ServerTopics {
    ServerTopics {
        published: a.published + b.published,
        fanout: a.fanout + b.fanout,
        delivered: a.delivered + b.delivered,
        dropped_slow_consumer: a.dropped_slow_consumer + b.dropped_slow_consumer,
        dropped_closed: a.dropped_closed + b.dropped_closed,
    }
}

/// What the counters grew by from `before` to `after` (a replica restarted in between reads
/// as 0, never as a wrapped-around count).
pub fn increase(before: &ServerTopics, after: &ServerTopics) -> ServerTopics {
    ServerTopics {
        published: after.published.saturating_sub(before.published),
        fanout: after.fanout.saturating_sub(before.fanout),
        delivered: after.delivered.saturating_sub(before.delivered),
        dropped_slow_consumer: after
            .dropped_slow_consumer
            .saturating_sub(before.dropped_slow_consumer),
        dropped_closed: after.dropped_closed.saturating_sub(before.dropped_closed),
    }
}

/// Whether every delivery owed has ended (written or dropped): nothing waits in a
/// subscriber's queue, so a later reading would add nothing of the cell's.
pub fn settled(t: &ServerTopics) -> bool {
    t.delivered + t.dropped_slow_consumer + t.dropped_closed >= t.fanout
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "# TYPE wsload_server_topic_published counter
wsload_server_topic_published_total{source=\"client\"} 10
wsload_server_topic_published_total{source=\"ticker\"} 5
wsload_server_topic_fanout_total 150
wsload_server_topic_delivered_total 140
wsload_server_topic_dropped_total{reason=\"slow_consumer\"} 7
wsload_server_topic_dropped_total{reason=\"closed\"} 3
# EOF
";

    #[test]
    fn one_scrape_gives_every_counter() {
        let t = parse("u", BODY).expect("counts").expect("topics");
        assert_eq!(
            t,
            ServerTopics {
                published: 15,
                fanout: 150,
                delivered: 140,
                dropped_slow_consumer: 7,
                dropped_closed: 3,
            }
        );
        assert!(settled(&t));
        assert_eq!(parse("u", "other_total 3\n").expect("counts"), None);
        let e = parse("u", "wsload_server_topic_published_total NaN\n").expect_err("NaN");
        assert!(e.to_string().contains("not a count"), "{e}");
    }

    #[test]
    fn a_cell_is_the_increase_and_replicas_add_up() {
        let before = ServerTopics {
            published: 5,
            fanout: 50,
            delivered: 48,
            dropped_slow_consumer: 1,
            dropped_closed: 1,
        };
        let after = parse("u", BODY).expect("counts").expect("topics");
        let cell = increase(&before, &after);
        assert_eq!((cell.published, cell.fanout, cell.delivered), (10, 100, 92));
        assert_eq!((cell.dropped_slow_consumer, cell.dropped_closed), (6, 2));
        assert_eq!(sum(&cell, &before).fanout, 150);
        let waiting = ServerTopics {
            fanout: 10,
            delivered: 9,
            ..ServerTopics::default()
        };
        assert!(!settled(&waiting));
    }
}
