//! Frames that carry several messages of the server's protocol: newline-delimited JSON, a
//! line protocol's lines (NATS), records after `\x1e`, SockJS' `a["m1","m2"]`, and binary
//! packets that announce their length (MQTT), which may also span frames. A connection told
//! how its server packs them ([`Split`], [`crate::Ws::split_messages`]) hands each part on as a
//! message of its own; a frame of another form is one message, as without a split.
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
    /// Binary frames as one byte stream of packets, each with its length at byte `at` (MQTT:
    /// at 1, after the type byte, as a variable-length integer) counting the bytes after the
    /// length field. Frame edges mean nothing: a broker may write one packet in several frames
    /// (aedes writes a CONNACK as four one-byte frames) or several packets in one; what a frame
    /// leaves of a packet is carried to the next. Text frames are each one message.
    Packets { at: usize, length: Length },
}

/// How a packet writes its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// MQTT's variable byte integer: 7 bits a byte, low first, the top bit set on all but the
    /// last; at most 4 bytes.
    Varint,
    /// Big-endian, 1, 2 or 4 bytes.
    Fixed(u8),
}

/// What the head of a packet stream says: the whole packet's size, more bytes needed to
/// read it, or a length that is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Packet {
    Size(usize),
    Short,
    Malformed,
}

impl Length {
    /// The size of the packet `bytes` starts with (`at` bytes, the length field, what it
    /// counts), as far as `bytes` shows it.
    pub(crate) fn packet(self, at: usize, bytes: &[u8]) -> Packet {
        let field = bytes.get(at..).unwrap_or_default();
        let (value, width) = match self {
            Length::Varint => {
                let mut value = 0usize;
                let mut width = None;
                for (i, b) in field.iter().take(4).enumerate() {
                    value |= usize::from(b & 0x7f) << (7 * i);
                    if b & 0x80 == 0 {
                        width = Some(i + 1);
                        break;
                    }
                }
                match width {
                    Some(w) => (value, w),
                    None if field.len() >= 4 => return Packet::Malformed,
                    None => return Packet::Short,
                }
            }
            Length::Fixed(w) => {
                let w = usize::from(w);
                let Some(b) = field.get(..w) else {
                    return Packet::Short;
                };
                (b.iter().fold(0usize, |v, &b| v << 8 | usize::from(b)), w)
            }
        };
        Packet::Size(at + width + value)
    }
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
    /// Whether parts span frames: then a frame's bytes after its last whole part are carried
    /// to the next one (`carried`), and only binary frames are split.
    pub(crate) fn streams(&self) -> bool {
        matches!(self, Split::Packets { .. })
    }

