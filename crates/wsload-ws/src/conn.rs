//! One client WebSocket connection after its handshake: [`Ws`], reading and writing frames
//! through the thread's spare buffers, a `Stream` + `Sink` of tungstenite's messages.

use crate::deflate::{Deflate, DeflateParams, Inflated};
use crate::error::{HandshakeError, failure_code, invalid_utf8};
use crate::frame::{self, OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, RSV1};
use crate::handshake::{self, Head};
use crate::io::Io;
use crate::limits::Limits;
use crate::mask;
use crate::message::{Fragments, close_frame, close_payload, data_message, is_utf8};
use crate::spare::Spare;
use crate::split::{Cursor, Packet, Split, unescape};
use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Sink, Stream};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::Data;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

/// Queued bytes past which `poll_ready` writes before taking more: a window of 64 echoes of
/// 1 KiB goes out in one write.
const WRITE_SOFT_LIMIT: usize = 128 * 1024;
/// An incomplete frame up to this size is copied out of the thread's read buffer into one of
/// the connection's own (a frame cut by the end of a read); a larger one keeps the buffer it is
/// in, or a large message arriving over many reads would be copied again after every read.
const COPY_OUT_MAX: usize = 4 * 1024;

/// Counts one message, `[expected, other text, other binary]`.
#[inline]
fn count(
    tallies: &mut [Tally; 3],
    expected: &mut impl FnMut(bool, &[u8]) -> bool,
    is_text: bool,
    payload: &[u8],
) {
    let at = match (expected(is_text, payload), is_text) {
        (true, _) => 0,
        (false, true) => 1,
        (false, false) => 2,
    };
    tallies[at].add(payload.len());
}

/// What a connection splits frames with, as a counting read takes it: the split, where an
/// escaped part is unescaped to be looked at, what a packet stream carries between frames,
/// and the most it may carry.
struct Splitting<'a> {
    split: &'a Split,
    scratch: &'a mut Vec<u8>,
    carry: &'a mut Vec<u8>,
    max: usize,
}

/// Counts every part of a frame the server packed several messages into, each a message; an
/// escaped part is looked at unescaped (in `scratch`); a packet a stream's frames began is
/// counted in the frame that completes it.
fn count_parts(
    tallies: &mut [Tally; 3],
    expected: &mut impl FnMut(bool, &[u8]) -> bool,
    is_text: bool,
    frame: &[u8],
    s: &mut Splitting<'_>,
) -> Result<(), WsError> {
    let (split, scratch) = (s.split, &mut *s.scratch);
    let mut cursor = Cursor::default();
    if split.streams() {
        if is_text {
            count(tallies, expected, is_text, frame);
            return Ok(());
        }
        if !s.carry.is_empty() {
            let (used, head) = split.complete(s.carry, frame);
            if head == Packet::Short {
                return within(s.carry, s.max);
            }
            count(tallies, expected, is_text, s.carry);
            s.carry.clear();
            cursor = Cursor::at(used);
        }
    }
    while let Some((part, next)) = split.next(frame, cursor) {
        cursor = next;
        let raw = &frame[part.range];
        if part.escaped {
            scratch.clear();
            if unescape(raw, scratch) {
                count(tallies, expected, is_text, scratch);
                continue;
            }
        }
        count(tallies, expected, is_text, raw);
    }
    s.carry.extend_from_slice(split.carried(frame, cursor));
    within(s.carry, s.max)
}

/// A packet carried across frames may grow to the message limit, no further: a server that
/// announces a bigger one fails the connection as a message too big, as an unsplit one would.
fn within(carry: &[u8], max: usize) -> Result<(), WsError> {
    if carry.len() > max {
        return Err(WsError::Capacity(CapacityError::MessageTooLong {
            size: carry.len(),
            max_size: max,
        }));
    }
    Ok(())
}

/// Frames and their payload bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub frames: u64,
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, bytes: usize) {
        self.frames += 1;
        self.bytes += bytes as u64;
    }
}

/// What [`Ws::poll_recv`] took from the connection.
#[derive(Debug)]
pub enum Recv {
    /// Data messages, at least one: those the caller expected, and the other text and binary
    /// ones.
    Data {
        expected: Tally,
        text: Tally,
        binary: Tally,
    },
    /// A control message (a ping is answered already; a close too), or a reassembled
    /// fragmented data message.
    Other(Message),
}

