//! Known causes the data shows, each one line under the table with its evidence. Every rule is
//! a function of one cell: it names a cause only where the figures point at it, and says which.

use crate::measure::{ConnectError, Counts, Dropped, FrameKind, Lifetime, UNSOLICITED};
use crate::numbers::{ms, num};
use crate::result::{CellResult, RunResult};

pub mod fanout;
pub mod fields;
pub mod kernel;
pub mod reconnect;
pub mod server;

/// One explained observation about one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub rule: Rule,
    /// The cell's label (a tier, a size, a format), or `shard N` for a shard's clock.
    pub cell: String,
    /// The likely cause and what to do about it.
    pub cause: String,
    /// The figures that show it.
    pub evidence: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    SynRetransmits,
    ServerShort,
    ConnectionCap,
    LoadgenCpu,
    /// Connections failed or ended for one reason: its count and its example.
    Failure,
    Unsolicited,
    /// Answers to messages answered before (copies) or already given up on.
    Mismatched,
    /// Writes still waiting for the server to read at the deadline.
    Unwritten,
    ClientBehind,
    /// A shard's clock offset is known only loosely: instants compared across shards are
    /// uncertain by that much.
    ClockUncertain,
    /// Fan-out latencies are uncertain by a large share of their p50: the shards' clocks.
    FanoutClock,
    /// Fan-out deliveries expected and never received.
    FanoutIncomplete,
    /// The subscribers read less than the publishers' pace owed them: the load generator,
    /// not the server, set the pace; how much more of it would keep up.
    FanoutBehind,
    /// The server's topic counters against what the subscribers received.
    FanoutServer,
    /// Fan-out deliveries received twice or out of order.
    FanoutOrder,
    /// Fan-out deliveries timed before their publish instant.
    FanoutClockDisagree,
    /// Fan-out deliveries of no topic the subscriber could name.
    FanoutUnreadable,
    /// Numbers the conversation could not read (an answer's id, a delivery's sequence
    /// number or publish instant), by field.
    UnreadableField,
    /// A server replica gave up on upgrades for its handshake timeout.
    ServerHandshakeTimeout,
    /// A server replica closed connections it found idle.
    ServerIdleTimeout,
    /// A server replica refused connections at its cap.
    ServerCapacity,
    /// The replicas admitted very unequal shares.
    ServerImbalance,
    /// The kernel dropped connections at a full accept queue (ListenOverflows, ListenDrops).
    KernelListenOverflow,
    /// The SYN queue overflowed: SYN cookies sent, or SYNs dropped.
    KernelSynQueue,
    /// TCP out of memory, or in memory pressure.
    KernelMemory,
    /// The connection-tracking table at its limit.
    KernelConntrack,
    /// Orphan sockets at tcp_max_orphans.
    KernelOrphans,
    /// Connections given up after unanswered retransmissions.
    KernelTimeout,
    /// Connections reset that the servers' counters leave unexplained, and the resets the
    /// namespaces read sent.
    KernelResets,
    /// Reconnections that came as one burst, their handshakes far slower than the first
    /// connections'.
    ReconnectHerd,
    /// Dropped connections not back by the cell's end.
    NeverBack,
    /// A replica that came back held far less than its share at the window's end: the
    /// connections it dropped stayed on the others.
    ShareNotTakenBack,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "finding [{}]: {} ({})",
            self.cell, self.cause, self.evidence
        )
    }
}

/// A shard clock's uncertainty above which instants compared across nodes are called loose:
/// a fan-out delivery inside one data centre takes a few milliseconds, so an error of more
/// than one blurs what it measures; a probe's round trip on a quiet network is well under it.
pub const CLOCK_UNCERTAINTY_MICROS: u64 = 1_000;

