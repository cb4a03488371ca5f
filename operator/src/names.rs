//! Deterministic names and labels of a LoadTest's children: a retried or restarted reconcile
//! finds what an earlier one made instead of making it twice.

use std::collections::BTreeMap;

pub const LABEL_LOADTEST: &str = "wsload.dev/loadtest";
pub const LABEL_ROLE: &str = "wsload.dev/role";
pub const LABEL_SHARD: &str = "wsload.dev/shard";
pub const ROLE_SERVER: &str = "server";
pub const ROLE_SHARD: &str = "shard";
/// Field manager of every server-side apply the operator makes.
pub const MANAGER: &str = "wsload-operator";
/// Port of a shard's metrics and control endpoint.
pub const SHARD_PORT: u16 = 9464;

pub fn server(test: &str) -> String {
    format!("{test}-server")
}

pub fn shard(test: &str, index: u32) -> String {
    format!("{test}-shard-{index}")
}

pub fn results(test: &str) -> String {
    format!("{test}-results")
}

/// Key of one shard's result in the results ConfigMap.
pub fn result_key(index: u32) -> String {
    format!("shard-{index}.json")
}

pub const MERGED_KEY: &str = "merged.json";

pub fn labels(test: &str, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_LOADTEST.to_string(), test.to_string()),
        (LABEL_ROLE.to_string(), role.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "wsload-operator".to_string(),
        ),
        (
            "app.kubernetes.io/part-of".to_string(),
            "wsload".to_string(),
        ),
    ])
}

pub fn shard_labels(test: &str, index: u32) -> BTreeMap<String, String> {
    let mut l = labels(test, ROLE_SHARD);
    l.insert(LABEL_SHARD.to_string(), index.to_string());
    l
}

/// Which shard a pod name belongs to, if it is one of `test`'s.
pub fn shard_index(test: &str, pod: &str) -> Option<u32> {
    pod.strip_prefix(test)?
        .strip_prefix("-shard-")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(shard("t", 3), "t-shard-3");
        assert_eq!(shard_index("t", "t-shard-3"), Some(3));
        assert_eq!(shard_index("t", "t-server"), None);
        assert_eq!(shard_index("t", "tt-shard-3"), None);
        assert_eq!(results("t"), "t-results");
    }
}
