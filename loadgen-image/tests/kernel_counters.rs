//! The kernel's counters in a run's result: a listener on loopback that never accepts, with a
//! backlog of 1, makes the kernel drop the SYNs of every connection past the two its accept
//! queue holds; the cell's kernel figures must carry those drops and a finding must name them.
//! The counters are the whole namespace's (the machine's, here), so other programs may add to
//! them: the test asserts at least what it caused. And the other way round: a stranger's
//! listener overflowing beside a healthy run is not blamed on the run.

mod common;

use common::{Server, only, run, spec};
use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockType, SockaddrIn, bind, getsockname, listen, socket,
};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wsload::measure::ConnectError;
use wsload_report::Rule;
use wsload_report::findings::kernel::{MACHINE_WIDE, RETRANSMIT_MIN_SECS};
use wsload_report::kernel as k;

/// A loopback listener with a backlog of 1 that nobody accepts on, and its port; open until
/// dropped.
fn deaf_listener() -> (std::net::TcpListener, u16) {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).expect("bind");
    listen(&fd, Backlog::new(1).expect("a backlog of 1")).expect("listen");
    let port = getsockname::<SockaddrIn>(fd.as_raw_fd())
        .expect("getsockname")
        .port();
    (std::net::TcpListener::from(fd), port)
}

#[test]
fn a_full_accept_queue_reaches_the_cell_and_its_finding() {
    let (_listener, port) = deaf_listener();
    let r = run(&spec(
        "deaf-listener",
        &format!(
            "  target: {{url: \"ws://127.0.0.1:{port}/\"}}\n  scenario: connectionStorm\n  connections: [20]\n  connect: {{timeout: 500ms}}\n"
        ),
    ));
    let c = only(&r);
    let counts = &c.measure.counts;
    assert_eq!((counts.attempted, counts.connected), (20, 0), "{counts:?}");
    // Nothing answers the upgrade (the queue's two are never accepted), and the SYNs dropped
    // are retransmitted only after 1 s: every attempt times out.
    assert_eq!(
        counts.failed.get(&ConnectError::Timeout),
        Some(&20),
        "{counts:?}"
    );

    // One process, one namespace: this one.
    assert_eq!(c.kernel.len(), 1, "{:?}", c.kernel);
    let f = &c.kernel[0];
    let ours = std::fs::read_link("/proc/self/ns/net").expect("readlink");
    let netns = f.netns.as_ref().expect("the namespace is named");
    assert_eq!(ours.to_string_lossy(), format!("net:[{}]", netns.inode));
    assert_eq!(f.shards, [0]);
    // The accept queue holds two; each of the other 18 had a SYN (or its handshake's last
    // ACK) dropped at least once, and every attempt sent a SYN.
    assert!(f.increase(k::LISTEN_DROPS) >= 18, "{:?}", f.increases);
    assert!(f.increase(k::ACTIVE_OPENS) >= 20, "{:?}", f.increases);
    // Every kept counter this kernel has was read, and the gauges with their peaks.
    for counter in [
        k::LISTEN_OVERFLOWS,
        k::OUT_RSTS,
        k::ESTAB_RESETS,
        k::SYN_RETRANS,
    ] {
        assert!(
            f.increases.contains_key(counter),
            "{counter}: {:?}",
            f.increases
        );
    }
    let mem = f.gauge(k::TCP_MEM).expect("sockstat's TCP memory");
    assert!(f.gauge(k::TCP_MEM_PEAK).expect("its peak") >= mem);
    assert!(f.gauge(k::TCP_MEM_PRESSURE).is_some(), "{:?}", f.gauges);

    let found = wsload_report::findings(&r);
    let overflow = found
        .iter()
        .find(|f| f.rule == Rule::KernelListenOverflow)
        .unwrap_or_else(|| panic!("no accept-queue finding in {found:#?}"));
    assert!(
        overflow
            .cause
            .starts_with("the kernel dropped connections at a full accept queue (ListenOverflows)"),
        "{overflow}"
    );
    // Every connect failed: in the host's namespace too (this test's, where other programs
    // move the counters) the run's own figures bear the finding out, and it says where it
    // was counted.
    let place = format!("in {netns} (shard 0)");
    let place = if f.machine_wide {
        format!("{place}; {MACHINE_WIDE}")
    } else {
        place
    };
    assert!(
        overflow.evidence.contains(&format!(
            "{} +{}",
            k::LISTEN_DROPS,
            f.increase(k::LISTEN_DROPS)
        )) && overflow.evidence.ends_with(&place),
        "{overflow}"
    );
    // The report shows the finding, and the namespace's line.
    let text = r.render();
    assert!(text.contains(&overflow.to_string()), "{text}");
    assert!(
        text.contains(&format!("kernel [20] {netns}{}: ", f.scope())),
        "{text}"
    );
    // The figures are in the result's JSON, by name.
    let json = serde_json::to_value(&r).expect("json");
    assert_eq!(
        json["cells"][0]["kernel"][0]["increases"][k::LISTEN_DROPS],
        f.increase(k::LISTEN_DROPS)
    );
}

