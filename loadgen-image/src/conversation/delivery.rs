//! A fanout's delivery rule, compiled: which server messages are deliveries, and the sequence
//! number, publish instant and topic each carries.

use super::error::{ScriptError, matcher};
use wsload_spec::fanout::TimeUnit;
use wsload_spec::json_path::Memo;
use wsload_spec::matching::{Extractor, Matcher};

/// The conversation's `delivery`, compiled.
#[derive(Debug, Clone)]
pub struct DeliveryRule {
    when: Option<Matcher>,
    sequence: Extractor,
    published_at: Option<(Extractor, TimeUnit)>,
    topic: Option<Extractor>,
}

/// What a delivery carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered<'a> {
    pub seq: u64,
    /// The publish instant, Unix microseconds (`None`: the rule reads none, or none was there).
    pub published_us: Option<u64>,
    /// The topic's name as the delivery carries it (when the rule reads one).
    pub topic: Option<&'a [u8]>,
}

/// What a server message is to a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// Not a delivery.
    No,
    /// A delivery without a sequence number wsload can read.
    Unreadable,
    Yes(Delivered<'a>),
}

impl DeliveryRule {
    pub(super) fn compile(
        d: &wsload_spec::conversation::Delivery,
    ) -> Result<DeliveryRule, ScriptError> {
        let at = "spec.conversation.delivery";
        let prefix = d.matches.as_ref().and_then(|m| m.prefix.as_deref());
        let x = |name: &str, c: &wsload_spec::conversation::Capture| {
            Extractor::compile(c, prefix).map_err(|source| ScriptError::Match {
                field: format!("{at}.{name}"),
                source,
            })
        };
        Ok(DeliveryRule {
            when: d
                .matches
                .as_ref()
                .map(|m| matcher(&format!("{at}.match"), m))
                .transpose()?,
            sequence: x("sequence", &d.sequence)?,
            published_at: d
                .published_at
                .as_ref()
                .map(|c| x("publishedAt", c).map(|e| (e, d.published_at_unit)))
                .transpose()?,
            topic: d.topic.as_ref().map(|c| x("topic", c)).transpose()?,
        })
    }

    /// What `data` is to a subscriber. `memo` remembers where the fields were in the last
    /// delivery, so deliveries of one shape are not walked each.
    #[inline]
    pub fn read<'a>(&self, text: bool, data: &'a [u8], memo: &mut [Memo; 2]) -> Delivery<'a> {
        if self.when.as_ref().is_some_and(|m| !m.matches(text, data)) {
            return Delivery::No;
        }
        let [seq_memo, time_memo] = memo;
        let Some(seq) = self.sequence.extract_u64_memo(data, seq_memo) else {
            return if self.when.is_some() {
                Delivery::Unreadable
            } else {
                Delivery::No
            };
        };
        let published_us = self
            .published_at
            .as_ref()
            .and_then(|(x, unit)| Some(unit.to_micros(x.extract_u64_memo(data, time_memo)?)));
        Delivery::Yes(Delivered {
            seq,
            published_us,
            topic: self.topic.as_ref().and_then(|x| x.extract(data)),
        })
    }
}
