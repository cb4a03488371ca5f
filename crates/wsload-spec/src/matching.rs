//! [`Match`] and [`Capture`] compiled once into what runs on every message: a matcher and an
//! extractor. Neither allocates per message: JSON is read in place ([`crate::json_path`]),
//! regular expressions run on the bytes, a binary field is read at its offset.
//!
//! Where a message's JSON begins, when a match has a `prefix`, is decided once, from the
//! prefix alone ([`json_start`]): at the prefix's first `{` or `[` (the prefix is the JSON's
//! own start: `{"push"`, `42["tick"`), else right after the prefix (a header before the JSON:
//! Socket.IO's `42`, Engine.IO's `0`). A match's `json` and the captures that go with it
//! read from there alike.

use crate::conversation::{Capture, FrameType, MAX_CAPTURE_AT, Match};
use crate::decimal;
use crate::json_path::{self, JsonPath, NoNumber, PathError};
use crate::template::Width;
use crate::template::bytes::{self, BytesError};
use regex::bytes::Regex;

/// Why a match or a capture does not compile. [`MatchError::field`] is the sub-field at fault
/// (`regex`, `json.field`), for the caller to append to the rule's path.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MatchError {
    #[error("{regex:?} does not compile: {}; see https://docs.rs/regex/#syntax", short(.source))]
    Regex {
        field: &'static str,
        regex: String,
        #[source]
        source: regex::Error,
    },
    #[error("{source}")]
    Path {
        field: &'static str,
        #[source]
        source: PathError,
    },
    #[error(
        "{regex:?} has no group to capture; put the value in parentheses, e.g. \"sid\":\"([^\"]+)\""
    )]
    NoGroup { regex: String },
    #[error(
        "set exactly one of json (a field's dotted path, e.g. data.sid), regex (a regular expression whose first group is the value) or at (a binary field's offset, with its width)"
    )]
    CaptureNeedsOne,
    #[error("{source}")]
    Bytes {
        #[source]
        source: BytesError,
    },
    #[error("{}", crate::cel::MSG_AT_WIDTH)]
    Width,
    #[error("{at}: at most {MAX_CAPTURE_AT}, a binary field being in a message's first bytes")]
    AtTooFar { at: u32 },
}

impl MatchError {
    /// The sub-field the error is about, if it is about one rather than the whole rule.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            MatchError::Regex { field, .. } | MatchError::Path { field, .. } => Some(field),
            MatchError::NoGroup { .. } => Some("regex"),
            MatchError::Bytes { .. } => Some("bytes"),
            MatchError::Width => Some("width"),
            MatchError::AtTooFar { .. } => Some("at"),
            MatchError::CaptureNeedsOne => None,
        }
    }
}

/// The regex crate's message without its multi-line pointer at the pattern: the line saying
/// what is wrong.
fn short(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map_or_else(|| text.trim().replace('\n', " "), str::to_string)
}

fn regex(field: &'static str, pattern: &str) -> Result<Regex, MatchError> {
    Regex::new(pattern).map_err(|source| MatchError::Regex {
        field,
        regex: pattern.to_string(),
        source,
    })
}

/// Where the JSON of a message that starts with `prefix` begins: at the prefix's first `{`
/// or `[`, else right after it (see the module's doc).
pub fn json_start(prefix: &[u8]) -> usize {
    prefix
        .iter()
        .position(|b| matches!(b, b'{' | b'['))
        .unwrap_or(prefix.len())
}

/// A compiled [`Match`]: every condition given must hold.
#[derive(Debug, Clone)]
pub struct Matcher {
    frame: Option<FrameType>,
    equals: Option<Box<[u8]>>,
    prefix: Option<Box<[u8]>>,
    /// Where the JSON of a message that has the prefix begins ([`json_start`]).
    json_from: usize,
    bytes: Option<Box<[u8]>>,
    json: Option<(JsonPath, Box<[u8]>)>,
    regex: Option<Regex>,
}

