//! Where results live: each shard's in its own ConfigMap (`<test>-result-<i>`), the merged one
//! in `<test>-results`, both gzip-compressed JSON in `binaryData`. One object per shard keeps
//! every object's size bounded by one shard's result whatever the shard count; a result too
//! large for any object is refused here, before the API server sees it, with its size.
//!
//! Writes are server-side applies: idempotent, so a result stored by a reconcile whose status
//! write was lost is simply stored again, and an object left by an earlier test of the same
//! name is taken over rather than read as this test's.

use crate::builders;
use crate::names::{self, MANAGER};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use wsload_spec::LoadTestResource;

/// What one ConfigMap may hold: the API server refuses more than 1 MiB of data.
pub const MAX_OBJECT_DATA: usize = 1024 * 1024;

/// Why a result could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "{what} is {size} bytes compressed, over the {max} bytes one Kubernetes object may hold; split the test into LoadTests with fewer cells (connections x sizes x formats), or fewer thresholds per cell"
    )]
    TooLarge {
        what: String,
        size: usize,
        max: usize,
    },
    /// The API server refused, and would refuse again (admission, quota, RBAC, validation).
    #[error("the API server refused ConfigMap {name}: {}", Said(.source))]
    Refused {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Might succeed on a later try (timeouts, 5xx, throttling, a connection lost).
    #[error("ConfigMap {name}: {}", Said(.source))]
    Transient {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("ConfigMap {name} is gone")]
    Missing { name: String },
}

impl StoreError {
    fn from_kube(name: &str, source: kube::Error) -> StoreError {
        let name = name.to_string();
        let code = match &source {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        };
        match code {
            Some(404) => StoreError::Missing { name },
            Some(c) if permanent(c) => StoreError::Refused { name, source },
            _ => StoreError::Transient { name, source },
        }
    }

    /// Whether trying again later may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Transient { .. })
    }
}

/// What the API server said, once: kube's Display adds the whole Status again.
struct Said<'a>(&'a kube::Error);

impl std::fmt::Display for Said<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            kube::Error::Api(s) => write!(f, "{} ({})", s.message, s.code),
            other => write!(f, "{other}"),
        }
    }
}

/// A 4xx the same request will get again: not a timeout (408), conflict (409) or throttling
/// (429).
fn permanent(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 408 | 409 | 429)
}

fn fits(what: impl FnOnce() -> String, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let size = bytes.len() + key.len();
    if size > MAX_OBJECT_DATA {
        return Err(StoreError::TooLarge {
            what: what(),
            size: bytes.len(),
            max: MAX_OBJECT_DATA - key.len(),
        });
    }
    Ok(())
}

async fn apply(api: &Api<ConfigMap>, cm: &ConfigMap) -> Result<(), StoreError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(cm),
    )
    .await
    .map_err(|e| StoreError::from_kube(&name, e))?;
    Ok(())
}

/// Stores shard `index`'s result (the JSON it served), compressed; the stored size.
pub async fn shard_result(
    api: &Api<ConfigMap>,
    lt: &LoadTestResource,
    index: u32,
    json: &[u8],
) -> Result<usize, StoreError> {
    let packed = wsload_report::stored::compress(json).map_err(|e| StoreError::TooLarge {
        what: format!("shard {index}'s result ({e})"),
        size: json.len(),
        max: MAX_OBJECT_DATA,
    })?;
    fits(
        || format!("shard {index}'s result"),
        names::RESULT_KEY,
        &packed,
    )?;
    let size = packed.len();
    apply(api, &builders::shard_result_config_map(lt, index, packed)).await?;
    Ok(size)
}

/// Stores the merged result and its HTML report (both already compressed). The result must
/// fit; the report goes only where it fits beside it (it can be made again from the result
/// with `wsload report --html`).
pub async fn merged(
    api: &Api<ConfigMap>,
    lt: &LoadTestResource,
    packed: Vec<u8>,
    report: Vec<u8>,
) -> Result<(), StoreError> {
    fits(
        || "the merged result".to_string(),
        names::MERGED_KEY,
        &packed,
    )?;
    let both = packed.len() + names::MERGED_KEY.len() + report.len() + names::REPORT_KEY.len();
    let report = if both <= MAX_OBJECT_DATA {
        Some(report)
    } else {
        tracing::warn!(
            bytes = report.len(),
            "the HTML report does not fit beside the merged result; left out"
        );
        None
    };
    apply(api, &builders::results_config_map(lt, packed, report)).await
}

/// Shard `index`'s stored result, as stored (compressed).
pub async fn read_shard_result(
    api: &Api<ConfigMap>,
    test: &str,
    index: u32,
) -> Result<Vec<u8>, StoreError> {
    let name = names::shard_result(test, index);
    let cm = api
        .get(&name)
        .await
        .map_err(|e| StoreError::from_kube(&name, e))?;
    cm.binary_data
        .and_then(|mut d| d.remove(names::RESULT_KEY))
        .map(|b| b.0)
        .ok_or(StoreError::Missing { name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_request_that_cannot_succeed_is_refused_for_good() {
        for code in [400, 403, 413, 422] {
            assert!(permanent(code), "{code}");
        }
        for code in [408, 409, 429, 500, 503] {
            assert!(!permanent(code), "{code}");
        }
    }

    #[test]
    fn a_result_over_one_object_is_refused_with_its_size() {
        let ok = vec![0u8; 1000];
        assert!(fits(|| "x".into(), names::RESULT_KEY, &ok).is_ok());
        let big = vec![0u8; MAX_OBJECT_DATA];
        let err =
            fits(|| "shard 7's result".into(), names::RESULT_KEY, &big).expect_err("too large");
        let text = err.to_string();
        assert!(
            text.starts_with("shard 7's result is 1048576 bytes compressed"),
            "{text}"
        );
        assert!(text.contains("split the test"), "{text}");
    }

    #[test]
    fn a_refusal_says_the_api_servers_sentence_once_with_its_code() {
        let api = |code: u16| {
            let status = serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": code, "reason": "Forbidden",
                "message": "refused by the test"
            }))
            .expect("a Status");
            kube::Error::Api(Box::new(status))
        };
        let refused = StoreError::from_kube("t-results", api(403));
        assert!(matches!(refused, StoreError::Refused { .. }), "{refused}");
        assert_eq!(
            refused.to_string(),
            "the API server refused ConfigMap t-results: refused by the test (403)"
        );
        let transient = StoreError::from_kube("t-result-2", api(503));
        assert!(transient.is_transient(), "{transient}");
        assert_eq!(
            transient.to_string(),
            "ConfigMap t-result-2: refused by the test (503)"
        );
        let missing = StoreError::from_kube("t-result-3", api(404));
        assert_eq!(missing.to_string(), "ConfigMap t-result-3 is gone");
    }
}
