//! Timelines read from the counters: each cell's, every [`CELL_STEP`] of its measured phase,
//! for its result (the report's charts over time); and the run's, once a second, for the
//! achieved-rate gauge and `--plot`. Both are [`Recorder`]s, the one recorder of
//! `wsload_report::timeline`; nothing here runs per message. Each tick also samples the
//! kernel's levels (TCP memory, orphans, conntrack entries) for their peaks over the cell.

use crate::counters::Counters;
use crate::machine::netstat::{Peaks, Proc};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wsload_http::buckets::{self, Counts};
use wsload_report::timeline::{self, Extra, Recorder, Sample, Totals};

/// How often the running cell's report timeline is sampled: a burst of pings measured for half
/// a second still gets a few points.
pub const CELL_STEP: Duration = Duration::from_millis(timeline::FINEST_STEP_MS as u64);

/// How often the run's own timeline is read.
pub const RUN_STEP: Duration = Duration::from_secs(1);

/// What a second of the run's timeline carries beyond its counts: its round trips by
/// latency bucket and the rate the load model asked for, for the plot.
#[derive(Debug, Clone, PartialEq)]
pub struct RunStep {
    pub rtt: Counts,
    pub target_rate: f64,
}

impl Default for RunStep {
    fn default() -> Self {
        RunStep {
            rtt: buckets::EMPTY,
            target_rate: 0.0,
        }
    }
}

impl Extra for RunStep {
    fn absorb(&mut self, later: &Self) {
        buckets::add(&mut self.rtt, &later.rtt);
        // A rate is a level, not a count: the later step's holds.
        self.target_rate = later.target_rate;
    }
}

/// A timeline in the making: when its first reading was taken, the recorder, and the
/// round-trip buckets at the last reading (each step's percentiles are of its own).
struct Recording<X: Extra> {
    begun: Instant,
    recorder: Recorder<X>,
    rtt_before: Counts,
}

impl<X: Extra> Recording<X> {
    fn start(now: Instant, totals: Totals, rtt: Counts, step: Duration) -> Self {
        Recording {
            begun: now,
            recorder: Recorder::starting(totals, step.as_millis() as u32),
            rtt_before: rtt,
        }
    }

    /// The step ending at `now`, counted from the first reading, and its round trips.
    fn step(&mut self, now: Instant, rtt: &Counts, step: Duration) -> (u32, Counts) {
        let steps =
            (now.saturating_duration_since(self.begun).as_secs_f64() / step.as_secs_f64()).round();
        let at = u32::try_from((steps as u64).saturating_sub(1)).unwrap_or(u32::MAX);
        let d = buckets::since(rtt, &self.rtt_before);
        self.rtt_before = *rtt;
        (at, d)
    }
}

/// The running cell's timeline: which cell it is of (its index) and, once its measured phase
/// began, the recording; `taken` once the run took it.
#[derive(Default)]
struct CellTimeline {
    of: Option<usize>,
    recording: Option<Recording<()>>,
    taken: bool,
}

pub struct Sampler {
    counters: Arc<Counters>,
    /// Messages per second written over the last second (f64 bits), for the gauge.
    achieved: AtomicU64,
    last_sent: AtomicU64,
    run: Mutex<Option<Recording<RunStep>>>,
    cell: Mutex<CellTimeline>,
    kernel: Peaks,
}

impl Sampler {
    pub fn new(counters: Arc<Counters>) -> Sampler {
        Sampler {
            counters,
            achieved: AtomicU64::new(0),
            last_sent: AtomicU64::new(0),
            run: Mutex::new(None),
            cell: Mutex::new(CellTimeline::default()),
            kernel: Peaks::new(Proc::system()),
        }
    }

