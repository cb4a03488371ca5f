//! Samples of a cell's measured phase over time: what the throughput-over-time charts draw.
//!
//! The load generator keeps lock-free running totals for /metrics; a [`Recorder`] turns
//! readings of them, one per step (100 ms), into [`Sample`]s of what happened in each step.
//! A burst of pings measured for half a second still gets a few points; a cell longer than
//! [`MAX_SAMPLES`] steps is coarsened when it ends ([`STEPS_MS`]) so a result stays small.
//! Shards begin a cell's measured phase at one instant (named once every shard has opened its
//! share, or a fanout's computed one), so their samples of the same step add up ([`merge`]).
//!
//! It is the load generator's one recorder: a result's cells keep only the counts, while the
//! run's plot (`wsload run --plot`) records each second with an [`Extra`] of its own (the
//! step's round-trip buckets and target rate), coarsened the same way.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The steps a timeline may have, finest first: each divides the next, so timelines of
/// different steps merge exactly at the coarser.
pub const STEPS_MS: [u32; 8] = [100, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000];

/// The step a load generator samples at.
pub const FINEST_STEP_MS: u32 = STEPS_MS[0];

/// At most this many samples in a cell's timeline: 30 s at 100 ms, 5 min at 1 s, an hour's
/// hold in 120 of 30 s. A shard's result holds every cell's: a matrix of a hundred minute-long
/// cells stays a few hundred kilobytes before gzip, far under what a ConfigMap takes.
pub const MAX_SAMPLES: usize = 300;

/// Results written before timelines had steps sampled whole seconds.
pub fn legacy_step_ms() -> u32 {
    1_000
}

/// What a step may carry beyond its counts, folded the way the counts are when steps are
/// coarsened: never part of a result (it is not serialized).
pub trait Extra: Clone + Default + PartialEq + std::fmt::Debug {
    /// Folds the next step's extra into this one.
    fn absorb(&mut self, later: &Self);
}

/// A result's samples carry nothing more.
impl Extra for () {
    fn absorb(&mut self, _later: &Self) {}
}

/// One step of a cell's measured phase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample<X: Extra = ()> {
    /// Steps since the cell's measured phase began: this sample covers
    /// `[at, at + 1)` steps. (`second` in results written when every step was a second.)
    #[serde(alias = "second")]
    pub at: u32,
    /// Messages sent during this step.
    pub sent: u64,
    /// Messages (answers, echoes, broadcasts) received during this step.
    pub received: u64,
    /// Connections open at the end of this step.
    pub open: u64,
    /// Pings answered during this step (scenarios that ping).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pings_answered: u64,
    /// Pings declared lost during this step.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pings_lost: u64,
    /// Round-trip p99 of this step's round trips, microseconds, from the load generator's
    /// latency buckets (interpolated inside a bucket as Prometheus' `histogram_quantile`
    /// does); none when nothing came back. A p99 neither adds nor averages: merged shards and
    /// coarsened steps keep the worst, an upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<u64>,
    /// The recorder's own figures of this step (the plot's), never written to a result.
    #[serde(skip)]
    pub extra: X,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl<X: Extra> Sample<X> {
    /// Folds `later`, the next step's sample (or another shard's of the same step), into this.
    fn absorb(&mut self, later: &Sample<X>, gauges_add: bool) {
        self.sent += later.sent;
        self.received += later.received;
        // A gauge over time is its last reading; over shards, their sum.
        self.open = if gauges_add {
            self.open + later.open
        } else {
            later.open
        };
        self.pings_answered += later.pings_answered;
        self.pings_lost += later.pings_lost;
        self.p99_us = self.p99_us.max(later.p99_us);
        self.extra.absorb(&later.extra);
    }
}

/// A reading of the load generator's running totals (counters since the cell began, except
/// `open`, which is a gauge).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub sent: u64,
    pub received: u64,
    pub open: u64,
    pub pings_answered: u64,
    pub pings_lost: u64,
}