/// Every rule over every cell, in cell order (the kernel's after the others of the cell),
/// then the run's shard clocks.
pub fn findings(r: &RunResult) -> Vec<Finding> {
    let rules: [fn(&CellResult) -> Option<Finding>; 8] = [
        syn_retransmits,
        server_short,
        connection_cap,
        loadgen_cpu,
        unsolicited,
        mismatched,
        unwritten,
        client_behind,
    ];
    r.cells
        .iter()
        .flat_map(|c| {
            rules
                .iter()
                .filter_map(move |rule| rule(c))
                .chain(failures(c))
                .chain(fields::cell(c))
                .chain(fanout::cell(c))
                .chain(server::cell(c))
                .chain(reconnect::cell(c))
                .chain(kernel::cell(r, c))
        })
        .chain(clock_uncertain(r))
        .chain(fanout::clock_blur(r))
        .collect()
}

/// Shards whose clock offset the conductor could not pin within
/// [`CLOCK_UNCERTAINTY_MICROS`]: the control channel's round trips were long (a busy shard, a
/// far or congested network), so what compares their instants with another node's (start
/// skew, latencies from a publish instant) is uncertain by that much. Named by shard.
pub fn clock_uncertain(r: &RunResult) -> Vec<Finding> {
    r.shard_info
        .iter()
        .filter_map(|s| Some((s.index, s.clock?)))
        .filter(|(_, c)| c.uncertainty_micros > CLOCK_UNCERTAINTY_MICROS)
        .map(|(index, c)| Finding {
            rule: Rule::ClockUncertain,
            cell: format!("shard {index}"),
            cause: format!(
                "this shard's clock offset is known only to within {}: instants it stamped compare with other nodes' no closer than that; the probes' round trips were long (a busy shard or a slow network)",
                ms(c.uncertainty_micros as f64 / 1e6)
            ),
            evidence: format!(
                "offset {} ± {}, the best of {} probes",
                signed_ms(c.offset_micros),
                ms(c.uncertainty_micros as f64 / 1e6),
                c.samples
            ),
        })
        .collect()
}

/// Signed microseconds as milliseconds: `+50.012 ms`, `-0.300 ms`.
pub fn signed_ms(micros: i64) -> String {
    format!("{:+.3} ms", micros as f64 / 1000.0)
}

/// One finding per reason connections failed to open or ended for, with how many and the
/// example kept of it (the status a refused upgrade got, the header a 101 got wrong, the
/// rule a frame broke).
pub fn failures(c: &CellResult) -> Vec<Finding> {
    let counts = &c.measure.counts;
    let opened = counts.failed.iter().map(|(k, n)| {
        (
            k.label(),
            connect_meaning(*k),
            *n,
            counts.attempted,
            "attempts",
        )
    });
    let ended = counts.dropped.iter().map(|(k, n)| {
        (
            k.label(),
            drop_meaning(*k),
            *n,
            counts.connected,
            "connections",
        )
    });
    opened
        .chain(ended)
        .filter(|(_, _, n, _, _)| *n > 0)
        .filter_map(|(label, cause, n, of, what)| {
            let mut how_many = format!("{} of {} {what}", num(n as f64), num(of as f64));
            if label == Dropped::ServerClose.label() {
                how_many.push_str(&close_codes(counts));
            }
            if label == ConnectError::ExpectTimeout.label() {
                how_many.push_str(&missed_steps(counts));
            }
            if let Some(l) = counts.lifetimes.get(label) {
                how_many.push_str(&lived(l));
            }
            let evidence = failure_evidence(counts, label, how_many);
            match unanswered_hint(counts, label) {
                Some(hint) => finding(Rule::Failure, c, &format!("{cause}; {hint}"), evidence),
                None => finding(Rule::Failure, c, cause, evidence),
            }
        })
        .collect()
}

/// ` with 1000 x200` for the close codes the server sent, if any.
fn close_codes(counts: &Counts) -> String {
    if counts.close_codes.is_empty() {
        return String::new();
    }
    let codes: Vec<String> = counts
        .close_codes
        .iter()
        .map(|(code, n)| format!("{code} x{}", num(*n as f64)))
        .collect();
    format!(" with {}", codes.join(", "))
}

