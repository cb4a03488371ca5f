//! Opening one connection: source address, TCP connect, TLS + HTTP upgrade, then the
//! conversation's steps on open (WSE's `server_ready` and hello among them), each phase timed;
//! failures classified by reason.

use crate::measure::{ConnectError, bounded_evidence};
use crate::script::{Action, Fill, Incoming, Script, Step};
use crate::{Error, Result};
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::ServerName;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpSocket;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::{Request, generate_request};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use wsload_spec::builtin;
use wsload_spec::{LoadTestSpec, TargetUrl, TokenPlacement};
use wsload_ws::{Agreed, DeflateOffer, HandshakeError, Io, Offer};

pub use wsload_ws::Ws;

/// What one read takes at most, for scenarios that move data: several messages. The buffer is
/// the worker's, lent to each connection for a read (wsload-ws's `Spare`), so the size costs
/// memory once per worker, not per connection.
const READ_BUFFER: usize = 4 * 1024;
/// The most one read starts at, for large windows of large messages.
const MAX_READ_BUFFER: usize = 64 * 1024;
/// ...and for scenarios that mostly hold connections and read small pongs (a larger message
/// grows the buffer).
const IDLE_READ_BUFFER: usize = 1024;

/// Why a dial failed, and what the server said, when it said something worth keeping (a
/// refused or invalid upgrade's status, body line or header): one example per reason goes
/// into the cell's evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct DialError {
    pub why: ConnectError,
    pub evidence: Option<String>,
    /// The conversation's step on open that failed (`expect_timeout`), by name.
    pub step: Option<String>,
}

impl From<ConnectError> for DialError {
    fn from(why: ConnectError) -> Self {
        DialError {
            why,
            evidence: None,
            step: None,
        }
    }
}

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
}

/// A connection's part in a fanout, as it dials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Not in a fanout.
    Any,
    /// A publisher of this topic (its name).
    Publisher(bytes::Bytes),
    /// A subscriber of these topics (their names), subscribed in this order.
    Subscriber(Vec<bytes::Bytes>),
}

/// The `evidence` label under which a cell keeps what its server negotiated.
pub use crate::measure::NEGOTIATED;

/// Everything needed to open connections to one target, prepared once per cell.
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
    /// The upgrade request as tungstenite renders it, without its closing blank line: every
    /// connection copies it and writes its own key at `key_at` (and its own token, if any).
    request: Vec<u8>,
    key_at: usize,
    /// Subprotocols the request offers (the server picks one of them, or none).
    protocols: Option<Vec<String>>,
    /// permessage-deflate as offered (`spec.compression`), and whether a server declining it
    /// fails the connection.
    deflate: Option<DeflateOffer>,
    deflate_required: bool,
    /// The per-connection token (a JWT); a fixed token is part of `request`.
    token: Token,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    read_size: usize,
    /// `connect.limits`: what each connection may hold for the server.
    limits: wsload_ws::Limits,
    /// The LoadTest's conversation, if it has one: its steps run after the upgrade.
    script: Arc<Script>,
    /// `message.size`, what `${pad}` fills a step's message to.
    size: usize,
}

enum Token {
    None,
    Fixed(String, TokenPlacement),
    Jwt {
        secret: Vec<u8>,
        claims: serde_json::Map<String, serde_json::Value>,
        subject: String,
        ttl: i64,
        placement: TokenPlacement,
    },
}

fn resolve_secret(s: &wsload_spec::SecretValue, field: &str) -> Result<String> {
    if let Some(v) = &s.value {
        return Ok(v.clone());
    }
    if let Some(var) = &s.from_env {
        return std::env::var(var).map_err(|_| {
            Error::Spec(format!(
                "{field}.fromEnv: environment variable {var} is not set"
            ))
        });
    }
    // In a cluster the operator turns secretRef into an environment variable of the pod.
    if let Some(r) = &s.secret_ref {
        let var = secret_env_name(&r.name, &r.key);
        return std::env::var(&var).map_err(|_| {
            Error::Spec(format!(
                "{field}.secretRef {}/{}: not available outside a cluster; set {var} or use value/fromEnv",
                r.name, r.key
            ))
        });
    }
    Err(Error::Spec(format!("{field}: no value")))
}

/// Shared with the operator, which names the same variables in the shard pods' env.
pub use wsload_spec::secret_env_name;