    /// The kernel's levels' peaks over the running cell.
    pub fn kernel_peaks(&self) -> &Peaks {
        &self.kernel
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Messages per second written over the last second.
    pub fn achieved_rate(&self) -> f64 {
        f64::from_bits(self.achieved.load(Relaxed))
    }

    /// Called once a [`RUN_STEP`]: the achieved-rate gauge, the run's timeline and the
    /// kernel's peaks.
    pub fn tick(&self, now: Instant) {
        self.kernel.sample();
        let snap = self.counters.snapshot();
        let before = self.last_sent.swap(snap.sent, Relaxed);
        let rate = snap.sent.saturating_sub(before) as f64 / RUN_STEP.as_secs_f64();
        self.achieved.store(rate.to_bits(), Relaxed);
        let totals = Totals {
            sent: snap.sent,
            received: snap.received,
            open: snap.opened.saturating_sub(snap.closed),
            ..Totals::default()
        };
        let mut run = self.run.lock().unwrap_or_else(PoisonError::into_inner);
        match run.as_mut() {
            None => *run = Some(Recording::start(now, totals, snap.rtt, RUN_STEP)),
            Some(r) => {
                let (at, rtt) = r.step(now, &snap.rtt, RUN_STEP);
                let target_rate = self.counters.phase().target_rate;
                r.recorder
                    .tick_with(at, totals, None, RunStep { rtt, target_rate });
            }
        }
    }

    /// The run's timeline so far, at most `max` samples, and their step (ms).
    pub fn run_timeline(&self, max: usize) -> (u32, Vec<Sample<RunStep>>) {
        self.run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or((RUN_STEP.as_millis() as u32, Vec::new()), |r| {
                r.recorder.clone().finish_within(max)
            })
    }

    /// When the running cell's timeline is to start, while it has not: the sampler's next
    /// wake-up, so that the first step is a whole one from the start of the measured phase.
    pub fn cell_start_pending(&self) -> Option<Instant> {
        let course = self.counters.course();
        let index = course.cell.as_ref()?.index;
        let cell = self.cell.lock().unwrap_or_else(PoisonError::into_inner);
        let started = cell.of == Some(index) && (cell.recording.is_some() || cell.taken);
        course.measured_from.filter(|_| !started)
    }

    /// Resolves when a cell's measured phase got its start instant (`cell_start_pending`).
    pub async fn cell_armed(&self) {
        self.counters.course_changed().await;
    }

    /// One step ([`CELL_STEP`]) of the running cell's measured phase, once it has begun.
    pub fn sample_cell(&self, now: Instant) {
        let course = self.counters.course();
        let (Some(place), Some(from)) = (course.cell, course.measured_from) else {
            return;
        };
        if now < from {
            return;
        }
        let snap = self.counters.snapshot();
        // Only pingers count expected answers: other scenarios' round trips are echoes.
        let pinged = snap.expected > 0;
        let totals = Totals {
            sent: snap.sent,
            received: snap.received,
            open: snap.opened.saturating_sub(snap.closed),
            pings_answered: if pinged { snap.answered() } else { 0 },
            pings_lost: if pinged { snap.lost } else { 0 },
        };
        let mut cell = self.cell.lock().unwrap_or_else(PoisonError::into_inner);
        if cell.of != Some(place.index) {
            *cell = CellTimeline {
                of: Some(place.index),
                recording: Some(Recording::start(now, totals, snap.rtt, CELL_STEP)),
                taken: false,
            };
            return;
        }
        if let Some(r) = cell.recording.as_mut() {
            let (at, rtt) = r.step(now, &snap.rtt, CELL_STEP);
            let p99_us = buckets::quantile(0.99, &rtt).map(|s| (s * 1e6).round() as u64);
            r.recorder.tick(at, totals, p99_us);
        }
    }

    /// The running cell's samples and their step (ms), ending its timeline.
    pub fn take_cell_samples(&self) -> (u32, Vec<Sample>) {
        let current = self.counters.course().cell.map(|p| p.index);
        let mut cell = self.cell.lock().unwrap_or_else(PoisonError::into_inner);
        let recording = if cell.of == current {
            cell.recording.take()
        } else {
            None
        };
        // Taken, even when it never started: the sampler must not start it after the cell.
        *cell = CellTimeline {
            of: current,
            recording: None,
            taken: true,
        };
        recording.map_or((timeline::FINEST_STEP_MS, Vec::new()), |r| {
            r.recorder.finish()
        })
    }
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(workers: usize) -> Sampler {
        Sampler::new(Arc::new(Counters::new(workers)))
    }

    #[test]
    fn a_cells_timeline_is_sampled_in_steps_from_its_measured_phase() {
        let sampler = sampler(1);
        let live = sampler.counters();
        let t0 = Instant::now();
        live.begin_cell(0, "10", 10);
        assert_eq!(sampler.cell_start_pending(), None, "no measured phase yet");
        live.measuring(t0, CELL_STEP);
        // The sampler is told when the measured phase begins, to wake then.
        assert_eq!(sampler.cell_start_pending(), Some(t0 + CELL_STEP));
        live.slot(0).sent(500, 0);
        // In the warm-up: not the cell's, nor is a slow round trip then.
        sampler.sample_cell(t0 + CELL_STEP / 2);
        live.slot(0).rtt(Duration::from_millis(900));
        // The first reading past it starts the timeline; each step after adds a sample.
        sampler.sample_cell(t0 + CELL_STEP * 11 / 10);
        assert_eq!(sampler.cell_start_pending(), None, "started");
        for step in 1..=3u32 {
            live.slot(0).sent(10 * u64::from(step), 0);
            if step != 2 {
                live.slot(0).rtt(Duration::from_millis(u64::from(2 * step)));
            }
            sampler.sample_cell(t0 + CELL_STEP * (10 * step + 11) / 10);
        }
        live.end_cell();
        let (step_ms, samples) = sampler.take_cell_samples();
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
        // Taken: not started again after the cell, and the next cell starts afresh.
        assert_eq!(sampler.cell_start_pending(), None);
        sampler.sample_cell(t0 + CELL_STEP * 60);
        assert!(sampler.take_cell_samples().1.is_empty());
        live.begin_cell(1, "20", 20);
        live.measuring(t0 + CELL_STEP * 70, Duration::ZERO);
        assert_eq!(sampler.cell_start_pending(), Some(t0 + CELL_STEP * 70));
    }

    #[test]
    fn ticks_keep_a_timeline_of_the_slots() {
        let sampler = sampler(2);
        let live = sampler.counters();
        let t0 = Instant::now();
        live.set_phase("10", 500.0);
        sampler.tick(t0);
        assert!(
            sampler.run_timeline(100).1.is_empty(),
            "the first tick only takes the sums"
        );
        live.slot(0).sent(30, 0);
        live.slot(1).received(20, 0);
        // 1.2 ms on both workers' histograms: p50 lies in the (1 ms, 1.5 ms] bucket.
        live.slot(0).rtt(Duration::from_micros(1200));
        live.slot(1).rtt(Duration::from_micros(1200));
        sampler.tick(t0 + RUN_STEP);
        let (step_ms, s) = sampler.run_timeline(100);
        assert_eq!((step_ms, s.len()), (1_000, 1));
        assert_eq!((s[0].at, s[0].sent, s[0].received), (0, 30, 20));
        assert_eq!(s[0].extra.target_rate, 500.0);
        assert_eq!(sampler.achieved_rate(), 30.0);
        let p50 = buckets::quantile(0.5, &s[0].extra.rtt).expect("RTTs in the interval");
        assert!((0.001..=0.0015).contains(&p50), "{p50}");
    }
}
