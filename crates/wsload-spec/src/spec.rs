//! The `spec` of a LoadTest. Field names are camelCase as in every Kubernetes API; every field
//! but `target` and `scenario` has a default, so a small file runs.

use crate::cel;
use crate::cluster::{LoadgenSpec, Placement, PullPolicy, RunPolicy};
use crate::conversation::{Compression, Conversation};
use crate::env_var::EnvVar;
use crate::reconnect::{Disruption, ReconnectSpec};
pub use crate::scenario::Scenario;
use crate::threshold::Threshold;
use crate::units::{Dur, Percent};
use k8s_openapi::api::core::v1::ResourceRequirements;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A WebSocket load test: the server under test, the scenario, the load shape, the shards and
/// the pass/fail thresholds. `wsload run FILE` runs it on one machine; in a cluster the
/// operator runs it and writes the verdict into status. See docs/loadtest.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[cfg_attr(feature = "crd", derive(kube::CustomResource), kube(
    group = "wsload.dev",
    version = "v1alpha1",
    kind = "LoadTest",
    root = "LoadTestResource",
    namespaced,
    status = "crate::status::LoadTestStatus",
    derive = "PartialEq",
    shortname = "lt",
    category = "wsload",
    doc = "A WebSocket load test (wsload.dev): spec as `wsload run` reads it, status as the operator writes it.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Scenario", type_ = "string", json_path = ".spec.scenario"),
    printcolumn(name = "Shards", type_ = "integer", json_path = ".spec.shards"),
    printcolumn(name = "Rate", type_ = "string", json_path = ".status.achievedRate"),
    printcolumn(name = "P99", type_ = "string", json_path = ".status.p99"),
    printcolumn(name = "Verdict", type_ = "string", json_path = ".status.verdict"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = cel::immutable_once_started(),
    validation = cel::name_rule()
))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::spec_rules)]
pub struct LoadTestSpec {
    /// The server under test: an external `url` or a managed `server`.
    pub target: Target,
    /// The application protocol spoken over WebSocket: `echo` (any RFC 6455 server) or `wse`.
    #[serde(default)]
    pub protocol: Protocol,
    /// How connections authenticate: a JWT signed per connection or a fixed token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
    /// TLS client settings for a `wss://` target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// WebSocket subprotocols offered in the upgrade (`Sec-WebSocket-Protocol`), in order of
    /// preference: `graphql-transport-ws`, `v12.stomp`, ... Tokens (RFC 6455 4.1), each once.
    /// The server picks one of them, or none (the result's `negotiated` evidence says which).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 128), pattern(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub subprotocols: Vec<String>,
    /// permessage-deflate (RFC 7692), offered when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// The conversation with a server of its own protocol: steps on open, automatic
    /// replies, the measured message and its answer, pushes. See docs/loadtest.md, "Your own
    /// protocol". Replaces `protocol`'s built-in conversation (`echo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Conversation>,
    /// What the test does; see docs/loadtest.md.
    pub scenario: Scenario,
    /// Connection tiers: each count is one row of the report, run one after another.
    #[serde(default = "default_connections")]
    #[schemars(
        length(max = cel::MAX_TIERS),
        inner(range(min = 1, max = cel::MAX_CONNECTIONS_PER_TIER))
    )]
    pub connections: Vec<u32>,
    /// Measured time of each tier (or cell) for timed scenarios.
    #[serde(default = "default_duration")]
    pub duration: Dur,
    /// Load before measuring starts, per tier; its figures are discarded.
    #[serde(default)]
    pub warmup: Dur,
    /// Payload size and format of the messages sent.
    #[serde(default)]
    pub message: MessageSpec,
    /// Payload sizes of the payloadMatrix scenario, in bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = cel::MAX_SIZES), inner(range(min = 1)))]
    pub sizes: Vec<u32>,
    /// Formats of the formatComparison scenario.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub formats: Vec<Format>,
    /// How connections are opened: in batches, with a timeout.
    #[serde(default)]
    pub connect: ConnectSpec,
    /// Pings: count, interval, timeout, kind.
    #[serde(default)]
    pub ping: PingSpec,
    /// Open-loop sending rate (constantRate; echo mode's pacing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateSpec>,
    /// The connectionLimit search.
    #[serde(default)]
    pub limit: LimitSpec,
    /// The fanout scenario's topics and publishers (`connections` are its subscribers).
    #[serde(default, skip_serializing_if = "is_default_fanout")]
    pub fanout: crate::fanout::FanoutSpec,
    /// Messages in flight per connection in throughput-type scenarios against echoing servers.
    #[serde(default = "default_window")]
    #[schemars(range(min = 1))]
    pub window: u32,
    /// `batch`: queue a burst, then one write; `perMessage`: one write per message (to mimic
    /// clients that flush every send).
    #[serde(default)]
    pub flush: FlushMode,
    /// How long a connection's writes may wait for the server to read: writes that make no
    /// progress for this long end the connection as `server_not_reading`.
    #[serde(default = "default_write_timeout")]
    #[schemars(transform = cel::positive_duration)]
    pub write_timeout: Dur,
    /// Local addresses connections bind to, beyond one address's ephemeral ports.
    #[serde(default)]
    pub sources: SourcesSpec,
    /// How dropped connections come back (sustainedHold, fanout): off unless a policy is named. See
    /// docs/loadtest.md, "Reconnect storms".
    #[serde(default, skip_serializing_if = "is_default_reconnect")]
    pub reconnect: ReconnectSpec,
    /// What is done to the server at instants of each measured phase (a replica killed);
    /// every one is a window of the report's reconnect figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::reconnect::MAX_DISRUPTIONS))]
    pub disruptions: Vec<Disruption>,
    /// Load-generator pods sharing the load; `wsload run` runs them all in one process.
    #[serde(default = "default_shards")]
    #[schemars(range(min = 1, max = cel::MAX_SHARDS))]
    pub shards: u32,
    /// Pass/fail rules, `METRIC OP VALUE`; every one must hold in every tier.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = cel::MAX_THRESHOLDS))]
    pub thresholds: Vec<Threshold>,
    /// Where to read the server's own received-message counter, to reconcile with what
    /// clients sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<ServerMetrics>,
    /// The load-generator pods (cluster only): image, resources, placement, sysctls.
    #[serde(default)]
    pub loadgen: LoadgenSpec,
    /// How the operator runs the test (cluster only): deadlines, start delay, shard failure,
    /// cleanup.
    #[serde(default)]
    pub run: RunPolicy,
}

