//! How many connections this process can open: each is a file descriptor, and the open-file
//! limit (`ulimit -n`) is the machine's, not the product's. A shard raises its soft limit to
//! the hard one and refuses, before any load, a share it cannot open.

use crate::machine::sysctl;
use crate::model::Shard;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use std::collections::BTreeMap;
use wsload_contract::announce::KernelLine;
use wsload_spec::LoadTestSpec;
use wsload_spec::scenario::Cells;
use wsload_spec::shares::count_share;

/// Descriptors a shard needs beside its connections: the runtime, the worker threads' epoll
/// and event descriptors, stdio, the metrics endpoint.
pub const OVERHEAD: u64 = 64;

/// The open-file limits after raising the soft one as far as the hard one allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard one.
pub fn raise() -> Limits {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit");
            return Limits {
                soft: u64::MAX,
                hard: u64::MAX,
            };
        }
    };
    if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                tracing::info!(from = soft, to = hard, "raised the soft open-file limit");
                return Limits { soft: hard, hard };
            }
            Err(e) => tracing::warn!(soft, hard, error = %e, "cannot raise the open-file limit"),
        }
    }
    Limits { soft, hard }
}

/// The sysctls a shard reports besides those its spec sets: the local port range bounds the
/// connections one shard can open to one server address.
pub const REPORTED_SYSCTLS: &[&str] = &["net.ipv4.ip_local_port_range"];

/// The sysctls `spec` sets for its shard pods (`loadgen.sysctls` through the pod, then
/// `loadgen.tuning.sysctls` through the init container, which wins where both name one).
pub fn asked_sysctls(spec: &LoadTestSpec) -> BTreeMap<&str, &str> {
    let loadgen = &spec.loadgen;
    let tuning = loadgen.tuning.iter().flat_map(|t| &t.sysctls);
    loadgen
        .sysctls
        .iter()
        .chain(tuning)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// What this shard runs under: `limits` and every sysctl of [`asked_sysctls`] and
/// [`REPORTED_SYSCTLS`] as in force here (read through `read`). One asked for but in force
/// at another value, or unreadable, is also a warning: the shard would measure under
/// settings its spec does not say.
pub fn kernel(
    spec: &LoadTestSpec,
    limits: Limits,
    read: impl Fn(&str) -> Result<String, sysctl::SysctlError>,
) -> KernelLine {
    let asked = asked_sysctls(spec);
    let mut keys: Vec<&str> = asked.keys().copied().collect();
    keys.extend(REPORTED_SYSCTLS.iter().filter(|k| !asked.contains_key(*k)));
    let sysctls = keys
        .into_iter()
        .map(|key| {
            let value = match read(key) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(sysctl = key, error = %e, "cannot read a sysctl");
                    None
                }
            };
            if let (Some(want), Some(got)) = (asked.get(key), &value)
                && sysctl::words(want) != *got
            {
                tracing::warn!(sysctl = key, asked = want, in_force = %got, "a sysctl of the spec is not in force");
            }
            (key.to_string(), value)
        })
        .collect();
    KernelLine {
        open_files: (limits.soft, limits.hard),
        sysctls,
    }
}

/// The most connections one shard of `spec` opens at once: its share of the largest tier, or
/// of `limit.max` for connectionLimit.
pub fn peak_share(spec: &LoadTestSpec, shard: Shard) -> u32 {
    let peak = wsload_spec::validate::peak_connections(spec);
    count_share(peak, shard.index, shard.count)
}

/// A share above what this process may open: the input's fault on this machine, with the
/// numbers and the fixes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "shard {} of {} must open {share} connections ({} over spec.shards: {shards}), but this process may open only {} files (ulimit -n {}, hard {}; {OVERHEAD} are the load generator's own): raise the open-file limit (ulimit -Hn as root, the container runtime's nofile, systemd LimitNOFILE) to at least {}, or use spec.shards: {} or more",
    shard.index,
    shard.count,
    self.peak_text(),
    limits.soft,
    limits.soft,
    limits.hard,
    u64::from(*share) + OVERHEAD,
    self.shards_needed(),
)]
pub struct ShareTooLarge {
    pub shard: Shard,
    pub share: u32,
    /// The most connections the whole test opens at once, and whether it is a search's
    /// `limit.max`.
    pub peak: u32,
    pub searched: bool,
    pub shards: u32,
    pub limits: Limits,
}

