//! Reads one field of a JSON message in place: the walker skips what is not on the path and
//! returns the value's bytes as written, so matching a message costs no allocation and builds
//! no document tree (the load generator runs it on every message a connection receives).
//!
//! Malformed JSON reads as "no such field": a message that is not the JSON a rule expects
//! simply does not match it.

use crate::decimal;

/// A dotted path (`payload.data.id`), compiled once. A segment of digits also selects an
/// array element by index (`items.0.id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    key: Box<[u8]>,
    index: Option<usize>,
    /// The key has no `"` or `\\`: a member name written as the key followed by its closing
    /// quote is this key, without decoding anything.
    plain: bool,
}

/// Why a path is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("is empty; write a dotted path such as id or payload.data.id")]
    Empty,
    #[error(
        "{path:?} has an empty segment; write names separated by single dots (payload.data.id)"
    )]
    EmptySegment { path: String },
}

/// Deeper nesting than this reads as "no such field" rather than costing a long walk.
const MAX_DEPTH: usize = 256;

impl JsonPath {
    pub fn parse(path: &str) -> Result<JsonPath, PathError> {
        if path.is_empty() {
            return Err(PathError::Empty);
        }
        let segments = path
            .split('.')
            .map(|s| {
                if s.is_empty() {
                    return Err(PathError::EmptySegment {
                        path: path.to_string(),
                    });
                }
                let index = s
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| s.parse().ok())
                    .flatten();
                Ok(Segment {
                    key: s.as_bytes().into(),
                    index,
                    plain: !s.contains(['"', '\\']),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(JsonPath { segments })
    }

    /// The field's value as written (a string with its quotes), or `None` when the message
    /// is not JSON or has no such field.
    pub fn find<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        let mut at = skip_ws(data, 0);
        for seg in &self.segments {
            at = match data.get(at)? {
                b'{' => member(data, at + 1, seg)?,
                b'[' => element(data, at + 1, seg.index?)?,
                _ => return None,
            };
        }
        let end = skip_value(data, at)?;
        Some(&data[at..end])
    }
}

/// Where a path's value was last found, for the next message of the same shape: the bytes
/// before it. A message that begins with exactly those bytes has its value at the same place,
/// since the walk reads nothing past the value's start to get there; the walk is then skipped
/// (answers to one template mostly share everything before their id). Per reader, never shared.
#[derive(Debug, Default)]
pub struct Memo {
    prefix: Vec<u8>,
}

/// The longest prefix a [`Memo`] keeps: past it, the walk is cheap next to the comparison.
const MEMO_MAX: usize = 256;

impl JsonPath {
    /// [`JsonPath::find`], first trying where the value was in the last message `memo` saw.
    pub fn find_memo<'a>(&self, data: &'a [u8], memo: &mut Memo) -> Option<&'a [u8]> {
        if let Some(k) = memo.fits(data) {
            let end = skip_value(data, k)?;
            return Some(&data[k..end]);
        }
        let value = self.find(data)?;
        let at = value.as_ptr() as usize - data.as_ptr() as usize;
        memo.prefix.clear();
        if at <= MEMO_MAX {
            memo.prefix.extend_from_slice(&data[..at]);
        }
        Some(value)
    }

    /// The field's value as a number of the form `wanted` (any JSON form, or a string holding
    /// one, as [`decimal::read`] reads it), as [`JsonPath::find_memo`] finds it. Where `memo`
    /// knows the place, a plain integer's digits are read as it is delimited: one pass over
    /// them instead of one to find its end and one to read it. Inlined into the load
    /// generator's readers of answers and deliveries, which call it for each.
    #[inline]
    pub fn find_number_memo(
        &self,
        data: &[u8],
        memo: &mut Memo,
        wanted: decimal::Wanted,
    ) -> Result<u64, NoNumber> {
        let value = match memo.fits(data) {
            Some(k) => {
                if let Some((n, used)) = decimal::leading_u64(&data[k..])
                    // What follows the digits is in the value too unless it ends a scalar.
                    && data.get(k + used).is_none_or(|&b| ends_scalar(b))
                {
                    return wanted.of_integer(n).ok_or(NoNumber::Unreadable);
                }
                let end = skip_value(data, k).ok_or(NoNumber::Missing)?;
                &data[k..end]
            }
            None => self.find_memo(data, memo).ok_or(NoNumber::Missing)?,
        };
        decimal::read(unquoted(value), wanted).ok_or(NoNumber::Unreadable)
    }
}