/// While recording, at most this many samples are kept before they are coarsened to the
/// next step: a plot of days, or a hold of hours, costs a bounded few megabytes.
pub const MAX_RECORDING: usize = 20_000;

/// Turns one reading of the running totals per step into samples.
#[derive(Debug, Clone)]
pub struct Recorder<X: Extra = ()> {
    /// The step the caller reads at: `at` counts these.
    read_ms: u32,
    /// The step of the samples kept: `read_ms`, or coarser once there were too many.
    step_ms: u32,
    last: Totals,
    samples: Vec<Sample<X>>,
}

impl Recorder {
    /// Starts at the totals read when the measured phase began (the warm-up's counts are
    /// not the cell's); the caller reads them again every `step_ms`.
    pub fn new(start: Totals, step_ms: u32) -> Self {
        Recorder::starting(start, step_ms)
    }
}

impl<X: Extra> Recorder<X> {
    /// [`Recorder::new`], for steps that carry an [`Extra`].
    pub fn starting(start: Totals, step_ms: u32) -> Self {
        Recorder {
            read_ms: step_ms.max(1),
            step_ms: step_ms.max(1),
            last: start,
            samples: Vec::new(),
        }
    }

    /// Records the step ending now: `at` is its offset from the measured phase's start, in
    /// steps, `p99_us` the running round-trip p99 when the caller has one. A reading that
    /// came late, right behind another of the same step, adds to it.
    pub fn tick(&mut self, at: u32, now: Totals, p99_us: Option<u64>) {
        self.tick_with(at, now, p99_us, X::default());
    }

    /// [`tick`](Self::tick) with the step's [`Extra`].
    pub fn tick_with(&mut self, at: u32, now: Totals, p99_us: Option<u64>, extra: X) {
        // Saturating: a counter read torn against another thread's reset must not wrap.
        let d = |now: u64, last: u64| now.saturating_sub(last);
        let at = u32::try_from(u64::from(at) * u64::from(self.read_ms) / u64::from(self.step_ms))
            .unwrap_or(u32::MAX);
        let sample = Sample {
            at,
            sent: d(now.sent, self.last.sent),
            received: d(now.received, self.last.received),
            open: now.open,
            pings_answered: d(now.pings_answered, self.last.pings_answered),
            pings_lost: d(now.pings_lost, self.last.pings_lost),
            p99_us,
            extra,
        };
        self.last = now;
        match self.samples.last_mut() {
            Some(prev) if prev.at >= at => prev.absorb(&sample, false),
            _ => self.samples.push(sample),
        }
        if self.samples.len() >= MAX_RECORDING {
            let step = coarser(self.step_ms, self.span_ms(), MAX_RECORDING / 2);
            self.samples = coarsen(std::mem::take(&mut self.samples), self.step_ms, step);
            self.step_ms = step;
        }
    }

    fn span_ms(&self) -> u64 {
        self.samples.last().map_or(0, |s| u64::from(s.at) + 1) * u64::from(self.step_ms)
    }

    /// The samples recorded, coarsened to at most [`MAX_SAMPLES`]: a cell's `timeline`,
    /// with its step in milliseconds.
    pub fn finish(self) -> (u32, Vec<Sample<X>>) {
        self.finish_within(MAX_SAMPLES)
    }

    /// The samples recorded, coarsened to at most `max` (as far as [`STEPS_MS`] goes), with
    /// their step in milliseconds.
    pub fn finish_within(self, max: usize) -> (u32, Vec<Sample<X>>) {
        let step = coarser(self.step_ms, self.span_ms(), max);
        (step, coarsen(self.samples, self.step_ms, step))
    }
}

/// The finest step of [`STEPS_MS`], no finer than `step_ms`, that covers `span_ms` in at most
/// `max` steps (the coarsest when none does).
fn coarser(step_ms: u32, span_ms: u64, max: usize) -> u32 {
    STEPS_MS
        .into_iter()
        .filter(|&s| s >= step_ms)
        .find(|&s| span_ms.div_ceil(u64::from(s)) <= max as u64)
        .unwrap_or(STEPS_MS[STEPS_MS.len() - 1])
        .max(step_ms)
}

