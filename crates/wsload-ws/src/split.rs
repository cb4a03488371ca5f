//! Frames that carry several messages of the server's protocol: newline-delimited JSON, a
//! line protocol's lines (NATS), records after `\x1e`, SockJS' `a["m1","m2"]`. A connection
//! told how its server packs them ([`Split`], [`crate::Ws::split_messages`]) hands each part on
//! as a message of its own; a frame of another form is one message, as without a split.
//!
//! Parts are found in place: a separator's parts and a JSON string without escapes are ranges
//! of the frame (zero-copy slices of its payload); only a string with escapes is written out
//! unescaped.

use std::ops::Range;

/// How a server packs several messages into one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// Messages separated by these bytes (`\n`, `\r\n`, `\x1e`); empty parts (a separator at
    /// the end, or two in a row) are not messages.
    Separator(Box<[u8]>),
    /// A JSON array after `prefix` (SockJS: `a`, its frames `a["...","..."]`), each element a
    /// message: a string's text unescaped, any other value as written. A frame that is not
    /// `prefix` and an array (SockJS' `o`, `h`, `c[...]`) is one message.
    JsonArray { prefix: Box<[u8]> },
}

/// One part of a frame: where it is, and whether it is a JSON string's content still escaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    pub range: Range<usize>,
    pub escaped: bool,
}

/// Where the next part of a frame starts: its offset, and for a JSON array whether its `[` was
/// read. `Cursor::default()` is a frame's start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    at: usize,
    in_array: bool,
    /// The frame is not of the split's form: it is one message, given once.
    whole: bool,
    done: bool,
}

impl Split {
    /// The part of `frame` at `cursor`, and the cursor after it; `None` when no part is left.
    pub(crate) fn next(&self, frame: &[u8], cursor: Cursor) -> Option<(Part, Cursor)> {
        if cursor.done {
            return None;
        }
        let end = Cursor {
            done: true,
            ..cursor
        };
        if cursor.whole {
            return Some((part(0..frame.len()), end));
        }
        match self {
            Split::Separator(sep) => {
                let mut at = cursor.at;
                loop {
                    if at >= frame.len() {
                        return None;
                    }
                    let rest = &frame[at..];
                    let (len, next) = match find(rest, sep) {
                        Some(i) => (i, at + i + sep.len()),
                        None => (rest.len(), frame.len()),
                    };
                    if len > 0 {
                        let c = Cursor { at: next, ..cursor };
                        return Some((part(at..at + len), c));
                    }
                    at = next;
                }
            }
            Split::JsonArray { prefix } => {
                if !cursor.in_array {
                    let Some(rest) = frame.strip_prefix(&prefix[..]) else {
                        return self.next(frame, whole());
                    };
                    let open = prefix.len() + skip_space(rest);
                    if frame.get(open) != Some(&b'[') || !closes_array(&frame[open..]) {
                        return self.next(frame, whole());
                    }
                    let c = Cursor {
                        at: open + 1,
                        in_array: true,
                        ..cursor
                    };
                    return self.next(frame, c);
                }
                let at = cursor.at + skip_space(&frame[cursor.at..]);
                match frame.get(at) {
                    None | Some(b']') => None,
                    Some(b',') => self.next(
                        frame,
                        Cursor {
                            at: at + 1,
                            ..cursor
                        },
                    ),
                    Some(_) => {
                        let (value, after) = element(frame, at)?;
                        Some((
                            value,
                            Cursor {
                                at: after,
                                ..cursor
                            },
                        ))
                    }
                }
            }
        }
    }
}

fn whole() -> Cursor {
    Cursor {
        whole: true,
        ..Cursor::default()
    }
}

