//! Live Prometheus metrics of a running shard (`/metrics`).
//!
//! Each worker thread owns one cache-line-aligned slot of atomics, so updates never contend;
//! a scrape sums the slots. The exact figures of the report come from the per-worker HDR
//! histograms; these exist for dashboards while the test runs.

use crate::measure::{ConnectError, Drop};
use crate::plot::{self, BUCKETS, Sample, Timeline, Totals};
use crate::progress::{Course, Snapshot};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wsload_http::prometheus_client::collector::Collector;
use wsload_http::prometheus_client::encoding::DescriptorEncoder;
use wsload_http::prometheus_client::registry::Registry;
use wsload_http::{AtomicHistogram, family};
use wsload_report::timeline::{self, Recorder, Sample as CellSample, Totals as CellTotals};

/// How often the running cell's report timeline is sampled: a burst of pings measured for half
/// a second still gets a few points.
pub const CELL_STEP: Duration = Duration::from_millis(timeline::FINEST_STEP_MS as u64);

const FAIL_REASONS: [ConnectError; 9] = [
    ConnectError::Refused,
    ConnectError::Timeout,
    ConnectError::FileLimit,
    ConnectError::NoPorts,
    ConnectError::UpgradeRejected,
    ConnectError::ClosedEarly,
    ConnectError::AuthFailed,
    ConnectError::Tls,
    ConnectError::Other,
];
const DROP_REASONS: [Drop; 4] = [
    Drop::ServerClose,
    Drop::Reset,
    Drop::Error,
    Drop::PingTimeout,
];

#[repr(align(128))]
pub struct Slot {
    sent: AtomicU64,
    received: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    opened: AtomicU64,
    failed: [AtomicU64; FAIL_REASONS.len()],
    dropped: [AtomicU64; DROP_REASONS.len()],
    closed: AtomicU64,
    /// Pings (and echoed or paced messages) written that expect an answer.
    expected: AtomicU64,
    lost: AtomicU64,
    rtt: AtomicHistogram,
    connect: AtomicHistogram,
}

impl Slot {
    fn new() -> Self {
        Slot {
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            failed: std::array::from_fn(|_| AtomicU64::new(0)),
            dropped: std::array::from_fn(|_| AtomicU64::new(0)),
            closed: AtomicU64::new(0),
            expected: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            rtt: AtomicHistogram::default(),
            connect: AtomicHistogram::default(),
        }
    }
    #[inline]
    pub fn sent(&self, n: u64, bytes: u64) {
        self.sent.fetch_add(n, Relaxed);
        self.bytes_sent.fetch_add(bytes, Relaxed);
    }
    #[inline]
    pub fn received(&self, n: u64, bytes: u64) {
        self.received.fetch_add(n, Relaxed);
        self.bytes_received.fetch_add(bytes, Relaxed);
    }
    pub fn opened(&self, connect: Duration) {
        self.opened.fetch_add(1, Relaxed);
        self.connect.observe(connect);
    }
    pub fn failed(&self, why: ConnectError) {
        if let Some(i) = FAIL_REASONS.iter().position(|r| *r == why) {
            self.failed[i].fetch_add(1, Relaxed);
        }
    }
    pub fn dropped(&self, why: Drop) {
        if let Some(i) = DROP_REASONS.iter().position(|r| *r == why) {
            self.dropped[i].fetch_add(1, Relaxed);
        }
    }
    pub fn closed(&self) {
        self.closed.fetch_add(1, Relaxed);
    }
    #[inline]
    pub fn expected(&self, n: u64) {
        self.expected.fetch_add(n, Relaxed);
    }
    pub fn lost(&self, n: u64) {
        self.lost.fetch_add(n, Relaxed);
    }
    #[inline]
    pub fn rtt(&self, d: Duration) {
        self.rtt.observe(d);
    }
}

