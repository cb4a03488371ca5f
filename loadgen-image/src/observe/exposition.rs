//! The live counters as Prometheus metrics (`/metrics`), summed over the workers' slots at
//! each scrape; the text is prometheus-client's. They exist for dashboards while the test
//! runs: the exact figures of a result come from the workers' HDR histograms.

use crate::counters::{Counters, DROP_REASONS, FAIL_REASONS, Phase};
use crate::observe::sampler::Sampler;
use std::fmt;
use std::sync::Arc;
use wsload_http::family;
use wsload_http::prometheus_client::collector::Collector;
use wsload_http::prometheus_client::encoding::DescriptorEncoder;
use wsload_http::prometheus_client::registry::Registry;

/// Identity labels of every series.
#[derive(Debug, Clone)]
pub struct Labels {
    pub test: String,
    pub shard: u32,
    pub scenario: &'static str,
}

/// The metrics of one run or shard.
pub struct LiveMetrics {
    counters: Arc<Counters>,
    /// For the achieved rate, which it computes once a second.
    sampler: Arc<Sampler>,
    labels: Labels,
}

impl LiveMetrics {
    pub fn new(sampler: Arc<Sampler>, labels: Labels) -> LiveMetrics {
        LiveMetrics {
            counters: sampler.counters().clone(),
            sampler,
            labels,
        }
    }

    /// A registry that reads the counters at each scrape.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        registry
    }
}

impl std::fmt::Debug for LiveMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveMetrics")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// Sums the slots at scrape time; the text is prometheus-client's.
impl Collector for LiveMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let l = &self.labels;
        let shard = l.shard.to_string();
        let base = [
            ("test", l.test.as_str()),
            ("shard", shard.as_str()),
            ("scenario", l.scenario),
        ];
        let c = &self.counters;
        let snap = c.snapshot();
        let Phase { cell, target_rate } = c.phase();
        let e = &mut encoder;
        for (name, help, v) in [
            (
                "wsload_messages_sent",
                "Data messages the clients wrote.",
                snap.sent,
            ),
            (
                "wsload_messages_received",
                "Data messages the clients read.",
                snap.received,
            ),
            (
                "wsload_bytes_sent",
                "Payload bytes written.",
                snap.bytes_sent,
            ),
            (
                "wsload_bytes_received",
                "Payload bytes read.",
                snap.bytes_received,
            ),
            (
                "wsload_connections_opened",
                "Connections established.",
                snap.opened,
            ),
            (
                "wsload_messages_lost",
                "Pings or echoes never answered.",
                snap.lost,
            ),
            (
                "wsload_answers_expected",
                "Messages sent that expect an answer (pings, paced echoes).",
                snap.expected,
            ),
            (
                "wsload_reconnect_attempts",
                "Reconnect attempts begun after a drop (spec.reconnect).",
                c.reconnects().0,
            ),
            (
                "wsload_reconnects",
                "Dropped connections opened again (also counted in wsload_connections_opened).",
                c.reconnects().1,
            ),
        ] {
            family::counters(e, name, help, [(base, v)])?;
        }
        family::counters(
            e,
            "wsload_connections_failed",
            "Connection attempts that failed, by reason.",
            FAIL_REASONS
                .iter()
                .zip(c.failed_by_reason())
                .map(|(r, v)| ((base, [("reason", r.label())]), v)),
        )?;

        let closed = snap.closed;
        let dropped = c.dropped_by_reason();
        let client = closed.saturating_sub(dropped.iter().sum());
        let reasons = DROP_REASONS.iter().map(|r| r.label()).chain(["client"]);
        family::counters(
            e,
            "wsload_connections_closed",
            "Connections that ended, by reason (client = closed by wsload).",
            reasons
                .zip(dropped.into_iter().chain([client]))
                .map(|(r, v)| ((base, [("reason", r)]), v)),
        )?;

        let opened = snap.opened;
        family::gauges(
            e,
            "wsload_connections_active",
            "Connections open now.",
            [(base, opened.saturating_sub(closed))],
        )?;
        let with_cell = (base, [("cell", cell.as_str())]);
        family::gauges(
            e,
            "wsload_target_rate",
            "Messages per second the load model asks for (0: closed loop).",
            [(with_cell, target_rate)],
        )?;
        family::gauges(
            e,
            "wsload_achieved_rate",
            "Messages per second written over the last second.",
            [(with_cell, self.sampler.achieved_rate())],
        )?;

        let rtt = c.rtt_histograms();
        let connect = c.connect_histograms();
        family::histograms(
            e,
            "wsload_rtt_seconds",
            "Round-trip time of pings and echoes (from the intended send time when open-loop).",
            [(base, rtt)],
        )?;
        family::histograms(
            e,
            "wsload_connect_seconds",
            "TCP connect to ready, per connection.",
            [(base, connect)],
        )?;
        Ok(())
    }
}

