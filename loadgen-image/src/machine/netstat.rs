//! The kernel's figures for this process's network namespace, from /proc: the TCP counters of
//! `/proc/net/netstat` and `/proc/net/snmp`, the TCP line of `/proc/net/sockstat`, tcp_mem,
//! tcp_max_orphans, the connection-tracking table's fill, and which namespace it is. Read
//! before and after each cell (crate::conduct::run), and the levels once a second for their peaks
//! (crate::observe::sampler). A file that is missing (a container without it, another kernel) leaves
//! its figures out: nothing here fails a run.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use wsload_report::kernel::{self as k, KernelFigures, Netns};

/// Where /proc is: the system's, or a tree of files laid out like it (the tests').
#[derive(Debug, Clone)]
pub struct Proc {
    root: PathBuf,
}

/// One reading of the namespace: which it is, the counters kept (nstat names) and the gauges.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub netns: Option<Netns>,
    /// Whether processes other than this run's share the namespace ([`Proc::machine_wide`]).
    pub machine_wide: bool,
    pub counters: BTreeMap<String, i64>,
    pub gauges: BTreeMap<String, u64>,
}

/// The levels whose peaks over a cell are kept: TCP memory, orphans, conntrack entries.
const PEAKED: [(&str, &str); 3] = [
    (k::TCP_MEM, k::TCP_MEM_PEAK),
    (k::TCP_ORPHAN, k::TCP_ORPHAN_PEAK),
    (k::CONNTRACK_COUNT, k::CONNTRACK_PEAK),
];

impl Proc {
    pub fn system() -> Proc {
        Proc::at("/proc")
    }

    pub fn at(root: impl Into<PathBuf>) -> Proc {
        Proc { root: root.into() }
    }

    pub(super) fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    pub(super) fn read(&self, relative: &str) -> Option<String> {
        let path = self.path(relative);
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "left out of the kernel figures");
                None
            }
        }
    }

    /// A single number of a `/proc/sys` file.
    fn number(&self, relative: &str) -> Option<u64> {
        self.read(relative)?.trim().parse().ok()
    }

    /// This process's network namespace: the inode `/proc/self/ns/net` names, on this boot.
    pub fn netns(&self) -> Option<Netns> {
        let path = self.root.join("self/ns/net");
        let inode = match std::fs::metadata(&path) {
            Ok(m) => m.ino(),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "no namespace to name the kernel figures by");
                return None;
            }
        };
        let boot = self
            .read("sys/kernel/random/boot_id")
            .map(|b| b.trim().to_string())
            .unwrap_or_default();
        Some(Netns { inode, boot })
    }

    /// Everything a cell's figures take from the namespace now.
    pub fn reading(&self) -> Reading {
        let mut counters = BTreeMap::new();
        for file in ["net/netstat", "net/snmp"] {
            if let Some(text) = self.read(file) {
                counters.extend(
                    pairs(&text)
                        .into_iter()
                        .filter(|(name, _)| k::COUNTERS.contains(&name.as_str())),
                );
            }
        }
        let mut gauges = self.levels();
        if let Some(all) = self.read("net/sockstat").map(|t| sockstat(&t)) {
            gauges.extend(
                [k::TCP_INUSE, k::TCP_TW, k::TCP_ALLOC]
                    .into_iter()
                    .filter_map(|n| Some((n.to_string(), *all.get(n)?))),
            );
        }
        if let Some(text) = self.read("sys/net/ipv4/tcp_mem") {
            let values: Vec<u64> = text
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            if let [min, pressure, max] = values[..] {
                gauges.insert(k::TCP_MEM_MIN.into(), min);
                gauges.insert(k::TCP_MEM_PRESSURE.into(), pressure);
                gauges.insert(k::TCP_MEM_MAX.into(), max);
            }
        }
        for (name, file) in [
            (k::MAX_ORPHANS, "sys/net/ipv4/tcp_max_orphans"),
            (k::CONNTRACK_MAX, "sys/net/netfilter/nf_conntrack_max"),
        ] {
            if let Some(v) = self.number(file) {
                gauges.insert(name.into(), v);
            }
        }
        let netns = self.netns();
        Reading {
            machine_wide: netns.as_ref().is_some_and(|n| self.machine_wide(n)),
            netns,
            counters,
            gauges,
        }
    }

    /// The levels of [`PEAKED`] now: cheap enough to read once a second (each a few
    /// per-CPU sums in the kernel, whatever the number of sockets).
    pub fn levels(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        if let Some(all) = self.read("net/sockstat").map(|t| sockstat(&t)) {
            for n in [k::TCP_MEM, k::TCP_ORPHAN] {
                if let Some(v) = all.get(n) {
                    out.insert(n.to_string(), *v);
                }
            }
        }
        if let Some(v) = self.number("sys/net/netfilter/nf_conntrack_count") {
            out.insert(k::CONNTRACK_COUNT.into(), v);
        }
        out
    }
}

