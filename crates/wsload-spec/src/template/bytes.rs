//! A binary protocol's templates (`bytes:`), MQTT's packets for one: bytes written in hex,
//! text in double quotes (placeholders inside it written as text), numbers in binary at a
//! fixed width (`${seq:u16}`, big-endian) and lengths computed over what follows them
//! (`${len:varint}`, MQTT's remaining length; `(${len:u16} "topic")`, a string as MQTT
//! encodes it):
//!
//! ```text
//! 32 ${len:varint} (${len:u16} "wsload/${conn}") ${seq:u16} "seq ${seq} at ${sendTime}"
//! ```
//!
//! Parsed into the parts of [`super::Template`], with four of their own ([`Part::Binary`],
//! [`Part::Length`], [`Part::Open`], [`Part::Close`]); and the arithmetic both renderers
//! share (the spec's checks and the load generator's sender): what each length is, before
//! anything is written, and how a number or a length is written. A length counts the bytes
//! after it to the end of its group, `( ... )`, or of the message.
//!
//! A `${seq}` written in fewer than 8 bytes wraps: after the width's largest value it starts
//! again at 1, never 0 (MQTT's packet ids are 16 bits and must not be 0). An answer's id read
//! back is the latest message's with that value ([`unwrap_seq`]), which is exact while fewer
//! messages than the width holds are unanswered (65,535 for `u16`).

mod parse;

use super::Part;
pub use parse::fixed;
pub(super) use parse::parse;

/// Most length fields in one template.
pub const MAX_LENGTHS: usize = 16;
/// Deepest nesting of groups.
pub const MAX_DEPTH: usize = 8;
/// Most bytes a length is written in (a varint of a `u32`).
pub const MAX_LENGTH_BYTES: usize = 5;

/// Why a bytes template, or a match's bytes, does not parse; the message says what to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BytesError {
    #[error(
        "{found:?} at byte {at} is not a hex byte; write bytes as pairs of hex digits (30 0a), text in double quotes (\"topic\"), numbers as ${{seq:u16}}"
    )]
    NotHex { at: usize, found: char },
    #[error(
        "the hex digits ending at byte {at} are odd in number; write each byte as two digits (0a, not a)"
    )]
    OddHex { at: usize },
    #[error("the text quoted at byte {at} is not closed by \"; write \\\" for a quote inside it")]
    UnclosedQuote { at: usize },
    #[error(
        "\\{found} at byte {at}: inside quotes only \\\" and \\\\ are escapes; write other bytes in hex, outside the quotes"
    )]
    BadEscape { at: usize, found: char },
    #[error("( at byte {at} is not closed by )")]
    UnclosedGroup { at: usize },
    #[error(") at byte {at} closes no (")]
    UnopenedGroup { at: usize },
    #[error("groups nest {MAX_DEPTH} deep at most")]
    TooDeep,
    #[error("{MAX_LENGTHS} length fields at most")]
    TooManyLengths,
    #[error(
        "${{{name}}} outside quotes needs a width: ${{{name}:u16}} (big-endian; u8, u16, u32 or u64), or \"${{{name}}}\" in quotes for its decimal digits"
    )]
    NeedsWidth { name: String },
    #[error(
        "${{{text}}} is written in binary: put it outside the quotes (\"...\" ${{{text}}} \"...\")"
    )]
    BinaryInText { text: String },
    #[error("${{{text}}}: the width is u8, u16, u32 or u64")]
    BadWidth { text: String },
    #[error("${{{text}}}: a length is varint (MQTT's remaining length), u8, u16 or u32")]
    BadLength { text: String },
    #[error(
        "${{random}} in quotes: its digits vary in number, which a length cannot know before it is drawn; use ${{random:u32}} (binary) or \"${{hex:8}}\""
    )]
    RandomText,
    #[error("a match's bytes are fixed: hex and quoted text, no placeholders or groups")]
    NotFixed,
    #[error("no bytes; write at least one (e.g. '40 02')")]
    Empty,
    #[error(
        "a length of {value} bytes, above the {max} its field holds; write the length wider (${{len:u16}}, ${{len:varint}}) or the message shorter"
    )]
    TooLong { value: usize, max: usize },
}

/// A number a bytes template writes in binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Num {
    Conn,
    Seq,
    SendTime,
    Random,
}

impl Num {
    /// The placeholder it is when written as text.
    pub fn part<V>(self) -> Part<V> {
        match self {
            Num::Conn => Part::Conn,
            Num::Seq => Part::Seq,
            Num::SendTime => Part::SendTime,
            Num::Random => Part::Random,
        }
    }