/// ` at step "ack" x3`: which steps on open timed out, by name.
fn missed_steps(counts: &Counts) -> String {
    if counts.expect_missed.is_empty() {
        return String::new();
    }
    let steps: Vec<String> = counts
        .expect_missed
        .iter()
        .map(|(step, n)| format!("{step:?} x{}", num(*n as f64)))
        .collect();
    format!(" at step {}", steps.join(", "))
}

/// ` after ~8.0 s (7.9-8.2 s)`: how long the connections had been open in the measured phase.
fn lived(l: &Lifetime) -> String {
    let s = |ms: u64| ms as f64 / 1000.0;
    if l.min_ms == l.max_ms {
        format!(" after {:.1} s", s(l.min_ms))
    } else {
        format!(
            " after ~{:.1} s ({:.1}-{:.1} s)",
            s(l.mean_ms()),
            s(l.min_ms),
            s(l.max_ms)
        )
    }
}

/// When the server closed connections (or stopped answering) while it sent messages that
/// answered nothing, the likeliest cause is a message of its own that wanted an answer: a
/// heartbeat (Engine.IO's `2`, graphql-ws' `ping`, STOMP's EOL) nobody answered.
fn unanswered_hint(counts: &Counts, label: &str) -> Option<String> {
    let closing = [
        Dropped::ServerClose.label(),
        Dropped::Reset.label(),
        Dropped::PingTimeout.label(),
    ];
    if !closing.contains(&label) {
        return None;
    }
    let frames: u64 = [FrameKind::Text, FrameKind::Binary]
        .iter()
        .filter_map(|k| counts.unsolicited.get(k))
        .map(|t| t.frames)
        .sum();
    if frames == 0 {
        return None;
    }
    let example = counts
        .evidence
        .get(UNSOLICITED)
        .map(|e| format!(" (e.g. {e})"))
        .unwrap_or_default();
    Some(format!(
        "the server sent {} messages that nothing answered{example}: if it waits for an answer (a heartbeat), add one under conversation.replies",
        num(frames as f64)
    ))
}

/// `label: N of M attempts; e.g. EXAMPLE`.
fn failure_evidence(counts: &Counts, label: &str, how_many: String) -> String {
    let head = format!("{label}: {how_many}");
    match counts.evidence.get(label) {
        Some(e) => format!("{head}; e.g. {e}"),
        None => head,
    }
}

/// What a connect failure means, for the reader of a finding.
fn connect_meaning(why: ConnectError) -> &'static str {
    match why {
        ConnectError::Refused => {
            "connections were refused: nothing listening, or the server's accept queue overflowed"
        }
        ConnectError::Timeout => "connections did not open within connect.timeout",
        ConnectError::FileLimit => {
            "the load generator ran out of file descriptors (ulimit -n): add shards"
        }
        ConnectError::NoPorts => "no free local port for the source address: add source addresses",
        ConnectError::UpgradeRejected => "the server refused the WebSocket upgrade",
        ConnectError::UpgradeInvalid => {
            "the server's answer to the upgrade is not a valid WebSocket upgrade (RFC 6455 4.1)"
        }
        ConnectError::ClosedEarly => "the server closed before the connection was ready",
        ConnectError::AuthFailed => "the server refused the credentials",
        ConnectError::Tls => "the TLS handshake failed",
        ConnectError::ExpectTimeout => {
            "a step on open (spec.conversation.open) did not get the message it expects within its timeout: check what the server sends first (the evidence), or raise the step's timeout"
        }
        ConnectError::CaptureMissed => {
            "a step on open (spec.conversation.open) got its message but a capture found nothing in it: the message lacks the field the capture names, or its regular expression does not match (the evidence quotes the message)"
        }
        ConnectError::Other => "connections failed to open (see the log)",
    }
}

