//! Deterministic names and labels of a LoadTest's children: a retried or restarted reconcile
//! finds what an earlier one made instead of making it twice.

use std::collections::BTreeMap;

pub const LABEL_LOADTEST: &str = "wsload.dev/loadtest";
pub const LABEL_ROLE: &str = "wsload.dev/role";
pub const LABEL_SHARD: &str = "wsload.dev/shard";
pub const LABEL_REPLICA: &str = "wsload.dev/replica";
pub const ROLE_SERVER: &str = "server";
pub const ROLE_SHARD: &str = "shard";
/// Field manager of every server-side apply the operator makes.
pub const MANAGER: &str = "wsload-operator";
/// Port of a shard's metrics and control endpoint.
pub const SHARD_PORT: u16 = 9464;

/// The server's Service (and replica 0's pod).
pub fn server(test: &str) -> String {
    format!("{test}-server")
}

/// Server replica `replica`'s pod. Replica 0 keeps the name a single server always had, so a
/// one-replica test's pod is named as before (scripts, dashboards and users look for it);
/// replica i > 0 is `<test>-server-<i>`.
pub fn server_replica(test: &str, replica: u32) -> String {
    match replica {
        0 => server(test),
        i => format!("{test}-server-{i}"),
    }
}

/// Which server replica a pod name belongs to, if it is one of `test`'s.
pub fn server_replica_index(test: &str, pod: &str) -> Option<u32> {
    let rest = pod.strip_prefix(test)?.strip_prefix("-server")?;
    if rest.is_empty() {
        return Some(0);
    }
    let i: u32 = rest.strip_prefix('-')?.parse().ok()?;
    // `<test>-server-0` is not a name the operator gives: replica 0 has none.
    (i > 0 && rest == format!("-{i}")).then_some(i)
}

pub fn shard(test: &str, index: u32) -> String {
    format!("{test}-shard-{index}")
}

/// The Secret holding the test's control token, mounted into its shard pods.
pub fn control_secret(test: &str) -> String {
    format!("{test}-control")
}

pub const ROLE_CONTROL: &str = "control";

pub fn results(test: &str) -> String {
    format!("{test}-results")
}

/// The ConfigMap holding shard `index`'s result: one object per shard, so a result's size is
/// bounded per object whatever the shard count.
pub fn shard_result(test: &str, index: u32) -> String {
    format!("{test}-result-{index}")
}

/// Key of a shard's result (gzip-compressed JSON) in its ConfigMap's `binaryData`.
pub const RESULT_KEY: &str = "result.json.gz";

/// Key of the merged result (gzip-compressed JSON) in the results ConfigMap's `binaryData`.
pub const MERGED_KEY: &str = "merged.json.gz";

/// Key of the merged result as an HTML page (gzip-compressed), beside it.
pub const REPORT_KEY: &str = "report.html.gz";

pub const ROLE_RESULT: &str = "result";

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
        assert_eq!(control_secret("t"), "t-control");
        assert_eq!(server_replica("t", 0), "t-server");
        assert_eq!(server_replica("t", 2), "t-server-2");
        for i in [0, 1, 7] {
            assert_eq!(server_replica_index("t", &server_replica("t", i)), Some(i));
        }
        assert_eq!(server_replica_index("t", "t-server-0"), None);
        assert_eq!(server_replica_index("t", "t-server-01"), None);
        assert_eq!(server_replica_index("t", "t-shard-1"), None);
        assert_eq!(server_replica_index("t", "tt-server"), None);
    }
}