/// Holding connections: the small buffer. Moving data: room for what a window of echoes
/// brings back, so one read takes a whole burst (measured at 1 KiB, 4 KiB buffers gave ~4
/// echoes per recvfrom and most of the client's CPU went to the kernel).
fn read_buffer(spec: &LoadTestSpec) -> usize {
    if idle_heavy(spec.scenario) {
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

fn idle_heavy(s: wsload_spec::Scenario) -> bool {
    use wsload_spec::Scenario::*;
    matches!(
        s,
        ConnectionStorm | SustainedHold | ConnectionLimit | PingLatency
    )
}

/// Scenarios whose connections mostly sit idle: they leave Nagle on (one small frame at a
/// time, and one system call less per connection).
fn mostly_holding(s: wsload_spec::Scenario) -> bool {
    use wsload_spec::Scenario::*;
    matches!(s, ConnectionStorm | SustainedHold | ConnectionLimit)
}

/// The header a token sent as `placement` goes in, and its value.
fn token_name_value(token: &str, placement: TokenPlacement) -> (&'static str, String) {
    match placement {
        TokenPlacement::Cookie => ("cookie", format!("access_token={token}")),
        TokenPlacement::Bearer => ("authorization", format!("Bearer {token}")),
    }
}

/// The `name: value` header line of a token sent as `placement`.
fn token_header(token: &str, placement: TokenPlacement) -> Option<Vec<u8>> {
    let (name, value) = token_name_value(token, placement);
    // As before: a value that is not a valid header value is left out.
    HeaderValue::from_str(&value).ok()?;
    Some(format!("{name}: {value}\r\n").into_bytes())
}

/// Where a target URL points.
struct Endpoint {
    /// As the URL writes it (an IPv6 address in brackets), for messages.
    host: String,
    /// Without brackets: what is looked up, and the name TLS verifies.
    lookup_host: String,
    port: u16,
    tls: bool,
}

impl Endpoint {
    /// From the one parser `wsload validate` and the API server agree with: the host and port
    /// dialled are the URL's, never a default standing in for a port it could not read.
    fn of(url: &str) -> Result<Endpoint> {
        let url =
            TargetUrl::parse(url).map_err(|e| Error::Spec(format!("spec.target.url: {e}")))?;
        Ok(Endpoint {
            lookup_host: url.lookup_host().to_string(),
            host: url.host,
            port: url.port,
            tls: url.tls,
        })
    }

    /// The first address the name resolves to (once: every connection of the run goes there).
    fn resolve(&self) -> Result<SocketAddr> {
        let (host, port) = (&self.host, self.port);
        (self.lookup_host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| Error::Unresolvable {
                what: format!("cannot resolve {host}:{port}"),
                source: e.into(),
            })?
            .next()
            .ok_or_else(|| Error::Target(format!("{host}:{port} resolves to no address")))
    }

    /// The TLS connector and server name of a `wss` target; `None` for `ws`.
    fn tls(
        &self,
        spec: &LoadTestSpec,
        url: &str,
    ) -> Result<Option<(TlsConnector, ServerName<'static>)>> {
        if !self.tls {
            return Ok(None);
        }
        let config = Arc::new(crate::tls::client_config(spec.tls.as_ref())?);
        let name = ServerName::try_from(self.lookup_host.clone())
            .map_err(|e| Error::invalid(format!("spec.target.url {url:?}"), e))?;
        Ok(Some((TlsConnector::from(config), name)))
    }
}

/// `spec.auth`: its extra headers, and the token every connection sends (a JWT wins over a
/// fixed token; both secrets must resolve).
fn auth(spec: &LoadTestSpec) -> Result<(Vec<(HeaderName, HeaderValue)>, Token)> {
    let mut headers = Vec::new();
    let mut token = Token::None;
    let Some(auth) = &spec.auth else {
        return Ok((headers, token));
    };
    for (k, v) in &auth.headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| Error::invalid(format!("spec.auth.headers.{k}"), e))?;
        let value = HeaderValue::from_str(v)
            .map_err(|e| Error::invalid(format!("spec.auth.headers.{k}"), e))?;
        headers.push((name, value));
    }
    if let Some(t) = &auth.token {
        token = Token::Fixed(resolve_secret(t, "spec.auth.token")?, auth.send_as);
    }
    if let Some(jwt) = &auth.jwt {
        let secret = resolve_secret(&jwt.secret, "spec.auth.jwt.secret")?.into_bytes();
        let mut claims = serde_json::Map::new();
        if let Some(iss) = &jwt.issuer {
            claims.insert("iss".into(), iss.clone().into());
        }
        if let Some(aud) = &jwt.audience {
            claims.insert("aud".into(), aud.clone().into());
        }
        claims.extend(jwt.claims.clone());
        token = Token::Jwt {
            secret,
            claims,
            subject: jwt.subject.clone(),
            ttl: jwt.ttl.get().as_secs() as i64,
            placement: auth.send_as,
        };
    }
    Ok((headers, token))
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

/// The upgrade request rendered once, for every connection to copy.
struct Rendered {
    /// Without its closing blank line: a JWT header may follow.
    request: Vec<u8>,
    /// Where the 24-byte `Sec-WebSocket-Key` value starts.
    key_at: usize,
    /// Subprotocols the request offers.
    protocols: Option<Vec<String>>,
}

/// The request as tungstenite's client writes it (custom headers, the offered subprotocols
/// and compression, and a fixed token included), rendered once: per connection only the key
/// (and a JWT) change.
fn render(
    mut req: Request,
    headers: &[(HeaderName, HeaderValue)],
    token: &Token,
    spec: &LoadTestSpec,
) -> Result<Rendered> {
    for (k, v) in headers {
        req.headers_mut().insert(k.clone(), v.clone());
    }
    if !spec.subprotocols.is_empty() {
        let v = HeaderValue::from_str(&spec.subprotocols.join(", "))
            .map_err(|e| Error::invalid("spec.subprotocols", e))?;
        req.headers_mut().insert("sec-websocket-protocol", v);
    }
    if let Some(offer) = deflate_offer(spec) {
        let v = HeaderValue::from_str(&offer.header_value())
            .map_err(|e| Error::invalid("spec.compression", e))?;
        req.headers_mut().insert("sec-websocket-extensions", v);
    }
    if let Token::Fixed(t, placement) = token {
        let (name, value) = token_name_value(t, *placement);
        if let Ok(v) = HeaderValue::from_str(&value) {
            req.headers_mut().append(name, v);
        }
    }
    let protocols = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(|p| p.trim().to_string()).collect());
    let (mut rendered, key) =
        generate_request(req).map_err(|e| Error::invalid("spec.auth.headers", e))?;
    let key_line = format!("Sec-WebSocket-Key: {key}\r\n");
    let key_at = rendered
        .windows(key_line.len())
        .position(|w| w == key_line.as_bytes())
        .filter(|_| key.len() == 24)
        .ok_or_else(|| Error::Spec("the upgrade request has no Sec-WebSocket-Key".into()))?
        + "Sec-WebSocket-Key: ".len();
    rendered.truncate(rendered.len().saturating_sub(2));
    Ok(Rendered {
        request: rendered,
        key_at,
        protocols,
    })
}

