//! A template ready to send ([`Out`]): literal bytes in one buffer, the pieces in order, the
//! cell's encoding; and the per-message values it is filled with ([`Fill`], [`SendTime`]).
//! A bytes template's (a binary protocol's) lengths are computed before it is written, from
//! its pieces' widths, so that it too is written once, in place.

use super::encoding::Encoding;
use super::error::ScriptError;
use super::seq_echo::SeqEcho;
use bytes::{BufMut, Bytes, BytesMut};
use std::ops::DerefMut;
use std::sync::Arc;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use wsload_spec::conversation::Payload;
use wsload_spec::decimal::parse_u64;
use wsload_spec::template::bytes::{self as binary, Lengths, MAX_LENGTH_BYTES};
use wsload_spec::template::{Num, PAD_BYTE, Part, Template, Written, uuid_text};

/// Messages cut from one arena block (see `message.rs`).
const ARENA_MESSAGES: usize = 16;
const ARENA_MAX: usize = 64 * 1024;

/// How many digits `n` has in decimal.
pub(super) fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// `${sendTime}` as written: microseconds since the Unix epoch, in decimal.
#[derive(Debug, Clone, Copy, Default)]
pub struct SendTime {
    us: u64,
    digits: [u8; 20],
    len: u8,
}

/// Compared once per message made (see [`Prebuilt`]): the digits follow from the number, and
/// the length tells the default (no digits) from zero.
impl PartialEq for SendTime {
    fn eq(&self, other: &SendTime) -> bool {
        self.us == other.us && self.len == other.len
    }
}

impl Eq for SendTime {}

impl SendTime {
    /// The shard's wall clock (`clock::unix_micros`, which the clock test hook shifts), as
    /// the conductor's clock offsets are measured against.
    pub fn now() -> SendTime {
        SendTime::from_micros(crate::machine::clock::unix_micros())
    }

    /// `us` microseconds since the Unix epoch, written as `${sendTime}` writes them.
    pub fn from_micros(us: u64) -> SendTime {
        let mut b = itoa::Buffer::new();
        let text = b.format(us).as_bytes();
        let mut digits = [0u8; 20];
        digits[..text.len()].copy_from_slice(text);
        SendTime {
            us,
            digits,
            len: text.len() as u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[..usize::from(self.len)]
    }
}

/// Where the run of pad bytes starting at `at` ends. A block at a time: the pad is most of a
/// large message, and an echo is checked in place as it is read.
#[inline]
fn pad_end(data: &[u8], at: usize) -> usize {
    const BLOCK: [u8; 64] = [PAD_BYTE; 64];
    let mut end = at.min(data.len());
    while data.len() - end >= BLOCK.len() && data[end..end + BLOCK.len()] == BLOCK {
        end += BLOCK.len();
    }
    end + data[end..].iter().take_while(|b| **b == PAD_BYTE).count()
}

/// The per-message values of a template.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fill {
    pub conn: u64,
    pub seq: u64,
    /// What `${pad}` fills to.
    pub size: usize,
}

/// One piece of a compiled template: a template's [`Part`], its literal range into the
/// template's literal buffer, its variable by its index among the connection's captures.
pub(super) type Piece = Part<usize>;

/// A number a message carries whose digits change from one message to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Number {
    Conn,
    Seq,
    SendTime,
}

/// A template ready to send: literal bytes in one buffer, the pieces in order.
#[derive(Debug, Clone)]
pub struct Out {
    pub(super) text: bool,
    pub(super) literal: Bytes,
    pub(super) pieces: Box<[Piece]>,
    /// How it goes on the wire.
    pub(super) encoding: Encoding,
    /// The message, encoded, when every message is the same at the cell's size (literal
    /// bytes and a pad): made once.
    pub(super) constant: Option<Bytes>,
    /// A message whose only number is its `${seq}`, in digits, not encoded: its echoes are
    /// read the short way ([`SeqEcho`]).
    pub(super) seq_echo: Option<Arc<SeqEcho>>,
    /// What the pad's length is computed from, once per template rather than per message.
    pub(super) shape: Shape,
}

/// A template's length, as far as it is known before a message is made: the fixed bytes,
/// and how many of each number whose width varies.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Shape {
    fixed: usize,
    conns: usize,
    seqs: usize,
    times: usize,
    pad: bool,
    random: bool,
    /// It draws random parts (`${random}`, `${hex}`, `${uuid}`): no message is the last
    /// one with its numbers written over.
    drawn: bool,
    /// It writes numbers in binary (`${seq:u16}`): not patched as digits.
    binary: bool,
    /// It has lengths (`${len:varint}`): computed before a message is written.
    lengths: bool,
}

