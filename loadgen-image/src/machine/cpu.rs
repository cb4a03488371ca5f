//! How busy this process kept the cores its workers could use over a cell, from the process
//! CPU clock: a load generator at its limit may have set the pace, not the server.

use std::time::{Duration, Instant};

/// How busy this process kept the cores its workers could use over a cell: 1.0 means the load
/// generator, not the server, may have set the pace (the report's finding says so).
pub struct CpuClock {
    wall: Instant,
    cpu: Option<Duration>,
    cores: f64,
}

impl CpuClock {
    pub fn start(threads: usize) -> CpuClock {
        // available_parallelism honours the container's CPU quota: workers beyond it share.
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        CpuClock {
            wall: Instant::now(),
            cpu: process_cpu(),
            cores: threads.clamp(1, usable) as f64,
        }
    }

    /// The fraction since `start`; `None` when the clock cannot be read.
    pub fn busy(&self) -> Option<f64> {
        let used = process_cpu()?.checked_sub(self.cpu?)?;
        busy_fraction(used, self.wall.elapsed(), self.cores)
    }
}

fn busy_fraction(used: Duration, wall: Duration, cores: f64) -> Option<f64> {
    let capacity = wall.as_secs_f64() * cores;
    (capacity > 0.0).then(|| (used.as_secs_f64() / capacity).min(1.0))
}

/// User plus system CPU time of this process, all threads.
fn process_cpu() -> Option<Duration> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let t = |tv: nix::sys::time::TimeVal| {
        Duration::from_secs(u64::try_from(tv.tv_sec()).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
    };
    Some(t(u.user_time()) + t(u.system_time()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_cpu_time_over_the_cores_the_workers_could_use() {
        let f = |used_ms, wall_ms, cores| {
            busy_fraction(
                Duration::from_millis(used_ms),
                Duration::from_millis(wall_ms),
                cores,
            )
        };
        assert_eq!(f(1000, 1000, 1.0), Some(1.0));
        assert_eq!(f(1000, 1000, 2.0), Some(0.5));
        // Threads outside the workers (the scrape, the ticker) can push the sum past them.
        assert_eq!(f(2500, 1000, 2.0), Some(1.0));
        assert_eq!(f(10, 0, 2.0), None);
    }

    /// The process clock counts every thread: it has grown by at least what this thread spent
    /// (read from the thread's own clock, so a loaded machine only makes the test longer).
    #[test]
    fn the_process_clock_counts_this_threads_work() {
        let thread_cpu = || {
            use nix::sys::resource::{UsageWho, getrusage};
            let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
            let t = |tv: nix::sys::time::TimeVal| {
                Duration::from_micros(
                    u64::try_from(tv.tv_sec() * 1_000_000 + tv.tv_usec()).unwrap_or(0),
                )
            };
            t(u.user_time()) + t(u.system_time())
        };
        let before = process_cpu().expect("getrusage");
        let t0 = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - t0 < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spent = thread_cpu() - t0;
        let grown = process_cpu().expect("getrusage") - before;
        // getrusage rounds to its tick; a few milliseconds either way.
        assert!(
            grown + Duration::from_millis(20) >= spent,
            "{grown:?} < {spent:?}"
        );
    }
}