/// Identity labels of every series.
#[derive(Debug, Clone)]
pub struct Labels {
    pub test: String,
    pub shard: u32,
    pub scenario: &'static str,
}

pub struct Live {
    slots: Box<[Slot]>,
    labels: Labels,
    /// Current cell label and target rate (msg/s, 0 when closed-loop).
    phase: Mutex<(String, f64)>,
    /// Achieved send rate over the last second, updated by `tick`.
    achieved: AtomicU64,
    last_sent: AtomicU64,
    /// Per-second samples for `--plot`, taken by `tick` (never per message).
    timeline: Mutex<Timeline>,
    /// Where the running cell is, and the counters when it began: for the terminal's bar.
    course: Mutex<(Course, Snapshot)>,
    /// The running cell's samples for its result (the report's throughput over time), taken
    /// by `sample_cell` every step once its measured phase has begun.
    cell_samples: Mutex<Option<CellSamples>>,
    /// Wakes the sampler when a cell's measured phase gets its start instant, so that its
    /// timeline starts then rather than at the next step.
    cell_armed: tokio::sync::Notify,
}

/// One cell's report timeline in the making.
struct CellSamples {
    /// When the measured phase begins (after the warm-up).
    from: Instant,
    /// Started by the first reading at or past `from` (the sampler wakes at `from`), with the
    /// totals read then.
    recorder: Option<(Instant, Recorder)>,
    /// The round-trip bucket counts at the last reading: each step's p99 is of its own.
    rtt_before: [u64; BUCKETS],
}

impl Live {
    pub fn new(workers: usize, labels: Labels) -> Live {
        Live {
            slots: (0..workers.max(1)).map(|_| Slot::new()).collect(),
            labels,
            phase: Mutex::new((String::new(), 0.0)),
            achieved: AtomicU64::new(0),
            last_sent: AtomicU64::new(0),
            timeline: Mutex::new(Timeline::default()),
            course: Mutex::new((Course::default(), Snapshot::default())),
            cell_samples: Mutex::new(None),
            cell_armed: tokio::sync::Notify::new(),
        }
    }

    pub fn slot(&self, worker: usize) -> &Slot {
        &self.slots[worker % self.slots.len()]
    }

