//! Message templates (`{"id":${seq},"t":${sendTime}}`), parsed once into literal byte ranges
//! and placeholders, so that whoever sends them splices only the placeholders' values into
//! fixed places. The placeholders are listed on [`crate::conversation::Payload`]; a binary
//! protocol's templates (`bytes:`, hex with fixed-width numbers and computed lengths) are
//! parsed by [`bytes`] into the same parts and a few of their own.

pub mod bytes;

pub use bytes::{BytesError, LengthKind, Num, Width};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

/// Longest `${hex:N}`.
pub const MAX_HEX_DIGITS: usize = 1024;

/// The placeholders every template knows, as written between `${` and `}` (`hex:N` aside).
pub const BUILT_IN: [&str; 7] = ["conn", "seq", "sendTime", "random", "hex", "uuid", "pad"];

/// A parsed template: its source and the parts it is made of, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: Box<str>,
    /// The bytes literal parts are ranges of: the source itself for text, the bytes its hex
    /// and quoted text stand for in a bytes template.
    literals: Box<[u8]>,
    parts: Vec<Part>,
}

/// How a template is written, and so which frame it goes in: `text` and `binary` are text
/// with placeholders, `bytes` is a binary protocol's (see [`bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Text,
    Binary,
    Bytes,
}

impl Written {
    /// The field it is written in.
    pub fn name(self) -> &'static str {
        match self {
            Written::Text => "text",
            Written::Binary => "binary",
            Written::Bytes => "bytes",
        }
    }

    /// Whether it goes as a text frame (else binary).
    pub fn is_text(self) -> bool {
        self == Written::Text
    }

    /// The one of `text`, `binary` and `bytes` that is set, with its source; `None` unless
    /// exactly one is.
    pub fn one_of<'a>(
        text: Option<&'a str>,
        binary: Option<&'a str>,
        bytes: Option<&'a str>,
    ) -> Option<(Written, &'a str)> {
        match (text, binary, bytes) {
            (Some(t), None, None) => Some((Written::Text, t)),
            (None, Some(b), None) => Some((Written::Binary, b)),
            (None, None, Some(b)) => Some((Written::Bytes, b)),
            _ => None,
        }
    }
}

/// One piece of a template. `V` is how a captured variable is named: by its name as written
/// (a parsed [`Template`]'s), or by whatever a sender compiles it to (its index, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<V = Box<str>> {
    /// Bytes of the source, as they are (a `$${` stands for the `${` of the range after it).
    Literal(Range<usize>),
    /// `${conn}`: the connection's number over all shards.
    Conn,
    /// `${seq}`: the connection's message sequence number, from 1.
    Seq,
    /// `${sendTime}`: microseconds since the Unix epoch when the message is made.
    SendTime,
    /// `${random}`: a random 32-bit number, in decimal.
    Random,
    /// `${hex:N}`: N random lowercase hex digits.
    Hex(usize),
    /// `${uuid}`: a random UUID v4, hyphenated.
    Uuid,
    /// `${pad}`: filler that makes the message `message.size` bytes.
    Pad,
    /// `${NAME}`: a variable captured on open.
    Var(V),
    /// `${seq:u16}` (bytes templates): a number in binary, big-endian, at a fixed width.
    Binary(Num, Width),
    /// `${len:varint}` (bytes templates): how many bytes follow it up to the end of its
    /// group, or of the message.
    Length(LengthKind),
    /// `(`: a group begins; a length inside it counts to its end.
    Open,
    /// `)`: the group ends.
    Close,
}

impl<V> Part<V> {
    /// The same part, its variable named another way by `f`.
    pub fn map_var<W>(&self, f: impl FnOnce(&V) -> W) -> Part<W> {
        match self {
            Part::Literal(r) => Part::Literal(r.clone()),
            Part::Conn => Part::Conn,
            Part::Seq => Part::Seq,
            Part::SendTime => Part::SendTime,
            Part::Random => Part::Random,
            Part::Hex(n) => Part::Hex(*n),
            Part::Uuid => Part::Uuid,
            Part::Pad => Part::Pad,
            Part::Var(v) => Part::Var(f(v)),
            Part::Binary(n, w) => Part::Binary(*n, *w),
            Part::Length(k) => Part::Length(*k),
            Part::Open => Part::Open,
            Part::Close => Part::Close,
        }
    }
}

/// Why a template does not parse; the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unknown placeholder ${{{name}}}; known here: {}; write $${{ for a literal ${{", known_list(.known))]
    Unknown { name: String, known: Vec<String> },
    #[error("${{ at byte {at} is not closed by }}; write $${{ for a literal ${{")]
    Unclosed { at: usize },
    #[error(
        "${{{text}}}: hex takes a number of digits from 1 to {MAX_HEX_DIGITS}, e.g. ${{hex:16}}"
    )]
    BadHex { text: String },
    #[error("${{pad}} appears more than once; one pad fills the message to message.size")]
    TwoPads,
    #[error(transparent)]
    Bytes(#[from] BytesError),
}