fn is_default_reconnect(r: &ReconnectSpec) -> bool {
    *r == ReconnectSpec::default()
}
fn is_default_fanout(f: &crate::fanout::FanoutSpec) -> bool {
    *f == crate::fanout::FanoutSpec::default()
}
fn default_connections() -> Vec<u32> {
    vec![100]
}
fn default_duration() -> Dur {
    Dur::secs(10)
}
fn default_write_timeout() -> Dur {
    Dur::secs(10)
}
fn default_window() -> u32 {
    64
}
fn default_shards() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::target_rules)]
pub struct Target {
    /// `ws://` or `wss://` URL of an external server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = cel::MAX_URL_LEN), transform = cel::url_rules)]
    pub url: Option<String>,
    /// A server wsload starts: a pod in a cluster, the `wsload-server` binary locally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ManagedServer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::server_rules)]
pub struct ManagedServer {
    /// Container image (cluster only); locally the `wsload-server` binary of this build runs.
    #[serde(default = "default_server_image")]
    #[schemars(length(min = 1, max = 1024), transform = cel::not_blank)]
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never` (cluster only); unset, Kubernetes' default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = cel::null_is_unset)]
    pub image_pull_policy: Option<PullPolicy>,
    /// CPU and memory of the server's container (cluster only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Where the server pod may run: `nodeSelector`, `affinity`, `tolerations` (cluster only).
    #[serde(default, skip_serializing_if = "Placement::is_empty")]
    pub placement: Placement,
    /// The reference server's profile (`WSLOAD_SERVER_PROFILE`).
    #[serde(default)]
    pub profile: ServerProfile,
    /// How many server processes serve the test, all on `port`: locally N `wsload-server`
    /// processes share the one port through `SO_REUSEPORT`; in a cluster N pods behind the
    /// server's Service.
    #[serde(default = "default_server_replicas")]
    #[schemars(range(min = 1, max = cel::MAX_SERVER_REPLICAS))]
    pub replicas: u32,
    /// Port of the WebSocket listener.
    #[serde(default = "default_server_port")]
    pub port: u16,
    /// Port of `/metrics`, `/healthz`, `/readyz` (the readiness probe).
    #[serde(default = "default_metrics_port")]
    pub metrics_port: u16,
    /// Request path the clients connect to.
    #[serde(default = "default_path")]
    #[schemars(length(max = 1024), transform = cel::server_path_rules)]
    pub path: String,
    /// Extra arguments to the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub args: Vec<String>,
    /// Extra environment of the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub env: Vec<EnvVar>,
}

pub const DEFAULT_SERVER_IMAGE: &str = concat!("wsload/server:", env!("CARGO_PKG_VERSION"));

fn default_server_image() -> String {
    DEFAULT_SERVER_IMAGE.to_string()
}
fn default_server_replicas() -> u32 {
    1
}
fn default_server_port() -> u16 {
    8080
}
fn default_metrics_port() -> u16 {
    9090
}
fn default_path() -> String {
    "/".to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ServerProfile {
    #[default]
    Echo,
    Wse,
    Sink,
    Broadcast,
    /// Topics: subscribe, unsubscribe and publish in plain JSON (`docs/server.md`).
    Pubsub,
}

impl ServerProfile {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerProfile::Echo => "echo",
            ServerProfile::Wse => "wse",
            ServerProfile::Sink => "sink",
            ServerProfile::Broadcast => "broadcast",
            ServerProfile::Pubsub => "pubsub",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Protocol {
    /// Any RFC 6455 server that echoes data frames (or, for sends only, any server).
    #[default]
    Echo,
    /// The WSE protocol: token, server_ready, client_hello, ping/PONG, prefixed frames.
    Wse,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Echo => "echo",
            Protocol::Wse => "wse",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::auth_rules)]
pub struct Auth {
    /// Sign an HS256 token per connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtAuth>,
    /// Send this token as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SecretValue>,
    /// How the token travels: the `access_token` cookie or an `Authorization: Bearer` header.
    #[serde(default)]
    pub send_as: TokenPlacement,
    /// Extra headers on the upgrade request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtAuth {
    pub secret: SecretValue,
    /// `sub` claim; `{i}` is replaced by the connection number.
    #[serde(default = "default_subject")]
    pub subject: String,
    /// `iss` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// `aud` claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    #[serde(default = "default_ttl")]
    pub ttl: Dur,
    /// More claims, merged over the standard ones.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub claims: serde_json::Map<String, serde_json::Value>,
}

fn default_subject() -> String {
    "wsload-{i}".to_string()
}
fn default_ttl() -> Dur {
    Dur::secs(3600)
}

/// A secret given inline, from an environment variable, or (in a cluster) from a Secret.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::secret_rules)]
pub struct SecretValue {
    /// The secret itself (tests only: it is stored in the LoadTest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The environment variable holding it (in a cluster, set it with `loadgen.env`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_env: Option<String>,
    /// A key of a Secret in the test's namespace (cluster only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
}

/// A key of a Secret in the test's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key within it.
    pub key: String,
}

/// The environment variable a `secretRef` reaches a shard in: the operator sets it on the
/// shard pods (from the Secret), the load generator reads it. Shell-safe: `wse-jwt` /
/// `secret.key` is `WSLOAD_SECRET_WSE_JWT_SECRET_KEY`.
pub fn secret_env_name(name: &str, key: &str) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    format!(
        "{}{}_{}",
        wsload_contract::env::SECRET_PREFIX,
        clean(name),
        clean(key)
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TokenPlacement {
    #[default]
    Cookie,
    Bearer,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tls {
    /// PEM file of CA certificates to trust besides the system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Accept any server certificate (testing only).
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Format {
    /// JSON text frames.
    #[default]
    Json,
    /// `M:` + MsgPack binary frames.
    Msgpack,
    /// `C:` + zlib-compressed JSON binary frames.
    Zlib,
    /// Raw binary frames.
    Binary,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Msgpack => "msgpack",
            Format::Zlib => "zlib",
            Format::Binary => "binary",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessageSpec {
    /// Payload bytes of each message (the envelope is padded up to it).
    #[serde(default = "default_size")]
    #[schemars(range(min = 1))]
    pub size: u32,
    /// `json`, `msgpack` (`M:`), `zlib` (`C:`) or `binary`.
    #[serde(default)]
    pub format: Format,
    /// zlib level 0-9 for the `zlib` format (the WSE benchmark uses 6).
    #[serde(default = "default_level")]
    #[schemars(range(max = 9))]
    pub compression_level: u32,
}

impl Default for MessageSpec {
    fn default() -> Self {
        MessageSpec {
            size: default_size(),
            format: Format::Json,
            compression_level: default_level(),
        }
    }
}

fn default_size() -> u32 {
    64
}
fn default_level() -> u32 {
    6
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectSpec {
    /// Connections opened together.
    #[serde(default = "default_batch_size")]
    #[schemars(range(min = 1))]
    pub batch_size: u32,
    /// Pause between batches.
    #[serde(default = "default_batch_interval")]
    pub batch_interval: Dur,
    /// Limit on TCP connect + upgrade + ready for one connection.
    #[serde(default = "default_connect_timeout")]
    #[schemars(transform = cel::positive_duration)]
    pub timeout: Dur,
    /// What one connection may hold for the server: the largest message and frame, and the
    /// replies waiting to be written. See docs/loadtest.md, "Hostile servers".
    #[serde(default)]
    pub limits: crate::connection_limits::ConnectionLimits,
}

impl Default for ConnectSpec {
    fn default() -> Self {
        ConnectSpec {
            batch_size: default_batch_size(),
            batch_interval: default_batch_interval(),
            timeout: default_connect_timeout(),
            limits: Default::default(),
        }
    }
}

fn default_batch_size() -> u32 {
    500
}
fn default_batch_interval() -> Dur {
    Dur::millis(10)
}
fn default_connect_timeout() -> Dur {
    Dur::secs(10)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PingSpec {
    /// Pings per connection (pingLatency).
    #[serde(default = "default_ping_count")]
    pub count: u32,
    /// Pause between one connection's pings; defaults to none (pingLatency) or 5s
    /// (sustainedHold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("nullable" = true))]
    pub interval: Option<Dur>,
    /// A ping unanswered this long is lost.
    #[serde(default = "default_ping_timeout")]
    #[schemars(transform = cel::positive_duration)]
    pub timeout: Dur,
    /// `app`: the protocol's ping (WSE PING/PONG, a timestamped echo); `frame`: WebSocket
    /// ping/pong control frames.
    #[serde(default)]
    pub kind: PingKind,
}

impl Default for PingSpec {
    fn default() -> Self {
        PingSpec {
            count: default_ping_count(),
            interval: None,
            timeout: default_ping_timeout(),
            kind: PingKind::App,
        }
    }
}

fn default_ping_count() -> u32 {
    50
}
fn default_ping_timeout() -> Dur {
    Dur::secs(5)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PingKind {
    #[default]
    App,
    Frame,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateSpec {
    /// Messages per second over all connections (and all shards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "exclusiveMinimum" = true))]
    pub messages_per_second: Option<f64>,
    /// Ramp: each stage moves the rate linearly from the previous stage's target (or
    /// `messagesPerSecond`, else 0) to its own over its duration. Replaces `duration`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = cel::MAX_STAGES))]
    pub stages: Vec<Stage>,
}

impl RateSpec {
    /// The rate the test aims at, over all connections: `messagesPerSecond`, else the last
    /// stage's target (where a ramp ends).
    pub fn target(&self) -> Option<f64> {
        self.messages_per_second
            .or_else(|| self.stages.last().map(|s| s.target))
    }
}

/// One ramp stage: the rate moves linearly to `target` over `duration`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Stage {
    /// How long the stage lasts.
    pub duration: Dur,
    /// Messages per second at the end of the stage.
    #[schemars(range(min = 0.0))]
    pub target: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = cel::limit_rules)]
pub struct LimitSpec {
    /// First probe.
    #[serde(default = "default_limit_start")]
    #[schemars(range(min = 1))]
    pub start: u32,
    /// Never probe above this.
    #[serde(default = "default_limit_max")]
    #[schemars(range(max = cel::MAX_CONNECTIONS_PER_TIER))]
    pub max: u32,
    /// A probe passes while failed connections stay under this share.
    #[serde(default = "default_limit_errors")]
    pub max_error_rate: Percent,
    /// How long each probe holds its connections.
    #[serde(default = "default_limit_hold")]
    pub hold: Dur,
    /// The binary search stops when the gap is at most this many connections.
    #[serde(default = "default_limit_resolution")]
    #[schemars(range(min = 1))]
    pub resolution: u32,
}

impl Default for LimitSpec {
    fn default() -> Self {
        LimitSpec {
            start: default_limit_start(),
            max: default_limit_max(),
            max_error_rate: default_limit_errors(),
            hold: default_limit_hold(),
            resolution: default_limit_resolution(),
        }
    }
}

fn default_limit_start() -> u32 {
    1000
}
fn default_limit_max() -> u32 {
    1_000_000
}
fn default_limit_errors() -> Percent {
    Percent(0.05)
}
fn default_limit_hold() -> Dur {
    Dur::secs(3)
}
fn default_limit_resolution() -> u32 {
    1000
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FlushMode {
    #[default]
    Batch,
    PerMessage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourcesSpec {
    /// Local addresses connections bind to, in turn. Empty: 127.0.0.1, 127.0.0.2, ... as
    /// needed for a loopback target; the system's choice otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = cel::MAX_ADDRESSES))]
    pub addresses: Vec<IpAddr>,
    /// Connections one source address may carry to one target (the ephemeral port range).
    #[serde(default = "default_per_address")]
    #[schemars(range(min = 1))]
    pub per_address: u32,
}

impl Default for SourcesSpec {
    fn default() -> Self {
        SourcesSpec {
            addresses: Vec::new(),
            per_address: DEFAULT_PER_ADDRESS,
        }
    }
}

/// Ports in Linux's default ephemeral range (32768-60999), less a margin for other sockets.
pub const DEFAULT_PER_ADDRESS: u32 = 28_000;

fn default_per_address() -> u32 {
    DEFAULT_PER_ADDRESS
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerMetrics {
    /// The server's Prometheus endpoint; defaults to the managed server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Counter of messages the server received (summed over matching series).
    #[serde(default = "default_received_metric")]
    pub received: String,
    /// Only series with these labels count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

pub const DEFAULT_RECEIVED_METRIC: &str = "wsload_server_messages_received_total";

fn default_received_metric() -> String {
    DEFAULT_RECEIVED_METRIC.to_string()
}
