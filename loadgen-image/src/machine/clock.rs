//! The wall clock: shards on different nodes share a start and compare instants in Unix time,
//! which a monotonic `Instant` cannot carry between processes. Everything a shard stamps reads
//! it here, and so does its `GET /control/clock`, so the offset the conductor measures is the
//! offset of what the shard stamped.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wsload_contract::env as var;

/// The test hook's shift (wsload_contract::env::CLOCK_SHIFT_MS), microseconds; 0 unless a
/// shard set it at start-up.
static SHIFT_MICROS: AtomicI64 = AtomicI64::new(0);

/// The conductor's clock for the cell armed last: a shard stamps what shards on other nodes
/// compare (a fanout's publish instants and receipts) on it.
static CELL_EPOCH_MICROS: AtomicU64 = AtomicU64::new(0);
static CONDUCTOR_OFFSET_MICROS: AtomicI64 = AtomicI64::new(0);

/// A cell's start and this shard's offset, on the conductor's clock (wsload_control's
/// `Release`, as a shard receives it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CellClock {
    /// The cell's start, Unix microseconds on the conductor's clock.
    pub epoch_micros: u64,
    /// This shard's clock minus the conductor's, microseconds.
    pub offset_micros: i64,
    /// Whether a conductor armed the cell (else it begins now, on this process's clock).
    pub conducted: bool,
}

/// Arms the next cell's clock (a shard's control, before it sleeps until the start).
pub fn arm_cell(c: CellClock) {
    CONDUCTOR_OFFSET_MICROS.store(c.offset_micros, Ordering::Relaxed);
    CELL_EPOCH_MICROS.store(c.epoch_micros, Ordering::Relaxed);
}

/// The armed cell's clock, once, for the cell that begins now; without a conductor (a
/// single process), the cell begins now on this process's own clock.
pub fn take_cell() -> CellClock {
    let epoch = CELL_EPOCH_MICROS.swap(0, Ordering::Relaxed);
    let offset_micros = CONDUCTOR_OFFSET_MICROS.load(Ordering::Relaxed);
    CellClock {
        epoch_micros: if epoch == 0 {
            conductor_micros()
        } else {
            epoch
        },
        offset_micros,
        conducted: epoch != 0,
    }
}

/// Now on the conductor's clock, Unix microseconds: this shard's clock with its offset taken
/// out.
pub fn conductor_micros() -> u64 {
    let offset = CONDUCTOR_OFFSET_MICROS.load(Ordering::Relaxed);
    (unix_micros() as i64).saturating_sub(offset).max(0) as u64
}

/// Wall-clock now, Unix milliseconds.
pub fn unix_ms() -> u64 {
    unix_micros() / 1000
}

/// Wall-clock now, Unix microseconds: shards on different nodes compare these.
pub fn unix_micros() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    now.saturating_add(SHIFT_MICROS.load(Ordering::Relaxed))
        .max(0) as u64
}

/// Applies the clock test hook for shard `index`, once, at the shard's start: the shift the
/// variable gives this shard (none when unset or naming other shards). A value that does not
/// parse is the input's fault.
pub fn shift_from_env(index: u32) -> Result<i64, ClockShiftError> {
    let Some(value) = std::env::var_os(var::CLOCK_SHIFT_MS) else {
        return Ok(0);
    };
    let value = value.to_string_lossy().into_owned();
    let ms = shift_for(&value, index).map_err(|why| ClockShiftError { value, why })?;
    if ms != 0 {
        tracing::warn!(
            shift_ms = ms,
            "test hook: this shard's wall clock is shifted"
        );
    }
    SHIFT_MICROS.store(ms.saturating_mul(1000), Ordering::Relaxed);
    Ok(ms)
}

/// The clock test hook's variable does not read: the input's fault.
#[derive(Debug, thiserror::Error)]
#[error("{}={value:?}: {why} (MS, or INDEX=MS,...)", var::CLOCK_SHIFT_MS)]
pub struct ClockShiftError {
    value: String,
    #[source]
    why: ShiftPartError,
}

/// Which part of the clock test hook's value does not read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShiftPartError {
    #[error("{text:?} is not a whole number of milliseconds: {source}")]
    Milliseconds {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("{part:?} is not INDEX=MS")]
    NotIndexed { part: String },
    #[error("{text:?} is not a shard index: {source}")]
    Index {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// The shift `value` gives shard `index`, milliseconds: `MS` for every shard, or
/// `INDEX=MS,...` for those named.
fn shift_for(value: &str, index: u32) -> Result<i64, ShiftPartError> {
    let number = |s: &str| {
        s.trim()
            .parse::<i64>()
            .map_err(|source| ShiftPartError::Milliseconds {
                text: s.to_string(),
                source,
            })
    };
    if !value.contains('=') {
        return number(value);
    }
    let mut shift = 0;
    for part in value.split(',').filter(|p| !p.trim().is_empty()) {
        let (shard, ms) = part
            .split_once('=')
            .ok_or_else(|| ShiftPartError::NotIndexed {
                part: part.to_string(),
            })?;
        let shard: u32 = shard
            .trim()
            .parse()
            .map_err(|source| ShiftPartError::Index {
                text: shard.to_string(),
                source,
            })?;
        let ms = number(ms)?;
        if shard == index {
            shift = ms;
        }
    }
    Ok(shift)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_names_every_shard_or_some() {
        assert_eq!(shift_for("50", 3), Ok(50));
        assert_eq!(shift_for(" -20 ", 0), Ok(-20));
        assert_eq!(shift_for("1=50", 1), Ok(50));
        assert_eq!(shift_for("1=50", 0), Ok(0));
        assert_eq!(shift_for("0=-7, 2=9", 2), Ok(9));
        assert!(shift_for("soon", 0).is_err());
        assert!(shift_for("1=50,x=2", 1).is_err());
        assert!(shift_for("1=50,2", 1).is_err());
    }
}