fn known_list(vars: &[String]) -> String {
    let mut names: Vec<String> = ["conn", "seq", "sendTime", "random", "hex:N", "uuid", "pad"]
        .iter()
        .map(|n| format!("${{{n}}}"))
        .collect();
    names.extend(vars.iter().map(|v| format!("${{{v}}} (captured)")));
    names.join(", ")
}

impl Template {
    /// Parses `source`; `vars` are the names of the variables captured before it is sent.
    pub fn parse(source: &str, vars: &[&str]) -> Result<Template, TemplateError> {
        let bytes = source.as_bytes();
        let mut parts = Vec::new();
        let mut literal_start = 0;
        let mut i = 0;
        let mut pads = 0;
        while i < bytes.len() {
            if bytes[i] != b'$' {
                i += 1;
                continue;
            }
            if bytes[i..].starts_with(b"$${") {
                // The first `$` is dropped: the literal resumes at the `${` it escapes.
                push_literal(&mut parts, literal_start..i);
                literal_start = i + 1;
                i += 3;
                continue;
            }
            if !bytes[i..].starts_with(b"${") {
                i += 1;
                continue;
            }
            let close = source[i..]
                .find('}')
                .ok_or(TemplateError::Unclosed { at: i })?;
            let name = &source[i + 2..i + close];
            let part = placeholder(name, vars)?;
            if part == Part::Pad {
                pads += 1;
                if pads > 1 {
                    return Err(TemplateError::TwoPads);
                }
            }
            push_literal(&mut parts, literal_start..i);
            parts.push(part);
            i += close + 1;
            literal_start = i;
        }
        push_literal(&mut parts, literal_start..bytes.len());
        Ok(Template {
            source: source.into(),
            literals: bytes.into(),
            parts,
        })
    }

    /// Parses a bytes template (see [`bytes`]); `vars` as for [`Template::parse`].
    pub fn parse_bytes(source: &str, vars: &[&str]) -> Result<Template, TemplateError> {
        let (literals, parts) = bytes::parse(source, vars)?;
        Ok(Template {
            source: source.into(),
            literals: literals.into(),
            parts,
        })
    }

