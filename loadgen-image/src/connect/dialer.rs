//! Opening one connection: source address, TCP connect, TLS and the HTTP upgrade, each phase
//! timed; failures classified by reason (crate::connect::failure).

use super::endpoint::Endpoint;
use super::error::SetupError;
use super::failure::{DialError, handshake_error, io_error, tls_error};
use super::request::{Upgrade, deflate_offer};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpSocket;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use wsload_report::measure::ConnectError;
use wsload_spec::LoadTestSpec;
use wsload_ws::{Agreed, DeflateOffer, Io, Offer, Ws};

/// What one read takes at most, for scenarios that move data: several messages. The buffer is
/// the worker's, lent to each connection for a read (wsload-ws's `Spare`), so the size costs
/// memory once per worker, not per connection.
const READ_BUFFER: usize = 4 * 1024;
/// The most one read starts at, for large windows of large messages.
const MAX_READ_BUFFER: usize = 64 * 1024;
/// ...and for scenarios that mostly hold connections and read small pongs (a larger message
/// grows the buffer).
const IDLE_READ_BUFFER: usize = 1024;

/// How a dial went.
pub struct Dialed {
    pub ws: Ws,
    pub tcp: Duration,
    pub upgrade: Duration,
    /// Upgrade to ready: the steps on open (`None` when the conversation has none).
    pub ready: Option<Duration>,
    /// Data messages the steps on open sent (WSE's `client_hello`): the server counts them.
    pub greetings_sent: u64,
    /// What the server agreed to of what the request offered (a subprotocol, compression),
    /// when something was offered: kept as the cell's `negotiated` evidence, so a run says
    /// what it measured (uncompressed when the server declined compression, without a
    /// subprotocol when it chose none).
    pub negotiated: Option<String>,
    /// The values the conversation's steps on open captured, in the script's order.
    pub vars: Vec<bytes::Bytes>,
    /// Automatic replies sent during the steps on open.
    pub replies: u64,
    /// Deliveries the steps read past on a connection back (see `connect::reopen`), for its
    /// subscriber to read first.
    pub early: super::early::Early,
}

/// Everything needed to open connections to one target, prepared once per run: where, from
/// which source addresses, with which request, TLS and limits. What is said on a connection
/// once open is the conversation's (crate::connect::open).
pub struct Dialer {
    addr: SocketAddr,
    timeout: Duration,
    sources: Vec<IpAddr>,
    /// Consecutive connection numbers that take the same source.
    per_address: u32,
    /// The first source is 127.0.0.1 chosen for a loopback target (not asked for): the address
    /// the kernel picks anyway, so its connections skip the bind (two syscalls each).
    first_source_implicit: bool,
    /// Disable Nagle (data-moving scenarios; holding ones write one small frame at a time).
    nodelay: bool,
    upgrade: Upgrade,
    /// permessage-deflate as offered (`spec.compression`), and whether a server declining it
    /// fails the connection.
    deflate: Option<DeflateOffer>,
    deflate_required: bool,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    read_size: usize,
    /// `connect.limits`: what each connection may hold for the server.
    limits: wsload_ws::Limits,
}

impl Dialer {
    pub fn new(spec: &LoadTestSpec, url: &str) -> Result<Dialer, SetupError> {
        let endpoint = Endpoint::of(url)?;
        let upgrade = Upgrade::new(spec, url)?;
        let addr = endpoint.resolve()?;
        let tls = endpoint.tls(spec, url)?;
        let (sources, per_address, first_source_implicit) = sources(spec, addr);
        Ok(Dialer {
            addr,
            timeout: spec.connect.timeout.get(),
            sources,
            per_address,
            first_source_implicit,
            nodelay: !spec.scenario.profile().motion.mostly_idle(),
            upgrade,
            deflate: deflate_offer(spec),
            deflate_required: spec.compression.is_some_and(|c| c.required),
            tls,
            read_size: read_buffer(spec),
            limits: limits(&spec.connect.limits),
        })
    }

    /// The source address for connection number `n` (global across shards); `None`: the
    /// system's choice.
    fn source(&self, n: u64) -> Option<IpAddr> {
        if self.sources.is_empty() {
            return None;
        }
        let i = (n / u64::from(self.per_address)) as usize % self.sources.len();
        if i == 0 && self.first_source_implicit {
            return None;
        }
        Some(self.sources[i])
    }

    /// Opens connection number `n` (TCP, TLS, the upgrade), within `connect.timeout`.
    pub async fn dial(&self, n: u64) -> Result<Dialed, DialError> {
        match tokio::time::timeout(self.timeout, self.dial_inner(n)).await {
            Ok(r) => r,
            Err(_) => Err(ConnectError::Timeout.into()),
        }
    }