/// Why a field gave no number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoNumber {
    /// No such field (or the message is not JSON where the path goes).
    Missing,
    /// A value, but not a number of the form wanted (`4.5` for an id, `-1`, `"abc"`, `null`).
    Unreadable,
}

impl Memo {
    /// Where the value is in `data`, if `data` begins with the remembered bytes.
    #[inline]
    fn fits(&self, data: &[u8]) -> Option<usize> {
        let k = self.prefix.len();
        (k > 0 && data.len() > k && data[..k] == self.prefix[..]).then_some(k)
    }
}

/// The text of a value as [`JsonPath::find`] returns it: a string without its quotes
/// (escapes kept as written), anything else as is.
pub fn unquoted(value: &[u8]) -> &[u8] {
    match value {
        [b'"', inner @ .., b'"'] => inner,
        _ => value,
    }
}

/// Whether a value as [`JsonPath::find`] returns it equals `expected`: a string by its
/// decoded text (so `"a\/b"` equals `a/b`), anything else as written.
pub fn value_equals(value: &[u8], expected: &[u8]) -> bool {
    match value {
        [b'"', inner @ .., b'"'] => string_equals(inner, expected),
        _ => value == expected,
    }
}

/// Compares a JSON string's contents (between the quotes) with UTF-8 text, decoding escapes
/// on the fly instead of into a buffer.
fn string_equals(raw: &[u8], expected: &[u8]) -> bool {
    // As written is the common case, and a string without escapes is only that.
    if raw == expected {
        return true;
    }
    if !raw.contains(&b'\\') {
        return false;
    }
    let mut i = 0;
    let mut j = 0;
    while i < raw.len() {
        if raw[i] != b'\\' {
            if expected.get(j) != Some(&raw[i]) {
                return false;
            }
            i += 1;
            j += 1;
            continue;
        }
        let Some((c, used)) = escape(&raw[i..]) else {
            return false;
        };
        let mut buf = [0u8; 4];
        let enc = c.encode_utf8(&mut buf).as_bytes();
        if expected.get(j..j + enc.len()) != Some(enc) {
            return false;
        }
        i += used;
        j += enc.len();
    }
    j == expected.len()
}

/// One escape sequence at the start of `s` (which starts with `\`): the character and how
/// many bytes it took.
fn escape(s: &[u8]) -> Option<(char, usize)> {
    let c = match s.get(1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let hi = hex4(s.get(2..6)?)?;
            if (0xD800..0xDC00).contains(&hi) {
                if s.get(6..8)? != b"\\u" {
                    return None;
                }
                let lo = hex4(s.get(8..12)?)?;
                let cp = 0x10000 + ((hi - 0xD800) << 10) + lo.checked_sub(0xDC00)?;
                return Some((char::from_u32(cp)?, 12));
            }
            return Some((char::from_u32(hi)?, 6));
        }
        _ => return None,
    };
    Some((c, 2))
}

fn hex4(h: &[u8]) -> Option<u32> {
    std::str::from_utf8(h)
        .ok()
        .and_then(|h| u32::from_str_radix(h, 16).ok())
}

fn skip_ws(data: &[u8], mut at: usize) -> usize {
    while data
        .get(at)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        at += 1;
    }
    at
}

/// In an object whose `{` is just before `at`: where the value of member `seg` starts.
fn member(data: &[u8], at: usize, seg: &Segment) -> Option<usize> {
    let key = &*seg.key;
    let mut at = skip_ws(data, at);
    if data.get(at)? == &b'}' {
        return None;
    }
    loop {
        if data.get(at)? != &b'"' {
            return None;
        }
        let after = &data[at + 1..];
        let (key_end, found) =
            if seg.plain && after.starts_with(key) && after.get(key.len()) == Some(&b'"') {
                (at + key.len() + 2, true)
            } else {
                let end = skip_string(data, at)?;
                (end, string_equals(&data[at + 1..end - 1], key))
            };
        at = skip_ws(data, key_end);
        if data.get(at)? != &b':' {
            return None;
        }
        at = skip_ws(data, at + 1);
        if found {
            return Some(at);
        }
        at = skip_ws(data, skip_value(data, at)?);
        match data.get(at)? {
            b',' => at = skip_ws(data, at + 1),
            _ => return None,
        }
    }
}

