//! Exact, lock-free server counters.
//!
//! Message counters sit on the hot path of every frame, so each runtime thread increments its
//! own cache-line-aligned slot (uncontended atomics) and a scrape sums the slots. Sums are exact
//! at every scrape: nothing is buffered per connection. Connection-level counters change once
//! per connection and use plain shared atomics.

use crate::config::Profile;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;
use wsload_contract::server_metrics::{self as metric, closed, rejected};
use wsload_http::prometheus_client::collector::Collector;
use wsload_http::prometheus_client::encoding::DescriptorEncoder;
use wsload_http::{AtomicHistogram, family};
use wsload_proto::frame::Format;

/// Slots for per-thread message counters; threads beyond this share slots (still exact).
pub(crate) const SLOTS: usize = 32;

/// What a message counter counts.
#[derive(Clone, Copy)]
enum Kind {
    MessagesIn = 0,
    BytesIn,
    MessagesOut,
    BytesOut,
    Malformed,
}
const KINDS: usize = 5;
const PER_SLOT: usize = KINDS * Profile::COUNT * Format::COUNT;

#[repr(align(128))]
struct Slot([AtomicU64; PER_SLOT]);

impl Slot {
    fn new() -> Self {
        Slot(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

fn counter_index(kind: Kind, profile: Profile, format: Format) -> usize {
    ((kind as usize * Profile::COUNT) + profile.index()) * Format::COUNT + format.index()
}

pub(crate) fn my_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Relaxed) % SLOTS;
    }
    SLOT.with(|s| *s)
}

/// Why a connection that reached the handshake was never admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    Capacity,
    Draining,
    HandshakeTimeout,
    HandshakeError,
}

impl Rejected {
    const ALL: [Rejected; 4] = [
        Rejected::Capacity,
        Rejected::Draining,
        Rejected::HandshakeTimeout,
        Rejected::HandshakeError,
    ];
    fn label(self) -> &'static str {
        match self {
            Rejected::Capacity => rejected::CAPACITY,
            Rejected::Draining => rejected::DRAINING,
            Rejected::HandshakeTimeout => rejected::HANDSHAKE_TIMEOUT,
            Rejected::HandshakeError => rejected::HANDSHAKE_ERROR,
        }
    }
}

/// Why an admitted connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The client closed, with a close frame or by ending the stream.
    Client,
    /// The client dropped TCP without a closing handshake.
    Reset,
    IdleTimeout,
    MessageTooBig,
    ProtocolError,
    IoError,
    Shutdown,
    AuthFailed,
}

impl Closed {
    const ALL: [Closed; 8] = [
        Closed::Client,
        Closed::Reset,
        Closed::IdleTimeout,
        Closed::MessageTooBig,
        Closed::ProtocolError,
        Closed::IoError,
        Closed::Shutdown,
        Closed::AuthFailed,
    ];
    const COUNT: usize = Self::ALL.len();
    pub fn label(self) -> &'static str {
        match self {
            Closed::Client => closed::CLIENT,
            Closed::Reset => closed::RESET,
            Closed::IdleTimeout => closed::IDLE_TIMEOUT,
            Closed::MessageTooBig => closed::MESSAGE_TOO_BIG,
            Closed::ProtocolError => closed::PROTOCOL_ERROR,
            Closed::IoError => closed::IO_ERROR,
            Closed::Shutdown => closed::SHUTDOWN,
            Closed::AuthFailed => closed::AUTH_FAILED,
        }
    }
}

/// Labels of `wsload_server_auth_failures_total`, as `JwtError::reason` and `missing`.
const AUTH_REASONS: [&str; 6] = [
    "missing",
    "malformed",
    "bad_signature",
    "expired",
    "not_yet_valid",
    "claims",
];

/// Kinds of accept(2) failures worth telling apart.
#[derive(Debug, Clone, Copy)]
pub enum AcceptError {
    FileLimit,
    Other,
}

