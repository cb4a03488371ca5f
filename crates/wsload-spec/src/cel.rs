//! What the API server checks beyond types: the CRD schema's `x-kubernetes-validations` (CEL)
//! rules and the value schemas of the string-typed fields. `validate.rs` checks the same
//! things (and more) in Rust with the same messages, so `wsload validate` and `kubectl apply`
//! agree; `operator/tests/crd_validation.rs` proves these rules against a real API server.
//!
//! Rules stay cheap enough for the API server's cost estimate: every list or string a rule
//! walks has a `maxItems` / `maxLength` (the limits below, also enforced by `validate.rs`).
//!
//! The value types (`Dur`, `Percent`, `Threshold`) get their `JsonSchema` here, beside the
//! rules it carries, so they stay below this module and know nothing of the API server.

use crate::threshold::{Metric, Threshold};
use crate::units::{Dur, Percent};
use schemars::Schema;
use serde_json::{Value, json};

/// Longest threshold text.
pub const MAX_THRESHOLD_LEN: usize = 128;
/// Most thresholds in one spec.
pub const MAX_THRESHOLDS: usize = 32;
/// Most connection tiers.
pub const MAX_TIERS: usize = 64;
/// Most payloadMatrix sizes.
pub const MAX_SIZES: usize = 32;
/// Most ramp stages.
pub const MAX_STAGES: usize = 100;
/// Most source addresses.
pub const MAX_ADDRESSES: usize = 256;
/// Longest target URL.
pub const MAX_URL_LEN: usize = 2048;
/// Longest duration or percentage text.
pub const MAX_UNIT_LEN: usize = 64;
/// Longest LoadTest name: the managed server's Service is `<name>-server`, a DNS label of at
/// most 63 characters.
pub const MAX_NAME_LEN: usize = 56;

// Size bounds. They protect the system (the API server, etcd, the operator, integer
// arithmetic) from typos like an extra zero; they do not describe any one machine. Whether a
// shard's host can open its share of the connections is the shard's own check at run time
// (its open-file limit), not the spec's.

/// Most shards. `status.shards` holds one entry per shard (~200 bytes of JSON with a long
/// name), and the whole LoadTest must fit one etcd object (1.5 MiB by default): 5,000 entries
/// take about 1 MB and leave room for the rest. It is also the node count Kubernetes supports
/// in one cluster, and by default (`loadgen.spread: onePerNode`) every shard needs its own node.
pub const MAX_SHARDS: u32 = 5_000;
/// Most connections of one tier (or `limit.max`), over all shards: ten times the most one
/// shard may hold, and far below `u32::MAX` (4.29e9) so that no sum of shares overflows.
pub const MAX_CONNECTIONS_PER_TIER: u32 = 100_000_000;
/// Most connections one shard's share (the largest tier, or `limit.max`, over `shards`, rounded
/// up) may be. One process needs a file descriptor per connection: Linux's `fs.nr_open` (the
/// ceiling of any process's open-file limit) defaults to 1,048,576 and can be raised to 2^30,
/// and ten million sockets already need tens of GB of kernel memory. A share above this is a
/// typo or needs more shards, whatever the node.
pub const MAX_SHARD_SHARE: u32 = 10_000_000;
/// Most managed-server replicas (`target.server.replicas`): pods the operator creates behind
/// one Service, or local processes; far more than a test needs to saturate any client.
pub const MAX_SERVER_REPLICAS: u32 = 1_000;

/// Fewest bytes a connection limit (`connect.limits.*`) may be: a control frame and a
/// handshake's worth of data fit.
pub const MIN_LIMIT_BYTES: u32 = 1024;
/// Most bytes a connection limit may be (1 GiB): beyond it one connection could hold more
/// than a load generator's node, and sizes stay far from `u32`'s end.
pub const MAX_LIMIT_BYTES: u32 = 1 << 30;
/// `connect.limits.maxFrameBytes` above `maxMessageBytes`.
pub const MSG_FRAME_OVER_MESSAGE: &str =
    "must be at most maxMessageBytes: a frame is at most one message";

