//! What the kernel counted in one network namespace over one cell: the TCP counters that
//! explain connections refused, dropped or reset (how much each grew), and the socket, memory
//! and connection-tracking gauges beside their limits. Each shard reads the namespace it runs
//! in; the merge keeps one entry per namespace, so shards sharing one (a local run: every
//! shard and the servers on the host's) count it once.
//!
//! The names here are the contract between the load generator, which reads them
//! (`wsload::netstat`), and the findings and reports, which read the result.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

// Counters, by their nstat(8) names: the line's prefix (`TcpExt`, `Tcp`) and the field's.
pub const LISTEN_OVERFLOWS: &str = "TcpExtListenOverflows";
pub const LISTEN_DROPS: &str = "TcpExtListenDrops";
pub const ABORT_ON_MEMORY: &str = "TcpExtTCPAbortOnMemory";
pub const ABORT_ON_TIMEOUT: &str = "TcpExtTCPAbortOnTimeout";
pub const ABORT_ON_DATA: &str = "TcpExtTCPAbortOnData";
pub const ABORT_ON_CLOSE: &str = "TcpExtTCPAbortOnClose";
pub const ABORT_FAILED: &str = "TcpExtTCPAbortFailed";
pub const MEMORY_PRESSURES: &str = "TcpExtTCPMemoryPressures";
pub const BACKLOG_DROP: &str = "TcpExtTCPBacklogDrop";
pub const REQ_Q_FULL_DROP: &str = "TcpExtTCPReqQFullDrop";
pub const REQ_Q_FULL_DO_COOKIES: &str = "TcpExtTCPReqQFullDoCookies";
pub const SYNCOOKIES_SENT: &str = "TcpExtSyncookiesSent";
pub const SYNCOOKIES_FAILED: &str = "TcpExtSyncookiesFailed";
pub const SYN_RETRANS: &str = "TcpExtTCPSynRetrans";
pub const TIMEOUTS: &str = "TcpExtTCPTimeouts";
pub const RCV_Q_DROP: &str = "TcpExtTCPRcvQDrop";
pub const EMBRYONIC_RSTS: &str = "TcpExtEmbryonicRsts";
pub const ACTIVE_OPENS: &str = "TcpActiveOpens";
pub const PASSIVE_OPENS: &str = "TcpPassiveOpens";
pub const ATTEMPT_FAILS: &str = "TcpAttemptFails";
pub const ESTAB_RESETS: &str = "TcpEstabResets";
pub const OUT_RSTS: &str = "TcpOutRsts";
pub const RETRANS_SEGS: &str = "TcpRetransSegs";
pub const IN_ERRS: &str = "TcpInErrs";

/// Every counter a cell's figures keep, in the order the reports list them.
pub const COUNTERS: [&str; 24] = [
    LISTEN_OVERFLOWS,
    LISTEN_DROPS,
    SYNCOOKIES_SENT,
    SYNCOOKIES_FAILED,
    REQ_Q_FULL_DO_COOKIES,
    REQ_Q_FULL_DROP,
    ABORT_ON_MEMORY,
    MEMORY_PRESSURES,
    ABORT_ON_TIMEOUT,
    ABORT_ON_DATA,
    ABORT_ON_CLOSE,
    ABORT_FAILED,
    BACKLOG_DROP,
    RCV_Q_DROP,
    EMBRYONIC_RSTS,
    SYN_RETRANS,
    TIMEOUTS,
    ACTIVE_OPENS,
    PASSIVE_OPENS,
    ATTEMPT_FAILS,
    ESTAB_RESETS,
    OUT_RSTS,
    RETRANS_SEGS,
    IN_ERRS,
];

// Gauges at the cell's end (and peaks over it): /proc/net/sockstat's TCP line by line and
// field, then the sysctls by their file's name (what sysctl(8) calls net.ipv4.tcp_mem is
// `tcp_mem`).
pub const TCP_INUSE: &str = "sockstat.TCP.inuse";
pub const TCP_ORPHAN: &str = "sockstat.TCP.orphan";
pub const TCP_ORPHAN_PEAK: &str = "sockstat.TCP.orphan.peak";
pub const TCP_TW: &str = "sockstat.TCP.tw";
pub const TCP_ALLOC: &str = "sockstat.TCP.alloc";
/// Pages of memory TCP holds, every namespace of the machine together.
pub const TCP_MEM: &str = "sockstat.TCP.mem";
pub const TCP_MEM_PEAK: &str = "sockstat.TCP.mem.peak";
pub const TCP_MEM_MIN: &str = "tcp_mem.min";
pub const TCP_MEM_PRESSURE: &str = "tcp_mem.pressure";
pub const TCP_MEM_MAX: &str = "tcp_mem.max";
pub const MAX_ORPHANS: &str = "tcp_max_orphans";
pub const CONNTRACK_COUNT: &str = "nf_conntrack_count";
pub const CONNTRACK_PEAK: &str = "nf_conntrack_count.peak";
pub const CONNTRACK_MAX: &str = "nf_conntrack_max";

