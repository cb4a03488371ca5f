//! The environment variables wsload's processes read, each named once. Most are set by one
//! process for another (the operator on the pods it builds, `wsload run` on the shards and the
//! server it starts); the rest are a process's own settings, named here so that its command
//! line and the tests that set them cannot drift apart.
//!
//! Every variable is also a flag of the process that reads it, unless its doc says otherwise.

// --- The load generator's shard (`wsload shard`) ----------------------------------------------

/// The LoadTest as YAML. Set by the operator on every shard pod; read by `wsload shard` when
/// no file is named (not a flag). `wsload run` clears it for the shards it starts, which get
/// a file.
pub const LOADTEST: &str = "WSLOAD_LOADTEST";
/// This shard's index, from 0. Set by the operator on every shard pod; read by `wsload shard`
/// (`--index`).
pub const SHARD_INDEX: &str = "WSLOAD_SHARD_INDEX";
/// How many shards the test has. Set by the operator on every shard pod; read by `wsload
/// shard` (`--count`).
pub const SHARD_COUNT: &str = "WSLOAD_SHARD_COUNT";
/// `true`: get ready, then wait for the operator's start on the control endpoint. Set by the
/// operator on every shard pod; read by `wsload shard` (`--await-start`).
pub const AWAIT_START: &str = "WSLOAD_AWAIT_START";
/// ADDR:PORT of the shard's metrics and control endpoint. Set by the operator on every shard
/// pod (the pod IP and the shard port); read by `wsload run` and `wsload shard`
/// (`--metrics-listen`).
pub const METRICS_LISTEN: &str = "WSLOAD_METRICS_LISTEN";
/// The file holding the test's control token (crate::control), which every control request
/// to the shard must carry as `Authorization: Bearer <token>`. Set by the operator on every
/// shard pod (the path of its mounted Secret, never the token) and by `wsload run` on the
/// shards it starts (a private file); read by `wsload shard` (`--control-token-file`), which
/// refuses `--await-start` without it.
pub const CONTROL_TOKEN_FILE: &str = "WSLOAD_CONTROL_TOKEN_FILE";
/// The URL the shard dials, overriding the spec's. Set by the operator on every shard pod (the
/// managed server's pod or Service); read by `wsload shard` (`--target-url`).
pub const TARGET_URL: &str = "WSLOAD_TARGET_URL";
/// The server's metrics URL, for one shard's own delivery check. Read by `wsload shard`
/// (`--server-metrics-url`); the operator leaves it unset (it reconciles delivery itself), and
/// `wsload run` clears it for its shards.
pub const SERVER_METRICS_URL: &str = "WSLOAD_SERVER_METRICS_URL";
/// The shards' common start, Unix milliseconds. A user's setting; read by `wsload shard`
/// (`--start-at`).
pub const START_AT: &str = "WSLOAD_START_AT";
/// How long a shard waiting to be told it may exit lingers after its run (`15m`). A user's
/// setting; read by `wsload shard` (`--linger`).
pub const LINGER: &str = "WSLOAD_LINGER";
/// Worker threads of the load generator. Set by tests; read by `wsload run` and `wsload
/// shard` (`--threads`).
pub const THREADS: &str = "WSLOAD_THREADS";
/// The pid of the `wsload run` that started this shard: the shard dies with it. Set by
/// `wsload run` on the shards it starts; read by `wsload shard` (not a flag).
pub const EXIT_WITH_PARENT: &str = "WSLOAD_EXIT_WITH_PARENT";
/// Test hook: shifts the shard's wall clock by signed milliseconds, so that the conductor's
/// clock-offset measurement can be checked against a known offset on one machine. `MS` shifts
/// every shard that reads it; `INDEX=MS,...` only the shards named (`1=50`: shard 1, 50 ms
/// ahead), which is how a test shifts one of the shards `wsload run` starts, as they all
/// inherit its environment. Read once when `wsload shard` starts; moves what the shard stamps
/// through the load generator's `clock` (its cells' starts and ends, the instants it is
/// released at) and its `GET /control/clock` alike. Not for real runs (not a flag).
pub const CLOCK_SHIFT_MS: &str = "WSLOAD_CLOCK_SHIFT_MS";
/// The `wsload-server` binary to start for a managed server. Set by users, scripts and tests;
/// read by `wsload run` and `wsload shard` (`--server-bin`).
pub const SERVER_BIN: &str = "WSLOAD_SERVER_BIN";
/// `RUST_LOG` of the managed server `wsload run` starts (default `warn`). A user's setting;
/// read by `wsload run` (not a flag).
pub const SERVER_LOG: &str = "WSLOAD_SERVER_LOG";
/// The prefix of the variables that carry the Secrets a LoadTest refers to
/// (`wsload_spec::secret_env_name` appends the secret's name and key). Set by the operator on
/// every shard pod, from the Secret; read by the load generator's dialer.
pub const SECRET_PREFIX: &str = "WSLOAD_SECRET_";