    /// Parses `source` as it is `written`.
    pub fn parse_as(
        written: Written,
        source: &str,
        vars: &[&str],
    ) -> Result<Template, TemplateError> {
        match written {
            Written::Bytes => Template::parse_bytes(source, vars),
            Written::Text | Written::Binary => Template::parse(source, vars),
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The bytes of a literal part.
    pub fn literal(&self, range: &Range<usize>) -> &[u8] {
        &self.literals[range.clone()]
    }

    /// Whether the template has this placeholder (`Part::Hex` of any width for a `Hex`; a
    /// number in digits or in binary, `${seq}` or `${seq:u16}`, for `Seq`, `Conn`, `SendTime`).
    pub fn uses(&self, part: &Part) -> bool {
        self.parts.iter().any(|p| match (p, part) {
            (Part::Hex(_), Part::Hex(_)) => true,
            (Part::Binary(n, _), wanted) => n.part() == *wanted,
            _ => p == part,
        })
    }

    /// Whether every message made from it is the same bytes (no placeholders at all).
    pub fn is_fixed(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    /// The message for `values`, allocated. For checks and tests: a sender splices the
    /// placeholders into a buffer of its own.
    pub fn render(&self, values: &mut Values<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        // A bytes template's lengths (and its pad, which they count) are known before it is
        // written; a text template's pad once the rest is.
        let framed = self.layout(values);
        let mut lengths = framed.iter().flat_map(|(l, _)| l.values());
        let mut pad_at = None;
        for part in &self.parts {
            match part {
                Part::Literal(r) => out.extend_from_slice(self.literal(r)),
                Part::Conn => out.extend_from_slice(values.conn.to_string().as_bytes()),
                Part::Seq => out.extend_from_slice(values.seq.to_string().as_bytes()),
                Part::SendTime => out.extend_from_slice(values.send_time_us.to_string().as_bytes()),
                Part::Random => {
                    let r = values.next_random() as u32;
                    out.extend_from_slice(r.to_string().as_bytes());
                }
                Part::Hex(n) => {
                    for _ in 0..*n {
                        let d = (values.next_random() % 16) as u8;
                        out.push(HEX[usize::from(d)]);
                    }
                }
                Part::Uuid => {
                    let uuid = uuid_text(values.next_random(), values.next_random());
                    out.extend_from_slice(&uuid);
                }
                Part::Pad => match &framed {
                    Some((_, pad)) => out.extend(std::iter::repeat_n(PAD_BYTE, *pad)),
                    None => pad_at = Some(out.len()),
                },
                Part::Var(name) => {
                    if let Some(v) = values.vars.get(&**name) {
                        out.extend_from_slice(v);
                    }
                }
                Part::Binary(n, w) => {
                    let v = n.value(*w, values.conn, values.seq, values.send_time_us, || {
                        values.next_random()
                    });
                    let (b, from) = w.be(v);
                    out.extend_from_slice(&b[from..]);
                }
                Part::Length(k) => {
                    let mut b = [0; bytes::MAX_LENGTH_BYTES];
                    out.extend_from_slice(k.encode(lengths.next().unwrap_or(0), &mut b));
                }
                Part::Open | Part::Close => {}
            }
        }
        if let Some(at) = pad_at {
            let fill = values.size.saturating_sub(out.len());
            let tail = out.split_off(at);
            out.extend(std::iter::repeat_n(PAD_BYTE, fill));
            out.extend_from_slice(&tail);
        }
        out
    }
}

impl Template {
    /// A bytes template's lengths and pad for `values` (see [`bytes::layout`]); `None` for a
    /// template without lengths.
    fn layout(&self, values: &Values<'_>) -> Option<(bytes::Lengths, usize)> {
        let framed = self.parts.iter().any(|p| matches!(p, Part::Length(_)));
        framed.then(|| {
            bytes::layout(&self.parts, values.size, |p| match p {
                Part::Literal(r) => r.len(),
                Part::Var(name) => values.vars.get(&**name).map_or(0, Vec::len),
                other => bytes::width_of(other, values.conn, values.seq, values.send_time_us),
            })
        })
    }

    /// Whether every length fits how it is written when rendered with `values` (a `u8`
    /// length of 300 bytes would be written as 44).
    pub fn check_lengths(&self, values: &Values<'_>) -> Result<(), BytesError> {
        let Some((lengths, _)) = self.layout(values) else {
            return Ok(());
        };
        let kinds = self.parts.iter().filter_map(|p| match p {
            Part::Length(k) => Some(*k),
            _ => None,
        });
        for (kind, value) in kinds.zip(lengths.values()) {
            if value > kind.max() {
                return Err(BytesError::TooLong {
                    value,
                    max: kind.max(),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// What `${pad}` is made of: printable, and nothing JSON or a regex needs escaped.
pub const PAD_BYTE: u8 = b'x';

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A UUID v4's 36 characters from 128 random bits.
pub fn uuid_text(hi: u64, lo: u64) -> [u8; 36] {
    let mut bits = (u128::from(hi) << 64) | u128::from(lo);
    // Version 4, variant 10xx (RFC 9562).
    bits = (bits & !(0xF_u128 << 76)) | (0x4_u128 << 76);
    bits = (bits & !(0x3_u128 << 62)) | (0x2_u128 << 62);
    let mut out = [b'-'; 36];
    let mut nibble = 0;
    for (i, slot) in out.iter_mut().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            continue;
        }
        let shift = 124 - 4 * nibble;
        *slot = HEX[((bits >> shift) & 0xF) as usize];
        nibble += 1;
    }
    out
}

fn push_literal(parts: &mut Vec<Part>, range: Range<usize>) {
    if range.is_empty() {
        return;
    }
    // Adjacent ranges (around a `$${`) are one literal.
    if let Some(Part::Literal(prev)) = parts.last_mut()
        && prev.end == range.start
    {
        prev.end = range.end;
        return;
    }
    parts.push(Part::Literal(range));
}

fn placeholder(name: &str, vars: &[&str]) -> Result<Part, TemplateError> {
    Ok(match name {
        "conn" => Part::Conn,
        "seq" => Part::Seq,
        "sendTime" => Part::SendTime,
        "random" => Part::Random,
        "uuid" => Part::Uuid,
        "pad" => Part::Pad,
        _ if name.starts_with("hex:") => {
            let n = name["hex:".len()..]
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_HEX_DIGITS).contains(n))
                .ok_or_else(|| TemplateError::BadHex {
                    text: name.to_string(),
                })?;
            Part::Hex(n)
        }
        _ if vars.contains(&name) => Part::Var(name.into()),
        _ => {
            return Err(TemplateError::Unknown {
                name: name.to_string(),
                known: vars.iter().map(|v| v.to_string()).collect(),
            });
        }
    })
}

/// The values a template is rendered with by [`Template::render`].
#[derive(Debug, Clone)]
pub struct Values<'a> {
    pub conn: u64,
    pub seq: u64,
    pub send_time_us: u64,
    /// `message.size`, what `${pad}` fills to.
    pub size: usize,
    pub vars: &'a BTreeMap<String, Vec<u8>>,
    /// The state of the generator behind `${random}`, `${hex:N}` and `${uuid}`: a fixed seed
    /// renders the same bytes every time, which is what a check wants.
    pub random: u64,
}

impl Values<'_> {
    pub(crate) fn next_random(&mut self) -> u64 {
        // splitmix64: reproducible from the seed, and the spec crate needs no RNG.
        self.random = self.random.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.random;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(t: &Template, seq: u64, size: usize, vars: &BTreeMap<String, Vec<u8>>) -> String {
        let mut v = Values {
            conn: 7,
            seq,
            send_time_us: 1_700_000_000_000_000,
            size,
            vars,
            random: 1,
        };
        String::from_utf8(t.render(&mut v)).expect("utf8")
    }

    #[test]
    fn parses_literals_and_placeholders_in_order() {
        let t = Template::parse(
            r#"{"id":${seq},"c":${conn},"t":${sendTime},"s":"${sid}"}"#,
            &["sid"],
        )
        .expect("parses");
        let kinds: Vec<_> = t
            .parts()
            .iter()
            .map(|p| match p {
                Part::Literal(r) => String::from_utf8_lossy(t.literal(r)).into_owned(),
                other => format!("<{other:?}>"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                r#"{"id":"#,
                "<Seq>",
                r#","c":"#,
                "<Conn>",
                r#","t":"#,
                "<SendTime>",
                r#","s":""#,
                r#"<Var("sid")>"#,
                r#""}"#
            ]
        );
        assert!(t.uses(&Part::Seq) && !t.uses(&Part::Pad) && !t.is_fixed());
        assert!(Template::parse("2", &[]).expect("fixed").is_fixed());
        assert_eq!(Template::parse("", &[]).expect("empty").parts(), []);
    }

    #[test]
    fn a_doubled_dollar_is_a_literal_placeholder_and_a_lone_dollar_is_itself() {
        let t = Template::parse("a$${seq}b $5 ${seq}$", &[]).expect("parses");
        let vars = BTreeMap::new();
        assert_eq!(render(&t, 3, 0, &vars), "a${seq}b $5 3$");
        // "a", then "${seq}b $5 " (the escaping `$` dropped), the placeholder, "$".
        assert_eq!(t.parts().len(), 4, "{:?}", t.parts());
    }

    #[test]
    fn renders_every_placeholder() {
        let vars = BTreeMap::from([("token".to_string(), b"abc".to_vec())]);
        let t = Template::parse("${conn}|${seq}|${sendTime}|${token}", &["token"]).expect("t");
        assert_eq!(render(&t, 12345, 0, &vars), "7|12345|1700000000000000|abc");
        let t = Template::parse("${random}|${hex:8}|${uuid}", &[]).expect("t");
        let out = render(&t, 1, 0, &vars);
        let f: Vec<&str> = out.split('|').collect();
        assert!(f[0].parse::<u32>().is_ok(), "{out}");
        assert!(
            f[1].len() == 8 && f[1].bytes().all(|b| HEX.contains(&b)),
            "{out}"
        );
        let u = f[2].as_bytes();
        assert!(
            u.len() == 36 && u[14] == b'4' && b"89ab".contains(&u[19]),
            "{out}"
        );
        assert_eq!(
            out,
            render(&t, 1, 0, &vars),
            "a fixed seed renders the same"
        );
        let t = Template::parse(r#"{"id":${seq},"p":"${pad}"}"#, &[]).expect("t");
        let out = render(&t, 5, 40, &vars);
        assert_eq!(out.len(), 40);
        assert_eq!(out, format!(r#"{{"id":5,"p":"{}"}}"#, "x".repeat(25)));
        assert_eq!(render(&t, 5, 3, &vars), r#"{"id":5,"p":""}"#);
    }

    #[test]
    fn errors_name_the_placeholder_and_what_is_known() {
        let e = Template::parse("{\"s\":\"${sid}\"}", &["token"]).expect_err("unknown");
        assert_eq!(
            e.to_string(),
            "unknown placeholder ${sid}; known here: ${conn}, ${seq}, ${sendTime}, ${random}, ${hex:N}, ${uuid}, ${pad}, ${token} (captured); write $${ for a literal ${"
        );
        assert_eq!(
            Template::parse("ab${seq", &[]),
            Err(TemplateError::Unclosed { at: 2 })
        );
        for bad in ["${hex:0}", "${hex:x}", "${hex:}", "${hex:2000}"] {
            assert!(
                matches!(Template::parse(bad, &[]), Err(TemplateError::BadHex { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            Template::parse("${pad}${pad}", &[]),
            Err(TemplateError::TwoPads)
        );
        assert!(matches!(
            Template::parse("${}", &[]),
            Err(TemplateError::Unknown { .. })
        ));
    }
}