impl Matcher {
    pub fn compile(m: &Match) -> Result<Matcher, MatchError> {
        let json = match &m.json {
            Some(j) => Some((
                JsonPath::parse(&j.field).map_err(|source| MatchError::Path {
                    field: "json.field",
                    source,
                })?,
                j.equals.as_bytes().into(),
            )),
            None => None,
        };
        Ok(Matcher {
            frame: m.frame,
            equals: m.equals.as_deref().map(|s| s.as_bytes().into()),
            prefix: m.prefix.as_deref().map(|s| s.as_bytes().into()),
            json_from: m.prefix.as_deref().map_or(0, |p| json_start(p.as_bytes())),
            bytes: m
                .bytes
                .as_deref()
                .map(|b| bytes::fixed(b).map(Vec::into_boxed_slice))
                .transpose()
                .map_err(|source| MatchError::Bytes { source })?,
            json,
            regex: m.regex.as_deref().map(|r| regex("regex", r)).transpose()?,
        })
    }

    /// Whether a message (a text frame if `text`, else binary) matches.
    pub fn matches(&self, text: bool, data: &[u8]) -> bool {
        if let Some(f) = self.frame
            && (f == FrameType::Text) != text
        {
            return false;
        }
        if self.equals.as_deref().is_some_and(|e| e != data) {
            return false;
        }
        if self.bytes.as_deref().is_some_and(|b| !data.starts_with(b)) {
            return false;
        }
        if self.prefix.as_deref().is_some_and(|p| !data.starts_with(p)) {
            return false;
        }
        if let Some((path, want)) = &self.json
            && !path
                .find(data.get(self.json_from..).unwrap_or_default())
                .is_some_and(|v| json_path::value_equals(v, want))
        {
            return false;
        }
        self.regex.as_ref().is_none_or(|r| r.is_match(data))
    }
}

/// A compiled [`Capture`]: where a value is in a message.
#[derive(Debug, Clone)]
pub struct Extractor {
    /// The match's prefix, where the JSON begins after it (`None`: the message is read
    /// whole, as it is when the JSON begins at the prefix's first byte).
    after: Option<(Box<[u8]>, usize)>,
    how: Extract,
}

#[derive(Debug, Clone)]
enum Extract {
    Json(JsonPath),
    Regex(Regex),
    /// `width` bytes at offset `at`.
    At {
        at: usize,
        width: Width,
    },
}

impl Extractor {
    /// `prefix` is the match's that goes with the capture: a message that starts with it has
    /// its JSON read from where [`json_start`] says.
    pub fn compile(c: &Capture, prefix: Option<&str>) -> Result<Extractor, MatchError> {
        let how = match (&c.json, &c.regex) {
            _ if c.at.is_some() || c.width.is_some() => {
                let (Some(at), Some(width)) = (c.at, c.width) else {
                    return Err(MatchError::Width);
                };
                if c.json.is_some() || c.regex.is_some() {
                    return Err(MatchError::CaptureNeedsOne);
                }
                let width = Width::of_bytes(u64::from(width)).ok_or(MatchError::Width)?;
                if at > MAX_CAPTURE_AT {
                    return Err(MatchError::AtTooFar { at });
                }
                Extract::At {
                    at: at as usize,
                    width,
                }
            }
            (Some(path), None) => {
                Extract::Json(JsonPath::parse(path).map_err(|source| MatchError::Path {
                    field: "json",
                    source,
                })?)
            }
            (None, Some(pattern)) => {
                let re = regex("regex", pattern)?;
                if re.captures_len() < 2 {
                    return Err(MatchError::NoGroup {
                        regex: pattern.clone(),
                    });
                }
                Extract::Regex(re)
            }
            _ => return Err(MatchError::CaptureNeedsOne),
        };
        let after = prefix
            .map(str::as_bytes)
            .map(|p| (p, json_start(p)))
            .filter(|&(_, from)| from > 0)
            .map(|(p, from)| (p.into(), from));
        Ok(Extractor { after, how })
    }

