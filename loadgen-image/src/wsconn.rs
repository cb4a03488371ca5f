//! The load generator's WebSocket client connection (RFC 6455): the opening handshake and the
//! framing, written for a load generator's hot paths.
//!
//! tokio-tungstenite did this before; profiles of the load-generator benchmark showed where its
//! general-purpose design cost a load generator CPU: at 1 KiB echoes it zero-filled the whole
//! read buffer before every read (9% of the client's CPU), formatted each outgoing frame through
//! a `Frame` (8%), copied payloads twice, and set wakers through atomics on every poll; in a
//! connection storm its handshake future (10.8 KB, moved into every dial task) and its 8 KiB of
//! handshake buffers were most of the memory the storm touched. Here:
//!
//! - reads go through `read_buf` (never zero-filled) into a buffer the thread's connections take
//!   turns with (see [`Spare`]); a message's payload is split off it (no copy), and it is reused
//!   once the messages read from it are gone;
//! - each outgoing frame is written straight into a write buffer, also the thread's: header,
//!   payload copied once, masked in place with a fresh random key per frame (RFC 6455 5.3, from
//!   the same thread-local CSPRNG tungstenite uses); `flush` writes the buffer in one call;
//! - so a connection with nothing buffered owns no buffer at all: an idle connection is its
//!   socket, this struct and its task;
//! - counting loops ([`Ws::poll_recv`]) count every complete data frame buffered without building
//!   a message for each, UTF-8 of text frames still checked;
//! - the handshake request is rendered once per target (only the key and a per-connection
//!   token change) and the response is read into the thread's read buffer too.
//!
//! Messages and errors are tungstenite's types, and [`Ws`] is a `Stream` + `Sink` of messages as
//! tokio-tungstenite's stream was: pings are answered with pongs, a server's close is answered,
//! fragmented messages are reassembled, and protocol violations fail the connection as
//! tungstenite's did (same error variants, so the drop reasons reported do not change), after
//! sending the peer a close frame with the violation's status code. The Autobahn fuzzingserver
//! checks all this (`scripts/autobahn.sh --client`, through [`crate::autobahn_client`]).

use bytes::{Buf, Bytes, BytesMut};
use futures_util::{Sink, Stream};
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

/// The largest message and frame accepted (tungstenite's defaults).
const MAX_MESSAGE: usize = 64 << 20;
const MAX_FRAME: usize = 16 << 20;
/// Queued bytes past which `poll_ready` writes before taking more: a window of 64 echoes of
/// 1 KiB goes out in one write.
const WRITE_SOFT_LIMIT: usize = 128 * 1024;
/// The largest HTTP response head accepted in the handshake.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// An incomplete frame up to this size is copied out of the thread's read buffer into one of
/// the connection's own (a frame cut by the end of a read); a larger one keeps the buffer it is
/// in, or a large message arriving over many reads would be copied again after every read.
const COPY_OUT_MAX: usize = 4 * 1024;

/// The buffers the connections of one thread take turns with. A wsload worker is one thread
/// with its own runtime, so this is the worker's: one read and one write buffer stay warm in
/// cache instead of one of each per connection (at 1 KiB echoes, 100 connections' 64 KiB read
/// buffers were 6 MB the kernel copied into), and an idle connection keeps none (at 15,000 held
/// connections their own buffers and the handshakes' were most of the client's memory).
///
/// A connection borrows the read buffer for one poll and gives it back before returning,
/// keeping it only while it holds a complete frame not yet taken (its next poll takes it) or a
/// large incomplete one; the write buffer it keeps while frames are queued. Either way the next
/// connection finds an empty buffer (possibly with no capacity) and grows it.
struct Spare {
    read: BytesMut,
    write: Vec<u8>,
}

thread_local! {
    static SPARE: RefCell<Spare> = RefCell::new(Spare {
        read: BytesMut::new(),
        write: Vec::new(),
    });
}

impl Spare {
    /// Runs `f` on this thread's spare buffers, for a moment (never across a poll of anything
    /// else). `None` when they cannot be reached (the thread is ending): the connection then
    /// works on buffers of its own.
    fn with<R>(f: impl FnOnce(&mut Spare) -> R) -> Option<R> {
        SPARE
            .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
            .ok()
            .flatten()
    }
}

/// The transport: plain TCP, or TLS over it.
pub enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What [`Ws::poll_recv`] took from the connection.
#[derive(Debug)]
pub enum Recv {
    /// `n` data messages (text or binary) of `bytes` payload bytes in all, at least one.
    Data { n: u64, bytes: u64 },
    /// A control message (a ping is answered already; a close too), or a reassembled
    /// fragmented data message.
    Other(Message),
}

