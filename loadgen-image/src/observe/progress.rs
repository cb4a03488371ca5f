//! Live progress of `wsload run` on a terminal: which cell of how many is running, the time
//! it and the run have left, and the figures that matter for the scenario, drawn from a
//! [`Snapshot`] of the counters (this process's, or the shards' scraped: crate::fleet::bar).
//! While the bar shows, every other stderr line goes above it (crate::observe::terminal); on a
//! non-terminal nothing is drawn.

use crate::counters::{Counters, Course, Place, Snapshot};
use crate::model::Phases;
use crate::model::plan::Plan;
use crate::observe::terminal;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fmt::Write as _;
use std::time::{Duration, Instant};
use wsload_http::buckets::{self, Counts, quantile, since};
use wsload_spec::Scenario;
use wsload_spec::scenario::{Cells, Measures};

/// The figures that matter for a scenario once its connections are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figures {
    /// Connections only (connectionStorm).
    Connect,
    /// Messages per second sent and received; `rtt` when messages come back timed.
    Rate { rtt: bool },
    /// Pings sent, answered, lost and their p99.
    Pings,
}

impl Figures {
    pub fn of(scenario: Scenario) -> Figures {
        match scenario.profile().measures {
            Measures::Connects => Figures::Connect,
            Measures::Echoes | Measures::Sends => Figures::Rate { rtt: false },
            // A fanout's deliveries are what it receives, timed from their publish.
            Measures::PacedRoundTrips | Measures::Deliveries => Figures::Rate { rtt: true },
            Measures::RoundTrips { .. } | Measures::Limit => Figures::Pings,
        }
    }
}

/// What the run will do, as far as it is known before it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Outline {
    pub scenario: Scenario,
    /// The planned cells in run order; empty for a limit search, decided as it goes.
    pub cells: Vec<Phases>,
    /// The course of every cell of a limit search (each probe is alike but for its count).
    pub probe: Option<Phases>,
}

impl Outline {
    pub fn new(plan: &Plan) -> Outline {
        let spec = plan.spec();
        let probe =
            (spec.scenario.profile().cells == Cells::Search).then(|| Phases::of(&plan.probe()));
        Outline {
            scenario: spec.scenario,
            cells: plan.cells().iter().map(Phases::of).collect(),
            probe,
        }
    }

    /// The cell's name and place, as the report names it.
    fn place(&self, index: usize, label: &str, connections: u32) -> String {
        let n = self.cells.len();
        match self.scenario.profile().cells {
            _ if self.probe.is_some() => {
                format!("probe {}: {connections} connections", index + 1)
            }
            Cells::SizesByTiers | Cells::FormatsByTiers => {
                format!("cell {}/{n}: {label}", index + 1)
            }
            Cells::Tiers | Cells::Search => {
                format!("tier {}/{n}: {connections} connections", index + 1)
            }
        }
    }

    fn phases(&self, index: usize) -> Option<&Phases> {
        self.probe.as_ref().or_else(|| self.cells.get(index))
    }

    /// Time the cells after `index` will take; `None` when it cannot be known.
    fn after(&self, index: usize) -> Option<Duration> {
        if self.probe.is_some() {
            return None;
        }
        self.cells
            .iter()
            .skip(index + 1)
            .map(Phases::total)
            .sum::<Option<Duration>>()
    }
}

/// One frame of the bar: the two lines, from the outline, the course and the counters.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    pub outline: &'a Outline,
    pub course: &'a Course,
    pub now: Instant,
    /// When the run began.
    pub run_begun: Instant,
    /// The counters when the cell began, a second ago, and now.
    pub base: &'a Snapshot,
    pub prev: &'a Snapshot,
    pub cur: &'a Snapshot,
    /// The round-trip bucket counts the p99 is taken from: as the measured phase began once
    /// it has (the warm-up's round trips are not the cell's), as the cell began before.
    pub rtt_from: &'a Counts,
    /// Between `prev` and `cur`.
    pub interval: Duration,
}

/// Whether a cell with a warm-up is past it at `now` (false without one: then the cell's round
/// trips from its start are all measured).
fn past_warmup(course: &Course, phases: Option<&Phases>, now: Instant) -> bool {
    match (course.measuring, phases) {
        (Some(at), Some(phases)) if !phases.warmup.is_zero() => now >= at + phases.warmup,
        _ => false,
    }
}

