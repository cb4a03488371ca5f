//! The pushes a conversation's rules count: on a worker by rule index, in a fixed array
//! ([`PushTallies`]: nothing allocated or looked up per push), named at the worker's end into
//! `Counts::pushes_by_name`, which merges by name across workers and shards.

use crate::measure::FrameTally;
use wsload_spec::conversation::MAX_PUSH_RULES;

/// The pushes of each push rule, by the rule's index: a fixed array, so that counting one
/// allocates nothing and looks nothing up.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct PushTallies([FrameTally; MAX_PUSH_RULES]);

impl std::ops::Deref for PushTallies {
    type Target = [FrameTally; MAX_PUSH_RULES];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for PushTallies {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// Only the rules that counted something: a worker's figures are printed in tests' logs.
impl std::fmt::Debug for PushTallies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().enumerate().filter(|(_, t)| !t.is_empty()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Counts;
    use std::collections::BTreeMap;

    /// Pushes are counted by rule index on the hot path, named once at a worker's end, and
    /// merge by name across workers and shards.
    #[test]
    fn pushes_are_counted_by_rule_and_merged_by_name() {
        let names = [Some("next"), Some("complete"), Some("error")];
        let mut a = Counts::default();
        a.pushed(0, 3, 30);
        a.pushed(1, 1, 5);
        a.name_pushes(names);
        assert_eq!(a.push_rules, PushTallies::default(), "moved into the names");
        let mut b = Counts::default();
        b.pushed(0, 2, 20);
        b.name_pushes(names);
        a.add(&b);
        let tally = |frames, bytes| FrameTally { frames, bytes };
        assert_eq!(a.pushes, tally(6, 55));
        assert_eq!(
            a.pushes_by_name,
            BTreeMap::from([
                ("complete".to_string(), tally(1, 5)),
                ("error".to_string(), tally(0, 0)),
                ("next".to_string(), tally(5, 50)),
            ])
        );
        let json = serde_json::to_string(&a).expect("serialize");
        assert!(
            json.contains(r#""pushes":{"frames":6,"bytes":55},"pushesByName":{"complete":{"frames":1,"bytes":5},"error":{"frames":0,"bytes":0},"next":{"frames":5,"bytes":50}}"#),
            "{json}"
        );
        let back: Counts = serde_json::from_str(&json).expect("read back");
        assert_eq!(back, a);
        // `push` is one unnamed rule: counted in the total only.
        let mut c = Counts::default();
        c.pushed(0, 4, 40);
        c.name_pushes([None]);
        assert_eq!((c.pushes.frames, c.pushes_by_name.len()), (4, 0));
        assert!(
            !serde_json::to_string(&c)
                .expect("json")
                .contains("pushesByName")
        );
    }
}
