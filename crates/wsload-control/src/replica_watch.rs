//! The managed server's replicas read every [`BUCKET_MS`] while a disrupted cell runs: how many
//! connections they admitted in each 100 ms of the measured phase (what the reconnect attempts
//! met) and how many each held (what a replica back took of its share). `wsload run` reads
//! them on a thread, the operator on a task; both turn their readings into figures here. Their
//! counters cannot be read only between cells, as the other server counters are: a kill takes
//! what a process counted with it.

use wsload_contract::server_metrics as metric;
use wsload_http::scrape;
use wsload_report::reconnect::{BUCKET_MS, Reconnects, add_at};

/// What one replica answered: its admissions so far and the connections it holds; `None` when
/// it did not answer (down, not started yet, or slow).
pub type Reading = Option<Replica>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replica {
    /// Which process answered (a pod's UID hashed, a local process's id): one that differs
    /// from the last answer's is a replica started again, its counter begun anew even if it
    /// has already counted past the old one's last value. 0 when unknown: then only a counter
    /// that went down tells a restart.
    pub instance: u64,
    pub accepted: u64,
    pub active: u64,
}

/// A replica's reading from its exposition (`instance` as [`Replica::instance`]); `None` when
/// it has no admissions counter (a server other than wsload-server).
pub fn parse(body: &str, instance: u64) -> Reading {
    let any = Default::default();
    let accepted = scrape::find(body, metric::CONNECTIONS_ACCEPTED, &any)?;
    let active = scrape::find(body, metric::CONNECTIONS_ACTIVE, &any).unwrap_or(0.0);
    Some(Replica {
        instance,
        accepted: accepted as u64,
        active: active as u64,
    })
}

/// One cell's readings, turned into admissions per [`BUCKET_MS`] as they come.
#[derive(Debug, Default, Clone)]
pub struct Readings {
    /// Each replica's last answer: which process, and its admissions then.
    last: Vec<Option<(u64, u64)>>,
    /// The last reading's instant, ms into the measured phase.
    last_at: u64,
    /// Admissions per [`BUCKET_MS`] of the phase, every replica summed.
    accepts: Vec<u64>,
    /// Each reading's instant and what each replica held then.
    held: Vec<(u64, Vec<Option<u64>>)>,
}

impl Readings {
    /// Starts from what the replicas answered at `at` ms into the phase (0: as it began):
    /// admissions before it are not counted.
    pub fn starting(at: u64, first: &[Reading]) -> Readings {
        Readings {
            last: first
                .iter()
                .map(|r| r.map(|r| (r.instance, r.accepted)))
                .collect(),
            last_at: at,
            ..Readings::default()
        }
    }

    /// Spreads what was admitted since the last reading over the [`BUCKET_MS`] steps between
    /// the two (`at`: ms into the phase), each its share of the interval: a reading that came
    /// late must not pile several steps' admissions into one and pass for a peak.
    pub fn record(&mut self, at: u64, now: &[Reading]) {
        self.last.resize(now.len(), None);
        let mut admitted = 0;
        let mut held = Vec::with_capacity(now.len());
        for (seen, reading) in self.last.iter_mut().zip(now) {
            let Some(r) = *reading else {
                // Down, or slow to answer: what it admits next counts from its next answer
                // (a replica started again counts from zero).
                held.push(None);
                continue;
            };
            admitted += match *seen {
                Some((instance, before))
                    if r.accepted >= before && (instance == r.instance || r.instance == 0) =>
                {
                    r.accepted - before
                }
                // Started again since: its counter began anew.
                Some(_) => r.accepted,
                None => 0,
            };
            *seen = Some((r.instance, r.accepted));
            held.push(Some(r.active));
        }
        spread(
            &mut self.accepts,
            self.last_at,
            at.max(self.last_at),
            admitted,
        );
        self.last_at = at.max(self.last_at);
        // A day of readings at most (a task that outlived its cell stops counting here).
        if self.held.len() < 864_000 {
            self.held.push((at, held));
        }
    }

