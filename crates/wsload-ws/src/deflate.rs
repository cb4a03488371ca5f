//! permessage-deflate (RFC 7692): the offer the upgrade request carries, the server's answer
//! checked against it, and the per-message codec a connection uses once it is agreed.
//!
//! Memory is what matters at 100K held connections: a zlib deflate stream with a 32 KiB window
//! is about a quarter of a megabyte, an inflate stream about 40 KiB. So nothing is allocated at
//! the handshake: a connection creates its compressor on its first compressed send and its
//! decompressor on its first compressed receive, and only when the context is taken over from
//! one message to the next. A direction agreed with `*_no_context_takeover` starts every
//! message from an empty window, so its state is the thread's (one per worker, reset after
//! each message), not the connection's: a connection that only holds, or that negotiated no
//! context takeover both ways, owns no compression state at all.

use crate::error::{DeflateParam, ExtensionFault, HandshakeError, InvalidUpgrade, ParamFault};
use crate::excerpt::excerpt;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use std::cell::RefCell;
use std::fmt;

// Named here before the errors came together in `error`: callers keep the path.
pub use crate::error::InflateError;

/// The extension's token in `Sec-WebSocket-Extensions`.
pub const EXTENSION: &str = "permessage-deflate";
/// The end of a sync flush (an empty stored block), removed from every compressed message
/// (RFC 7692 7.2.1) and put back before inflating it.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];
/// The largest window, and the smallest zlib can compress with (a raw deflate stream with a
/// 256-byte window is refused by zlib and zlib-rs alike).
const MAX_BITS: u8 = 15;
const MIN_DEFLATE_BITS: u8 = 9;
/// What an inflate step adds to its output buffer at most: a bomb grows the buffer by this
/// much past the message limit before it is caught, never more.
const INFLATE_STEP: usize = 64 * 1024;

/// What the client asks for: the LoadTest's `compression` (RFC 7692 7.1 parameters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeflateOffer {
    /// Ask the server to compress with at most 2^N bytes of window.
    pub server_max_window_bits: Option<u8>,
    /// Compress with at most 2^N bytes of window (offered with its value). Without it the
    /// parameter is offered bare: the server may then pick the client's window.
    pub client_max_window_bits: Option<u8>,
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
}

impl DeflateOffer {
    /// The `Sec-WebSocket-Extensions` value offering this, as browsers write it.
    pub fn header_value(&self) -> String {
        let mut v = String::from(EXTENSION);
        if self.server_no_context_takeover {
            v.push_str("; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            v.push_str("; client_no_context_takeover");
        }
        if let Some(bits) = self.server_max_window_bits {
            v.push_str(&format!("; server_max_window_bits={bits}"));
        }
        match self.client_max_window_bits {
            Some(bits) => v.push_str(&format!("; client_max_window_bits={bits}")),
            None => v.push_str("; client_max_window_bits"),
        }
        v
    }
}

/// What the server agreed to: the parameters both sides use for the connection's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateParams {
    /// The server's window (what we inflate with, at least 9: zlib's smallest).
    pub server_max_window_bits: u8,
    /// Ours (what we compress with).
    pub client_max_window_bits: u8,
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
}

impl fmt::Display for DeflateParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{EXTENSION}: server window 2^{}{}, client window 2^{}{}",
            self.server_max_window_bits,
            if self.server_no_context_takeover {
                " (no context takeover)"
            } else {
                ""
            },
            self.client_max_window_bits,
            if self.client_no_context_takeover {
                " (no context takeover)"
            } else {
                ""
            },
        )
    }
}

/// The server's `Sec-WebSocket-Extensions` (its header lines joined with commas) checked
/// against `offer` (RFC 7692 5 and 7.1): `Ok(None)` when it declined (no header), the agreed
/// parameters when it accepted, and `Invalid` naming the header, its value and what is wrong
/// for anything the client may not accept: another extension, permessage-deflate twice, an
/// unknown or repeated parameter, a value out of range or larger than asked.
pub fn negotiate(
    offer: Option<&DeflateOffer>,
    header: Option<&str>,
) -> Result<Option<DeflateParams>, HandshakeError> {
    let Some(header) = header else {
        return Ok(None);
    };
    accepted(offer, header).map_err(|fault| {
        InvalidUpgrade::Extensions {
            header: excerpt(header),
            fault,
        }
        .into()
    })
}

/// What a `Sec-WebSocket-Extensions` header that came accepts, or what is wrong with it.
fn accepted(
    offer: Option<&DeflateOffer>,
    header: &str,
) -> Result<Option<DeflateParams>, ExtensionFault> {
    let offer = offer.ok_or(ExtensionFault::NotRequested)?;
    let mut agreed = None;
    for ext in header.split(',').map(str::trim) {
        let mut parts = ext.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        if !name.eq_ignore_ascii_case(EXTENSION) {
            return Err(ExtensionFault::NotOffered { name: name.into() });
        }
        if agreed.is_some() {
            return Err(ExtensionFault::Twice);
        }
        agreed = Some(params(offer, parts)?);
    }
    Ok(agreed)
}