impl ShareTooLarge {
    fn peak_text(&self) -> String {
        if self.searched {
            format!("limit.max {}", self.peak)
        } else {
            format!("the largest tier, {} connections,", self.peak)
        }
    }

    /// Shards of a share this process could open.
    fn shards_needed(&self) -> u64 {
        let per_process = self.limits.soft.saturating_sub(OVERHEAD).max(1);
        u64::from(self.peak).div_ceil(per_process)
    }
}

/// Refuses a share above what `limits` let this process open, naming the numbers and the fixes.
pub fn check(spec: &LoadTestSpec, shard: Shard, limits: Limits) -> Result<(), ShareTooLarge> {
    let share = peak_share(spec, shard);
    if u64::from(share) + OVERHEAD <= limits.soft {
        return Ok(());
    }
    Err(ShareTooLarge {
        shard,
        share,
        peak: wsload_spec::validate::peak_connections(spec),
        searched: spec.scenario.profile().cells == Cells::Search,
        shards: spec.shards,
        limits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_spec::fixtures::spec;

    #[test]
    fn a_share_above_the_limit_is_refused_with_the_numbers_and_the_fix() {
        let s = spec(
            "  target: {server: {}}\n  scenario: sustainedHold\n  connections: [1000, 100000]\n  shards: 2\n",
        );
        let limits = Limits {
            soft: 20_000,
            hard: 20_000,
        };
        let shard = Shard { index: 1, count: 2 };
        let e = check(&s, shard, limits).expect_err("refused").to_string();
        for part in [
            "shard 1 of 2 must open 50000 connections",
            "only 20000 files",
            "at least 50064",
            "spec.shards: 6 or more",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
        let roomy = Limits {
            soft: 1 << 20,
            hard: 1 << 20,
        };
        assert!(check(&s, shard, roomy).is_ok());
    }

    #[test]
    fn the_kernel_line_holds_the_asked_sysctls_as_in_force_and_the_limits() {
        let s = spec(concat!(
            "  target: {server: {}}\n  scenario: echo\n  connections: [10]\n",
            "  loadgen:\n",
            "    sysctls: {net.ipv4.ip_local_port_range: \"20000  40000\", net.ipv4.tcp_fin_timeout: \"17\"}\n",
            "    tuning: {sysctls: {net.core.somaxconn: \"4096\"}}\n",
        ));
        let limits = Limits {
            soft: 1024,
            hard: 4096,
        };
        let in_force = |key: &str| match key {
            "net.ipv4.ip_local_port_range" => Ok("20000 40000".to_string()),
            "net.ipv4.tcp_fin_timeout" => Ok("60".to_string()),
            _ => Err(sysctl::SysctlError::Name {
                key: key.to_string(),
            }),
        };
        let line = kernel(&s, limits, in_force);
        assert_eq!(line.open_files, (1024, 4096));
        assert_eq!(
            line.sysctls,
            [
                ("net.core.somaxconn".to_string(), None),
                (
                    "net.ipv4.ip_local_port_range".to_string(),
                    Some("20000 40000".to_string())
                ),
                (
                    "net.ipv4.tcp_fin_timeout".to_string(),
                    Some("60".to_string())
                ),
            ]
        );
        // A spec that asks for nothing still reports the port range.
        let plain = spec("  target: {server: {}}\n  scenario: echo\n  connections: [10]\n");
        let line = kernel(&plain, limits, in_force);
        assert_eq!(
            line.sysctls,
            [(
                "net.ipv4.ip_local_port_range".to_string(),
                Some("20000 40000".to_string())
            )]
        );
    }
}