impl Dialer {
    pub fn new(spec: &LoadTestSpec, url: &str) -> Result<Dialer> {
        let endpoint = Endpoint::of(url)?;
        let request = url
            .into_client_request()
            .map_err(|e| Error::invalid(format!("spec.target.url {url:?}"), e))?;
        let addr = endpoint.resolve()?;
        let (headers, token) = auth(spec)?;
        let tls = endpoint.tls(spec, url)?;
        let (sources, per_address, first_source_implicit) = sources(spec, addr);
        let rendered = render(request, &headers, &token, spec)?;
        // The user's conversation, or the protocol's built-in one: compiled and run alike.
        let conversation =
            builtin::effective(spec.conversation.as_ref(), spec.protocol, spec.scenario)
                .map_err(|e| Error::Spec(e.to_string()))?;
        let script =
            Arc::new(Script::compile(&conversation).map_err(|e| Error::Spec(e.to_string()))?);
        Ok(Dialer {
            addr,
            timeout: spec.connect.timeout.get(),
            sources,
            per_address,
            first_source_implicit,
            nodelay: !mostly_holding(spec.scenario),
            request: rendered.request,
            key_at: rendered.key_at,
            protocols: rendered.protocols,
            deflate: deflate_offer(spec),
            deflate_required: spec.compression.is_some_and(|c| c.required),
            // A fixed token is in the rendered request already.
            token: match token {
                Token::Fixed(..) => Token::None,
                t => t,
            },
            tls,
            read_size: read_buffer(spec),
            limits: limits(&spec.connect.limits),
            script,
            size: spec.message.size as usize,
        })
    }

