//! A fanout's delivery rule, compiled: which server messages are deliveries, and the sequence
//! number, publish instant and topic each carries.

use super::error::{ScriptError, matcher};
use super::unreadable;
use wsload_report::measure::NumberField;
use wsload_spec::decimal::Wanted;
use wsload_spec::fanout::TimeUnit;
use wsload_spec::json_path::{Memo, NoNumber};
use wsload_spec::matching::{Extractor, Matcher};

/// The conversation's `delivery`, compiled.
#[derive(Debug, Clone)]
pub struct DeliveryRule {
    when: Option<Matcher>,
    sequence: Extractor,
    published_at: Option<(Extractor, TimeUnit)>,
    topic: Option<Extractor>,
    resume_from: Option<Extractor>,
}

/// What a delivery carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered<'a> {
    pub seq: u64,
    pub published: Published,
    /// The topic's name as the delivery carries it (when the rule reads one).
    pub topic: Option<&'a [u8]>,
}

/// A delivery's publish instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The rule reads none.
    NotRead,
    /// Unix microseconds.
    At(u64),
    /// The rule reads one, and this delivery's could not be read.
    Unreadable,
}

/// What a server message is to a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// Not a delivery.
    No,
    /// A delivery without a sequence number wsload can read: one `delivery.match` accepts,
    /// or, without a match, one whose `sequence` field holds no whole number.
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
            resume_from: d
                .resume_from
                .as_ref()
                .map(|c| x("resumeFrom", c))
                .transpose()?,
        })
    }

    /// Whether `data` is a delivery, readable or not (off the hot path: no memo kept).
    pub fn is_delivery(&self, text: bool, data: &[u8]) -> bool {
        !matches!(self.read(text, data, &mut Default::default()), Delivery::No)
    }

    /// Whether deliveries carry a position a subscriber back resumes from.
    pub fn has_position(&self) -> bool {
        self.resume_from.is_some()
    }

    /// The position a delivery carries (`delivery.resumeFrom`), read on its own: only a
    /// subscriber that may resume asks, once a delivery.
    pub fn position<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        self.resume_from.as_ref().and_then(|x| x.extract(data))
    }

    /// What `data` is to a subscriber. `memo` remembers where the fields were in the last
    /// delivery, so deliveries of one shape are not walked each.
    #[inline]
    pub fn read<'a>(&self, text: bool, data: &'a [u8], memo: &mut [Memo; 2]) -> Delivery<'a> {
        if self.when.as_ref().is_some_and(|m| !m.matches(text, data)) {
            return Delivery::No;
        }
        let [seq_memo, time_memo] = memo;
        let seq = match self
            .sequence
            .extract_number_memo(data, seq_memo, Wanted::Whole)
        {
            Ok(seq) => seq,
            // Without a match, what has no sequence field is some other message.
            Err(NoNumber::Missing) if self.when.is_none() => return Delivery::No,
            Err(_) => return Delivery::Unreadable,
        };
        let published = match &self.published_at {
            None => Published::NotRead,
            Some((x, unit)) => {
                match x.extract_number_memo(data, time_memo, Wanted::Scaled(unit.micros_exponent()))
                {
                    Ok(us) => Published::At(us),
                    Err(_) => Published::Unreadable,
                }
            }
        };
        Delivery::Yes(Delivered {
            seq,
            published,
            topic: self.topic.as_ref().and_then(|x| x.extract(data)),
        })
    }

    /// What a report shows of a delivery whose `field` could not be read: the value as it
    /// came and the message. Asked once per worker, on the failure path only.
    pub fn unreadable_example(&self, field: NumberField, data: &[u8]) -> String {
        let x = match field {
            NumberField::PublishedAt => self.published_at.as_ref().map(|(x, _)| x),
            NumberField::Sequence | NumberField::AnswerId => Some(&self.sequence),
        };
        unreadable::example(x.and_then(|x| x.as_written(data)), data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsload_spec::conversation::{Capture, Delivery as Rule, Match};

    fn json(path: &str) -> Capture {
        Capture {
            json: Some(path.into()),
            ..Capture::default()
        }
    }

    fn rule(prefix: Option<&str>, unit: TimeUnit) -> DeliveryRule {
        DeliveryRule::compile(&Rule {
            matches: prefix.map(|p| Match {
                prefix: Some(p.into()),
                ..Match::default()
            }),
            sequence: json("seq"),
            published_at: Some(json("ts")),
            published_at_unit: unit,
            topic: None,
            resume_from: None,
        })
        .expect("compiles")
    }

    fn read<'a>(r: &DeliveryRule, data: &'a str) -> Delivery<'a> {
        r.read(true, data.as_bytes(), &mut Default::default())
    }

    fn yes(seq: u64, published: Published) -> Delivery<'static> {
        Delivery::Yes(Delivered {
            seq,
            published,
            topic: None,
        })
    }

    /// Numbers as servers write them. Before, a float or an exponent was no number: a
    /// float instant left every delivery untimed without a word, a float sequence number
    /// made it no delivery.
    #[test]
    fn numbers_are_read_in_every_form_and_instants_to_the_microsecond() {
        let us = rule(Some(r#"{"push""#), TimeUnit::Us);
        let at = Published::At(1_795_864_874_129_112);
        for m in [
            r#"{"push":true,"seq":5,"ts":1795864874129112}"#,
            r#"{"push":true,"seq":5.0,"ts":1795864874129112.0}"#,
            r#"{"push":true,"seq":"5","ts":1.795864874129112e15}"#,
            r#"{"push":true,"seq":5e0,"ts":"1795864874129112"}"#,
        ] {
            assert_eq!(read(&us, m), yes(5, at), "{m}");
        }
        let ms = rule(Some("42"), TimeUnit::Ms);
        assert_eq!(
            read(&ms, r#"42{"seq":6,"ts":1795864874129.112}"#),
            yes(6, at)
        );
        assert_eq!(
            read(&ms, r#"42{"seq":6,"ts":"1795864874129.5"}"#),
            yes(6, Published::At(1_795_864_874_129_500))
        );
    }

    #[test]
    fn what_cannot_be_read_is_unreadable_never_rounded() {
        let r = rule(Some(r#"{"push""#), TimeUnit::Us);
        for m in [
            r#"{"push":true,"seq":4.5,"ts":1}"#,
            r#"{"push":true,"seq":-4,"ts":1}"#,
            r#"{"push":true,"seq":NaN,"ts":1}"#,
            r#"{"push":true,"seq":"four","ts":1}"#,
            r#"{"push":true,"ts":1}"#,
        ] {
            assert_eq!(read(&r, m), Delivery::Unreadable, "{m}");
        }
        for m in [
            r#"{"push":true,"seq":4,"ts":-1}"#,
            r#"{"push":true,"seq":4,"ts":"soon"}"#,
            r#"{"push":true,"seq":4}"#,
        ] {
            assert_eq!(read(&r, m), yes(4, Published::Unreadable), "{m}");
        }
        assert_eq!(read(&r, r#"{"pull":1}"#), Delivery::No);
        // Without a match, a message without the field is another message; one whose field
        // holds no whole number is a delivery that cannot be read.
        let r = rule(None, TimeUnit::Us);
        assert_eq!(read(&r, r#"{"type":"subscribed"}"#), Delivery::No);
        assert_eq!(read(&r, r#"{"seq":4.5}"#), Delivery::Unreadable);
        assert_eq!(read(&r, r#"{"seq":4}"#), yes(4, Published::Unreadable));
        // What a report shows of one: the value as it came, and the message.
        let data = br#"{"seq":4.5,"ts":"soon"}"#;
        assert_eq!(
            r.unreadable_example(NumberField::Sequence, data),
            r#"4.5 (in {"seq":4.5,"ts":"soon"})"#
        );
        assert_eq!(
            r.unreadable_example(NumberField::PublishedAt, data),
            r#""soon" (in {"seq":4.5,"ts":"soon"})"#
        );
        assert_eq!(
            r.unreadable_example(NumberField::PublishedAt, br#"{"seq":4}"#),
            r#"no value (in {"seq":4})"#
        );
    }
}