/// What only some connections hold: the `extra` of [`Ws`].
#[derive(Default)]
struct Extra {
    frag: Option<Fragments>,
    deflate: Option<Deflate>,
    /// How the server packs several messages into a frame, and the frame being handed on
    /// part by part.
    split: Option<Split>,
    pending: Option<Pending>,
    /// Where escaped parts are written out unescaped: messages are cut from it, so a block
    /// serves many (see `next_part`); and where a counting read unescapes one to look at it.
    unescaped: BytesMut,
    scratch: Vec<u8>,
    /// What a packet stream's frames hold of a packet not yet whole.
    carry: Vec<u8>,
}

/// A frame whose parts are being handed on as messages.
struct Pending {
    text: bool,
    frame: Bytes,
    cursor: Cursor,
}

/// Bytes of unescaped parts a block of [`Extra::unescaped`] is made for.
const UNESCAPED_BLOCK: usize = 16 * 1024;

/// One client WebSocket connection after its handshake.
pub struct Ws {
    io: Io,
    /// Bytes read and not yet parsed: empty with no capacity while idle, the thread's spare
    /// read buffer during a poll (see [`Spare`]).
    rd: BytesMut,
    /// Capacity a read aims for (one read takes a burst of echoes).
    read_size: u32,
    /// `rd` is the thread's read buffer, kept past a poll (a complete frame is still in it).
    holds_spare: bool,
    /// Frames queued; `wr[wr_pos..]` is not written yet. No capacity while nothing is queued.
    wr: Vec<u8>,
    wr_pos: usize,
    /// A fragmented message being reassembled, and permessage-deflate once agreed: boxed
    /// together, so a connection with neither pays one word (the struct stays within two
    /// cache lines).
    extra: Option<Box<Extra>>,
    close_sent: bool,
    close_received: bool,
    /// A pong or a close reply waits in `wr`: reads push it out.
    reply_pending: bool,
    /// An automatic reply (a data frame, `queue_reply`) is queued and not written yet.
    data_replies_queued: bool,
    /// The stream has ended (closed, or failed): reads return `None`.
    ended: bool,
    /// Bytes handed to the transport since the connection opened, wrapping: whether writes
    /// progress (32 bits keep the struct within two cache lines).
    written: u32,
    /// Bytes of this side's own messages queued since `wr` was last empty (saturating). What
    /// else is queued is replies, and only those count against the pending-write limit: a
    /// message of our own larger than the limit, still unwritten, is no sign of a server that
    /// sends and never reads.
    own_queued: u32,
    /// What the server may make this connection hold.
    limits: Limits,
}

impl Ws {
    /// A connection over `io` whose reads aim at `read_size` bytes, with the default
    /// [`Limits`].
    pub fn new(io: Io, read_size: usize) -> Ws {
        Ws::with_limits(io, read_size, Limits::default())
    }

    /// A connection over `io` whose reads aim at `read_size` bytes, bounded by `limits`.
    pub fn with_limits(io: Io, read_size: usize, limits: Limits) -> Ws {
        Ws {
            io,
            rd: BytesMut::new(),
            read_size: read_size.clamp(256, 1 << 30) as u32,
            holds_spare: false,
            wr: Vec::new(),
            wr_pos: 0,
            extra: None,
            close_sent: false,
            close_received: false,
            reply_pending: false,
            data_replies_queued: false,
            ended: false,
            written: 0,
            own_queued: 0,
            limits,
        }
    }

