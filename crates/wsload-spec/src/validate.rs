//! Checks a spec beyond what its types enforce. Every problem is reported (not just the
//! first), each with the field's path and what to write instead.

use crate::cel;
use crate::connection_limits::ConnectionLimits;
use crate::scenario::{Cells, Length, Measures, Motion};
use crate::spec::*;
use crate::target_url::TargetUrl;
use std::fmt;

mod conversation;
mod fanout;
mod negotiation;
mod reconnect;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path from the document root, e.g. `spec.target.url`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

pub(crate) struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: format!("spec.{}", field.into()),
            message: message.into(),
        });
    }
}

/// The largest tier (or limit probe) of the spec.
pub fn peak_connections(spec: &LoadTestSpec) -> u32 {
    match spec.scenario.profile().cells {
        Cells::Search => spec.limit.max,
        _ => spec.connections.iter().copied().max().unwrap_or(0),
    }
}

pub fn validate(spec: &LoadTestSpec) -> Result<(), Vec<FieldError>> {
    let mut e = Errors(Vec::new());
    target(spec, &mut e);
    auth(spec, &mut e);
    negotiation::check(spec, &mut e);
    shape(spec, &mut e);
    thresholds(spec, &mut e);
    sizes(spec, &mut e);
    cluster(spec, &mut e);
    conversation::conversation(spec, &mut e);
    fanout::fanout(spec, &mut e);
    reconnect::check(spec, &mut e);
    if e.0.is_empty() { Ok(()) } else { Err(e.0) }
}

/// A LoadTest's name as a cluster needs it: its children are `<name>-server` (a Service, so a
/// DNS label of at most 63 characters) and `<name>-shard-<i>`, and it is a label value.
pub fn name(name: &str) -> Option<FieldError> {
    let ok = name.len() <= cel::MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (!ok).then(|| FieldError {
        field: "metadata.name".into(),
        message: format!(
            "{name:?}: must be lowercase letters, digits and '-', start with a letter and be at most {} characters (the server's Service is <name>-server)",
            cel::MAX_NAME_LEN
        ),
    })
}

/// The `maxItems` / `maxLength` / `maxProperties` the CRD declares, so that a file
/// `wsload validate` accepts is one the API server accepts.
fn sizes(spec: &LoadTestSpec, e: &mut Errors) {
    let mut most = |field: &str, n: usize, max: usize, what: &str| {
        if n > max {
            e.add(field, format!("{n} {what}; at most {max}"));
        }
    };
    most(
        "connections",
        spec.connections.len(),
        cel::MAX_TIERS,
        "tiers",
    );
    most("sizes", spec.sizes.len(), cel::MAX_SIZES, "sizes");
    most("formats", spec.formats.len(), 8, "formats");
    most(
        "thresholds",
        spec.thresholds.len(),
        cel::MAX_THRESHOLDS,
        "thresholds",
    );
    for (i, t) in spec.thresholds.iter().enumerate() {
        most(
            &format!("thresholds[{i}]"),
            t.text.len(),
            cel::MAX_THRESHOLD_LEN,
            "characters",
        );
    }
    if let Some(rate) = &spec.rate {
        most("rate.stages", rate.stages.len(), cel::MAX_STAGES, "stages");
    }
    most(
        "sources.addresses",
        spec.sources.addresses.len(),
        cel::MAX_ADDRESSES,
        "addresses",
    );
    if let Some(url) = &spec.target.url {
        most("target.url", url.len(), cel::MAX_URL_LEN, "characters");
    }
    if let Some(auth) = &spec.auth {
        most("auth.headers", auth.headers.len(), 64, "headers");
    }
    if let Some(s) = &spec.target.server {
        most("target.server.image", s.image.len(), 1024, "characters");
        most("target.server.path", s.path.len(), 1024, "characters");
        most("target.server.args", s.args.len(), 64, "arguments");
        most("target.server.env", s.env.len(), 128, "variables");
        placement_sizes("target.server.placement", &s.placement, &mut most);
    }
    let lg = &spec.loadgen;
    most("loadgen.image", lg.image.len(), 1024, "characters");
    most("loadgen.env", lg.env.len(), 128, "variables");
    most("loadgen.sysctls", lg.sysctls.len(), 64, "sysctls");
    if let Some(t) = &lg.tuning {
        most("loadgen.tuning.sysctls", t.sysctls.len(), 64, "sysctls");
    }
    placement_sizes("loadgen.placement", &lg.placement, &mut most);
}