fn part(range: Range<usize>) -> Part {
    Part {
        range,
        escaped: false,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    match needle {
        [b] => hay.iter().position(|c| c == b),
        _ => hay.windows(needle.len()).position(|w| w == needle),
    }
}

fn skip_space(s: &[u8]) -> usize {
    s.iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
        .unwrap_or(s.len())
}

/// Whether `s`, from its `[`, ends with the array's `]` (trailing space aside): a frame cut
/// short is one message, not parts guessed at.
fn closes_array(s: &[u8]) -> bool {
    let trimmed = s.len()
        - s.iter()
            .rev()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
    trimmed >= 2 && s[trimmed - 1] == b']'
}

/// The JSON value at `at` (its first byte) and the offset after it: a string's content
/// (marked escaped if it holds a backslash), else the value's text as written, up to the
/// comma or bracket that ends it at its own depth.
fn element(frame: &[u8], at: usize) -> Option<(Part, usize)> {
    if frame[at] == b'"' {
        let mut i = at + 1;
        let mut escaped = false;
        while i < frame.len() {
            match frame[i] {
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                b'"' => {
                    let value = Part {
                        range: at + 1..i,
                        escaped,
                    };
                    return Some((value, i + 1));
                }
                _ => i += 1,
            }
        }
        return None;
    }
    let (mut depth, mut in_string, mut i) = (0usize, false, at);
    while i < frame.len() {
        let c = frame[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match c {
                b'"' => in_string = true,
                b'[' | b'{' => depth += 1,
                b']' | b'}' if depth == 0 => break,
                b']' | b'}' => depth -= 1,
                b',' if depth == 0 => break,
                _ => {}
            }
        }
        i += 1;
    }
    let text = &frame[at..i];
    let end = at + text.len()
        - text
            .iter()
            .rev()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
    Some((part(at..end), i))
}

/// Writes the JSON string content `escaped` (between its quotes) unescaped onto `out`; `false`
/// (and `out` as far as it got) if an escape is not JSON's.
pub(crate) fn unescape(escaped: &[u8], out: &mut impl bytes::BufMut) -> bool {
    let mut i = 0;
    while i < escaped.len() {
        let c = escaped[i];
        if c != b'\\' {
            let run = escaped[i..]
                .iter()
                .position(|&b| b == b'\\')
                .unwrap_or(escaped.len() - i);
            out.put_slice(&escaped[i..i + run]);
            i += run;
            continue;
        }
        let Some(&e) = escaped.get(i + 1) else {
            return false;
        };
        i += 2;
        let ch = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let Some(hi) = hex4(escaped, i) else {
                    return false;
                };
                i += 4;
                let code = if (0xD800..0xDC00).contains(&hi) {
                    // A surrogate pair: the low half must follow as \uXXXX.
                    let lo = match (escaped.get(i..i + 2), hex4(escaped, i + 2)) {
                        (Some(b"\\u"), Some(lo)) if (0xDC00..0xE000).contains(&lo) => lo,
                        _ => return false,
                    };
                    i += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else {
                    hi
                };
                match char::from_u32(code) {
                    Some(ch) => ch,
                    None => return false,
                }
            }
            _ => return false,
        };
        let mut buf = [0u8; 4];
        out.put_slice(ch.encode_utf8(&mut buf).as_bytes());
    }
    true
}

fn hex4(s: &[u8], at: usize) -> Option<u32> {
    let digits = s.get(at..at + 4)?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(split: &Split, frame: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = Cursor::default();
        while let Some((p, next)) = split.next(frame, cursor) {
            let bytes = &frame[p.range.clone()];
            let text = if p.escaped {
                let mut v = Vec::new();
                assert!(unescape(bytes, &mut v), "{bytes:?}");
                String::from_utf8(v).expect("utf-8")
            } else {
                String::from_utf8_lossy(bytes).into_owned()
            };
            out.push(text);
            cursor = next;
        }
        out
    }

    #[test]
    fn separators_give_every_non_empty_part() {
        let nl = Split::Separator(Box::from(&b"\n"[..]));
        assert_eq!(
            parts(&nl, b"{\"a\":1}\n{\"b\":2}\n"),
            ["{\"a\":1}", "{\"b\":2}"]
        );
        assert_eq!(parts(&nl, b"one"), ["one"]);
        assert_eq!(parts(&nl, b"\n\nx\n\ny"), ["x", "y"]);
        assert!(parts(&nl, b"").is_empty());
        let crlf = Split::Separator(Box::from(&b"\r\n"[..]));
        assert_eq!(
            parts(&crlf, b"MSG foo 1 2\r\nhi\r\nPING\r\n"),
            ["MSG foo 1 2", "hi", "PING"]
        );
        let rs = Split::Separator(Box::from(&b"\x1e"[..]));
        assert_eq!(
            parts(&rs, b"{\"type\":6}\x1e{\"type\":1}\x1e"),
            ["{\"type\":6}", "{\"type\":1}"]
        );
    }

    #[test]
    fn a_json_array_gives_its_elements_and_other_frames_whole() {
        let sockjs = Split::JsonArray {
            prefix: Box::from(&b"a"[..]),
        };
        assert_eq!(
            parts(
                &sockjs,
                br#"a["{\"seq\":1}","plain",  "\u00e9\ud83d\ude00"]"#
            ),
            ["{\"seq\":1}", "plain", "é😀"]
        );
        assert_eq!(parts(&sockjs, b"o"), ["o"]);
        assert_eq!(parts(&sockjs, b"h"), ["h"]);
        assert_eq!(
            parts(&sockjs, br#"c[3000,"Go away!"]"#),
            [r#"c[3000,"Go away!"]"#]
        );
        // Not closed: one message, not parts guessed at.
        assert_eq!(parts(&sockjs, br#"a["x","y"#), [r#"a["x","y"#]);
        assert!(parts(&sockjs, b"a[]").is_empty());
        let bare = Split::JsonArray {
            prefix: Box::default(),
        };
        assert_eq!(
            parts(&bare, br#"[{"id":1,"p":[1,2]}, {"id":2,"s":"a,]b"} ,3]"#),
            [r#"{"id":1,"p":[1,2]}"#, r#"{"id":2,"s":"a,]b"}"#, "3"]
        );
    }

    #[test]
    fn bad_escapes_are_refused() {
        for bad in [&br"\x"[..], br"\u12", br"\ud800", br"\ud800\u0041", b"\\"] {
            assert!(!unescape(bad, &mut Vec::new()), "{bad:?}");
        }
    }
}