/// All server counters. One instance per process, shared by reference.
pub struct Stats {
    slots: Box<[Slot]>,
    active: AtomicU64,
    accepted: [AtomicU64; Profile::COUNT],
    rejected: [AtomicU64; Rejected::ALL.len()],
    closed: [AtomicU64; Profile::COUNT * Closed::COUNT],
    auth_failures: [AtomicU64; AUTH_REASONS.len()],
    handshake: [AtomicHistogram; Profile::COUNT],
    broadcast_lagged: AtomicU64,
    accept_errors: [AtomicU64; 2],
    /// The soft RLIMIT_NOFILE after start-up; 0 when unknown.
    open_files_limit: AtomicU64,
    ready: AtomicBool,
    /// Profiles this process serves; only these appear in the exposition.
    profiles: Vec<Profile>,
}

impl Stats {
    pub fn new(profiles: Vec<Profile>) -> Self {
        Stats {
            slots: (0..SLOTS).map(|_| Slot::new()).collect(),
            active: AtomicU64::new(0),
            accepted: std::array::from_fn(|_| AtomicU64::new(0)),
            rejected: std::array::from_fn(|_| AtomicU64::new(0)),
            closed: std::array::from_fn(|_| AtomicU64::new(0)),
            auth_failures: std::array::from_fn(|_| AtomicU64::new(0)),
            handshake: std::array::from_fn(|_| AtomicHistogram::default()),
            broadcast_lagged: AtomicU64::new(0),
            accept_errors: std::array::from_fn(|_| AtomicU64::new(0)),
            open_files_limit: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            profiles,
        }
    }

    #[inline]
    fn add(&self, kind: Kind, profile: Profile, format: Format, n: u64) {
        self.slots[my_slot()].0[counter_index(kind, profile, format)].fetch_add(n, Relaxed);
    }

    #[inline]
    pub fn received(&self, profile: Profile, format: Format, bytes: usize) {
        self.add(Kind::MessagesIn, profile, format, 1);
        self.add(Kind::BytesIn, profile, format, bytes as u64);
    }

    #[inline]
    pub fn sent(&self, profile: Profile, format: Format, bytes: usize) {
        self.add(Kind::MessagesOut, profile, format, 1);
        self.add(Kind::BytesOut, profile, format, bytes as u64);
    }

    pub fn malformed(&self, profile: Profile, format: Format) {
        self.add(Kind::Malformed, profile, format, 1);
    }

    pub fn accepted(&self, profile: Profile, handshake: Duration) {
        self.accepted[profile.index()].fetch_add(1, Relaxed);
        self.active.fetch_add(1, Relaxed);
        self.handshake[profile.index()].observe(handshake);
    }

    pub fn rejected(&self, why: Rejected) {
        if let Some(i) = Rejected::ALL.iter().position(|r| *r == why) {
            self.rejected[i].fetch_add(1, Relaxed);
        }
    }

    pub fn closed(&self, profile: Profile, why: Closed) {
        if let Some(i) = Closed::ALL.iter().position(|c| *c == why) {
            self.closed[profile.index() * Closed::COUNT + i].fetch_add(1, Relaxed);
        }
        self.active.fetch_sub(1, Relaxed);
    }

    pub fn auth_failure(&self, reason: &str) {
        if let Some(i) = AUTH_REASONS.iter().position(|r| *r == reason) {
            self.auth_failures[i].fetch_add(1, Relaxed);
        }
    }

    pub fn broadcast_lagged(&self, n: u64) {
        self.broadcast_lagged.fetch_add(n, Relaxed);
    }

    pub fn accept_error(&self, kind: AcceptError) {
        self.accept_errors[kind as usize].fetch_add(1, Relaxed);
    }

    pub fn set_open_files_limit(&self, limit: u64) {
        self.open_files_limit.store(limit, Relaxed);
    }

    pub fn open_files_limit(&self) -> Option<u64> {
        Some(self.open_files_limit.load(Relaxed)).filter(|l| *l > 0)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Relaxed)
    }

    fn sum(&self, kind: Kind, profile: Profile, format: Format) -> u64 {
        let i = counter_index(kind, profile, format);
        self.slots.iter().map(|s| s.0[i].load(Relaxed)).sum()
    }
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("profiles", &self.profiles.len())
            .finish_non_exhaustive()
    }
}

/// Sums the per-thread slots at scrape time; the text is prometheus-client's.
impl Collector for Stats {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        self.encode_families(&mut encoder)
    }
}