fn placement_sizes(
    field: &str,
    p: &crate::cluster::Placement,
    most: &mut impl FnMut(&str, usize, usize, &str),
) {
    most(
        &format!("{field}.nodeSelector"),
        p.node_selector.len(),
        64,
        "labels",
    );
    most(
        &format!("{field}.tolerations"),
        p.tolerations.len(),
        64,
        "tolerations",
    );
}

/// The cluster-only fields: read by the operator, so checked where `wsload validate` sees
/// them too.
fn cluster(spec: &LoadTestSpec, e: &mut Errors) {
    let lg = &spec.loadgen;
    if lg.image.trim().is_empty() {
        e.add("loadgen.image", "must not be empty");
    }
    let d = &spec.run.deadlines;
    for (field, dur) in [
        ("run.deadlines.scheduling", Some(d.scheduling)),
        ("run.deadlines.ready", Some(d.ready)),
        ("run.deadlines.run", d.run),
        ("run.deadlines.collect", Some(d.collect)),
    ] {
        if dur.is_some_and(|d| d.get().is_zero()) {
            e.add(field, "must be above zero");
        }
    }
    for (field, sysctls) in [
        ("loadgen.sysctls", &lg.sysctls),
        (
            "loadgen.tuning.sysctls",
            &lg.tuning
                .as_ref()
                .map(|t| t.sysctls.clone())
                .unwrap_or_default(),
        ),
    ] {
        for name in sysctls.keys() {
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
            if !ok {
                e.add(
                    format!("{field}.{name}"),
                    "is not a sysctl name (e.g. net.ipv4.tcp_fin_timeout)",
                );
            }
        }
    }
}

fn target(spec: &LoadTestSpec, e: &mut Errors) {
    match (&spec.target.url, &spec.target.server) {
        (Some(_), Some(_)) => e.add(
            "target",
            "set either url (an external server) or server (a managed one), not both",
        ),
        (None, None) => e.add(
            "target",
            "set url (e.g. ws://host:8080/) or server: {} for the reference server",
        ),
        (Some(url), None) => {
            if let Err(err) = TargetUrl::parse(url) {
                e.add("target.url", err.to_string());
            }
        }
        (None, Some(server)) => {
            if server.image.trim().is_empty() {
                e.add("target.server.image", "must not be empty");
            }
            if !server.path.starts_with('/') {
                e.add(
                    "target.server.path",
                    format!("{:?} must start with '/'", server.path),
                );
            }
            if server.replicas == 0 {
                e.add(
                    "target.server.replicas",
                    "must be at least 1 (the number of server processes or pods)",
                );
            } else if server.replicas > cel::MAX_SERVER_REPLICAS {
                e.add(
                    "target.server.replicas",
                    format!(
                        "{} replicas; at most {}",
                        server.replicas,
                        cel::MAX_SERVER_REPLICAS
                    ),
                );
            }
            if server.port == server.metrics_port {
                e.add("target.server.metricsPort", "must differ from port");
            }
            let wse = server.profile == ServerProfile::Wse;
            if wse != (spec.protocol == Protocol::Wse) {
                e.add(
                    "protocol",
                    format!(
                        "protocol {:?} does not match the managed server's profile {:?}; set both to wse, or neither",
                        spec.protocol.as_str(),
                        server.profile.as_str()
                    ),
                );
            }
        }
    }
    if let Some(tls) = &spec.tls
        && spec
            .target
            .url
            .as_deref()
            .is_some_and(|u| u.starts_with("ws://"))
        && (tls.ca_file.is_some() || tls.insecure_skip_verify)
    {
        e.add("tls", "TLS settings need a wss:// target url");
    }
}

fn secret(field: &str, s: &SecretValue, e: &mut Errors) {
    let set = [
        s.value.is_some(),
        s.from_env.is_some(),
        s.secret_ref.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if set != 1 {
        e.add(field, "set exactly one of value, fromEnv or secretRef");
    }
}

fn auth(spec: &LoadTestSpec, e: &mut Errors) {
    let Some(auth) = &spec.auth else { return };
    match (&auth.jwt, &auth.token) {
        (Some(_), Some(_)) => e.add(
            "auth",
            "set either jwt (signed per connection) or token (sent as is), not both",
        ),
        (Some(jwt), None) => {
            secret("auth.jwt.secret", &jwt.secret, e);
            if jwt.ttl.get().is_zero() {
                e.add("auth.jwt.ttl", "must be above zero");
            }
        }
        (None, Some(token)) => secret("auth.token", token, e),
        (None, None) => {}
    }
    for name in auth.headers.keys() {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            e.add(
                format!("auth.headers.{name}"),
                "is not a valid HTTP header name",
            );
        }
    }
}