    /// Its value at `width`: `${seq}` wraps to 1 (see [`Width::seq`]), the others keep their
    /// low bytes when written. `random` is drawn only for `${random}`.
    pub fn value(
        self,
        width: Width,
        conn: u64,
        seq: u64,
        send_time_us: u64,
        random: impl FnOnce() -> u64,
    ) -> u64 {
        match self {
            Num::Conn => conn,
            Num::Seq => width.seq(seq),
            Num::SendTime => send_time_us,
            Num::Random => random(),
        }
    }
}

/// How many bytes a binary number takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    U8,
    U16,
    U32,
    U64,
}

impl Width {
    pub fn bytes(self) -> usize {
        match self {
            Width::U8 => 1,
            Width::U16 => 2,
            Width::U32 => 4,
            Width::U64 => 8,
        }
    }

    /// Of a capture's `width` (1, 2, 4 or 8 bytes).
    pub fn of_bytes(n: u64) -> Option<Width> {
        Some(match n {
            1 => Width::U8,
            2 => Width::U16,
            4 => Width::U32,
            8 => Width::U64,
            _ => return None,
        })
    }

    fn parse(text: &str) -> Option<Width> {
        Some(match text {
            "u8" => Width::U8,
            "u16" => Width::U16,
            "u32" => Width::U32,
            "u64" => Width::U64,
            _ => return None,
        })
    }

    /// How many `${seq}` values it holds before they repeat (1 up to its largest value: 0 is
    /// skipped); `None` for `u64`, which never wraps.
    pub fn cycle(self) -> Option<u64> {
        (self != Width::U64).then(|| (1u64 << (8 * self.bytes())) - 1)
    }

    /// `seq` as written at this width: the same up to the largest value, then from 1 again.
    /// A message that carries no sequence (0) stays 0.
    pub fn seq(self, seq: u64) -> u64 {
        match self.cycle() {
            Some(c) if seq > 0 => (seq - 1) % c + 1,
            _ => seq,
        }
    }

    /// `v`'s low bytes at this width, big-endian: all 8, and where this width's begin.
    pub fn be(self, v: u64) -> ([u8; 8], usize) {
        (v.to_be_bytes(), 8 - self.bytes())
    }
}

/// How a length is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthKind {
    /// 7 bits a byte, least significant first, the top bit set on every byte but the last
    /// (MQTT's remaining length).
    Varint,
    /// Big-endian at a fixed width (`u16` before an MQTT string).
    Fixed(Width),
}

impl LengthKind {
    fn parse(text: &str) -> Option<LengthKind> {
        match text {
            "varint" => Some(LengthKind::Varint),
            "u64" => None,
            other => Width::parse(other).map(LengthKind::Fixed),
        }
    }

    /// The largest length it writes (a varint: MQTT's 268,435,455, four bytes).
    pub fn max(self) -> usize {
        match self {
            LengthKind::Varint => (1 << 28) - 1,
            LengthKind::Fixed(w) => (1usize << (8 * w.bytes().min(4))) - 1,
        }
    }

    /// How many bytes the length `v` takes.
    pub fn width(self, v: usize) -> usize {
        match self {
            LengthKind::Varint => {
                let mut n = 1;
                let mut rest = v >> 7;
                while rest > 0 {
                    n += 1;
                    rest >>= 7;
                }
                n
            }
            LengthKind::Fixed(w) => w.bytes(),
        }
    }

    /// The length `v` as written, in `buf`.
    pub fn encode(self, v: usize, buf: &mut [u8; MAX_LENGTH_BYTES]) -> &[u8] {
        match self {
            LengthKind::Varint => {
                let mut rest = v as u64 & u64::from(u32::MAX);
                let mut n = 0;
                loop {
                    let low = (rest & 0x7F) as u8;
                    rest >>= 7;
                    buf[n] = if rest > 0 { low | 0x80 } else { low };
                    n += 1;
                    if rest == 0 || n == MAX_LENGTH_BYTES {
                        return &buf[..n];
                    }
                }
            }
            LengthKind::Fixed(w) => {
                let be = (v as u64).to_be_bytes();
                let n = w.bytes().min(MAX_LENGTH_BYTES);
                buf[..n].copy_from_slice(&be[8 - n..]);
                &buf[..n]
            }
        }
    }

