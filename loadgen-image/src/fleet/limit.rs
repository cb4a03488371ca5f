//! How many shard processes this machine can run at once (`wsload run` with `shards: N`),
//! from what it has, detected at run time: cores, the process and open-file limits, free
//! memory. A count above it is refused before anything is forked; a bigger machine, a raised
//! limit or a cluster (a pod per shard) runs it.

use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
use std::os::unix::fs::MetadataExt;

/// Shard processes per core past which they only take turns: each shard's runtime, metrics
/// endpoint and control answers need the CPU now and then, and the conductor polls every
/// shard every 50 ms. Local shards exist to spread the open-file limit, not to add CPU.
pub const SHARDS_PER_CORE: u64 = 32;
/// Descriptors this process keeps per shard: its stderr pipe, its control connection, the
/// progress bar's scrape of its metrics, and one to spare.
pub const FDS_PER_SHARD: u64 = 4;
/// Descriptors this process needs beside its shards' (runtime, stdio, the managed server).
pub const FDS_OWN: u64 = 64;
/// Threads a shard runs beside its runtime's workers (main, metrics endpoint, blocking pool),
/// and the thread this process reads its stderr with: each counts against `ulimit -u`.
pub const TASKS_PER_SHARD: u64 = 6;
/// What a shard process takes before its connections (measured: ~26 MiB resident in a debug
/// build, less in a release one).
pub const SHARD_MEMORY: u64 = 16 << 20;

/// This machine's figures, as detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    pub cores: u64,
    /// This process's soft open-file limit (after `capacity::raise`), which the parent's
    /// per-shard descriptors count against.
    pub open_files: u64,
    /// `ulimit -u` (processes and threads of this user); `None` when unlimited or not enforced
    /// (root).
    pub processes: Option<u64>,
    /// `MemAvailable`, bytes; `None` when unknown.
    pub memory: Option<u64>,
}

impl Machine {
    pub fn detect(open_files: u64) -> Machine {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get() as u64);
        // The kernel does not hold root to RLIMIT_NPROC.
        // /proc/self belongs to the process's effective user.
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let processes = if root {
            None
        } else {
            getrlimit(Resource::RLIMIT_NPROC)
                .ok()
                .map(|(soft, _)| soft)
                .filter(|&s| s != RLIM_INFINITY)
        };
        Machine {
            cores,
            open_files,
            processes,
            memory: mem_available(),
        }
    }

    /// The most shards of `threads` runtime threads each this machine runs, and what bounds
    /// it.
    fn most_shards(&self, threads: u64) -> Bound {
        let mut bounds = vec![Bound::Cores {
            cores: self.cores,
            most: self.cores * SHARDS_PER_CORE,
        }];
        bounds.push(Bound::Files {
            open_files: self.open_files,
            most: self.open_files.saturating_sub(FDS_OWN) / FDS_PER_SHARD,
        });
        if let Some(nproc) = self.processes {
            let per_shard = threads + TASKS_PER_SHARD;
            bounds.push(Bound::Processes {
                nproc,
                per_shard,
                most: nproc / per_shard,
            });
        }
        if let Some(mem) = self.memory {
            bounds.push(Bound::Memory {
                mib: mem >> 20,
                most: mem / SHARD_MEMORY,
            });
        }
        bounds
            .into_iter()
            .min_by_key(Bound::most)
            .unwrap_or(Bound::Cores {
                cores: self.cores,
                most: u64::MAX,
            })
    }
}

/// What bounds the shard processes this machine runs, as the refusal says it with the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    Cores {
        cores: u64,
        most: u64,
    },
    Files {
        open_files: u64,
        most: u64,
    },
    Processes {
        nproc: u64,
        per_shard: u64,
        most: u64,
    },
    Memory {
        mib: u64,
        most: u64,
    },
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Bound::Cores { cores, most } => write!(
                f,
                "{cores} core(s) run at most {most} shard processes ({SHARDS_PER_CORE} per core; more only take turns on the cores)"
            ),
            Bound::Files { open_files, most } => write!(
                f,
                "this process may open {open_files} files (ulimit -n) and keeps {FDS_PER_SHARD} per shard, so at most {most} shards; raise ulimit -n"
            ),
            Bound::Processes {
                nproc,
                per_shard,
                most,
            } => write!(
                f,
                "ulimit -u {nproc} (processes and threads of this user) allows at most {most} shards of {per_shard} threads; raise ulimit -u"
            ),
            Bound::Memory { mib, most } => write!(
                f,
                "{mib} MiB of available memory hold at most {most} shard processes (~{} MiB each before their connections)",
                SHARD_MEMORY >> 20
            ),
        }
    }
}

impl Bound {
    fn most(&self) -> u64 {
        match *self {
            Bound::Cores { most, .. }
            | Bound::Files { most, .. }
            | Bound::Processes { most, .. }
            | Bound::Memory { most, .. } => most,
        }
    }
}

/// More shard processes than this machine runs: the input's fault, here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "spec.shards: {shards} is more shard processes than this machine can run: {bound}. Use spec.shards: {} or fewer, raise the limit, or run the test in a cluster, where each shard is a pod (docs/operator.md)",
    bound.most()
)]
pub struct TooManyShards {
    pub shards: u32,
    pub bound: Bound,
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses `shards` processes of `threads` runtime threads each when `machine` cannot run
/// them, naming spec.shards, the figure that bounds it and the fixes.
pub fn check(shards: u32, threads: u64, machine: &Machine) -> Result<(), TooManyShards> {
    let bound = machine.most_shards(threads);
    if u64::from(shards) <= bound.most() {
        return Ok(());
    }
    Err(TooManyShards { shards, bound })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Machine = Machine {
        cores: 2,
        open_files: 20_000,
        processes: None,
        memory: Some(8 << 30),
    };

    #[test]
    fn the_tightest_figure_bounds_the_shards() {
        assert!(check(64, 1, &SMALL).is_ok());
        let e = check(5000, 1, &SMALL).expect_err("too many").to_string();
        for part in [
            "spec.shards: 5000",
            "2 core(s) run at most 64",
            "spec.shards: 64 or fewer",
            "in a cluster",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
        let few_files = Machine {
            open_files: 256,
            ..SMALL
        };
        let e = check(64, 1, &few_files).expect_err("files").to_string();
        assert!(
            e.contains("ulimit -n") && e.contains("at most 48 shards"),
            "{e}"
        );
        let few_tasks = Machine {
            processes: Some(100),
            ..SMALL
        };
        let e = check(20, 4, &few_tasks).expect_err("tasks").to_string();
        assert!(
            e.contains("ulimit -u 100") && e.contains("at most 10 shards"),
            "{e}"
        );
    }

    #[test]
    fn a_big_machine_runs_what_a_small_one_refuses() {
        let big = Machine {
            cores: 192,
            open_files: 1 << 20,
            processes: None,
            memory: Some(1 << 40),
        };
        assert!(check(5000, 1, &big).is_ok());
    }
}