/// What a connection's end means, for the reader of a finding.
fn drop_meaning(why: Dropped) -> &'static str {
    match why {
        Dropped::ServerClose => "the server closed connections",
        Dropped::Reset => "connections were reset, or ended without a closing handshake",
        Dropped::Error => "reads or writes failed",
        Dropped::PingTimeout => "pings went unanswered for ping.timeout",
        Dropped::ProtocolError => {
            "the server broke the WebSocket protocol (RFC 6455): the client closed with 1002 (1007 for invalid UTF-8)"
        }
        Dropped::MessageTooBig => {
            "the server sent a frame or message over the client's limit (16 MiB a frame, 64 MiB a message): the client closed with 1009"
        }
        Dropped::ServerNotReading => {
            "the server stopped reading: writes made no progress for writeTimeout"
        }
        Dropped::Disrupted => {
            "wsload dropped connections itself, without a closing handshake, for a close disruption (spec.disruptions)"
        }
        Dropped::ReplyLoop => {
            "the server answered each automatic reply with the message that triggers it again (a runaway exchange, past 1000 replies a second): the client closed with 1008; check the reply rule named in the evidence against what the server sends back"
        }
    }
}

fn finding(rule: Rule, c: &CellResult, cause: &str, evidence: String) -> Option<Finding> {
    Some(Finding {
        rule,
        cell: c.label.clone(),
        cause: cause.to_string(),
        evidence,
    })
}

