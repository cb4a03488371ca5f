//! The shards as status lists them before any runs: one entry per shard. Each shard's share of
//! the load is the spec's (`wsload_spec::shares`), computed alike by the shard itself, so status
//! does not repeat it and stays small at thousands of shards.

use wsload_spec::LoadTestSpec;
use wsload_spec::status::{ShardState, ShardStatus};

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
}