/// Another program's listener overflows all through a healthy run: a thread of this test (not
/// the load generator) keeps sending SYNs to the deaf listener while `wsload` holds 20
/// connections to the reference server. The namespace's counters grow with the stranger's
/// drops; the run's connects all succeed. Where other processes share the namespace (the
/// host's, as a test runs) the run's figures deny that a full queue met its connects, and no
/// finding blames one on it; should this machine's handshakes be slow enough to have been
/// retransmitted, the finding stands and says it is machine-wide. In a namespace of its own,
/// findings are as before: the counters are the run's.
#[test]
fn a_strangers_full_accept_queue_is_not_blamed_on_a_healthy_run() {
    let server = Server::start(&[]);
    let (_listener, port) = deaf_listener();
    let stop = Arc::new(AtomicBool::new(false));
    let stranger = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let deaf = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // The SYN is sent and dropped at once; the attempt gives up soon after.
                let _ = std::net::TcpStream::connect_timeout(&deaf, Duration::from_millis(2));
                sent += 1;
            }
            sent
        })
    };
    let r = run(&spec(
        "stranger",
        &format!(
            "  target: {{url: \"{}/\"}}\n  scenario: sustainedHold\n  connections: [20]\n  duration: 1s\n  ping: {{interval: 200ms}}\n",
            server.ws
        ),
    ));
    stop.store(true, Ordering::Relaxed);
    let attempts = stranger.join().expect("the stranger's thread");
    let c = only(&r);
    let counts = &c.measure.counts;
    assert_eq!(
        (counts.attempted, counts.connected, counts.failed_total()),
        (20, 20, 0),
        "{counts:?}"
    );
    assert_eq!(c.kernel.len(), 1, "{:?}", c.kernel);
    let f = &c.kernel[0];
    assert!(
        f.increase(k::LISTEN_DROPS) > 0,
        "the stranger's {attempts} SYNs were dropped while the cell ran: {:?}",
        f.increases
    );
    let found = wsload_report::findings(&r);
    let overflow = found.iter().find(|f| f.rule == Rule::KernelListenOverflow);
    let slowest = c.measure.hists.connect.max();
    match (f.machine_wide, slowest < RETRANSMIT_MIN_SECS) {
        (true, true) => assert!(overflow.is_none(), "{found:#?}"),
        (true, false) => {
            let o = overflow.unwrap_or_else(|| panic!("a {slowest} s handshake: {found:#?}"));
            assert!(o.evidence.ends_with(MACHINE_WIDE), "{o}");
        }
        (false, _) => {
            let o = overflow.unwrap_or_else(|| panic!("its own namespace: {found:#?}"));
            assert!(!o.evidence.contains("machine-wide"), "{o}");
        }
    }
}
