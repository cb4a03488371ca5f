//! What the kernel's counters say of a cell: accept and SYN queues that overflowed, TCP memory
//! that ran out, a connection-tracking table or the orphan sockets at their limit, connections
//! given up after retransmissions, and who sent the resets the clients saw. The increases are
//! summed over the namespaces the shards ran in (each counted once); a limit is judged in each.
//!
//! A namespace other processes share (the host's, in a local run: `KernelFigures::machine_wide`)
//! counts their connections too, so its counters may have moved with none of the run's: a
//! finding that the cell's own figures contradict (a full accept queue blamed in a cell whose
//! every connect succeeded quickly) is withheld, and every other one made from such counters
//! says so ([`MACHINE_WIDE`]). In a namespace of its own (a pod) the counters are the shard's.

use super::{Finding, Rule, finding};
use crate::kernel::{self as k, KernelFigures, Limited};
use crate::measure::{ConnectError, Dropped};
use crate::numbers::num;
use crate::result::{CellResult, RunResult};
use wsload_contract::server_metrics::{closed, rejected};

/// Every kernel rule of one cell (none without kernel figures, none in a quiet cell).
pub fn cell(r: &RunResult, c: &CellResult) -> Vec<Finding> {
    if c.kernel.is_empty() {
        return Vec::new();
    }
    [
        listen_overflow(c),
        syn_queue(c),
        tcp_memory(c),
        at_limit(
            c,
            k::CONNTRACK,
            Rule::KernelConntrack,
            "the connection-tracking table was full: the kernel drops the packets of new connections (their SYNs go unanswered); raise net.netfilter.nf_conntrack_max, or exempt the test's traffic from tracking (NOTRACK in the raw table)",
        ),
        at_limit(
            c,
            k::ORPHANS,
            Rule::KernelOrphans,
            "orphan sockets (closed by their process, not yet by TCP) reached net.ipv4.tcp_max_orphans: the kernel resets connections as they close; raise net.ipv4.tcp_max_orphans",
        ),
        abort_on_timeout(c),
        resets(r, c),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// What a finding made from a machine-wide namespace's counters adds to its evidence.
pub const MACHINE_WIDE: &str = "machine-wide: other processes on this host move these counters";

/// Linux's least retransmission timeout (TCP_RTO_MIN), seconds: a connection whose SYN, or
/// whose segment completing the handshake, a full queue dropped is sent again no sooner (a
/// SYN after 1 s), so a cell whose connects met one has a failure or a handshake this slow.
pub const RETRANSMIT_MIN_SECS: f64 = 0.2;

/// The namespaces in which one of `counters` grew.
fn grown_in<'a>(c: &'a CellResult, counters: &[&str]) -> Vec<&'a KernelFigures> {
    c.kernel
        .iter()
        .filter(|e| counters.iter().any(|n| e.increase(n) > 0))
        .collect()
}

/// Whether processes other than the run's share one of `entries`.
fn machine_wide(entries: &[&KernelFigures]) -> bool {
    entries.iter().any(|e| e.machine_wide)
}

/// `evidence`, and [`MACHINE_WIDE`] when it was read in such a namespace.
fn scoped(mut evidence: String, entries: &[&KernelFigures]) -> String {
    if machine_wide(entries) {
        evidence.push_str("; ");
        evidence.push_str(MACHINE_WIDE);
    }
    evidence
}

/// Whether the cell's own connects deny that a full queue dropped any of them: it opened none,
/// or every one it attempted succeeded and the slowest handshake took less than a
/// retransmission. Only counters another process may have moved are weighed against it.
fn connects_unharmed(c: &CellResult) -> bool {
    let counts = &c.measure.counts;
    let handshakes = &c.measure.hists.connect;
    counts.attempted == 0
        || (counts.failed_total() == 0
            && !handshakes.is_empty()
            && handshakes.max() < RETRANSMIT_MIN_SECS)
}

/// `TcpExtListenOverflows +12, TcpExtListenDrops +12` for those of `counters` that grew, and
/// where: `in net:[4026531840] (shards 0-3)`.
fn grew(c: &CellResult, counters: &[&str]) -> Option<String> {
    let grew_in = grown_in(c, counters);
    if grew_in.is_empty() {
        return None;
    }
    let figures: Vec<String> = counters
        .iter()
        .map(|n| (n, grew_in.iter().map(|e| e.increase(n)).sum::<u64>()))
        .filter(|(_, v)| *v > 0)
        .map(|(n, v)| format!("{n} +{v}"))
        .collect();
    Some(format!("{} {}", figures.join(", "), places(&grew_in)))
}