    /// The conversation the connections hold: the LoadTest's, or its protocol's.
    pub fn script(&self) -> &Arc<Script> {
        &self.script
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

    /// The upgrade request of connection `n` and the `Sec-WebSocket-Accept` it expects.
    fn request(&self, n: u64) -> (Vec<u8>, String) {
        let jwt = match &self.token {
            Token::Jwt {
                secret,
                claims,
                subject,
                ttl,
                placement,
            } => {
                let sub = subject.replace("{i}", &n.to_string());
                let now = wsload_proto::jwt::now_secs();
                let mut c = claims.clone();
                c.insert("sub".into(), sub.into());
                c.insert("iat".into(), now.into());
                c.insert("exp".into(), (now + ttl).into());
                token_header(&wsload_proto::jwt::sign(&c, secret), *placement)
            }
            _ => None,
        };
        let mut req = Vec::with_capacity(self.request.len() + 2 + jwt.as_ref().map_or(0, Vec::len));
        req.extend_from_slice(&self.request);
        let key = wsload_ws::new_key();
        req[self.key_at..self.key_at + key.len()].copy_from_slice(&key);
        if let Some(h) = jwt {
            req.extend_from_slice(&h);
        }
        req.extend_from_slice(b"\r\n");
        (req, derive_accept_key(&key))
    }

    /// Opens connection number `n`, within `connect.timeout`; then the conversation's steps
    /// on open, each within its own timeout.
    pub async fn dial(&self, n: u64) -> Result<Dialed, DialError> {
        self.dial_as(n, &Role::Any).await
    }

    /// [`Dialer::dial`] for a connection with a part in a fanout: it knows its topic
    /// (`${topic}`) from the start, and a subscriber runs the subscribe steps for each of its
    /// topics after those on open.
    pub async fn dial_as(&self, n: u64, role: &Role) -> Result<Dialed, DialError> {
        let mut dialed = match tokio::time::timeout(self.timeout, self.dial_inner(n)).await {
            Ok(r) => r?,
            Err(_) => return Err(ConnectError::Timeout.into()),
        };
        let script = &*self.script;
        dialed.vars = vec![bytes::Bytes::new(); script.var_count()];
        let topics: &[bytes::Bytes] = match role {
            Role::Any => &[],
            Role::Publisher(topic) => std::slice::from_ref(topic),
            Role::Subscriber(topics) => topics,
        };
        if let (Some(first), Some(var)) = (topics.first(), dialed.vars.first_mut())
            && script.delivery().is_some()
        {
            *var = first.clone();
        }
        let subscribing = matches!(role, Role::Subscriber(_)) && !script.subscribe.is_empty();
        if script.open.is_empty() && !subscribing {
            return Ok(dialed);
        }
        let began = Instant::now();
        self.steps(&script.open, n, &mut dialed).await?;
        if subscribing {
            for topic in topics {
                dialed.vars[0] = topic.clone();
                self.steps(&script.subscribe, n, &mut dialed).await?;
            }
        }
        dialed.ready = Some(began.elapsed());
        Ok(dialed)
    }

    /// Steps of the conversation, in order: a send is written out; an expect reads until a
    /// message matches (answering what the replies answer, skipping the rest) and captures
    /// its values. A miss is `expect_timeout`, by step, with the last message seen.
    async fn steps(&self, steps: &[Step], n: u64, d: &mut Dialed) -> Result<(), DialError> {
        let script = &*self.script;
        let mut arena = bytes::BytesMut::new();
        for (i, step) in steps.iter().enumerate() {
            let fill = Fill {
                conn: n,
                seq: i as u64 + 1,
                size: self.size,
            };
            match &step.action {
                Action::Send(out) => {
                    // A step's template may splice what earlier steps captured.
                    let msg = if out.uses_vars() {
                        out.resolve(&d.vars).message(&mut arena, &fill)
                    } else {
                        out.message(&mut arena, &fill)
                    };
                    d.ws.send(msg)
                        .await
                        .map_err(|e| DialError::from(ws_error(&e)))?;
                    d.greetings_sent += 1;
                }
                Action::Expect {
                    matcher,
                    captures,
                    timeout,
                } => {
                    let until = Instant::now() + *timeout;
                    let mut last: Option<String> = None;
                    let msg = loop {
                        let Ok(next) = tokio::time::timeout_at(until, d.ws.next()).await else {
                            return Err(expect_missed(&step.name, *timeout, last.as_deref()));
                        };
                        let (text, data) = match next {
                            None => return Err(ConnectError::ClosedEarly.into()),
                            Some(Err(e)) => return Err(ws_error(&e).into()),
                            Some(Ok(Message::Close(frame))) => {
                                return Err(DialError {
                                    why: closed_why(frame.as_ref()),
                                    evidence: Some(closed_at(&step.name, frame.as_ref())),
                                    step: None,
                                });
                            }
                            Some(Ok(Message::Text(t))) => (true, t.into()),
                            Some(Ok(Message::Binary(b))) => (false, b),
                            Some(Ok(_)) => continue,
                        };
                        if matcher.matches(text, &data) {
                            break data;
                        }
                        if let Incoming::Reply(r) = script.incoming(text, &data)
                            && let Some((t, answer)) = script.reply(r, &mut arena, &fill)
                        {
                            d.ws.queue_reply(t, &answer);
                            d.replies += 1;
                        }
                        last = Some(String::from_utf8_lossy(&data[..data.len().min(512)]).into());
                    };
                    for (var, x) in captures {
                        // Made text here so that a template splicing it stays valid UTF-8.
                        let value = x.extract(&msg).unwrap_or_default();
                        d.vars[*var] = bytes::Bytes::from(
                            String::from_utf8_lossy(value).into_owned().into_bytes(),
                        );
                    }
                }
            }
        }
        Ok(())
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
        let (request, accept) = self.request(n);
        let offer = Offer {
            protocols: self.protocols.as_deref(),
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
        })
    }

