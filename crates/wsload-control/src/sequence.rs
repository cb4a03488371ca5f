//! Which cell runs next. Planned scenarios run their cells in a fixed order (tiers; sizes x
//! tiers; formats x tiers). connectionLimit searches: probes double from `limit.start` until
//! one fails or `limit.max` holds, then halve the gap down to `limit.resolution`, each probe
//! judged on its outcome merged over every shard, so all shards probe the same number.

use crate::protocol::{CellKey, CellSummary};
use wsload_report::report::Probe;
use wsload_spec::scenario::Cells;
use wsload_spec::{Format, LoadTestSpec};

/// Payload sizes of the payloadMatrix scenario when the spec lists none (the seed's).
pub const DEFAULT_SIZES: [u32; 6] = [64, 256, 1024, 4096, 16384, 65536];
/// Formats of the formatComparison scenario when the spec lists none.
pub const DEFAULT_FORMATS: [Format; 3] = [Format::Json, Format::Msgpack, Format::Zlib];

/// Every planned cell of a spec, in run order; empty for connectionLimit (its probes are
/// decided as it goes).
pub fn planned(spec: &LoadTestSpec) -> Vec<CellKey> {
    let size = spec.message.size;
    let format = spec.message.format;
    let tiers = &spec.connections;
    let cells: Vec<(String, u32, u32, Format)> = match spec.scenario.profile().cells {
        Cells::SizesByTiers => {
            let sizes = if spec.sizes.is_empty() {
                DEFAULT_SIZES.to_vec()
            } else {
                spec.sizes.clone()
            };
            sizes
                .iter()
                .flat_map(|&s| tiers.iter().map(move |&n| (s, n)))
                .map(|(s, n)| (format!("{} x {n}", human_bytes(s)), n, s, format))
                .collect()
        }
        Cells::FormatsByTiers => {
            let formats = if spec.formats.is_empty() {
                DEFAULT_FORMATS.to_vec()
            } else {
                spec.formats.clone()
            };
            formats
                .iter()
                .flat_map(|&f| tiers.iter().map(move |&n| (f, n)))
                .map(|(f, n)| (format!("{} x {n}", f.as_str()), n, size, f))
                .collect()
        }
        Cells::Search => Vec::new(),
        Cells::Tiers => tiers
            .iter()
            .map(|&n| (n.to_string(), n, size, format))
            .collect(),
    };
    cells
        .into_iter()
        .zip(0u32..)
        .map(|((label, connections, size, format), index)| CellKey {
            index,
            label,
            connections,
            size,
            format,
        })
        .collect()
}

pub fn human_bytes(b: u32) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1024 && b % 1024 == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// connectionLimit's search state.
#[derive(Debug, Clone)]
struct Search {
    /// The largest probe that held.
    lo: u32,
    /// The smallest probe that failed, once one did.
    hi: Option<u32>,
    start: u32,
    max: u32,
    resolution: u32,
    max_error_rate: f64,
}

