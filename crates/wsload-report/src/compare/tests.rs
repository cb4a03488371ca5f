use super::*;
use crate::fixtures;
use crate::timeline::Sample;
use std::time::Duration;

/// A deterministic stream of uniform draws in (0, 1) (xorshift64*): the same runs every time.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// A run of one cell: `n` round trips of `base_us` plus an exponential tail of mean `tail_us`
/// (what an echo's latencies look like), and 10 s of 100 ms steps receiving `rate` a second
/// give or take 5%.
fn run(seed: u64, n: usize, base_us: f64, tail_us: f64, rate: f64) -> RunResult {
    let mut d = Draws(seed.max(1));
    let mut r = fixtures::shard(0, 0, 1, 0);
    let cell = &mut r.cells[0];
    cell.measure.hists.rtt = Hist::new();
    for _ in 0..n {
        let us = base_us - tail_us * d.next().ln();
        cell.measure
            .hists
            .rtt
            .record(Duration::from_micros(us as u64));
    }
    cell.measure.counts.expected = n as u64;
    cell.measured_secs = 10.0;
    cell.timeline = (0..100)
        .map(|at| Sample {
            at,
            received: (rate / 10.0 * (0.95 + 0.1 * d.next())) as u64,
            ..Sample::default()
        })
        .collect();
    cell.timeline_step_ms = 100;
    cell.measure.counts.received = cell.timeline.iter().map(|s| s.received).sum();
    cell.compute();
    r
}

fn figure<'a>(c: &'a Comparison, name: &str) -> &'a Figure {
    c.cells[0]
        .figures
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no {name} in {c:#?}"))
}

#[test]
fn two_runs_of_one_distribution_are_the_same() {
    let s = Settings::default();
    for seed in 1..=5 {
        let c = compare(
            &run(seed, 200_000, 800.0, 200.0, 10_000.0),
            &run(seed + 100, 200_000, 800.0, 200.0, 10_000.0),
            &s,
        )
        .expect("comparable");
        assert_eq!(c.verdict, Change::Same, "seed {seed}: {}", text::render(&c));
    }
}

#[test]
fn answers_two_ms_later_regress_every_percentile_and_say_so() {
    let c = compare(
        &run(1, 200_000, 800.0, 200.0, 10_000.0),
        &run(2, 200_000, 2800.0, 200.0, 10_000.0),
        &Settings::default(),
    )
    .expect("comparable");
    assert_eq!(c.verdict, Change::Regressed);
    for p in ["rtt p50", "rtt p90", "rtt p99", "rtt p99.9"] {
        assert_eq!(
            figure(&c, p).verdict,
            Change::Regressed,
            "{}",
            text::render(&c)
        );
    }
    assert_eq!(figure(&c, "received/s").verdict, Change::Same);
    let p50 = figure(&c, "rtt p50");
    assert!(
        p50.change.is_some_and(|x| (2.0..2.5).contains(&x)),
        "{p50:?}"
    );
    let line = text::verdict_line(&c);
    assert_eq!(
        line,
        "Regressed (cell 100: rtt p50, rtt p90, rtt p99, rtt p99.9)"
    );
    assert!(
        text::render(&c).contains("99% intervals"),
        "{}",
        text::render(&c)
    );
    // And the other way round: Improved.
    let c = compare(
        &run(2, 200_000, 2800.0, 200.0, 10_000.0),
        &run(1, 200_000, 800.0, 200.0, 10_000.0),
        &Settings::default(),
    )
    .expect("comparable");
    assert_eq!(c.verdict, Change::Improved, "{}", text::render(&c));
}

#[test]
fn a_significant_shift_smaller_than_the_minimum_effect_is_the_same() {
    // 3% slower over two million samples: far beyond noise, and under the default 25%.
    let (base, new) = (
        run(1, 2_000_000, 1000.0, 100.0, 10_000.0),
        run(2, 2_000_000, 1030.0, 100.0, 10_000.0),
    );
    let c = compare(&base, &new, &Settings::default()).expect("comparable");
    assert_eq!(
        figure(&c, "rtt p50").verdict,
        Change::Same,
        "{}",
        text::render(&c)
    );
    // Asked to count 2%, it is a regression.
    let strict = Settings {
        min_effect: 0.02,
        ..Settings::default()
    };
    let c = compare(&base, &new, &strict).expect("comparable");
    assert_eq!(
        figure(&c, "rtt p50").verdict,
        Change::Regressed,
        "{}",
        text::render(&c)
    );
}