    /// What the server agreed to, said in a line, when anything was offered; a server that
    /// declined compression the LoadTest requires fails the upgrade.
    fn negotiated(&self, agreed: &Agreed) -> Result<Option<String>, DialError> {
        let mut said = Vec::new();
        if let Some(offered) = &self.protocols {
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

/// `spec.compression` as the request offers it.
fn deflate_offer(spec: &LoadTestSpec) -> Option<DeflateOffer> {
    spec.compression.map(|c| DeflateOffer {
        server_max_window_bits: c.server_max_window_bits,
        client_max_window_bits: c.client_max_window_bits,
        server_no_context_takeover: c.server_no_context_takeover,
        client_no_context_takeover: c.client_no_context_takeover,
    })
}

/// A step's miss: the step, how long it waited and the last message it skipped.
fn expect_missed(step: &str, waited: Duration, last: Option<&str>) -> DialError {
    let seen = match last {
        Some(m) => format!("the last message was {m:?}"),
        None => "no message came".to_string(),
    };
    DialError {
        why: ConnectError::ExpectTimeout,
        evidence: Some(bounded_evidence(&format!(
            "step {step:?} waited {waited:?} for its expected message; {seen}"
        ))),
        step: Some(step.to_string()),
    }
}

/// The evidence of a server that closed during a step on open.
fn closed_at(
    step: &str,
    frame: Option<&tokio_tungstenite::tungstenite::protocol::CloseFrame>,
) -> String {
    match frame {
        Some(f) => format!(
            "closed with {} {:?} during step {step:?}",
            u16::from(f.code),
            f.reason.as_str()
        ),
        None => format!("closed during step {step:?}"),
    }
}

/// Why the server's close during the steps on open failed the connection: the codes servers
/// close an unauthorised connection with (WSE's 4401, graphql-ws' 4403 Forbidden, HTTP's 401
/// and 403 carried into the 4000 range as many servers do) are `auth_failed`; any other close
/// is `closed_early`.
fn closed_why(frame: Option<&CloseFrame>) -> ConnectError {
    match frame.map(|f| u16::from(f.code)) {
        Some(AUTH_FAILED_CLOSE | FORBIDDEN_CLOSE) => ConnectError::AuthFailed,
        _ => ConnectError::ClosedEarly,
    }
}

/// Close codes of a refused credential (see [`closed_why`]).
const AUTH_FAILED_CLOSE: u16 = wsload_proto::envelope::CLOSE_AUTH_FAILED;
const FORBIDDEN_CLOSE: u16 = 4403;

/// errno values that name a reason of their own.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;
const EADDRNOTAVAIL: i32 = 99;
const EADDRINUSE: i32 = 98;

pub fn io_error(e: &std::io::Error) -> ConnectError {
    match e.raw_os_error() {
        Some(EMFILE | ENFILE) => ConnectError::FileLimit,
        Some(EADDRNOTAVAIL | EADDRINUSE) => ConnectError::NoPorts,
        _ => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => ConnectError::Refused,
            std::io::ErrorKind::TimedOut => ConnectError::Timeout,
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof => {
                ConnectError::ClosedEarly
            }
            _ => ConnectError::Other,
        },
    }
}

/// rustls reports a failed TLS handshake as `InvalidData`; anything else is the socket's.
fn tls_error(e: &std::io::Error) -> ConnectError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        ConnectError::Tls
    } else {
        io_error(e)
    }
}