// --- The reference server (`wsload-server`) ---------------------------------------------------

/// WebSocket listeners, ADDR:PORT[=PROFILE], comma-separated. Set by the operator on every
/// server pod (the pod IP and the server's port); read by `wsload-server` (`--listen`).
pub const SERVER_LISTEN: &str = "WSLOAD_SERVER_LISTEN";
/// ADDR:PORT of the server's /metrics, /healthz and /readyz. Set by the operator on every
/// server pod; read by `wsload-server` (`--metrics-listen`).
pub const SERVER_METRICS_LISTEN: &str = "WSLOAD_SERVER_METRICS_LISTEN";
/// The profile served where no route or listener says otherwise (`echo`, `wse`, ...). Set by
/// the operator on every server pod, from the spec; read by `wsload-server` (`--profile`).
pub const SERVER_PROFILE: &str = "WSLOAD_SERVER_PROFILE";
/// PATH=PROFILE routes, comma-separated. Read by `wsload-server` (`--route`).
pub const SERVER_ROUTES: &str = "WSLOAD_SERVER_ROUTES";
/// SO_REUSEPORT on every listener. Read by `wsload-server` (`--reuse-port`).
pub const SERVER_REUSE_PORT: &str = "WSLOAD_SERVER_REUSE_PORT";
/// Each listener's accept queue. Read by `wsload-server` (`--listen-backlog`).
pub const SERVER_LISTEN_BACKLOG: &str = "WSLOAD_SERVER_LISTEN_BACKLOG";
/// Connections admitted at once. Read by `wsload-server` (`--max-connections`).
pub const SERVER_MAX_CONNECTIONS: &str = "WSLOAD_SERVER_MAX_CONNECTIONS";
/// Largest message accepted, bytes. Read by `wsload-server` (`--max-message-size`).
pub const SERVER_MAX_MESSAGE_SIZE: &str = "WSLOAD_SERVER_MAX_MESSAGE_SIZE";
/// Accept to 101 limit. Read by `wsload-server` (`--handshake-timeout`).
pub const SERVER_HANDSHAKE_TIMEOUT: &str = "WSLOAD_SERVER_HANDSHAKE_TIMEOUT";
/// Silence before a connection is closed. Read by `wsload-server` (`--idle-timeout`).
pub const SERVER_IDLE_TIMEOUT: &str = "WSLOAD_SERVER_IDLE_TIMEOUT";
/// How often every client is pinged. Read by `wsload-server` (`--ping-interval`).
pub const SERVER_PING_INTERVAL: &str = "WSLOAD_SERVER_PING_INTERVAL";
/// Bound on the drain at SIGTERM. Read by `wsload-server` (`--drain-timeout`).
pub const SERVER_DRAIN_TIMEOUT: &str = "WSLOAD_SERVER_DRAIN_TIMEOUT";
/// HS256 secret of WSE tokens. Set by the operator on server pods (from the spec's value or
/// Secret) and by `wsload run` on the managed server it starts (kept off its command line);
/// read by `wsload-server` (`--jwt-secret`).
pub const SERVER_JWT_SECRET: &str = "WSLOAD_SERVER_JWT_SECRET";
/// The `iss` claim WSE tokens must carry. Set by the operator on server pods; read by
/// `wsload-server` (`--jwt-issuer`).
pub const SERVER_JWT_ISSUER: &str = "WSLOAD_SERVER_JWT_ISSUER";
/// The `aud` claim WSE tokens must carry. Set by the operator on server pods; read by
/// `wsload-server` (`--jwt-audience`).
pub const SERVER_JWT_AUDIENCE: &str = "WSLOAD_SERVER_JWT_AUDIENCE";
/// `true`: serve WSE without a token. Set by the operator on server pods of a wse test with no
/// auth; read by `wsload-server` (`--wse-allow-anonymous`).
pub const SERVER_WSE_ALLOW_ANONYMOUS: &str = "WSLOAD_SERVER_WSE_ALLOW_ANONYMOUS";
/// The broadcast profile's tick. Read by `wsload-server` (`--broadcast-interval`).
pub const SERVER_BROADCAST_INTERVAL: &str = "WSLOAD_SERVER_BROADCAST_INTERVAL";
/// Each broadcast message's padding, bytes. Read by `wsload-server`
/// (`--broadcast-payload-size`).
pub const SERVER_BROADCAST_PAYLOAD_SIZE: &str = "WSLOAD_SERVER_BROADCAST_PAYLOAD_SIZE";
/// Broadcast messages published at each tick. Read by `wsload-server` (`--broadcast-batch`).
pub const SERVER_BROADCAST_BATCH: &str = "WSLOAD_SERVER_BROADCAST_BATCH";
/// How each broadcast message carries its publish instant (`us` or `ms`). Read by
/// `wsload-server` (`--broadcast-timestamp`).
pub const SERVER_BROADCAST_TIMESTAMP: &str = "WSLOAD_SERVER_BROADCAST_TIMESTAMP";
/// Deliveries a topic subscriber's connection may have waiting before more are dropped (and
/// counted). Read by `wsload-server` (`--subscriber-queue`).
pub const SERVER_SUBSCRIBER_QUEUE: &str = "WSLOAD_SERVER_SUBSCRIBER_QUEUE";
/// Topics `t0..tN-1` the server's own ticker publishes to. Read by `wsload-server`
/// (`--ticker-topics`).
pub const SERVER_TICKER_TOPICS: &str = "WSLOAD_SERVER_TICKER_TOPICS";
/// Ticker messages per second to each of its topics. Read by `wsload-server` (`--ticker-rate`).
pub const SERVER_TICKER_RATE: &str = "WSLOAD_SERVER_TICKER_RATE";
/// Each ticker message's padding, bytes. Read by `wsload-server` (`--ticker-payload-size`).
pub const SERVER_TICKER_PAYLOAD_SIZE: &str = "WSLOAD_SERVER_TICKER_PAYLOAD_SIZE";
/// Read buffer per connection, bytes. Read by `wsload-server` (`--read-buffer-size`).
pub const SERVER_READ_BUFFER_SIZE: &str = "WSLOAD_SERVER_READ_BUFFER_SIZE";
/// Runtime worker threads. Read by `wsload-server` (`--threads`).
pub const SERVER_THREADS: &str = "WSLOAD_SERVER_THREADS";
/// `text` or `json` logs. Read by `wsload-server` (`--log-format`).
pub const SERVER_LOG_FORMAT: &str = "WSLOAD_SERVER_LOG_FORMAT";