    async fn dial_inner(&self, n: u64) -> Result<Dialed, DialError> {
        let start = Instant::now();
        let socket = if self.addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| io_error(&e))?;
        if let Some(src) = self.source(n) {
            // Without IP_BIND_ADDRESS_NO_PORT, bind(addr:0) picks the port now, searching for
            // one unique to the address alone: O(sockets) per bind, and the storm rate
            // collapsed past ~10K connections per address. With it, the port is chosen at
            // connect(), unique per 4-tuple, as for an unbound socket.
            let _ = nix::sys::socket::setsockopt(
                &socket,
                nix::sys::socket::sockopt::IpBindAddressNoPort,
                &true,
            );
            socket
                .bind(SocketAddr::new(src, 0))
                .map_err(|e| io_error(&e))?;
        }
        let tcp = socket.connect(self.addr).await.map_err(|e| io_error(&e))?;
        if self.nodelay {
            let _ = tcp.set_nodelay(true);
        }
        let tcp_done = Instant::now();
        let io = match &self.tls {
            None => Io::Plain(tcp),
            Some((connector, name)) => Io::Tls(Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| tls_error(&e))?,
            )),
        };
        let mut ws = Ws::with_limits(io, self.read_size, self.limits);
        let (request, accept) = self.upgrade.for_connection(n);
        let offer = Offer {
            protocols: self.upgrade.protocols.as_deref(),
            deflate: self.deflate.as_ref(),
        };
        let agreed = ws
            .handshake(&request)
            .await
            .and_then(|head| head.verify(&accept, &offer))
            .map_err(|e| handshake_error(&e))?;
        let negotiated = self.negotiated(&agreed)?;
        if let Some(params) = agreed.deflate {
            ws.use_deflate(params);
        }
        let upgraded = Instant::now();
        Ok(Dialed {
            ws,
            tcp: tcp_done - start,
            upgrade: upgraded - tcp_done,
            ready: None,
            greetings_sent: 0,
            negotiated,
            vars: Vec::new(),
            replies: 0,
            early: Default::default(),
        })
    }

    /// What the server agreed to, said in a line, when anything was offered; a server that
    /// declined compression the LoadTest requires fails the upgrade.
    fn negotiated(&self, agreed: &Agreed) -> Result<Option<String>, DialError> {
        let mut said = Vec::new();
        if let Some(offered) = &self.upgrade.protocols {
            said.push(match &agreed.protocol {
                Some(p) => format!("subprotocol {p:?}"),
                None => format!("no subprotocol selected (offered {:?})", offered.join(", ")),
            });
        }
        if self.deflate.is_some() {
            match &agreed.deflate {
                Some(p) => said.push(p.to_string()),
                None if self.deflate_required => {
                    return Err(DialError {
                        why: ConnectError::UpgradeInvalid,
                        evidence: Some(
                            "no Sec-WebSocket-Extensions: permessage-deflate declined \
                             (spec.compression.required)"
                                .into(),
                        ),
                        step: None,
                    });
                }
                None => said.push("permessage-deflate declined: measured uncompressed".into()),
            }
        }
        Ok((!said.is_empty()).then(|| said.join("; ")))
    }
}

/// Holding connections: the small buffer. Moving data: room for what a window of echoes
/// brings back, so one read takes a whole burst (measured at 1 KiB, 4 KiB buffers gave ~4
/// echoes per recvfrom and most of the client's CPU went to the kernel).
fn read_buffer(spec: &LoadTestSpec) -> usize {
    if spec.scenario.profile().motion.reads_little() {
        return IDLE_READ_BUFFER;
    }
    let largest = spec
        .sizes
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(spec.message.size) as usize;
    (largest.saturating_mul(spec.window as usize)).clamp(READ_BUFFER, MAX_READ_BUFFER)
}

/// The spec's `connect.limits` as the WebSocket client takes them.
fn limits(l: &wsload_spec::ConnectionLimits) -> wsload_ws::Limits {
    wsload_ws::Limits {
        max_message: l.max_message_bytes,
        max_frame: l.max_frame_bytes,
        max_pending_write: l.max_pending_write_bytes,
    }
}