/// Every counter of a `/proc/net/netstat` or `/proc/net/snmp` text, by nstat name (the line's
/// prefix and the field's name: `TcpExtListenOverflows`). Each prefix has a line of names and,
/// next, a line of values; a value that is not a number is left out.
pub fn pairs(text: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let mut names: Option<(&str, Vec<&str>)> = None;
    for line in text.lines() {
        let Some((prefix, rest)) = line.split_once(':') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let is_values = fields.first().is_some_and(|f| f.parse::<i64>().is_ok());
        match (&names, is_values) {
            (Some((header, keys)), true) if *header == prefix => {
                for (key, value) in keys.iter().zip(&fields) {
                    if let Ok(v) = value.parse::<i64>() {
                        out.insert(format!("{prefix}{key}"), v);
                    }
                }
                names = None;
            }
            (_, false) => names = Some((prefix, fields)),
            _ => names = None,
        }
    }
    out
}

/// `/proc/net/sockstat` by `sockstat.<LINE>.<field>`: `TCP: inuse 1 orphan 0 tw 0 alloc 1
/// mem 118` gives `sockstat.TCP.inuse` = 1 and so on.
pub fn sockstat(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some((prefix, rest)) = line.split_once(':') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        for pair in fields.chunks_exact(2) {
            if let Ok(v) = pair[1].parse() {
                out.insert(format!("sockstat.{prefix}.{}", pair[0]), v);
            }
        }
    }
    out
}

/// The highest levels ([`PEAKED`]) seen since the cell began: sampled once a second, and
/// at the readings before and after the cell.
#[derive(Debug)]
pub struct Peaks {
    proc: Proc,
    seen: Mutex<BTreeMap<String, u64>>,
}

impl Peaks {
    pub fn new(proc: Proc) -> Peaks {
        Peaks {
            proc,
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    /// A cell begins: its peaks start at `before`'s levels.
    pub fn restart(&self, before: &Reading) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        *seen = PEAKED
            .iter()
            .filter_map(|(level, _)| Some((level.to_string(), *before.gauges.get(*level)?)))
            .collect();
    }

    /// Reads the levels now and keeps the higher.
    pub fn sample(&self) {
        let now = self.proc.levels();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, v) in now {
            let peak = seen.entry(name).or_insert(v);
            *peak = (*peak).max(v);
        }
    }

