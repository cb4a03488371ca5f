//! Send schedules of open-loop loads: a constant rate or piecewise-linear ramp stages,
//! divided evenly over the connections, each connection phase-shifted so that N connections
//! do not fire in lockstep.

use std::time::Duration;
use tokio::time::Instant;
use wsload_spec::RateSpec;

#[derive(Debug, Clone, PartialEq)]
struct Segment {
    /// Seconds from the phase start.
    from_s: f64,
    to_s: f64,
    /// Per-connection rate at the segment's start and end (messages per second).
    from_rate: f64,
    to_rate: f64,
}

/// Per-connection sending schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    segments: Vec<Segment>,
    /// Where this connection's phase lies in a period, 0..1.
    phase: f64,
}

impl Schedule {
    /// `total_rate` messages per second spread over `connections`, for `duration`.
    pub fn constant(total_rate: f64, connections: u32, duration: Duration) -> Schedule {
        let r = total_rate / f64::from(connections.max(1));
        Schedule {
            segments: vec![Segment {
                from_s: 0.0,
                to_s: duration.as_secs_f64(),
                from_rate: r,
                to_rate: r,
            }],
            phase: 0.0,
        }
    }

    /// The spec's rate (constant or staged), this process's share `share` of it (0..1),
    /// over `connections`. Returns the schedule and its total duration.
    pub fn from_spec(
        rate: &RateSpec,
        share: f64,
        connections: u32,
        duration: Duration,
    ) -> (Schedule, Duration) {
        let per_conn = share / f64::from(connections.max(1));
        if rate.stages.is_empty() {
            let r = rate.messages_per_second.unwrap_or(0.0) * per_conn;
            let s = Segment {
                from_s: 0.0,
                to_s: duration.as_secs_f64(),
                from_rate: r,
                to_rate: r,
            };
            return (
                Schedule {
                    segments: vec![s],
                    phase: 0.0,
                },
                duration,
            );
        }
        let mut t = 0.0;
        let mut level = rate.messages_per_second.unwrap_or(0.0) * per_conn;
        let mut segments = Vec::new();
        for st in &rate.stages {
            let len = st.duration.get().as_secs_f64();
            let to = st.target * per_conn;
            segments.push(Segment {
                from_s: t,
                to_s: t + len,
                from_rate: level,
                to_rate: to,
            });
            t += len;
            level = to;
        }
        (
            Schedule {
                segments,
                phase: 0.0,
            },
            Duration::from_secs_f64(t),
        )
    }

    /// This schedule after a warm-up of `warmup` at its opening rate: schedules are timed
    /// from the phase's start, warm-up included, and the measured window must get the whole
    /// schedule (without this, a constant rate stopped `warmup` before the window's end).
    pub fn after_warmup(mut self, warmup: Duration) -> Schedule {
        let w = warmup.as_secs_f64();
        if w <= 0.0 {
            return self;
        }
        let opening = self.rate_at(0.0);
        for s in &mut self.segments {
            s.from_s += w;
            s.to_s += w;
        }
        self.segments.insert(
            0,
            Segment {
                from_s: 0.0,
                to_s: w,
                from_rate: opening,
                to_rate: opening,
            },
        );
        self
    }

    /// This schedule for connection `i` of `n`: its sends are offset by `i/n` of a period.
    pub fn for_connection(&self, i: u64, n: u32) -> Schedule {
        Schedule {
            segments: self.segments.clone(),
            phase: (i % u64::from(n.max(1))) as f64 / f64::from(n.max(1)),
        }
    }

    /// Per-connection rate `t` seconds into the phase (0 outside it).
    pub fn rate_at(&self, t: f64) -> f64 {
        self.segments
            .iter()
            .find(|s| t >= s.from_s && t < s.to_s)
            .map_or(0.0, |s| {
                let f = if s.to_s > s.from_s {
                    (t - s.from_s) / (s.to_s - s.from_s)
                } else {
                    0.0
                };
                s.from_rate + (s.to_rate - s.from_rate) * f
            })
    }

    fn end(&self) -> f64 {
        self.segments.last().map_or(0.0, |s| s.to_s)
    }

    /// The instant (seconds) at which `amount` more messages are due after `t`: solves
    /// `integral of rate from t to x = amount` exactly on each linear segment (a quadratic),
    /// so a ramp from zero is followed instead of skipped by a huge first step.
    fn advance(&self, t: f64, amount: f64) -> Option<f64> {
        let mut cur = t;
        let mut left = amount;
        for seg in self.segments.iter().filter(|s| s.to_s > t) {
            cur = cur.max(seg.from_s);
            let r0 = self.rate_at(cur);
            let len = seg.to_s - cur;
            let slope = if seg.to_s > seg.from_s {
                (seg.to_rate - seg.from_rate) / (seg.to_s - seg.from_s)
            } else {
                0.0
            };
            let area = r0 * len + slope * len * len / 2.0;
            if area >= left {
                let x = if slope.abs() < 1e-12 {
                    if r0 > 0.0 { left / r0 } else { 0.0 }
                } else {
                    (-r0 + (r0 * r0 + 2.0 * slope * left).max(0.0).sqrt()) / slope
                };
                return Some(cur + x.clamp(0.0, len));
            }
            left -= area;
            cur = seg.to_s;
        }
        None
    }

