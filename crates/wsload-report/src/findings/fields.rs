//! Numbers the conversation could not read from the server's messages: an answer's id, a
//! delivery's sequence number or publish instant. Each is a figure missing without a trace
//! (an answer that answers nothing, a delivery not counted, or not timed), so each field is
//! named with how many, the first value as it came, and what to change.

use super::{Finding, Rule, finding};
use crate::measure::NumberField;
use crate::numbers::num;
use crate::result::CellResult;

/// One finding per field some message's number could not be read from.
pub fn cell(c: &CellResult) -> Vec<Finding> {
    let counts = &c.measure.counts;
    counts
        .unreadable
        .iter()
        .filter(|&(_, &n)| n > 0)
        .filter_map(|(&field, &n)| {
            let (one, many, cause) = meaning(field);
            let what = if n == 1 { one } else { many };
            let mut evidence = format!(
                "{} {what} with an unreadable {}",
                num(n as f64),
                field.label()
            );
            if let Some(e) = counts.evidence.get(field.evidence_key()) {
                evidence.push_str("; e.g. ");
                evidence.push_str(e);
            }
            finding(Rule::UnreadableField, c, cause, evidence)
        })
        .collect()
}

/// What was counted (one, many), and what a field that cannot be read means and how to
/// mend it.
fn meaning(field: NumberField) -> (&'static str, &'static str, &'static str) {
    match field {
        NumberField::AnswerId => (
            "answer",
            "answers",
            "answers to the measured message carried an id wsload could not read as a whole number, so they answered nothing and the messages they answer count as lost: point conversation.message.answer.id (ping.answer.id for a ping) at the field that carries the message's ${seq} back (42, 42.0, 4.2e1 and \"42\" all read), or narrow answer.match to the answers",
        ),
        NumberField::Sequence => (
            "delivery",
            "deliveries",
            "deliveries carried no sequence number wsload could read as a whole number, so they were not counted: point conversation.delivery.sequence at the field that holds the topic's number (e.g. sequence: {json: seq}; 42, 42.0, 4.2e1 and \"42\" all read), or narrow delivery.match to the deliveries",
        ),
        NumberField::PublishedAt => (
            "delivery",
            "deliveries",
            "deliveries carried no publish instant wsload could read, so they were counted by when they arrived and left out of the fan-out latency: point conversation.delivery.publishedAt at the field that holds the instant (an integer, a decimal such as 1795864874129.112, an exponent, or a string of one) and set publishedAtUnit to its unit (s, ms, us, ns)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;

    #[test]
    fn each_unreadable_field_is_named_with_its_count_example_and_fix() {
        let mut r = shard(0, 100, 1, 1);
        assert_eq!(cell(&r.cells[0]), Vec::new());
        let counts = &mut r.cells[0].measure.counts;
        for _ in 0..1200 {
            counts.unreadable(NumberField::AnswerId, || {
                r#"4.5 (in {"id":4.5,"ok":true})"#.into()
            });
        }
        counts.unreadable(NumberField::PublishedAt, || {
            r#"no value (in {"seq":1})"#.into()
        });
        let found: Vec<String> = cell(&r.cells[0]).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            vec![
                "finding [100]: answers to the measured message carried an id wsload could not read as a whole number, so they answered nothing and the messages they answer count as lost: point conversation.message.answer.id (ping.answer.id for a ping) at the field that carries the message's ${seq} back (42, 42.0, 4.2e1 and \"42\" all read), or narrow answer.match to the answers (1200 answers with an unreadable answer.id; e.g. 4.5 (in {\"id\":4.5,\"ok\":true}))",
                "finding [100]: deliveries carried no publish instant wsload could read, so they were counted by when they arrived and left out of the fan-out latency: point conversation.delivery.publishedAt at the field that holds the instant (an integer, a decimal such as 1795864874129.112, an exponent, or a string of one) and set publishedAtUnit to its unit (s, ms, us, ns) (1 delivery with an unreadable delivery.publishedAt; e.g. no value (in {\"seq\":1}))",
            ]
        );
        // Among the run's findings, after the cell's failures.
        let rules: Vec<Rule> = crate::findings::findings(&r)
            .iter()
            .map(|f| f.rule)
            .collect();
        assert_eq!(
            rules,
            [Rule::Failure, Rule::UnreadableField, Rule::UnreadableField]
        );
    }
}
