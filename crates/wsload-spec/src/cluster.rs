//! The parts of a LoadTest only a cluster reads: where the pods run, how the load-generator
//! pods are built and tuned, and the operator's lifecycle policy (deadlines, failure, cleanup).
//! `wsload run` accepts and ignores them, so one file serves both ways of running a test.

use crate::env_var::EnvVar;
use crate::units::Dur;
use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The load generator's image when the spec names none: the one released with this build.
pub const DEFAULT_LOADGEN_IMAGE: &str = concat!("wsload/loadgen:", env!("CARGO_PKG_VERSION"));

/// Where a pod may be scheduled, exactly as in a pod spec.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    /// Labels a node must carry (the pod's `nodeSelector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub node_selector: BTreeMap<String, String>,
    /// The pod's affinity; wsload adds its own anti-affinity terms (`spread`,
    /// `separateFromServer`) beside the ones given here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Taints the pod tolerates (e.g. nodes dedicated to load generation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub tolerations: Vec<Toleration>,
}

impl Placement {
    pub fn is_empty(&self) -> bool {
        *self == Placement::default()
    }
}

/// When the kubelet pulls the image (the container's `imagePullPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// How the shard pods are spread over nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Spread {
    /// At most one shard per node (required pod anti-affinity on `kubernetes.io/hostname`):
    /// shards on one node would share its CPU, ports and network and measure each other.
    #[default]
    OnePerNode,
    /// One per node while nodes last, then doubled up (preferred anti-affinity).
    Preferred,
    /// No rule: the scheduler decides.
    None,
}

/// The load-generator (shard) pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadgenSpec {
    /// Image running `wsload shard`; defaults to the release matching the operator.
    #[serde(default = "default_loadgen_image")]
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never`; unset, Kubernetes' default for the tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::cel::null_is_unset)]
    pub image_pull_policy: Option<PullPolicy>,
    /// CPU and memory of each shard's container. A shard uses every core it is given (one
    /// worker thread per core); give it whole cores and equal requests and limits, so its
    /// figures are not those of a throttled process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Where shards may run: `nodeSelector`, `affinity`, `tolerations`.
    #[serde(default, skip_serializing_if = "Placement::is_empty")]
    pub placement: Placement,
    /// `onePerNode` (default), `preferred` or `none`.
    #[serde(default)]
    pub spread: Spread,
    /// Keep shards off the node of the test's managed server (required anti-affinity), so
    /// client and server do not share CPUs.
    #[serde(default = "default_true")]
    pub separate_from_server: bool,
    /// Namespaced sysctls set through the pod's security context, e.g.
    /// `net.ipv4.ip_local_port_range: "1024 65535"`. The kubelet allows the "safe" ones by
    /// default; others must be in its `allowedUnsafeSysctls`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub sysctls: BTreeMap<String, String>,
    /// Node-level tuning by a privileged init container; off unless given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<Tuning>,
    /// Extra environment of the shard container (e.g. the variable a `fromEnv` secret names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub env: Vec<EnvVar>,
    /// Service account of the shard pods (a shard needs no API access; for image pull secrets
    /// or policies attached to an account).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

impl Default for LoadgenSpec {
    fn default() -> Self {
        LoadgenSpec {
            image: default_loadgen_image(),
            image_pull_policy: None,
            resources: None,
            placement: Placement::default(),
            spread: Spread::default(),
            separate_from_server: true,
            sysctls: BTreeMap::new(),
            tuning: None,
            env: Vec::new(),
            service_account_name: None,
        }
    }
}

fn default_loadgen_image() -> String {
    DEFAULT_LOADGEN_IMAGE.to_string()
}
fn default_true() -> bool {
    true
}

/// Opt-in tuning: a privileged init container runs `sysctl -w` for each entry before the shard
/// starts. For sysctls the kubelet will not set through `loadgen.sysctls`: namespaced ones it does
/// not allow (`net.core.somaxconn`, `net.ipv4.tcp_tw_reuse` are unsafe unless listed in its
/// `allowedUnsafeSysctls`; they change the pod's own network namespace only) and node-wide ones
/// (`fs.nr_open`). Needs a namespace that admits privileged pods.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tuning {
    /// `name: value` pairs, e.g. `net.core.somaxconn: "65535"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub sysctls: BTreeMap<String, String>,
}

/// How the operator runs the test: deadlines per phase, the start barrier, what a failed
/// shard means and what is left behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunPolicy {
    /// Time allowed in each phase before the test fails.
    #[serde(default)]
    pub deadlines: Deadlines,
    /// Once every shard is ready, load starts this long after the operator's decision: the
    /// time to tell every shard when (`startAt`), with margin.
    #[serde(default = "default_start_delay")]
    pub start_delay: Dur,
    /// `fail` (default): a shard that dies fails the test. `continue`: the others finish and
    /// the result is marked partial (`status.missingShards`).
    #[serde(default)]
    pub shard_failure: ShardFailurePolicy,
    /// `delete` (default): the pods go when the test ends (the LoadTest, its status and the
    /// results ConfigMap stay). `keep`: the pods stay, for their logs.
    #[serde(default)]
    pub cleanup: Cleanup,
    /// Delete the whole LoadTest (and so its children) this long after it finished; unset,
    /// it stays until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("nullable" = true))]
    pub ttl_after_finished: Option<Dur>,
}

impl Default for RunPolicy {
    fn default() -> Self {
        RunPolicy {
            deadlines: Deadlines::default(),
            start_delay: default_start_delay(),
            shard_failure: ShardFailurePolicy::default(),
            cleanup: Cleanup::default(),
            ttl_after_finished: None,
        }
    }
}

fn default_start_delay() -> Dur {
    Dur::secs(3)
}

/// Deadlines of the operator's phases (see docs/operator.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deadlines {
    /// Pods scheduled (Pending and Starting each allow `scheduling` + `ready`).
    #[serde(default = "default_scheduling")]
    pub scheduling: Dur,
    /// Pods ready once scheduled (image pull, start, `/readyz`).
    #[serde(default = "default_ready")]
    pub ready: Dur,
    /// Running: from the start barrier until every shard is done. Unset: the spec's expected
    /// duration x 1.5 + 2m; a connectionLimit search, whose length is not known, has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("nullable" = true))]
    pub run: Option<Dur>,
    /// Collecting: every shard's result fetched and stored.
    #[serde(default = "default_collect")]
    pub collect: Dur,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            scheduling: default_scheduling(),
            ready: default_ready(),
            run: None,
            collect: default_collect(),
        }
    }
}

fn default_scheduling() -> Dur {
    Dur::secs(300)
}
fn default_ready() -> Dur {
    Dur::secs(300)
}
fn default_collect() -> Dur {
    Dur::secs(120)
}

/// What a shard that dies (crash, OOM kill, eviction, node loss) does to the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ShardFailurePolicy {
    /// The test fails; what the other shards measured is kept.
    #[default]
    Fail,
    /// The others finish; figures cover the surviving shards and say so.
    Continue,
}

/// What happens to the pods when the test ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Cleanup {
    /// Delete the server and shard pods.
    #[default]
    Delete,
    /// Leave them (for `kubectl logs`); they are deleted with the LoadTest.
    Keep,
}
