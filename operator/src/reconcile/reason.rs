//! The words status speaks in: each condition's type and each reason a condition (or, on
//! failure, `status.reason`) gives. Their strings are the CRD's wire format, read by users,
//! `kubectl wait` and CI gates, and listed in docs/operator.md: a variant may be added, a
//! string never changes.

use wsload_spec::status::Verdict;

/// A condition's `type`: status holds one condition of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConditionType {
    ServerReady,
    ShardsReady,
    /// The start barrier passed: the shards were told their instant.
    Released,
    ThresholdsPassed,
    /// A shard was left out under `shardFailure: continue`.
    Degraded,
    /// A failure was detected (set even while the others' results are still collected).
    Failed,
}

impl ConditionType {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ConditionType::ServerReady => "ServerReady",
            ConditionType::ShardsReady => "ShardsReady",
            ConditionType::Released => "Released",
            ConditionType::ThresholdsPassed => "ThresholdsPassed",
            ConditionType::Degraded => "Degraded",
            ConditionType::Failed => "Failed",
        }
    }
}

/// Why a condition stands as it does. The failures (the first of which becomes
/// `status.reason`) come first; the rest only explain a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    InvalidSpec,
    ServerNotReady,
    ServerFailed,
    ServerLost,
    ShardsNotReady,
    /// Shards still on no node when the scheduling deadline passed.
    ShardsUnschedulable,
    ShardFailed,
    ReleaseFailed,
    RunDeadlineExceeded,
    NoResults,
    MergeFailed,
    ResultTooLarge,
    ResultStoreFailed,
    ResultsUnreadable,
    /// The namespace's Pod Security level refuses a pod the test needs; nothing was created.
    PodSecurityRefused,
    /// The installed CRD lacks fields this operator writes (an older one left in place by
    /// `helm upgrade`); nothing was created.
    CrdOutdated,
    /// A disruption could not be done (a Deployment the operator may not patch, or none of
    /// that name): what was measured is not the test asked for.
    DisruptionFailed,
    /// `Failed` is `False`: nothing went wrong (yet).
    NoFailure,
    /// `ServerReady`: every replica's pod is ready.
    PodReady,
    /// `ShardsReady`: every shard's pod is ready.
    AllReady,
    /// `Released`: the shards were told the start instant.
    StartBarrier,
    /// `ThresholdsPassed`: the thresholds judged over the merged result, as the verdict says.
    Judged(Verdict),
    /// `ThresholdsPassed` is `False` although they held: the test failed, so what was
    /// measured is not the load asked for.
    Incomplete,
}

impl Reason {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::ServerNotReady => "ServerNotReady",
            Reason::ServerFailed => "ServerFailed",
            Reason::ServerLost => "ServerLost",
            Reason::ShardsNotReady => "ShardsNotReady",
            Reason::ShardsUnschedulable => "ShardsUnschedulable",
            Reason::ShardFailed => "ShardFailed",
            Reason::ReleaseFailed => "ReleaseFailed",
            Reason::RunDeadlineExceeded => "RunDeadlineExceeded",
            Reason::NoResults => "NoResults",
            Reason::MergeFailed => "MergeFailed",
            Reason::ResultTooLarge => "ResultTooLarge",
            Reason::ResultStoreFailed => "ResultStoreFailed",
            Reason::ResultsUnreadable => "ResultsUnreadable",
            Reason::PodSecurityRefused => "PodSecurityRefused",
            Reason::CrdOutdated => "CrdOutdated",
            Reason::DisruptionFailed => "DisruptionFailed",
            Reason::NoFailure => "NoFailure",
            Reason::PodReady => "PodReady",
            Reason::AllReady => "AllReady",
            Reason::StartBarrier => "StartBarrier",
            Reason::Judged(verdict) => verdict.as_str(),
            Reason::Incomplete => "Incomplete",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILURES: [Reason; 17] = [
        Reason::InvalidSpec,
        Reason::ServerNotReady,
        Reason::ServerFailed,
        Reason::ServerLost,
        Reason::ShardsNotReady,
        Reason::ShardsUnschedulable,
        Reason::ShardFailed,
        Reason::ReleaseFailed,
        Reason::RunDeadlineExceeded,
        Reason::NoResults,
        Reason::MergeFailed,
        Reason::ResultTooLarge,
        Reason::ResultStoreFailed,
        Reason::ResultsUnreadable,
        Reason::PodSecurityRefused,
        Reason::CrdOutdated,
        Reason::DisruptionFailed,
    ];

    const CONDITIONS: [ConditionType; 6] = [
        ConditionType::ServerReady,
        ConditionType::ShardsReady,
        ConditionType::Released,
        ConditionType::ThresholdsPassed,
        ConditionType::Degraded,
        ConditionType::Failed,
    ];

    const OPERATOR_DOC: &str = include_str!("../../../docs/operator.md");

    /// The line of docs/operator.md's status table that documents `field`.
    fn documented(field: &str) -> &'static str {
        let row = format!("| `{field}`");
        OPERATOR_DOC
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("docs/operator.md has no status row for {field}"))
    }

    #[test]
    fn every_failure_reason_is_documented_as_a_status_reason() {
        let row = documented("phase`, `reason");
        for r in FAILURES {
            assert!(
                row.contains(&format!("`{}`", r.as_str())),
                "{r:?} not in {row}"
            );
        }
    }

    #[test]
    fn every_condition_type_is_documented() {
        let row = documented("conditions");
        for c in CONDITIONS {
            assert!(
                row.contains(&format!("`{}`", c.as_str())),
                "{c:?} not in {row}"
            );
        }
    }

    #[test]
    fn the_strings_are_the_wire_format() {
        // Spelled out once more on purpose: changing one breaks what users' tools read.
        let reasons: Vec<&str> = FAILURES.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "InvalidSpec",
                "ServerNotReady",
                "ServerFailed",
                "ServerLost",
                "ShardsNotReady",
                "ShardsUnschedulable",
                "ShardFailed",
                "ReleaseFailed",
                "RunDeadlineExceeded",
                "NoResults",
                "MergeFailed",
                "ResultTooLarge",
                "ResultStoreFailed",
                "ResultsUnreadable",
                "PodSecurityRefused",
                "CrdOutdated",
                "DisruptionFailed",
            ]
        );
        let others = [
            (Reason::NoFailure, "NoFailure"),
            (Reason::PodReady, "PodReady"),
            (Reason::AllReady, "AllReady"),
            (Reason::StartBarrier, "StartBarrier"),
            (Reason::Judged(Verdict::Pass), "Pass"),
            (Reason::Judged(Verdict::Fail), "Fail"),
            (Reason::Incomplete, "Incomplete"),
        ];
        for (r, s) in others {
            assert_eq!(r.as_str(), s);
        }
    }
}
