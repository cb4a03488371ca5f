//! A counting loop's measured message, made from the last one: only the numbers that changed
//! are written over, and the `${seq}` one more than the last is counted up in its own digits.
//!
//! A worker's connections share one [`Prebuilt`] and take turns sending bursts, so from one
//! message to the next the connection number changes once per burst, the send time at most
//! once per burst (one clock read each), and the sequence number is nearly always the last
//! plus one: the per-message work is then the increment of a few decimal digits in place.

use super::out::{Fill, Number, Out, SendTime, decimal_len};
use std::sync::Arc;

/// The numbers a message carries, by [`Number`] as an index.
const NUMBERS: usize = 3;

/// The last message a sender made, what its numbers are and where they are: the next one,
/// if its numbers have as many digits (nearly always), is the same bytes with the changed
/// digits written over, as the echo message's id is. The pad's length depends only on those
/// widths, so it stays.
#[derive(Debug, Default)]
pub struct Prebuilt {
    of: Option<Arc<Out>>,
    bytes: Vec<u8>,
    /// Where each number's digits start, indexed by [`Number`] (a template may repeat one).
    places: [Vec<usize>; NUMBERS],
    /// Each number's digits in `bytes`, indexed by [`Number`].
    widths: [usize; NUMBERS],
    conn: u64,
    seq: u64,
    time: SendTime,
}

impl Prebuilt {
    /// The message of `out` for `fill` at `time`: patched in place when the last one was of
    /// the same template and its numbers kept their widths, else written whole (and its
    /// places noted). Inlined into the sender's loop: the common case is a few compares.
    #[inline]
    pub fn make(&mut self, out: &Arc<Out>, fill: &Fill, time: &SendTime) -> &[u8] {
        let same = self.of.as_ref().is_some_and(|o| Arc::ptr_eq(o, out));
        if !(same && out.patchable() && self.patch(fill, time)) {
            self.rebuild(out, fill, time);
        }
        &self.bytes
    }

    /// Writes over the numbers that changed; `false` when one changed width (the message is
    /// then written whole: what is left half patched is thrown away).
    #[inline]
    fn patch(&mut self, fill: &Fill, time: &SendTime) -> bool {
        if fill.seq != self.seq {
            let counted = self.seq.checked_add(1) == Some(fill.seq) && self.count_seq_up();
            if !counted && !self.write_number(Number::Seq, fill.seq) {
                return false;
            }
            self.seq = fill.seq;
        }
        if fill.conn != self.conn {
            if !self.write_number(Number::Conn, fill.conn) {
                return false;
            }
            self.conn = fill.conn;
        }
        if *time != self.time {
            if !self.write_digits(Number::SendTime, time.as_bytes()) {
                return false;
            }
            self.time = *time;
        }
        true
    }

    /// Adds one to `${seq}` in its digits; `false` when they were all nines (one more digit).
    #[inline]
    fn count_seq_up(&mut self) -> bool {
        let [first, rest @ ..] = &self.places[Number::Seq as usize][..] else {
            return true;
        };
        let digits = *first..*first + self.widths[Number::Seq as usize];
        if !increment_decimal(&mut self.bytes[digits.clone()]) {
            return false;
        }
        for &at in rest {
            self.bytes.copy_within(digits.clone(), at);
        }
        true
    }

    /// Writes `n` in decimal wherever number `kind` is; `false` if its width changed.
    fn write_number(&mut self, kind: Number, n: u64) -> bool {
        if self.places[kind as usize].is_empty() {
            return true;
        }
        let mut digits = itoa::Buffer::new();
        self.write_digits(kind, digits.format(n).as_bytes())
    }

    /// Writes `text` wherever number `kind` is; `false` if it is not as wide as what is there.
    fn write_digits(&mut self, kind: Number, text: &[u8]) -> bool {
        let places = &self.places[kind as usize];
        if places.is_empty() {
            return true;
        }
        if text.len() != self.widths[kind as usize] {
            return false;
        }
        for &at in places {
            self.bytes[at..at + text.len()].copy_from_slice(text);
        }
        true
    }

    /// Writes the message whole, noting where its numbers went and what they are. Once per
    /// burst at most (but for a bytes template with binary numbers, written whole every time,
    /// into the same buffer): kept out of the inlined path.
    #[inline(never)]
    fn rebuild(&mut self, out: &Arc<Out>, fill: &Fill, time: &SendTime) {
        self.bytes.clear();
        for places in &mut self.places {
            places.clear();
        }
        let places = &mut self.places;
        out.write_recording(&mut self.bytes, fill, time, &mut |n, at| {
            places[n as usize].push(at)
        });
        self.of = Some(Arc::clone(out));
        self.widths = [
            decimal_len(fill.conn),
            decimal_len(fill.seq),
            time.as_bytes().len(),
        ];
        self.conn = fill.conn;
        self.seq = fill.seq;
        self.time = *time;
    }
}