/// `samples` of `from_ms` steps as steps of `to_ms` (no finer than they were).
pub fn coarsen<X: Extra>(samples: Vec<Sample<X>>, from_ms: u32, to_ms: u32) -> Vec<Sample<X>> {
    if to_ms <= from_ms {
        return samples;
    }
    let mut out: Vec<Sample<X>> = Vec::new();
    for mut s in samples {
        s.at = u32::try_from(u64::from(s.at) * u64::from(from_ms) / u64::from(to_ms))
            .unwrap_or(u32::MAX);
        match out.last_mut() {
            Some(prev) if prev.at == s.at => prev.absorb(&s, false),
            _ => out.push(s),
        }
    }
    out
}

/// Adds another shard's timeline of the same cell (`other`, of `other_step_ms` steps) into
/// `into` (of `*into_step_ms`), step by step, at the coarser of the two steps.
pub fn merge(into: &mut Vec<Sample>, into_step_ms: &mut u32, other: &[Sample], other_step_ms: u32) {
    if other.is_empty() {
        return;
    }
    if into.is_empty() {
        *into = other.to_vec();
        *into_step_ms = other_step_ms;
        return;
    }
    let step = (*into_step_ms).max(other_step_ms);
    let mine = coarsen(std::mem::take(into), *into_step_ms, step);
    let theirs = coarsen(other.to_vec(), other_step_ms, step);
    let mut by_step: BTreeMap<u32, Sample> = mine.into_iter().map(|s| (s.at, s)).collect();
    for s in &theirs {
        by_step
            .entry(s.at)
            .and_modify(|e| e.absorb(s, true))
            .or_insert_with(|| s.clone());
    }
    into.extend(by_step.into_values());
    *into_step_ms = step;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(sent: u64, received: u64, open: u64) -> Totals {
        Totals {
            sent,
            received,
            open,
            ..Totals::default()
        }
    }

    fn sample(at: u32, sent: u64, open: u64) -> Sample {
        Sample {
            at,
            sent,
            received: sent,
            open,
            ..Sample::default()
        }
    }

    #[test]
    fn recorder_keeps_what_happened_in_each_step() {
        let mut r = Recorder::new(totals(50, 40, 10), 100);
        r.tick(0, totals(150, 130, 10), None);
        r.tick(
            1,
            Totals {
                pings_answered: 7,
                pings_lost: 1,
                ..totals(350, 330, 9)
            },
            Some(1200),
        );
        // A late reading of step 1 again: its counts join step 1, its gauge replaces.
        r.tick(1, totals(360, 330, 8), None);
        let (step, s) = r.finish();
        assert_eq!(
            step, 100,
            "two steps are far under the cap: kept as sampled"
        );
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].sent, s[0].received, s[0].open), (100, 90, 10));
        assert_eq!((s[1].sent, s[1].received, s[1].open), (210, 200, 8));
        assert_eq!((s[1].pings_answered, s[1].pings_lost), (7, 1));
        assert_eq!((s[0].p99_us, s[1].p99_us), (None, Some(1200)));
    }

    #[test]
    fn a_long_cell_is_coarsened_to_the_cap_and_loses_no_count() {
        // 31 s of 100 ms steps: 310 samples, over the cap of 300, so whole seconds.
        let mut r = Recorder::new(Totals::default(), 100);
        for at in 0..310u32 {
            let n = u64::from(at + 1);
            r.tick(at, totals(n * 10, n * 10, u64::from(at)), None);
        }
        let (step, s) = r.finish();
        assert_eq!(step, 1_000);
        assert_eq!(s.len(), 31);
        assert_eq!(s.iter().map(|x| x.sent).sum::<u64>(), 3_100);
        assert_eq!((s[0].at, s[0].sent, s[0].open), (0, 100, 9));
        assert_eq!((s[30].at, s[30].open), (30, 309));
        // An hour of them keeps 120 of 30 s.
        let mut r = Recorder::new(Totals::default(), 100);
        for at in 0..36_000u32 {
            r.tick(at, totals(u64::from(at), 0, 1), None);
        }
        let (step, s) = r.finish();
        assert_eq!((step, s.len()), (30_000, 120));
    }

    #[test]
    fn merge_adds_samples_of_the_same_step_and_keeps_the_rest() {
        let mut a = vec![
            Sample {
                p99_us: Some(300),
                ..sample(0, 10, 5)
            },
            sample(1, 20, 5),
        ];
        // The other shard's run went one step longer and has no step 1 (a missed tick).
        let b = vec![
            Sample {
                pings_answered: 4,
                p99_us: Some(900),
                ..sample(0, 1, 2)
            },
            Sample {
                pings_lost: 1,
                ..sample(2, 3, 2)
            },
        ];
        let mut step = 100;
        merge(&mut a, &mut step, &b, 100);
        assert_eq!(step, 100);
        assert_eq!(a.iter().map(|s| s.at).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!((a[0].sent, a[0].received, a[0].open), (11, 11, 7));
        assert_eq!((a[0].pings_answered, a[0].p99_us), (4, Some(900)));
        assert_eq!((a[1].sent, a[1].open), (20, 5));
        assert_eq!((a[2].sent, a[2].pings_lost, a[2].p99_us), (3, 1, None));
        let before = a.clone();
        merge(&mut a, &mut step, &[], 1_000);
        assert_eq!((&a, step), (&before, 100));
        // Into nothing: the other's, step and all.
        let mut none = Vec::new();
        let mut step = 100;
        merge(&mut none, &mut step, &before, 1_000);
        assert_eq!((none, step), (before, 1_000));
    }

    #[test]
    fn timelines_of_different_steps_merge_at_the_coarser() {
        // One shard kept 100 ms steps over 2 s, the other was coarsened to seconds.
        let mut fine: Vec<Sample> = (0..20).map(|at| sample(at, 1, 3)).collect();
        let coarse = vec![sample(0, 100, 4), sample(1, 200, 4)];
        let mut step = 100;
        merge(&mut fine, &mut step, &coarse, 1_000);
        assert_eq!(step, 1_000);
        let got: Vec<_> = fine.iter().map(|s| (s.at, s.sent, s.open)).collect();
        assert_eq!(got, vec![(0, 110, 7), (1, 210, 7)]);
    }

    #[test]
    fn results_with_whole_seconds_still_read() {
        let old = r#"{"second": 4, "sent": 1, "received": 2, "open": 3}"#;
        let s: Sample = serde_json::from_str(old).expect("a sample written as seconds");
        assert_eq!((s.at, s.sent, s.received, s.open), (4, 1, 2, 3));
        assert!(serde_json::to_string(&s).expect("ser").contains("\"at\":4"));
    }

    /// A step's extra (the plot's): folded with the counts.
    #[derive(Debug, Clone, Default, PartialEq)]
    struct Seen(u64);
    impl Extra for Seen {
        fn absorb(&mut self, later: &Self) {
            self.0 += later.0;
        }
    }

    #[test]
    fn a_long_recording_is_coarsened_as_it_goes_and_keeps_every_count() {
        // Two days of one-second readings: never more than MAX_RECORDING samples at once.
        let mut r: Recorder<Seen> = Recorder::starting(Totals::default(), 1_000);
        let seconds = 2 * 86_400u32;
        let mut most = 0;
        for at in 0..seconds {
            let n = u64::from(at + 1);
            r.tick_with(at, totals(n, n, 1), None, Seen(1));
            most = most.max(r.samples.len());
        }
        assert!(most <= MAX_RECORDING, "{most}");
        let (step, s) = r.finish_within(2_000);
        assert!(s.len() <= 2_000, "{}", s.len());
        assert_eq!(u64::from(step) * s.len() as u64, u64::from(seconds) * 1_000);
        assert_eq!(s.iter().map(|x| x.sent).sum::<u64>(), u64::from(seconds));
        assert_eq!(s.iter().map(|x| x.extra.0).sum::<u64>(), u64::from(seconds));
    }
}
