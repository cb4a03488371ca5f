//! From frames' payloads to messages: data messages (UTF-8 checked), close frames, and the
//! fragments of a message being reassembled.

use crate::error::invalid_utf8;
use bytes::{Bytes, BytesMut};
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

/// The largest message accepted unless the connection's [`crate::Limits`] say otherwise
/// (tungstenite's default).
pub const MAX_MESSAGE: usize = 64 << 20;

/// A message being reassembled from fragments.
pub(crate) struct Fragments {
    pub(crate) text: bool,
    /// Its first frame had RSV1: the joined payload is inflated at the end.
    pub(crate) compressed: bool,
    pub(crate) data: BytesMut,
}

/// ASCII (the templates' JSON) takes the word-at-a-time check; anything else the full one.
pub(crate) fn is_utf8(b: &[u8]) -> bool {
    b.is_ascii() || std::str::from_utf8(b).is_ok()
}

pub(crate) fn data_message(text: bool, payload: Bytes) -> Result<Message, WsError> {
    if text {
        Utf8Bytes::try_from(payload)
            .map(Message::Text)
            .map_err(|_| invalid_utf8())
    } else {
        Ok(Message::Binary(payload))
    }
}

/// A close frame's code and reason; invalid codes and reasons are protocol errors.
pub(crate) fn close_frame(payload: Bytes) -> Result<Option<CloseFrame>, WsError> {
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

/// A close frame's payload: the status code, then the reason.
pub(crate) fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(2 + reason.len());
    p.extend_from_slice(&code.to_be_bytes());
    p.extend_from_slice(reason.as_bytes());
    p
}