// --- The operator (`wsload-operator run`), each set by the Helm chart's Deployment -------------

/// ADDR:PORT of /metrics, /healthz and /readyz (`--metrics-listen`).
pub const OPERATOR_METRICS_LISTEN: &str = "WSLOAD_OPERATOR_METRICS_LISTEN";
/// The one namespace watched; all when unset (`--watch-namespace`).
pub const OPERATOR_WATCH_NAMESPACE: &str = "WSLOAD_OPERATOR_WATCH_NAMESPACE";
/// Hold a Lease before reconciling (`--leader-elect`).
pub const OPERATOR_LEADER_ELECT: &str = "WSLOAD_OPERATOR_LEADER_ELECT";
/// How often a running test is looked at (`--poll`).
pub const OPERATOR_POLL: &str = "WSLOAD_OPERATOR_POLL";
/// From deciding a cell to its start instant (`--cell-delay`).
pub const OPERATOR_CELL_DELAY: &str = "WSLOAD_OPERATOR_CELL_DELAY";
/// Limit on one control request to a shard (`--control-timeout`).
pub const OPERATOR_CONTROL_TIMEOUT: &str = "WSLOAD_OPERATOR_CONTROL_TIMEOUT";
/// Limit on fetching one shard's result (`--result-timeout`).
pub const OPERATOR_RESULT_TIMEOUT: &str = "WSLOAD_OPERATOR_RESULT_TIMEOUT";
/// `text` or `json` logs (`--log-format`).
pub const OPERATOR_LOG_FORMAT: &str = "WSLOAD_OPERATOR_LOG_FORMAT";
/// The load-generator image of tests that keep the built-in one (`--loadgen-image`).
pub const OPERATOR_LOADGEN_IMAGE: &str = "WSLOAD_OPERATOR_LOADGEN_IMAGE";
/// The server image of tests that keep the built-in one (`--server-image`).
pub const OPERATOR_SERVER_IMAGE: &str = "WSLOAD_OPERATOR_SERVER_IMAGE";
/// The file holding the operator's key, from which each test's control token is derived
/// (`--control-key-file`; the chart mounts it from its Secret). Required.
pub const OPERATOR_CONTROL_KEY_FILE: &str = "WSLOAD_OPERATOR_CONTROL_KEY_FILE";
/// Placement (JSON) of shards whose test sets none (`--loadgen-placement`).
pub const OPERATOR_LOADGEN_PLACEMENT: &str = "WSLOAD_OPERATOR_LOADGEN_PLACEMENT";
/// Placement (JSON) of managed servers whose test sets none (`--server-placement`).
pub const OPERATOR_SERVER_PLACEMENT: &str = "WSLOAD_OPERATOR_SERVER_PLACEMENT";