/// `in net:[4026531840] (shards 0-3)`, or `in 2 namespaces (net:[4026531840] of shard 0,
/// net:[4026531841] of shards 1-2)` (the first four).
fn places(entries: &[&KernelFigures]) -> String {
    match entries {
        [one] => format!("in {} ({})", one.place(), one.readers()),
        many => {
            let each: Vec<String> = many
                .iter()
                .take(4)
                .map(|e| format!("{} of {}", e.place(), e.readers()))
                .collect();
            let more = if many.len() > 4 { ", ..." } else { "" };
            format!("in {} namespaces ({}{more})", many.len(), each.join(", "))
        }
    }
}

/// Listeners whose accept queue was full: the kernel dropped the SYN or the handshake's last
/// ACK, and the client retransmits (connects of ~1 s and ~3 s) or gives up. Counted where
/// other processes listen too, and the cell's connects all quick and whole, the listeners
/// were theirs: nothing to say of this run.
pub fn listen_overflow(c: &CellResult) -> Option<Finding> {
    let counters = [k::LISTEN_OVERFLOWS, k::LISTEN_DROPS];
    let entries = grown_in(c, &counters);
    if machine_wide(&entries) && connects_unharmed(c) {
        return None;
    }
    let evidence = grew(c, &counters)?;
    finding(
        Rule::KernelListenOverflow,
        c,
        "the kernel dropped connections at a full accept queue (ListenOverflows): the server accepted more slowly than connections arrived; raise its listen backlog and net.core.somaxconn, add server replicas, or open connections more slowly (a smaller connect.batchSize, a longer connect.batchInterval)",
        scoped(evidence, &entries),
    )
}

/// SYNs that found the listener's SYN queue full: answered with cookies, or dropped. A
/// dropped SYN delays its connect as a full accept queue does, and is weighed the same way; a
/// cookie delays nothing, so where cookies were sent only a cell that opened nothing denies
/// them.
pub fn syn_queue(c: &CellResult) -> Option<Finding> {
    let cookies = [k::SYNCOOKIES_SENT, k::REQ_Q_FULL_DO_COOKIES];
    let counters = [
        k::SYNCOOKIES_SENT,
        k::REQ_Q_FULL_DO_COOKIES,
        k::REQ_Q_FULL_DROP,
        k::SYNCOOKIES_FAILED,
    ];
    let entries = grown_in(c, &counters);
    let denied = c.measure.counts.attempted == 0
        || (connects_unharmed(c) && grown_in(c, &cookies).is_empty());
    if machine_wide(&entries) && denied {
        return None;
    }
    let evidence = grew(c, &counters)?;
    finding(
        Rule::KernelSynQueue,
        c,
        "the SYN queue overflowed: the kernel answered SYNs with cookies (SyncookiesSent) or dropped them (TCPReqQFullDrop); raise net.ipv4.tcp_max_syn_backlog and the server's listen backlog, or open connections more slowly",
        scoped(evidence, &entries),
    )
}

/// TCP out of memory (connections aborted) or in memory pressure (buffers cut), from the
/// counters, or from the pages in use against tcp_mem's pressure threshold.
pub fn tcp_memory(c: &CellResult) -> Option<Finding> {
    let aborted: u64 = c
        .kernel
        .iter()
        .map(|e| e.increase(k::ABORT_ON_MEMORY))
        .sum();
    let counted = grew(c, &[k::ABORT_ON_MEMORY, k::MEMORY_PRESSURES]);
    let fullest = fullest(c, k::TCP_MEMORY);
    let pressed = fullest.filter(|(_, (level, limit))| level >= limit);
    if counted.is_none() && pressed.is_none() {
        return None;
    }
    let mut evidence = counted.unwrap_or_default();
    if let Some((e, (level, _))) = fullest {
        let tcp_mem = [k::TCP_MEM_MIN, k::TCP_MEM_PRESSURE, k::TCP_MEM_MAX]
            .map(|n| e.gauge(n).map_or("-".into(), |v| v.to_string()))
            .join(" ");
        if !evidence.is_empty() {
            evidence.push_str("; ");
        }
        evidence.push_str(&format!(
            "TCP memory peaked at {level} pages against net.ipv4.tcp_mem {tcp_mem} (pages; pressure from the second, the limit at the third)"
        ));
    }
    let mut read_in = grown_in(c, &[k::ABORT_ON_MEMORY, k::MEMORY_PRESSURES]);
    read_in.extend(fullest.map(|(e, _)| e));
    let evidence = scoped(evidence, &read_in);
    let cause = if aborted > 0 {
        "TCP ran out of memory (TCPAbortOnMemory; too many orphan sockets count there too): the kernel reset connections; raise net.ipv4.tcp_mem, or hold fewer connections (or smaller buffers) per machine"
    } else {
        "TCP memory went into pressure (TCPMemoryPressures, or the pages in use past tcp_mem's pressure threshold): the kernel shrinks socket buffers and drops data it cannot queue; raise net.ipv4.tcp_mem"
    };
    finding(Rule::KernelMemory, c, cause, evidence)
}