    /// What a packet stream's frame leaves of a packet once `next` found no more whole ones at
    /// `cursor`: the bytes to carry to the next frame.
    pub(crate) fn carried<'a>(&self, frame: &'a [u8], cursor: Cursor) -> &'a [u8] {
        match self {
            Split::Packets { .. } if !cursor.whole && !cursor.done => {
                frame.get(cursor.at..).unwrap_or_default()
            }
            _ => &[],
        }
    }

    /// Completes the packet `carry` began with the head of `frame`: how many bytes of the
    /// frame it took, and whether the packet is whole (`Malformed`: its length is not one,
    /// and the carry is handed on as it is). The rest of the frame is parsed from there.
    pub(crate) fn complete(&self, carry: &mut Vec<u8>, frame: &[u8]) -> (usize, Packet) {
        let Split::Packets { at, length } = *self else {
            return (0, Packet::Short);
        };
        let mut used = 0;
        loop {
            match length.packet(at, carry) {
                Packet::Size(size) => {
                    let take = size.saturating_sub(carry.len()).min(frame.len() - used);
                    carry.extend_from_slice(&frame[used..used + take]);
                    used += take;
                    return (
                        used,
                        if carry.len() >= size {
                            Packet::Size(size)
                        } else {
                            Packet::Short
                        },
                    );
                }
                Packet::Malformed => return (used, Packet::Malformed),
                // The head is a few bytes: taken one at a time until it reads.
                Packet::Short if used < frame.len() => {
                    carry.push(frame[used]);
                    used += 1;
                }
                Packet::Short => return (used, Packet::Short),
            }
        }
    }

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
            Split::Packets { at, length } => {
                let rest = frame.get(cursor.at..).unwrap_or_default();
                match length.packet(*at, rest) {
                    Packet::Size(size) if size <= rest.len() => {
                        let c = Cursor {
                            at: cursor.at + size,
                            ..cursor
                        };
                        Some((part(cursor.at..cursor.at + size), c))
                    }
                    Packet::Size(_) | Packet::Short => None,
                    // Not a length: the stream is lost; the rest is one message, for a
                    // finding to name, and nothing is carried.
                    Packet::Malformed => Some((part(cursor.at..frame.len()), end)),
                }
            }
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
                        return self.next(frame, Cursor::whole());
                    };
                    let open = prefix.len() + skip_space(rest);
                    if frame.get(open) != Some(&b'[') || !closes_array(&frame[open..]) {
                        return self.next(frame, Cursor::whole());
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

impl Cursor {
    /// A frame's offset `at`, where a packet stream's frame resumes once the head of it
    /// completed the packet carried from the frames before.
    pub(crate) fn at(at: usize) -> Cursor {
        Cursor {
            at,
            ..Cursor::default()
        }
    }

    /// A frame handed on as one message: not of the split's form, or a text frame of a
    /// packet stream.
    pub(crate) fn whole() -> Cursor {
        Cursor {
            whole: true,
            ..Cursor::default()
        }
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
    fn packets_are_read_by_their_length_across_frames() {
        let mqtt = Split::Packets {
            at: 1,
            length: Length::Varint,
        };
        // A SUBACK and a PINGRESP in one frame, then a PUBLISH cut short.
        let frame = [0x90, 3, 0, 1, 0, 0xd0, 0, 0x30, 5, 0, 1];
        let mut cursor = Cursor::default();
        let mut got = Vec::new();
        while let Some((p, next)) = mqtt.next(&frame, cursor) {
            got.push(frame[p.range].to_vec());
            cursor = next;
        }
        assert_eq!(got, [vec![0x90, 3, 0, 1, 0], vec![0xd0, 0]]);
        let mut carry = mqtt.carried(&frame, cursor).to_vec();
        assert_eq!(carry, [0x30, 5, 0, 1]);
        // The next frames complete it: the first one byte short, the second with more after.
        assert_eq!(mqtt.complete(&mut carry, b"ab"), (2, Packet::Short));
        assert_eq!(
            mqtt.complete(&mut carry, &[b'c', 0xd0, 0]),
            (1, Packet::Size(7))
        );
        assert_eq!(carry, [0x30, 5, 0, 1, b'a', b'b', b'c']);
        // A CONNACK a byte a frame (aedes), its length read once its byte arrives.
        let mut carry = Vec::new();
        for (i, b) in [0x20u8, 2, 0, 0].iter().enumerate() {
            let head = if i == 3 {
                Packet::Size(4)
            } else {
                Packet::Short
            };
            assert_eq!(mqtt.complete(&mut carry, &[*b]), (1, head), "byte {i}");
        }
        // Lengths of several bytes, and one that never ends: the rest is one part.
        assert_eq!(
            Length::Varint.packet(1, &[0x30, 0x80, 0x01]),
            Packet::Size(131)
        );
        assert_eq!(Length::Varint.packet(1, &[0x30, 0xff, 0xff]), Packet::Short);
        assert_eq!(
            Length::Varint.packet(1, &[0x30, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            Packet::Malformed
        );
        let lost = [0x30, 0xff, 0xff, 0xff, 0xff, 1, 2];
        let (p, end) = mqtt.next(&lost, Cursor::default()).expect("the rest");
        assert_eq!(p.range, 0..7);
        assert!(mqtt.next(&lost, end).is_none());
        assert!(mqtt.carried(&lost, end).is_empty());
        // A big-endian u16 length at 0.
        let u16s = Split::Packets {
            at: 0,
            length: Length::Fixed(2),
        };
        assert_eq!(
            parts(&u16s, &[0, 1, b'x', 0, 2, b'y', b'z']),
            ["\0\u{1}x", "\0\u{2}yz"]
        );
    }

    #[test]
    fn bad_escapes_are_refused() {
        for bad in [&br"\x"[..], br"\u12", br"\ud800", br"\ud800\u0041", b"\\"] {
            assert!(!unescape(bad, &mut Vec::new()), "{bad:?}");
        }
    }
}
