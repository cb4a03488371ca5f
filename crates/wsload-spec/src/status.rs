//! A LoadTest's status: what the operator writes and `kubectl get lt -o yaml` shows. Defined
//! here, beside the spec, so the operator, the CRD schema and any reader agree on it. Every
//! field is optional or defaults to empty, so a status written by an older operator (or none
//! at all) reads.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct LoadTestStatus {
    /// Pending, Starting, Running, Collecting, then Succeeded or Failed; never backwards.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::cel::null_is_unset)]
    pub phase: Option<Phase>,
    /// The `metadata.generation` this status describes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One per type: `ServerReady`, `ShardsReady`, `Released` (the start barrier),
    /// `ThresholdsPassed`, `Degraded` (a shard left out), `Failed` (a failure was detected).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Vec<Condition>,
    /// Why the test is in this phase, CamelCase (e.g. `DeadlineExceeded`, `ShardFailed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The same for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the current phase began: the phase's deadline counts from here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<Time>,
    /// When the operator first saw the test.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When it reached Succeeded or Failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The URL the shards dial (the managed server's pod address, or `spec.target.url`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_url: Option<String>,
    /// The start barrier: the instant every shard was told to start its load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Time>,
    /// The same instant, Unix milliseconds (`startAt` shows whole seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at_millis: Option<u64>,
    /// Latest minus earliest shard start, in milliseconds (includes the nodes' clock offset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_skew_millis: Option<f64>,
    /// The servers' received counter, summed over every replica, read when the first cell was
    /// released: each cell's `serverReceived` counts from here on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_received_baseline: Option<u64>,
    /// A fanout's: the servers' topic counters, summed over every replica, read with
    /// `serverReceivedBaseline`; each cell's `serverTopics` counts from here on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_topics_baseline: Option<crate::fanout::ServerTopics>,
    /// wsload-server's connection counters, summed over every replica, read with
    /// `serverReceivedBaseline`; each cell's `serverConnections` counts from here on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_connections_baseline: Option<crate::server_connections::ServerConnections>,
    /// Every cell released so far, in order: when all shards were told to begin it and, once
    /// every live shard finished it, its outcome summed over them. The next cell is decided
    /// from these (connectionLimit's search replays them), so they are written before any
    /// shard hears of the next.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_CELLS))]
    pub cells: Vec<CellStatus>,
    /// One entry per shard pod.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardStatus>,
    /// The ConfigMap holding the merged result (`merged.json.gz`, histograms included);
    /// shard i's own result is in ConfigMap `<name>-result-<i>` (`result.json.gz`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results_config_map: Option<String>,
    /// Figures of each tier (or cell), merged over the shards.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierFigures>,
    /// Each threshold against its worst tier.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<ThresholdResult>,
    /// Tiers past the first [`MAX_LISTED`] (all of them are in the merged result).
    #[serde(skip_serializing_if = "is_zero")]
    pub tiers_omitted: u32,
    /// Threshold checks not listed: past [`MAX_LISTED`], passed ones go first.
    #[serde(skip_serializing_if = "is_zero")]
    pub thresholds_omitted: u32,
    /// Pass when every threshold held (or there are none), Fail otherwise; set once measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::cel::null_is_unset)]
    pub verdict: Option<Verdict>,
    /// Achieved message rate of the largest tier, for `kubectl get` (e.g. `1.23M msg/s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub achieved_rate: Option<String>,
    /// Round-trip p99 of the largest tier, for `kubectl get` (e.g. `3.20 ms`); where the scenario
    /// times no round trips, its handshake p99 marked as such (`2.00 ms connect`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<String>,
    /// What the merged result's findings say: known causes the figures show (a full accept
    /// queue, connections the server reset, a load generator at its CPU limit...), each with its
    /// evidence and what to change, as the report prints them. The first [`MAX_FINDINGS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_FINDINGS))]
    pub findings: Vec<String>,
    /// Findings past the first [`MAX_FINDINGS`] (the merged result's report lists them all).
    #[serde(skip_serializing_if = "is_zero")]
    pub findings_omitted: u32,
    /// Shards whose result is missing (`shardFailure: continue`): figures cover the others.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_shards: Vec<u32>,
}