impl Shape {
    fn of(pieces: &[Piece]) -> Shape {
        let mut s = Shape::default();
        for p in pieces {
            match p {
                Part::Literal(r) => s.fixed += r.len(),
                Part::Conn => s.conns += 1,
                Part::Seq => s.seqs += 1,
                Part::SendTime => s.times += 1,
                Part::Random => s.random = true,
                Part::Hex(n) => {
                    s.fixed += *n;
                    s.drawn = true;
                }
                Part::Uuid => {
                    s.fixed += 36;
                    s.drawn = true;
                }
                Part::Pad => s.pad = true,
                Part::Var(_) | Part::Open | Part::Close => {}
                Part::Binary(_, w) => {
                    s.fixed += w.bytes();
                    s.binary = true;
                }
                Part::Length(_) => s.lengths = true,
            }
        }
        s.drawn |= s.random;
        s
    }
}

impl Out {
    pub(super) fn compile(field: &str, p: &Payload, vars: &[String]) -> Result<Out, ScriptError> {
        let (written, source) = payload(field, p)?;
        let names: Vec<&str> = vars.iter().map(String::as_str).collect();
        let t = Template::parse_as(written, source, &names).map_err(|source| {
            ScriptError::Template {
                field: format!("{field}.{}", written.name()),
                source,
            }
        })?;
        Ok(Out::of(written.is_text(), &t, vars))
    }

    fn of(text: bool, t: &Template, vars: &[String]) -> Out {
        let mut literal = Vec::new();
        let pieces = t
            .parts()
            .iter()
            .map(|p| match p {
                Part::Literal(r) => {
                    let start = literal.len();
                    literal.extend_from_slice(t.literal(r));
                    Part::Literal(start..literal.len())
                }
                // A variable by its index among the connection's captures.
                other => other.map_var(|name| vars.iter().position(|v| **v == **name).unwrap_or(0)),
            })
            .collect();
        Out::new(text, literal.into(), pieces)
    }

    fn new(text: bool, literal: Bytes, pieces: Box<[Piece]>) -> Out {
        Out {
            text,
            literal,
            shape: Shape::of(&pieces),
            pieces,
            encoding: Encoding::AsWritten,
            constant: None,
            seq_echo: None,
        }
    }

    /// Whether it goes as a text frame (else binary).
    pub fn is_text(&self) -> bool {
        self.encoding.text(self.text)
    }

    /// Sets how it goes on the wire, and makes it once if every message at `size` is alike.
    pub(super) fn encode_as(&mut self, encoding: Encoding, size: usize) {
        self.encoding = encoding;
        self.constant = None;
        self.seq_echo = None;
        let alike = |p: &Piece| {
            matches!(
                p,
                Part::Literal(_) | Part::Pad | Part::Length(_) | Part::Open | Part::Close
            )
        };
        if !encoding.transforms() {
            let render = |seq, size| self.rendered(seq, size);
            self.seq_echo = SeqEcho::of(&self.pieces, size, render).map(Arc::new);
        }
        if self.pieces.iter().all(alike) {
            let mut rendered = Vec::new();
            self.write_at(
                &mut rendered,
                &Fill {
                    size,
                    ..Fill::default()
                },
                &SendTime::default(),
            );
            self.constant = Some(if encoding.transforms() {
                encoding.encode(&rendered).into()
            } else {
                rendered.into()
            });
        }
    }