/// A level compared with its limit: at the end, its peak over the cell, the limit, and the
/// gauges that go with the limit (tcp_mem's other two values).
#[derive(Debug, Clone, Copy)]
pub struct Limited {
    pub level: &'static str,
    pub peak: &'static str,
    pub limit: &'static str,
    pub with: &'static [&'static str],
}

/// TCP memory against tcp_mem's pressure threshold (the kernel's third value is the hard limit).
pub const TCP_MEMORY: Limited = Limited {
    level: TCP_MEM,
    peak: TCP_MEM_PEAK,
    limit: TCP_MEM_PRESSURE,
    with: &[TCP_MEM_MIN, TCP_MEM_MAX],
};
pub const ORPHANS: Limited = Limited {
    level: TCP_ORPHAN,
    peak: TCP_ORPHAN_PEAK,
    limit: MAX_ORPHANS,
    with: &[],
};
pub const CONNTRACK: Limited = Limited {
    level: CONNTRACK_COUNT,
    peak: CONNTRACK_PEAK,
    limit: CONNTRACK_MAX,
    with: &[],
};

/// Namespaces a cell keeps one entry each for; those past it are summed into one more entry
/// (`netns: None`), so a result of thousands of shard pods stays about one shard's size.
pub const MAX_NAMESPACES: usize = 32;

/// A network namespace: its inode (`readlink /proc/self/ns/net` says `net:[N]`) on a kernel
/// boot. The inode alone repeats across machines (every host's own namespace has the same
/// one), so two shards are in one namespace only when their boot ids agree too.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Netns {
    pub inode: u64,
    /// `/proc/sys/kernel/random/boot_id` (empty when unreadable).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot: String,
}

impl std::fmt::Display for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "net:[{}]", self.inode)
    }
}

/// One network namespace's figures over one cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KernelFigures {
    /// The namespace read; `None` on the entry that sums those past [`MAX_NAMESPACES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<Netns>,
    /// Processes that are not the run's share the namespace (the host's own, where the
    /// kernel threads live, or one another user listens in): other programs on the machine
    /// move its counters, so their growth is not the run's alone. Set on the summing entry
    /// when any namespace in it is; unset in results written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub machine_wide: bool,
    /// The shards that read it, ascending. When several shared it, the figures are the first
    /// one's reading (each read the whole namespace over the same cell).
    pub shards: Vec<u32>,
    /// On the summing entry: the namespaces in its sums, by boot id, so that a shard of one
    /// of them merged later is not counted again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub summed: BTreeMap<String, BTreeSet<u64>>,
    /// How much each of [`COUNTERS`] grew over the cell; a counter this kernel does not have
    /// is absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub increases: BTreeMap<String, u64>,
    /// The gauges at the cell's end, their peaks and the limits; an unreadable one is absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gauges: BTreeMap<String, u64>,
}

impl KernelFigures {
    /// How much `counter` grew (0 when not read).
    pub fn increase(&self, counter: &str) -> u64 {
        self.increases.get(counter).copied().unwrap_or(0)
    }

    pub fn gauge(&self, name: &str) -> Option<u64> {
        self.gauges.get(name).copied()
    }