impl Stats {
    /// Every family, for a collector that adds others after them.
    pub fn encode_families(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let version = [("version", env!("CARGO_PKG_VERSION"))];
        family::gauges(
            e,
            "wsload_server_build_info",
            "Build of this server.",
            [(version, 1)],
        )?;
        self.encode_connections(e)?;
        self.encode_messages(e)?;
        self.encode_auth_and_broadcast(e)?;
        self.encode_accepts_and_file_limit(e)
    }
}

/// The exposition's families, in the order a scrape shows them.
impl Stats {
    /// Connections by outcome: open, admitted, refused, ended, and the handshake's duration.
    fn encode_connections(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        family::gauge(
            e,
            metric::CONNECTIONS_ACTIVE,
            "Admitted connections now open.",
            self.active.load(Relaxed),
        )?;
        family::counters(
            e,
            metric::CONNECTIONS_ACCEPTED,
            "Connections admitted after the WebSocket handshake.",
            self.profiles.iter().map(|p| {
                (
                    [("profile", p.label())],
                    self.accepted[p.index()].load(Relaxed),
                )
            }),
        )?;
        family::counters(
            e,
            metric::CONNECTIONS_REJECTED,
            "Connections refused before admission, by reason.",
            Rejected::ALL
                .iter()
                .zip(&self.rejected)
                .map(|(r, v)| ([(metric::REASON, r.label())], v.load(Relaxed))),
        )?;
        family::counters(
            e,
            metric::CONNECTIONS_CLOSED,
            "Admitted connections that ended, by reason.",
            self.profiles.iter().flat_map(|p| {
                Closed::ALL.iter().enumerate().map(move |(i, c)| {
                    let v = self.closed[p.index() * Closed::COUNT + i].load(Relaxed);
                    ([("profile", p.label()), (metric::REASON, c.label())], v)
                })
            }),
        )?;
        family::histograms(
            e,
            "wsload_server_handshake_duration_seconds",
            "TCP accept to HTTP 101, admitted connections.",
            self.profiles
                .iter()
                .map(|p| ([("profile", p.label())], [&self.handshake[p.index()]])),
        )
    }

    /// The per-thread message and byte counters, summed, by profile and format.
    fn encode_messages(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        for (kind, name, help) in [
            (
                Kind::MessagesIn,
                "wsload_server_messages_received",
                "Data frames received.",
            ),
            (
                Kind::BytesIn,
                "wsload_server_bytes_received",
                "Payload bytes of data frames received.",
            ),
            (
                Kind::MessagesOut,
                "wsload_server_messages_sent",
                "Data frames sent.",
            ),
            (
                Kind::BytesOut,
                "wsload_server_bytes_sent",
                "Payload bytes of data frames sent.",
            ),
            (
                Kind::Malformed,
                "wsload_server_malformed_frames",
                "Data frames that did not decode.",
            ),
        ] {
            let samples = self.profiles.iter().flat_map(|p| {
                Format::ALL.into_iter().map(move |f| {
                    let v = self.sum(kind, *p, f);
                    ([("profile", p.label()), ("format", f.label())], v)
                })
            });
            family::counters(e, name, help, samples)?;
        }
        Ok(())
    }

    /// Refused WSE tokens and the broadcast messages slow clients skipped.
    fn encode_auth_and_broadcast(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        family::counters(
            e,
            "wsload_server_auth_failures",
            "Refused WSE tokens, by reason.",
            AUTH_REASONS
                .iter()
                .zip(&self.auth_failures)
                .map(|(r, v)| ([("reason", *r)], v.load(Relaxed))),
        )?;
        family::counter(
            e,
            "wsload_server_broadcast_lagged",
            "Broadcast messages skipped by clients that fell behind.",
            self.broadcast_lagged.load(Relaxed),
        )
    }

