//! The LoadTest's spec carried in a result, for the shareable report: secrets left out, since
//! the report is meant to be passed around.

use crate::RunResult;
use serde_json::Value;
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
}
