//! Frames (RFC 6455 5.2): headers read off the read buffer and written into the write buffer.
//!
//! Reading is split in two: [`parse_header`] knows the framing alone (any frame, masked or not,
//! from either side), and [`decode_header`] adds what a client must refuse in a server's frame.
//! [`peek`] and [`take`] work on the connection's read buffer: a frame's payload is split off
//! it, never copied.

use crate::mask::mask;
use bytes::{Buf, Bytes, BytesMut};
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};

/// Opcodes (RFC 6455 5.2): data frames below 8, control frames from 8.
pub const OP_CONT: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// The largest frame accepted unless the connection's [`crate::Limits`] say otherwise
/// (tungstenite's default).
pub const MAX_FRAME: usize = 16 << 20;
/// The longest header: 2 bytes, a 64-bit length and a masking key.
pub const MAX_HEADER: usize = 14;

const FIN: u8 = 0x80;
/// The first reserved bit: permessage-deflate's "this message is compressed" (RFC 7692 6),
/// on a message's first frame. Passed to [`encode`] or'ed into the opcode.
pub const RSV1: u8 = 0x40;
const RSV: u8 = 0x70;
const OPCODE: u8 = 0x0f;
const MASKED: u8 = 0x80;
const LEN: u8 = 0x7f;
/// Control frames carry at most this much (RFC 6455 5.5).
const MAX_CONTROL: u64 = 125;

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub fin: bool,
    /// RSV1: the message is compressed (permessage-deflate).
    pub rsv1: bool,
    pub opcode: u8,
    /// The masking key, in client frames.
    pub key: Option<[u8; 4]>,
    /// The header's length: where the payload starts.
    pub header_len: usize,
    pub payload_len: u64,
}

impl Header {
    pub fn is_control(&self) -> bool {
        self.opcode >= 8
    }
}

/// The header at the start of `b`, by the framing alone (reserved bits and opcodes are not
/// judged); `None` until all of it is there.
pub fn parse_header(b: &[u8]) -> Option<Header> {
    let (b0, b1) = (*b.first()?, *b.get(1)?);
    let (mut header_len, payload_len) = match b1 & LEN {
        126 => (
            4,
            u64::from(u16::from_be_bytes(b.get(2..4)?.try_into().ok()?)),
        ),
        127 => (10, u64::from_be_bytes(b.get(2..10)?.try_into().ok()?)),
        n => (2, u64::from(n)),
    };
    let key = if b1 & MASKED != 0 {
        let k: [u8; 4] = b.get(header_len..header_len + 4)?.try_into().ok()?;
        header_len += 4;
        Some(k)
    } else {
        None
    };
    Some(Header {
        fin: b0 & FIN != 0,
        rsv1: b0 & RSV1 != 0,
        opcode: b0 & OPCODE,
        key,
        header_len,
        payload_len,
    })
}

/// The header of the server frame at the start of `b`, with the checks a client makes
/// (RFC 6455 5.1-5.5: unmasked, no reserved bit, control frames short and whole, and the frame
/// within `max_frame` bytes of payload); `Ok(None)` until the header is complete. The first two bytes are
/// judged as soon as they arrive, before the length fields. With `deflate` (permessage-deflate
/// agreed) RSV1 may mark the first frame of a data message, never a control frame or a
/// continuation (RFC 7692 6.1).
pub fn decode_header(b: &[u8], deflate: bool, max_frame: usize) -> Result<Option<Header>, WsError> {
    if b.len() < 2 {
        return Ok(None);
    }
    if b[1] & MASKED != 0 {
        return Err(WsError::Protocol(ProtocolError::MaskedFrameFromServer));
    }
    let rsv = b[0] & RSV;
    if rsv != 0 && !(deflate && rsv == RSV1 && matches!(b[0] & OPCODE, OP_TEXT | OP_BINARY)) {
        return Err(WsError::Protocol(ProtocolError::NonZeroReservedBits));
    }
    let Some(h) = parse_header(b) else {
        return Ok(None);
    };
    if h.is_control() {
        if !h.fin {
            return Err(WsError::Protocol(ProtocolError::FragmentedControlFrame));
        }
        if h.payload_len > MAX_CONTROL {
            return Err(WsError::Protocol(ProtocolError::ControlFrameTooBig));
        }
    }
    if h.payload_len > max_frame as u64 {
        return Err(WsError::Capacity(CapacityError::MessageTooLong {
            size: usize::try_from(h.payload_len).unwrap_or(usize::MAX),
            max_size: max_frame,
        }));
    }
    Ok(Some(h))
}