/// Data frame opcodes.
const OP_CONT: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

/// A message being reassembled from fragments.
struct Fragments {
    text: bool,
    data: BytesMut,
}

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
    frag: Option<Box<Fragments>>,
    close_sent: bool,
    close_received: bool,
    /// A pong or a close reply waits in `wr`: reads push it out.
    reply_pending: bool,
    /// The stream has ended (closed, or failed): reads return `None`.
    ended: bool,
}

impl Ws {
    /// A connection over `io` whose reads aim at `read_size` bytes.
    pub fn new(io: Io, read_size: usize) -> Ws {
        Ws {
            io,
            rd: BytesMut::new(),
            read_size: read_size.clamp(256, 1 << 30) as u32,
            holds_spare: false,
            wr: Vec::new(),
            wr_pos: 0,
            frag: None,
            close_sent: false,
            close_received: false,
            reply_pending: false,
            ended: false,
        }
    }

    pub fn get_ref(&self) -> &Io {
        &self.io
    }

    /// The transport, for a caller that drains it until the peer closes (after a failure).
    pub fn into_io(self) -> Io {
        self.io
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
            if let Some(end) = find_head_end(&self.rd) {
                let head = parse_head(&self.rd[..end]);
                self.rd.advance(end);
                return Poll::Ready(head);
            }
            if self.rd.len() >= MAX_RESPONSE_HEAD {
                return Poll::Ready(Err(HandshakeError::Malformed));
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

    /// Whether enough is queued that it should be written before more is queued.
    pub fn over_soft_limit(&self) -> bool {
        self.queued() >= WRITE_SOFT_LIMIT
    }

    /// Queues one frame (FIN set, masked with a fresh random key).
    fn frame(&mut self, opcode: u8, payload: &[u8]) {
        let len = payload.len();
        if self.wr.is_empty() {
            self.take_spare_write();
        }
        self.wr.reserve(len + 14);
        self.wr.push(0x80 | opcode);
        if len < 126 {
            self.wr.push(0x80 | len as u8);
        } else if len <= usize::from(u16::MAX) {
            self.wr.push(0x80 | 126);
            self.wr.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            self.wr.push(0x80 | 127);
            self.wr.extend_from_slice(&(len as u64).to_be_bytes());
        }
        let key: [u8; 4] = rand::random();
        self.wr.extend_from_slice(&key);
        let at = self.wr.len();
        self.wr.extend_from_slice(payload);
        mask(&mut self.wr[at..], key);
    }

    /// Queues a data message's frame: text if `text`, else binary.
    pub fn queue_data(&mut self, text: bool, payload: &[u8]) {
        self.frame(if text { OP_TEXT } else { OP_BINARY }, payload);
    }

    /// Writes what is queued, all of it; `Ready(Ok)` once the buffer is empty.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.wr_pos < self.wr.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.wr[self.wr_pos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.wr_pos += n;
        }
        self.wr.clear();
        self.wr_pos = 0;
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
            Message::Text(t) => self.frame(OP_TEXT, t.as_bytes()),
            Message::Binary(b) => self.frame(OP_BINARY, &b),
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
            Some((code, reason)) => {
                let mut p = Vec::with_capacity(2 + reason.len());
                p.extend_from_slice(&code.to_be_bytes());
                p.extend_from_slice(reason.as_bytes());
                self.frame(OP_CLOSE, &p);
            }
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
        if !self.rd.is_empty() && (self.rd.len() > COPY_OUT_MAX || frame_buffered(&self.rd)) {
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

    /// The next complete frame's header, without consuming it: (first byte, header length,
    /// payload length). `Ok(None)`: more bytes are needed (and room for them is reserved).
    fn peek_frame(&mut self) -> Result<Option<(u8, usize, usize)>, WsError> {
        let b = &self.rd[..];
        if b.len() < 2 {
            return Ok(None);
        }
        let (b0, b1) = (b[0], b[1]);
        if b1 & 0x80 != 0 {
            return Err(WsError::Protocol(ProtocolError::MaskedFrameFromServer));
        }
        if b0 & 0x70 != 0 {
            return Err(WsError::Protocol(ProtocolError::NonZeroReservedBits));
        }
        let (head, len) = match b1 & 0x7f {
            126 => {
                if b.len() < 4 {
                    return Ok(None);
                }
                (4, u64::from(u16::from_be_bytes([b[2], b[3]])))
            }
            127 => {
                if b.len() < 10 {
                    return Ok(None);
                }
                let mut l = [0u8; 8];
                l.copy_from_slice(&b[2..10]);
                (10, u64::from_be_bytes(l))
            }
            n => (2, u64::from(n)),
        };
        let opcode = b0 & 0x0f;
        if opcode >= 8 {
            if b0 & 0x80 == 0 {
                return Err(WsError::Protocol(ProtocolError::FragmentedControlFrame));
            }
            if len > 125 {
                return Err(WsError::Protocol(ProtocolError::ControlFrameTooBig));
            }
        }
        if len > MAX_FRAME as u64 {
            return Err(WsError::Capacity(CapacityError::MessageTooLong {
                size: usize::try_from(len).unwrap_or(usize::MAX),
                max_size: MAX_FRAME,
            }));
        }
        let len = len as usize;
        if b.len() < head + len {
            let missing = head + len - b.len();
            self.rd.reserve(missing);
            return Ok(None);
        }
        Ok(Some((b0, head, len)))
    }

    /// Takes the next complete frame off the buffer: (first byte, payload).
    fn take_frame(&mut self) -> Result<Option<(u8, Bytes)>, WsError> {
        let Some((b0, head, len)) = self.peek_frame()? else {
            return Ok(None);
        };
        self.rd.advance(head);
        Ok(Some((b0, self.rd.split_to(len).freeze())))
    }

    /// The next complete message in the buffer, reassembling fragments and answering pings
    /// and closes; `Ok(None)` when more bytes are needed.
    fn parse_message(&mut self) -> Result<Option<Message>, WsError> {
        while let Some((b0, payload)) = self.take_frame()? {
            let fin = b0 & 0x80 != 0;
            match b0 & 0x0f {
                OP_CLOSE => {
                    let frame = close_frame(payload)?;
                    if self.close_received {
                        continue;
                    }
                    self.close_received = true;
                    if !self.close_sent {
                        // Answer with the same code (RFC 6455 5.5.1); the reply goes out with
                        // the next read, write or flush.
                        self.close_sent = true;
                        self.queue_close(frame.as_ref().map(|f| (u16::from(f.code), "".into())));
                        self.reply_pending = true;
                    }
                    return Ok(Some(Message::Close(frame)));
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
                    if self.frag.is_some() {
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
                        return data_message(op == OP_TEXT, payload).map(Some);
                    }
                    self.frag = Some(Box::new(Fragments {
                        text: op == OP_TEXT,
                        data: BytesMut::from(&payload[..]),
                    }));
                }
                OP_CONT => {
                    let Some(f) = self.frag.as_mut() else {
                        return Err(WsError::Protocol(ProtocolError::UnexpectedContinueFrame));
                    };
                    if f.data.len() + payload.len() > MAX_MESSAGE {
                        return Err(WsError::Capacity(CapacityError::MessageTooLong {
                            size: f.data.len() + payload.len(),
                            max_size: MAX_MESSAGE,
                        }));
                    }
                    f.data.extend_from_slice(&payload);
                    if fin && let Some(f) = self.frag.take() {
                        if self.close_received {
                            continue;
                        }
                        return data_message(f.text, f.data.freeze()).map(Some);
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

    /// Pushes a pending pong or close reply out, without waiting for the socket.
    fn push_replies(&mut self, cx: &mut Context<'_>) -> Result<(), WsError> {
        if self.reply_pending {
            match self.poll_flush_all(cx) {
                Poll::Ready(r) => r?,
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
    /// its status code goes out first, as far as the socket takes it without waiting (the
    /// caller drops the connection next). Only on this path, so it costs reads nothing.
    fn fail<T>(&mut self, cx: &mut Context<'_>, e: WsError) -> Poll<Option<Result<T, WsError>>> {
        self.ended = true;
        if let Some(code) = failure_code(&e)
            && !self.close_sent
        {
            self.close_sent = true;
            self.queue_close(Some((code, "".into())));
            // Pending: the socket's buffer is full, and the peer sees the connection drop.
            let _ = self.poll_flush_all(cx);
        }
        Poll::Ready(Some(Err(e)))
    }

    /// Counting reads: every complete, unfragmented data frame already buffered (reading once
    /// if none is), as one count, without building messages; anything else comes as a message
    /// of its own. `None` once the stream has ended.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Recv, WsError>>> {
        self.with_spare_read(|ws| ws.poll_recv_step(cx))
    }

    fn poll_recv_step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Recv, WsError>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            if let Err(e) = self.push_replies(cx) {
                return self.fail(cx, e);
            }
            let (mut n, mut bytes) = (0u64, 0u64);
            if self.frag.is_none() && !self.close_received {
                loop {
                    let (b0, head, len) = match self.peek_frame() {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => return self.fail(cx, e),
                    };
                    let op = b0 & 0x0f;
                    if b0 & 0x80 == 0 || !(op == OP_TEXT || op == OP_BINARY) {
                        break;
                    }
                    if op == OP_TEXT && !is_utf8(&self.rd[head..head + len]) {
                        return self.fail(cx, invalid_utf8());
                    }
                    self.rd.advance(head + len);
                    n += 1;
                    bytes += len as u64;
                }
            }
            if n > 0 {
                return Poll::Ready(Some(Ok(Recv::Data { n, bytes })));
            }
            match self.parse_message() {
                Ok(Some(msg)) => {
                    if let Err(e) = self.push_replies(cx) {
                        return self.fail(cx, e);
                    }
                    // A reassembled data message counts like the others.
                    return Poll::Ready(Some(Ok(match msg {
                        Message::Text(t) => Recv::Data {
                            n: 1,
                            bytes: t.len() as u64,
                        },
                        Message::Binary(b) => Recv::Data {
                            n: 1,
                            bytes: b.len() as u64,
                        },
                        other => Recv::Other(other),
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

/// Whether `b` starts with a complete frame (by its length fields alone; `peek_frame` checks
/// the rest when it is taken).
fn frame_buffered(b: &[u8]) -> bool {
    if b.len() < 2 {
        return false;
    }
    let (head, len) = match b[1] & 0x7f {
        126 if b.len() >= 4 => (4, u64::from(u16::from_be_bytes([b[2], b[3]]))),
        127 if b.len() >= 10 => {
            let mut l = [0u8; 8];
            l.copy_from_slice(&b[2..10]);
            (10, u64::from_be_bytes(l))
        }
        126 | 127 => return false,
        n => (2, u64::from(n)),
    };
    // Only a heuristic of who keeps the buffer: a masked frame (a protocol error, its key not
    // counted here) fails at the next step whatever this says.
    (b.len() as u64).saturating_sub(head) >= len
}

/// ASCII (the templates' JSON) takes the word-at-a-time check; anything else the full one.
fn is_utf8(b: &[u8]) -> bool {
    b.is_ascii() || std::str::from_utf8(b).is_ok()
}

fn invalid_utf8() -> WsError {
    WsError::Utf8("invalid UTF-8 in a text message".into())
}

/// The close status a failure sends the peer: 1007 for invalid UTF-8, 1009 for a message
/// too big, 1002 for any other violation; `None` for the transport's errors (nothing to tell).
fn failure_code(e: &WsError) -> Option<u16> {
    match e {
        WsError::Utf8(_) => Some(1007),
        WsError::Capacity(_) => Some(1009),
        WsError::Protocol(_) => Some(1002),
        _ => None,
    }
}

fn data_message(text: bool, payload: Bytes) -> Result<Message, WsError> {
    if text {
        Utf8Bytes::try_from(payload)
            .map(Message::Text)
            .map_err(|_| invalid_utf8())
    } else {
        Ok(Message::Binary(payload))
    }
}

/// A close frame's code and reason; invalid codes and reasons are protocol errors.
fn close_frame(payload: Bytes) -> Result<Option<CloseFrame>, WsError> {
    match payload.len() {
        0 => Ok(None),
        1 => Err(WsError::Protocol(ProtocolError::InvalidCloseSequence)),
        _ => {
            let code = CloseCode::from(u16::from_be_bytes([payload[0], payload[1]]));
            if !code.is_allowed() {
                return Err(WsError::Protocol(ProtocolError::InvalidCloseSequence));
            }
            let reason = Utf8Bytes::try_from(payload.slice(2..)).map_err(|_| invalid_utf8())?;
            Ok(Some(CloseFrame { code, reason }))
        }
    }
}

/// XORs `buf` with the 4-byte `key` (RFC 6455 5.3), 8 bytes at a time.
fn mask(buf: &mut [u8], key: [u8; 4]) {
    let k = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        c.copy_from_slice(&(u64::from_ne_bytes(w) ^ k).to_ne_bytes());
    }
    // The remainder starts at a multiple of 8, so the key restarts at its first byte.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i & 3];
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
        self.get_mut().queue(msg)
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

// --- the opening handshake's pieces ------------------------------------------------------------

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("upgrade: {0}")]
    Io(io::Error),
    /// The server closed before the response head was complete.
    #[error("upgrade: the server closed before its response")]
    Eof,
    /// Not an HTTP response head.
    #[error("upgrade: not an HTTP response")]
    Malformed,
    /// An HTTP status other than 101.
    #[error("upgrade: HTTP status {0}")]
    Status(u16),
    /// A 101 without the headers RFC 6455 4.1 requires, with a wrong accept key, or with an
    /// extension or subprotocol not requested.
    #[error("upgrade: {0}")]
    Invalid(&'static str),
}

/// What the handshake checks in a 101 response.
pub struct Head {
    pub status: u16,
    upgrade_websocket: bool,
    connection_upgrade: bool,
    accept: Option<String>,
    protocol: Option<String>,
    /// A `Sec-WebSocket-Extensions` header was present (the request never offers any).
    extensions: bool,
}

impl Head {
    /// RFC 6455 4.1's checks of a server's 101 (as tungstenite's client made them):
    /// `accept` is the expected `Sec-WebSocket-Accept`, `protocols` whether the request
    /// offered subprotocols.
    pub fn verify(&self, accept: &str, protocols: Option<&[String]>) -> Result<(), HandshakeError> {
        if self.status != 101 {
            return Err(HandshakeError::Status(self.status));
        }
        if !self.upgrade_websocket {
            return Err(HandshakeError::Invalid("no Upgrade: websocket"));
        }
        if !self.connection_upgrade {
            return Err(HandshakeError::Invalid("no Connection: Upgrade"));
        }
        if self.accept.as_deref() != Some(accept) {
            return Err(HandshakeError::Invalid("Sec-WebSocket-Accept mismatch"));
        }
        // RFC 6455 4.1: an extension the client did not offer fails the connection (its
        // framing would be misread: RSV bits, compressed payloads).
        if self.extensions {
            return Err(HandshakeError::Invalid("extension not requested"));
        }
        match (&self.protocol, protocols) {
            (None, None) => Ok(()),
            (Some(_), None) => Err(HandshakeError::Invalid("subprotocol not requested")),
            (Some(p), Some(offered)) if offered.iter().any(|o| o == p) => Ok(()),
            _ => Err(HandshakeError::Invalid("subprotocol mismatch")),
        }
    }
}

/// The length of the response head (through its blank line), once complete.
fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn parse_head(head: &[u8]) -> Result<Head, HandshakeError> {
    let text = std::str::from_utf8(head).map_err(|_| HandshakeError::Malformed)?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().ok_or(HandshakeError::Malformed)?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !(version == "HTTP/1.1" || version == "HTTP/1.0") {
        return Err(HandshakeError::Malformed);
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or(HandshakeError::Malformed)?;
    let mut h = Head {
        status,
        upgrade_websocket: false,
        connection_upgrade: false,
        accept: None,
        protocol: None,
        extensions: false,
    };
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':').ok_or(HandshakeError::Malformed)?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("upgrade") {
            h.upgrade_websocket = value.eq_ignore_ascii_case("websocket");
        } else if name.eq_ignore_ascii_case("connection") {
            h.connection_upgrade = value
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
        } else if name.eq_ignore_ascii_case("sec-websocket-accept") {
            h.accept = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("sec-websocket-protocol") {
            h.protocol = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("sec-websocket-extensions") {
            h.extensions = true;
        }
    }
    Ok(h)
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (24 characters).
pub fn new_key() -> [u8; 24] {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let r: [u8; 16] = rand::random();
    let mut out = [b'='; 24];
    for (i, c) in r.chunks(3).enumerate() {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = [
            B64[(n >> 18) as usize & 63],
            B64[(n >> 12) as usize & 63],
            B64[(n >> 6) as usize & 63],
            B64[n as usize & 63],
        ];
        let keep = c.len() + 1;
        out[i * 4..i * 4 + keep].copy_from_slice(&chars[..keep]);
    }
    out
}

/// A one-connection server for tests that answers the upgrade with a 101 carrying `extra`
/// headers (each ending in CRLF): what a misbehaving server sends.
#[cfg(test)]
pub(crate) mod test_server {
    use super::find_head_end;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::task::JoinHandle;
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

    /// Its address, and the task that yields the connection once answered.
    pub(crate) async fn answer_101(extra: &str) -> (SocketAddr, JoinHandle<TcpStream>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let extra = extra.to_string();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            let mut req = Vec::new();
            while find_head_end(&req).is_none() {
                let mut b = [0u8; 512];
                let n = s.read(&mut b).await.expect("read");
                assert!(n > 0, "request incomplete");
                req.extend_from_slice(&b[..n]);
            }
            let req = String::from_utf8(req).expect("utf-8");
            let key = req
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("sec-websocket-key")
                        .then(|| v.trim().to_string())
                })
                .expect("key");
            let resp = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{extra}\r\n",
                derive_accept_key(key.as_bytes())
            );
            s.write_all(resp.as_bytes()).await.expect("write");
            s
        });
        (addr, server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

    #[test]
    fn masking_matches_the_bytewise_definition() {
        let key = [0x6d, 0xb6, 0xb2, 0x80];
        for len in 0..40 {
            let data: Vec<u8> = (0..len as u8).collect();
            let mut fast = data.clone();
            mask(&mut fast, key);
            let slow: Vec<u8> = data
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i % 4])
                .collect();
            assert_eq!(fast, slow, "{len}");
        }
    }

    #[test]
    fn keys_are_base64_of_16_bytes() {
        let k = new_key();
        assert_eq!(&k[22..], b"==");
        assert!(
            k[..22]
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
        );
        assert_ne!(new_key(), k);
        // The RFC's example key and accept value.
        assert_eq!(
            derive_accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn response_heads_are_checked() {
        let ok = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        let end = find_head_end(ok).expect("complete");
        assert_eq!(end, ok.len());
        let h = parse_head(&ok[..end]).expect("parses");
        assert!(h.verify("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", None).is_ok());
        assert!(matches!(
            h.verify("other", None),
            Err(HandshakeError::Invalid(_))
        ));
        let denied =
            parse_head(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n").expect("parses");
        assert!(matches!(
            denied.verify("x", None),
            Err(HandshakeError::Status(401))
        ));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert_eq!(
            find_head_end(b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\n"),
            None
        );
    }

    /// A server end of a loopback TCP pair, and the client `Ws` on the other.
    async fn pair(read_size: usize) -> (Ws, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
        (
            Ws::new(Io::Plain(c.expect("connect")), read_size),
            s.expect("accept").0,
        )
    }

    /// An unmasked server frame.
    fn server_frame(b0: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![b0];
        if payload.len() < 126 {
            f.push(payload.len() as u8);
        } else {
            f.push(126);
            f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        f.extend_from_slice(payload);
        f
    }

    /// Reads one masked client frame: (first byte, unmasked payload).
    async fn client_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
        let mut h = [0u8; 2];
        s.read_exact(&mut h).await.expect("header");
        assert_eq!(h[1] & 0x80, 0x80, "client frames are masked");
        let len = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                s.read_exact(&mut l).await.expect("len");
                usize::from(u16::from_be_bytes(l))
            }
            n => usize::from(n),
        };
        let mut key = [0u8; 4];
        s.read_exact(&mut key).await.expect("key");
        let mut p = vec![0u8; len];
        s.read_exact(&mut p).await.expect("payload");
        mask(&mut p, key);
        (h[0], p)
    }

    #[tokio::test]
    async fn frames_both_ways_with_pings_fragments_and_close() {
        use futures_util::{SinkExt, StreamExt};
        let (mut ws, mut s) = pair(1024).await;
        // Client to server: text of each length class, masked with distinct keys.
        let big = "y".repeat(300);
        ws.send(Message::Text("hi".into())).await.expect("send");
        ws.send(Message::Text(big.clone().into()))
            .await
            .expect("send");
        assert_eq!(client_frame(&mut s).await, (0x81, b"hi".to_vec()));
        assert_eq!(client_frame(&mut s).await, (0x81, big.clone().into_bytes()));

        // Server to client: two texts in one write are counted together; then a ping
        // (answered with a pong), a fragmented binary message, and a close.
        let mut burst = server_frame(0x81, b"one");
        burst.extend(server_frame(0x81, big.as_bytes()));
        s.write_all(&burst).await.expect("write");
        let got = std::future::poll_fn(|cx| ws.poll_recv(cx)).await;
        assert!(
            matches!(got, Some(Ok(Recv::Data { n: 2, bytes: 303 }))),
            "{got:?}"
        );
        let mut rest = server_frame(0x89, b"pp");
        rest.extend(server_frame(0x02, b"ab"));
        rest.extend(server_frame(0x80, b"cd"));
        rest.extend(server_frame(0x88, &1001u16.to_be_bytes()));
        s.write_all(&rest).await.expect("write");
        assert_eq!(
            ws.next().await.expect("ping").expect("ok"),
            Message::Ping("pp".into())
        );
        assert_eq!(client_frame(&mut s).await, (0x8a, b"pp".to_vec()));
        assert_eq!(
            ws.next().await.expect("binary").expect("ok"),
            Message::Binary(Bytes::from_static(b"abcd"))
        );
        match ws.next().await.expect("close").expect("ok") {
            Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1001),
            other => panic!("{other:?}"),
        }
        // The close is answered with its code; the server then ends the stream.
        assert_eq!(
            client_frame(&mut s).await,
            (0x88, 1001u16.to_be_bytes().to_vec())
        );
        drop(s);
        assert!(ws.next().await.is_none());
    }

    #[tokio::test]
    async fn protocol_violations_fail_the_connection() {
        use futures_util::StreamExt;
        for (bytes, what) in [
            (vec![0x81, 0x82, 1, 2, 3, 4, 5, 6], "masked server frame"),
            (vec![0xC1, 0x00], "reserved bit"),
            (vec![0x83, 0x00], "unknown opcode"),
            (vec![0x80, 0x00], "continuation without a start"),
            (vec![0x81, 0x02, 0xff, 0xfe], "invalid UTF-8"),
            (vec![0x09, 0x00], "fragmented ping"),
        ] {
            let (mut ws, mut s) = pair(1024).await;
            s.write_all(&bytes).await.expect("write");
            assert!(matches!(ws.next().await, Some(Err(_))), "{what}");
            assert!(ws.next().await.is_none(), "{what}: ended");
        }
        // The stream ending without a close frame is a reset.
        let (mut ws, s) = pair(1024).await;
        drop(s);
        assert!(matches!(
            ws.next().await,
            Some(Err(WsError::Protocol(
                ProtocolError::ResetWithoutClosingHandshake
            )))
        ));
    }

    /// Every violation by the server is answered with a close frame carrying its status code
    /// (1002, 1007 for invalid UTF-8, 1009 for a frame over the limit) before the connection
    /// ends, on both read paths: messages (`next`) and counting reads (`poll_recv`).
    #[tokio::test]
    async fn violations_send_a_close_frame_with_their_code() {
        use futures_util::StreamExt;
        let mut too_big = vec![0x82, 127];
        too_big.extend_from_slice(&(MAX_FRAME as u64 + 1).to_be_bytes());
        let cases: Vec<(Vec<u8>, u16, &str)> = vec![
            (vec![0xC1, 0x00], 1002, "reserved bit"),
            (vec![0x83, 0x00], 1002, "unknown data opcode"),
            (vec![0x8B, 0x00], 1002, "unknown control opcode"),
            (vec![0x80, 0x00], 1002, "continuation without a start"),
            (vec![0x09, 0x00], 1002, "fragmented ping"),
            (server_frame(0x89, &[0u8; 126]), 1002, "ping over 125 bytes"),
            (
                [server_frame(0x01, b"a"), server_frame(0x81, b"b")].concat(),
                1002,
                "a new message inside a fragmented one",
            ),
            (vec![0x88, 0x01, 0x03], 1002, "close payload of 1 byte"),
            (
                server_frame(0x88, &999u16.to_be_bytes()),
                1002,
                "close code 999",
            ),
            (
                server_frame(0x88, &1005u16.to_be_bytes()),
                1002,
                "close code 1005",
            ),
            (
                vec![0x81, 0x82, 1, 2, 3, 4, 5, 6],
                1002,
                "masked server frame",
            ),
            (vec![0x81, 0x02, 0xff, 0xfe], 1007, "invalid UTF-8"),
            (
                [server_frame(0x01, b"ok"), server_frame(0x80, &[0xc0, 0xaf])].concat(),
                1007,
                "invalid UTF-8 across fragments",
            ),
            (
                server_frame(0x88, &[0x03, 0xe8, 0xff]),
                1007,
                "invalid UTF-8 in a close reason",
            ),
            (too_big, 1009, "frame over the limit"),
        ];
        for (bytes, code, what) in cases {
            for counting in [false, true] {
                let (mut ws, mut s) = pair(1024).await;
                s.write_all(&bytes).await.expect("write");
                let failed = if counting {
                    matches!(
                        std::future::poll_fn(|cx| ws.poll_recv(cx)).await,
                        Some(Err(_))
                    )
                } else {
                    matches!(ws.next().await, Some(Err(_)))
                };
                assert!(failed, "{what} (counting: {counting})");
                let close =
                    tokio::time::timeout(std::time::Duration::from_secs(5), client_frame(&mut s))
                        .await
                        .unwrap_or_else(|_| {
                            panic!("{what} (counting: {counting}): no close frame")
                        });
                assert_eq!(
                    close,
                    (0x88, code.to_be_bytes().to_vec()),
                    "{what} (counting: {counting})"
                );
                // The close goes out once: the connection is over.
                drop(ws);
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).await.expect("read");
                assert!(rest.is_empty(), "{what}: {rest:?}");
            }
        }
        // The transport failing is no violation of the peer's: nothing to tell it.
        let (mut ws, s) = pair(1024).await;
        drop(s);
        assert!(matches!(
            ws.next().await,
            Some(Err(WsError::Protocol(
                ProtocolError::ResetWithoutClosingHandshake
            )))
        ));
        assert!(!ws.close_sent);
    }

    /// A misbehaving server's 101: the handshake against a listener that answers with
    /// `extra` headers; `Ok` when the response passes `verify` (no subprotocol offered).
    async fn handshake_with(extra: &str) -> Result<(), HandshakeError> {
        let (addr, server) = super::test_server::answer_101(extra).await;
        let key = new_key();
        let request = format!(
            "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {}\r\n\r\n",
            std::str::from_utf8(&key).expect("ascii")
        );
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let mut ws = Ws::new(Io::Plain(tcp), 1024);
        let head = ws.handshake(request.as_bytes()).await;
        let _server = server.await.expect("server");
        head?.verify(&derive_accept_key(&key), None)
    }

    #[tokio::test]
    async fn a_101_with_an_extension_or_subprotocol_not_requested_fails_the_upgrade() {
        handshake_with("").await.expect("a plain 101 passes");
        for extra in [
            "Sec-WebSocket-Extensions: permessage-deflate\r\n",
            "sec-websocket-extensions: x-custom; a=1\r\n",
            "Sec-WebSocket-Protocol: chat\r\n",
        ] {
            let r = handshake_with(extra).await;
            assert!(
                matches!(r, Err(HandshakeError::Invalid(_))),
                "{extra:?}: {r:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_large_message_grows_the_read_buffer() {
        use futures_util::StreamExt;
        let (mut ws, mut s) = pair(256).await;
        let payload = vec![7u8; 200_000];
        let mut f = vec![0x82, 127];
        f.extend_from_slice(&(payload.len() as u64).to_be_bytes());
        f.extend_from_slice(&payload);
        tokio::spawn(async move {
            s.write_all(&f).await.expect("write");
            s
        });
        assert_eq!(
            ws.next().await.expect("message").expect("ok"),
            Message::Binary(payload.into())
        );
    }

    /// Idle connections own no buffers: reads borrow the thread's, a frame cut by the end of
    /// a read is copied out into a small buffer of the connection's own, and a connection that
    /// still has a complete frame buffered keeps the thread's buffer until it takes that frame
    /// while another connection reads meanwhile.
    #[tokio::test]
    async fn connections_take_turns_with_the_threads_buffers() {
        use futures_util::{SinkExt, StreamExt};
        use std::time::Duration;
        let (mut a, mut sa) = pair(4096).await;
        let (mut b, mut sb) = pair(4096).await;
        let idle = |ws: &Ws| ws.rd.capacity() == 0 && ws.wr.capacity() == 0 && !ws.holds_spare;

        // A sends and reads a whole message: nothing left with it.
        a.send(Message::Text("hello".into())).await.expect("send");
        assert_eq!(client_frame(&mut sa).await, (0x81, b"hello".to_vec()));
        sa.write_all(&server_frame(0x81, b"hello"))
            .await
            .expect("write");
        assert_eq!(
            a.next().await.expect("message").expect("ok"),
            Message::Text("hello".into())
        );
        assert!(idle(&a));

        // Half a frame: copied out, the rest completes it.
        let frame = server_frame(0x82, &[9u8; 100]);
        sa.write_all(&frame[..40]).await.expect("write");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), a.next())
                .await
                .is_err()
        );
        assert_eq!(a.rd.len(), 40);
        assert!(!a.holds_spare && a.rd.capacity() < 4096);
        sa.write_all(&frame[40..]).await.expect("write");
        assert_eq!(
            a.next().await.expect("message").expect("ok"),
            Message::Binary(vec![9u8; 100].into())
        );
        assert!(idle(&a));

        // Two frames in one read: A keeps the buffer after the first, B reads in between.
        let mut two = server_frame(0x81, b"one");
        two.extend(server_frame(0x81, b"two"));
        sa.write_all(&two).await.expect("write");
        assert_eq!(
            a.next().await.expect("one").expect("ok"),
            Message::Text("one".into())
        );
        assert!(a.holds_spare);
        sb.write_all(&server_frame(0x81, b"bee"))
            .await
            .expect("write");
        assert_eq!(
            b.next().await.expect("bee").expect("ok"),
            Message::Text("bee".into())
        );
        assert!(idle(&b));
        assert_eq!(
            a.next().await.expect("two").expect("ok"),
            Message::Text("two".into())
        );
        assert!(idle(&a));
    }
}