    /// Puts the readings of a phase that lasted `window_ms` into its reconnect figures: the
    /// admissions up to its end, and what each replica held at the last reading before it (the
    /// connections close after it).
    pub fn into_figures(&self, window_ms: u64, r: &mut Reconnects) {
        let buckets = usize::try_from(window_ms.div_ceil(BUCKET_MS)).unwrap_or(usize::MAX);
        r.server_accepts = self.accepts.iter().take(buckets).copied().collect();
        if let Some((_, held)) = self.held.iter().rev().find(|(ms, _)| *ms < window_ms) {
            r.replicas_held.clone_from(held);
        }
    }
}

/// Adds `n` over `[from, to)` ms: to each [`BUCKET_MS`] step its share of the interval (what
/// rounding leaves, to the last step).
fn spread(series: &mut Vec<u64>, from: u64, to: u64, n: u64) {
    if n == 0 {
        return;
    }
    if to <= from {
        add_at(series, from, n);
        return;
    }
    let span = to - from;
    let mut given = 0;
    let mut t = from;
    while t < to {
        let end = ((t / BUCKET_MS + 1) * BUCKET_MS).min(to);
        let share = if end == to {
            n - given
        } else {
            u64::try_from(u128::from(n) * u128::from(end - t) / u128::from(span)).unwrap_or(0)
        };
        add_at(series, t, share);
        given += share;
        t = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(accepted: u64, active: u64) -> Reading {
        Some(Replica {
            instance: 1,
            accepted,
            active,
        })
    }

    #[test]
    fn reads_wsload_servers_admissions_and_what_it_holds() {
        let body = "wsload_server_connections_active 7\n\
            wsload_server_connections_accepted_total{profile=\"echo\"} 90\n\
            wsload_server_connections_accepted_total{profile=\"sink\"} 10\n";
        assert_eq!(parse(body, 1), up(100, 7));
        assert_eq!(parse("other_total 3\n", 1), None);
    }

    #[test]
    fn admissions_are_spread_between_readings_and_a_restart_counts_from_zero() {
        let mut r = Readings::starting(0, &[up(100, 100), up(100, 100)]);
        // 100 ms in: replica 1 killed, replica 0 admitted 30.
        r.record(100, &[up(130, 130), None]);
        // 300 ms in: replica 1 back and counting anew (12 admitted), replica 0 admitted 10
        // more: 22 over two steps.
        r.record(300, &[up(140, 140), up(12, 12)]);
        // 400 ms in: replica 1's counter went down (started again once more): 5 counted.
        r.record(400, &[up(140, 135), up(5, 5)]);
        let mut figures = Reconnects::default();
        r.into_figures(450, &mut figures);
        assert_eq!(figures.server_accepts, vec![30, 11, 11, 5]);
        assert_eq!(figures.replicas_held, vec![Some(135), Some(5)]);
    }

    #[test]
    fn a_new_process_counts_from_zero_even_past_the_old_ones_count() {
        let mut r = Readings::starting(0, &[up(10, 10)]);
        let back = Some(Replica {
            instance: 2,
            accepted: 15,
            active: 15,
        });
        r.record(100, &[back]);
        let mut figures = Reconnects::default();
        r.into_figures(1000, &mut figures);
        assert_eq!(figures.server_accepts, vec![15]);
    }

    #[test]
    fn a_late_reading_does_not_pile_its_admissions_into_one_step() {
        let mut r = Readings::starting(50, &[up(0, 0)]);
        // 400 admitted over 50..450 ms: 50, 100, 100, 100, 50.
        r.record(450, &[up(400, 400)]);
        let mut figures = Reconnects::default();
        r.into_figures(1000, &mut figures);
        assert_eq!(figures.server_accepts, vec![50, 100, 100, 100, 50]);
        assert_eq!(figures.server_accepts.iter().sum::<u64>(), 400);
    }

    #[test]
    fn a_phase_with_no_reading_before_its_end_says_nothing_held() {
        let mut r = Readings::starting(0, &[up(0, 0)]);
        r.record(900, &[up(4, 4)]);
        let mut figures = Reconnects::default();
        r.into_figures(800, &mut figures);
        assert!(figures.replicas_held.is_empty(), "{figures:?}");
    }
}