    /// The message of `${seq}` `seq` at `size`, as written, before any encoding.
    fn rendered(&self, seq: u64, size: usize) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.literal.len() + 20 + size);
        let fill = Fill {
            seq,
            size,
            ..Fill::default()
        };
        self.write_at(&mut bytes, &fill, &SendTime::default());
        bytes
    }

    /// The message every message is, when they are all alike (see [`Out::encode_as`]).
    pub fn constant(&self) -> Option<&Bytes> {
        self.constant.as_ref()
    }

    /// Whether a message is made, then encoded (MsgPack, zlib): not patched in place.
    pub fn transforms(&self) -> bool {
        self.encoding.transforms()
    }

    /// Whether it splices captured variables (see [`Out::resolve`]).
    pub fn uses_vars(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Part::Var(_)))
    }

    /// Whether every message is the same bytes (then they are shared, not copied).
    fn is_fixed(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Part::Literal(_)))
    }

    /// The same template with the connection's captured values spliced into its literal
    /// bytes, once.
    pub fn resolve(&self, vars: &[Bytes]) -> Out {
        let mut literal = Vec::new();
        let mut pieces: Vec<Piece> = Vec::with_capacity(self.pieces.len());
        for p in self.pieces.iter() {
            let bytes = match p {
                Part::Literal(r) => &self.literal[r.clone()],
                Part::Var(i) => vars.get(*i).map_or(&[][..], |v| &v[..]),
                other => {
                    pieces.push(other.clone());
                    continue;
                }
            };
            let start = literal.len();
            literal.extend_from_slice(bytes);
            // Adjacent literals are one copy per message.
            match pieces.last_mut() {
                Some(Part::Literal(prev)) if prev.end == start => prev.end = literal.len(),
                _ => pieces.push(Part::Literal(start..literal.len())),
            }
        }
        let mut out = Out::new(self.text, literal.into(), pieces.into());
        out.encoding = self.encoding;
        out.constant = self.constant.clone();
        out.seq_echo = self.seq_echo.clone();
        out
    }

    /// One message's bytes, written into `arena` (or shared, when fixed).
    pub fn bytes(&self, arena: &mut BytesMut, fill: &Fill) -> Bytes {
        let time = if self.has_time() && self.constant.is_none() {
            SendTime::now()
        } else {
            SendTime::default()
        };
        self.bytes_at(arena, fill, &time)
    }

    /// [`Out::bytes`] with `${sendTime}` given (a publish's intended instant).
    pub fn bytes_at(&self, arena: &mut BytesMut, fill: &Fill, time: &SendTime) -> Bytes {
        if let Some(c) = &self.constant {
            return c.clone();
        }
        if self.encoding.transforms() {
            let mut rendered = Vec::with_capacity(self.literal.len() + 64 + fill.size);
            self.write_at(&mut rendered, fill, time);
            return self.encoding.encode(&rendered).into();
        }
        if self.is_fixed() {
            return self.literal.clone();
        }
        let want = self.literal.len() + 64 + fill.size;
        if arena.capacity() - arena.len() < want {
            arena.reserve((want * ARENA_MESSAGES).min(ARENA_MAX).max(want));
        }
        self.write_at(arena, fill, time);
        arena.split().freeze()
    }

    /// Appends one message to `buf`: the literal bytes, the placeholders' values written in
    /// place, and the pad (inserted once the rest is known). `${sendTime}` is now.
    pub fn write<B>(&self, buf: &mut B, fill: &Fill)
    where
        B: BufMut + DerefMut<Target = [u8]>,
    {
        let time = if self.has_time() {
            SendTime::now()
        } else {
            SendTime::default()
        };
        self.write_at(buf, fill, &time);
    }

    /// How long `${pad}` is in the message for `fill`, known before it is written (the
    /// numbers' digits counted); `None` without a pad, or with a `${random}` (known once drawn).
    fn pad_len(&self, fill: &Fill, time: &SendTime) -> Option<usize> {
        let s = &self.shape;
        if !s.pad || s.random {
            return None;
        }
        let len = s.fixed
            + s.conns * decimal_len(fill.conn)
            + s.seqs * decimal_len(fill.seq)
            + s.times * time.as_bytes().len();
        Some(fill.size.saturating_sub(len))
    }

    /// Whether a message can be made from the last by writing its numbers over (see
    /// [`Prebuilt`]): not when it draws random parts, or when its pad waits for them, or when
    /// it writes numbers in binary (only digits are patched).
    pub(super) fn patchable(&self) -> bool {
        !self.shape.drawn && !self.shape.binary
    }

    /// How many `${seq}` values its binary `${seq:uN}` holds before they repeat (see
    /// `wsload_spec::template::bytes::unwrap_seq`); `None` when its `${seq}` does not wrap.
    pub fn seq_cycle(&self) -> Option<u64> {
        self.pieces.iter().find_map(|p| match p {
            Part::Binary(Num::Seq, w) => w.cycle(),
            _ => None,
        })
    }

    /// Whether it writes `${seq}` in decimal digits (which never wrap).
    pub fn seq_in_digits(&self) -> bool {
        self.pieces.contains(&Part::Seq)
    }

    /// A bytes template's lengths and its pad's (see `bytes::layout`) for `fill`.
    fn layout(&self, fill: &Fill, time: &SendTime) -> (Lengths, usize) {
        binary::layout(&self.pieces, fill.size, |p| match p {
            Part::Literal(r) => r.len(),
            Part::SendTime => time.as_bytes().len(),
            // Resolved into the literal before a message is made.
            Part::Var(_) => 0,
            other => binary::width_of(other, fill.conn, fill.seq, time.us),
        })
    }

    /// Whether `data`, a text (`text`) or binary frame, is a message of this template sent
    /// back unchanged: every literal byte equal, each placeholder of its shape (digits, hex,
    /// a UUID, the pad's filler; a captured value up to the next literal). `Some(seq)` with
    /// the `${seq}` it carries (`None` inside when the template has none), `None` if it is
    /// not one.
    #[inline]
    pub fn echoed_seq(&self, text: bool, data: &[u8]) -> Option<Option<u64>> {
        if text != self.is_text() {
            return None;
        }
        if let Some(seq) = self.short_seq(data) {
            return Some(Some(seq));
        }
        self.walk_echo(data)
    }

    /// The `${seq}` of `data` read the short way (see [`SeqEcho`]) when this message is one
    /// it reads and `data` is its echo; `None` leaves the answer to [`Out::echoed_seq`]. The
    /// frame's kind is the caller's to check.
    #[inline]
    pub fn short_seq(&self, data: &[u8]) -> Option<u64> {
        let render = |seq, size| self.rendered(seq, size);
        self.seq_echo.as_ref()?.seq(data, render)
    }

    /// Whether [`Out::short_seq`] reads this message's echoes.
    pub fn reads_short(&self) -> bool {
        self.seq_echo.is_some()
    }

    /// [`Out::echoed_seq`] the long way: the template walked piece by piece. Kept out of the
    /// counting read's inlined path, which the short way nearly always answers.
    #[inline(never)]
    fn walk_echo(&self, data: &[u8]) -> Option<Option<u64>> {
        let mut at = 0;
        let mut seq = None;
        // A `${seq}` in binary narrower than 8 bytes has wrapped; its digits, if the
        // template writes them too, have not and are the one read.
        let mut wrapped = None;
        let run = |from: usize, ok: fn(&u8) -> bool| {
            from + data[from..].iter().take_while(|b| ok(b)).count()
        };
        for (i, p) in self.pieces.iter().enumerate() {
            let end = match p {
                Part::Literal(r) => {
                    let lit = &self.literal[r.clone()];
                    data.get(at..)?.starts_with(lit).then_some(at + lit.len())?
                }
                Part::Conn | Part::Seq | Part::SendTime | Part::Random => {
                    let end = run(at, u8::is_ascii_digit);
                    if end == at || end - at > 20 {
                        return None;
                    }
                    if *p == Part::Seq {
                        seq = Some(parse_u64(&data[at..end])?);
                    }
                    end
                }
                Part::Hex(n) => {
                    let end = at + n;
                    data.get(at..end)?
                        .iter()
                        .all(u8::is_ascii_hexdigit)
                        .then_some(end)?
                }
                Part::Uuid => {
                    let end = at + 36;
                    data.get(at..end)?
                        .iter()
                        .all(|b| b.is_ascii_hexdigit() || *b == b'-')
                        .then_some(end)?
                }
                Part::Pad => pad_end(data, at),
                Part::Binary(num, w) => {
                    let end = at + w.bytes();
                    let field = data.get(at..end)?;
                    if *num == Num::Seq {
                        wrapped = Some(field.iter().fold(0, |n, b| (n << 8) | u64::from(*b)));
                    }
                    end
                }
                Part::Length(k) => at + k.read_width(data.get(at..)?)?,
                Part::Open | Part::Close => at,
                Part::Var(_) => match self.pieces.get(i + 1) {
                    Some(Part::Literal(r)) => {
                        let next = &self.literal[r.clone()];
                        at + data
                            .get(at..)?
                            .windows(next.len())
                            .position(|w| w == next)?
                    }
                    _ => data.len(),
                },
            };
            at = end;
        }
        (at == data.len()).then_some(seq.or(wrapped))
    }

    /// Whether it carries `${sendTime}` (then a sender reads the clock for it).
    pub fn has_time(&self) -> bool {
        self.shape.times > 0
    }

    /// [`Out::write`] with `${sendTime}` given: a burst of messages made together shares one
    /// clock read and one formatting of it.
    pub fn write_at<B>(&self, buf: &mut B, fill: &Fill, time: &SendTime)
    where
        B: BufMut + DerefMut<Target = [u8]>,
    {
        self.write_recording(buf, fill, time, &mut |_, _| {});
    }

    /// [`Out::write_at`], telling `at` where each number went (its piece and offset).
    pub(super) fn write_recording<B>(
        &self,
        buf: &mut B,
        fill: &Fill,
        time: &SendTime,
        at: &mut dyn FnMut(Number, usize),
    ) where
        B: BufMut + DerefMut<Target = [u8]>,
    {
        let start = buf.len();
        let framed = self.shape.lengths.then(|| self.layout(fill, time));
        let pad = match &framed {
            Some((_, pad)) => Some(*pad),
            None => self.pad_len(fill, time),
        };
        let mut length = 0;
        let mut pad_at = None;
        let mut digits = itoa::Buffer::new();
        for p in self.pieces.iter() {
            match p {
                Part::Literal(r) => buf.put_slice(&self.literal[r.clone()]),
                Part::Conn => {
                    at(Number::Conn, buf.len() - start);
                    buf.put_slice(digits.format(fill.conn).as_bytes());
                }
                Part::Seq => {
                    at(Number::Seq, buf.len() - start);
                    buf.put_slice(digits.format(fill.seq).as_bytes());
                }
                Part::SendTime => {
                    at(Number::SendTime, buf.len() - start);
                    buf.put_slice(time.as_bytes());
                }
                Part::Random => buf.put_slice(digits.format(rand::random::<u32>()).as_bytes()),
                Part::Hex(n) => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    let mut left = *n;
                    while left > 0 {
                        let r: u64 = rand::random();
                        for k in 0..left.min(16) {
                            buf.put_u8(HEX[((r >> (4 * k)) & 0xF) as usize]);
                        }
                        left = left.saturating_sub(16);
                    }
                }
                Part::Uuid => buf.put_slice(&uuid_text(rand::random(), rand::random())),
                Part::Pad => match pad {
                    Some(n) => buf.put_bytes(PAD_BYTE, n),
                    None => pad_at = Some(buf.len()),
                },
                Part::Var(_) | Part::Open | Part::Close => {}
                Part::Binary(num, w) => {
                    let v = num.value(*w, fill.conn, fill.seq, time.us, rand::random);
                    let (b, from) = w.be(v);
                    buf.put_slice(&b[from..]);
                }
                Part::Length(k) => {
                    let v = framed.as_ref().map_or(0, |(l, _)| l.get(length));
                    length += 1;
                    buf.put_slice(k.encode(v, &mut [0; MAX_LENGTH_BYTES]));
                }
            }
        }
        // A `${random}` is as long as its digits: the pad goes in once the rest is written.
        if let Some(at) = pad_at {
            let fill_len = fill.size.saturating_sub(buf.len() - start);
            if fill_len > 0 {
                buf.put_bytes(PAD_BYTE, fill_len);
                buf[at..].rotate_right(fill_len);
            }
        }
    }

    /// One message, as a frame of the template's kind.
    pub fn message(&self, arena: &mut BytesMut, fill: &Fill) -> Message {
        self.frame(self.bytes(arena, fill))
    }

    /// [`Out::message`] with `${sendTime}` given (a publish's intended instant).
    pub fn message_at(&self, arena: &mut BytesMut, fill: &Fill, time: &SendTime) -> Message {
        self.frame(self.bytes_at(arena, fill, time))
    }

    fn frame(&self, bytes: Bytes) -> Message {
        if self.is_text() {
            // Literals are a template's UTF-8 and captures come from text frames or are made
            // valid when captured; a binary capture that is not text sends as binary.
            match std::str::from_utf8(&bytes) {
                Ok(_) => Message::Text(Utf8Bytes::try_from(bytes).unwrap_or_default()),
                Err(_) => Message::Binary(bytes),
            }
        } else {
            Message::Binary(bytes)
        }
    }
}

/// How a payload is written, and its template; exactly one must be set.
pub(super) fn payload<'a>(field: &str, p: &'a Payload) -> Result<(Written, &'a str), ScriptError> {
    p.written().ok_or_else(|| ScriptError::Payload {
        field: field.to_string(),
    })
}
