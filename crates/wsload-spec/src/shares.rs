//! How a LoadTest's load is split over its shards: the operator records these shares in
//! status, and each shard computes its own from its index, so both always agree.

/// Shard `index`'s part of `total` items over `count` shards: equal parts, the first
/// `total % count` shards one more.
pub fn count_share(total: u32, index: u32, count: u32) -> u32 {
    let count = count.max(1);
    total / count + u32::from(index < total % count)
}

/// The number of items before shard `index` (its first connection's global number).
pub fn count_offset(total: u32, index: u32, count: u32) -> u32 {
    (0..index).map(|i| count_share(total, i, count)).sum()
}

/// Each shard's part of a rate shared over `count` shards (rates split evenly).
pub fn rate_share(rate: f64, count: u32) -> f64 {
    rate / f64::from(count.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        for total in [1, 7, 100, 1001] {
            for count in 1..=7 {
                if total < count {
                    continue;
                }
                let shares: Vec<u32> = (0..count).map(|i| count_share(total, i, count)).collect();
                assert_eq!(shares.iter().sum::<u32>(), total);
                let (min, max) = (shares.iter().min().copied(), shares.iter().max().copied());
                assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1), "{shares:?}");
                assert_eq!(
                    count_offset(total, count - 1, count),
                    total - shares[count as usize - 1]
                );
            }
        }
        assert!((rate_share(1000.0, 4) - 250.0).abs() < 1e-9);
    }
}