/// Most cells a test can run: a payloadMatrix of the most tiers by the most sizes (a
/// formatComparison has fewer formats, a connectionLimit search under 64 probes).
/// Most tiers and threshold checks listed in status: the merged result holds them all, and
/// status must stay far below etcd's object limit (1.5 MiB) at any spec the schema admits.
pub const MAX_LISTED: usize = 128;

pub const MAX_CELLS: usize = crate::cel::MAX_TIERS * crate::cel::MAX_SIZES;

/// Cells whose server connection counters status keeps, the first ones: what the status bound
/// leaves room for at the largest spec (5,000 shards, 2,048 cells), each cell's counters with
/// every reason counted, about 530 bytes. The run's first cells are its smaller tiers; a run
/// of more cells keeps none for the rest, and their server findings are missing.
pub const MAX_CONNECTION_CELLS: usize = 24;

/// Done cells whose measure instant status keeps, the first ones: the instant is needed only
/// while its cell runs (the running cell keeps its own, whatever its index), and 2,048 cells of
/// it would take 67 KB of the status bound. A run's first cells are its smaller tiers.
pub const MAX_MEASURE_CELLS: usize = 24;

/// Findings listed in status: enough for the causes of one run, few enough to read at a glance.
pub const MAX_FINDINGS: usize = 10;

/// The longest finding status holds, in bytes (then cut on a character boundary and marked
/// `...`; the merged result has it whole): a finding's evidence quotes at most a short example
/// of what the server sent, so only a pathological one, or one listing dozens of replicas, is
/// this long. 768, not 1024: the reconnect tiers' `peakServerAcceptsPerSecond` took what the
/// status bound had left at the largest spec.
pub const MAX_FINDING_BYTES: usize = 768;

/// The longest reason a threshold check without a figure holds in status, in bytes (then cut
/// like a finding; the merged result has it whole): `not measured: 0 pings were sent` fits,
/// a failed connect's breakdown may not. 128 checks of it take 8 KB of the status bound.
pub const MAX_REASON_BYTES: usize = 64;

/// One cell of the run, as the operator conducted it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct CellStatus {
    /// Position in the run, from 0.
    pub index: u32,
    /// The report's row label (`1000`, `4 KiB x 1000`).
    pub label: String,
    /// Connections of the whole test in this cell (all shards).
    pub connections: u32,
    /// The instant every shard was told to begin it, Unix milliseconds.
    pub start_at_millis: u64,
    /// The instant every shard was told to begin measuring it, Unix milliseconds (the
    /// operator's clock): chosen once every live shard had opened its share, recorded before
    /// any shard hears of it, so an operator restarted meanwhile tells the rest the same one.
    /// Unset for a cell whose shards do not wait (a fanout's, a lone shard's unless the
    /// operator kills or restarts the server: it times them from here), and once done
    /// past the first [`MAX_MEASURE_CELLS`] cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measure_at_millis: Option<u64>,
    /// Every live shard finished it, and the fields below are its outcome.
    pub done: bool,
    /// Shards released into it; once done, those that finished it. Fewer finished than were
    /// released: a shard was lost during the cell, its sends are unknown, and so is the
    /// cell's delivery.
    #[serde(skip_serializing_if = "is_zero")]
    pub shards: u32,
    /// Connections attempted, and those that failed or dropped, summed over the shards.
    #[serde(skip_serializing_if = "is_zero")]
    pub attempted: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub failed: u64,
    /// Data messages sent, warm-up included, summed over the shards: what the servers
    /// should have received.
    #[serde(skip_serializing_if = "is_zero")]
    pub sent: u64,
    /// What the servers counted during the cell, every replica summed; unset when the counter
    /// could not be read (or there is none: an external server without `serverMetrics`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_received: Option<u64>,
    /// A fanout's: what the servers' topic counters grew by during the cell, every replica
    /// summed, read once every shard finished it; unset when unread (or not wsload-server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_topics: Option<crate::fanout::ServerTopics>,
    /// What wsload-server's connection counters grew by during the cell, every replica summed
    /// (by reason), with the fewest and most one replica admitted, read once every shard
    /// finished it; unset when unread (not wsload-server, a replica lost), and past the first
    /// [`MAX_CONNECTION_CELLS`] cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_connections: Option<crate::server_connections::ServerConnections>,
    /// When the first shard actually began it, Unix milliseconds (its own clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at_millis: Option<u64>,
    /// Last shard's actual start minus the first's, milliseconds (includes the nodes' clock
    /// offset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_skew_millis: Option<f64>,
    /// The disruptions the operator ran on the server's pods in this cell (`spec.disruptions`'
    /// kills and rolling restarts), each once begun: recorded as it goes, so an operator
    /// restarted meanwhile carries on from here and never kills twice. Kept once done for the
    /// first [`MAX_MEASURE_CELLS`] cells, so that status stays bounded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disruptions: Vec<DisruptionStatus>,
}

