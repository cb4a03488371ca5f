//! The merge of shard results: counts and histograms add exactly, so the figures and the
//! verdict of the merged result are those of one run that did all the shards' work.

use crate::result::RunResult;
use crate::timeline;

impl RunResult {
    /// Adds another shard's result of the same test: counts and histograms add exactly.
    pub fn merge(&mut self, other: &RunResult) -> Result<(), MergeError> {
        if other.test != self.test
            || other.scenario != self.scenario
            || other.cells.len() != self.cells.len()
        {
            return Err(MergeError::OtherTest {
                test: self.test.clone(),
                cells: self.cells.len(),
                other_test: other.test.clone(),
                other_cells: other.cells.len(),
            });
        }
        if let Some(&s) = other.shards.iter().find(|s| self.shards.contains(s)) {
            return Err(MergeError::ShardTwice(s));
        }
        self.shards.extend(&other.shards);
        self.shards.sort_unstable();
        for (a, b) in self.cells.iter_mut().zip(&other.cells) {
            if a.label != b.label {
                return Err(MergeError::OtherCell {
                    cell: a.label.clone(),
                    other_cell: b.label.clone(),
                });
            }
            a.measure.add(&b.measure);
            a.connect_secs = a.connect_secs.max(b.connect_secs);
            a.measured_secs = a.measured_secs.max(b.measured_secs);
            a.start_skew_us = a.start_skew_us.max(b.start_skew_us);
            // What the servers received is the conductor's to read, over all shards at once
            // (wsload_control::assemble); a shard's own reading would count the others'.
            a.server_received = None;
            a.server_topics = None;
            a.server_connections = None;
            a.started_first_micros = match (a.started_first_micros, b.started_first_micros) {
                (0, x) | (x, 0) => x,
                (x, y) => x.min(y),
            };
            a.started_last_micros = a.started_last_micros.max(b.started_last_micros);
            timeline::merge(
                &mut a.timeline,
                &mut a.timeline_step_ms,
                &b.timeline,
                b.timeline_step_ms,
            );
            a.loadgen_cpu = match (a.loadgen_cpu, b.loadgen_cpu) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
            crate::kernel::merge(&mut a.kernel, &b.kernel);
            a.compute();
        }
        for note in &other.notes {
            add_note(&mut self.notes, note);
        }
        self.shard_info.extend(other.shard_info.iter().cloned());
        self.shard_info.sort_by_key(|s| s.index);
        self.started_at_unix_ms = self.started_at_unix_ms.min(other.started_at_unix_ms);
        if self.spec.is_none() {
            self.spec = other.spec.clone();
        }
        self.judge();
        Ok(())
    }
}

/// Why two results do not merge: they are not shards of one test, or not different shards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// Another test, another scenario, or a plan of another number of cells.
    #[error(
        "results of different tests or plans: {test} ({cells} cells) vs {other_test} ({other_cells} cells)"
    )]
    OtherTest {
        test: String,
        cells: usize,
        other_test: String,
        other_cells: usize,
    },
    #[error("shard {0} is in both results")]
    ShardTwice(u32),
    /// The plans have as many cells, but not the same ones.
    #[error("cell {cell:?} does not match {other_cell:?}")]
    OtherCell { cell: String, other_cell: String },
}

/// How a note several shards made says how many: `<note> [N shards]`.
const SHARDS_SUFFIX: &str = " shards]";

/// A note and how many shards made it (1 without the suffix).
fn counted(note: &str) -> (&str, u64) {
    note.strip_suffix(SHARDS_SUFFIX)
        .and_then(|n| n.rsplit_once(" ["))
        .and_then(|(text, k)| Some((text, k.parse().ok()?)))
        .unwrap_or((note, 1))
}