/// The source addresses connections take turns on, how many consecutive connections take
/// each, and whether the first is the loopback default chosen here (see
/// `Dialer::first_source_implicit`).
fn sources(spec: &LoadTestSpec, addr: SocketAddr) -> (Vec<IpAddr>, u32, bool) {
    let per_address = spec.sources.per_address.max(1);
    if !spec.sources.addresses.is_empty() {
        return (spec.sources.addresses.clone(), per_address, false);
    }
    if addr.ip().is_loopback() && addr.is_ipv4() {
        // 127.0.0.0/8 is all loopback: each address adds a full ephemeral port range. The
        // kernel finds a free port for a connect() by walking the range from a hashed offset,
        // and as an address's range toward the target fills the walk grows: at 28,000 ports
        // of 28,232 taken, 38% of both cores went to __inet_check_established and a 300,000
        // storm slowed to a few hundred connections a second. Connections take turns, one
        // each, on as many addresses as keep every one a quarter full at most.
        let peak = u64::from(wsload_spec::validate::peak_connections(spec));
        let wanted = (peak * 4).div_ceil(u64::from(per_address)).clamp(1, 254);
        let spread = (1..=wanted as u8)
            .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
            .collect();
        return (spread, 1, true);
    }
    (Vec::new(), per_address, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::failure::DialError;

    /// A loopback target's connections take turns on as many 127.0.0.x addresses as keep each
    /// a quarter full (a small test stays on 127.0.0.1, the kernel's own choice); addresses
    /// the spec names are filled `perAddress` at a time, as documented.
    #[test]
    fn loopback_sources_are_taken_in_turn_a_quarter_full_at_most() {
        let dialer = |body: &str| {
            let spec = wsload_spec::fixtures::spec(&format!(
                "  target: {{url: \"ws://127.0.0.1:9/\"}}\n  scenario: sustainedHold\n  duration: 1s\n{body}"
            ));
            Dialer::new(&spec, "ws://127.0.0.1:9/").expect("dialer")
        };
        let v4 = |i: u8| Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)));
        let small = dialer("  connections: [7000]\n");
        assert_eq!(small.sources.len(), 1);
        assert!((0..7000).all(|n| small.source(n).is_none()));
        let large = dialer("  connections: [300000]\n  shards: 18\n");
        // 300,000 x 4 / 28,000 rounded up.
        assert_eq!(large.sources.len(), 43);
        let first: Vec<_> = (0..4).map(|n| large.source(n)).collect();
        assert_eq!(first, [None, v4(2), v4(3), v4(4)]);
        assert_eq!((large.source(42), large.source(43)), (v4(43), None));
        let most = dialer("  connections: [10000000]\n  shards: 1000\n");
        assert_eq!(most.sources.len(), 254);
        let named = dialer(
            "  connections: [5000]\n  sources: {addresses: [127.0.0.7, 127.0.0.8], perAddress: 3000}\n",
        );
        let taken: Vec<_> = [0, 2999, 3000, 4999].map(|n| named.source(n)).to_vec();
        assert_eq!(taken, [v4(7), v4(7), v4(8), v4(8)]);
    }

    /// A server whose 101 carries an extension the request did not offer: the dial fails as
    /// an invalid upgrade, naming the header.
    #[tokio::test]
    async fn an_extension_not_requested_is_an_invalid_upgrade() {
        let (addr, server) =
            wsload_ws::test_server::answer_101("Sec-WebSocket-Extensions: permessage-deflate\r\n")
                .await;
        let port = addr.port();
        let spec = wsload_spec::fixtures::spec(&format!(
            "  target: {{url: \"ws://127.0.0.1:{port}/\"}}\n  scenario: constantRate\n  connections: [1]\n  rate: {{messagesPerSecond: 1}}\n"
        ));
        let dialer = Dialer::new(&spec, &format!("ws://127.0.0.1:{port}/")).expect("dialer");
        let r = dialer.dial(0).await;
        let _server = server.await.expect("server");
        assert_eq!(
            r.err(),
            Some(DialError {
                why: ConnectError::UpgradeInvalid,
                evidence: Some(
                    "Sec-WebSocket-Extensions: \"permessage-deflate\" (none requested)".into()
                ),
                step: None,
            })
        );
    }

    /// spec.subprotocols and spec.compression are offered in the request, rendered once.
    #[test]
    fn subprotocols_and_compression_are_offered() {
        let spec = wsload_spec::fixtures::spec(
            "  target: {url: \"ws://127.0.0.1:9/\"}\n  scenario: throughput\n  subprotocols: [graphql-transport-ws, v12.stomp]\n  compression: {serverMaxWindowBits: 10, clientNoContextTakeover: true}\n",
        );
        let dialer = Dialer::new(&spec, "ws://127.0.0.1:9/").expect("dialer");
        let (request, _) = dialer.upgrade.for_connection(0);
        let request = String::from_utf8(request).expect("ascii");
        assert!(
            request.contains("\r\nSec-WebSocket-Protocol: graphql-transport-ws, v12.stomp\r\n"),
            "{request}"
        );
        assert!(
            request.contains("\r\nsec-websocket-extensions: permessage-deflate; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits\r\n"),
            "{request}"
        );
        assert_eq!(
            dialer.upgrade.protocols.as_deref(),
            Some(&["graphql-transport-ws".to_string(), "v12.stomp".to_string()][..])
        );
        // What the server agreed to, said; required compression declined is a failure.
        let agreed = Agreed {
            protocol: None,
            deflate: None,
        };
        assert_eq!(
            dialer.negotiated(&agreed).expect("not required"),
            Some(
                "no subprotocol selected (offered \"graphql-transport-ws, v12.stomp\"); permessage-deflate declined: measured uncompressed"
                    .into()
            )
        );
        let required = Dialer {
            deflate_required: true,
            ..dialer
        };
        assert_eq!(
            required.negotiated(&agreed).map_err(|e| e.why),
            Err(ConnectError::UpgradeInvalid)
        );
    }
}
