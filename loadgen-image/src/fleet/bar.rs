//! The terminal bar of `wsload run` over several shard processes: the cell the conductor has
//! released and its place, and the shards' live counters summed from their `/metrics`, once a
//! second. The same bar as a single process draws (crate::observe::progress), fed from outside.

use crate::counters::{Course, Place, Snapshot};
use crate::observe::progress::{Outline, Progress};
use futures_util::future::join_all;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use wsload_control::CellKey;
use wsload_http::buckets;
use wsload_http::scrape;

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
    /// A bar of `outline` when stderr is a terminal and one is wanted (`Some`); `None`
    /// otherwise. `urls`: each shard's `/metrics`. Called inside the conductor's runtime.
    pub fn new(outline: Option<Outline>, urls: Vec<String>) -> Option<FleetBar> {
        let outline = outline.filter(|_| std::io::stderr().is_terminal())?;
        // Ctrl-C takes the bar away first (the shards got the terminal's SIGINT too, and die
        // with their parent anyway).
        tokio::spawn(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                crate::observe::terminal::exit_interrupted();
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
            cell: Some(Place {
                index: key.index as usize,
                label: key.label.clone(),
                connections: key.connections,
            }),
            begun: Some(at),
            ..Course::default()
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
        if let Some(Place { connections, .. }) = &self.course.cell
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
    let mut rtt = buckets::EMPTY;
    for b in bodies {
        let counts = buckets::from_cumulative(&scrape::buckets(b, "wsload_rtt_seconds"));
        buckets::add(&mut rtt, &counts);
    }
    Snapshot {
        opened,
        closed: total("wsload_connections_closed_total"),
        failed: total("wsload_connections_failed_total"),
        sent: total("wsload_messages_sent_total"),
        received: total("wsload_messages_received_total"),
        bytes_sent: total("wsload_bytes_sent_total"),
        bytes_received: total("wsload_bytes_received_total"),
        expected: total("wsload_answers_expected_total"),
        lost: total("wsload_messages_lost_total"),
        rtt,
    }
}

/// "starting shards: 37/50" while the shard processes start one by one (each announces its
/// endpoint before the next starts); on a terminal only. Dropping it takes it away.
pub struct StartBar(indicatif::ProgressBar);

impl StartBar {
    /// A bar when stderr is a terminal and `wanted`; `None` otherwise (quiet on a pipe).
    pub fn new(shards: u32, wanted: bool) -> Option<StartBar> {
        if !wanted || !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(u64::from(shards)),
            indicatif::ProgressDrawTarget::stderr(),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template("starting shards: {pos}/{len}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        // The shards' own lines go above it.
        crate::observe::terminal::show(bar.clone());
        Some(StartBar(bar))
    }

    /// `n` shards have started.
    pub fn started(&self, n: u32) {
        self.0.set_position(u64::from(n));
    }
}

impl Drop for StartBar {
    fn drop(&mut self) {
        crate::observe::terminal::hide();
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_http::buckets::{BUCKETS, LATENCY_BUCKETS};

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
    fn no_histogram_means_no_round_trips() {}
}
