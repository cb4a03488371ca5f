//! The kernel's findings from a namespace other processes share (the host's): withheld where
//! the cell's own connects deny them, said to be machine-wide otherwise; and, in a namespace
//! of its own, made as before from the same counters.

use super::cell;
use super::tests::{quiet, read, result, texts};
use crate::findings::Rule;
use crate::kernel::{self as k, KernelFigures};
use crate::measure::{ConnectError, Dropped};
use crate::result::RunResult;

/// The reported cell: 200 connections, all of them established, no failure, handshakes of
/// 2 to 94 ms; `kernel` read over it.
fn healthy_200(kernel: Vec<KernelFigures>) -> RunResult {
    let mut r = result(kernel);
    let m = &mut r.cells[0].measure;
    m.counts.failed.clear();
    (m.counts.attempted, m.counts.connected) = (200, 200);
    for ms in 2..=94 {
        m.hists.connect.record(std::time::Duration::from_millis(ms));
    }
    r
}

/// What another program did to the host's namespace while the cell ran: its listeners'
/// accept and SYN queues overflowed over 1,420 connections of its own, far more than the
/// cell's 200.
fn others_overflowed(machine_wide: bool) -> KernelFigures {
    let mut f = read(
        0,
        &[
            (k::ACTIVE_OPENS, 1420),
            (k::PASSIVE_OPENS, 1420),
            (k::LISTEN_OVERFLOWS, 310),
            (k::LISTEN_DROPS, 310),
            (k::REQ_Q_FULL_DROP, 40),
        ],
        &[],
    );
    f.machine_wide = machine_wide;
    f
}

#[test]
fn queues_other_processes_overflowed_are_not_blamed_on_a_cell_whose_connects_deny_it() {
    // The host's namespace: every connect of the cell quick and whole, so the overflows
    // were at other programs' listeners.
    let r = healthy_200(vec![others_overflowed(true)]);
    assert!(texts(&r).is_empty(), "{:?}", texts(&r));
    assert!(
        !crate::findings::findings(&r)
            .iter()
            .any(|f| matches!(f.rule, Rule::KernelListenOverflow | Rule::KernelSynQueue)),
        "{:?}",
        crate::findings::findings(&r)
    );
    // Its own namespace (a pod): only the shard's connections are counted, as before.
    let own = healthy_200(vec![others_overflowed(false)]);
    let rules: Vec<Rule> = cell(&own, &own.cells[0]).iter().map(|f| f.rule).collect();
    assert_eq!(rules, [Rule::KernelListenOverflow, Rule::KernelSynQueue]);
    // A cell that opened nothing in the host's namespace owns none of it either.
    let mut idle = healthy_200(vec![others_overflowed(true)]);
    idle.cells[0].measure = crate::measure::Measure::default();
    assert!(texts(&idle).is_empty(), "{:?}", texts(&idle));
}

#[test]
fn a_full_queue_the_cells_connects_met_fires_in_the_hosts_namespace_and_says_so() {
    let listen = "finding [100]: the kernel dropped connections at a full accept queue (ListenOverflows): the server accepted more slowly than connections arrived; raise its listen backlog and net.core.somaxconn, add server replicas, or open connections more slowly (a smaller connect.batchSize, a longer connect.batchInterval) (TcpExtListenOverflows +310, TcpExtListenDrops +310 in net:[4026531840] (shard 0); machine-wide: other processes on this host move these counters)";
    let syn = "finding [100]: the SYN queue overflowed: the kernel answered SYNs with cookies (SyncookiesSent) or dropped them (TCPReqQFullDrop); raise net.ipv4.tcp_max_syn_backlog and the server's listen backlog, or open connections more slowly (TcpExtTCPReqQFullDrop +40 in net:[4026531840] (shard 0); machine-wide: other processes on this host move these counters)";
    // Connects that timed out.
    let mut r = healthy_200(vec![others_overflowed(true)]);
    let counts = &mut r.cells[0].measure.counts;
    counts.connected = 180;
    for _ in 0..20 {
        counts.fail(ConnectError::Timeout);
    }
    assert_eq!(texts(&r), [listen, syn]);
    // Every connect succeeded, some after a SYN sent again (1.02 s).
    let mut r = healthy_200(vec![others_overflowed(true)]);
    r.cells[0]
        .measure
        .hists
        .connect
        .record(std::time::Duration::from_millis(1020));
    assert_eq!(texts(&r), [listen, syn]);
    // SYN cookies delay no connect: a quick cell does not deny them, and they are said to
    // be counted machine-wide.
    let mut cookies = others_overflowed(true);
    cookies.increases.insert(k::SYNCOOKIES_SENT.into(), 12);
    let found = texts(&healthy_200(vec![cookies]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("finding [100]: the SYN queue overflowed")
            && found[0].ends_with("(TcpExtSyncookiesSent +12, TcpExtTCPReqQFullDrop +40 in net:[4026531840] (shard 0); machine-wide: other processes on this host move these counters)"),
        "{found:?}"
    );
}

#[test]
fn every_other_kernel_finding_from_the_hosts_namespace_says_it_is_machine_wide() {
    let mut f = quiet();
    f.machine_wide = true;
    f.gauges.insert(k::CONNTRACK_PEAK.into(), 259_600);
    f.increases.insert(k::ABORT_ON_TIMEOUT.into(), 4);
    f.increases.insert(k::MEMORY_PRESSURES.into(), 1);
    let mut r = result(vec![f]);
    r.cells[0].measure.counts.drop(Dropped::Reset);
    let found = texts(&r);
    let rules: Vec<Rule> = cell(&r, &r.cells[0]).iter().map(|f| f.rule).collect();
    assert_eq!(
        rules,
        [
            Rule::KernelMemory,
            Rule::KernelConntrack,
            Rule::KernelTimeout,
            Rule::KernelResets
        ]
    );
    for f in &found {
        assert!(
            f.ends_with("; machine-wide: other processes on this host move these counters)"),
            "{f}"
        );
    }
    // Shards in the host's namespace are not each in their own: no side is named.
    assert!(
        found[3].contains("TCP resets were sent from the namespace the load generator ran in")
            || found[3].contains("no TCP reset was sent from the namespace read"),
        "{found:?}"
    );
}