/// `/metrics` of a run without the shard control protocol: the live counters, always ready.
pub struct Endpoint {
    registry: Registry,
}

impl Endpoint {
    pub fn new(exposition: &Arc<LiveMetrics>) -> Endpoint {
        Endpoint {
            registry: exposition.registry(),
        }
    }
}

impl wsload_http::Exposition for Endpoint {
    fn render(&self) -> String {
        wsload_http::encode(&self.registry)
    }
    fn ready(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use wsload_report::measure::ConnectError;

    /// An exposition over `workers` slots, its sampler, and the slots to write to.
    fn exposition(workers: usize, test: &str, shard: u32) -> (Arc<LiveMetrics>, Arc<Sampler>) {
        let sampler = Arc::new(Sampler::new(Arc::new(Counters::new(workers))));
        let labels = Labels {
            test: test.into(),
            shard,
            scenario: "throughput",
        };
        (Arc::new(LiveMetrics::new(sampler.clone(), labels)), sampler)
    }

    #[test]
    fn slots_sum_and_histograms_accumulate() {
        let (exposition, sampler) = exposition(2, "t", 0);
        let registry = exposition.registry();
        let live = sampler.counters();
        live.slot(0).sent(10, 640);
        live.slot(1).sent(5, 320);
        live.slot(0).opened(Duration::from_micros(60));
        live.slot(1).rtt(Duration::from_millis(2));
        live.slot(1).failed(ConnectError::Refused);
        let text = wsload_http::encode(&registry);
        assert!(
            text.contains(
                "wsload_messages_sent_total{test=\"t\",shard=\"0\",scenario=\"throughput\"} 15"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE wsload_messages_sent counter\n"));
        assert!(text.contains("wsload_rtt_seconds_bucket{le=\"0.002\",test=\"t\",shard=\"0\",scenario=\"throughput\"} 1"));
        assert!(text.contains("wsload_rtt_seconds_bucket{le=\"0.0015\",test=\"t\",shard=\"0\",scenario=\"throughput\"} 0"));
        assert!(text.contains("reason=\"refused\"} 1"));
        assert!(text.contains(
            "wsload_connections_active{test=\"t\",shard=\"0\",scenario=\"throughput\"} 1"
        ));
        // The first reading of the rate counts everything since the start.
        sampler.tick(Instant::now());
        assert!(wsload_http::encode(&registry).contains(
            "wsload_achieved_rate{test=\"t\",shard=\"0\",scenario=\"throughput\",cell=\"\"} 15.0\n"
        ));
    }

    /// The reasons a broken server gets are series of their own.
    #[test]
    fn every_failure_reason_is_a_series() {
        let (exposition, sampler) = exposition(1, "t", 0);
        let live = sampler.counters();
        live.slot(0).failed(ConnectError::UpgradeInvalid);
        live.slot(0)
            .dropped(wsload_report::measure::Dropped::ProtocolError);
        live.slot(0)
            .dropped(wsload_report::measure::Dropped::ServerNotReading);
        live.slot(0)
            .dropped(wsload_report::measure::Dropped::ReplyLoop);
        let text = wsload_http::encode(&exposition.registry());
        for series in [
            "reason=\"upgrade_invalid\"} 1",
            "reason=\"protocol_error\"} 1",
            "reason=\"server_not_reading\"} 1",
            "reason=\"reply_loop\"} 1",
            "reason=\"message_too_big\"} 0",
        ] {
            assert!(text.contains(series), "{series}: {text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let name = "say \"hi\" \\ twice\nand again";
        let (exposition, sampler) = exposition(1, name, 3);
        let live = sampler.counters();
        live.set_phase("a\"b", 1.0);
        live.slot(0).sent(7, 0);
        let text = wsload_http::encode(&exposition.registry());
        assert!(
            text.contains(r#"wsload_messages_sent_total{test="say \"hi\" \\ twice\nand again",shard="3",scenario="throughput"} 7"#),
            "{text}"
        );
        assert!(text.contains(r#",cell="a\"b"} 1.0"#), "{text}");
        // Our own scrape parser reads the value back under the unescaped name.
        let labels = [("test".to_string(), name.to_string())].into();
        assert_eq!(
            wsload_http::scrape::sum(&text, "wsload_messages_sent_total", &labels),
            7.0
        );
    }
}