/// The header of the next server frame in `rd` once the whole frame is there, without taking
/// it. `Ok(None)`: more bytes are needed, and room for the rest of the frame is reserved.
/// `deflate` and `max_frame` as for [`decode_header`]: the room reserved is at most
/// `max_frame` and a header, so a connection's read buffer never grows past that.
pub fn peek(rd: &mut BytesMut, deflate: bool, max_frame: usize) -> Result<Option<Header>, WsError> {
    let Some(h) = decode_header(rd, deflate, max_frame)? else {
        return Ok(None);
    };
    // Within max_frame: no overflow.
    let end = h.header_len + h.payload_len as usize;
    if rd.len() < end {
        let missing = end - rd.len();
        rd.reserve(missing);
        return Ok(None);
    }
    Ok(Some(h))
}

/// Takes the next complete server frame off `rd`: its header, and its payload split off the
/// buffer. `Ok(None)` as for [`peek`].
pub fn take(
    rd: &mut BytesMut,
    deflate: bool,
    max_frame: usize,
) -> Result<Option<(Header, Bytes)>, WsError> {
    let Some(h) = peek(rd, deflate, max_frame)? else {
        return Ok(None);
    };
    rd.advance(h.header_len);
    Ok(Some((h, rd.split_to(h.payload_len as usize).freeze())))
}

/// Whether `b` starts with a complete frame, by its length fields alone ([`decode_header`]
/// judges the rest when it is taken): who keeps the thread's read buffer goes by this.
pub fn is_complete(b: &[u8]) -> bool {
    parse_header(b).is_some_and(|h| (b.len() - h.header_len) as u64 >= h.payload_len)
}

/// Appends one frame to `out`: its header, then `payload`, masked with `key` when given (a
/// client's frames always are; unmasked frames are a server's, written here only by tests and
/// the benchmark). `opcode` may carry [`RSV1`] (a compressed message's first frame).
pub fn encode(out: &mut Vec<u8>, fin: bool, opcode: u8, payload: &[u8], key: Option<[u8; 4]>) {
    let len = payload.len();
    let masked = if key.is_some() { MASKED } else { 0 };
    out.reserve(len + MAX_HEADER);
    out.push(if fin { FIN | opcode } else { opcode });
    if len < 126 {
        out.push(masked | len as u8);
    } else if len <= usize::from(u16::MAX) {
        out.push(masked | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(masked | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    match key {
        Some(key) => {
            out.extend_from_slice(&key);
            let at = out.len();
            out.extend_from_slice(payload);
            mask(&mut out[at..], key);
        }
        None => out.extend_from_slice(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_length_class_encodes_and_parses_back() {
        for len in [0, 125, 126, 65535, 65536] {
            let payload = vec![0x5a; len];
            let mut out = Vec::new();
            encode(&mut out, true, OP_BINARY, &payload, Some([1, 2, 3, 4]));
            let h = parse_header(&out).expect("complete");
            assert_eq!(
                (h.fin, h.opcode, h.payload_len),
                (true, OP_BINARY, len as u64)
            );
            assert_eq!(h.key, Some([1, 2, 3, 4]));
            assert_eq!(out.len(), h.header_len + len, "{len}");
            let mut p = out[h.header_len..].to_vec();
            mask(&mut p, [1, 2, 3, 4]);
            assert_eq!(p, payload, "{len}");
        }
    }

    #[test]
    fn a_server_frame_is_taken_off_the_buffer() {
        let mut wire = Vec::new();
        encode(&mut wire, false, OP_TEXT, b"ab", None);
        encode(&mut wire, true, OP_CONT, b"cd", None);
        let mut rd = BytesMut::from(&wire[..3]);
        assert!(!is_complete(&rd));
        assert_eq!(take(&mut rd, false, MAX_FRAME).expect("valid"), None);
        rd.extend_from_slice(&wire[3..]);
        assert!(is_complete(&rd));
        let (h, p) = take(&mut rd, false, MAX_FRAME)
            .expect("valid")
            .expect("complete");
        assert_eq!((h.fin, h.opcode, &p[..]), (false, OP_TEXT, &b"ab"[..]));
        let (h, p) = take(&mut rd, false, MAX_FRAME)
            .expect("valid")
            .expect("complete");
        assert_eq!((h.fin, h.opcode, &p[..]), (true, OP_CONT, &b"cd"[..]));
        assert!(rd.is_empty());
    }
}