/// What the run is made of: shards, tiers, messages, pacing, the limit search, and whether one
/// shard's share fits a process. Errors come in this order.
fn shape(spec: &LoadTestSpec, e: &mut Errors) {
    shard_count(spec, e);
    tiers(spec, e);
    messages(spec, e);
    rate(spec, e);
    limit(spec, e);
    shard_share(spec, e);
}

fn shard_count(spec: &LoadTestSpec, e: &mut Errors) {
    if spec.shards == 0 {
        e.add("shards", "must be at least 1");
    } else if spec.shards > cel::MAX_SHARDS {
        e.add(
            "shards",
            format!(
                "{} shards; at most {} (status keeps one entry per shard)",
                spec.shards,
                cel::MAX_SHARDS
            ),
        );
    }
}

/// The connection counts: every shard needs one connection of every tier.
fn tiers(spec: &LoadTestSpec, e: &mut Errors) {
    if spec.scenario.profile().cells == Cells::Search {
        return;
    }
    if spec.connections.is_empty() {
        e.add(
            "connections",
            "list at least one connection count, e.g. [100]",
        );
    }
    for (i, &n) in spec.connections.iter().enumerate() {
        if n == 0 {
            e.add(format!("connections[{i}]"), "must be at least 1");
        } else if n > cel::MAX_CONNECTIONS_PER_TIER {
            e.add(
                format!("connections[{i}]"),
                format!(
                    "{n} connections; at most {} in one tier",
                    cel::MAX_CONNECTIONS_PER_TIER
                ),
            );
        } else if n < spec.shards {
            e.add(
                format!("connections[{i}]"),
                format!(
                    "{n} connections cannot be split over {} shards",
                    spec.shards
                ),
            );
        }
    }
}

/// What each connection sends and waits for: the duration, the message, the window, connect
/// batches, pings and the payload sizes.
fn messages(spec: &LoadTestSpec, e: &mut Errors) {
    let profile = spec.scenario.profile();
    let timed = profile.length.is_timed();
    let staged = spec.rate.as_ref().is_some_and(|r| !r.stages.is_empty());
    if timed && !staged && spec.duration.get().is_zero() {
        e.add("duration", "must be above zero for this scenario");
    }
    if spec.message.size == 0 {
        e.add("message.size", "must be at least 1 byte");
    }
    if spec.message.compression_level > 9 {
        e.add("message.compressionLevel", "must be 0-9");
    }
    if spec.window == 0 {
        e.add("window", "must be at least 1");
    }
    if spec.connect.batch_size == 0 {
        e.add("connect.batchSize", "must be at least 1");
    }
    if spec.connect.timeout.get().is_zero() {
        e.add("connect.timeout", "must be above zero");
    }
    if spec.write_timeout.get().is_zero() {
        e.add("writeTimeout", "must be above zero");
    }
    connection_limits(&spec.connect.limits, e);
    if spec.ping.timeout.get().is_zero() {
        e.add("ping.timeout", "must be above zero");
    }
    if profile.motion == Motion::Pings && spec.ping.count == 0 {
        e.add("ping.count", "must be at least 1");
    }
    if spec.protocol == Protocol::Wse
        && spec.ping.kind == PingKind::App
        && spec.message.format == Format::Binary
    {
        e.add(
            "message.format",
            "the wse protocol has no raw binary messages; use json, msgpack or zlib",
        );
    }
    for (i, &s) in spec.sizes.iter().enumerate() {
        if s == 0 {
            e.add(format!("sizes[{i}]"), "must be at least 1 byte");
        }
    }
}

/// `connect.limits`: each within its bounds, and a frame no bigger than a message.
fn connection_limits(l: &ConnectionLimits, e: &mut Errors) {
    let (min, max) = (cel::MIN_LIMIT_BYTES, cel::MAX_LIMIT_BYTES);
    for (field, n) in [
        ("maxMessageBytes", l.max_message_bytes),
        ("maxFrameBytes", l.max_frame_bytes),
        ("maxPendingWriteBytes", l.max_pending_write_bytes),
    ] {
        if !(min..=max).contains(&n) {
            e.add(
                format!("connect.limits.{field}"),
                format!("{n} bytes: must be {min} (1 KiB) to {max} (1 GiB)"),
            );
        }
    }
    if l.max_frame_bytes > l.max_message_bytes {
        e.add(
            "connect.limits.maxFrameBytes",
            format!(
                "{} bytes: {} ({})",
                l.max_frame_bytes,
                cel::MSG_FRAME_OVER_MESSAGE,
                l.max_message_bytes
            ),
        );
    }
}