    /// The first send instant after `origin` (this connection's phase into the first message).
    pub fn first(&self, origin: Instant) -> Option<Instant> {
        let at = self.advance(0.0, self.phase)?;
        (at < self.end()).then(|| origin + Duration::from_secs_f64(at))
    }

    /// The send instant after `prev`, if before `deadline`.
    pub fn next(&self, origin: Instant, prev: Instant, deadline: Instant) -> Option<Instant> {
        let t = prev.saturating_duration_since(origin).as_secs_f64();
        let at = origin + Duration::from_secs_f64(self.advance(t, 1.0)?);
        (at < deadline).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_spec::{Dur, Stage};

    /// Messages a schedule sends over its whole length: the area under its rate.
    fn expected_total(s: &Schedule) -> f64 {
        s.segments
            .iter()
            .map(|g| (g.from_rate + g.to_rate) / 2.0 * (g.to_s - g.from_s))
            .sum()
    }

    fn count(s: &Schedule, len: Duration) -> usize {
        let origin = Instant::now();
        let deadline = origin + len;
        let mut n = 0;
        let mut t = s.first(origin);
        while let Some(at) = t {
            n += 1;
            t = s.next(origin, at, deadline);
        }
        n
    }

    #[test]
    fn constant_rate_sends_rate_times_duration() {
        let s = Schedule::constant(1000.0, 10, Duration::from_secs(2));
        assert!((s.rate_at(0.5) - 100.0).abs() < 1e-9);
        let n = count(&s, Duration::from_secs(2));
        assert!((199..=201).contains(&n), "{n}");
    }

    #[test]
    fn ramp_follows_the_stages() {
        let rate = RateSpec {
            messages_per_second: None,
            stages: vec![
                Stage {
                    duration: Dur::secs(2),
                    target: 200.0,
                },
                Stage {
                    duration: Dur::secs(1),
                    target: 200.0,
                },
            ],
        };
        let (s, total) = Schedule::from_spec(&rate, 1.0, 2, Duration::from_secs(99));
        assert_eq!(total, Duration::from_secs(3));
        assert!(
            (s.rate_at(1.0) - 50.0).abs() < 1e-9,
            "halfway up the ramp, per connection"
        );
        assert!((s.rate_at(2.5) - 100.0).abs() < 1e-9);
        assert!((expected_total(&s) - 200.0).abs() < 1e-9);
        let n = count(&s, total);
        assert!((190..=210).contains(&n), "{n}");
    }

    #[test]
    fn a_warm_up_comes_before_the_whole_schedule() {
        // 100/s for 2 s after 1 s of warm-up: the window (1-3 s) gets all of it; a ramp's
        // warm-up holds its opening rate (here 0: no load before the ramp).
        let s = Schedule::constant(100.0, 1, Duration::from_secs(2))
            .after_warmup(Duration::from_secs(1));
        let n = count(&s, Duration::from_secs(3));
        assert!((299..=301).contains(&n), "{n}");
        assert!((s.rate_at(2.5) - 100.0).abs() < 1e-9);
        let rate = RateSpec {
            messages_per_second: None,
            stages: vec![Stage {
                duration: Dur::secs(2),
                target: 200.0,
            }],
        };
        let (ramp, total) = Schedule::from_spec(&rate, 1.0, 1, Duration::ZERO);
        let ramp = ramp.after_warmup(Duration::from_secs(1));
        assert_eq!(ramp.rate_at(0.5), 0.0);
        assert!(
            (ramp.rate_at(2.0) - 100.0).abs() < 1e-9,
            "halfway up, 1 s later"
        );
        let n = count(&ramp, total + Duration::from_secs(1));
        assert!((195..=205).contains(&n), "{n}");
    }

    #[test]
    fn connections_are_phase_shifted() {
        let s = Schedule::constant(100.0, 4, Duration::from_secs(1));
        let origin = Instant::now();
        let firsts: Vec<_> = (0..4)
            .map(|i| s.for_connection(i, 4).first(origin).map(|t| t - origin))
            .collect();
        assert_eq!(firsts[0], Some(Duration::ZERO));
        assert_eq!(firsts[2], Some(Duration::from_millis(20)));
    }
}