/// In an array whose `[` is just before `at`: where element `index` starts.
fn element(data: &[u8], at: usize, index: usize) -> Option<usize> {
    let mut at = skip_ws(data, at);
    if data.get(at)? == &b']' {
        return None;
    }
    for _ in 0..index {
        at = skip_ws(data, skip_value(data, at)?);
        match data.get(at)? {
            b',' => at = skip_ws(data, at + 1),
            _ => return None,
        }
    }
    Some(at)
}

/// The end of the string whose opening quote is at `at` (just past its closing quote).
fn skip_string(data: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        match data.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// Whether `b` ends a number, `true`, `false` or `null` (what may follow one).
#[inline]
fn ends_scalar(b: u8) -> bool {
    matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
}

/// The end of the value starting at `at`. Containers are skipped by counting brackets
/// (strings aside), without recursion.
fn skip_value(data: &[u8], at: usize) -> Option<usize> {
    match data.get(at)? {
        b'"' => skip_string(data, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match data.get(i)? {
                    b'"' => {
                        i = skip_string(data, i)?;
                        continue;
                    }
                    b'{' | b'[' => {
                        depth += 1;
                        if depth > MAX_DEPTH {
                            return None;
                        }
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = data[at..]
                .iter()
                .position(|&b| ends_scalar(b))
                .unwrap_or(data.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(path: &str, data: &'a str) -> Option<&'a str> {
        let p = JsonPath::parse(path).expect("path");
        p.find(data.as_bytes())
            .map(|v| std::str::from_utf8(v).expect("utf8"))
    }

    #[test]
    fn reads_nested_fields_and_array_elements_as_written() {
        let doc = r#" { "type" : "next", "id": 17, "payload": {"data": {"x": [1, {"id": "a\"b"}]}},
            "ok": true, "n": null, "f": -1.5e3 } "#;
        assert_eq!(find("type", doc), Some(r#""next""#));
        assert_eq!(find("id", doc), Some("17"));
        assert_eq!(find("payload.data.x.1.id", doc), Some(r#""a\"b""#));
        assert_eq!(find("payload.data.x.0", doc), Some("1"));
        assert_eq!(
            find("payload.data", doc),
            Some(r#"{"x": [1, {"id": "a\"b"}]}"#)
        );
        assert_eq!(find("ok", doc), Some("true"));
        assert_eq!(find("n", doc), Some("null"));
        assert_eq!(find("f", doc), Some("-1.5e3"));
        assert_eq!(find("0", r#"["event", {"a": 1}]"#), Some(r#""event""#));
        assert_eq!(find("1.a", r#"["event", {"a": 1}]"#), Some("1"));
        // A name written with escapes is still the key; a longer one is not.
        assert_eq!(find("id", r#"{"\u0069d": 5}"#), Some("5"));
        assert_eq!(find("id", r#"{"idx": 1, "id\"": 2, "id": 3}"#), Some("3"));
    }

    #[test]
    fn missing_fields_and_broken_json_read_as_none() {
        for (path, doc) in [
            ("id", r#"{"ID": 1}"#),
            ("id", r#"{"x": {"id": 1}}"#),
            ("a.b", r#"{"a": 5}"#),
            ("2", "[1, 2]"),
            ("x", "[1, 2]"),
            ("id", "2probe"),
            ("id", r#"{"id""#),
            ("id", r#"{"id": "unterminated"#),
            ("id", r#"{"a": [1, 2, "id": 3}"#),
            ("id", ""),
            ("id", "{}"),
            ("0", "[]"),
        ] {
            assert_eq!(find(path, doc), None, "{path} in {doc}");
        }
        // Past the field, the rest of the message is not looked at.
        assert_eq!(find("id", r#"{"id": 1, garbage"#), Some("1"));
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(find("x", &format!(r#"{{"a": {deep}, "x": 1}}"#)), None);
    }

    #[test]
    fn strings_compare_by_their_decoded_text() {
        assert!(value_equals(br#""pong""#, b"pong"));
        assert!(!value_equals(br#""pong""#, b"pon"));
        assert!(value_equals(br#""a\/b\n""#, b"a/b\n"));
        assert!(value_equals(br#""\u00e9\ud83d\ude00""#, "é😀".as_bytes()));
        assert!(!value_equals(br#""\u00e9""#, b"e"));
        assert!(!value_equals(br#""bad\q""#, b"badq"));
        assert!(value_equals(b"42", b"42"));
        assert!(!value_equals(b"42", br#""42""#));
        assert_eq!(unquoted(br#""s-1""#), b"s-1");
        assert_eq!(unquoted(b"7"), b"7");
    }

    #[test]
    fn a_memo_finds_what_the_walk_finds() {
        let p = JsonPath::parse("id").expect("path");
        let mut memo = Memo::default();
        let msgs: [&[u8]; 7] = [
            br#"{"type":"msg","id":12,"d":"x"}"#,
            br#"{"type":"msg","id":1234567,"d":"x"}"#,
            // Same bytes up to where the id was, then another shape: the value read there.
            br#"{"type":"msg","id":"s1"}"#,
            br#"{"type":"msg","id":{"n":1}}"#,
            // Another shape entirely: walked again.
            br#"{"id":7}"#,
            br#"{"type":"ms","id":8}"#,
            br#"{"type":"msg","x":{"id":9},"id":10}"#,
        ];
        for m in msgs {
            assert_eq!(
                p.find_memo(m, &mut memo),
                p.find(m),
                "{}",
                String::from_utf8_lossy(m)
            );
        }
        // A message cut short where the value would be is not a value.
        let mut memo = Memo::default();
        assert_eq!(
            p.find_memo(br#"{"a":1,"id":2}"#, &mut memo),
            Some(&b"2"[..])
        );
        assert_eq!(p.find_memo(br#"{"a":1,"id":"#, &mut memo), None);
    }

    #[test]
    fn a_number_read_through_the_memo_is_the_number_found() {
        let p = JsonPath::parse("id").expect("path");
        let msgs: [&[u8]; 24] = [
            br#"{"type":"msg","id":12,"d":"x"}"#,
            br#"{"type":"msg","id":1234567,"d":"x"}"#,
            br#"{"type":"msg","id":007}"#,
            br#"{"type":"msg","id":5 ,"d":1}"#,
            br#"{"type":"msg","id":6]"#,
            br#"{"type":"msg","id":7"#,
            br#"{"type":"msg","id":"42"}"#,
            br#"{"type":"msg","id":12a,"d":"x"}"#,
            br#"{"type":"msg","id":1.5}"#,
            br#"{"type":"msg","id":15.0}"#,
            br#"{"type":"msg","id":1.5e1,"d":1}"#,
            br#"{"type":"msg","id":"1.5"}"#,
            br#"{"type":"msg","id":-3}"#,
            br#"{"type":"msg","id":NaN}"#,
            br#"{"type":"msg","id":null}"#,
            br#"{"type":"msg","id":9999999999999999999}"#,
            br#"{"type":"msg","id":18446744073709551615}"#,
            br#"{"type":"msg","id":18446744073709551616}"#,
            br#"{"type":"msg","id":123456789012345678901}"#,
            br#"{"type":"ms","id":8}"#,
            br#"{"id":{"n":1}}"#,
            br#"{"type":"msg","x":1}"#,
            br#"{"type":"msg","id":"#,
            b"not json",
        ];
        for wanted in [decimal::Wanted::Whole, decimal::Wanted::Scaled(3)] {
            let mut memo = Memo::default();
            for m in msgs {
                let walked = match p.find(m) {
                    None => Err(NoNumber::Missing),
                    Some(v) => decimal::read(unquoted(v), wanted).ok_or(NoNumber::Unreadable),
                };
                assert_eq!(
                    p.find_number_memo(m, &mut memo, wanted),
                    walked,
                    "{} {wanted:?}",
                    String::from_utf8_lossy(m)
                );
            }
        }
        let mut memo = Memo::default();
        let whole = decimal::Wanted::Whole;
        for (m, want) in [
            (&br#"{"type":"msg","id":12,"d":"x"}"#[..], Ok(12)),
            (br#"{"type":"msg","id":15.0,"d":"x"}"#, Ok(15)),
            (br#"{"type":"msg","id":1.5e1}"#, Ok(15)),
            (br#"{"type":"msg","id":"16"}"#, Ok(16)),
            (br#"{"type":"msg","id":4.5}"#, Err(NoNumber::Unreadable)),
            (br#"{"type":"msg","id":-1}"#, Err(NoNumber::Unreadable)),
            (br#"{"type":"msg"}"#, Err(NoNumber::Missing)),
        ] {
            assert_eq!(
                p.find_number_memo(m, &mut memo, whole),
                want,
                "{}",
                String::from_utf8_lossy(m)
            );
        }
    }

    #[test]
    fn bad_paths_are_refused() {
        assert_eq!(JsonPath::parse(""), Err(PathError::Empty));
        assert!(matches!(
            JsonPath::parse("a..b"),
            Err(PathError::EmptySegment { .. })
        ));
        assert!(JsonPath::parse("a.0.b").is_ok());
    }
}