    /// The peaks so far.
    pub fn seen(&self) -> BTreeMap<String, u64> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What the namespace did over a cell read by `shard`: how much each counter grew from
/// `before` to `after`, the gauges at `after`, and each level's peak (`peaks` and the two
/// readings). `None` when the namespace could not be named, or changed (then the two
/// readings are not of one namespace).
pub fn figures(
    before: &Reading,
    after: &Reading,
    peaks: &BTreeMap<String, u64>,
    shard: u32,
) -> Option<KernelFigures> {
    let netns = after
        .netns
        .clone()
        .filter(|n| before.netns.as_ref() == Some(n))?;
    let increases = after
        .counters
        .iter()
        .filter_map(|(name, a)| {
            let b = before.counters.get(name)?;
            // A counter wraps only at 2^64 (2^32 on a 32-bit kernel); never less than none.
            Some((
                name.clone(),
                u64::try_from(a.saturating_sub(*b)).unwrap_or(0),
            ))
        })
        .collect();
    let mut gauges = after.gauges.clone();
    for (level, peak) in PEAKED {
        if let Some(end) = after.gauges.get(level) {
            let highest = [Some(end), before.gauges.get(level), peaks.get(level)]
                .into_iter()
                .flatten()
                .max()
                .copied()
                .unwrap_or(*end);
            gauges.insert(peak.to_string(), highest);
        }
    }
    Some(KernelFigures {
        netns: Some(netns),
        // Shared at either reading: some of the growth in between may be another's.
        machine_wide: before.machine_wide || after.machine_wide,
        shards: vec![shard],
        summed: BTreeMap::new(),
        increases,
        gauges,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// This machine's /proc/net/netstat, shortened: the format (a names line, then a values
    /// line, per prefix), with other numbers and a counter no wsload release knows.
    const NETSTAT: &str = "TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed EmbryonicRsts PruneCalled TW ListenOverflows ListenDrops TCPTimeouts TCPAbortOnData TCPAbortOnClose TCPAbortOnMemory TCPAbortOnTimeout TCPAbortFailed TCPMemoryPressures TCPBacklogDrop TCPReqQFullDoCookies TCPReqQFullDrop TCPSynRetrans TCPRcvQDrop TCPSomethingNew
TcpExt: 1 0 2 3 0 16 40 41 7 9 10 0 4 0 0 0 0 5 61 0 99
IpExt: InNoRoutes InTruncatedPkts InOctets OutOctets
IpExt: 0 0 248935001 719239
MPTcpExt: MPCapableSYNRX MPCapableSYNTX
MPTcpExt: 0 0
";

    /// /proc/net/snmp, shortened the same way: `MaxConn` is signed (-1).
    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 12139
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 30 2 0 9 0 12085 8077 0 0 17 0
Udp: InDatagrams NoPorts
Udp: 53 0
";

    const SOCKSTAT: &str = "sockets: used 14
TCP: inuse 1 orphan 0 tw 0 alloc 1 mem 118
UDP: inuse 0 mem 0
FRAG: inuse 0 memory 0
";

    #[test]
    fn counters_pair_each_names_line_with_its_values_line() {
        let c = pairs(NETSTAT);
        assert_eq!(c["TcpExtListenOverflows"], 40);
        assert_eq!(c["TcpExtListenDrops"], 41);
        assert_eq!(c["TcpExtTCPSynRetrans"], 61);
        assert_eq!(c["IpExtInOctets"], 248_935_001);
        // A counter this release does not know is read like the others (and not kept).
        assert_eq!(c["TcpExtTCPSomethingNew"], 99);
        assert_eq!(c.len(), 21 + 4 + 2);
        let s = pairs(SNMP);
        assert_eq!(s["TcpMaxConn"], -1);
        assert_eq!(s["TcpOutRsts"], 17);
        assert_eq!(s["TcpEstabResets"], 9);
        assert_eq!(s["UdpInDatagrams"], 53);
        // Values without their names, or names without values, are nothing.
        assert!(pairs("Tcp: 1 2 3\n").is_empty());
        assert!(pairs("Tcp: A B\nUdp: 1 2\n").is_empty());
        assert!(pairs("").is_empty());
    }

    #[test]
    fn sockstat_is_read_by_line_and_field() {
        let s = sockstat(SOCKSTAT);
        assert_eq!(s[k::TCP_INUSE], 1);
        assert_eq!(s[k::TCP_MEM], 118);
        assert_eq!(s["sockstat.sockets.used"], 14);
        assert_eq!(s["sockstat.FRAG.memory"], 0);
        assert_eq!(s.len(), 1 + 5 + 2 + 2);
    }

    /// A /proc tree of `files` under a directory of its own (removed on drop).
    pub(in crate::machine) struct Tree(PathBuf);

    impl Tree {
        pub(in crate::machine) fn new(name: &str, files: &[(&str, &str)]) -> Tree {
            let root =
                std::env::temp_dir().join(format!("wsload-netstat-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            for (path, text) in files {
                let path = root.join(path);
                std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
                std::fs::write(&path, text).expect("write");
            }
            Tree(root)
        }

        pub(in crate::machine) fn proc(&self) -> Proc {
            Proc::at(&self.0)
        }

        fn write(&self, path: &str, text: &str) {
            std::fs::write(self.0.join(path), text).expect("write");
        }

        /// `link` made another name of `target`'s inode, as one namespace is to two
        /// processes.
        pub(in crate::machine) fn link(self, link: &str, target: &str) -> Tree {
            let path = self.0.join(link);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::hard_link(self.0.join(target), path).expect("link");
            self
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_cell_keeps_the_chosen_counters_growth_the_gauges_and_the_peaks() {
        let tree = Tree::new(
            "cell",
            &[
                ("net/netstat", NETSTAT),
                ("net/snmp", SNMP),
                ("net/sockstat", SOCKSTAT),
                ("sys/net/ipv4/tcp_mem", "287898\t383867\t575796\n"),
                ("sys/net/ipv4/tcp_max_orphans", "131072\n"),
                ("sys/net/netfilter/nf_conntrack_count", "250\n"),
                ("sys/net/netfilter/nf_conntrack_max", "262144\n"),
                (
                    "sys/kernel/random/boot_id",
                    "0b1d6c1e-9d2a-4e55-8a3e-2f1f0d3c4b5a\n",
                ),
                ("self/ns/net", ""),
            ],
        );
        let proc = tree.proc();
        let before = proc.reading();
        let netns = before.netns.clone().expect("named");
        assert_eq!(netns.boot, "0b1d6c1e-9d2a-4e55-8a3e-2f1f0d3c4b5a");
        let peaks = Peaks::new(proc.clone());
        peaks.restart(&before);
        // During the cell: memory and conntrack climb, then fall back before the end.
        tree.write(
            "net/sockstat",
            "TCP: inuse 900 orphan 3 tw 0 alloc 901 mem 5000\n",
        );
        tree.write("sys/net/netfilter/nf_conntrack_count", "1200\n");
        peaks.sample();
        tree.write(
            "net/netstat",
            &NETSTAT.replace("TcpExt: 1 0 2 3 0 16 40 41", "TcpExt: 1 0 2 3 0 16 58 59"),
        );
        tree.write(
            "net/sockstat",
            "TCP: inuse 2 orphan 0 tw 7 alloc 2 mem 130\n",
        );
        tree.write("sys/net/netfilter/nf_conntrack_count", "260\n");
        let after = proc.reading();
        let f = figures(&before, &after, &peaks.seen(), 3).expect("figures");
        assert_eq!(f.netns, Some(netns));
        assert_eq!(f.shards, [3]);
        assert_eq!(f.increase(k::LISTEN_OVERFLOWS), 18);
        assert_eq!(f.increase(k::LISTEN_DROPS), 18);
        assert_eq!(f.increases[k::SYN_RETRANS], 0);
        // Kept: the chosen counters this kernel has (not TcpExtTCPSomethingNew, not IpExt).
        let mut kept: Vec<&str> = f.increases.keys().map(String::as_str).collect();
        kept.sort_unstable();
        let mut want: Vec<&str> = k::COUNTERS.to_vec();
        want.sort_unstable();
        assert_eq!(kept, want);
        let want: BTreeMap<String, u64> = [
            (k::TCP_INUSE, 2),
            (k::TCP_TW, 7),
            (k::TCP_ALLOC, 2),
            (k::TCP_MEM, 130),
            (k::TCP_MEM_PEAK, 5000),
            (k::TCP_ORPHAN, 0),
            (k::TCP_ORPHAN_PEAK, 3),
            (k::TCP_MEM_MIN, 287898),
            (k::TCP_MEM_PRESSURE, 383867),
            (k::TCP_MEM_MAX, 575796),
            (k::MAX_ORPHANS, 131072),
            (k::CONNTRACK_COUNT, 260),
            (k::CONNTRACK_PEAK, 1200),
            (k::CONNTRACK_MAX, 262144),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
        assert_eq!(f.gauges, want);
        // Nothing in the tree says another process shares it; a reading that does marks the
        // cell's figures machine-wide.
        assert!(!before.machine_wide && !f.machine_wide);
        let shared = Reading {
            machine_wide: true,
            ..after
        };
        let f = figures(&before, &shared, &peaks.seen(), 3).expect("figures");
        assert!(f.machine_wide);
    }

    #[test]
    fn missing_files_are_left_out_and_never_fail() {
        // Only the counters and the namespace: no sockstat, no sysctls, no conntrack module.
        let tree = Tree::new("partial", &[("net/snmp", SNMP), ("self/ns/net", "")]);
        let s = tree.proc().reading();
        assert!(s.netns.as_ref().is_some_and(|n| n.boot.is_empty()));
        assert_eq!(s.counters.len(), 7, "{:?}", s.counters);
        assert!(s.gauges.is_empty(), "{:?}", s.gauges);
        let f = figures(&s, &s, &BTreeMap::new(), 0).expect("figures");
        assert_eq!(f.increase(k::OUT_RSTS), 0);
        assert!(!f.increases.contains_key(k::LISTEN_OVERFLOWS));
        assert!(f.gauges.is_empty());
        // Nothing at all: no namespace to name, so no figures.
        let empty = Tree::new("empty", &[]);
        let s = empty.proc().reading();
        assert_eq!(s, Reading::default());
        assert_eq!(figures(&s, &s, &BTreeMap::new(), 0), None);
    }

    /// Two readings of different namespaces (a process that moved) are not one cell's.
    #[test]
    fn readings_of_two_namespaces_give_no_figures() {
        let named = |inode| Reading {
            netns: Some(Netns {
                inode,
                boot: String::new(),
            }),
            ..Reading::default()
        };
        assert_eq!(figures(&named(1), &named(2), &BTreeMap::new(), 0), None);
    }

    /// The system's own: this process's namespace has a name, and loopback has counters.
    #[test]
    fn this_machine_reads() {
        let s = Proc::system().reading();
        let netns = s.netns.expect("/proc/self/ns/net");
        assert!(netns.inode > 0);
        let target = std::fs::read_link("/proc/self/ns/net").expect("readlink");
        assert_eq!(target.to_string_lossy(), format!("net:[{}]", netns.inode));
        assert!(s.counters.contains_key(k::ACTIVE_OPENS), "{:?}", s.counters);
    }
}