/// Adds one to the decimal number `digits` in place (carrying as on paper); `false`, with
/// the digits all zeros, when they were all nines and the sum needs one more digit.
fn increment_decimal(digits: &mut [u8]) -> bool {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Script;

    fn out(text: &str) -> Arc<Out> {
        let spec: wsload_spec::conversation::Conversation =
            serde_json::from_value(serde_json::json!({"message": {"text": text}}))
                .expect("conversation");
        let script = Script::compile(&spec).expect("compiles");
        script.shared_message().expect("a message")
    }

    fn time(us: u64) -> SendTime {
        SendTime::from_micros(us)
    }

    /// Makes every (conn, seq, time) in turn with one `Prebuilt`, each checked against the
    /// same message written whole.
    fn check(out: &Arc<Out>, steps: impl IntoIterator<Item = (u64, u64, u64)>) {
        let mut pre = Prebuilt::default();
        for (conn, seq, us) in steps {
            let fill = Fill {
                conn,
                seq,
                size: 96,
            };
            let t = time(us);
            let mut whole = Vec::new();
            out.write_at(&mut whole, &fill, &t);
            assert_eq!(
                std::str::from_utf8(pre.make(out, &fill, &t)).expect("utf8"),
                std::str::from_utf8(&whole).expect("utf8"),
                "conn {conn} seq {seq} time {us}"
            );
        }
    }

    const T: u64 = 1_764_000_000_000_000;

    #[test]
    fn a_prebuilt_message_is_the_message_written_whole() {
        let out = out(r#"{"id":${seq},"c":${conn},"ts":${sendTime},"d":"${pad}"}"#);
        // Widths the same, then a seq of more digits, then another connection.
        check(
            &out,
            [
                (3, 7, T),
                (3, 8, T),
                (3, 9, T),
                (3, 10, T),
                (3, 11, T),
                (12, 11, T),
                (5, 99_999, T),
            ],
        );
        let mut pre = Prebuilt::default();
        let fill = Fill {
            conn: 1,
            seq: 1,
            size: 96,
        };
        assert_eq!(pre.make(&out, &fill, &time(T)).len(), 96);
    }

    #[test]
    fn seq_counts_up_in_place_across_every_width_change() {
        let out = out(r#"{"id":${seq},"ts":${sendTime},"d":"${pad}"}"#);
        check(&out, (0..=1_200).map(|seq| (1, seq, T)));
        check(&out, (9_990..=10_010).map(|seq| (1, seq, T)));
        check(
            &out,
            (u64::MAX - 12..=u64::MAX).map(|seq| (1, seq, T + seq % 3)),
        );
    }

    #[test]
    fn changed_numbers_are_written_over_and_jumps_are_formatted() {
        let out = out(r#"${conn}:${seq}/${seq}@${sendTime}:${conn} ${pad}"#);
        check(
            &out,
            [
                (7, 98, T),
                (7, 99, T),
                (7, 100, T),
                // Another connection's burst: its own seq, a later clock read.
                (8, 41, T + 5),
                (8, 42, T + 5),
                (9, 42, T + 5),
                (10, 43, T + 6),
                (10, 43, 999),
                (10, 44, 1_000),
                (10, 45, 1_001),
                (10, 7, 1_001),
                (10, 6, 1_001),
                (u64::MAX, 0, 0),
            ],
        );
    }

    #[test]
    fn templates_without_a_number_stay_right() {
        check(&out("only ${seq} here ${pad}"), [(1, 9, T), (2, 10, 5)]);
        check(
            &out("no seq ${conn} ${pad}"),
            [(1, 9, T), (22, 10, 5), (23, 10, 5)],
        );
        check(&out("${sendTime}"), [(1, 9, T), (1, 10, 55), (1, 11, 56)]);
    }

    #[test]
    fn decimal_digits_carry_as_on_paper() {
        for (from, to) in [
            ("0", Some("1")),
            ("8", Some("9")),
            ("1299", Some("1300")),
            ("109", Some("110")),
            ("18446744073709551614", Some("18446744073709551615")),
            ("9", None),
            ("999", None),
        ] {
            let mut d = from.as_bytes().to_vec();
            let fits = increment_decimal(&mut d);
            match to {
                Some(to) => assert!(fits && d == to.as_bytes(), "{from} -> {d:?}"),
                None => assert!(!fits && d.iter().all(|&b| b == b'0'), "{from} -> {d:?}"),
            }
        }
    }
}