    pub fn set_phase(&self, cell: &str, target_rate: f64) {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) =
            (cell.to_string(), target_rate);
    }

    fn sum(&self, f: impl Fn(&Slot) -> u64) -> u64 {
        self.slots.iter().map(f).sum()
    }

    /// Called once a second: turns the sent counter into the achieved-rate gauge.
    pub fn tick(&self, interval: Duration) {
        let sent = self.sum(|s| s.sent.load(Relaxed));
        let before = self.last_sent.swap(sent, Relaxed);
        let rate = (sent.saturating_sub(before)) as f64 / interval.as_secs_f64();
        self.achieved.store(rate.to_bits(), Relaxed);
        self.sample(sent);
    }

    /// The running cell's totals as its report timeline counts them, and its round-trip
    /// bucket counts.
    fn cell_totals(&self) -> (CellTotals, [u64; BUCKETS]) {
        let snap = self.snapshot();
        // Only pingers count expected answers: other scenarios' round trips are echoes.
        let pinged = snap.expected > 0;
        let totals = CellTotals {
            sent: snap.sent,
            received: snap.received,
            open: snap.opened.saturating_sub(snap.closed),
            pings_answered: if pinged { snap.rtt.iter().sum() } else { 0 },
            pings_lost: if pinged { snap.lost } else { 0 },
        };
        (totals, snap.rtt)
    }

    /// One step ([`CELL_STEP`]) of the running cell's measured phase, once it has begun.
    pub fn sample_cell(&self, now: Instant) {
        let mut guard = self
            .cell_samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(cell) = guard.as_mut() else {
            return;
        };
        if now < cell.from {
            return;
        }
        let (totals, rtt) = self.cell_totals();
        let before = std::mem::replace(&mut cell.rtt_before, rtt);
        match &mut cell.recorder {
            None => {
                cell.recorder = Some((now, Recorder::new(totals, timeline::FINEST_STEP_MS)));
            }
            Some((begun, recorder)) => {
                // The step ending now, counted from the first reading.
                let steps = (now.saturating_duration_since(*begun).as_secs_f64()
                    / CELL_STEP.as_secs_f64())
                .round();
                let at = u32::try_from((steps as u64).saturating_sub(1)).unwrap_or(u32::MAX);
                let p99_us = plot::quantile(0.99, &plot::since(&rtt, &before))
                    .map(|s| (s * 1e6).round() as u64);
                recorder.tick(at, totals, p99_us);
            }
        }
    }

    /// When the running cell's timeline is to start, while it has not: the sampler's next
    /// wake-up, so that the first step is a whole one from the start of the measured phase.
    pub fn cell_start_pending(&self) -> Option<Instant> {
        self.cell_samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|c| c.recorder.is_none())
            .map(|c| c.from)
    }

    /// Resolves when a cell's measured phase got its start instant (`cell_start_pending`).
    pub async fn cell_armed(&self) {
        self.cell_armed.notified().await;
    }

    /// The running cell's samples and their step (ms), ending its timeline.
    pub fn take_cell_samples(&self) -> (u32, Vec<CellSample>) {
        self.cell_samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .and_then(|c| c.recorder)
            .map_or((timeline::FINEST_STEP_MS, Vec::new()), |(_, r)| r.finish())
    }

    /// One point of the run's timeline: the sums the scrape would show, once a second.
    fn sample(&self, sent: u64) {
        let mut rtt = [0u64; BUCKETS];
        for s in self.slots.iter() {
            s.rtt.add_counts_to(&mut rtt);
        }
        let totals = Totals {
            sent,
            received: self.sum(|s| s.received.load(Relaxed)),
            rtt,
        };
        let target = self.phase.lock().unwrap_or_else(PoisonError::into_inner).1;
        let active = self
            .sum(|s| s.opened.load(Relaxed))
            .saturating_sub(self.sum(|s| s.closed.load(Relaxed)));
        self.timeline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(Instant::now(), totals, target, active);
    }

    /// The run's per-second samples so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.timeline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .samples()
            .to_vec()
    }

    /// The counters summed now, for the terminal's bar.
    pub fn snapshot(&self) -> Snapshot {
        let mut rtt = [0u64; BUCKETS];
        for s in self.slots.iter() {
            s.rtt.add_counts_to(&mut rtt);
        }
        Snapshot {
            opened: self.sum(|s| s.opened.load(Relaxed)),
            closed: self.sum(|s| s.closed.load(Relaxed)),
            failed: self.sum(|s| s.failed.iter().map(|f| f.load(Relaxed)).sum()),
            sent: self.sum(|s| s.sent.load(Relaxed)),
            received: self.sum(|s| s.received.load(Relaxed)),
            expected: self.sum(|s| s.expected.load(Relaxed)),
            lost: self.sum(|s| s.lost.load(Relaxed)),
            rtt,
        }
    }

    fn course_mut<R>(&self, f: impl FnOnce(&mut (Course, Snapshot)) -> R) -> R {
        f(&mut self.course.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The `index`-th cell of the run begins: `connections` over the whole test.
    pub fn begin_cell(&self, index: usize, label: &str, connections: u32) {
        let base = self.snapshot();
        self.course_mut(|c| {
            *c = (
                Course {
                    cell: Some((index, label.to_string(), connections)),
                    begun: Some(Instant::now()),
                    measuring: None,
                    ended: false,
                },
                base,
            )
        });
    }

    /// The running cell's connections are open: its warm-up begins at `at`, its measured
    /// phase `warmup` later.
    pub fn measuring(&self, at: Instant, warmup: Duration) {
        self.course_mut(|c| c.0.measuring = Some(at));
        *self
            .cell_samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(CellSamples {
            from: at + warmup,
            recorder: None,
            rtt_before: [0; BUCKETS],
        });
        self.cell_armed.notify_one();
    }

    /// The running cell's connections are done.
    pub fn end_cell(&self) {
        self.course_mut(|c| c.0.ended = true);
    }

    /// Where the running cell is.
    pub fn course(&self) -> Course {
        self.course_mut(|c| c.0.clone())
    }

    /// The counters when the running cell began.
    pub fn course_base(&self) -> Snapshot {
        self.course_mut(|c| c.1)
    }

    /// A registry that reads these counters at each scrape.
    pub fn registry(self: &Arc<Self>) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        registry
    }
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// Sums the slots at scrape time; the text is prometheus-client's.
impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let l = &self.labels;
        let shard = l.shard.to_string();
        let base = [
            ("test", l.test.as_str()),
            ("shard", shard.as_str()),
            ("scenario", l.scenario),
        ];
        let (cell, target) = self
            .phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let e = &mut encoder;
        for (name, help, v) in [
            (
                "wsload_messages_sent",
                "Data messages the clients wrote.",
                self.sum(|s| s.sent.load(Relaxed)),
            ),
            (
                "wsload_messages_received",
                "Data messages the clients read.",
                self.sum(|s| s.received.load(Relaxed)),
            ),
            (
                "wsload_bytes_sent",
                "Payload bytes written.",
                self.sum(|s| s.bytes_sent.load(Relaxed)),
            ),
            (
                "wsload_bytes_received",
                "Payload bytes read.",
                self.sum(|s| s.bytes_received.load(Relaxed)),
            ),
            (
                "wsload_connections_opened",
                "Connections established.",
                self.sum(|s| s.opened.load(Relaxed)),
            ),
            (
                "wsload_messages_lost",
                "Pings or echoes never answered.",
                self.sum(|s| s.lost.load(Relaxed)),
            ),
            (
                "wsload_answers_expected",
                "Messages sent that expect an answer (pings, paced echoes).",
                self.sum(|s| s.expected.load(Relaxed)),
            ),
        ] {
            family::counters(e, name, help, [(base, v)])?;
        }
        family::counters(
            e,
            "wsload_connections_failed",
            "Connection attempts that failed, by reason.",
            FAIL_REASONS.iter().enumerate().map(|(i, r)| {
                let v = self.sum(|s| s.failed[i].load(Relaxed));
                ((base, [("reason", r.label())]), v)
            }),
        )?;

        let closed = self.sum(|s| s.closed.load(Relaxed));
        let dropped: [u64; DROP_REASONS.len()] =
            std::array::from_fn(|i| self.sum(|s| s.dropped[i].load(Relaxed)));
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

        let opened = self.sum(|s| s.opened.load(Relaxed));
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
            [(with_cell, target)],
        )?;
        family::gauges(
            e,
            "wsload_achieved_rate",
            "Messages per second written over the last second.",
            [(with_cell, f64::from_bits(self.achieved.load(Relaxed)))],
        )?;

        let rtt: Vec<&AtomicHistogram> = self.slots.iter().map(|s| &s.rtt).collect();
        let connect: Vec<&AtomicHistogram> = self.slots.iter().map(|s| &s.connect).collect();
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
    pub fn new(live: &Arc<Live>) -> Endpoint {
        Endpoint {
            registry: live.registry(),
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

    #[test]
    fn slots_sum_and_histograms_accumulate() {
        let live = Arc::new(Live::new(
            2,
            Labels {
                test: "t".into(),
                shard: 0,
                scenario: "throughput",
            },
        ));
        let registry = live.registry();
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
        live.tick(Duration::from_secs(1));
        assert!(wsload_http::encode(&registry).contains(
            "wsload_achieved_rate{test=\"t\",shard=\"0\",scenario=\"throughput\",cell=\"\"} 15.0\n"
        ));
    }

    #[test]
    fn label_values_are_escaped() {
        let name = "say \"hi\" \\ twice\nand again";
        let live = Arc::new(Live::new(
            1,
            Labels {
                test: name.into(),
                shard: 3,
                scenario: "throughput",
            },
        ));
        live.set_phase("a\"b", 1.0);
        live.slot(0).sent(7, 0);
        let text = wsload_http::encode(&live.registry());
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

    #[test]
    fn a_cells_timeline_is_sampled_in_steps_from_its_measured_phase() {
        let live = Live::new(
            1,
            Labels {
                test: "t".into(),
                shard: 0,
                scenario: "throughput",
            },
        );
        let t0 = Instant::now();
        live.begin_cell(0, "10", 10);
        assert_eq!(live.cell_start_pending(), None, "no measured phase yet");
        live.measuring(t0, CELL_STEP);
        // The sampler is told when the measured phase begins, to wake then.
        assert_eq!(live.cell_start_pending(), Some(t0 + CELL_STEP));
        live.slot(0).sent(500, 0);
        // In the warm-up: not the cell's, nor is a slow round trip then.
        live.sample_cell(t0 + CELL_STEP / 2);
        live.slot(0).rtt(Duration::from_millis(900));
        // The first reading past it starts the timeline; each step after adds a sample.
        live.sample_cell(t0 + CELL_STEP * 11 / 10);
        assert_eq!(live.cell_start_pending(), None, "started");
        for step in 1..=3u32 {
            live.slot(0).sent(10 * u64::from(step), 0);
            if step != 2 {
                live.slot(0).rtt(Duration::from_millis(u64::from(2 * step)));
            }
            live.sample_cell(t0 + CELL_STEP * (10 * step + 11) / 10);
        }
        let (step_ms, samples) = live.take_cell_samples();
        assert_eq!(Duration::from_millis(u64::from(step_ms)), CELL_STEP);
        let got: Vec<(u32, u64)> = samples.iter().map(|s| (s.at, s.sent)).collect();
        assert_eq!(got, vec![(0, 10), (1, 20), (2, 30)]);
        // Each step's p99 is of its own round trips (2 ms, none, 6 ms), within their bucket.
        let p99: Vec<Option<u64>> = samples.iter().map(|s| s.p99_us).collect();
        assert!(
            matches!(p99[0], Some(us) if (1_000..=2_000).contains(&us)),
            "{p99:?}"
        );
        assert_eq!(p99[1], None);
        assert!(
            matches!(p99[2], Some(us) if (5_000..=10_000).contains(&us)),
            "{p99:?}"
        );
        // Taken: the next cell starts afresh.
        assert!(live.take_cell_samples().1.is_empty());
    }

    #[test]
    fn ticks_keep_a_timeline_of_the_slots() {
        let live = Live::new(
            2,
            Labels {
                test: "t".into(),
                shard: 0,
                scenario: "constantRate",
            },
        );
        live.set_phase("10", 500.0);
        live.tick(Duration::from_secs(1));
        assert!(
            live.samples().is_empty(),
            "the first tick only takes the sums"
        );
        live.slot(0).sent(30, 0);
        live.slot(1).received(20, 0);
        // 1.2 ms on both workers' histograms: p50 lies in the (1 ms, 1.5 ms] bucket.
        live.slot(0).rtt(Duration::from_micros(1200));
        live.slot(1).rtt(Duration::from_micros(1200));
        std::thread::sleep(Duration::from_millis(20));
        live.tick(Duration::from_secs(1));
        let s = live.samples();
        assert_eq!(s.len(), 1);
        assert!(s[0].sent_rate > 0.0 && s[0].received_rate > 0.0);
        assert_eq!(s[0].target_rate, 500.0);
        let p50 = s[0].rtt.expect("RTTs in the interval")[0];
        assert!((0.001..=0.0015).contains(&p50), "{p50}");
    }
}