/// What the operator sets on a shard pod (besides `POD_IP`, which the kubelet fills in, and
/// one [`SECRET_PREFIX`] variable per Secret the test refers to).
pub const SHARD_POD: &[&str] = &[
    LOADTEST,
    SHARD_INDEX,
    SHARD_COUNT,
    AWAIT_START,
    METRICS_LISTEN,
    TARGET_URL,
    CONTROL_TOKEN_FILE,
];

/// What the operator may set on a server pod (besides `POD_IP` and the spec's own `env`).
pub const SERVER_POD: &[&str] = &[
    SERVER_LISTEN,
    SERVER_METRICS_LISTEN,
    SERVER_PROFILE,
    SERVER_JWT_SECRET,
    SERVER_JWT_ISSUER,
    SERVER_JWT_AUDIENCE,
    SERVER_WSE_ALLOW_ANONYMOUS,
];

/// Every variable above (the secrets' prefix aside).
pub const ALL: &[&str] = &[
    LOADTEST,
    SHARD_INDEX,
    SHARD_COUNT,
    AWAIT_START,
    METRICS_LISTEN,
    TARGET_URL,
    CONTROL_TOKEN_FILE,
    SERVER_METRICS_URL,
    START_AT,
    LINGER,
    THREADS,
    EXIT_WITH_PARENT,
    CLOCK_SHIFT_MS,
    SERVER_BIN,
    SERVER_LOG,
    SERVER_LISTEN,
    SERVER_METRICS_LISTEN,
    SERVER_PROFILE,
    SERVER_ROUTES,
    SERVER_REUSE_PORT,
    SERVER_LISTEN_BACKLOG,
    SERVER_MAX_CONNECTIONS,
    SERVER_MAX_MESSAGE_SIZE,
    SERVER_HANDSHAKE_TIMEOUT,
    SERVER_IDLE_TIMEOUT,
    SERVER_PING_INTERVAL,
    SERVER_DRAIN_TIMEOUT,
    SERVER_JWT_SECRET,
    SERVER_JWT_ISSUER,
    SERVER_JWT_AUDIENCE,
    SERVER_WSE_ALLOW_ANONYMOUS,
    SERVER_BROADCAST_INTERVAL,
    SERVER_BROADCAST_PAYLOAD_SIZE,
    SERVER_BROADCAST_BATCH,
    SERVER_BROADCAST_TIMESTAMP,
    SERVER_SUBSCRIBER_QUEUE,
    SERVER_TICKER_TOPICS,
    SERVER_TICKER_RATE,
    SERVER_TICKER_PAYLOAD_SIZE,
    SERVER_READ_BUFFER_SIZE,
    SERVER_THREADS,
    SERVER_LOG_FORMAT,
    OPERATOR_METRICS_LISTEN,
    OPERATOR_WATCH_NAMESPACE,
    OPERATOR_LEADER_ELECT,
    OPERATOR_POLL,
    OPERATOR_CELL_DELAY,
    OPERATOR_CONTROL_TIMEOUT,
    OPERATOR_RESULT_TIMEOUT,
    OPERATOR_LOG_FORMAT,
    OPERATOR_LOADGEN_IMAGE,
    OPERATOR_SERVER_IMAGE,
    OPERATOR_CONTROL_KEY_FILE,
    OPERATOR_LOADGEN_PLACEMENT,
    OPERATOR_SERVER_PLACEMENT,
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The values of this file's `pub const NAME: &str = "VALUE";` lines.
    fn declared() -> BTreeSet<&'static str> {
        include_str!("env.rs")
            .lines()
            .filter_map(|l| {
                l.strip_prefix("pub const ")?
                    .split_once(": &str = \"")?
                    .1
                    .strip_suffix("\";")
            })
            .collect()
    }

    #[test]
    fn all_lists_every_variable_once() {
        let all: BTreeSet<&str> = ALL.iter().copied().collect();
        assert_eq!(all.len(), ALL.len(), "a variable listed twice in ALL");
        let mut declared = declared();
        assert!(declared.remove(SECRET_PREFIX));
        assert_eq!(all, declared);
        for v in ALL {
            assert!(
                v.starts_with("WSLOAD_")
                    && v.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                "{v}"
            );
        }
    }

    #[test]
    fn what_the_operator_sets_is_listed() {
        for v in SHARD_POD.iter().chain(SERVER_POD) {
            assert!(ALL.contains(v), "{v}");
        }
    }

    /// The chart's Deployment spells the operator's variables out in YAML: each must be one
    /// the operator reads.
    #[test]
    fn the_chart_sets_only_known_operator_variables() {
        let deployment = include_str!("../../../charts/wsload/templates/deployment.yaml");
        let set: Vec<&str> = deployment
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- name: "))
            .filter(|name| name.starts_with("WSLOAD_"))
            .collect();
        assert!(set.contains(&OPERATOR_POLL), "{set:?}");
        for name in set {
            assert!(
                ALL.contains(&name),
                "the chart sets {name}, which nothing reads"
            );
        }
    }
}