/// `m:ss`, or `h:mm:ss` from an hour.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// A countdown's whole seconds: a second begun is still left.
fn ceil_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

const BAR_WIDTH: usize = 20;

fn bar(done: f64) -> String {
    let filled = ((done.clamp(0.0, 1.0) * BAR_WIDTH as f64).round() as usize).min(BAR_WIDTH);
    format!("[{}{}]", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled))
}

fn latency(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{seconds:.2} s")
    }
}

impl Frame<'_> {
    /// The cell's phase, and the time it has left (`None`: not known).
    fn phase(&self, phases: Option<&Phases>) -> (&'static str, Option<Duration>) {
        let c = self.course;
        let Some(phases) = phases else {
            return ("running", None);
        };
        if c.ended {
            return ("settling", Some(Duration::ZERO));
        }
        match c.measuring {
            None => {
                let spent = c
                    .begun
                    .map_or(Duration::ZERO, |b| self.now.saturating_duration_since(b));
                // Batches go one at a time: a connect phase slower than its schedule has
                // the rest left at the rate seen over the last second.
                let left = phases
                    .connect
                    .saturating_sub(spent)
                    .max(self.connect_left());
                (
                    "connecting",
                    phases.measured.map(|m| left + phases.warmup + m),
                )
            }
            Some(at) => {
                let into = self.now.saturating_duration_since(at);
                let phase = if into < phases.warmup {
                    "warm-up"
                } else if phases.measured.is_none() {
                    "pinging"
                } else {
                    "measuring"
                };
                let end = phases.measured.map(|m| phases.warmup + m);
                (phase, end.map(|e| e.saturating_sub(into)))
            }
        }
    }

    /// The running cell's connects still to be tried, at the rate they were tried over the
    /// last second (zero when none were: then the schedule is all there is to go by).
    fn connect_left(&self) -> Duration {
        let tried = |s: &Snapshot| s.opened + s.failed;
        let target = self
            .course
            .cell
            .as_ref()
            .map_or(0, |c| u64::from(c.connections));
        let left = target.saturating_sub(tried(self.cur).saturating_sub(tried(self.base)));
        let rate = tried(self.cur).saturating_sub(tried(self.prev)) as f64
            / self.interval.as_secs_f64().max(1e-3);
        if left == 0 || rate <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(left as f64 / rate)
    }

    /// The first line: the cell, its phase and times, the run's.
    pub fn head(&self) -> String {
        let Some(Place {
            index,
            label,
            connections,
        }) = &self.course.cell
        else {
            return "starting".into();
        };
        let phases = self.outline.phases(*index);
        let (phase, left) = self.phase(phases);
        let spent = self
            .course
            .begun
            .map_or(Duration::ZERO, |b| self.now.saturating_duration_since(b));
        let mut line = format!(
            "{}  {phase} ",
            self.outline.place(*index, label, *connections)
        );
        match left.map(ceil_secs) {
            Some(left) => {
                let spent = Duration::from_secs(spent.as_secs());
                let total = spent + left;
                let done = if total.is_zero() {
                    1.0
                } else {
                    spent.as_secs_f64() / total.as_secs_f64()
                };
                let _ = write!(
                    line,
                    "{} {} / {}, {} left",
                    bar(done),
                    clock(spent),
                    clock(total),
                    clock(left)
                );
            }
            None => {
                let _ = write!(line, "{}, until its pings are done", clock(spent));
            }
        }
        let run = self.now.saturating_duration_since(self.run_begun);
        let _ = write!(line, "  |  run {}", clock(run));
        if self.outline.probe.is_some() {
            line.push_str(", no fixed end (limit search)");
        } else {
            match left.map(ceil_secs).zip(self.outline.after(*index)) {
                Some((l, after)) => {
                    let _ = write!(line, ", ~{} left", clock(l + after));
                }
                None => line.push_str(", end not known (cells end when their pings do)"),
            }
        }
        line
    }

    /// The second line: the figures that matter now.
    pub fn figures(&self) -> String {
        let (b, p, c) = (self.base, self.prev, self.cur);
        let per_sec = |now: u64, before: u64| {
            let secs = self.interval.as_secs_f64();
            if secs > 0.0 {
                now.saturating_sub(before) as f64 / secs
            } else {
                0.0
            }
        };
        let open = c.opened.saturating_sub(c.closed);
        let failed = c.failed.saturating_sub(b.failed);
        let connecting = self.course.measuring.is_none() && !self.course.ended;
        let target = self.course.cell.as_ref().map_or(0, |c| c.connections);
        let connect = || {
            format!(
                "{}/{target} opened, {open} open, {:.0} connections/s, {failed} failed",
                c.opened.saturating_sub(b.opened),
                per_sec(c.opened, p.opened)
            )
        };
        if connecting {
            return connect();
        }
        let p99 = quantile(0.99, &since(&c.rtt, self.rtt_from)).map_or_else(|| "-".into(), latency);
        match Figures::of(self.outline.scenario) {
            Figures::Connect => connect(),
            Figures::Pings => format!(
                "pings {} sent, {} answered, {} lost, p99 {p99}  |  {open} open, {failed} failed",
                c.expected.saturating_sub(b.expected),
                c.answered().saturating_sub(b.answered()),
                c.lost.saturating_sub(b.lost)
            ),
            Figures::Rate { rtt } => {
                let mut line = format!(
                    "{:.0} msg/s sent, {:.0} msg/s received",
                    per_sec(c.sent, p.sent),
                    per_sec(c.received, p.received)
                );
                if rtt {
                    let _ = write!(line, ", p99 {p99}, {} lost", c.lost.saturating_sub(b.lost));
                }
                let _ = write!(line, "  |  {open} open, {failed} failed");
                line
            }
        }
    }
}

