//! Text for status messages and Events, kept short whatever the shard or cell count: a
//! message listing a thousand shards would make status and Events grow without bound.

use std::fmt::Display;

/// The first `max` items, comma-separated, and how many more there are.
pub fn listed<T: Display>(items: &[T], max: usize) -> String {
    let shown: Vec<String> = items.iter().take(max).map(ToString::to_string).collect();
    let mut text = shown.join(", ");
    if items.len() > max {
        text.push_str(&format!(" and {} more", items.len() - max));
    }
    text
}

/// `s` cut to at most `max` bytes on a character boundary, marked when cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// `n` with its thousands separated by commas (`299,973`): counts of connections in a
/// message are read at a glance.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(299_973), "299,973");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn long_lists_say_how_many_are_left_out() {
        assert_eq!(listed(&[1, 2, 3], 5), "1, 2, 3");
        assert_eq!(
            listed(&(0..1000).collect::<Vec<_>>(), 3),
            "0, 1, 2 and 997 more"
        );
        assert_eq!(listed::<u32>(&[], 3), "");
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("héllo", 2), "h...");
        assert_eq!(truncate("ok", 10), "ok");
    }
}