/// Every metric a threshold may name, as in the error messages of both checkers.
pub const KNOWN_METRICS: &str = Metric::NAMES;

fn push(schema: &mut Schema, rules: Vec<Value>) {
    let obj = schema.ensure_object();
    match obj.get_mut("x-kubernetes-validations") {
        Some(Value::Array(existing)) => existing.extend(rules),
        _ => {
            obj.insert("x-kubernetes-validations".into(), Value::Array(rules));
        }
    }
}

fn rule(rule: &str, message: &str) -> Value {
    json!({ "rule": rule, "message": message })
}

/// A rule whose message is computed (it quotes the offending values).
fn rule_expr(rule: &str, message_expression: &str) -> Value {
    json!({ "rule": rule, "messageExpression": message_expression })
}

/// A rule on an object that reports the error at one of its fields.
fn at(mut r: Value, field_path: &str) -> Value {
    if let Value::Object(o) = &mut r {
        o.insert("fieldPath".into(), field_path.into());
        o.insert("reason".into(), "FieldValueInvalid".into());
    }
    r
}

/// What `Dur::parse` takes: a number of seconds, or humantime units. A `pattern`, not a CEL
/// rule: the API server cannot bound the cost of a rule on an int-or-string value.
pub const DURATION_PATTERN: &str = r"^ *[0-9]+(\.[0-9]+)? *[a-zA-Zµ]*( *[0-9]+ *[a-zA-Zµ]+)* *$";
/// What `Percent::parse` takes.
pub const PERCENT_PATTERN: &str = r"^ *[0-9]+(\.[0-9]+)? *%? *$";

/// Duration text. Whole numbers of seconds may be written bare; fractions must be strings,
/// since the API server's int-or-string type has no room for them.
pub fn duration_schema() -> Schema {
    schemars::json_schema!({
        "description": "A duration: 500ms, 10s, 2m, 1h 30m, or a whole number of seconds.",
        "x-kubernetes-int-or-string": true,
        // Without this kube marks every int-or-string field nullable, and a stored `null`
        // (no default applied) would not deserialize: an operator could not read the object.
        // `Option<Dur>` fields say `nullable` themselves.
        "nullable": false,
        "minimum": 0,
        "maxLength": MAX_UNIT_LEN,
        "pattern": DURATION_PATTERN,
    })
}

/// A duration that must be above zero (a timeout): its text must hold a digit other than 0,
/// and a bare number must be 1 or more. A second `pattern` (under `allOf`), not a CEL rule:
/// the API server cannot bound a rule's cost on an int-or-string value. `validate.rs` says
/// `must be above zero` for the same fields.
pub fn positive_duration(schema: &mut Schema) {
    let obj = schema.ensure_object();
    obj.insert("minimum".into(), json!(1));
    obj.insert("allOf".into(), json!([{ "pattern": NONZERO_PATTERN }]));
}

/// What every duration above zero contains.
pub const NONZERO_PATTERN: &str = "[1-9]";

/// Percentage text: `5%`, or a fraction as a string (`"0.05"`); bare 0 and 1 are whole
/// numbers and pass.
pub fn percent_schema() -> Schema {
    schemars::json_schema!({
        "description": "A percentage: 5%, or a fraction as a string, \"0.05\".",
        "x-kubernetes-int-or-string": true,
        "nullable": false,
        "minimum": 0,
        "maximum": 1,
        "maxLength": MAX_UNIT_LEN,
        "pattern": PERCENT_PATTERN,
    })
}