/// Adds a shard's `note` to `notes`: a note other shards made already is counted in theirs
/// instead of repeated (500 shards that each hit the same limit say so once).
fn add_note(notes: &mut Vec<String>, note: &str) {
    let (text, k) = counted(note);
    match notes.iter_mut().find(|n| counted(n).0 == text) {
        Some(n) => {
            let total = counted(n).1 + k;
            *n = format!("{text} [{total}{SHARDS_SUFFIX}");
        }
        None => notes.push(note.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;
    use crate::measure::ConnectError;

    #[test]
    fn results_that_are_not_other_shards_of_one_test_do_not_merge() {
        let mut merged = shard(0, 10, 1, 0);
        let again = merged
            .merge(&shard(0, 10, 1, 0))
            .expect_err("shard 0 twice");
        assert_eq!(again.to_string(), "shard 0 is in both results");
        let mut other = shard(1, 10, 1, 0);
        other.test = "other".into();
        let e = merged.merge(&other).expect_err("another test");
        assert_eq!(
            e.to_string(),
            format!(
                "results of different tests or plans: {} (1 cells) vs other (1 cells)",
                merged.test
            )
        );
    }

    #[test]
    fn a_note_every_shard_made_is_kept_once_with_its_count() {
        let note = "this process hit its open-file limit";
        let part = |index| {
            let mut r = shard(index, 10, 1, 0);
            r.notes = vec![note.to_string(), format!("shard {index} only")];
            r
        };
        let mut merged = part(0);
        for index in 1..500 {
            merged.merge(&part(index)).expect("merge");
        }
        assert_eq!(merged.notes.len(), 1 + 500, "{:?}", &merged.notes[..3]);
        assert_eq!(merged.notes[0], format!("{note} [500 shards]"));
        // Merged results merge again (the operator's incremental merge) and keep counting.
        let mut others = part(500);
        for index in 501..600 {
            others.merge(&part(index)).expect("merge");
        }
        merged.merge(&others).expect("merge");
        assert_eq!(merged.notes[0], format!("{note} [600 shards]"));
    }

    #[test]
    fn two_shards_merge_to_exact_counts_and_histograms() {
        // Shard 1's p99 alone fails the threshold; after the merge its samples are 1/3 of the
        // whole, so the merged p99 is still 10 ms: the verdict comes from the merged histogram.
        let a = shard(0, 2000, 1, 1_000_000_000);
        let b = shard(1, 1000, 10, 1_000_012_345);
        assert!(a.verdict.as_ref().is_some_and(|v| v.passed));
        // Through JSON, as the operator gets them.
        let a: RunResult =
            serde_json::from_str(&serde_json::to_string(&a).expect("ser")).expect("de");
        let b: RunResult =
            serde_json::from_str(&serde_json::to_string(&b).expect("ser")).expect("de");
        let mut merged = b.clone();
        merged.merge(&a).expect("merge");
        let c = &merged.cells[0];
        assert_eq!(merged.shards, vec![0, 1]);
        assert_eq!(c.measure.counts.sent, 3000);
        assert_eq!(c.measure.counts.sent_with_warmup, 3020);
        assert_eq!(c.measure.counts.attempted, 200);
        assert_eq!(c.measure.counts.connected, 198);
        assert_eq!(c.measure.counts.failed[&ConnectError::Refused], 2);
        assert_eq!(c.measure.hists.rtt.len(), 3000);
        assert_eq!(c.figures.rtt.count, 3000);
        // 2000 samples at 1 ms, 1000 at 10 ms: the exact p50 and p99 of the union.
        assert!(
            (c.figures.rtt.p50 - 0.001).abs() < 1e-5,
            "{}",
            c.figures.rtt.p50
        );
        assert!(
            (c.figures.rtt.p99 - 0.010).abs() < 1e-4,
            "{}",
            c.figures.rtt.p99
        );
        // The longer window of the two is the one rates are computed over.
        assert_eq!(c.measured_secs, 11.0);
        assert_eq!(c.figures.sent_per_sec, 3000.0 / 11.0);
        let v = merged.verdict.as_ref().expect("judged");
        assert!(!v.passed, "{v:?}");
        assert_eq!(merged.started_at_unix_ms, 1_000_000);
        assert_eq!(
            merged
                .shard_info
                .iter()
                .map(|s| s.index)
                .collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(merged.start_skew_micros(), Some(12_345));
        // Each cell's skew: the spread of the shards' starts of that cell.
        assert_eq!(c.shard_skew_ms(), Some(12.345));
        assert!(
            merged.render().contains("100 12.3 ms"),
            "{}",
            merged.render()
        );
        // A merge of shard results never claims a delivery: the conductor reads the servers.
        assert_eq!(c.server_received, None);
        // A shard merged twice is refused, not double-counted.
        assert!(merged.merge(&a).is_err());
        assert_eq!(merged.cells[0].measure.counts.sent, 3000);
    }

    /// Two shards in one namespace (a local run) count it once and say who shared it; a shard
    /// in another namespace (another pod) adds its own. Through JSON, as the operator gets them.
    #[test]
    fn kernel_figures_count_each_namespace_once() {
        use crate::fixtures::kernel;
        use crate::kernel::LISTEN_OVERFLOWS;
        let part = |index: u32, inode: u64, overflows: u64| {
            let mut r = shard(index, 10, 1, 1);
            r.shard_count = 3;
            r.cells[0].kernel = vec![kernel(index, inode, overflows)];
            let json = serde_json::to_string(&r).expect("ser");
            serde_json::from_str::<RunResult>(&json).expect("de")
        };
        let mut merged = part(1, 4026532001, 7);
        merged.merge(&part(0, 4026532001, 6)).expect("merge");
        let k = &merged.cells[0].kernel;
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].shards, [0, 1]);
        assert_eq!(k[0].increase(LISTEN_OVERFLOWS), 6, "shard 0's reading");
        merged.merge(&part(2, 4026532002, 5)).expect("merge");
        let k = &merged.cells[0].kernel;
        assert_eq!(k.len(), 2);
        assert_eq!(k[1].shards, [2]);
        assert_eq!(crate::kernel::summed(k)[LISTEN_OVERFLOWS], 6 + 5);
        let text = merged.render();
        assert!(
            text.contains("kernel [100] net:[4026532001] (shards 0-1): TcpExtListenOverflows +6, TcpExtListenDrops +6, TcpActiveOpens +100; TCP 200 in use, 118 pages of tcp_mem 287898/383867/575796\n"),
            "{text}"
        );
        assert!(
            text.contains("TcpExtListenOverflows +11, TcpExtListenDrops +11 in 2 namespaces (net:[4026532001] of shards 0-1, net:[4026532002] of shard 2))"),
            "{text}"
        );
        // Results written before kernel figures still read, and say nothing of the kernel.
        let old = shard(0, 10, 1, 1);
        let json = serde_json::to_string(&old).expect("ser");
        assert!(!json.contains("\"kernel\""), "{json}");
        let back: RunResult = serde_json::from_str(&json).expect("de");
        assert!(back.cells[0].kernel.is_empty());
        assert!(!back.render().contains("kernel ["));
    }

    #[test]
    fn results_without_shard_info_still_merge() {
        let mut a = shard(0, 10, 1, 0);
        a.shard_info.clear();
        let json = serde_json::to_string(&a).expect("ser");
        assert!(!json.contains("shardInfo"), "{json}");
        let a: RunResult = serde_json::from_str(&json).expect("de");
        let mut b = shard(1, 10, 1, 7);
        b.merge(&a).expect("merge");
        assert_eq!(b.cells[0].measure.counts.sent, 20);
        assert_eq!(b.start_skew_micros(), None);
    }

    #[test]
    fn merge_adds_timelines_by_step_and_keeps_the_busiest_cpu() {
        use crate::timeline::{Recorder, Totals};
        let with_samples = |index, per_step: u64, steps: u32, cpu| {
            let mut r = shard(index, 10, 1, 1);
            let mut rec = Recorder::new(Totals::default(), 100);
            for s in 0..steps {
                let n = per_step * u64::from(s + 1);
                rec.tick(
                    s,
                    Totals {
                        sent: n,
                        received: n,
                        open: 3,
                        ..Totals::default()
                    },
                    None,
                );
            }
            (r.cells[0].timeline_step_ms, r.cells[0].timeline) = rec.finish();
            r.cells[0].loadgen_cpu = cpu;
            // Through JSON, as the operator gets shard results.
            let json = serde_json::to_string(&r).expect("ser");
            serde_json::from_str::<RunResult>(&json).expect("de")
        };
        let mut a = with_samples(0, 100, 3, Some(0.4));
        a.merge(&with_samples(1, 10, 4, Some(0.95))).expect("merge");
        let t = &a.cells[0].timeline;
        let got: Vec<(u32, u64, u64)> = t.iter().map(|s| (s.at, s.sent, s.open)).collect();
        assert_eq!(got, vec![(0, 110, 6), (1, 110, 6), (2, 110, 6), (3, 10, 3)]);
        assert_eq!(a.cells[0].loadgen_cpu, Some(0.95));
        // A shard that recorded neither leaves the others' as they were.
        let mut old = shard(2, 10, 1, 1);
        old.shard_count = 3;
        a.merge(&old).expect("merge");
        assert_eq!(a.cells[0].timeline.len(), 4);
        assert_eq!(a.cells[0].loadgen_cpu, Some(0.95));
    }
}
