//! The tests a comparison rests on, each on what a result keeps exactly: a percentile's
//! interval from the order statistics of its histogram, a rate's from the means of its 1 s
//! batches (Welch's t), a share's from its counts (a two-proportion z-test).

use crate::hist::Hist;

/// The standard normal quantile (Acklam's rational approximation: relative error under
/// 1.2e-9 over (0, 1)).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.024_25 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.024_25 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Student's t quantile for `df` degrees of freedom (df > 0): the t CDF (from the regularized
/// incomplete beta function) inverted by bisection, exact to 1e-9.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if p == 0.5 {
        return 0.0;
    }
    let (upper, q) = if p > 0.5 { (true, p) } else { (false, 1.0 - p) };
    // The upper tail's t for q in (0.5, 1): below 1e6 for any df >= 1 at q < 1 - 1e-12.
    let (mut lo, mut hi) = (0.0, 1e6);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < q {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-9 {
            break;
        }
    }
    let t = 0.5 * (lo + hi);
    if upper { t } else { -t }
}

/// P(T <= t) for Student's t with `df` degrees of freedom.
fn t_cdf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    let tail = 0.5 * incomplete_beta(0.5 * df, 0.5, x);
    if t >= 0.0 { 1.0 - tail } else { tail }
}

/// The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    // The fraction converges fast below the mean; above it, by symmetry.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7: 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The interval in which percentile `p` (0..100) of the population `h` samples lies, at
/// two-sided `confidence`, in seconds: the values at the ranks the binomial law of the
/// sample's order statistics puts around it (normal approximation). Distribution-free, so
/// it holds for latencies of any shape; it treats samples as independent, which a run's are
/// not quite (hence the minimum effect).
pub fn percentile_interval(h: &Hist, p: f64, confidence: f64) -> (f64, f64) {
    let n = h.len() as f64;
    let q = p / 100.0;
    let z = normal_quantile(0.5 + confidence / 2.0);
    let half = z * (n * q * (1.0 - q)).sqrt() + 1.0;
    let lo = ((n * q - half) / n).clamp(0.0, 1.0);
    let hi = ((n * q + half) / n).clamp(0.0, 1.0);
    (h.percentile(lo * 100.0), h.percentile(hi * 100.0))
}

/// Welch's t of `new`'s mean against `base`'s (each a series of batch means), and its degrees
/// of freedom; `None` with fewer than 2 batches on a side.
pub fn welch(base: &[f64], new: &[f64]) -> Option<(f64, f64)> {
    let (b, n) = (moments(base)?, moments(new)?);
    let (vb, vn) = (b.1 / b.2, n.1 / n.2);
    let se = (vb + vn).sqrt();
    let diff = n.0 - b.0;
    if se == 0.0 {
        // No spread at all on either side: any difference is the difference.
        let t = if diff == 0.0 {
            0.0
        } else {
            diff.signum() * f64::INFINITY
        };
        return Some((t, b.2 + n.2 - 2.0));
    }
    let df = (vb + vn).powi(2) / (vb * vb / (b.2 - 1.0) + vn * vn / (n.2 - 1.0));
    Some((diff / se, df))
}

/// Mean, sample variance and count.
fn moments(xs: &[f64]) -> Option<(f64, f64, f64)> {
    if xs.len() < 2 {
        return None;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, var, n))
}

/// The z of share `x2/n2` against `x1/n1` (pooled two-proportion test); 0 when both are 0 or
/// 1, or a side counted nothing.
pub fn two_proportions(x1: u64, n1: u64, x2: u64, n2: u64) -> f64 {
    if n1 == 0 || n2 == 0 {
        return 0.0;
    }
    let (n1, n2) = (n1 as f64, n2 as f64);
    let (p1, p2) = (x1 as f64 / n1, x2 as f64 / n2);
    let p = (x1 as f64 + x2 as f64) / (n1 + n2);
    let se = (p * (1.0 - p) * (1.0 / n1 + 1.0 / n2)).sqrt();
    if se == 0.0 { 0.0 } else { (p2 - p1) / se }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_normal_and_t_quantiles_are_the_tables() {
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((normal_quantile(0.995) - 2.575_829).abs() < 1e-5);
        assert!((normal_quantile(0.005) + 2.575_829).abs() < 1e-5);
        // t(0.995) from the tables, for 1, 2, 3, 5, 10 and 30 degrees of freedom.
        for (df, t) in [
            (1.0, 63.657),
            (2.0, 9.925),
            (3.0, 5.841),
            (5.0, 4.032),
            (10.0, 3.169),
            (30.0, 2.750),
        ] {
            let got = t_quantile(0.995, df);
            assert!((got - t).abs() < 0.001 * t, "df {df}: {got} against {t}");
            assert!((t_quantile(0.005, df) + t).abs() < 0.001 * t);
        }
        // Fractional degrees of freedom (Welch's): between their neighbours.
        let mid = t_quantile(0.995, 2.5);
        assert!(mid < 9.925 && mid > 5.841, "{mid}");
    }

    fn hist(values_us: impl Iterator<Item = u64>) -> Hist {
        let mut h = Hist::new();
        for v in values_us {
            h.record(Duration::from_micros(v));
        }
        h
    }

    #[test]
    fn a_percentiles_interval_holds_it_and_narrows_with_more_samples() {
        // Uniform over 1..=10,000 us, once and ten times over.
        let once = hist(1..=10_000);
        let tenfold = hist((0..10).flat_map(|_| 1..=10_000));
        let (lo, hi) = percentile_interval(&once, 99.0, 0.99);
        assert!(lo < 0.0099 && hi > 0.0099, "{lo} {hi}");
        let (lo10, hi10) = percentile_interval(&tenfold, 99.0, 0.99);
        assert!(
            hi10 - lo10 < (hi - lo) / 2.0,
            "{lo10} {hi10} against {lo} {hi}"
        );
    }

    #[test]
    fn welch_finds_a_shift_and_not_noise() {
        let base = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0];
        let same = [101.0, 99.0, 100.0, 102.0, 98.0, 100.0];
        let lower = [90.0, 92.0, 88.0, 91.0, 89.0, 90.0];
        let (t, _) = welch(&base, &same).expect("t");
        assert!(t.abs() < 1.0, "{t}");
        let (t, df) = welch(&base, &lower).expect("t");
        assert!(t < -10.0 && df > 5.0, "{t} {df}");
        assert_eq!(welch(&base, &[1.0]), None);
    }

    #[test]
    fn two_proportions_tells_a_loss_from_none() {
        assert_eq!(two_proportions(0, 1000, 0, 1000), 0.0);
        assert!(two_proportions(0, 1_000_000, 50, 1_000_000) > 5.0);
        assert!(two_proportions(10, 1000, 12, 1000).abs() < 1.0);
    }
}