/// Linux retransmits an unanswered SYN after 1 s, then 2 s more: connects that wait for them
/// take ~1 s or ~3 s. A listener whose accept queue is full drops SYNs, so the handshakes that
/// hit it cluster there, and the wait is in the TCP part, not the upgrade.
pub fn syn_retransmits(c: &CellResult) -> Option<Finding> {
    let h = &c.measure.hists;
    if h.tcp.is_empty() {
        return None;
    }
    let near_retransmit = |s: f64| (0.9..1.4).contains(&s) || (2.8..3.6).contains(&s);
    [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")]
        .into_iter()
        .find_map(|(p, name)| {
            let tcp = h.tcp.percentile(p);
            // Without the whole handshake's histogram, the TCP part is all there is.
            let whole = if h.connect.is_empty() {
                tcp
            } else {
                h.connect.percentile(p)
            };
            (near_retransmit(tcp) && tcp >= 0.7 * whole).then(|| {
                format!(
                    "TCP connect {name} {} of handshake {name} {}",
                    ms(tcp),
                    ms(whole)
                )
            })
        })
        .and_then(|evidence| {
            finding(
                Rule::SynRetransmits,
                c,
                "SYN retransmits: the server's accept backlog overflowed (raise its listen backlog and net.core.somaxconn, or open connections more slowly)",
                evidence,
            )
        })
}

/// The servers' counters against what the clients sent (warm-up included, as the counters
/// are): fewer means messages were dropped, or were still queued when the counters were read.
pub fn server_short(c: &CellResult) -> Option<Finding> {
    let server = c.server_received?;
    let sent = c.measure.counts.sent_with_warmup;
    // A few in flight at the instant of reading are not a finding.
    let short = sent.saturating_sub(server);
    if sent == 0 || short <= (sent / 10_000).max(1) {
        return None;
    }
    finding(
        Rule::ServerShort,
        c,
        "the server received fewer messages than were sent: it dropped them, or was still draining when its counter was read",
        format!(
            "servers counted {} of {} sent, {:.2}%, {} short",
            num(server as f64),
            num(sent as f64),
            server as f64 / sent as f64 * 100.0,
            num(short as f64)
        ),
    )
}

/// Connections stopping at a round number while more were attempted: a configured limit.
/// Running out of file descriptors says so itself (`file_limit`); otherwise a round count
/// held is the server's cap (refused, or closed right after the upgrade).
pub fn connection_cap(c: &CellResult) -> Option<Finding> {
    let counts = &c.measure.counts;
    // A cell whose connections came back after drops held what survived, not what never
    // dropped; and wsload's own closes are no cap.
    if c.measure.reconnect.is_some() {
        return None;
    }
    let failed = counts.errors_total();
    let held = counts.connected.saturating_sub(counts.dropped_total());
    if failed == 0 || held >= counts.attempted {
        return None;
    }
    let reasons = counts
        .failed
        .iter()
        .map(|(k, v)| format!("{} {}", num(*v as f64), k.label()))
        .chain(
            counts
                .dropped
                .iter()
                .map(|(k, v)| format!("{} {}", num(*v as f64), k.label())),
        )
        .collect::<Vec<_>>()
        .join(", ");
    let evidence = format!(
        "held {} of {} attempted; failed: {reasons}",
        num(held as f64),
        num(counts.attempted as f64)
    );
    if counts.failed.contains_key(&ConnectError::FileLimit) {
        return finding(
            Rule::ConnectionCap,
            c,
            "the load generator ran out of file descriptors: raise its open-file limit (ulimit -n) or add shards",
            evidence,
        );
    }
    is_round(held).then_some(())?;
    finding(
        Rule::ConnectionCap,
        c,
        "connections stopped at a round number: a server connection limit (or a client open-file limit)",
        evidence,
    )
}

/// Numbers people configure as limits: multiples of 500, powers of two, and a power of two
/// less the few descriptors a process holds anyway (ulimit -n 1024 holds ~1020 sockets).
fn is_round(n: u64) -> bool {
    n >= 100 && (n % 500 == 0 || (n >= 250 && (0..=16).any(|k| (n + k).is_power_of_two())))
}

/// A load generator that used all its CPU measured itself as much as the server.
pub fn loadgen_cpu(c: &CellResult) -> Option<Finding> {
    let cpu = c.loadgen_cpu?;
    if cpu < 0.9 {
        return None;
    }
    finding(
        Rule::LoadgenCpu,
        c,
        "the load generator was CPU-bound: the client may be the bottleneck; add shards",
        format!("busiest load generator at {:.0}% CPU", cpu * 100.0),
    )
}

/// Megabytes, to two decimals: the size of traffic in a finding.
pub(crate) fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// Frames the server sent that answered nothing sent: a server that pushes (or floods) beside
/// its answers. They were left out of the answers and the latencies, and said so here.
pub fn unsolicited(c: &CellResult) -> Option<Finding> {
    let counts = &c.measure.counts;
    let total = counts.unsolicited_total();
    if total.frames == 0 {
        return None;
    }
    let kinds: Vec<String> = counts
        .unsolicited
        .iter()
        .map(|(kind, t)| {
            format!(
                "{} unsolicited {} frames ({})",
                num(t.frames as f64),
                kind.label(),
                mb(t.bytes)
            )
        })
        .collect();
    finding(
        Rule::Unsolicited,
        c,
        "the server sent frames that answer nothing sent (pushes, a flood); they were not counted as answers",
        format!("{} were not counted as answers", kinds.join(", ")),
    )
}

/// Answers that answered nothing outstanding: copies of an answer counted before (a server
/// that sends an echo twice, told apart by the `${seq}` it carries, or beyond the messages
/// outstanding), or answers to messages already given up on. Left out of the answers and the
/// latencies, and said so here.
pub fn mismatched(c: &CellResult) -> Option<Finding> {
    let n = c.measure.counts.mismatched;
    if n == 0 {
        return None;
    }
    finding(
        Rule::Mismatched,
        c,
        "the server answered messages already answered (copies) or given up on (answers after their timeout); they were not counted as answers",
        format!(
            "{} answers to messages already answered or given up on were not counted",
            num(n as f64)
        ),
    )
}

/// Connections whose writes still waited for the server at the deadline: the server read
/// slower than they wrote, or had stopped (for less than `writeTimeout`). The cell ended on
/// time; what was still queued is not in the figures.
pub fn unwritten(c: &CellResult) -> Option<Finding> {
    let counts = &c.measure.counts;
    if counts.unwritten == 0 {
        return None;
    }
    let example = counts
        .evidence
        .get(crate::measure::UNWRITTEN)
        .map_or_else(String::new, |e| format!("; e.g. {e}"));
    finding(
        Rule::Unwritten,
        c,
        "the server read slower than the load generator wrote, or stopped reading: writes were still waiting at the deadline; the cell ended on time, and what was still queued is not counted as sent",
        format!(
            "{} connections had {} still queued at the deadline{example}",
            num(counts.unwritten as f64),
            mb(counts.unwritten_bytes)
        ),
    )
}

/// Connections that still had more unread at their deadline than the answers they were owed:
/// the server sent faster than the client read, so the client, not the server, set the pace.
pub fn client_behind(c: &CellResult) -> Option<Finding> {
    let counts = &c.measure.counts;
    if counts.behind == 0 || fanout::behind(c).is_some() {
        return None;
    }
    finding(
        Rule::ClientBehind,
        c,
        "the load generator could not keep up with what the server sent: it was the bottleneck, and what arrived after the deadline is not in the figures; add shards or cores",
        format!(
            "{} connections had at least {} unread at the deadline",
            num(counts.behind as f64),
            mb(counts.unread_bytes)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;
    use crate::measure::Dropped;
    use std::time::Duration;

    fn cell() -> CellResult {
        shard(0, 100, 1, 1).cells.remove(0)
    }

    #[test]
    fn syn_retransmits_need_a_cluster_near_1_or_3_s_in_the_tcp_part() {
        let mut c = cell();
        assert_eq!(syn_retransmits(&c), None);
        let h = &mut c.measure.hists;
        for _ in 0..95 {
            h.tcp.record(Duration::from_micros(200));
            h.connect.record(Duration::from_micros(900));
        }
        for _ in 0..5 {
            h.tcp.record(Duration::from_millis(1010));
            h.connect.record(Duration::from_millis(1015));
        }
        let f = syn_retransmits(&c).expect("1 s cluster");
        assert_eq!(f.rule, Rule::SynRetransmits);
        assert!(
            f.evidence
                .starts_with("TCP connect p99 1.01 s of handshake p99 1.0"),
            "{f}"
        );
        // The same wait in the upgrade (a slow server, not dropped SYNs) is not this cause.
        let mut slow_upgrade = cell();
        let h = &mut slow_upgrade.measure.hists;
        for _ in 0..100 {
            h.tcp.record(Duration::from_millis(1000));
            h.connect.record(Duration::from_millis(2500));
        }
        assert_eq!(syn_retransmits(&slow_upgrade), None);
    }

    #[test]
    fn server_short_needs_more_than_a_few_in_flight() {
        let mut c = cell();
        // The fixture sent 100 (110 with the warm-up).
        c.server_received = None;
        assert_eq!(server_short(&c), None);
        c.server_received = Some(110);
        assert_eq!(server_short(&c), None);
        c.server_received = Some(109);
        assert_eq!(server_short(&c), None);
        c.server_received = Some(99);
        let f = server_short(&c).expect("short");
        assert_eq!(
            f.evidence,
            "servers counted 99 of 110 sent, 90.00%, 11 short"
        );
    }

    #[test]
    fn a_round_count_held_is_a_limit_and_file_limit_says_which() {
        let mut c = cell();
        let counts = &mut c.measure.counts;
        (counts.attempted, counts.connected) = (1500, 1000);
        counts.failed.clear();
        counts.failed.insert(ConnectError::Refused, 500);
        let f = connection_cap(&c).expect("cap");
        assert!(f.cause.contains("server connection limit"), "{f}");
        assert_eq!(
            f.evidence,
            "held 1000 of 1500 attempted; failed: 500 refused"
        );
        // Closed by the server right after the upgrade: connected, but not held.
        let counts = &mut c.measure.counts;
        (counts.connected, counts.failed) = (1100, Default::default());
        counts.dropped.insert(Dropped::ServerClose, 76);
        assert!(
            connection_cap(&c)
                .expect("1024 held")
                .evidence
                .contains("held 1024")
        );
        // Not a round number, not a file limit: no cause to name.
        c.measure.counts.dropped.insert(Dropped::ServerClose, 150);
        assert_eq!(connection_cap(&c), None);
        c.measure.counts.fail(ConnectError::FileLimit);
        let f = connection_cap(&c).expect("file limit");
        assert!(f.cause.contains("file descriptors"), "{f}");
        assert!(f.evidence.contains("1 file_limit"), "{f}");
    }

    #[test]
    fn round_numbers() {
        for n in [500, 1000, 10_000, 1024, 1020, 4096, 65_536] {
            assert!(is_round(n), "{n}");
        }
        // 28232: Linux's default ephemeral port range, which `no_ports` failures name instead.
        for n in [99, 128, 333, 1001, 1100, 997, 28_232] {
            assert!(!is_round(n), "{n}");
        }
    }

    #[test]
    fn a_busy_load_generator_is_named() {
        let mut c = cell();
        assert_eq!(loadgen_cpu(&c), None);
        c.loadgen_cpu = Some(0.5);
        assert_eq!(loadgen_cpu(&c), None);
        c.loadgen_cpu = Some(0.97);
        let f = loadgen_cpu(&c).expect("busy");
        assert_eq!(f.evidence, "busiest load generator at 97% CPU");
        let mut r = shard(0, 100, 1, 1);
        r.cells[0].loadgen_cpu = Some(0.99);
        assert!(
            r.render()
                .contains("finding [100]: the load generator was CPU-bound")
        );
        let rules: Vec<Rule> = findings(&r).iter().map(|f| f.rule).collect();
        assert_eq!(
            rules,
            vec![Rule::LoadgenCpu, Rule::Failure],
            "the fixture's refusal too"
        );
    }

    #[test]
    fn each_failure_reason_is_named_with_its_count_and_example() {
        let mut c = cell();
        let counts = &mut c.measure.counts;
        counts.failed.clear();
        for _ in 0..3 {
            counts.fail(ConnectError::UpgradeRejected);
        }
        counts.witness(
            "upgrade_rejected",
            "HTTP 500 Internal Server Error: database down",
        );
        counts.drop(Dropped::ProtocolError);
        counts.witness(
            "protocol_error",
            "WebSocket protocol error: Reserved bits are non-zero (close 1002 sent)",
        );
        counts.drop(Dropped::Reset);
        let found = failures(&c);
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            vec![
                "finding [100]: the server refused the WebSocket upgrade (upgrade_rejected: 3 of 100 attempts; e.g. HTTP 500 Internal Server Error: database down)",
                "finding [100]: connections were reset, or ended without a closing handshake (reset: 1 of 99 connections)",
                "finding [100]: the server broke the WebSocket protocol (RFC 6455): the client closed with 1002 (1007 for invalid UTF-8) (protocol_error: 1 of 99 connections; e.g. WebSocket protocol error: Reserved bits are non-zero (close 1002 sent))",
            ]
        );
    }

    #[test]
    fn a_server_that_closed_says_with_what_and_when_and_an_unanswered_heartbeat_is_named() {
        let mut c = cell();
        let counts = &mut c.measure.counts;
        counts.failed.clear();
        counts.connected = 200;
        for i in 0..200 {
            counts.drop(Dropped::ServerClose);
            counts.lived(Dropped::ServerClose, 7_900 + i);
        }
        counts.close_codes.insert("1000".into(), 200);
        counts.witness("server_close", "close 1000 \"ping timeout\"");
        counts.unsolicited(FrameKind::Text, 400, 400);
        counts.witness(UNSOLICITED, "\"2\"");
        let text: Vec<String> = failures(&c).iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            vec![
                "finding [100]: the server closed connections; the server sent 400 messages that nothing answered (e.g. \"2\"): if it waits for an answer (a heartbeat), add one under conversation.replies (server_close: 200 of 200 connections with 1000 x200 after ~8.0 s (7.9-8.1 s); e.g. close 1000 \"ping timeout\")",
            ]
        );
        // Without messages that answered nothing, no guess is made.
        c.measure.counts.unsolicited.clear();
        let f = failures(&c);
        assert_eq!(f[0].cause, "the server closed connections");
    }

    #[test]
    fn a_reply_loop_is_named_with_its_rule() {
        let mut c = cell();
        let counts = &mut c.measure.counts;
        counts.failed.clear();
        counts.connected = 2;
        for _ in 0..2 {
            counts.drop(Dropped::ReplyLoop);
            counts.lived(Dropped::ReplyLoop, 40);
        }
        counts.witness("reply_loop", "replies[0] (when {\"equals\":\"{}\"}) ...");
        let f = failures(&c);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].cause.contains(&format!(
                "past {} replies a second",
                crate::measure::MAX_REPLIES_PER_SECOND
            )),
            "{}",
            f[0]
        );
        assert_eq!(
            f[0].evidence,
            "reply_loop: 2 of 2 connections after 0.0 s; e.g. replies[0] (when {\"equals\":\"{}\"}) ..."
        );
    }

    #[test]
    fn an_expect_that_timed_out_names_its_step() {
        let mut c = cell();
        let counts = &mut c.measure.counts;
        counts.failed.clear();
        for _ in 0..3 {
            counts.fail(ConnectError::ExpectTimeout);
        }
        counts.expect_missed.insert("ack".into(), 3);
        counts.witness("expect_timeout", "step \"ack\": last message \"hello\"");
        let f = failures(&c);
        assert_eq!(
            f[0].evidence,
            "expect_timeout: 3 of 100 attempts at step \"ack\" x3; e.g. step \"ack\": last message \"hello\""
        );
        assert!(f[0].cause.contains("did not get the message it expects"));
    }

    #[test]
    fn frames_that_answered_nothing_are_named_by_kind_and_size() {
        use crate::measure::FrameKind;
        let mut c = cell();
        assert_eq!(unsolicited(&c), None);
        c.measure
            .counts
            .unsolicited(FrameKind::Text, 1200, 2_500_000);
        c.measure.counts.unsolicited(FrameKind::Pong, 3, 0);
        let f = unsolicited(&c).expect("unsolicited");
        assert_eq!(
            f.evidence,
            "1200 unsolicited text frames (2.50 MB), 3 unsolicited pong frames (0.00 MB) were not counted as answers"
        );
    }

    #[test]
    fn copies_and_answers_given_up_on_are_named() {
        let mut c = cell();
        assert_eq!(mismatched(&c), None);
        c.measure.counts.mismatched = 13_690;
        let f = mismatched(&c).expect("mismatched");
        assert_eq!(
            f.evidence,
            "13.7K answers to messages already answered or given up on were not counted"
        );
        assert!(f.cause.contains("copies"), "{}", f.cause);
    }

    #[test]
    fn writes_waiting_at_the_deadline_are_named_with_their_queues() {
        let mut c = cell();
        assert_eq!(unwritten(&c), None);
        c.measure.counts.unwritten = 2;
        c.measure.counts.unwritten_bytes = 1_000_000;
        c.measure.counts.witness(
            crate::measure::UNWRITTEN,
            "a write still waiting at the cell's deadline: 500000 bytes waiting to be written",
        );
        let f = unwritten(&c).expect("unwritten");
        assert_eq!(
            f.evidence,
            "2 connections had 1.00 MB still queued at the deadline; e.g. a write still waiting at the cell's deadline: 500000 bytes waiting to be written"
        );
    }

    #[test]
    fn a_client_that_fell_behind_is_named() {
        let mut c = cell();
        assert_eq!(client_behind(&c), None);
        c.measure.counts.behind = 10;
        c.measure.counts.unread_bytes = 12_000_000;
        let f = client_behind(&c).expect("behind");
        assert_eq!(
            f.evidence,
            "10 connections had at least 12.00 MB unread at the deadline"
        );
        assert!(f.cause.contains("add shards or cores"));
    }
}
