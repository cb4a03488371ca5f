//! The latency buckets every wsload histogram in Prometheus uses, and the arithmetic over
//! their counts: what happened between two readings ([`since`]), a quantile interpolated the
//! way Prometheus' `histogram_quantile` does ([`quantile`]), and a scraped cumulative series
//! turned back into counts ([`from_cumulative`]). The load generator's bar, its timelines and
//! its plot all read percentiles this way, so they agree with the dashboards on the same data.

/// Bucket bounds (seconds) fine enough for `histogram_quantile` from 50 us to 10 s.
pub const LATENCY_BUCKETS: [f64; 33] = [
    0.000_05, 0.000_075, 0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_5, 0.000_75, 0.001, 0.001_5,
    0.002, 0.003, 0.005, 0.007_5, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
    0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
];

/// Latency buckets plus one for observations above the last bound.
pub const BUCKETS: usize = LATENCY_BUCKETS.len() + 1;

/// Observations per bucket (not cumulative), the last past the largest bound.
pub type Counts = [u64; BUCKETS];

/// No observations.
pub const EMPTY: Counts = [0; BUCKETS];

/// The per-bucket counts observed between two readings of running counts (saturating: a
/// reading torn against a reset must not wrap).
pub fn since(now: &Counts, before: &Counts) -> Counts {
    let mut d = EMPTY;
    for (d, (now, before)) in d.iter_mut().zip(now.iter().zip(before.iter())) {
        *d = now.saturating_sub(*before);
    }
    d
}

/// Adds `other` into `into`, bucket by bucket.
pub fn add(into: &mut Counts, other: &Counts) {
    for (a, b) in into.iter_mut().zip(other) {
        *a = a.saturating_add(*b);
    }
}

/// The `q` quantile of per-bucket counts over [`LATENCY_BUCKETS`], interpolated linearly
/// inside its bucket as Prometheus' `histogram_quantile` does (the first bucket starts at 0;
/// the overflow bucket answers the last finite bound). `None` without observations.
pub fn quantile(q: f64, counts: &Counts) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let last = LATENCY_BUCKETS[LATENCY_BUCKETS.len() - 1];
    let mut below = 0u64;
    for (i, &n) in counts.iter().enumerate() {
        let upto = below + n;
        if upto as f64 >= rank && n > 0 {
            let Some(&upper) = LATENCY_BUCKETS.get(i) else {
                return Some(last);
            };
            let lower = if i == 0 { 0.0 } else { LATENCY_BUCKETS[i - 1] };
            return Some(lower + (upper - lower) * (rank - below as f64) / n as f64);
        }
        below = upto;
    }
    Some(last)
}

/// Cumulative `(le, count)` buckets of a scraped histogram over [`LATENCY_BUCKETS`] as
/// per-bucket counts, the last one past the largest bound. Bounds it lacks count nothing.
pub fn from_cumulative(cumulative: &[(f64, f64)]) -> Counts {
    let mut out = EMPTY;
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

    fn counts(pairs: &[(usize, u64)]) -> Counts {
        let mut c = EMPTY;
        for &(i, n) in pairs {
            c[i] = n;
        }
        c
    }

    #[test]
    fn quantile_interpolates_like_prometheus() {
        // 100 observations in (1ms, 1.5ms]: bucket 9 (le 0.0015), below it le 0.001.
        let c = counts(&[(9, 100)]);
        let p50 = quantile(0.5, &c).expect("p50");
        assert!((p50 - 0.00125).abs() < 1e-12, "{p50}");
        // 90 in the first bucket (0, 50us], 10 above the last bound.
        let c = counts(&[(0, 90), (BUCKETS - 1, 10)]);
        assert!((quantile(0.5, &c).expect("p50") - 0.000_05 * 50.0 / 90.0).abs() < 1e-12);
        assert_eq!(quantile(0.99, &c), Some(10.0));
        assert_eq!(quantile(0.5, &EMPTY), None);
    }

    #[test]
    fn since_saturates_and_add_sums() {
        let a = counts(&[(0, 5), (3, 2)]);
        let b = counts(&[(0, 7), (3, 1)]);
        assert_eq!(since(&b, &a), counts(&[(0, 2)]));
        let mut c = a;
        add(&mut c, &b);
        assert_eq!(c, counts(&[(0, 12), (3, 3)]));
    }

    #[test]
    fn a_scraped_cumulative_histogram_reads_back_as_counts() {
        let mut cumulative: Vec<(f64, f64)> = Vec::new();
        let mut running = 0.0;
        for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
            if i == 3 || i == 20 {
                running += 2.0;
            }
            cumulative.push((*le, running));
        }
        cumulative.push((f64::INFINITY, running + 1.0));
        let c = from_cumulative(&cumulative);
        assert_eq!((c[3], c[20], c[BUCKETS - 1]), (2, 2, 1));
        assert_eq!(c.iter().sum::<u64>(), 5);
        assert_eq!(from_cumulative(&[]), EMPTY);
    }
}