impl Search {
    /// The probe after `n`, which `passed` or not; `None` when the search is over.
    fn after(&mut self, n: u32, passed: bool) -> Option<u32> {
        if passed {
            self.lo = self.lo.max(n);
        } else {
            self.hi = Some(self.hi.map_or(n, |h| h.min(n)));
        }
        match self.hi {
            None if n >= self.max => None,
            None => Some(n.saturating_mul(2).min(self.max)),
            Some(hi) if hi.saturating_sub(self.lo) > self.resolution => {
                Some(self.lo + (hi - self.lo) / 2)
            }
            Some(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
enum Plan {
    Cells(Vec<CellKey>),
    Limit(Search),
}

/// The conductor's memory of a test: the cells issued, and for connectionLimit the probes
/// judged. Call [`Conductor::next`] once per finished cell, with that cell's merged outcome.
#[derive(Debug, Clone)]
pub struct Conductor {
    plan: Plan,
    size: u32,
    format: Format,
    issued: Vec<CellKey>,
    probes: Vec<Probe>,
}

impl Conductor {
    pub fn new(spec: &LoadTestSpec) -> Conductor {
        let l = &spec.limit;
        Conductor {
            plan: if spec.scenario.profile().cells == Cells::Search {
                Plan::Limit(Search {
                    lo: 0,
                    hi: None,
                    start: l.start,
                    max: l.max,
                    resolution: l.resolution.max(1),
                    max_error_rate: l.max_error_rate.0,
                })
            } else {
                Plan::Cells(planned(spec))
            },
            size: spec.message.size,
            format: spec.message.format,
            issued: Vec::new(),
            probes: Vec::new(),
        }
    }

    /// The first cell of a spec: what a shard released without a named cell runs.
    pub fn first(spec: &LoadTestSpec) -> Option<CellKey> {
        Conductor::new(spec).next(None)
    }

    /// The cell to run after the last issued one finished with `last` (merged over every
    /// shard; `None` before the first cell), or `None` when the test is over.
    pub fn next(&mut self, last: Option<&CellSummary>) -> Option<CellKey> {
        let index = u32::try_from(self.issued.len()).unwrap_or(u32::MAX);
        let key = match &mut self.plan {
            Plan::Cells(cells) => cells.get(self.issued.len()).cloned(),
            Plan::Limit(search) => {
                let n = match (self.issued.last(), last) {
                    (None, _) => Some(search.start),
                    (Some(prev), Some(outcome)) => {
                        let error_rate = if outcome.attempted > 0 {
                            outcome.failed as f64 / outcome.attempted as f64
                        } else {
                            1.0
                        };
                        let passed = error_rate < search.max_error_rate;
                        self.probes.push(Probe {
                            connections: prev.connections,
                            error_rate,
                            passed,
                        });
                        search.after(prev.connections, passed)
                    }
                    // Without the outcome of the last probe there is nothing to judge on:
                    // the search ends with what it has.
                    (Some(_), None) => None,
                };
                n.map(|n| CellKey {
                    index,
                    label: n.to_string(),
                    connections: n,
                    size: self.size,
                    format: self.format,
                })
            }
        }?;
        self.issued.push(key.clone());
        Some(key)
    }

    pub fn issued(&self) -> &[CellKey] {
        &self.issued
    }

    /// connectionLimit's judged probes, in order.
    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// The largest probe that held, once the search is over.
    pub fn limit(&self) -> Option<u32> {
        match &self.plan {
            Plan::Limit(s) => (s.lo > 0).then_some(s.lo),
            Plan::Cells(_) => None,
        }
    }

    pub fn is_search(&self) -> bool {
        matches!(self.plan, Plan::Limit(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_spec::fixtures::spec;

    fn outcome(attempted: u64, failed: u64) -> CellSummary {
        CellSummary {
            attempted,
            failed,
            ..Default::default()
        }
    }

    #[test]
    fn planned_cells_come_in_order_then_end() {
        let s = spec(
            "  target: {server: {}}\n  scenario: payloadMatrix\n  connections: [10, 20]\n  sizes: [64, 1024]\n",
        );
        let mut c = Conductor::new(&s);
        let mut labels = Vec::new();
        let mut last = None;
        while let Some(k) = c.next(last.as_ref()) {
            assert_eq!(k.index as usize, labels.len());
            labels.push(k.label);
            last = Some(outcome(1, 0));
        }
        assert_eq!(
            labels,
            ["64 B x 10", "64 B x 20", "1 KiB x 10", "1 KiB x 20"]
        );
        assert!(c.probes().is_empty() && c.limit().is_none());
    }

    /// A server that holds `cap` connections: the search judged on merged outcomes finds it
    /// to within the resolution.
    #[test]
    fn the_search_finds_the_cap_from_merged_probes() {
        let s = spec(
            "  target: {server: {}}\n  scenario: connectionLimit\n  limit: {start: 100, max: 10000, resolution: 50, maxErrorRate: 1%}\n",
        );
        let cap = 1234u64;
        let mut c = Conductor::new(&s);
        let mut last = None;
        let mut probes = Vec::new();
        while let Some(k) = c.next(last.as_ref()) {
            probes.push(k.connections);
            let n = u64::from(k.connections);
            last = Some(outcome(n, n.saturating_sub(cap)));
        }
        assert_eq!(&probes[..5], &[100, 200, 400, 800, 1600]);
        let limit = c.limit().expect("a limit");
        assert!(limit <= 1234 && 1234 - limit <= 50, "{limit} {probes:?}");
        assert_eq!(c.probes().len(), probes.len());
        assert!(
            c.probes()
                .iter()
                .all(|p| p.passed == (u64::from(p.connections) <= cap))
        );
    }

    #[test]
    fn a_search_that_holds_max_stops_there() {
        let s = spec(
            "  target: {server: {}}\n  scenario: connectionLimit\n  limit: {start: 100, max: 300}\n",
        );
        let mut c = Conductor::new(&s);
        let mut last = None;
        let mut probes = Vec::new();
        while let Some(k) = c.next(last.as_ref()) {
            probes.push(k.connections);
            last = Some(outcome(u64::from(k.connections), 0));
        }
        assert_eq!(probes, [100, 200, 300]);
        assert_eq!(c.limit(), Some(300));
    }
}
