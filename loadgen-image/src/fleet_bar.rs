//! The terminal bar of `wsload run` over several shard processes: the cell the conductor has
//! released and its place, and the shards' live counters summed from their `/metrics`, once a
//! second. The same bar as a single process draws (crate::progress), fed from outside.

use crate::plan::Shard;
use crate::plot::BUCKETS;
use crate::progress::{Course, Outline, Progress, Snapshot};
use futures_util::future::join_all;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use wsload_control::CellKey;
use wsload_http::LATENCY_BUCKETS;
use wsload_http::scrape;
use wsload_spec::LoadTest;

/// A scrape slower than this is skipped: the bar waits for the next second.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(500);

/// The conductor's side of the bar, which draws from a task of its own: the scrapes never
/// delay the conductor's barrier checks. Dropping it takes the bar away.
pub struct FleetBar {
    released: watch::Sender<Option<(CellKey, Instant)>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the drawing task keeps between seconds.
struct Drawn {
    progress: Progress,
    /// Each shard's `/metrics`.
    urls: Vec<String>,
    course: Course,
    /// Counters when the running cell was released, and the last reading.
    base: Snapshot,
    cur: Snapshot,
}

impl FleetBar {
    /// A bar when stderr is a terminal and `wanted`; `None` otherwise. `urls`: each shard's
    /// `/metrics`. Called inside the conductor's runtime.
    pub fn new(lt: &LoadTest, urls: Vec<String>, wanted: bool) -> Option<FleetBar> {
        if !wanted || !std::io::stderr().is_terminal() {
            return None;
        }
        // Cell lengths from the largest share (shard 0's): the shards connect theirs at once.
        let outline = Outline::new(
            &lt.spec,
            Shard {
                index: 0,
                count: lt.spec.shards,
            },
        );
        // Ctrl-C takes the bar away first (the shards got the terminal's SIGINT too, and die
        // with their parent anyway).
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                crate::progress::exit_interrupted();
            }
        });
        let (released, mut cells) = watch::channel(None);
        let mut drawn = Drawn {
            progress: Progress::new(outline),
            urls,
            course: Course::default(),
            base: Snapshot::default(),
            cur: Snapshot::default(),
        };
        let task = tokio::spawn(async move {
            let mut second = tokio::time::interval(Duration::from_secs(1));
            second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = second.tick() => drawn.tick().await,
                    changed = cells.changed() => {
                        if changed.is_err() {
                            // The conductor is done: dropping `drawn` takes the bar away.
                            return;
                        }
                        if let Some((key, at)) = cells.borrow_and_update().clone() {
                            drawn.released(&key, at);
                        }
                    }
                }
            }
        });
        Some(FleetBar { released, task })
    }

    /// The conductor released `key`'s cell to every shard.
    pub fn released(&self, key: &CellKey) {
        self.released
            .send_replace(Some((key.clone(), Instant::now())));
    }

    /// Takes the bar away before the report is printed.
    pub async fn finish(self) {
        let FleetBar { released, task } = self;
        drop(released);
        let _ = task.await;
    }
}

impl Drawn {
    fn released(&mut self, key: &CellKey, at: Instant) {
        self.course = Course {
            cell: Some((key.index as usize, key.label.clone(), key.connections)),
            begun: Some(at),
            measuring: None,
            ended: false,
        };
        self.base = self.cur;
    }

    /// Redraws from the shards' counters read now.
    async fn tick(&mut self) {
        let bodies = join_all(self.urls.iter().map(|u| async move {
            wsload_http::http_client::get(u, SCRAPE_TIMEOUT)
                .await
                .ok()
                .filter(|r| r.status == 200)
                .map(|r| r.body)
        }))
        .await;
        let bodies: Vec<String> = bodies.into_iter().flatten().collect();
        if bodies.is_empty() {
            return;
        }
        self.cur = snapshot(&bodies);
        if let Some((_, _, connections)) = &self.course.cell
            && self.course.measuring.is_none()
            && self.cur.opened.saturating_sub(self.base.opened) >= u64::from(*connections)
        {
            // Every connection of the cell is open: the shards are past their connect phase.
            self.course.measuring = Some(Instant::now());
        }
        let base = self.base;
        self.progress
            .draw_with(self.course.clone(), self.cur, move || base);
    }
}

/// The shards' counters summed, as one process's [`Snapshot`].
fn snapshot(bodies: &[String]) -> Snapshot {
    let all = Default::default();
    let total = |name: &str| -> u64 {
        bodies
            .iter()
            .map(|b| scrape::sum(b, name, &all))
            .filter(|v| v.is_finite() && *v >= 0.0)
            .sum::<f64>() as u64
    };
    let opened = total("wsload_connections_opened_total");
    let mut rtt = [0u64; BUCKETS];
    for b in bodies {
        for (i, n) in per_bucket(&scrape::buckets(b, "wsload_rtt_seconds"))
            .into_iter()
            .enumerate()
        {
            rtt[i] += n;
        }
    }
    Snapshot {
        opened,
        closed: total("wsload_connections_closed_total"),
        failed: total("wsload_connections_failed_total"),
        sent: total("wsload_messages_sent_total"),
        received: total("wsload_messages_received_total"),
        expected: total("wsload_answers_expected_total"),
        lost: total("wsload_messages_lost_total"),
        rtt,
    }
}

/// Cumulative `(le, count)` buckets over [`LATENCY_BUCKETS`] as per-bucket counts, the last
/// one past the largest bound (as `Live` keeps them).
fn per_bucket(cumulative: &[(f64, f64)]) -> [u64; BUCKETS] {
    let mut out = [0u64; BUCKETS];
    let at = |bound: f64| {
        cumulative
            .iter()
            .find(|(le, _)| (le - bound).abs() <= bound * 1e-9)
            .map_or(0.0, |(_, n)| *n)
    };
    let mut below = 0.0;
    for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
        let upto = at(*bound).max(below);
        out[i] = (upto - below) as u64;
        below = upto;
    }
    let all = cumulative
        .iter()
        .find(|(le, _)| le.is_infinite())
        .map_or(below, |(_, n)| *n);
    out[BUCKETS - 1] = (all - below).max(0.0) as u64;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_shards_counters_add_and_their_buckets_become_per_bucket_counts() {
        let shard = |sent: u64, under_1ms: u64, over: u64| {
            let mut b = format!(
                "wsload_messages_sent_total{{shard=\"0\"}} {sent}\nwsload_connections_opened_total 10\n\
                 wsload_answers_expected_total 7\n"
            );
            let mut cum = 0;
            for le in LATENCY_BUCKETS {
                if (le - 0.001).abs() < 1e-12 {
                    cum += under_1ms;
                }
                b.push_str(&format!(
                    "wsload_rtt_seconds_bucket{{le=\"{le:?}\"}} {cum}\n"
                ));
            }
            b.push_str(&format!(
                "wsload_rtt_seconds_bucket{{le=\"+Inf\"}} {}\n",
                cum + over
            ));
            b
        };
        let s = snapshot(&[shard(5, 3, 1), shard(6, 2, 0)]);
        assert_eq!((s.sent, s.opened, s.expected), (11, 20, 14));
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| (b - 0.001).abs() < 1e-12)
            .expect("a 1 ms bound");
        assert_eq!(s.rtt[i], 5);
        assert_eq!(s.rtt[BUCKETS - 1], 1);
        assert_eq!(s.rtt.iter().sum::<u64>(), 6);
    }

    #[test]
    fn no_histogram_means_no_round_trips() {
        assert_eq!(per_bucket(&[]), [0; BUCKETS]);
    }
}