/// The namespace whose `l` came closest to its limit, and how close.
fn fullest(c: &CellResult, l: Limited) -> Option<(&KernelFigures, (u64, u64))> {
    c.kernel
        .iter()
        .filter_map(|e| Some((e, e.against(l)?)))
        .max_by(|(_, (a, m)), (_, (b, n))| {
            (*a as f64 / *m as f64).total_cmp(&(*b as f64 / *n as f64))
        })
}

/// A level (the connection-tracking table's entries, the orphan sockets) at or within 1% of
/// its limit in some namespace: `cause`, with the fullest namespace's figures.
pub fn at_limit(c: &CellResult, l: Limited, rule: Rule, cause: &str) -> Option<Finding> {
    let full: Vec<&KernelFigures> = c.kernel.iter().filter(|e| e.at_limit(l)).collect();
    let (e, (level, limit)) = fullest(c, l).filter(|(e, _)| e.at_limit(l))?;
    let mut evidence = format!(
        "{} peaked at {} of {} {limit} in {} ({})",
        l.level,
        level,
        l.limit,
        e.place(),
        e.readers()
    );
    if full.len() > 1 {
        evidence.push_str(&format!("; {} namespaces at their limit", full.len()));
    }
    finding(rule, c, cause, scoped(evidence, &full))
}

/// Connections the kernel gave up after its retransmissions went unanswered, in a cell whose
/// connections failed or dropped (elsewhere they are some other program's).
pub fn abort_on_timeout(c: &CellResult) -> Option<Finding> {
    let counts = &c.measure.counts;
    if counts.failed_total() + counts.dropped_total() == 0 {
        return None;
    }
    if c.kernel
        .iter()
        .all(|e| e.increase(k::ABORT_ON_TIMEOUT) == 0)
    {
        return None;
    }
    let counters = [
        k::ABORT_ON_TIMEOUT,
        k::TIMEOUTS,
        k::SYN_RETRANS,
        k::RETRANS_SEGS,
    ];
    let evidence = grew(c, &counters)?;
    finding(
        Rule::KernelTimeout,
        c,
        "the kernel gave up on connections whose retransmissions went unanswered (TCPAbortOnTimeout): the other side stopped answering (an overloaded server, a full queue, packets dropped on the way); look at the server's CPU and queues",
        scoped(evidence, &grown_in(c, &counters)),
    )
}

/// Kernel resets sent per connection that failed or dropped beyond which the resets are mostly
/// something else. A connection reset as a failure sends one, and a few more answer segments
/// still in flight; a connection that succeeded and was closed with data unread (the end of a
/// hold, a server dropping a socket) sends one too, so a large run's namespace counts one for
/// nearly every connection it closed.
pub const RESETS_PER_FAILURE: u64 = 10;

/// Of the cell's `closed_early` failures and `reset` drops, how many the servers' own counters
/// account for (the server findings name them): upgrades a replica gave up on for its handshake
/// timeout or refused at its cap end before the client is ready, those the clients did not
/// count as `timeout` first; connections a replica closed as idle end after it, those the
/// clients did not count as `server_close`. What is left is what only the kernel can speak to.
fn by_servers(c: &CellResult, early: u64, reset: u64) -> (u64, u64) {
    let Some(s) = &c.server_connections else {
        return (0, 0);
    };
    let counts = &c.measure.counts;
    let timed_out = counts
        .failed
        .get(&ConnectError::Timeout)
        .copied()
        .unwrap_or(0);
    let closes_seen = counts
        .dropped
        .get(&Dropped::ServerClose)
        .copied()
        .unwrap_or(0);
    let before_ready = (s.rejected_for(rejected::HANDSHAKE_TIMEOUT)
        + s.rejected_for(rejected::CAPACITY))
    .saturating_sub(timed_out);
    let idle = s
        .closed_for(closed::IDLE_TIMEOUT)
        .saturating_sub(closes_seen);
    (early.min(before_ready), reset.min(idle))
}