    /// Failed accepts and the open-file limit they run into.
    fn encode_accepts_and_file_limit(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        family::counters(
            e,
            "wsload_server_accept_errors",
            "Failed accept(2) calls.",
            [
                (AcceptError::FileLimit, "file_limit"),
                (AcceptError::Other, "other"),
            ]
            .map(|(kind, label)| {
                (
                    [("kind", label)],
                    self.accept_errors[kind as usize].load(Relaxed),
                )
            }),
        )?;

        if let Some(limit) = self.open_files_limit() {
            let name = "wsload_server_open_files_limit";
            let help = "Soft open-file limit (RLIMIT_NOFILE) of this process after start-up: each connection takes one.";
            // RLIM_INFINITY is u64::MAX: an unbounded value, not a number that large.
            if limit == u64::MAX {
                family::gauge(e, name, help, f64::INFINITY)?;
            } else {
                family::gauge(e, name, help, limit)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use wsload_http::prometheus_client::registry::Registry;

    /// What a scrape of `stats` reads, now and at every later scrape.
    fn registry(stats: &Arc<Stats>) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(stats.clone()));
        registry
    }

    fn value(text: &str, series: &str) -> u64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
    }

    #[test]
    fn counts_from_many_threads_sum_exactly() {
        let stats = Arc::new(Stats::new(vec![Profile::Echo, Profile::Wse]));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let s = stats.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        s.received(Profile::Echo, Format::Text, 64);
                        s.sent(Profile::Wse, Format::Msgpack, 10);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let text = wsload_http::encode(&registry(&stats));
        assert_eq!(
            value(
                &text,
                r#"wsload_server_messages_received_total{profile="echo",format="text"}"#
            ),
            80_000
        );
        assert_eq!(
            value(
                &text,
                r#"wsload_server_bytes_received_total{profile="echo",format="text"}"#
            ),
            80_000 * 64
        );
        assert_eq!(
            value(
                &text,
                r#"wsload_server_messages_sent_total{profile="wse",format="msgpack"}"#
            ),
            80_000
        );
        assert_eq!(
            value(
                &text,
                r#"wsload_server_messages_sent_total{profile="echo",format="msgpack"}"#
            ),
            0
        );
        assert!(
            !text.contains("profile=\"sink\""),
            "unused profiles are not exposed"
        );
    }

    #[test]
    fn connection_accounting_and_histogram() {
        let stats = Arc::new(Stats::new(vec![Profile::Echo]));
        let registry = registry(&stats);
        stats.accepted(Profile::Echo, Duration::from_micros(30));
        stats.accepted(Profile::Echo, Duration::from_millis(3));
        stats.accepted(Profile::Echo, Duration::from_secs(60));
        stats.closed(Profile::Echo, Closed::IdleTimeout);
        stats.rejected(Rejected::Capacity);
        stats.auth_failure("expired");
        assert!(
            !wsload_http::encode(&registry).contains("wsload_server_open_files_limit"),
            "an unknown limit is not exposed"
        );
        stats.set_open_files_limit(20_000);
        let text = wsload_http::encode(&registry);
        assert!(text.contains("# TYPE wsload_server_open_files_limit gauge"));
        assert_eq!(value(&text, "wsload_server_open_files_limit"), 20_000);
        assert_eq!(value(&text, "wsload_server_connections_active"), 2);
        assert_eq!(
            value(
                &text,
                r#"wsload_server_connections_accepted_total{profile="echo"}"#
            ),
            3
        );
        assert_eq!(
            value(
                &text,
                r#"wsload_server_connections_closed_total{profile="echo",reason="idle_timeout"}"#
            ),
            1
        );
        assert_eq!(
            value(
                &text,
                r#"wsload_server_connections_rejected_total{reason="capacity"}"#
            ),
            1
        );
        assert_eq!(
            value(
                &text,
                r#"wsload_server_auth_failures_total{reason="expired"}"#
            ),
            1
        );
        let b = "wsload_server_handshake_duration_seconds_bucket";
        assert_eq!(
            value(&text, &format!(r#"{b}{{le="0.00005",profile="echo"}}"#)),
            1
        );
        assert_eq!(
            value(&text, &format!(r#"{b}{{le="0.005",profile="echo"}}"#)),
            2
        );
        assert_eq!(
            value(&text, &format!(r#"{b}{{le="10.0",profile="echo"}}"#)),
            2
        );
        assert_eq!(
            value(&text, &format!(r#"{b}{{le="+Inf",profile="echo"}}"#)),
            3
        );
        assert_eq!(
            value(
                &text,
                r#"wsload_server_handshake_duration_seconds_count{profile="echo"}"#
            ),
            3
        );
    }
}