    /// The bounds this connection was opened with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn get_ref(&self) -> &Io {
        &self.io
    }

    /// Bytes read from the transport and not taken as frames yet.
    pub fn buffered(&self) -> usize {
        self.rd.len()
    }

    /// The transport, for a caller that drains it until the peer closes (after a failure).
    pub fn into_io(self) -> Io {
        self.io
    }

    /// From now on, data messages are compressed and compressed ones inflated with the
    /// parameters the server agreed to (the handshake's [`crate::handshake::Agreed`]).
    pub fn use_deflate(&mut self, params: DeflateParams) {
        self.extra.get_or_insert_default().deflate = Some(Deflate::new(params));
    }

    /// Hands each message of a frame on as one of its own, as the server packs them
    /// (`split`): for what is read from now on.
    pub fn split_messages(&mut self, split: Split) {
        self.extra.get_or_insert_default().split = Some(split);
    }

    // --- the opening handshake -----------------------------------------------------------

    /// Sends `request` (a complete HTTP upgrade request) and reads the response head; bytes
    /// after it stay buffered as the first frames.
    pub async fn handshake(&mut self, request: &[u8]) -> Result<Head, HandshakeError> {
        self.io
            .write_all(request)
            .await
            .map_err(HandshakeError::Io)?;
        self.io.flush().await.map_err(HandshakeError::Io)?;
        std::future::poll_fn(|cx| self.with_spare_read(|ws| ws.poll_head(cx))).await
    }

    /// Reads until the response head is complete and takes it off the buffer.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<Head, HandshakeError>> {
        loop {
            if let Some(head) = handshake::take_head(&mut self.rd).transpose() {
                return Poll::Ready(head);
            }
            if self.rd.capacity() - self.rd.len() < 256 {
                self.rd.reserve(1024);
            }
            let Ws { io, rd, .. } = self;
            let read = std::pin::pin!(io.read_buf(rd));
            match ready!(read.poll(cx)) {
                Ok(0) => return Poll::Ready(Err(HandshakeError::Eof)),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(HandshakeError::Io(e))),
            }
        }
    }

    // --- writing ---------------------------------------------------------------------------

    /// Bytes queued and not written yet.
    pub fn queued(&self) -> usize {
        self.wr.len() - self.wr_pos
    }

    /// A count of the bytes handed to the transport, wrapping at 2^32: a writer that waits
    /// sees from its changing whether the server is taking anything.
    pub fn write_progress(&self) -> u32 {
        self.written
    }

    /// Whether the peer has sent bytes not read yet (buffered here, or waiting in the socket):
    /// a writer that waits while they pile up waits on itself (a peer blocked writing to us
    /// reads nothing), not on the peer. Peeks: nothing is consumed. For a writer that has
    /// waited long, not for every write.
    pub fn has_unread(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.rd.is_empty() {
            return true;
        }
        let tcp = match &mut self.io {
            Io::Plain(s) => s,
            Io::Tls(s) => s.get_mut().0,
        };
        let mut one = [0u8; 1];
        let mut buf = tokio::io::ReadBuf::new(&mut one);
        matches!(tcp.poll_peek(cx, &mut buf), Poll::Ready(Ok(n)) if n > 0)
    }

    /// Takes back the data frames queued that not a byte of has been written: a writer that
    /// stops (a cell's deadline, the server not reading) sends them never, instead of later,
    /// so what it counts as sent is what the server can have received. The frame being
    /// written stays (it must end), and so do control frames (pongs, a close). `(frames,
    /// payload bytes)` taken back. None with permessage-deflate (the frames after them would
    /// be compressed against data the server never saw), nor while an automatic reply waits.
    pub fn withdraw_unwritten(&mut self) -> (u64, u64) {
        // Automatic replies queued among them are data frames too, and not the writer's own
        // to count: nothing is taken back while one waits.
        if self.extra.as_ref().is_some_and(|e| e.deflate.is_some()) || self.data_replies_queued {
            return (0, 0);
        }
        let (mut frames, mut payload) = (0u64, 0u64);
        let mut at = 0;
        let mut keep = at;
        while at < self.wr.len() {
            let Some(h) = frame::parse_header(&self.wr[at..]) else {
                break;
            };
            let end = at + h.header_len + h.payload_len as usize;
            if end > self.wr.len() {
                break;
            }
            if at >= self.wr_pos && !h.is_control() {
                frames += 1;
                payload += h.payload_len;
            } else {
                self.wr.copy_within(at..end, keep);
                keep += end - at;
            }
            at = end;
        }
        if frames > 0 {
            let gone = at - keep;
            self.wr.copy_within(at.., keep);
            self.wr.truncate(self.wr.len() - gone);
            self.own_queued = self
                .own_queued
                .saturating_sub(u32::try_from(gone).unwrap_or(u32::MAX));
        }
        (frames, payload)
    }

    /// Whether enough is queued that it should be written before more is queued.
    pub fn over_soft_limit(&self) -> bool {
        self.queued() >= WRITE_SOFT_LIMIT
    }

    /// Queues one frame (FIN set, masked with a fresh random key).
    fn frame(&mut self, opcode: u8, payload: &[u8]) {
        if self.wr.is_empty() {
            self.take_spare_write();
        }
        frame::encode(&mut self.wr, true, opcode, payload, Some(mask::fresh_key()));
    }

    /// Queues a data message's frame: text if `text`, else binary.
    pub fn queue_data(&mut self, text: bool, payload: &[u8]) {
        self.own(|ws| ws.data_frame(if text { OP_TEXT } else { OP_BINARY }, payload));
    }

    /// Queues what `queue` queues as this side's own.
    fn own<T>(&mut self, queue: impl FnOnce(&mut Self) -> T) -> T {
        let before = self.wr.len();
        let out = queue(self);
        let added = u32::try_from(self.wr.len() - before).unwrap_or(u32::MAX);
        self.own_queued = self.own_queued.saturating_add(added);
        out
    }

    /// Queued bytes that are replies (pongs, close replies, automatic replies): at least
    /// this many are unwritten.
    fn replies_queued(&self) -> usize {
        self.queued().saturating_sub(self.own_queued as usize)
    }

    /// Queues a data message's frame, compressed (RSV1 set) when permessage-deflate is agreed.
    fn data_frame(&mut self, opcode: u8, payload: &[u8]) {
        let Some(mut d) = self.extra.as_mut().and_then(|e| e.deflate.take()) else {
            return self.frame(opcode, payload);
        };
        d.with_compressed(payload, |compressed| match compressed {
            Some(c) => self.frame(opcode | RSV1, c),
            None => self.frame(opcode, payload),
        });
        self.extra.get_or_insert_default().deflate = Some(d);
    }

    /// Queues a data message that answers the server (a conversation's automatic reply):
    /// reads push it out as they push pongs, so a reader that never writes still sends it.
    pub fn queue_reply(&mut self, text: bool, payload: &[u8]) {
        if self.close_sent {
            return;
        }
        self.data_frame(if text { OP_TEXT } else { OP_BINARY }, payload);
        self.reply_pending = true;
        self.data_replies_queued = true;
    }

    /// Writes what is queued, all of it; `Ready(Ok)` once the buffer is empty.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.wr_pos < self.wr.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.wr[self.wr_pos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.wr_pos += n;
            self.written = self.written.wrapping_add(n as u32);
        }
        self.wr.clear();
        self.wr_pos = 0;
        self.own_queued = 0;
        self.data_replies_queued = false;
        self.give_back_write();
        Poll::Ready(Ok(()))
    }

    /// Takes the thread's write buffer before queueing into an empty one (unless this one is
    /// larger already).
    fn take_spare_write(&mut self) {
        Spare::with(|s| {
            if s.write.capacity() > self.wr.capacity() {
                std::mem::swap(&mut self.wr, &mut s.write);
            }
        });
    }

    /// Everything queued is written: the buffer goes back to the thread (the larger of the two
    /// is kept), and the connection holds none.
    fn give_back_write(&mut self) {
        if self.wr.capacity() == 0 {
            return;
        }
        let mine = std::mem::take(&mut self.wr);
        Spare::with(|s| {
            if mine.capacity() > s.write.capacity() {
                s.write = mine;
            }
        });
    }

    /// Ready when more may be queued: below the soft limit, writing first if above it.
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        if self.queued() >= WRITE_SOFT_LIMIT {
            ready!(self.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    /// Writes everything queued and flushes the transport.
    pub fn poll_flush_all(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        ready!(self.poll_write_out(cx))?;
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        self.reply_pending = false;
        Poll::Ready(Ok(()))
    }

    /// Queues `msg`.
    fn queue(&mut self, msg: Message) -> Result<(), WsError> {
        if self.close_sent {
            return Err(WsError::Protocol(ProtocolError::SendAfterClosing));
        }
        match msg {
            Message::Text(t) => self.data_frame(OP_TEXT, t.as_bytes()),
            Message::Binary(b) => self.data_frame(OP_BINARY, &b),
            Message::Ping(p) => self.frame(OP_PING, &p),
            Message::Pong(p) => self.frame(OP_PONG, &p),
            Message::Close(f) => {
                self.close_sent = true;
                self.queue_close(f.map(|f| (u16::from(f.code), f.reason)));
            }
            Message::Frame(_) => {
                return Err(WsError::Protocol(ProtocolError::InvalidOpcode(0xff)));
            }
        }
        Ok(())
    }

    fn queue_close(&mut self, frame: Option<(u16, Utf8Bytes)>) {
        match frame {
            None => self.frame(OP_CLOSE, &[]),
            Some((code, reason)) => self.frame(OP_CLOSE, &close_payload(code, &reason)),
        }
    }

    // --- reading ---------------------------------------------------------------------------

    /// Reads once more into the buffer: the byte count, 0 at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let spare = self.rd.capacity() - self.rd.len();
        let target = self.read_size as usize;
        if spare < (target / 4).max(64) {
            // Aim for `target` in all; unique and empty, the buffer is reclaimed in place.
            self.rd
                .reserve(target.saturating_sub(self.rd.len()).max(target / 4).max(64));
        }
        let Ws { io, rd, .. } = self;
        let read = std::pin::pin!(io.read_buf(rd));
        read.poll(cx)
    }

    /// Runs one read step `f` on the thread's read buffer (see [`Spare`]): what this
    /// connection had buffered (an incomplete frame) is copied in first, and what `f` leaves
    /// is copied back out after, unless it is a complete frame or a large incomplete one: then
    /// the connection keeps the buffer until a later step empties it.
    fn with_spare_read<R>(&mut self, f: impl FnOnce(&mut Ws) -> R) -> R {
        // The connection's own buffer while it borrows the spare: it takes the rest, if any.
        let mut own = BytesMut::new();
        let lent = !self.holds_spare;
        if lent {
            let mut shared = Spare::with(|s| std::mem::take(&mut s.read)).unwrap_or_default();
            shared.extend_from_slice(&self.rd);
            own = std::mem::replace(&mut self.rd, shared);
            own.clear();
        }
        let r = f(self);
        if !self.rd.is_empty() && (self.rd.len() > COPY_OUT_MAX || frame::is_complete(&self.rd)) {
            // The next step takes the rest; meanwhile another connection grows a buffer of its
            // own from an empty spare.
            self.holds_spare = true;
            return r;
        }
        self.holds_spare = false;
        if self.rd.is_empty() {
            // Nothing to hold: no capacity kept.
            own = BytesMut::new();
        } else {
            own.extend_from_slice(&self.rd);
        }
        let mut shared = std::mem::replace(&mut self.rd, own);
        shared.clear();
        // Two buffers meet when another connection grew one while this one held the spare:
        // the larger stays.
        Spare::with(|s| {
            if shared.capacity() >= s.read.capacity() {
                s.read = shared;
            }
        });
        r
    }

    /// The next complete message in the buffer, reassembling fragments and answering pings
    /// and closes; `Ok(None)` when more bytes are needed.
    fn parse_message(&mut self) -> Result<Option<Message>, WsError> {
        if let Some(part) = self.next_part()? {
            return Ok(Some(part));
        }
        let deflate = self.deflates();
        let max_frame = self.limits.max_frame as usize;
        let max_message = self.limits.max_message as usize;
        while let Some((header, payload)) = frame::take(&mut self.rd, deflate, max_frame)? {
            let fin = header.fin;
            match header.opcode {
                OP_CLOSE => {
                    let close = close_frame(payload)?;
                    if self.close_received {
                        continue;
                    }
                    self.close_received = true;
                    if !self.close_sent {
                        // Answer with the same code (RFC 6455 5.5.1); the reply goes out with
                        // the next read, write or flush.
                        self.close_sent = true;
                        self.queue_close(close.as_ref().map(|f| (u16::from(f.code), "".into())));
                        self.reply_pending = true;
                    }
                    return Ok(Some(Message::Close(close)));
                }
                OP_PING => {
                    if !self.close_sent {
                        self.frame(OP_PONG, &payload);
                        self.reply_pending = true;
                    }
                    return Ok(Some(Message::Ping(payload)));
                }
                OP_PONG => return Ok(Some(Message::Pong(payload))),
                op @ (OP_TEXT | OP_BINARY) => {
                    if self.frag().is_some() {
                        return Err(WsError::Protocol(ProtocolError::ExpectedFragment(
                            if op == OP_TEXT {
                                Data::Text
                            } else {
                                Data::Binary
                            },
                        )));
                    }
                    if self.close_received {
                        continue;
                    }
                    if fin {
                        let payload = if header.rsv1 {
                            self.inflate(&payload)?
                        } else {
                            payload
                        };
                        match self.message_of(op == OP_TEXT, payload)? {
                            Some(msg) => return Ok(Some(msg)),
                            None => continue,
                        }
                    }
                    self.extra.get_or_insert_default().frag = Some(Fragments {
                        text: op == OP_TEXT,
                        compressed: header.rsv1,
                        data: BytesMut::from(&payload[..]),
                    });
                }
                OP_CONT => {
                    let Some(f) = self.extra.as_mut().and_then(|e| e.frag.as_mut()) else {
                        return Err(WsError::Protocol(ProtocolError::UnexpectedContinueFrame));
                    };
                    if f.data.len() + payload.len() > max_message {
                        return Err(WsError::Capacity(CapacityError::MessageTooLong {
                            size: f.data.len() + payload.len(),
                            max_size: max_message,
                        }));
                    }
                    f.data.extend_from_slice(&payload);
                    if fin && let Some(f) = self.take_frag() {
                        if self.close_received {
                            continue;
                        }
                        let data = if f.compressed {
                            self.inflate(&f.data)?
                        } else {
                            f.data.freeze()
                        };
                        match self.message_of(f.text, data)? {
                            Some(msg) => return Ok(Some(msg)),
                            None => continue,
                        }
                    }
                }
                op if op >= 8 => {
                    return Err(WsError::Protocol(ProtocolError::UnknownControlFrameType(
                        op,
                    )));
                }
                op => {
                    return Err(WsError::Protocol(ProtocolError::UnknownDataFrameType(op)));
                }
            }
        }
        Ok(None)
    }

    /// A complete data message's payload as the message handed on: itself, or its first part
    /// when the server packs several in a frame (the others follow, `next_part`); `None` for a
    /// frame with no part at all.
    fn message_of(&mut self, text: bool, payload: Bytes) -> Result<Option<Message>, WsError> {
        let max = self.limits.max_message as usize;
        match self.extra.as_mut() {
            Some(e) if e.split.is_some() => {
                if text && !is_utf8(&payload) {
                    return Err(invalid_utf8());
                }
                let mut cursor = Cursor::default();
                let mut first = None;
                if let Some(split) = e.split.as_ref().filter(|s| s.streams()) {
                    if text {
                        cursor = Cursor::whole();
                    } else if !e.carry.is_empty() {
                        let (used, head) = split.complete(&mut e.carry, &payload);
                        if head == Packet::Short {
                            return within(&e.carry, max).map(|()| None);
                        }
                        first = Some(Bytes::from(std::mem::take(&mut e.carry)));
                        cursor = Cursor::at(used);
                    }
                }
                e.pending = Some(Pending {
                    text,
                    frame: payload,
                    cursor,
                });
                match first {
                    Some(packet) => data_message(false, packet).map(Some),
                    None => self.next_part(),
                }
            }
            _ => data_message(text, payload).map(Some),
        }
    }

    /// The next part of the frame being split, as a counting read takes it: its kind and
    /// bytes; `None` when no frame is being split.
    fn pending_part(&mut self) -> Option<Result<(bool, Bytes), WsError>> {
        self.extra.as_ref()?.pending.as_ref()?;
        match self.next_part() {
            Ok(Some(Message::Text(t))) => Some(Ok((true, Bytes::from(t)))),
            Ok(Some(Message::Binary(b))) => Some(Ok((false, b))),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// The next part of the frame being split, as a message: a slice of the frame, or an
    /// escaped string's text cut from the unescaped block. `None` once the frame is done.
    fn next_part(&mut self) -> Result<Option<Message>, WsError> {
        let max = self.limits.max_message as usize;
        let Some(e) = self.extra.as_mut() else {
            return Ok(None);
        };
        let (Some(split), Some(p)) = (e.split.as_ref(), e.pending.as_mut()) else {
            return Ok(None);
        };
        let Some((part, next)) = split.next(&p.frame, p.cursor) else {
            e.carry.extend_from_slice(split.carried(&p.frame, p.cursor));
            e.pending = None;
            return within(&e.carry, max).map(|()| None);
        };
        p.cursor = next;
        let raw = &p.frame[part.range.clone()];
        let bytes = if part.escaped {
            if e.unescaped.capacity() - e.unescaped.len() < raw.len() {
                e.unescaped.reserve(raw.len().max(UNESCAPED_BLOCK));
            }
            if !unescape(raw, &mut e.unescaped) {
                // Not JSON's escapes: handed on as it came.
                e.unescaped.clear();
                e.unescaped.extend_from_slice(raw);
            }
            e.unescaped.split().freeze()
        } else {
            p.frame.slice(part.range)
        };
        data_message(p.text, bytes).map(Some)
    }

    fn frag(&self) -> Option<&Fragments> {
        self.extra.as_ref().and_then(|e| e.frag.as_ref())
    }

    /// The reassembled message, off the connection: without permessage-deflate the box goes
    /// too (one per fragmented message, as before).
    fn take_frag(&mut self) -> Option<Fragments> {
        let e = self.extra.as_mut()?;
        let f = e.frag.take();
        if e.deflate.is_none() && e.split.is_none() {
            self.extra = None;
        }
        f
    }

    fn deflates(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| e.deflate.is_some())
    }

    /// A compressed message's payload inflated, within the message limit: a message that
    /// inflates past it (a decompression bomb) fails the connection as too big as soon as the
    /// output passes the limit.
    fn inflate(&mut self, compressed: &[u8]) -> Result<Bytes, WsError> {
        let max_message = self.limits.max_message as usize;
        let Some(d) = self.extra.as_mut().and_then(|e| e.deflate.as_mut()) else {
            // Frames with RSV1 are refused without permessage-deflate: not reached.
            return Err(WsError::Protocol(ProtocolError::NonZeroReservedBits));
        };
        let mut out = Vec::new();
        match d.inflate(compressed, &mut out, max_message) {
            Ok(Inflated::Done) => Ok(Bytes::from(out)),
            Ok(Inflated::TooBig(size)) => Err(WsError::Capacity(CapacityError::MessageTooLong {
                size,
                max_size: max_message,
            })),
            Err(e) => Err(WsError::Io(io::Error::new(io::ErrorKind::InvalidData, e))),
        }
    }

    /// Pushes a pending pong or close reply out, without waiting for the socket. What the
    /// socket does not take stays queued, up to the pending-write limit: past it the server
    /// sends (pings, messages answered automatically) faster than it reads, and the
    /// connection fails rather than queue replies without bound.
    fn push_replies(&mut self, cx: &mut Context<'_>) -> Result<(), WsError> {
        if self.reply_pending {
            match self.poll_flush_all(cx) {
                Poll::Ready(r) => r?,
                Poll::Pending if self.replies_queued() > self.limits.max_pending_write as usize => {
                    return Err(WsError::WriteBufferFull(Box::new(Message::Pong(
                        Bytes::new(),
                    ))));
                }
                Poll::Pending => {}
            }
        }
        Ok(())
    }

    /// The end of the stream: the closing handshake's end, or a reset.
    fn eof(&mut self) -> Option<Result<Message, WsError>> {
        self.ended = true;
        if self.close_received {
            None
        } else {
            Some(Err(WsError::Protocol(
                ProtocolError::ResetWithoutClosingHandshake,
            )))
        }
    }

    /// Fails the connection (RFC 6455 7.1.7): for a violation by the peer, a close frame with
    /// its status code goes out first, as far as the socket takes it without waiting; the
    /// caller then [`Ws::linger`]s, which writes the rest. Only on this path, so it costs
    /// reads nothing.
    fn fail<T>(&mut self, cx: &mut Context<'_>, e: WsError) -> Poll<Option<Result<T, WsError>>> {
        self.ended = true;
        if let Some(code) = failure_code(&e)
            && !self.close_sent
        {
            self.close_sent = true;
            self.queue_close(Some((code, "".into())));
            // Pending: the socket's buffer is full; `linger` writes the close out.
            let _ = self.poll_flush_all(cx);
        }
        Poll::Ready(Some(Err(e)))
    }

    /// The end of a failed connection, bounded by `until`: what is queued (the close frame a
    /// violation sent) is written out, the write side shut down (FIN), and whatever the peer
    /// still sends read and thrown away until it closes.
    ///
    /// Dropping a socket with unread bytes in its receive buffer makes the kernel answer with
    /// a reset, and a peer that is still sending may see the reset before it reads the close
    /// frame (it then never learns why): reading to the end first lets the close arrive as
    /// the last thing the peer reads. Errors end it quietly: the connection has failed already.
    pub async fn linger(&mut self, until: tokio::time::Instant) {
        let _ = tokio::time::timeout_at(until, async {
            if std::future::poll_fn(|cx| self.poll_write_out(cx))
                .await
                .is_err()
            {
                return;
            }
            if self.io.shutdown().await.is_err() {
                return;
            }
            let mut sink = vec![0u8; 16 * 1024];
            while let Ok(n) = self.io.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
    }

    /// Counting reads: every complete, unfragmented data frame already buffered (reading once
    /// if none is), counted without building messages, each as `expected` or not by
    /// `expected(text, payload)`, which sees the payload where it lies in the read buffer;
    /// anything else comes as a message of its own. `None` once the stream has ended.
    pub fn poll_recv(
        &mut self,
        cx: &mut Context<'_>,
        expected: &mut impl FnMut(bool, &[u8]) -> bool,
    ) -> Poll<Option<Result<Recv, WsError>>> {
        self.with_spare_read(|ws| ws.poll_recv_step(cx, expected))
    }

    fn poll_recv_step(
        &mut self,
        cx: &mut Context<'_>,
        expected: &mut impl FnMut(bool, &[u8]) -> bool,
    ) -> Poll<Option<Result<Recv, WsError>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            if let Err(e) = self.push_replies(cx) {
                return self.fail(cx, e);
            }
            let mut tallies = [Tally::default(); 3];
            // Parts of a frame the message path split and has not handed on yet come first.
            while let Some(msg) = self.pending_part() {
                match msg {
                    Ok((is_text, part)) => count(&mut tallies, expected, is_text, &part),
                    Err(e) => return self.fail(cx, e),
                }
            }
            if self.frag().is_none() && !self.close_received {
                let deflate = self.deflates();
                let max_frame = self.limits.max_frame as usize;
                let max = self.limits.max_message as usize;
                let (rd, extra) = (&mut self.rd, &mut self.extra);
                // A frame the server packed several messages into is counted part by part.
                let mut split = extra.as_mut().and_then(|e| {
                    Some(Splitting {
                        split: e.split.as_ref()?,
                        scratch: &mut e.scratch,
                        carry: &mut e.carry,
                        max,
                    })
                });
                loop {
                    let h = match frame::peek(rd, deflate, max_frame) {
                        Ok(Some(h)) => h,
                        Ok(None) => break,
                        Err(e) => return self.fail(cx, e),
                    };
                    let (head, len) = (h.header_len, h.payload_len as usize);
                    // A compressed message is inflated by the message path, and counted there.
                    if !h.fin || h.rsv1 || !(h.opcode == OP_TEXT || h.opcode == OP_BINARY) {
                        break;
                    }
                    let is_text = h.opcode == OP_TEXT;
                    let payload = &rd[head..head + len];
                    if is_text && !is_utf8(payload) {
                        return self.fail(cx, invalid_utf8());
                    }
                    match &mut split {
                        None => count(&mut tallies, expected, is_text, payload),
                        Some(s) => {
                            if let Err(e) = count_parts(&mut tallies, expected, is_text, payload, s)
                            {
                                return self.fail(cx, e);
                            }
                        }
                    }
                    rd.advance(head + len);
                }
            }
            let [want, text, binary] = tallies;
            if want.frames + text.frames + binary.frames > 0 {
                return Poll::Ready(Some(Ok(Recv::Data {
                    expected: want,
                    text,
                    binary,
                })));
            }
            match self.parse_message() {
                Ok(Some(msg)) => {
                    if let Err(e) = self.push_replies(cx) {
                        return self.fail(cx, e);
                    }
                    // A reassembled data message (or a split one's first part) counts like
                    // the others.
                    let (is_text, payload) = match &msg {
                        Message::Text(t) => (true, t.as_bytes()),
                        Message::Binary(b) => (false, &b[..]),
                        _ => return Poll::Ready(Some(Ok(Recv::Other(msg)))),
                    };
                    let mut tallies = [Tally::default(); 3];
                    count(&mut tallies, expected, is_text, payload);
                    let [expected, text, binary] = tallies;
                    return Poll::Ready(Some(Ok(Recv::Data {
                        expected,
                        text,
                        binary,
                    })));
                }
                Ok(None) => {}
                Err(e) => return self.fail(cx, e),
            }
            match self.poll_fill(cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(self.eof().map(|r| r.map(Recv::Other))),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return self.fail(cx, WsError::Io(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Stream for Ws {
    type Item = Result<Message, WsError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().with_spare_read(|ws| ws.poll_next_step(cx))
    }
}

impl Ws {
    fn poll_next_step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Message, WsError>>> {
        let this = self;
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            if let Err(e) = this.push_replies(cx) {
                return this.fail(cx, e);
            }
            match this.parse_message() {
                Ok(Some(msg)) => {
                    if let Err(e) = this.push_replies(cx) {
                        return this.fail(cx, e);
                    }
                    return Poll::Ready(Some(Ok(msg)));
                }
                Ok(None) => {}
                Err(e) => return this.fail(cx, e),
            }
            match this.poll_fill(cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(this.eof()),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return this.fail(cx, WsError::Io(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Sink<Message> for Ws {
    type Error = WsError;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        self.get_mut().poll_room(cx)
    }

    fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<(), WsError> {
        self.get_mut().own(|ws| ws.queue(msg))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        self.get_mut().poll_flush_all(cx)
    }

    /// Sends a close frame (no code) unless one was sent, and flushes.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), WsError>> {
        let this = self.get_mut();
        if !this.close_sent {
            this.close_sent = true;
            this.queue_close(None);
        }
        this.poll_flush_all(cx)
    }
}

#[cfg(test)]
mod deflate_tests;
#[cfg(test)]
mod tests;