/// `closed_early: 27 of 300.0K attempts` (`, 20 of them the servers'` when the servers ended some).
fn seen(label: &str, n: u64, of: u64, what: &str, servers: u64) -> String {
    let mut s = format!("{label}: {} of {} {what}", num(n as f64), num(of as f64));
    if servers > 0 {
        s.push_str(&format!(", {} of them the servers'", num(servers as f64)));
    }
    s
}

/// Beside the connections the cell saw reset (or closed before they were ready, where a reset
/// while opening is counted), the resets the namespaces read sent. Only the failures the
/// servers' own counters leave unexplained call for it: a replica's handshake timeout or idle
/// close is its own finding, and the resets it caused say nothing more. A shard's own namespace
/// (one pod, one shard, in a cluster) holds only the load generator: its resets are the
/// client's, and resets seen with none sent there came from the other side. A namespace the
/// shards share may hold the servers too (a local run), and then both sides' resets are counted
/// together. Resets far more than the connections that failed are mostly connections' normal
/// ends, and say so rather than which side reset the failed ones.
pub fn resets(r: &RunResult, c: &CellResult) -> Option<Finding> {
    let counts = &c.measure.counts;
    let reset = counts.dropped.get(&Dropped::Reset).copied().unwrap_or(0);
    let early = counts
        .failed
        .get(&ConnectError::ClosedEarly)
        .copied()
        .unwrap_or(0);
    let (early_by_servers, reset_by_servers) = by_servers(c, early, reset);
    if reset + early == early_by_servers + reset_by_servers {
        return None;
    }
    let sent: u64 = c.kernel.iter().map(|e| e.increase(k::OUT_RSTS)).sum();
    let estab: u64 = c.kernel.iter().map(|e| e.increase(k::ESTAB_RESETS)).sum();
    let failed = counts.failed_total() + counts.dropped_total();
    let far_more = sent > RESETS_PER_FAILURE * failed;
    let mut seen_here = Vec::new();
    if reset > 0 {
        seen_here.push(seen(
            Dropped::Reset.label(),
            reset,
            counts.connected,
            "connections",
            reset_by_servers,
        ));
    }
    if early > 0 {
        seen_here.push(seen(
            ConnectError::ClosedEarly.label(),
            early,
            counts.attempted,
            "attempts",
            early_by_servers,
        ));
    }
    let against = if far_more {
        format!(
            " against {} connections failed or dropped",
            num(failed as f64)
        )
    } else {
        String::new()
    };
    let all: Vec<&KernelFigures> = c.kernel.iter().collect();
    let mut evidence = format!(
        "{}; {} +{sent}{against}, {} +{estab} {}",
        seen_here.join(", "),
        k::OUT_RSTS,
        k::ESTAB_RESETS,
        places(&all)
    );
    let aborts = grew(
        c,
        &[
            k::ABORT_ON_DATA,
            k::ABORT_ON_CLOSE,
            k::ABORT_ON_MEMORY,
            k::ABORT_ON_TIMEOUT,
        ],
    );
    if let Some(a) = &aborts {
        evidence.push_str(&format!("; resets of the kernel's own: {a}"));
    }
    // No reset drop left, only `closed_early`: a close before ready, a reset while opening or
    // a close frame alike.
    let what = if reset > reset_by_servers {
        "connections were reset"
    } else {
        "connections were reset or closed before they were ready"
    };
    // Each shard alone in its namespace, in a run of several: the namespaces hold only the
    // load generators.
    let own = r.shard_count > 1
        && c.kernel
            .iter()
            .all(|e| e.shards.len() == e.namespaces() && !e.machine_wide);
    let side = match (own, sent, far_more) {
        (true, _, true) => {
            "the load generators' own namespaces sent far more TCP resets (TcpOutRsts) than connections failed or dropped: most are the ends of connections that succeeded (a socket closed with data unread ends with a reset: TCPAbortOnData), so they do not say which side reset the failed ones; see the server's counters and log"
        }
        (false, _, true) => {
            "the namespace the load generator ran in sent far more TCP resets (TcpOutRsts) than connections failed or dropped: they count the ends of connections that succeeded (a socket closed with data unread ends with a reset: TCPAbortOnData), the server's too in a local run, so they do not say which side reset the failed ones: run the shards in their own namespaces (a cluster) to tell"
        }
        (true, 0, false) => {
            "the load generators' own namespaces sent no TCP reset (TcpOutRsts): the resets came from the other side (the server, or a proxy or NAT on the way); see the server's counters and log"
        }
        (true, _, false) => {
            "the load generators' own namespaces sent TCP resets (TcpOutRsts): the client side reset connections (see the kernel's reasons: TCPAbortOnData, a socket closed with data unread; TCPAbortOnMemory; TCPAbortOnTimeout)"
        }
        (false, 0, false) => {
            "no TCP reset was sent from the namespace read (TcpOutRsts): the resets came from another machine (the server's, or a proxy on the way), or the connections ended without a closing handshake"
        }
        (false, _, false) => {
            "TCP resets were sent from the namespace the load generator ran in (TcpOutRsts); it may hold the server too (a local run), where both sides' resets are counted together: run the shards in their own namespaces (a cluster) to tell which side sent them"
        }
    };
    finding(
        Rule::KernelResets,
        c,
        &format!("{what}, and {side}"),
        scoped(evidence, &all),
    )
}