/// One accepted permessage-deflate's parameters, or why they cannot be.
fn params<'a>(
    offer: &DeflateOffer,
    parts: impl Iterator<Item = &'a str>,
) -> Result<DeflateParams, ParamFault> {
    let mut p = DeflateParams {
        server_max_window_bits: MAX_BITS,
        client_max_window_bits: offer.client_max_window_bits.unwrap_or(MAX_BITS),
        server_no_context_takeover: false,
        client_no_context_takeover: offer.client_no_context_takeover,
    };
    let mut seen: Vec<DeflateParam> = Vec::new();
    let mut server_bits = None;
    for part in parts.filter(|p| !p.is_empty()) {
        let (name, value) = match part.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
            None => (part, None),
        };
        let param =
            DeflateParam::named(name).ok_or_else(|| ParamFault::Unknown { name: name.into() })?;
        if seen.contains(&param) {
            return Err(ParamFault::Repeated(param));
        }
        seen.push(param);
        match (param, value) {
            (DeflateParam::ServerNoContextTakeover, None) => p.server_no_context_takeover = true,
            (DeflateParam::ClientNoContextTakeover, None) => p.client_no_context_takeover = true,
            (DeflateParam::ServerMaxWindowBits, Some(v)) => {
                let bits = window_bits(param, v)?;
                if let Some(asked) = offer.server_max_window_bits
                    && bits > asked
                {
                    return Err(ParamFault::ServerWindowTooLarge { bits, asked });
                }
                server_bits = Some(bits);
            }
            (DeflateParam::ClientMaxWindowBits, Some(v)) => {
                let bits = window_bits(param, v)?;
                if bits > p.client_max_window_bits {
                    return Err(ParamFault::ClientWindowTooLarge {
                        bits,
                        offered: p.client_max_window_bits,
                    });
                }
                p.client_max_window_bits = bits;
            }
            (
                DeflateParam::ServerNoContextTakeover | DeflateParam::ClientNoContextTakeover,
                Some(_),
            ) => {
                return Err(ParamFault::Valued(param));
            }
            (DeflateParam::ServerMaxWindowBits | DeflateParam::ClientMaxWindowBits, None) => {
                return Err(ParamFault::NoValue(param));
            }
        }
    }
    // A server that accepts a limit on its window says which (RFC 7692 7.1.2.1).
    match (offer.server_max_window_bits, server_bits) {
        (Some(asked), None) if asked < MAX_BITS => {
            return Err(ParamFault::NoServerWindow { asked });
        }
        (_, Some(bits)) => p.server_max_window_bits = bits,
        _ => {}
    }
    Ok(p)
}

/// A window size parameter's value: 8 to 15, digits only (RFC 7692 7.1.2).
fn window_bits(param: DeflateParam, v: &str) -> Result<u8, ParamFault> {
    match v.parse::<u8>() {
        Ok(bits @ 8..=15) if v.bytes().all(|b| b.is_ascii_digit()) => Ok(bits),
        _ => Err(ParamFault::BadWindow {
            param,
            value: v.into(),
        }),
    }
}

/// What inflating a message can end in.
#[derive(Debug)]
pub enum Inflated {
    Done,
    /// Past `max` bytes: the size reached when it was stopped.
    TooBig(usize),
}

/// One connection's compression, once agreed: the parameters, and the state of each direction
/// that takes its context over (created by its first message). Public for the benchmark; a
/// connection's is [`crate::Ws::use_deflate`]'s.
pub struct Deflate {
    params: DeflateParams,
    compress: Option<Compress>,
    decompress: Option<Decompress>,
}

/// The thread's codec state for directions without context takeover, and the buffer
/// messages are compressed into before they are framed.
#[derive(Default)]
struct Shared {
    compress: Option<(u8, Compress)>,
    decompress: Option<(u8, Decompress)>,
    out: Vec<u8>,
}

thread_local! {
    static SHARED: RefCell<Shared> = RefCell::default();
}

fn new_compress(bits: u8) -> Compress {
    Compress::new_with_window_bits(Compression::default(), false, bits)
}

fn new_decompress(bits: u8) -> Decompress {
    Decompress::new_with_window_bits(false, bits.max(MIN_DEFLATE_BITS))
}

impl Deflate {
    pub fn new(params: DeflateParams) -> Deflate {
        Deflate {
            params,
            compress: None,
            decompress: None,
        }
    }