/// A failed upgrade's reason, with what the server answered as its evidence: the status
/// line and body line of a refusal, the header a 101 got wrong, the first line of a response
/// that is not HTTP.
fn handshake_error(e: &HandshakeError) -> DialError {
    let why = match e {
        HandshakeError::Io(io) => return io_error(io).into(),
        HandshakeError::Eof => return ConnectError::ClosedEarly.into(),
        HandshakeError::Status {
            status: 401 | 403, ..
        } => ConnectError::AuthFailed,
        HandshakeError::Status { .. } => ConnectError::UpgradeRejected,
        HandshakeError::Malformed(_) | HandshakeError::Invalid(_) => ConnectError::UpgradeInvalid,
    };
    let text = e.to_string();
    DialError {
        why,
        evidence: Some(text.strip_prefix("upgrade: ").unwrap_or(&text).to_string()),
        step: None,
    }
}

fn ws_error(e: &WsError) -> ConnectError {
    match e {
        WsError::Io(io) => io_error(io),
        WsError::Http(resp) if resp.status().as_u16() == 401 || resp.status().as_u16() == 403 => {
            ConnectError::AuthFailed
        }
        WsError::Http(_) | WsError::HttpFormat(_) => ConnectError::UpgradeRejected,
        WsError::Tls(_) => ConnectError::Tls,
        WsError::ConnectionClosed | WsError::AlreadyClosed | WsError::Protocol(_) => {
            ConnectError::ClosedEarly
        }
        _ => ConnectError::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_env_names_are_shell_safe() {
        assert_eq!(
            secret_env_name("wse-jwt", "secret.key"),
            "WSLOAD_SECRET_WSE_JWT_SECRET_KEY"
        );
    }

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
        let (request, _) = dialer.request(0);
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
            dialer.protocols.as_deref(),
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

    /// A refused upgrade keeps its status line as evidence; 401 and 403 are `auth_failed`.
    #[test]
    fn a_refused_upgrade_keeps_its_status_as_evidence() {
        let refused = |status: u16, reason: &str| HandshakeError::Status {
            status,
            reason: reason.into(),
            body: Some("go away".into()),
        };
        assert_eq!(
            handshake_error(&refused(401, "Unauthorized")),
            DialError {
                why: ConnectError::AuthFailed,
                evidence: Some("HTTP 401 Unauthorized: go away".into()),
                step: None,
            }
        );
        assert_eq!(
            handshake_error(&refused(502, "Bad Gateway")).why,
            ConnectError::UpgradeRejected
        );
        assert_eq!(
            handshake_error(&HandshakeError::Malformed("SSH-2.0-OpenSSH_9.6".into())),
            DialError {
                why: ConnectError::UpgradeInvalid,
                evidence: Some("not an HTTP response: \"SSH-2.0-OpenSSH_9.6\"".into()),
                step: None,
            }
        );
        assert_eq!(handshake_error(&HandshakeError::Eof).evidence, None);
    }

    #[test]
    fn io_errors_are_classified() {
        assert_eq!(
            io_error(&std::io::Error::from_raw_os_error(EMFILE)),
            ConnectError::FileLimit
        );
        assert_eq!(
            io_error(&std::io::Error::from_raw_os_error(EADDRNOTAVAIL)),
            ConnectError::NoPorts
        );
        assert_eq!(
            io_error(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            ConnectError::Refused
        );
    }
}
