//! The server's own publisher: `--ticker-rate` messages per second to each of the topics
//! `t0..tN-1`, on an open-loop schedule. Tick k (from 0) is due at `start + k / rate`; its
//! messages carry `seq` k + 1 and, as `ts`, that intended instant on the Unix clock, whenever
//! they actually go out. A ticker that falls behind publishes the overdue ticks at once, each
//! with its own instant, so a subscriber's latency from `ts` includes the ticker's delay
//! instead of hiding it.

use super::counters::Source;
use super::registry::Registry;
use crate::config::Ticker;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use wsload_proto::pubsub;

/// Ticks published per wake-up at most, so that a ticker far behind still yields.
const MAX_CATCH_UP: u64 = 1024;

/// When each tick is due, on the monotonic clock and on the Unix one.
struct Schedule {
    start: Instant,
    start_unix_us: u64,
    period_ns: f64,
}

impl Schedule {
    fn new(rate: f64) -> Self {
        let start_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        Schedule {
            start: Instant::now(),
            start_unix_us,
            period_ns: 1e9 / rate,
        }
    }

    /// From the start to tick `k`, computed from `k` (never summed) so that it never drifts.
    fn offset_ns(&self, k: u64) -> u64 {
        (k as f64 * self.period_ns).round() as u64
    }

    fn instant(&self, k: u64) -> Instant {
        self.start + Duration::from_nanos(self.offset_ns(k))
    }

    fn unix_micros(&self, k: u64) -> u64 {
        self.start_unix_us + self.offset_ns(k) / 1000
    }
}

/// Publishes until `shutdown`.
pub async fn run(registry: &Registry, ticker: Ticker, shutdown: CancellationToken) {
    let names: Vec<String> = (0..ticker.topics).map(|k| format!("t{k}")).collect();
    let pad = "x".repeat(ticker.payload_size);
    let schedule = Schedule::new(ticker.rate);
    let mut k: u64 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(schedule.instant(k)) => {}
        }
        let now = Instant::now();
        let mut done = 0;
        while done < MAX_CATCH_UP && schedule.instant(k) <= now {
            let ts = schedule.unix_micros(k);
            for name in &names {
                let msg = Message::Text(pubsub::tick(name, k + 1, ts, &pad).into());
                registry.publish(name, &msg, Source::Ticker);
            }
            k += 1;
            done += 1;
        }
        if done == MAX_CATCH_UP {
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_computed_not_accumulated() {
        let s = Schedule::new(1000.0);
        assert_eq!(s.unix_micros(0), s.start_unix_us);
        assert_eq!(s.unix_micros(7) - s.unix_micros(6), 1000);
        assert_eq!(s.unix_micros(1_000_000) - s.start_unix_us, 1_000_000_000);
        let third = Schedule::new(3.0);
        assert_eq!(third.offset_ns(3), 1_000_000_000);
        assert_eq!(
            third.instant(30).duration_since(third.start),
            Duration::from_secs(10)
        );
    }
}