    /// Runs `f` with the compressed form of `payload` (RSV1 is then set on its frame), or
    /// `None` when it goes out as it is: RFC 7692 lets any message go uncompressed, which is
    /// what a server-imposed 256-byte window gets (zlib cannot compress with one).
    pub fn with_compressed<R>(&mut self, payload: &[u8], f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let bits = self.params.client_max_window_bits;
        if bits < MIN_DEFLATE_BITS {
            return f(None);
        }
        let reset = self.params.client_no_context_takeover;
        let own = &mut self.compress;
        let shared = SHARED.try_with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return None;
            };
            let Shared { compress, out, .. } = &mut *s;
            out.clear();
            let ok = if reset {
                let c = match compress {
                    Some((b, c)) if *b == bits => c,
                    _ => &mut compress.insert((bits, new_compress(bits))).1,
                };
                let ok = deflate_into(c, payload, out);
                c.reset();
                ok
            } else {
                deflate_into(own.get_or_insert_with(|| new_compress(bits)), payload, out)
            };
            Some(ok.then(|| std::mem::take(out)))
        });
        // The thread is ending (no shared state): go uncompressed, never fail a send.
        let Ok(Some(Some(out))) = shared else {
            return f(None);
        };
        let r = f(Some(&out));
        let _ = SHARED.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut()
                && out.capacity() > s.out.capacity()
            {
                s.out = out;
            }
        });
        r
    }

    /// Inflates one compressed message, `input` (its frames' payloads joined), onto `out`,
    /// stopping past `max` bytes.
    pub fn inflate(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        max: usize,
    ) -> Result<Inflated, InflateError> {
        let bits = self.params.server_max_window_bits;
        if !self.params.server_no_context_takeover {
            let d = self.decompress.get_or_insert_with(|| new_decompress(bits));
            return inflate_into(d, input, out, max);
        }
        let shared = SHARED.try_with(|s| {
            let mut s = s.try_borrow_mut().ok()?;
            let d = match &mut s.decompress {
                Some((b, d)) if *b == bits => d,
                slot => &mut slot.insert((bits, new_decompress(bits))).1,
            };
            let r = inflate_into(d, input, out, max);
            d.reset(false);
            Some(r)
        });
        match shared {
            Ok(Some(r)) => r,
            // The thread is ending: a decompressor for this message alone.
            _ => inflate_into(&mut new_decompress(bits), input, out, max),
        }
    }
}

/// Compresses `input` as one message onto `out` (a sync flush, its empty-block tail removed);
/// `false` if zlib failed (it does not with a valid stream), `out` then unspecified.
fn deflate_into(c: &mut Compress, input: &[u8], out: &mut Vec<u8>) -> bool {
    let start = c.total_in();
    loop {
        let used = (c.total_in() - start) as usize;
        out.reserve(64 + (input.len() - used) / 2);
        if c.compress_vec(&input[used..], out, FlushCompress::Sync)
            .is_err()
        {
            return false;
        }
        let used = (c.total_in() - start) as usize;
        // Done when all input is in and the flush did not fill the space it had.
        if used == input.len() && out.len() < out.capacity() {
            break;
        }
    }
    if out.ends_with(&TAIL) {
        out.truncate(out.len() - TAIL.len());
    }
    true
}

/// Inflates `input` and the removed tail onto `out`, stopping as soon as `out` passes `max`
/// (a bomb costs at most about `max` and one step more).
fn inflate_into(
    d: &mut Decompress,
    input: &[u8],
    out: &mut Vec<u8>,
    max: usize,
) -> Result<Inflated, InflateError> {
    let mut step = input.len().saturating_mul(4).clamp(256, INFLATE_STEP);
    for chunk in [input, &TAIL[..]] {
        let start = d.total_in();
        loop {
            let used = (d.total_in() - start) as usize;
            if out.capacity() - out.len() < step {
                // Doubling while far from the limit; near it, only what a step needs.
                if out.len() < max / 2 {
                    out.reserve(step);
                } else {
                    out.reserve_exact(step);
                }
            }
            let room = out.capacity() - out.len();
            let before = out.len();
            let status = d
                .decompress_vec(&chunk[used..], out, FlushDecompress::Sync)
                .map_err(InflateError)?;
            if out.len() > max {
                return Ok(Inflated::TooBig(out.len()));
            }
            if status == Status::StreamEnd {
                // A final block (a server resetting its context this way): the next message
                // starts a new stream.
                d.reset(false);
                return Ok(Inflated::Done);
            }
            let (wrote, now) = (out.len() - before, (d.total_in() - start) as usize);
            // Done with the chunk once it is all in and inflate had room to spare: it has
            // written everything it could.
            if (now == chunk.len() && wrote < room) || (wrote == 0 && now == used) {
                break;
            }
            step = (step * 2).min(INFLATE_STEP);
        }
    }
    Ok(Inflated::Done)
}

#[cfg(test)]
mod tests;