/// One of `spec.disruptions` that acts on the server's pods, as the operator ran it in a cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct DisruptionStatus {
    /// Its position in `spec.disruptions`.
    pub index: u32,
    /// When the operator began it, Unix milliseconds (its clock; the cell's
    /// `measureAtMillis` plus the disruption's `at`, or a little after).
    pub began_at_millis: u64,
    /// The server replicas it took down: a kill's, all at once; a rolling restart's, the
    /// one it is restarting (or restarted last).
    pub replicas: Vec<u32>,
    /// The UIDs of the pods it deleted: a replica's pod is back once one with another UID is
    /// ready. Dropped once the next cell is released, so that status stays bounded.
    pub deleted_pods: Vec<String>,
    /// A rolling restart's: when the replica it restarted last was ready again (the pause
    /// before the next runs from there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_at_millis: Option<u64>,
    /// A Deployment roll's (`restart.deployment`): the Deployment's generation its patch
    /// made; the roll is done once the Deployment has observed it and every replica is
    /// updated and available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// When every replica it took down was ready again, Unix milliseconds; unset while it
    /// runs, for a kill without `restartAfter`, and for one the cell's end cut short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at_millis: Option<u64>,
    /// What happened, in words (`replicas [0] deleted; back after 2.1s`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Accepted; the managed server is being started.
    Pending,
    /// Shard pods are being started and must all report ready.
    Starting,
    /// Load is running.
    Running,
    /// Results are being fetched from the shards and merged.
    Collecting,
    /// Measured; `verdict` says whether the thresholds held.
    Succeeded,
    /// Could not be measured as asked; `reason` and `message` say why.
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Starting => "Starting",
            Phase::Running => "Running",
            Phase::Collecting => "Collecting",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// Succeeded or Failed: nothing more happens.
    pub fn is_finished(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ShardStatus {
    pub index: u32,
    pub state: ShardState,
    /// When it began its first cell, Unix microseconds (its own clock): the moments
    /// `startSkewMillis` spreads over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at_micros: Option<u64>,
    /// Why it failed or was lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Container restarts seen (a restarted shard would repeat load: it fails).
    #[serde(skip_serializing_if = "is_zero")]
    pub restarts: u32,
    /// Its wall clock against the operator's, once probed; `startedAtMicros` is on the
    /// operator's clock when this is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<ShardClock>,
}

/// How far a shard's wall clock is from its conductor's (the operator, or `wsload run`),
/// NTP-style: from the probe of the smallest round trip over the control channel
/// (wsload_control::clock). In the LoadTest status and in the result (`shardInfo[].clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardClock {
    /// Shard clock minus conductor clock: positive when the shard runs ahead.
    pub offset_micros: i64,
    /// The true offset is within `offsetMicros` ± this: half the round trip of the probe the
    /// offset comes from (the reply was stamped somewhere within it).
    pub uncertainty_micros: u64,
    /// Probes taken.
    pub samples: u32,
}