/// A comparison: `<`, `<=`, `>`, `>=` or `==` (CEL's RE2 syntax, as the rules below quote it).
const COMPARISON_RE: &str = "[<>]|==";
/// A regular expression matching a known metric followed by a comparison.
const METRIC_RE: &str = r"^ *((rtt|rtt_raw|connect|fanout)\\.(p[0-9]{1,2}(\\.[0-9]+)?|min|mean|avg|max)|throughput|received_rate|errors|loss|survival|delivery|connect_rate|limit|gaps|completeness|deliveries) *([<>]|==)";
/// A latency's value: a number and a time unit after the comparison.
const LATENCY_RE: &str = r"^ *(rtt|rtt_raw|connect|fanout)\\.";
const TIME_VALUE_RE: &str = r"([<>]=?|==) *[0-9]+(\\.[0-9]+)? *(us|µs|ms|s) *$";

pub fn threshold_schema() -> Schema {
    schemars::json_schema!({
        "description": "METRIC OP VALUE, e.g. \"rtt.p99 < 5ms\", \"errors < 0.1%\", \"throughput > 1M msg/s\", \"gaps == 0\".",
        "type": "string",
        "maxLength": MAX_THRESHOLD_LEN,
        "x-kubernetes-validations": [
            rule(
                &format!("self.matches('{COMPARISON_RE}')"),
                "has no comparison; write METRIC < VALUE, e.g. \"rtt.p99 < 5ms\"",
            ),
            rule_expr(
                &format!("!self.matches('{COMPARISON_RE}') || self.matches('{METRIC_RE}')"),
                &format!("'unknown metric in \"' + self + '\"; known: {KNOWN_METRICS}'"),
            ),
            rule_expr(
                &format!(
                    "!self.matches('{COMPARISON_RE}') || !self.matches('{LATENCY_RE}') || self.matches('{TIME_VALUE_RE}')"
                ),
                r#"'in "' + self + '": a latency needs a time unit: us, ms or s'"#,
            ),
        ],
    })
}

// The API server sees these as strings (or whole numbers).
impl schemars::JsonSchema for Dur {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        duration_schema()
    }
}

impl schemars::JsonSchema for Percent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Percent".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        percent_schema()
    }
}

impl schemars::JsonSchema for Threshold {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Threshold".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        threshold_schema()
    }
}

/// For `Option<Enum>` fields: schemars admits `null` (in `type` and among the values), and the
/// API server then refuses a `null` as an unsupported value even when the field is
/// `nullable`. Not nullable, a `null` is pruned instead: it means unset, as in Rust.
pub fn null_is_unset(schema: &mut Schema) {
    if let Some(Value::Array(values)) = schema.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            schema.insert("type".into(), only);
        }
    }
    schema.remove("nullable");
}