/// The pacing: a rate or stages, and constantRate needs one of them.
fn rate(spec: &LoadTestSpec, e: &mut Errors) {
    if let Some(rate) = &spec.rate {
        if rate
            .messages_per_second
            .is_some_and(|r| !(r > 0.0 && r.is_finite()))
        {
            e.add("rate.messagesPerSecond", "must be a positive number");
        }
        for (i, st) in rate.stages.iter().enumerate() {
            if st.duration.get().is_zero() {
                e.add(format!("rate.stages[{i}].duration"), "must be above zero");
            }
            if !(st.target >= 0.0 && st.target.is_finite()) {
                e.add(
                    format!("rate.stages[{i}].target"),
                    "must be zero or more messages per second",
                );
            }
        }
    }
    if spec.scenario.profile().length == (Length::Rate { required: true }) {
        let ok = spec
            .rate
            .as_ref()
            .is_some_and(|r| r.messages_per_second.is_some() || !r.stages.is_empty());
        if !ok {
            e.add(
                "rate",
                format!(
                    "{} needs rate.messagesPerSecond or rate.stages",
                    spec.scenario.as_str()
                ),
            );
        }
    }
}

/// connectionLimit's search: where it starts, where it stops, and how each probe is held.
fn limit(spec: &LoadTestSpec, e: &mut Errors) {
    if spec.scenario.profile().cells != Cells::Search {
        return;
    }
    let l = &spec.limit;
    if l.start == 0 {
        e.add("limit.start", "must be at least 1");
    }
    if l.max < l.start {
        e.add(
            "limit.max",
            format!("must be at least limit.start ({})", l.start),
        );
    }
    if l.max > cel::MAX_CONNECTIONS_PER_TIER {
        e.add(
            "limit.max",
            format!(
                "{} connections; at most {}",
                l.max,
                cel::MAX_CONNECTIONS_PER_TIER
            ),
        );
    }
    if l.resolution == 0 {
        e.add("limit.resolution", "must be at least 1");
    }
    if l.hold.get().is_zero() {
        e.add("limit.hold", "must be above zero");
    }
}

/// One shard's share of the largest tier: what one process may hold, and what its source
/// addresses can carry.
fn shard_share(spec: &LoadTestSpec, e: &mut Errors) {
    // A sane bound on one shard's share (see cel::MAX_SHARD_SHARE), not any host's
    // open-file limit: a shard checks that limit itself when it starts.
    let shards = spec.shards.max(1);
    let peak = peak_connections(spec);
    let per_shard = peak.div_ceil(shards);
    let max = cel::MAX_SHARD_SHARE;
    if per_shard > max {
        let need = peak.div_ceil(max);
        let what = if spec.scenario.profile().cells == Cells::Search {
            "limit.max"
        } else {
            "the largest tier"
        };
        e.add(
            "shards",
            format!(
                "{what} ({peak} connections) over {shards} shard(s) is {per_shard} per shard, above the {max} one process may hold; use shards: {need} or more"
            ),
        );
    }
    if !spec.sources.addresses.is_empty() {
        let capacity = spec.sources.addresses.len() as u64 * u64::from(spec.sources.per_address);
        if u64::from(per_shard) > capacity {
            e.add(
                "sources.addresses",
                format!(
                    "{} address(es) x {} connections each cannot carry {per_shard} connections per shard; add addresses",
                    spec.sources.addresses.len(),
                    spec.sources.per_address
                ),
            );
        }
    }
    if spec.sources.per_address == 0 {
        e.add("sources.perAddress", "must be at least 1");
    }
}

fn thresholds(spec: &LoadTestSpec, e: &mut Errors) {
    use crate::threshold::{Latency, Metric};
    let s = spec.scenario;
    let measures = s.profile().measures;
    for (i, t) in spec.thresholds.iter().enumerate() {
        let ok = match t.metric {
            Metric::Latency(Latency::Connect, _) | Metric::Errors | Metric::ConnectRate => true,
            Metric::Latency(Latency::Fanout, _)
            | Metric::Gaps
            | Metric::Completeness
            | Metric::Deliveries => measures == Measures::Deliveries,
            Metric::Latency(_, _) => measures.times_answers(),
            Metric::Throughput | Metric::ReceivedRate => measures.moves_messages(),
            Metric::Loss => measures.counts_loss(),
            Metric::Survival => measures == Measures::RoundTrips { survival: true },
            Metric::Delivery => spec.server_metrics.is_some() || spec.target.server.is_some(),
            Metric::Limit => measures == Measures::Limit,
        };
        if !ok {
            let why = match t.metric {
                Metric::Delivery => "delivery needs the server's counter: set serverMetrics (or use a managed server)".to_string(),
                _ => format!("the {} scenario does not measure {}", s.as_str(), t.metric),
            };
            e.add(format!("thresholds[{i}]"), format!("{:?}: {why}", t.text));
        }
    }
}
