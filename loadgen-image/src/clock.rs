//! The wall clock: shards on different nodes share a start and compare instants in Unix time,
//! which a monotonic `Instant` cannot carry between processes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock now, Unix milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Wall-clock now, Unix microseconds: shards on different nodes compare these.
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Sleeps until the wall clock reads `at_unix_ms`. In steps, so that a clock stepped by NTP
/// while waiting moves the wake-up with it: the start is a wall-clock instant shared by shards
/// on different nodes.
pub fn sleep_until_unix_ms(at_unix_ms: u64) {
    let target = at_unix_ms.saturating_mul(1000);
    loop {
        let now = unix_micros();
        if now >= target {
            return;
        }
        std::thread::sleep(Duration::from_micros((target - now).min(100_000)));
    }
}