    /// The value: a JSON string without its quotes (escapes as written, ready to splice into
    /// another JSON template), another JSON value as written, or the regex's first group.
    /// A message that does not start with the prefix is read whole.
    pub fn extract<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        let value = self.as_written(data)?;
        Some(match self.how {
            Extract::Json(_) => json_path::unquoted(value),
            Extract::Regex(_) | Extract::At { .. } => value,
        })
    }

    /// The value as the message writes it: a JSON string with its quotes, another JSON value
    /// or the regex's first group, as is (what a report shows of a value it could not read).
    pub fn as_written<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        match &self.how {
            Extract::Json(path) => path.find(self.body(data)),
            Extract::Regex(re) => re.captures(data)?.get(1).map(|m| m.as_bytes()),
            Extract::At { at, width } => data.get(*at..at + width.bytes()),
        }
    }

    /// [`Extractor::extract`], remembering where a JSON field was in `memo` (see
    /// [`json_path::Memo`]): what a reader of many answers of one shape calls.
    pub fn extract_memo<'a>(&self, data: &'a [u8], memo: &mut json_path::Memo) -> Option<&'a [u8]> {
        match &self.how {
            Extract::Json(path) => path
                .find_memo(self.body(data), memo)
                .map(json_path::unquoted),
            Extract::Regex(_) | Extract::At { .. } => self.extract(data),
        }
    }

    /// The value as a number of the form `wanted`, in any form a server writes one
    /// ([`decimal::read`]): a measured message's `${seq}` as its answer carries it, a
    /// delivery's sequence number and publish instant. [`NoNumber::Missing`] when there is no
    /// value (the field, or the regex's match), [`NoNumber::Unreadable`] when the value is not
    /// such a number.
    #[inline]
    pub fn extract_number_memo(
        &self,
        data: &[u8],
        memo: &mut json_path::Memo,
        wanted: decimal::Wanted,
    ) -> Result<u64, NoNumber> {
        match &self.how {
            Extract::Json(path) => path.find_number_memo(self.body(data), memo, wanted),
            Extract::Regex(_) => {
                let value = self.extract(data).ok_or(NoNumber::Missing)?;
                decimal::read(value, wanted).ok_or(NoNumber::Unreadable)
            }
            // A binary field: its bytes, big-endian.
            Extract::At { .. } => Ok(self
                .extract(data)
                .ok_or(NoNumber::Missing)?
                .iter()
                .fold(0u64, |n, b| (n << 8) | u64::from(*b))),
        }
    }

    /// What a JSON field is read from: a message with the prefix from where its JSON begins,
    /// any other whole.
    #[inline]
    fn body<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        match &self.after {
            Some((p, from)) if data.starts_with(p) => &data[*from..],
            _ => data,
        }
    }

    /// Whether it reads a JSON field (else a regular expression or a binary field).
    pub fn is_json(&self) -> bool {
        matches!(self.how, Extract::Json(_))
    }

    /// Whether it reads a binary field at an offset (its value is bytes, not text).
    pub fn is_binary(&self) -> bool {
        matches!(self.how, Extract::At { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::JsonField;

    fn matcher(m: Match) -> Matcher {
        Matcher::compile(&m).expect("compiles")
    }

    #[test]
    fn every_condition_given_must_hold() {
        let any = matcher(Match::default());
        assert!(any.matches(true, b"x") && any.matches(false, b""));
        let ping = matcher(Match {
            equals: Some("2".into()),
            ..Match::default()
        });
        assert!(ping.matches(true, b"2") && !ping.matches(true, b"22"));
        let text_only = matcher(Match {
            equals: Some("2".into()),
            frame: Some(FrameType::Text),
            ..Match::default()
        });
        assert!(!text_only.matches(false, b"2"));
        let binary_only = matcher(Match {
            frame: Some(FrameType::Binary),
            ..Match::default()
        });
        assert!(binary_only.matches(false, b"2") && !binary_only.matches(true, b"2"));
        let re = matcher(Match {
            prefix: Some("MESSAGE".into()),
            regex: Some(r"subscription:sub-\d+".into()),
            ..Match::default()
        });
        assert!(re.matches(true, b"MESSAGE\nsubscription:sub-0\n\nhi\0"));
        assert!(!re.matches(true, b"RECEIPT\nsubscription:sub-0\n"));
        assert!(!re.matches(true, b"MESSAGE\nsubscription:sub-x\n"));
    }

    #[test]
    fn json_fields_are_read_after_the_prefix() {
        let sio = matcher(Match {
            prefix: Some("42".into()),
            json: Some(JsonField {
                field: "0".into(),
                equals: "tick".into(),
            }),
            ..Match::default()
        });
        assert!(sio.matches(true, br#"42["tick",{"n":1}]"#));
        assert!(!sio.matches(true, br#"42["tock",{"n":1}]"#));
        assert!(!sio.matches(true, br#"43["tick"]"#));
        let gql = matcher(Match {
            json: Some(JsonField {
                field: "type".into(),
                equals: "connection_ack".into(),
            }),
            ..Match::default()
        });
        assert!(gql.matches(true, br#"{"type":"connection_ack"}"#));
        assert!(!gql.matches(true, br#"{"type":"ping"}"#));
        assert!(!gql.matches(true, b"not json"));
        let num = matcher(Match {
            json: Some(JsonField {
                field: "id".into(),
                equals: "3".into(),
            }),
            ..Match::default()
        });
        assert!(num.matches(true, br#"{"jsonrpc":"2.0","id":3}"#));
        // A string field equals the value as text, so "3" is 3 too.
        assert!(num.matches(true, br#"{"id":"3"}"#));
        assert!(!num.matches(true, br#"{"id":30}"#));
    }

    fn json_capture(path: &str, prefix: Option<&str>) -> Extractor {
        let c = Capture {
            json: Some(path.into()),
            ..Capture::default()
        };
        Extractor::compile(&c, prefix).expect("compiles")
    }

    #[test]
    fn json_begins_at_the_prefix_s_first_bracket_else_after_it() {
        assert_eq!(json_start(b"42"), 2);
        assert_eq!(json_start(b"0"), 1);
        assert_eq!(json_start(b"MESSAGE\n"), 8);
        assert_eq!(json_start(br#"{"push""#), 0);
        assert_eq!(json_start(br#"42["tick""#), 2);
        assert_eq!(json_start(br#"[1,"#), 0);
        // A whole JSON message whose prefix is its start: read from its first byte, by the
        // match and by its captures alike (before: from after the prefix, `":true,...`,
        // which is no JSON, so every field was missing).
        let push = br#"{"push":true,"seq":5,"ts":17.5}"#;
        let m = matcher(Match {
            prefix: Some(r#"{"push""#.into()),
            json: Some(JsonField {
                field: "push".into(),
                equals: "true".into(),
            }),
            ..Match::default()
        });
        assert!(m.matches(true, push));
        assert!(!m.matches(true, br#"{"pull":true,"push":true}"#));
        let seq = json_capture("seq", Some(r#"{"push""#));
        assert_eq!(seq.extract(push), Some(&b"5"[..]));
        assert_eq!(seq.as_written(push), Some(&b"5"[..]));
        let mut memo = json_path::Memo::default();
        assert_eq!(
            seq.extract_number_memo(push, &mut memo, decimal::Wanted::Whole),
            Ok(5)
        );
        let ts = json_capture("ts", Some(r#"{"push""#));
        assert_eq!(
            ts.extract_number_memo(
                push,
                &mut json_path::Memo::default(),
                decimal::Wanted::Scaled(3)
            ),
            Ok(17_500)
        );
        // An array message likewise (Phoenix's `[join_ref, ref, topic, event, payload]`).
        let phx = json_capture("4.seq", Some(r#"[null,"#));
        assert_eq!(
            phx.extract(br#"[null,null,"room:1","tick",{"seq":9}]"#),
            Some(&b"9"[..])
        );
        // A header before the JSON: read after it (Socket.IO's event, Engine.IO's open).
        let sio = json_capture("1.seq", Some("42"));
        assert_eq!(sio.extract(br#"42["tick",{"seq":7}]"#), Some(&b"7"[..]));
        let m = matcher(Match {
            prefix: Some("42".into()),
            json: Some(JsonField {
                field: "1.seq".into(),
                equals: "7".into(),
            }),
            ..Match::default()
        });
        assert!(m.matches(true, br#"42["tick",{"seq":7}]"#));
        // A prefix that runs into the JSON: the JSON starts at its bracket.
        let sio = json_capture("1.seq", Some(r#"42["tick""#));
        assert_eq!(sio.extract(br#"42["tick",{"seq":8}]"#), Some(&b"8"[..]));
        let m = matcher(Match {
            prefix: Some(r#"42["tick""#.into()),
            json: Some(JsonField {
                field: "0".into(),
                equals: "tick".into(),
            }),
            ..Match::default()
        });
        assert!(m.matches(true, br#"42["tick",{"seq":8}]"#));
        // A message without the prefix is read whole.
        assert_eq!(sio.extract(br#"["x",{"seq":3}]"#), Some(&b"3"[..]));
    }

    #[test]
    fn a_value_that_is_no_number_is_told_from_a_missing_one() {
        let mut memo = json_path::Memo::default();
        let whole = decimal::Wanted::Whole;
        let id = json_capture("id", None);
        assert_eq!(
            id.extract_number_memo(br#"{"id":"12"}"#, &mut memo, whole),
            Ok(12)
        );
        assert_eq!(
            id.extract_number_memo(br#"{"id":1.2e1}"#, &mut memo, whole),
            Ok(12)
        );
        assert_eq!(
            id.extract_number_memo(br#"{"id":4.5}"#, &mut memo, whole),
            Err(NoNumber::Unreadable)
        );
        assert_eq!(id.as_written(br#"{"id":"4.5"}"#), Some(&br#""4.5""#[..]));
        assert_eq!(
            id.extract_number_memo(br#"{"di":4}"#, &mut memo, whole),
            Err(NoNumber::Missing)
        );
        let ack = Extractor::compile(
            &Capture {
                regex: Some(r"^43(\S+)\[".into()),
                ..Capture::default()
            },
            None,
        )
        .expect("compiles");
        assert_eq!(
            ack.extract_number_memo(b"4317.0[]", &mut memo, whole),
            Ok(17)
        );
        assert_eq!(
            ack.extract_number_memo(b"43x[]", &mut memo, whole),
            Err(NoNumber::Unreadable)
        );
        assert_eq!(
            ack.extract_number_memo(b"42[]", &mut memo, whole),
            Err(NoNumber::Missing)
        );
        // A regex group keeps its quotes: only a JSON string is unquoted.
        let quoted = Extractor::compile(
            &Capture {
                regex: Some(r#"sid=("[^"]*")"#.into()),
                ..Capture::default()
            },
            None,
        )
        .expect("compiles");
        assert_eq!(quoted.extract(br#"sid="a""#), Some(&br#""a""#[..]));
    }

    #[test]
    fn captures_take_a_json_value_or_a_regex_group() {
        let sid = Extractor::compile(
            &Capture {
                json: Some("sid".into()),
                regex: None,
                ..Capture::default()
            },
            Some("0"),
        )
        .expect("compiles");
        assert_eq!(
            sid.extract(br#"0{"sid":"Ab-1","pingInterval":5000}"#),
            Some(&b"Ab-1"[..])
        );
        assert_eq!(sid.extract(br#"{"sid":"whole"}"#), Some(&b"whole"[..]));
        assert_eq!(sid.extract(b"0{}"), None);
        let id = Extractor::compile(
            &Capture {
                json: Some("id".into()),
                regex: None,
                ..Capture::default()
            },
            None,
        )
        .expect("compiles");
        assert_eq!(id.extract(br#"{"id":12345}"#), Some(&b"12345"[..]));
        assert!(id.is_json());
        let ack = Extractor::compile(
            &Capture {
                json: None,
                regex: Some(r"^43(\d+)".into()),
                ..Capture::default()
            },
            None,
        )
        .expect("compiles");
        assert_eq!(ack.extract(b"4317[\"ok\"]"), Some(&b"17"[..]));
        assert_eq!(ack.extract(b"42[\"ok\"]"), None);
        assert!(!ack.is_json());
    }

    /// A capture of the binary field `width` bytes `at`.
    fn field(at: Option<u32>, width: Option<u8>) -> Result<Extractor, MatchError> {
        let c = Capture {
            at,
            width,
            ..Capture::default()
        };
        Extractor::compile(&c, None)
    }

    #[test]
    fn binary_messages_match_by_their_first_bytes_and_give_fields_at_offsets() {
        let puback = matcher(Match {
            bytes: Some("40 02".into()),
            ..Match::default()
        });
        assert!(puback.matches(false, &[0x40, 0x02, 0x00, 0x07]));
        assert!(puback.matches(true, &[0x40, 0x02]), "either frame kind");
        assert!(!puback.matches(false, &[0x40]) && !puback.matches(false, &[0xd0, 0x00]));
        let quoted = matcher(Match {
            bytes: Some(r#"30 "x""#.into()),
            frame: Some(FrameType::Binary),
            ..Match::default()
        });
        // 0x30 is "0".
        assert!(quoted.matches(false, b"0x..."));
        assert!(!quoted.matches(false, b"0y") && !quoted.matches(true, b"0x"));
        // The packet id of a PUBACK, bytes 2..4 big-endian: a number, and its bytes.
        let id = field(Some(2), Some(2)).expect("compiles");
        let ack = [0x40, 0x02, 0x01, 0x2C];
        assert_eq!(id.extract(&ack), Some(&ack[2..]));
        assert_eq!(
            id.extract_number_memo(
                &ack,
                &mut json_path::Memo::default(),
                decimal::Wanted::Whole
            ),
            Ok(300)
        );
        assert_eq!(id.extract(&ack[..3]), None, "too short: no field");
        assert!(id.is_binary() && !id.is_json());
        for (width, want) in [(1, 0x40), (4, 0x4002_012C), (8, 0x4002_012C_0000_0000)] {
            let x = field(Some(0), Some(width)).expect("compiles");
            let mut data = ack.to_vec();
            data.extend_from_slice(&[0; 4]);
            assert_eq!(
                x.extract_number_memo(
                    &data,
                    &mut json_path::Memo::default(),
                    decimal::Wanted::Whole
                ),
                Ok(want),
                "width {width}"
            );
        }
        // JSON carried inside a binary message (an MQTT PUBLISH's payload): a regex on bytes.
        let seq = Extractor::compile(
            &Capture {
                regex: Some(r#""seq":(\d+)"#.into()),
                ..Capture::default()
            },
            None,
        )
        .expect("compiles");
        let publish = b"\x30\x13\x00\x03t/1{\"seq\":42,\"ts\":1}";
        assert_eq!(
            seq.extract_number_memo(
                publish,
                &mut json_path::Memo::default(),
                decimal::Wanted::Whole
            ),
            Ok(42)
        );
    }

    #[test]
    fn binary_fields_say_what_to_fix() {
        let e = Matcher::compile(&Match {
            bytes: Some("40 0".into()),
            ..Match::default()
        })
        .expect_err("odd hex");
        assert_eq!(e.field(), Some("bytes"));
        assert!(e.to_string().contains("two digits"), "{e}");
        for (at, width) in [(Some(2), None), (None, Some(2)), (Some(2), Some(3))] {
            let e = field(at, width).expect_err("width");
            assert_eq!(e.field(), Some("width"), "{at:?} {width:?}");
            assert_eq!(e.to_string(), crate::cel::MSG_AT_WIDTH);
        }
        let e = field(Some(MAX_CAPTURE_AT + 1), Some(2)).expect_err("far");
        assert_eq!(e.field(), Some("at"));
        assert_eq!(
            e.to_string(),
            "1048577: at most 1048576, a binary field being in a message's first bytes"
        );
        let e = Extractor::compile(
            &Capture {
                at: Some(2),
                width: Some(2),
                json: Some("id".into()),
                ..Capture::default()
            },
            None,
        )
        .expect_err("two ways");
        assert!(matches!(e, MatchError::CaptureNeedsOne));
    }

    #[test]
    fn errors_say_what_to_fix_and_where() {
        let e = Matcher::compile(&Match {
            regex: Some("(unclosed".into()),
            ..Match::default()
        })
        .expect_err("bad regex");
        assert_eq!(e.field(), Some("regex"));
        assert_eq!(
            e.to_string(),
            "\"(unclosed\" does not compile: unclosed group; see https://docs.rs/regex/#syntax"
        );
        let e = Matcher::compile(&Match {
            json: Some(JsonField {
                field: String::new(),
                equals: "x".into(),
            }),
            ..Match::default()
        })
        .expect_err("empty path");
        assert_eq!(e.field(), Some("json.field"));
        assert!(e.to_string().contains("is empty"), "{e}");
        for c in [
            Capture::default(),
            Capture {
                json: Some("a".into()),
                regex: Some("(a)".into()),
                ..Capture::default()
            },
        ] {
            let e = Extractor::compile(&c, None).expect_err("one of");
            assert!(matches!(e, MatchError::CaptureNeedsOne) && e.field().is_none());
        }
        let e = Extractor::compile(
            &Capture {
                json: None,
                regex: Some("sid=\\w+".into()),
                ..Capture::default()
            },
            None,
        )
        .expect_err("no group");
        assert!(e.to_string().contains("no group"), "{e}");
        let e = Extractor::compile(
            &Capture {
                json: Some("a..b".into()),
                regex: None,
                ..Capture::default()
            },
            None,
        )
        .expect_err("bad path");
        assert_eq!(e.field(), Some("json"));
    }
}