/// `spec`: rules across fields. Defaults are applied before validation, so defaulted fields
/// (`shards`, `connections`, `limit`, `sources.perAddress`) are present; `has` guards the
/// rest. Messages are constant: the API server cannot bound the cost of a message that
/// formats numbers (`string(int)`), so they name the fields to compare instead.
pub fn spec_rules(schema: &mut Schema) {
    let max = MAX_SHARD_SHARE;
    // The largest tier, or the largest limit probe (connectionLimit).
    let peak = "(self.scenario == 'connectionLimit' ? self.limit.max : self.connections.max())";
    let per_shard = format!("(({peak} + self.shards - 1) / self.shards)");
    let addresses = "size(self.sources.addresses)";
    push(
        schema,
        vec![
            at(
                rule(
                    "self.scenario == 'connectionLimit' || size(self.connections) > 0",
                    "list at least one connection count, e.g. [100]",
                ),
                ".connections",
            ),
            at(
                rule(
                    "self.scenario == 'connectionLimit' || self.connections.all(n, n >= self.shards)",
                    MSG_SPLIT,
                ),
                ".connections",
            ),
            at(
                rule(
                    &format!(
                        "self.shards < 1 || (self.scenario != 'connectionLimit' && size(self.connections) == 0) || {peak} <= {max} * self.shards"
                    ),
                    &msg_per_shard(),
                ),
                ".shards",
            ),
            at(
                rule(
                    &format!(
                        "self.shards < 1 || !has(self.sources) || !has(self.sources.addresses) || {addresses} == 0 || (self.scenario != 'connectionLimit' && size(self.connections) == 0) || {per_shard} <= {addresses} * self.sources.perAddress"
                    ),
                    MSG_SOURCES,
                ),
                ".sources.addresses",
            ),
            at(
                rule(
                    "self.scenario != 'constantRate' || (has(self.rate) && (has(self.rate.messagesPerSecond) || (has(self.rate.stages) && size(self.rate.stages) > 0)))",
                    "constantRate needs rate.messagesPerSecond or rate.stages",
                ),
                ".rate",
            ),
            at(
                rule(
                    "!has(self.target.server) || ((has(self.target.server.profile) && self.target.server.profile == 'wse') == (has(self.protocol) && self.protocol == 'wse'))",
                    MSG_PROTOCOL,
                ),
                ".protocol",
            ),
            spec_conversation_rules(),
            at(
                rule(
                    "!has(self.tls) || !has(self.target.url) || !self.target.url.startsWith('ws://') || !(has(self.tls.caFile) || (has(self.tls.insecureSkipVerify) && self.tls.insecureSkipVerify))",
                    "TLS settings need a wss:// target url",
                ),
                ".tls",
            ),
        ],
    );
}

/// The CEL form of `validate.rs`'s "N connections cannot be split over S shards".
pub const MSG_SPLIT: &str = "a tier's connections cannot be split over more shards than it has connections (every shard needs one of every tier); lower shards or raise the tier";
/// The CEL form of `validate.rs`'s sources capacity message.
pub const MSG_SOURCES: &str = "the addresses x sources.perAddress connections each cannot carry the connections per shard (the largest tier, or limit.max, over shards); add addresses";
/// The CEL form of `validate.rs`'s protocol/profile message.
pub const MSG_PROTOCOL: &str =
    "protocol does not match the managed server's profile; set both to wse, or neither";

/// The CEL form of `validate.rs`'s per-shard message.
pub fn msg_per_shard() -> String {
    let max = MAX_SHARD_SHARE;
    format!(
        "the largest tier (or limit.max) over shards is above {max} connections per shard, the most one process may hold; use shards: the largest tier / {max}, rounded up, or more"
    )
}

pub fn target_rules(schema: &mut Schema) {
    push(
        schema,
        vec![
            rule(
                "!(has(self.url) && has(self.server))",
                "set either url (an external server) or server (a managed one), not both",
            ),
            rule(
                "has(self.url) || has(self.server)",
                "set url (e.g. ws://host:8080/) or server: {} for the reference server",
            ),
        ],
    );
}