/// The bar of a run, drawn once a second by the background thread.
pub struct Progress {
    outline: Outline,
    bar: ProgressBar,
    run_begun: Instant,
    /// The cell the base snapshot is of.
    cell: Option<usize>,
    base: Snapshot,
    prev: (Instant, Snapshot),
    /// The running cell's p99 counts from here (`Frame::rtt_from`), and whether that is
    /// already the measured phase's start.
    rtt_from: Counts,
    rtt_from_measured: bool,
}

impl Progress {
    /// A bar on stderr, shown from the first cell on.
    pub fn new(outline: Outline) -> Progress {
        Progress::drawn_to(outline, ProgressDrawTarget::stderr())
    }

    fn drawn_to(outline: Outline, target: ProgressDrawTarget) -> Progress {
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(
            ProgressStyle::with_template("{prefix}\n  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let now = Instant::now();
        Progress {
            outline,
            bar,
            run_begun: now,
            cell: None,
            base: Snapshot::default(),
            prev: (now, Snapshot::default()),
            rtt_from: buckets::EMPTY,
            rtt_from_measured: false,
        }
    }

    /// Redraws the bar from this process's counters.
    pub fn draw(&mut self, counters: &Counters) {
        self.draw_with(counters.course(), counters.snapshot(), || {
            counters.course_base()
        });
    }

    /// Redraws the bar from where the run is and its counters now; `base` gives the counters
    /// as the running cell began (read once per cell).
    pub fn draw_with(&mut self, course: Course, cur: Snapshot, base: impl FnOnce() -> Snapshot) {
        let now = Instant::now();
        let Some(index) = course.cell.as_ref().map(|c| c.index) else {
            // Nothing is running yet (the managed server starts): nothing to say.
            self.prev = (now, cur);
            return;
        };
        if self.cell != Some(index) {
            if self.cell.is_none() {
                self.run_begun = course.begun.unwrap_or(now);
                terminal::show(self.bar.clone());
            }
            self.cell = Some(index);
            self.base = base();
            self.rtt_from = self.base.rtt;
            self.rtt_from_measured = false;
        }
        if !self.rtt_from_measured && past_warmup(&course, self.outline.phases(index), now) {
            // The counts now: the p99 shows again from the next second, without the warm-up.
            self.rtt_from = cur.rtt;
            self.rtt_from_measured = true;
        }
        let frame = Frame {
            outline: &self.outline,
            course: &course,
            now,
            run_begun: self.run_begun,
            base: &self.base,
            prev: &self.prev.1,
            cur: &cur,
            rtt_from: &self.rtt_from,
            interval: now - self.prev.0,
        };
        self.bar.set_prefix(frame.head());
        self.bar.set_message(frame.figures());
        self.prev = (now, cur);
    }

    /// Takes the bar off the screen after Ctrl-C.
    pub fn interrupted(&self) {
        terminal::clear_echoed_interrupt();
        self.clear();
    }

    /// Takes the bar off the screen.
    pub fn clear(&self) {
        terminal::hide();
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Shard;
    use wsload_spec::fixtures::spec;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn lines(
        outline: &Outline,
        course: &Course,
        now: Instant,
        run_begun: Instant,
        snaps: [&Snapshot; 3],
    ) -> (String, String) {
        let f = Frame {
            outline,
            course,
            now,
            run_begun,
            base: snaps[0],
            prev: snaps[1],
            cur: snaps[2],
            rtt_from: &snaps[0].rtt,
            interval: secs(1),
        };
        (f.head(), f.figures())
    }

    /// The course of cell `index` (label, connections) begun at `begun`.
    fn running(
        (index, label, connections): (usize, &str, u32),
        begun: Instant,
        measuring: Option<Instant>,
    ) -> Course {
        Course {
            cell: Some(Place {
                index,
                label: label.into(),
                connections,
            }),
            begun: Some(begun),
            measuring,
            ..Course::default()
        }
    }

    fn hold() -> Outline {
        // Two tiers of a hold: 1000 in one batch, 5000 in five batches 1 s apart.
        let s = spec(
            "  target: {server: {}}\n  scenario: sustainedHold\n  connections: [1000, 5000]\n  duration: 30s\n  warmup: 5s\n  connect: {batchSize: 1000, batchInterval: 1s}\n",
        );
        Outline::new(&Plan::new(&s, Shard::WHOLE).expect("compiles"))
    }

    #[test]
    fn the_bars_p99_leaves_the_warm_up_out() {
        let bucket = |secs: f64| {
            wsload_http::LATENCY_BUCKETS
                .iter()
                .position(|b| *b >= secs)
                .expect("a bucket")
        };
        let mut p = Progress::drawn_to(hold(), ProgressDrawTarget::hidden());
        let now = Instant::now();
        // Tier 2 has a 5 s warm-up; its connections opened 2 s ago: warm-up still.
        let warming = running((1, "5000", 5000), now - secs(3), Some(now - secs(2)));
        let mut cur = Snapshot::default();
        cur.rtt[bucket(0.9)] = 100;
        p.draw_with(warming, cur, Snapshot::default);
        assert_eq!(
            p.rtt_from,
            buckets::EMPTY,
            "the cell's start, until the warm-up ends"
        );
        assert!(!p.rtt_from_measured);
        // 10 s after they opened: past the warm-up, whose slow round trips are left out.
        let measuring = running((1, "5000", 5000), now - secs(11), Some(now - secs(10)));
        p.draw_with(measuring.clone(), cur, Snapshot::default);
        assert_eq!(p.rtt_from, cur.rtt);
        assert!(p.rtt_from_measured);
        let mut later = cur;
        later.rtt[bucket(0.0012)] = 1000;
        let f = Frame {
            outline: &p.outline,
            course: &measuring,
            now,
            run_begun: now - secs(20),
            base: &Snapshot::default(),
            prev: &cur,
            cur: &later,
            rtt_from: &p.rtt_from,
            interval: secs(1),
        };
        assert!(f.figures().contains("p99 1.5 ms"), "{}", f.figures());
        // Without a warm-up, the cell's round trips from its start are all measured.
        assert!(!past_warmup(
            &measuring,
            Some(&Phases {
                warmup: Duration::ZERO,
                ..p.outline.cells[1].clone()
            }),
            now
        ));
        assert!(past_warmup(&measuring, p.outline.phases(1), now));
    }

    #[test]
    fn outline_knows_each_cells_phases() {
        let o = hold();
        assert_eq!(o.cells.len(), 2);
        assert_eq!(o.cells[0].connect, Duration::ZERO);
        assert_eq!(o.cells[1].connect, secs(4));
        assert_eq!(o.cells[1].warmup, secs(5));
        assert_eq!(o.cells[1].measured, Some(secs(30)));
        assert_eq!(o.after(0), Some(secs(39)));
        assert_eq!(o.after(1), Some(Duration::ZERO));
        assert!(o.probe.is_none());
    }

    #[test]
    fn a_hold_shows_its_place_time_left_and_pings() {
        let o = hold();
        let t0 = Instant::now();
        let course = running((1, "5000", 5000), t0 + secs(40), Some(t0 + secs(45)));
        let base = Snapshot {
            opened: 1000,
            closed: 1000,
            expected: 6000,
            ..Default::default()
        };
        let mut cur = Snapshot {
            opened: 6000,
            closed: 1000,
            failed: 2,
            expected: 6000 + 1200,
            lost: 3,
            ..Default::default()
        };
        // 1197 answers at 1.2 ms: the (1 ms, 1.5 ms] bucket.
        let i = wsload_http::LATENCY_BUCKETS
            .iter()
            .position(|b| *b >= 0.0012)
            .expect("a bucket");
        cur.rtt[i] = 1197;
        // 20 s into the cell: connected by 5 s, then 5 s warm-up and 10 s of 30 measured.
        let (head, figures) = lines(&o, &course, t0 + secs(60), t0, [&base, &cur, &cur]);
        assert!(
            head.starts_with("tier 2/2: 5000 connections  measuring ["),
            "{head}"
        );
        assert!(head.contains("0:20 / 0:40, 0:20 left"), "{head}");
        assert!(head.ends_with("run 1:00, ~0:20 left"), "{head}");
        assert!(
            figures.starts_with("pings 1200 sent, 1197 answered, 3 lost, p99 1.5 ms"),
            "{figures}"
        );
        assert!(figures.ends_with("5000 open, 2 failed"), "{figures}");

        // During the first tier, the run also has the second's 39 s ahead.
        let course = running((0, "1000", 1000), t0, Some(t0 + secs(1)));
        let zero = Snapshot::default();
        let (head, _) = lines(&o, &course, t0 + secs(11), t0, [&zero, &zero, &zero]);
        assert!(head.starts_with("tier 1/2: 1000 connections  measuring"));
        assert!(head.contains("0:11 / 0:36, 0:25 left"), "{head}");
        assert!(head.ends_with("run 0:11, ~1:04 left"), "{head}");
    }

    #[test]
    fn connecting_shows_opened_and_the_connect_rate() {
        let o = hold();
        let t0 = Instant::now();
        let course = running((1, "5000", 5000), t0, None);
        let base = Snapshot::default();
        let prev = Snapshot {
            opened: 1000,
            ..Default::default()
        };
        let cur = Snapshot {
            opened: 2000,
            ..Default::default()
        };
        let (head, figures) = lines(&o, &course, t0 + secs(1), t0, [&base, &prev, &cur]);
        // 3 s of batches left, then 5 s warm-up and 30 s measured.
        assert!(head.contains("connecting ["), "{head}");
        assert!(head.contains("0:01 / 0:39, 0:38 left"), "{head}");
        assert_eq!(
            figures,
            "2000/5000 opened, 2000 open, 1000 connections/s, 0 failed"
        );
        // 10 s in, the batches were due by 4 s, but 2000 are tried (1900 opened, 100 failed)
        // at 200 a second: 15 s of connects left at that rate, not none.
        let prev = Snapshot {
            opened: 1720,
            failed: 80,
            ..Default::default()
        };
        let cur = Snapshot {
            opened: 1900,
            failed: 100,
            ..Default::default()
        };
        let (head, _) = lines(&o, &course, t0 + secs(10), t0, [&base, &prev, &cur]);
        assert!(head.contains("0:10 / 1:00, 0:50 left"), "{head}");
    }

    #[test]
    fn throughput_shows_rates_and_matrix_cells_their_labels() {
        let s = spec(
            "  target: {server: {}}\n  scenario: payloadMatrix\n  connections: [10, 20]\n  sizes: [64, 1024]\n  duration: 10s\n  warmup: 0s\n",
        );
        let o = Outline::new(&Plan::new(&s, Shard::WHOLE).expect("compiles"));
        let t0 = Instant::now();
        let course = running((2, "1 KiB x 10", 10), t0, Some(t0));
        let base = Snapshot::default();
        let prev = Snapshot {
            opened: 10,
            sent: 1000,
            received: 900,
            ..Default::default()
        };
        let cur = Snapshot {
            opened: 10,
            sent: 51_000,
            received: 40_900,
            ..Default::default()
        };
        let (head, figures) = lines(&o, &course, t0 + secs(4), t0, [&base, &prev, &cur]);
        assert!(
            head.starts_with("cell 3/4: 1 KiB x 10  measuring"),
            "{head}"
        );
        // This cell's 6 s and the last cell's 10 s.
        assert!(head.ends_with("run 0:04, ~0:16 left"), "{head}");
        assert_eq!(
            figures,
            "50000 msg/s sent, 40000 msg/s received  |  10 open, 0 failed"
        );
    }

    #[test]
    fn a_storm_shows_connections_only() {
        let s = spec(
            "  target: {server: {}}\n  scenario: connectionStorm\n  connections: [500]\n  connect: {batchSize: 100, batchInterval: 1s}\n",
        );
        let o = Outline::new(&Plan::new(&s, Shard::WHOLE).expect("compiles"));
        // Five batches a second apart, nothing after them.
        assert_eq!(o.cells[0].total(), Some(secs(4)));
        let t0 = Instant::now();
        let course = running((0, "500", 500), t0, Some(t0 + secs(4)));
        let prev = Snapshot {
            opened: 400,
            failed: 1,
            ..Default::default()
        };
        let cur = Snapshot {
            opened: 499,
            closed: 300,
            failed: 1,
            ..Default::default()
        };
        let z = Snapshot::default();
        let (head, figures) = lines(&o, &course, t0 + secs(4), t0, [&z, &prev, &cur]);
        assert!(head.contains("0:04 / 0:04, 0:00 left"), "{head}");
        assert!(head.ends_with("run 0:04, ~0:00 left"), "{head}");
        assert_eq!(
            figures,
            "499/500 opened, 199 open, 99 connections/s, 1 failed"
        );
    }

    #[test]
    fn a_limit_search_has_no_fixed_end() {
        let s = spec("  target: {server: {}}\n  scenario: connectionLimit\n");
        let o = Outline::new(&Plan::new(&s, Shard::WHOLE).expect("compiles"));
        assert!(o.cells.is_empty() && o.probe.is_some());
        let t0 = Instant::now();
        let course = running((3, "8000", 8000), t0 + secs(50), Some(t0 + secs(52)));
        let z = Snapshot::default();
        let (head, figures) = lines(&o, &course, t0 + secs(53), t0, [&z, &z, &z]);
        assert!(head.starts_with("probe 4: 8000 connections  "), "{head}");
        assert!(
            head.ends_with("run 0:53, no fixed end (limit search)"),
            "{head}"
        );
        assert!(figures.starts_with("pings 0 sent, 0 answered, 0 lost, p99 -"));
    }

    #[test]
    fn ping_counts_end_when_their_pings_do() {
        let s = spec("  target: {server: {}}\n  scenario: pingLatency\n  connections: [10, 20]\n");
        let o = Outline::new(&Plan::new(&s, Shard::WHOLE).expect("compiles"));
        assert_eq!(o.cells[0].measured, None);
        let t0 = Instant::now();
        let course = running((0, "10", 10), t0, Some(t0));
        let z = Snapshot::default();
        let (head, _) = lines(&o, &course, t0 + secs(75), t0, [&z, &z, &z]);
        assert!(
            head.starts_with("tier 1/2: 10 connections  pinging 1:15, until its pings are done"),
            "{head}"
        );
        assert!(head.contains("end not known"), "{head}");
    }

    #[test]
    fn clock_reads_minutes_then_hours() {
        assert_eq!(clock(secs(5)), "0:05");
        assert_eq!(clock(secs(125)), "2:05");
        assert_eq!(clock(secs(3725)), "1:02:05");
        assert_eq!(bar(0.5), format!("[{}{}]", "#".repeat(10), "-".repeat(10)));
    }
}