    /// The highest `l.level` was over the cell, and its limit (when both were read and the
    /// limit is not 0).
    pub fn against(&self, l: Limited) -> Option<(u64, u64)> {
        let level = match (self.gauge(l.level), self.gauge(l.peak)) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b)?,
        };
        let limit = self.gauge(l.limit).filter(|m| *m > 0)?;
        Some((level, limit))
    }

    /// `l.level` at or within 1% of its limit.
    pub fn at_limit(&self, l: Limited) -> bool {
        self.against(l)
            .is_some_and(|(level, limit)| level.saturating_mul(100) >= limit.saturating_mul(99))
    }

    /// How many namespaces it holds: 1, or those summed on the summing entry.
    pub fn namespaces(&self) -> usize {
        match self.netns {
            Some(_) => 1,
            None => self.summed.values().map(BTreeSet::len).sum(),
        }
    }

    /// ` (machine-wide)` after [`KernelFigures::place`] where other processes share it.
    pub fn scope(&self) -> &'static str {
        if self.machine_wide {
            " (machine-wide)"
        } else {
            ""
        }
    }

    /// What it is: `net:[4026531840]`, or `3 other namespaces` on the summing entry.
    pub fn place(&self) -> String {
        match &self.netns {
            Some(n) => n.to_string(),
            None => format!("{} other namespaces", self.namespaces()),
        }
    }

    /// Who read it: `shard 3`, `shards 0-3, 7`.
    pub fn readers(&self) -> String {
        let word = if self.shards.len() == 1 {
            "shard"
        } else {
            "shards"
        };
        format!("{word} {}", ranges(&self.shards))
    }

    /// The counters that grew, in [`COUNTERS`] order: `TcpExtListenOverflows +12, ...`.
    pub fn grown(&self) -> Vec<String> {
        COUNTERS
            .iter()
            .filter(|c| self.increase(c) > 0)
            .map(|c| format!("{c} +{}", self.increase(c)))
            .collect()
    }

    /// The gauges in a few words: `TCP 1002 in use, 0 orphans, 5 time-wait, 118 pages
    /// (peak 300) of tcp_mem 287898/383867/575796; conntrack 100 (peak 120) of 262144`.
    pub fn gauges_line(&self) -> String {
        let g = |name| self.gauge(name);
        let mut parts = Vec::new();
        let mut sockets = Vec::new();
        if let Some(n) = g(TCP_INUSE) {
            sockets.push(format!("{n} in use"));
        }
        if let Some(n) = g(TCP_ORPHAN) {
            let mut s = format!("{n} orphans");
            if let Some(p) = g(TCP_ORPHAN_PEAK).filter(|p| *p > n) {
                let _ = write!(s, " (peak {p})");
            }
            if let Some(m) = g(MAX_ORPHANS) {
                let _ = write!(s, " of {m}");
            }
            sockets.push(s);
        }
        if let Some(n) = g(TCP_TW) {
            sockets.push(format!("{n} time-wait"));
        }
        if let Some(n) = g(TCP_MEM) {
            let mut s = format!("{n} pages");
            if let Some(p) = g(TCP_MEM_PEAK).filter(|p| *p > n) {
                let _ = write!(s, " (peak {p})");
            }
            if let (Some(a), Some(b), Some(c)) =
                (g(TCP_MEM_MIN), g(TCP_MEM_PRESSURE), g(TCP_MEM_MAX))
            {
                let _ = write!(s, " of tcp_mem {a}/{b}/{c}");
            }
            sockets.push(s);
        }
        if !sockets.is_empty() {
            parts.push(format!("TCP {}", sockets.join(", ")));
        }
        if let Some(n) = g(CONNTRACK_COUNT) {
            let mut s = format!("conntrack {n}");
            if let Some(p) = g(CONNTRACK_PEAK).filter(|p| *p > n) {
                let _ = write!(s, " (peak {p})");
            }
            if let Some(m) = g(CONNTRACK_MAX) {
                let _ = write!(s, " of {m}");
            }
            parts.push(s);
        }
        parts.join("; ")
    }

    /// Adds `other`, a namespace not in this summing entry, to it: counters add; socket counts
    /// add; each level compared with a limit is kept from the fuller of the two, with its
    /// limit, so a table full in one namespace still shows as full.
    fn absorb(&mut self, other: &KernelFigures) {
        if let Some(n) = &other.netns {
            self.summed
                .entry(n.boot.clone())
                .or_default()
                .insert(n.inode);
        }
        for (boot, inodes) in &other.summed {
            self.summed.entry(boot.clone()).or_default().extend(inodes);
        }
        self.add_shards(&other.shards);
        self.machine_wide |= other.machine_wide;
        for (k, v) in &other.increases {
            *self.increases.entry(k.clone()).or_default() += v;
        }
        for name in [TCP_INUSE, TCP_TW, TCP_ALLOC] {
            if let Some(v) = other.gauge(name) {
                *self.gauges.entry(name.to_string()).or_default() += v;
            }
        }
        for l in [TCP_MEMORY, ORPHANS, CONNTRACK] {
            let fullness = |f: &KernelFigures| f.against(l).map(|(a, b)| a as f64 / b as f64);
            let theirs_fuller = match (fullness(self), fullness(other)) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(a), Some(b)) => b > a,
            };
            if theirs_fuller {
                for name in [l.level, l.peak, l.limit].iter().chain(l.with) {
                    match other.gauge(name) {
                        Some(v) => self.gauges.insert(name.to_string(), v),
                        None => self.gauges.remove(*name),
                    };
                }
            }
        }
    }

    fn add_shards(&mut self, shards: &[u32]) {
        self.shards.extend(shards);
        self.shards.sort_unstable();
        self.shards.dedup();
    }

    /// Whether this (summing) entry already counts `n`.
    fn sums(&self, n: &Netns) -> bool {
        self.summed
            .get(&n.boot)
            .is_some_and(|inodes| inodes.contains(&n.inode))
    }
}