/// The grammar of `target_url` as RE2 (CEL's `matches`): host a name or `[...]`, port 1-65535
/// without leading zeros, path and query of RFC 3986 characters, each `%` starting an escape. What a regular expression
/// cannot say (an IPv6 address's form) is `url_rules`' `isIP` rule.
const URL_RE: &str = concat!(
    r"^wss?://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])",
    r"(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?",
    r"([/?]([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?$",
);
/// A host of digits and dots, which the resolver would read as an address.
const DIGITS_HOST_RE: &str = r"^wss?://[0-9.]+([:/?#]|$)";
/// A dotted quad, numbers 0-255 without leading zeros.
const IPV4_HOST_RE: &str = concat!(
    r"^wss?://((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}",
    r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])([:/?#]|$)",
);

/// The API server's form of `target_url::TargetUrl::parse`: the same URLs pass (proved on
/// `target_url::CORPUS` by `operator/tests/crd_validation.rs`).
pub fn url_rules(schema: &mut Schema) {
    let form = crate::target_url::FORM;
    let has_host = "self.matches('^wss?://[^/?#]')";
    let bracket = r"'^wss?://\\[[0-9A-Fa-f:.]+\\]'";
    let inner = "self.substring(self.indexOf('[') + 1, self.indexOf(']'))";
    push(
        schema,
        vec![
            rule_expr(
                "self.startsWith('ws://') || self.startsWith('wss://')",
                r#"'"' + self + '" must start with ws:// or wss://'"#,
            ),
            rule_expr(
                &format!("!(self.startsWith('ws://') || self.startsWith('wss://')) || {has_host}"),
                r#"'"' + self + '" has no host'"#,
            ),
            rule_expr(
                &format!("!{has_host} || self.matches(r\"{URL_RE}\")"),
                &format!(r#"'"' + self + '" is not a target URL; {form}'"#),
            ),
            rule_expr(
                &format!(
                    "!self.matches(r\"{DIGITS_HOST_RE}\") || self.matches(r\"{IPV4_HOST_RE}\")"
                ),
                &format!(
                    r#"'"' + self + '" has a host which is not an IPv4 address (four numbers 0-255 without leading zeros); {form}'"#
                ),
            ),
            rule_expr(
                &format!(
                    "!self.matches({bracket}) || (isIP({inner}) && ip({inner}).family() == 6)"
                ),
                &format!(
                    r#"'"' + self + '" has a host in brackets which is not an IPv6 address; {form}'"#
                ),
            ),
        ],
    );
}

pub fn server_rules(schema: &mut Schema) {
    push(
        schema,
        vec![at(
            rule(
                "!has(self.port) || !has(self.metricsPort) || self.port != self.metricsPort",
                "must differ from port",
            ),
            ".metricsPort",
        )],
    );
}

pub fn connection_limits_rules(schema: &mut Schema) {
    push(
        schema,
        vec![at(
            rule(
                "!has(self.maxFrameBytes) || !has(self.maxMessageBytes) || self.maxFrameBytes <= self.maxMessageBytes",
                MSG_FRAME_OVER_MESSAGE,
            ),
            ".maxFrameBytes",
        )],
    );
}

pub fn server_path_rules(schema: &mut Schema) {
    push(
        schema,
        vec![rule_expr(
            "self.startsWith('/')",
            r#"'"' + self + '" must start with \'/\''"#,
        )],
    );
}

pub fn not_blank(schema: &mut Schema) {
    push(
        schema,
        vec![rule("!self.matches('^\\\\s*$')", "must not be empty")],
    );
}

pub fn auth_rules(schema: &mut Schema) {
    push(
        schema,
        vec![rule(
            "!(has(self.jwt) && has(self.token))",
            "set either jwt (signed per connection) or token (sent as is), not both",
        )],
    );
}

pub fn secret_rules(schema: &mut Schema) {
    push(
        schema,
        vec![rule(
            "[has(self.value), has(self.fromEnv), has(self.secretRef)].filter(b, b).size() == 1",
            "set exactly one of value, fromEnv or secretRef",
        )],
    );
}

pub fn limit_rules(schema: &mut Schema) {
    push(
        schema,
        vec![at(
            rule(
                "!has(self.start) || !has(self.max) || self.max >= self.start",
                "must be at least limit.start",
            ),
            ".max",
        )],
    );
}

/// `kubectl apply` of a changed spec on a running test would change nothing the shards do
/// (they read the spec once) while status kept describing the old one: refuse it instead.
#[cfg(feature = "crd")]
pub fn immutable_once_started() -> kube::core::Rule {
    kube::core::Rule::new(
        "!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec",
    )
    .message(kube::core::Message::Expression(
        "'spec is immutable once the test has started (phase ' + oldSelf.status.phase + '); delete and re-create the LoadTest to run it again'".into(),
    ))
    .field_path(".spec")
}

/// Children are named `<name>-server`, `<name>-shard-<i>`, and the name is a label value.
#[cfg(feature = "crd")]
pub fn name_rule() -> kube::core::Rule {
    kube::core::Rule::new(format!(
        "size(self.metadata.name) <= {MAX_NAME_LEN} && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    ))
    .message(kube::core::Message::Message(format!(
        "metadata.name must be lowercase letters, digits and '-', start with a letter and be at most {MAX_NAME_LEN} characters (the server's Service is <name>-server)"
    )))
}

/// The CEL form of `validate.rs`'s one-of messages of the conversation.
pub const MSG_ONE_PAYLOAD: &str = "set exactly one of text (a text frame), binary (a binary frame) or bytes (a binary frame written in hex)";
pub const MSG_STEP_KIND: &str =
    "set exactly one of send (a message to send) or expect (a message to wait for)";
pub const MSG_CAPTURE_NEEDS_EXPECT: &str =
    "capture needs expect on the same step: values are taken from the message it matched";
pub const MSG_CAPTURE_KIND: &str = "set exactly one of json (a field's path), regex (its first group) or at (a binary field's offset)";
pub const MSG_AT_WIDTH: &str = "at and width go together: width is how many bytes at reads (1, 2, 4 or 8), as a big-endian number";
pub const MSG_SPLIT_KIND: &str = "set exactly one of separator (the text between messages), jsonArray (an array of messages after a prefix) or packets (binary packets that say their length)";
pub const MSG_MATCH_EMPTY: &str = "set at least one of equals, prefix, bytes, regex, json or frame: an empty match matches every message";
pub const MSG_STEP_NAMES: &str = "step names must be unique: misses are counted by name";
pub const MSG_PUSH_NAMES: &str = "push rule names must be unique: pushes are counted by name";
pub const MSG_PUSH_AND_PUSHES: &str = "set push (one rule, counted in the total) or pushes (rules counted by name), not both; move push into pushes with a name";
pub const MSG_ID_NEEDS_SEQ: &str = "answer.id reads back the message's ${seq}: put ${seq} in the message template where the answer carries it";
pub const MSG_ECHOED_ALONE: &str = "answer.echoed checks the whole answer against the message sent: remove match and id, or echoed";
pub const MSG_CONVERSATION_WSE: &str = "the wse protocol has a conversation of its own: remove conversation, or set protocol: echo to speak the server's protocol";

fn exactly_one(fields: &[&str]) -> String {
    let has: Vec<String> = fields.iter().map(|f| format!("has(self.{f})")).collect();
    format!("[{}].filter(b, b).size() == 1", has.join(", "))
}

pub fn payload_rules(schema: &mut Schema) {
    push(
        schema,
        vec![rule(
            &exactly_one(&["text", "binary", "bytes"]),
            MSG_ONE_PAYLOAD,
        )],
    );
}

pub fn step_rules(schema: &mut Schema) {
    push(
        schema,
        vec![
            rule(&exactly_one(&["send", "expect"]), MSG_STEP_KIND),
            at(
                rule(
                    "!has(self.capture) || size(self.capture) == 0 || has(self.expect)",
                    MSG_CAPTURE_NEEDS_EXPECT,
                ),
                ".capture",
            ),
        ],
    );
}

pub fn split_rules(schema: &mut Schema) {
    push(
        schema,
        vec![rule(
            &exactly_one(&["separator", "jsonArray", "packets"]),
            MSG_SPLIT_KIND,
        )],
    );
}

pub fn capture_rules(schema: &mut Schema) {
    push(
        schema,
        vec![
            rule(&exactly_one(&["json", "regex", "at"]), MSG_CAPTURE_KIND),
            at(
                rule(
                    "has(self.at) == has(self.width) && (!has(self.width) || self.width in [1, 2, 4, 8])",
                    MSG_AT_WIDTH,
                ),
                ".width",
            ),
        ],
    );
}

pub fn match_rules(schema: &mut Schema) {
    push(
        schema,
        vec![rule(
            "has(self.equals) || has(self.prefix) || has(self.bytes) || has(self.regex) || has(self.json) || has(self.frame)",
            MSG_MATCH_EMPTY,
        )],
    );
}

pub fn conversation_rules(schema: &mut Schema) {
    push(
        schema,
        vec![
            at(
                rule(
                    "!has(self.open) || self.open.all(s, self.open.exists_one(t, t.name == s.name))",
                    MSG_STEP_NAMES,
                ),
                ".open",
            ),
            at(
                rule(
                    "!has(self.pushes) || self.pushes.all(p, self.pushes.exists_one(q, q.name == p.name))",
                    MSG_PUSH_NAMES,
                ),
                ".pushes",
            ),
            at(
                rule(
                    "!has(self.push) || !has(self.pushes) || size(self.pushes) == 0",
                    MSG_PUSH_AND_PUSHES,
                ),
                ".push",
            ),
        ],
    );
}

pub fn measured_message_rules(schema: &mut Schema) {
    push(
        schema,
        vec![
            rule(&exactly_one(&["text", "binary", "bytes"]), MSG_ONE_PAYLOAD),
            at(
                rule(
                    "!has(self.answer) || !has(self.answer.id) || (has(self.text) && self.text.contains('${seq}')) || (has(self.binary) && self.binary.contains('${seq}')) || (has(self.bytes) && self.bytes.contains('${seq'))",
                    MSG_ID_NEEDS_SEQ,
                ),
                ".answer.id",
            ),
            at(
                rule(
                    "!has(self.answer) || !has(self.answer.echoed) || !self.answer.echoed || (!has(self.answer.match) && !has(self.answer.id))",
                    MSG_ECHOED_ALONE,
                ),
                ".answer.echoed",
            ),
        ],
    );
}

/// Spec-level rules of the conversation (beside `spec_rules`, which are the load's).
pub fn spec_conversation_rules() -> Value {
    at(
        rule(
            "!has(self.conversation) || !has(self.protocol) || self.protocol != 'wse'",
            MSG_CONVERSATION_WSE,
        ),
        ".protocol",
    )
}

#[cfg(test)]
mod threshold_rules {
    use super::*;

    /// A CEL string literal's regular expression as RE2 reads it (`\\.` is `\.`).
    fn re(cel: &str) -> regex::Regex {
        regex::Regex::new(&cel.replace("\\\\", "\\")).expect("regex")
    }

    /// What the API server's rules say of `text`: the first one it breaks, if any.
    fn refused(text: &str) -> Option<usize> {
        let compared = re(COMPARISON_RE).is_match(text);
        if !compared {
            return Some(0);
        }
        if !re(METRIC_RE).is_match(text) {
            return Some(1);
        }
        (re(LATENCY_RE).is_match(text) && !re(TIME_VALUE_RE).is_match(text)).then_some(2)
    }

    #[test]
    fn the_schema_takes_what_the_parser_takes() {
        for ok in [
            "rtt.p99 < 5ms",
            "errors < 0.1%",
            "fanout.p99 < 50ms",
            "fanout.p99.9<=1s",
            "gaps == 0",
            "completeness > 99.99%",
            "deliveries >= 1.5M/s",
            "limit >= 10000",
        ] {
            assert_eq!(refused(ok), None, "{ok}");
            assert!(ok.parse::<Threshold>().is_ok(), "{ok}");
        }
        for (bad, rule) in [
            ("gaps 0", 0),
            ("gaps = 0", 0),
            ("p99 < 5ms", 1),
            ("fanouts.p99 < 5ms", 1),
            ("fanout.p99 < 50", 2),
            ("fanout.p99 == 5", 2),
        ] {
            assert_eq!(refused(bad), Some(rule), "{bad}");
            assert!(bad.parse::<Threshold>().is_err(), "{bad}");
        }
    }
}