impl ShardClock {
    /// An instant the shard stamped (Unix µs), on the conductor's clock.
    pub fn to_conductor(&self, shard_micros: u64) -> u64 {
        (i128::from(shard_micros) - i128::from(self.offset_micros)).clamp(0, i128::from(u64::MAX))
            as u64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum ShardState {
    /// Pod created, not ready.
    #[default]
    Pending,
    /// Ready and waiting for its start.
    Ready,
    /// Running its load.
    Running,
    /// Finished; its result waits to be fetched.
    Done,
    /// Its result is stored in the results ConfigMap.
    Collected,
    /// It reported a failure, or its pod failed.
    Failed,
    /// Its pod disappeared (deleted, evicted, node gone).
    Lost,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// One tier's (or cell's) figures, merged over the shards.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct TierFigures {
    /// The report's row label (`1000`, `4 KiB x 1000`, `msgpack x 100`).
    pub label: String,
    /// Connections of the whole test in this tier.
    pub connections: u32,
    pub messages_per_second: f64,
    pub bytes_per_second: f64,
    /// Connections established per second during the connect phase.
    pub connects_per_second: f64,
    /// Connections established (all shards).
    #[serde(default)]
    pub connected: u64,
    /// Connections that lasted to the end of the tier with no error and no lost ping.
    #[serde(default)]
    pub survived: u64,
    /// `survived` over `connected`, 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub survival: Option<f64>,
    /// First dial to the last connection established, seconds (the slowest shard).
    #[serde(default)]
    pub connect_seconds: f64,
    /// Handshake (TCP + upgrade + ready), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect: Option<Percentiles>,
    /// Round trip, ms; from the intended send time in open-loop scenarios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt: Option<Percentiles>,
    /// Round trip from the actual send time, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_raw: Option<Percentiles>,
    /// Failed connections and dropped ones, by reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// Unanswered pings or echoes over those sent, 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Server-counted over client-sent messages, 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<f64>,
    /// The fanout scenario's deliveries (the merged result has them per topic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fanout: Option<FanoutTier>,
    /// How dropped connections came back (`spec.reconnect`, `spec.disruptions`), over all
    /// of the tier's windows (the merged result has them per disruption).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconnect: Option<ReconnectTier>,
}

/// A tier's reconnect figures, as `kubectl get lt -o yaml` shows them: what a reader asks
/// first (the attempts by reason and the handshakes are in the merged result; status stays
/// within etcd's request limit at the largest spec).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ReconnectTier {
    /// Connections dropped in the measured phase.
    pub dropped: u64,
    /// Of those, not back by the tier's end (the others came back).
    pub never_back: u64,
    /// The attempts' peak rate: the busiest 100 ms's, per second.
    pub peak_attempts_per_second: u64,
    /// The managed server's replicas' admissions at their peak, the busiest 100 ms's per
    /// second, over the disruptions' windows (read from the replicas every 100 ms while the
    /// operator killed or restarted them): what the attempts met. Unset when not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_server_accepts_per_second: Option<u64>,
    /// 99th percentile of the returned connections' time down (drop to return), ms; unset
    /// when none returned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downtime_p99: Option<f64>,
    /// From a disruption to the last of its connections back, ms, the longest over the
    /// disruptions whose connections all came back; unset when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_back_after: Option<f64>,
    /// A fanout's deliveries missed by subscribers while they were dropped (gaps between
    /// what they received before and after), over the disruptions; unset in other scenarios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gaps_of_dropped: Option<u64>,
    /// A fanout's gaps no drop explains (subscribers' before any drop of theirs): what the server lost
    /// that no disruption explains; unset in other scenarios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gaps_of_undropped: Option<u64>,
    /// A fanout's deliveries its subscribers read back, resumed, that were published while they
    /// were dropped (what the server replayed: `conversation.resume`); unset when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<u64>,
}

/// A fanout tier's deliveries, as `kubectl get lt -o yaml` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct FanoutTier {
    /// Distinct deliveries per second, over subscribers.
    pub deliveries_per_second: f64,
    /// Delivered over expected (each topic's publishes times its subscribers), 0..1; unset
    /// when nothing was expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completeness: Option<f64>,
    /// Expected deliveries never received.
    pub gaps: u64,
    /// Deliveries received again.
    #[serde(skip_serializing_if = "is_zero")]
    pub duplicates: u64,
    /// Deliveries received after a later one of their topic.
    #[serde(skip_serializing_if = "is_zero")]
    pub out_of_order: u64,
    /// Median delivery latency from the intended publish instant, ms; unset when no delivery
    /// was timed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    /// 99th percentile of the same, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ThresholdResult {
    /// As written in the spec.
    pub threshold: String,
    /// The worst tier's figure in the threshold's unit (seconds, fraction, per second); unset
    /// when never measured (which fails).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<f64>,
    pub pass: bool,
    /// Why a check has no figure: `not measured: 0 pings were sent` (at most 64 bytes, the
    /// merged result has it whole); unset when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Verdict {
    Pass,
    Fail,
}

impl Verdict {
    /// As status and the report spell it (also the `ThresholdsPassed` condition's reason).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "Pass",
            Verdict::Fail => "Fail",
        }
    }
}