/// `0-3, 7, 9-10`.
pub fn ranges(sorted: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// Adds another result's entries of the same cell to `into`: a namespace already there counts
/// once (the reading of its lowest shard is kept, every reader is named); distinct ones stay
/// side by side, up to [`MAX_NAMESPACES`], and the rest are summed into one entry.
///
/// Exact but for one case: two results that each summed the same namespace past the cap
/// (`wsload merge` of two merged results, each of more than 32 namespaces, that share one)
/// count it twice. A shard's own result has one entry, so merging shard by shard (the
/// operator, a local run's shards) is exact.
pub fn merge(into: &mut Vec<KernelFigures>, from: &[KernelFigures]) {
    for entry in from {
        match &entry.netns {
            Some(n) => add_one(into, entry, n),
            None => add_summed(into, entry),
        }
    }
    fold_past_cap(into);
}

fn add_one(into: &mut Vec<KernelFigures>, entry: &KernelFigures, n: &Netns) {
    if let Some(same) = into.iter_mut().find(|e| e.netns.as_ref() == Some(n)) {
        let first = |e: &KernelFigures| e.shards.first().copied().unwrap_or(u32::MAX);
        let mut readers = same.shards.clone();
        readers.extend(&entry.shards);
        // One namespace: shared if any reader found it shared, whose reading is kept.
        let machine_wide = same.machine_wide || entry.machine_wide;
        if first(entry) < first(same) {
            *same = entry.clone();
        }
        same.add_shards(&readers);
        same.machine_wide = machine_wide;
        return;
    }
    if let Some(summing) = into.iter_mut().find(|e| e.netns.is_none() && e.sums(n)) {
        summing.add_shards(&entry.shards);
        summing.machine_wide |= entry.machine_wide;
        return;
    }
    into.push(entry.clone());
}

fn add_summed(into: &mut Vec<KernelFigures>, entry: &KernelFigures) {
    // Namespaces kept one by one here and summed there: the sum counts them already.
    let mut readers = Vec::new();
    into.retain(|e| match &e.netns {
        Some(n) if entry.sums(n) => {
            readers.extend(&e.shards);
            false
        }
        _ => true,
    });
    match into.iter_mut().find(|e| e.netns.is_none()) {
        Some(summing) => summing.absorb(entry),
        None => into.push(entry.clone()),
    }
    if let Some(summing) = into.iter_mut().find(|e| e.netns.is_none()) {
        summing.add_shards(&readers);
    }
}

/// Keeps the first [`MAX_NAMESPACES`] namespaces (by their first shard) one by one and sums the
/// rest into the summing entry, which goes last.
fn fold_past_cap(into: &mut Vec<KernelFigures>) {
    let first = |e: &KernelFigures| e.shards.first().copied().unwrap_or(u32::MAX);
    let (mut one_by_one, summing): (Vec<KernelFigures>, Vec<KernelFigures>) =
        into.drain(..).partition(|e| e.netns.is_some());
    one_by_one.sort_by_key(first);
    let mut summing = summing.into_iter().next();
    for past in one_by_one.split_off(one_by_one.len().min(MAX_NAMESPACES)) {
        match summing.as_mut() {
            Some(s) => s.absorb(&past),
            None => {
                let mut s = KernelFigures::default();
                s.absorb(&past);
                summing = Some(s);
            }
        }
    }
    *into = one_by_one;
    into.extend(summing);
}

/// Every namespace's increases summed (entries are distinct namespaces).
pub fn summed(entries: &[KernelFigures]) -> BTreeMap<&'static str, u64> {
    COUNTERS
        .iter()
        .map(|c| (*c, entries.iter().map(|e| e.increase(c)).sum()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(inode: u64) -> Netns {
        Netns {
            inode,
            boot: "b1".into(),
        }
    }

    /// Shard `shard`'s reading of namespace `inode`: `overflows` listen overflows, `inuse`
    /// sockets, conntrack at `conntrack` of 1000.
    fn read(shard: u32, inode: u64, overflows: u64, inuse: u64, conntrack: u64) -> KernelFigures {
        KernelFigures {
            netns: Some(ns(inode)),
            machine_wide: false,
            shards: vec![shard],
            summed: BTreeMap::new(),
            increases: [(LISTEN_OVERFLOWS.to_string(), overflows)].into(),
            gauges: [
                (TCP_INUSE.to_string(), inuse),
                (CONNTRACK_COUNT.to_string(), conntrack),
                (CONNTRACK_MAX.to_string(), 1000),
            ]
            .into(),
        }
    }

    #[test]
    fn shards_of_one_namespace_count_once_and_distinct_ones_add() {
        let mut cell = vec![read(2, 7, 12, 100, 10)];
        // Shard 0 in the same namespace read it too: one entry, shard 0's reading, both named.
        merge(&mut cell, &[read(0, 7, 11, 90, 10)]);
        assert_eq!(cell.len(), 1);
        assert_eq!(cell[0].shards, [0, 2]);
        assert_eq!(cell[0].increase(LISTEN_OVERFLOWS), 11);
        assert_eq!(cell[0].readers(), "shards 0, 2");
        // Shard 1 in the same namespace, after: still one entry, still shard 0's reading.
        merge(&mut cell, &[read(1, 7, 13, 95, 10)]);
        assert_eq!(cell[0].shards, [0, 1, 2]);
        assert_eq!(cell[0].readers(), "shards 0-2");
        assert_eq!(summed(&cell)[LISTEN_OVERFLOWS], 11);
        // A namespace of the same number on another machine is another namespace.
        let mut other_machine = read(3, 7, 5, 1, 10);
        other_machine.netns = Some(Netns {
            inode: 7,
            boot: "b2".into(),
        });
        merge(&mut cell, &[other_machine, read(4, 8, 1, 1, 10)]);
        assert_eq!(cell.len(), 3);
        assert_eq!(summed(&cell)[LISTEN_OVERFLOWS], 11 + 5 + 1);
    }

    #[test]
    fn a_namespace_one_reader_found_shared_stays_machine_wide() {
        let mut shared = read(1, 7, 3, 10, 0);
        shared.machine_wide = true;
        // Shard 0's reading is kept; shard 1 saw another user's listener in it.
        let mut cell = vec![shared.clone()];
        merge(&mut cell, &[read(0, 7, 2, 10, 0)]);
        assert_eq!((cell.len(), cell[0].shards.clone()), (1, vec![0, 1]));
        assert!(cell[0].machine_wide);
        assert_eq!(cell[0].increase(LISTEN_OVERFLOWS), 2);
        assert_eq!(cell[0].scope(), " (machine-wide)");
        // Summed past the cap, the sum is machine-wide when one of its namespaces is.
        let mut many = Vec::new();
        for shard in 0..33u32 {
            let mut f = read(shard, 100 + u64::from(shard), 1, 1, 0);
            f.machine_wide = shard == 32;
            merge(&mut many, &[f]);
        }
        assert!(!many[0].machine_wide && many[0].scope().is_empty());
        assert!(
            many.last()
                .is_some_and(|s| s.netns.is_none() && s.machine_wide)
        );
        // In the JSON only when set: results written before read as before.
        let json = serde_json::to_string(&shared).expect("ser");
        assert!(json.contains(r#""machineWide":true"#), "{json}");
        assert!(
            !serde_json::to_string(&read(0, 7, 2, 10, 0))
                .expect("ser")
                .contains("machineWide")
        );
        assert_eq!(
            serde_json::from_str::<KernelFigures>(&json).expect("de"),
            shared
        );
    }

    #[test]
    fn namespaces_past_the_cap_are_summed_and_still_count_once() {
        let mut cell = Vec::new();
        // In reverse, as results may come: the lowest shards keep their own entries.
        for shard in (0..40u32).rev() {
            merge(
                &mut cell,
                &[read(shard, 100 + u64::from(shard), 1, 10, u64::from(shard))],
            );
        }
        assert_eq!(cell.len(), MAX_NAMESPACES + 1);
        assert_eq!(cell[0].shards, [0]);
        let summing = cell.last().expect("the summing entry");
        assert_eq!(summing.netns, None);
        assert_eq!(summing.shards, (32..40).collect::<Vec<u32>>());
        assert_eq!(summing.place(), "8 other namespaces");
        assert_eq!(summing.namespaces(), summing.shards.len(), "one shard each");
        assert_eq!(summing.increase(LISTEN_OVERFLOWS), 8);
        assert_eq!(summing.gauge(TCP_INUSE), Some(80));
        // The fullest table of the eight, with its limit.
        assert_eq!(summing.against(CONNTRACK), Some((39, 1000)));
        assert_eq!(summed(&cell)[LISTEN_OVERFLOWS], 40);
        // Another shard of a summed namespace is named, not counted again.
        merge(&mut cell, &[read(40, 139, 5, 10, 0)]);
        assert_eq!(cell.len(), MAX_NAMESPACES + 1);
        assert_eq!(summed(&cell)[LISTEN_OVERFLOWS], 40);
        assert_eq!(cell.last().expect("summing").shards.last(), Some(&40));
        // A merged result whose sum holds a namespace kept here one by one: counted once.
        let mut theirs = Vec::new();
        for shard in 41..75u32 {
            let inode = if shard == 74 {
                100
            } else {
                1000 + u64::from(shard)
            };
            merge(&mut theirs, &[read(shard, inode, 1, 10, 0)]);
        }
        assert!(theirs.last().expect("summing").sums(&ns(100)));
        merge(&mut cell, &theirs);
        // 40 namespaces here, 33 new there (namespace 100 is shard 0's, summed there with
        // shard 74's reading).
        assert_eq!(summed(&cell)[LISTEN_OVERFLOWS], 40 + 33);
        assert_eq!(cell.len(), MAX_NAMESPACES + 1);
        let shards: usize = cell.iter().map(|e| e.shards.len()).sum();
        assert_eq!(shards, 75);
    }

    #[test]
    fn a_level_at_or_within_one_percent_of_its_limit_is_at_it() {
        let mut f = read(0, 1, 0, 0, 989);
        assert!(!f.at_limit(CONNTRACK));
        f.gauges.insert(CONNTRACK_PEAK.into(), 990);
        assert!(f.at_limit(CONNTRACK));
        assert_eq!(f.against(CONNTRACK), Some((990, 1000)));
        // Without a limit (no conntrack module), nothing is at it.
        f.gauges.remove(CONNTRACK_MAX);
        assert!(!f.at_limit(CONNTRACK));
        assert!(!f.at_limit(ORPHANS));
    }

    #[test]
    fn a_namespace_reads_in_one_line() {
        let mut f = read(3, 4026531840, 12, 1002, 100);
        f.increases.insert(OUT_RSTS.into(), 40);
        f.increases.insert(RCV_Q_DROP.into(), 0);
        f.gauges.extend([
            (TCP_ORPHAN.to_string(), 0),
            (MAX_ORPHANS.to_string(), 131072),
            (TCP_TW.to_string(), 5),
            (TCP_MEM.to_string(), 118),
            (TCP_MEM_PEAK.to_string(), 300),
            (TCP_MEM_MIN.to_string(), 287898),
            (TCP_MEM_PRESSURE.to_string(), 383867),
            (TCP_MEM_MAX.to_string(), 575796),
            (CONNTRACK_PEAK.to_string(), 120),
        ]);
        assert_eq!(f.place(), "net:[4026531840]");
        assert_eq!(f.readers(), "shard 3");
        assert_eq!(f.grown(), ["TcpExtListenOverflows +12", "TcpOutRsts +40"]);
        assert_eq!(
            f.gauges_line(),
            "TCP 1002 in use, 0 orphans of 131072, 5 time-wait, 118 pages (peak 300) of tcp_mem 287898/383867/575796; conntrack 100 (peak 120) of 1000"
        );
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
    }

    #[test]
    fn figures_read_back_from_json_and_absent_ones_are_left_out() {
        let f = read(1, 9, 2, 3, 4);
        let json = serde_json::to_string(&f).expect("ser");
        assert_eq!(
            json,
            r#"{"netns":{"inode":9,"boot":"b1"},"shards":[1],"increases":{"TcpExtListenOverflows":2},"gauges":{"nf_conntrack_count":4,"nf_conntrack_max":1000,"sockstat.TCP.inuse":3}}"#
        );
        assert_eq!(serde_json::from_str::<KernelFigures>(&json).expect("de"), f);
    }
}