    /// How many bytes a length written this way takes at the start of `data` (a varint's
    /// bytes up to the one without its top bit); `None` if `data` is too short for it.
    pub fn read_width(self, data: &[u8]) -> Option<usize> {
        match self {
            LengthKind::Varint => data
                .iter()
                .take(MAX_LENGTH_BYTES)
                .position(|b| b & 0x80 == 0)
                .map(|i| i + 1),
            LengthKind::Fixed(w) => (data.len() >= w.bytes()).then_some(w.bytes()),
        }
    }
}

/// The `${seq}` a message was sent with, from the id its answer carries back (`id`) and the
/// latest `${seq}` sent (`last`): the id itself when ids do not wrap (`cycle` `None`), else
/// the latest `${seq}` written as `id` (see [`Width::seq`]). `None` when no message sent
/// carries it: 0, above the width, or not sent yet.
#[inline]
pub fn unwrap_seq(id: u64, last: u64, cycle: Option<u64>) -> Option<u64> {
    let Some(c) = cycle else {
        return (id != 0 && id <= last).then_some(id);
    };
    if id == 0 || id > c || last == 0 {
        return None;
    }
    let latest = (last - 1) % c + 1;
    let back = (latest + c - id) % c;
    (back < last).then(|| last - back)
}

/// The values of a template's lengths, in the order they are written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lengths {
    values: [u32; MAX_LENGTHS],
    n: usize,
}

impl Lengths {
    /// Length `i`'s value (0 if there is none).
    #[inline]
    pub fn get(&self, i: usize) -> usize {
        self.values.get(i).map_or(0, |v| *v as usize)
    }

    /// The values, in order.
    pub fn values(&self) -> impl Iterator<Item = usize> + '_ {
        self.values[..self.n].iter().map(|v| *v as usize)
    }
}

/// Every length of `parts` and the message's whole length, from each other part's
/// (`len_of`), in one pass from the end: what follows a length is known when it is reached.
pub fn lengths<V>(parts: &[Part<V>], len_of: impl Fn(&Part<V>) -> usize) -> (Lengths, usize) {
    // The bytes counted so far of each group open (from the end), the message's at 0.
    let mut groups = [0usize; MAX_DEPTH + 1];
    let mut depth = 0;
    let mut backwards = [0u32; MAX_LENGTHS];
    let mut n = 0;
    for p in parts.iter().rev() {
        match p {
            Part::Close => {
                depth = (depth + 1).min(MAX_DEPTH);
                groups[depth] = 0;
            }
            Part::Open => {
                let inner = groups[depth];
                depth = depth.saturating_sub(1);
                groups[depth] += inner;
            }
            Part::Length(kind) => {
                let v = groups[depth];
                if let Some(slot) = backwards.get_mut(n) {
                    *slot = u32::try_from(v).unwrap_or(u32::MAX);
                    n += 1;
                }
                groups[depth] += kind.width(v);
            }
            other => groups[depth] += len_of(other),
        }
    }
    let mut l = Lengths {
        values: [0; MAX_LENGTHS],
        n,
    };
    for (i, v) in backwards[..n].iter().rev().enumerate() {
        l.values[i] = *v;
    }
    (l, groups[0])
}

/// A bytes template's lengths and its pad's (the message `size` bytes if it has a `${pad}`,
/// one byte short where a length grows a byte with it), `len_of` giving every other part's.
pub fn layout<V>(
    parts: &[Part<V>],
    size: usize,
    len_of: impl Fn(&Part<V>) -> usize,
) -> (Lengths, usize) {
    let with_pad = |pad: usize| {
        lengths(parts, |p| match p {
            Part::Pad => pad,
            other => len_of(other),
        })
    };
    let (mut l, total) = with_pad(0);
    if total >= size || !parts.iter().any(|p| matches!(p, Part::Pad)) {
        return (l, 0);
    }
    let mut pad = size - total;
    // A longer pad may widen lengths (a varint at 128): taken off the pad, which then fits.
    for _ in 0..4 {
        let (now, total) = with_pad(pad);
        l = now;
        if total <= size {
            break;
        }
        pad = pad.saturating_sub(total - size);
    }
    (l, pad)
}

/// How long a part other than a literal, a variable or the pad is in a bytes template, its
/// numbers `conn`, `seq` and `send_time_us`. (`${random}` in digits is refused there.)
pub fn width_of<V>(p: &Part<V>, conn: u64, seq: u64, send_time_us: u64) -> usize {
    let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
    match p {
        Part::Conn => digits(conn),
        Part::Seq => digits(seq),
        Part::SendTime => digits(send_time_us),
        Part::Hex(n) => *n,
        Part::Uuid => 36,
        Part::Binary(_, w) => w.bytes(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