#[cfg(test)]
mod machine_wide;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;
    use crate::kernel::Netns;
    use std::collections::BTreeMap;

    /// The fixture's cell (100 attempted, 99 connected, 1 refused) with shard `shard`'s
    /// reading: `increases` and `gauges` by name, everything else of the kernel 0.
    pub(super) fn read(
        shard: u32,
        increases: &[(&str, u64)],
        gauges: &[(&str, u64)],
    ) -> KernelFigures {
        let mut inc: BTreeMap<String, u64> =
            k::COUNTERS.iter().map(|c| (c.to_string(), 0)).collect();
        inc.extend(increases.iter().map(|(n, v)| (n.to_string(), *v)));
        KernelFigures {
            netns: Some(Netns {
                inode: 4026531840 + u64::from(shard),
                boot: "boot".into(),
            }),
            machine_wide: false,
            shards: vec![shard],
            summed: BTreeMap::new(),
            increases: inc,
            gauges: gauges.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        }
    }

    pub(super) fn result(kernel: Vec<KernelFigures>) -> RunResult {
        let mut r = shard(0, 100, 1, 1);
        r.shard_count = 1;
        r.cells[0].kernel = kernel;
        r
    }

    pub(super) fn texts(r: &RunResult) -> Vec<String> {
        cell(r, &r.cells[0])
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// A busy but healthy cell: connections opened and closed, segments retransmitted,
    /// sockets and memory well under their limits.
    pub(super) fn quiet() -> KernelFigures {
        read(
            0,
            &[
                (k::ACTIVE_OPENS, 100),
                (k::PASSIVE_OPENS, 100),
                (k::RETRANS_SEGS, 3),
                (k::TIMEOUTS, 2),
            ],
            &[
                (k::TCP_INUSE, 200),
                (k::TCP_ORPHAN, 0),
                (k::MAX_ORPHANS, 131072),
                (k::TCP_MEM, 118),
                (k::TCP_MEM_PEAK, 300),
                (k::TCP_MEM_MIN, 287898),
                (k::TCP_MEM_PRESSURE, 383867),
                (k::TCP_MEM_MAX, 575796),
                (k::CONNTRACK_COUNT, 250),
                (k::CONNTRACK_PEAK, 400),
                (k::CONNTRACK_MAX, 262144),
            ],
        )
    }

    #[test]
    fn a_quiet_cell_has_no_kernel_finding() {
        assert!(texts(&result(vec![quiet()])).is_empty());
        // Nor one without kernel figures.
        assert!(texts(&result(Vec::new())).is_empty());
        // Resets seen, and no figures to explain them: nothing to say.
        let mut r = result(Vec::new());
        r.cells[0].measure.counts.drop(Dropped::Reset);
        assert!(texts(&r).is_empty());
    }

    #[test]
    fn a_full_accept_queue_names_its_counters_and_the_fix() {
        let mut f = quiet();
        f.increases.insert(k::LISTEN_OVERFLOWS.into(), 18);
        f.increases.insert(k::LISTEN_DROPS.into(), 18);
        let r = result(vec![f]);
        assert_eq!(
            texts(&r),
            [
                "finding [100]: the kernel dropped connections at a full accept queue (ListenOverflows): the server accepted more slowly than connections arrived; raise its listen backlog and net.core.somaxconn, add server replicas, or open connections more slowly (a smaller connect.batchSize, a longer connect.batchInterval) (TcpExtListenOverflows +18, TcpExtListenDrops +18 in net:[4026531840] (shard 0))"
            ]
        );
        // The reports list it with the others.
        assert!(
            crate::findings::findings(&r)
                .iter()
                .any(|f| f.rule == Rule::KernelListenOverflow)
        );
    }

    #[test]
    fn increases_add_over_distinct_namespaces() {
        let mut a = quiet();
        a.increases.insert(k::SYNCOOKIES_SENT.into(), 5);
        let mut b = read(1, &[(k::SYNCOOKIES_SENT, 7), (k::REQ_Q_FULL_DROP, 2)], &[]);
        b.shards = vec![1, 2];
        let r = result(vec![a, b]);
        assert_eq!(
            texts(&r),
            [
                "finding [100]: the SYN queue overflowed: the kernel answered SYNs with cookies (SyncookiesSent) or dropped them (TCPReqQFullDrop); raise net.ipv4.tcp_max_syn_backlog and the server's listen backlog, or open connections more slowly (TcpExtSyncookiesSent +12, TcpExtTCPReqQFullDrop +2 in 2 namespaces (net:[4026531840] of shard 0, net:[4026531841] of shards 1-2))"
            ]
        );
    }

    #[test]
    fn tcp_memory_out_or_in_pressure_says_which_against_tcp_mem() {
        let mut f = quiet();
        f.increases.insert(k::ABORT_ON_MEMORY.into(), 40);
        f.gauges.insert(k::TCP_MEM_PEAK.into(), 575_800);
        assert_eq!(
            texts(&result(vec![f])),
            [
                "finding [100]: TCP ran out of memory (TCPAbortOnMemory; too many orphan sockets count there too): the kernel reset connections; raise net.ipv4.tcp_mem, or hold fewer connections (or smaller buffers) per machine (TcpExtTCPAbortOnMemory +40 in net:[4026531840] (shard 0); TCP memory peaked at 575800 pages against net.ipv4.tcp_mem 287898 383867 575796 (pages; pressure from the second, the limit at the third))"
            ]
        );
        // No counter grew, but the pages passed the pressure threshold: pressure.
        let mut f = quiet();
        f.gauges.insert(k::TCP_MEM.into(), 383_867);
        let found = texts(&result(vec![f]));
        assert_eq!(found.len(), 1);
        assert!(
            found[0].starts_with("finding [100]: TCP memory went into pressure (TCPMemoryPressures, or the pages in use past tcp_mem's pressure threshold): the kernel shrinks socket buffers and drops data it cannot queue; raise net.ipv4.tcp_mem (TCP memory peaked at 383867 pages"),
            "{found:?}"
        );
    }

    #[test]
    fn a_full_conntrack_table_or_orphans_at_their_limit_are_named() {
        let mut f = quiet();
        f.gauges.insert(k::CONNTRACK_PEAK.into(), 259_600);
        // 99.03% of the table: within 1% of it.
        assert_eq!(
            texts(&result(vec![f.clone()])),
            [
                "finding [100]: the connection-tracking table was full: the kernel drops the packets of new connections (their SYNs go unanswered); raise net.netfilter.nf_conntrack_max, or exempt the test's traffic from tracking (NOTRACK in the raw table) (nf_conntrack_count peaked at 259600 of nf_conntrack_max 262144 in net:[4026531840] (shard 0))"
            ]
        );
        f.gauges.insert(k::CONNTRACK_PEAK.into(), 259_000);
        assert!(texts(&result(vec![f.clone()])).is_empty(), "98.8%");
        f.gauges.insert(k::TCP_ORPHAN_PEAK.into(), 131_072);
        assert_eq!(
            texts(&result(vec![f])),
            [
                "finding [100]: orphan sockets (closed by their process, not yet by TCP) reached net.ipv4.tcp_max_orphans: the kernel resets connections as they close; raise net.ipv4.tcp_max_orphans (sockstat.TCP.orphan peaked at 131072 of tcp_max_orphans 131072 in net:[4026531840] (shard 0))"
            ]
        );
    }

    #[test]
    fn retransmissions_given_up_are_named_only_when_connections_failed() {
        let mut f = quiet();
        f.increases.insert(k::ABORT_ON_TIMEOUT.into(), 4);
        let mut r = result(vec![f]);
        r.cells[0].measure.counts.failed.clear();
        assert!(texts(&r).is_empty(), "some other program's connections");
        r.cells[0].measure.counts.fail(ConnectError::Timeout);
        assert_eq!(
            texts(&r),
            [
                "finding [100]: the kernel gave up on connections whose retransmissions went unanswered (TCPAbortOnTimeout): the other side stopped answering (an overloaded server, a full queue, packets dropped on the way); look at the server's CPU and queues (TcpExtTCPAbortOnTimeout +4, TcpExtTCPTimeouts +2, TcpRetransSegs +3 in net:[4026531840] (shard 0))"
            ]
        );
    }

    #[test]
    fn resets_say_which_side_sent_them_when_the_namespaces_tell() {
        // A cluster: two shards, each in its own namespace, which sent no reset.
        let cluster = |out_rsts: u64| {
            let mut r = result(vec![
                read(0, &[(k::OUT_RSTS, out_rsts), (k::ESTAB_RESETS, 60)], &[]),
                read(1, &[(k::ESTAB_RESETS, 40)], &[]),
            ]);
            r.shard_count = 2;
            let counts = &mut r.cells[0].measure.counts;
            counts.failed.clear();
            counts.connected = 100;
            for _ in 0..100 {
                counts.drop(Dropped::Reset);
            }
            r
        };
        assert_eq!(
            texts(&cluster(0)),
            [
                "finding [100]: connections were reset, and the load generators' own namespaces sent no TCP reset (TcpOutRsts): the resets came from the other side (the server, or a proxy or NAT on the way); see the server's counters and log (reset: 100 of 100 connections; TcpOutRsts +0, TcpEstabResets +100 in 2 namespaces (net:[4026531840] of shard 0, net:[4026531841] of shard 1))"
            ]
        );
        let found = texts(&cluster(100));
        assert!(
            found[0].starts_with("finding [100]: connections were reset, and the load generators' own namespaces sent TCP resets (TcpOutRsts): the client side reset connections"),
            "{found:?}"
        );
        // One namespace every shard shared (a local run): both sides' resets together.
        let mut local = quiet();
        local.shards = vec![0, 1];
        local.increases.insert(k::OUT_RSTS.into(), 7);
        local.increases.insert(k::ABORT_ON_DATA.into(), 7);
        let mut r = result(vec![local]);
        r.shard_count = 2;
        r.cells[0].measure.counts.fail(ConnectError::ClosedEarly);
        assert_eq!(
            texts(&r),
            [
                "finding [100]: connections were reset or closed before they were ready, and TCP resets were sent from the namespace the load generator ran in (TcpOutRsts); it may hold the server too (a local run), where both sides' resets are counted together: run the shards in their own namespaces (a cluster) to tell which side sent them (closed_early: 1 of 100 attempts; TcpOutRsts +7, TcpEstabResets +0 in net:[4026531840] (shards 0-1); resets of the kernel's own: TcpExtTCPAbortOnData +7 in net:[4026531840] (shards 0-1))"
            ]
        );
    }

    /// The 300,000-connection local run: every shard and replica in one namespace, 27 upgrades
    /// the servers gave up on (the clients' closed_early 27), and the TCP resets of 50,000
    /// holds closed with data unread at their end. `handshake_timeout` is the upgrades the
    /// replicas counted as given up (0: no replica counters at all).
    fn local_300k(handshake_timeout: u64) -> RunResult {
        let mut f = read(
            0,
            &[
                (k::OUT_RSTS, 50_512),
                (k::ABORT_ON_DATA, 50_480),
                (k::ESTAB_RESETS, 31),
            ],
            &[],
        );
        f.shards = (0..18).collect();
        let mut r = result(vec![f]);
        r.shard_count = 18;
        let c = &mut r.cells[0];
        let counts = &mut c.measure.counts;
        counts.failed.clear();
        (counts.attempted, counts.connected) = (300_000, 299_973);
        counts.failed.insert(ConnectError::ClosedEarly, 27);
        if handshake_timeout > 0 {
            c.server_connections = crate::server_connections::summarize(&[
                crate::fixtures::replica("r1", 150_000, &[], &[]),
                crate::fixtures::replica(
                    "r2",
                    149_973,
                    &[("handshake_timeout", handshake_timeout)],
                    &[],
                ),
            ]);
        }
        r
    }

    #[test]
    fn failures_the_servers_explain_get_no_reset_finding_however_many_resets_were_sent() {
        let r = local_300k(27);
        assert!(texts(&r).is_empty(), "{:?}", texts(&r));
        // The servers' finding says what happened to the 27; the failure is listed once.
        let rules: Vec<Rule> = crate::findings::findings(&r)
            .iter()
            .map(|f| f.rule)
            .collect();
        assert_eq!(rules, [Rule::Failure, Rule::ServerHandshakeTimeout]);
    }

    #[test]
    fn resets_far_more_than_the_failures_are_called_the_connections_ends() {
        // Without the servers' counters nothing explains the 27: the resets are set beside
        // them, and called what they mostly are.
        assert_eq!(
            texts(&local_300k(0)),
            [
                "finding [100]: connections were reset or closed before they were ready, and the namespace the load generator ran in sent far more TCP resets (TcpOutRsts) than connections failed or dropped: they count the ends of connections that succeeded (a socket closed with data unread ends with a reset: TCPAbortOnData), the server's too in a local run, so they do not say which side reset the failed ones: run the shards in their own namespaces (a cluster) to tell (closed_early: 27 of 300.0K attempts; TcpOutRsts +50512 against 27 connections failed or dropped, TcpEstabResets +31 in net:[4026531840] (shards 0-17); resets of the kernel's own: TcpExtTCPAbortOnData +50480 in net:[4026531840] (shards 0-17))"
            ]
        );
        // The servers explain 20 of them: the other 7 still call for the kernel's figures.
        let found = texts(&local_300k(20));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("(closed_early: 27 of 300.0K attempts, 20 of them the servers'; TcpOutRsts +50512 against 27 connections failed or dropped,"),
            "{found:?}"
        );
        // In the shards' own namespaces the resets are the client's, and still mostly ends.
        let mut r = local_300k(0);
        let mut other = read(1, &[(k::OUT_RSTS, 10)], &[]);
        other.shards = vec![1];
        r.cells[0].kernel[0].shards = vec![0];
        r.cells[0].kernel.push(other);
        r.shard_count = 2;
        let found = texts(&r);
        assert!(
            found[0].starts_with("finding [100]: connections were reset or closed before they were ready, and the load generators' own namespaces sent far more TCP resets (TcpOutRsts) than connections failed or dropped: most are the ends of connections that succeeded"),
            "{found:?}"
        );
        assert!(
            found[0].contains("TcpOutRsts +50522 against 27"),
            "{found:?}"
        );
    }

    #[test]
    fn resets_the_servers_did_not_cause_keep_their_finding() {
        // Every connection reset, the shards' own namespaces sent none, and the servers
        // closed none as idle nor refused any: the other side reset them.
        let mut r = result(vec![
            read(0, &[(k::ESTAB_RESETS, 60)], &[]),
            read(1, &[(k::ESTAB_RESETS, 40)], &[]),
        ]);
        r.shard_count = 2;
        let c = &mut r.cells[0];
        c.server_connections =
            crate::server_connections::summarize(&[crate::fixtures::replica("r", 100, &[], &[])]);
        let counts = &mut c.measure.counts;
        counts.failed.clear();
        counts.connected = 100;
        for _ in 0..100 {
            counts.drop(Dropped::Reset);
        }
        let other_side = "finding [100]: connections were reset, and the load generators' own namespaces sent no TCP reset (TcpOutRsts): the resets came from the other side (the server, or a proxy or NAT on the way); see the server's counters and log (reset: 100 of 100 connections; TcpOutRsts +0, TcpEstabResets +100 in 2 namespaces (net:[4026531840] of shard 0, net:[4026531841] of shard 1))";
        assert_eq!(texts(&r), [other_side]);
        // Idle closes the clients saw as the server's close explain no reset.
        let c = &mut r.cells[0];
        c.server_connections = crate::server_connections::summarize(&[crate::fixtures::replica(
            "r",
            100,
            &[],
            &[("idle_timeout", 30)],
        )]);
        c.measure.counts.dropped.insert(Dropped::ServerClose, 30);
        assert_eq!(texts(&r), [other_side]);
        // Idle closes the clients did not see as closes may be some of the resets: those are
        // said to be the servers', and the rest still blamed on the other side.
        r.cells[0]
            .measure
            .counts
            .dropped
            .remove(&Dropped::ServerClose);
        assert_eq!(
            texts(&r),
            [other_side.replace(
                "(reset: 100 of 100 connections;",
                "(reset: 100 of 100 connections, 30 of them the servers';"
            )]
        );
        // Idle closes the clients saw as resets are the server's finding, not the kernel's.
        r.cells[0].server_connections =
            crate::server_connections::summarize(&[crate::fixtures::replica(
                "r",
                100,
                &[],
                &[("idle_timeout", 100)],
            )]);
        assert!(texts(&r).is_empty(), "{:?}", texts(&r));
    }
}
