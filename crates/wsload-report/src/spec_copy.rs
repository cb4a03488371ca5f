//! The LoadTest's spec carried in a result, for the shareable report: secrets left out, since
//! the report is meant to be passed around.

use crate::RunResult;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use wsload_spec::LoadTestSpec;

/// What replaces a secret in the copy.
pub const REDACTED: &str = "(redacted)";

impl RunResult {
    /// Records the spec this run ran, with inline secrets, environment values and extra
    /// upgrade headers (which carry tokens) replaced by [`REDACTED`].
    pub fn set_spec(&mut self, spec: &LoadTestSpec) -> Result<(), serde_json::Error> {
        let mut v = serde_json::to_value(spec)?;
        redact(&mut v);
        self.spec = Some(v);
        Ok(())
    }
}

/// The dotted paths of a spec copy's fields that hold their defaults (a whole section when
/// all of it does): a field is one when the spec without it reads back with the same value
/// there. The report lists what the LoadTest set apart from what it left out. A field written
/// with its default value counts as left out; a spec that does not read back has none.
pub fn defaulted(spec: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if serde_json::from_value::<LoadTestSpec>(spec.clone()).is_ok() {
        walk(spec, &mut Vec::new(), spec, &mut out);
    }
    out
}

fn walk(root: &Value, path: &mut Vec<String>, here: &Value, out: &mut BTreeSet<String>) {
    let Value::Object(map) = here else {
        return;
    };
    for (key, child) in map {
        path.push(key.clone());
        if reads_back_without(root, path) {
            out.insert(path.join("."));
        } else {
            walk(root, path, child, out);
        }
        path.pop();
    }
}

/// Whether `root` without the field at `path` reads back with the same value there.
fn reads_back_without(root: &Value, path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut copy = root.clone();
    let mut parent: Option<&mut Map<String, Value>> = copy.as_object_mut();
    for key in parents {
        parent = parent
            .and_then(|m| m.get_mut(key))
            .and_then(Value::as_object_mut);
    }
    let Some(parent) = parent else {
        return false;
    };
    parent.remove(last);
    let Ok(back) = serde_json::from_value::<LoadTestSpec>(copy).and_then(serde_json::to_value)
    else {
        return false;
    };
    let at = |v: &Value| path.iter().try_fold(v.clone(), |v, k| v.get(k).cloned());
    at(&back) == at(root)
}

/// Inline secrets (`SecretValue.value`) and environment variables (`EnvVar.value`) are the
/// spec's only string fields named `value`; header values are tokens as often as not.
fn redact(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                match (k.as_str(), &mut *child) {
                    ("value", Value::String(s)) => *s = REDACTED.to_string(),
                    ("headers", Value::Object(h)) => {
                        for hv in h.values_mut() {
                            *hv = Value::String(REDACTED.to_string());
                        }
                    }
                    _ => redact(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;

    #[test]
    fn secrets_do_not_reach_the_copy() {
        let lt = wsload_spec::LoadTest::from_spec_yaml(
            "  target: {url: 'ws://x'}
  scenario: echo
  auth:
    token: {value: hunter2}
    headers: {X-Api-Key: k3y}
  loadgen:
    env: [{name: SECRET, value: s3cret}]
",
            "test.yaml",
        )
        .expect("spec");
        let mut r = shard(0, 1, 1, 1);
        r.set_spec(&lt.spec).expect("json");
        let text = serde_json::to_string(&r).expect("json");
        for secret in ["hunter2", "k3y", "s3cret"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let spec = r.spec.as_ref().expect("spec");
        assert_eq!(spec["auth"]["token"]["value"], REDACTED);
        assert_eq!(spec["loadgen"]["env"][0]["name"], "SECRET");
        assert_eq!(spec["target"]["url"], "ws://x");
        let back: RunResult = serde_json::from_str(&text).expect("read");
        assert_eq!(back.spec.as_ref(), Some(spec));
    }

    #[test]
    fn defaults_are_told_from_what_the_loadtest_set() {
        let lt = wsload_spec::LoadTest::from_spec_yaml(
            "  target: {server: {profile: wse}}
  protocol: wse
  auth: {jwt: {secret: {value: k}}}
  scenario: pingLatency
  connections: [100, 500]
  ping: {count: 20, timeout: 2s}
  limit: {max: 5000}
",
            "test.yaml",
        )
        .expect("spec");
        let spec = serde_json::to_value(&lt.spec).expect("json");
        let d = defaulted(&spec);
        // Left out: whole sections, and the rest of a section the LoadTest set part of.
        for left in [
            "duration",
            "message",
            "run",
            "target.server.image",
            "limit.hold",
            "ping.kind",
            "auth.jwt.ttl",
        ] {
            assert!(d.contains(left), "{left} not among {d:?}");
        }
        // Set, though nested or a section's single field.
        for set in [
            "target",
            "target.server",
            "target.server.profile",
            "scenario",
            "protocol",
            "auth.jwt.secret.value",
            "connections",
            "ping",
            "ping.count",
            "ping.timeout",
            "limit",
            "limit.max",
        ] {
            assert!(!d.contains(set), "{set} among {d:?}");
        }
        // Not a spec: nothing is a default.
        assert!(defaulted(&serde_json::json!({"scenario": "nonsense"})).is_empty());
    }
}
