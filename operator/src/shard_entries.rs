//! The shards as status lists them before any runs: one entry per shard. Each shard's share of
//! the load is the spec's (`wsload_spec::shares`), computed alike by the shard itself, so status
//! does not repeat it and stays small at thousands of shards.

use wsload_spec::LoadTestSpec;
use wsload_spec::status::{ShardState, ShardStatus};

/// A shard's `reason` is cut to this many bytes (a pod's waiting message, a shard's error).
pub const MAX_REASON_BYTES: usize = 256;

/// All shards' reasons together stay within this many bytes: at 5,000 shards each failing
/// with a reason of its own, they would outgrow the one etcd object status lives in (the
/// largest status, a fanout's tiers with reconnect figures, leaves ~6 KB of it besides the
/// 64 KB kept for the spec; `results::tests::status_stays_bounded_at_the_largest_spec`). Past it a shard's state still says what became of
/// it; its reason is in the operator's log, and the test's message names the first shards.
pub const MAX_REASONS_BYTES: usize = 24 * 1024;

/// Sets shard `index`'s state and reason, the reason bounded as above.
pub fn set(shards: &mut [ShardStatus], index: u32, state: ShardState, reason: Option<String>) {
    let others: usize = shards
        .iter()
        .filter(|s| s.index != index)
        .filter_map(|s| s.reason.as_ref().map(String::len))
        .sum();
    let reason = reason
        .map(|r| crate::text::truncate(&r, MAX_REASON_BYTES))
        .filter(|r| others + r.len() <= MAX_REASONS_BYTES);
    if let Some(s) = shards.iter_mut().find(|s| s.index == index) {
        s.state = state;
        s.reason = reason;
    }
}

/// One status entry per shard of `spec`, in index order, each pending.
pub fn pending(spec: &LoadTestSpec) -> Vec<ShardStatus> {
    (0..spec.shards)
        .map(|index| ShardStatus {
            index,
            state: ShardState::Pending,
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_starts_pending_in_index_order() {
        let s = wsload_spec::yaml::parse(
            "target: {server: {}}\nscenario: echo\nconnections: [10]\nshards: 4\n",
        )
        .expect("spec");
        let entries = pending(&s);
        let indexes: Vec<u32> = entries.iter().map(|e| e.index).collect();
        assert_eq!(indexes, [0, 1, 2, 3]);
        assert!(entries.iter().all(|e| e.state == ShardState::Pending));
    }

    #[test]
    fn reasons_are_cut_each_and_together() {
        let s = wsload_spec::yaml::parse(
            "target: {server: {}}\nscenario: echo\nconnections: [10]\nshards: 1000\n",
        )
        .expect("spec");
        let mut shards = pending(&s);
        set(&mut shards, 0, ShardState::Failed, Some("é".repeat(300)));
        let first = shards[0].reason.clone().expect("a reason");
        assert!(
            first.len() <= MAX_REASON_BYTES + 3 && first.ends_with("..."),
            "{first}"
        );
        for i in 1..1000 {
            set(
                &mut shards,
                i,
                ShardState::Lost,
                Some(format!("{i} {}", "x".repeat(400))),
            );
        }
        assert!(shards.iter().all(|s| s.state != ShardState::Pending));
        let kept: Vec<usize> = shards
            .iter()
            .filter_map(|s| s.reason.as_ref().map(String::len))
            .collect();
        assert!(kept.iter().sum::<usize>() <= MAX_REASONS_BYTES);
        // The first shards keep theirs; the budget is used, not left mostly empty.
        assert_eq!(kept.len(), MAX_REASONS_BYTES / (MAX_REASON_BYTES + 3));
        assert_eq!(shards[999].reason, None);
        // A shard's new reason replaces its own within the budget.
        set(&mut shards, 0, ShardState::Failed, Some("short".into()));
        assert_eq!(shards[0].reason.as_deref(), Some("short"));
        set(&mut shards, 0, ShardState::Failed, None);
        assert_eq!(shards[0].reason, None);
    }
}