#[test]
fn a_third_less_throughput_regresses_and_a_loss_from_none_does() {
    let base = run(1, 100_000, 800.0, 200.0, 10_000.0);
    let mut new = run(2, 100_000, 800.0, 200.0, 6_500.0);
    new.cells[0].measure.counts.lost = 50;
    new.cells[0].compute();
    let c = compare(&base, &new, &Settings::default()).expect("comparable");
    let rate = figure(&c, "received/s");
    assert_eq!(rate.verdict, Change::Regressed, "{}", text::render(&c));
    assert!(rate.evidence.starts_with("Welch's t "), "{rate:?}");
    let lost = figure(&c, "lost");
    assert_eq!(lost.verdict, Change::Regressed, "{lost:?}");
    assert_eq!(lost.change, None);
    // A run too short for two one-second batches says its rate is untested.
    let mut short = run(3, 1000, 800.0, 200.0, 5_000.0);
    short.cells[0].timeline.truncate(15);
    let c = compare(&base, &short, &Settings::default()).expect("comparable");
    let rate = figure(&c, "received/s");
    assert_eq!(rate.verdict, Change::Same);
    assert_eq!(
        rate.evidence,
        "untested: fewer than 2 whole batches on a side"
    );
}

#[test]
fn runs_of_other_cells_or_scenarios_are_not_compared() {
    let base = run(1, 1000, 800.0, 200.0, 10_000.0);
    let mut other = base.clone();
    other.cells[0].label = "1000".into();
    assert_eq!(
        compare(&base, &other, &Settings::default()).map(|_| ()),
        Err(Incomparable::Cells {
            base: vec!["100".into()],
            new: vec!["1000".into()]
        })
    );
    let mut fanout = base.clone();
    fanout.scenario = wsload_spec::Scenario::Fanout;
    let e = compare(&base, &fanout, &Settings::default()).map(|_| ());
    assert!(matches!(e, Err(Incomparable::Scenario { .. })), "{e:?}");
    let mut bigger = base.clone();
    bigger.cells[0].size = 4096;
    let e = compare(&base, &bigger, &Settings::default()).map_err(|e| e.to_string());
    assert_eq!(
        e.map(|_| ()),
        Err("cell 100 differs: base 200 connections, 64 B text, 0 msg/s, new 200 connections, 4096 B text, 0 msg/s; compare runs of the same connections, sizes, formats and rates".to_string())
    );
    let mut search = base.clone();
    search.scenario = wsload_spec::Scenario::ConnectionLimit;
    assert_eq!(
        compare(&search, &search, &Settings::default()).map(|_| ()),
        Err(Incomparable::Search)
    );
    let mut empty = base.clone();
    empty.cells.clear();
    assert_eq!(
        compare(&empty, &base, &Settings::default()).map(|_| ()),
        Err(Incomparable::Empty { which: "base" })
    );
}

#[test]
fn a_percentile_with_few_samples_beyond_it_is_untested() {
    // 500 round trips: 5 beyond p99, none beyond p99.9; 50 beyond p90.
    let c = compare(
        &run(1, 500, 800.0, 200.0, 1_000.0),
        &run(2, 500, 2800.0, 200.0, 1_000.0),
        &Settings::default(),
    )
    .expect("comparable");
    for p in ["rtt p99", "rtt p99.9"] {
        let f = figure(&c, p);
        assert_eq!(f.verdict, Change::Same, "{f:?}");
        assert_eq!(
            f.evidence,
            "untested: 500 samples leave fewer than 10 beyond the percentile"
        );
    }
    assert_eq!(figure(&c, "rtt p90").verdict, Change::Regressed);
    // A pingpong's connect times are its setup: not compared.
    assert!(
        c.cells[0]
            .figures
            .iter()
            .all(|f| !f.name.starts_with("connect"))
    );
}

#[test]
fn connections_refused_or_dropped_by_the_server_regress_and_wsloads_own_drops_do_not() {
    let base = run(1, 100_000, 800.0, 200.0, 10_000.0);
    let mut new = run(2, 100_000, 800.0, 200.0, 10_000.0);
    let counts = &mut new.cells[0].measure.counts;
    counts.attempted = 10_000;
    counts.connected = 9_000;
    counts.dropped.insert(Dropped::Disrupted, 5_000);
    new.cells[0].compute();
    let c = compare(&base, &new, &Settings::default()).expect("comparable");
    assert_eq!(
        figure(&c, "not connected").verdict,
        Change::Regressed,
        "{}",
        text::render(&c)
    );
    assert_eq!(figure(&c, "dropped").new, 0.0);
    assert_eq!(figure(&c, "dropped").verdict, Change::Same);
}

#[test]
fn a_late_sample_does_not_make_a_batch_longer_than_a_second() {
    let mut r = run(1, 1000, 800.0, 200.0, 10_000.0);
    // The sample of step 5 went into step 6's (a late tick): the first second has 9 samples.
    r.cells[0].timeline.retain(|s| s.at != 5);
    let (rates, ms) = batches(&r.cells[0]);
    assert_eq!(ms, 1000);
    assert_eq!(rates.len(), 9, "{rates:?}");
}

#[test]
fn shares_and_changes_read_with_the_decimals_they_need() {
    assert_eq!(text::percent(0.25), "25%");
    assert_eq!(text::percent(0.999), "99.9%");
    assert_eq!(text::percent(0.025), "2.5%");
}
