//! Masking and framing timed, the client's per-byte and per-frame costs:
//! `cargo bench -p wsload-ws --bench codec`. A std loop, no harness: each case runs in
//! batches of at least `BATCH` and reports the best batch, as ns per frame and MB/s of payload.
//! Timings on a shared machine are noisy: compare the columns of one run, not runs.
//!
//! - masking: the word-at-a-time [`mask`] beside a byte loop, the ratio between them;
//! - encode: one masked client frame (header, payload copied, masked) into a reused buffer, as
//!   `Ws` queues a message (the key is fixed here; the client draws one per frame);
//! - take: server frames copied into a read buffer (the copy a read makes) and taken off it one
//!   by one, header checked and payload split off, as the message path reads;
//! - count: the same frames only peeked and skipped, as the counting reads go;
//! - deflate: the client's cost per message with permessage-deflate against without, for JSON
//!   messages of 64 B and 1 KiB (each a little different from the last, as a stream of events
//!   is): compressing and framing one (context kept from message to message, or reset after
//!   each), and inflating one a server compressed; with the compressor's and decompressor's
//!   memory, what a connection holds for each direction that keeps its context.
//!
//! The framing table comes twice: with each copy's source and destination mid-page apart, and
//! 16 bytes apart modulo a page, where this machine's memmove is an order of magnitude slower
//! for large copies (see [`TYPICAL`]).

use bytes::BytesMut;
use std::hint::black_box;
use std::time::{Duration, Instant};
use wsload_ws::deflate::{Deflate, DeflateParams, Inflated};
use wsload_ws::frame::{self, OP_BINARY};
use wsload_ws::mask::mask;

const SIZES: [(usize, &str); 3] = [(64, "64 B"), (1024, "1 KiB"), (64 * 1024, "64 KiB")];
/// A batch runs at least this long; the best of `BATCHES` batches is reported.
const BATCH: Duration = Duration::from_millis(20);
const BATCHES: usize = 5;
/// Bytes of frames one `take`/`count` round reads, like a large read of a burst of echoes.
const READ: usize = 256 * 1024;
const KEY: [u8; 4] = [0x6d, 0xb6, 0xb2, 0x80];

/// The seconds one call of `f` takes, the best batch's average.
fn time(mut f: impl FnMut()) -> f64 {
    let mut n = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        if t.elapsed() >= BATCH {
            break;
        }
        n *= 2;
    }
    (0..BATCHES)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// The reference the fast path is measured against: RFC 6455 5.3 as written.
fn mask_bytewise(buf: &mut [u8], key: [u8; 4]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b ^= key[i & 3];
    }
}

/// "123.4 ns  5678 MB/s" for `frames` frames of `bytes` payload bytes in all taking `secs`.
fn cell(secs: f64, frames: usize, bytes: usize) -> String {
    format!(
        "{:>9.1} ns {:>7.0} MB/s",
        secs * 1e9 / frames as f64,
        bytes as f64 / secs / 1e6
    )
}

fn masking() {
    println!(
        "{:<8} {:>23}   {:>23}   {:>6}",
        "masking", "byte loop", "word at a time", "ratio"
    );
    for (size, name) in SIZES {
        let mut buf = vec![0x5au8; size];
        let slow = time(|| mask_bytewise(black_box(&mut buf), black_box(KEY)));
        let fast = time(|| mask(black_box(&mut buf), black_box(KEY)));
        println!(
            "{name:<8} {}   {}   {:>5.1}x",
            cell(slow, 1, size),
            cell(fast, 1, size),
            slow / fast
        );
    }
}

/// Where a copy's destination lies past its source, modulo a page. This machine's memmove
/// (glibc 2.36's rep movsb path on an AMD EPYC) copies 64 KiB ~20x slower when that distance is
/// below ~32 bytes than otherwise, so each source is placed on purpose rather than wherever the
/// allocator put it: mid-page for the main table, and 16 bytes for a second table that shows
/// the slow case.
const TYPICAL: usize = 2048;
const ALIASED: usize = 16;
const PAGE: usize = 4096;

/// `data` copied into a new buffer at an offset where `dst` lies `distance` bytes past it,
/// modulo a page: the buffer, and the offset.
fn placed(data: &[u8], dst: *const u8, distance: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; data.len() + PAGE];
    let at = dst
        .addr()
        .wrapping_sub(distance)
        .wrapping_sub(buf.as_ptr().addr())
        % PAGE;
    buf[at..at + data.len()].copy_from_slice(data);
    (buf, at)
}

fn framing(distance: usize) {
    println!(
        "{:<8} {:>23}   {:>23}   {:>23}",
        "framing", "encode (masked)", "take", "count"
    );
    for (size, name) in SIZES {
        // The write buffer keeps its place from one frame to the next (cleared, not freed).
        let mut out = Vec::new();
        frame::encode(&mut out, true, OP_BINARY, &vec![0x5a; size], Some(KEY));
        let header = frame::parse_header(&out).map_or(0, |h| h.header_len);
        let (src, at) = placed(&vec![0x5a; size], out[header..].as_ptr(), distance);
        let payload = &src[at..at + size];
        let encode = time(|| {
            out.clear();
            frame::encode(&mut out, true, OP_BINARY, black_box(payload), Some(KEY));
            black_box(&out);
        });

        let frames = (READ / (size + frame::MAX_HEADER)).max(1);
        let mut wire = Vec::new();
        for _ in 0..frames {
            frame::encode(&mut wire, true, OP_BINARY, payload, None);
        }
        // So does the read buffer: emptied by `take`, it is reclaimed in place.
        let mut rd = BytesMut::new();
        rd.extend_from_slice(&wire);
        let (src, at) = placed(&wire, rd.as_ptr(), distance);
        let wire = &src[at..at + wire.len()];
        let take = time(|| {
            rd.clear();
            rd.extend_from_slice(black_box(wire));
            while let Ok(Some((h, p))) = frame::take(&mut rd, false, frame::MAX_FRAME) {
                black_box((h, p));
            }
        });
        let count = time(|| {
            rd.clear();
            rd.extend_from_slice(black_box(wire));
            while let Ok(Some(h)) = frame::peek(&mut rd, false, frame::MAX_FRAME) {
                bytes::Buf::advance(&mut rd, h.header_len + h.payload_len as usize);
            }
            black_box(&rd);
        });
        println!(
            "{name:<8} {}   {}   {}",
            cell(encode, 1, size),
            cell(take, frames, frames * size),
            cell(count, frames, frames * size)
        );
    }
}

/// `n` JSON messages of about `size` bytes, each with its own sequence number and values.
fn json_messages(size: usize, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut m = format!(
                r#"{{"type":"trade","seq":{i},"ts":{},"symbol":"BTC-USD","px":{}.5,"qty":0.{},"trades":["#,
                1_700_000_000_000u64 + i as u64 * 37,
                67_000 + i * 7 % 500,
                i * 13 % 1000
            );
            let mut j = 0;
            while m.len() + 60 < size {
                m.push_str(&format!(
                    r#"{{"id":{},"side":"{}","px":{}.25,"qty":{}}},"#,
                    i * 100 + j,
                    if (i + j) % 3 == 0 { "buy" } else { "sell" },
                    66_900 + (i * 31 + j * 17) % 300,
                    (i + j * 7) % 50
                ));
                j += 1;
            }
            m = m.trim_end_matches(',').to_string();
            m.push_str("]}");
            while m.len() < size {
                m.insert(m.len() - 1, ' ');
            }
            m.into_bytes()
        })
        .collect()
}

fn params(takeover: bool) -> DeflateParams {
    DeflateParams {
        server_max_window_bits: 15,
        client_max_window_bits: 15,
        server_no_context_takeover: !takeover,
        client_no_context_takeover: !takeover,
    }
}

/// Messages per timed round: a fresh compressor per round, its cost spread over these.
const STREAM: usize = 256;

fn deflate() {
    println!(
        "{:<8} {:>11} {:>14} {:>14} {:>14} {:>14}   {:>14}",
        "deflate",
        "plain out",
        "deflate out",
        "(no takeover)",
        "inflate in",
        "(no takeover)",
        "wire bytes"
    );
    for (size, name) in [(64, "64 B"), (1024, "1 KiB")] {
        let msgs = json_messages(size, STREAM);
        let mut out = Vec::new();
        let plain = time(|| {
            for m in &msgs {
                out.clear();
                frame::encode(&mut out, true, OP_BINARY, black_box(m), Some(KEY));
            }
        }) / STREAM as f64;
        let compress = |takeover: bool, out: &mut Vec<u8>| {
            let mut d = Deflate::new(params(takeover));
            let mut wire = 0;
            for m in &msgs {
                out.clear();
                d.with_compressed(black_box(m), |c| {
                    let c = c.unwrap_or(m);
                    frame::encode(out, true, OP_BINARY | frame::RSV1, c, Some(KEY));
                    wire += out.len();
                });
            }
            wire
        };
        let kept = time(|| {
            black_box(compress(true, &mut out));
        }) / STREAM as f64;
        let reset = time(|| {
            black_box(compress(false, &mut out));
        }) / STREAM as f64;
        let wire = compress(true, &mut out);
        // What a server sends: the same stream compressed by a peer, inflated in order.
        let server = |takeover: bool| {
            let mut d = Deflate::new(params(takeover));
            msgs.iter()
                .map(|m| {
                    d.with_compressed(m, |c| c.map(<[u8]>::to_vec))
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
        };
        let inflate = |stream: &[Vec<u8>], takeover: bool| {
            let stream = stream.to_vec();
            time(move || {
                let mut d = Deflate::new(params(takeover));
                for c in &stream {
                    let mut out = Vec::new();
                    let done = d.inflate(black_box(c), &mut out, 1 << 20);
                    assert!(matches!(done, Ok(Inflated::Done)));
                    black_box(out);
                }
            }) / STREAM as f64
        };
        let (in_kept, in_reset) = (inflate(&server(true), true), inflate(&server(false), false));
        let us = |s: f64| format!("{:>11.2} µs", s * 1e6);
        println!(
            "{name:<8} {:>11} {:>14} {:>14} {:>14} {:>14}   {:>5} of {:>5}",
            us(plain),
            us(kept),
            us(reset),
            us(in_kept),
            us(in_reset),
            wire / STREAM,
            size + 6
        );
    }
    let (c, d) = state_sizes();
    println!(
        "state a connection holds per direction keeping its context: compressor {} KiB, decompressor {} KiB",
        c / 1024,
        d / 1024
    );
}

/// Resident bytes a compressor and a decompressor (2^15 windows) add once each has handled a
/// message: `N` of each made, and the growth of this process's resident set divided by `N`
/// (what a connection keeping its context costs, pages touched, not just reserved).
fn state_sizes() -> (usize, usize) {
    const N: usize = 200;
    let msgs = json_messages(1024, 1);
    let before = resident();
    let mut compressors: Vec<Deflate> = (0..N).map(|_| Deflate::new(params(true))).collect();
    let mut wire = Vec::new();
    for d in &mut compressors {
        wire = d
            .with_compressed(&msgs[0], |c| c.map(<[u8]>::to_vec))
            .unwrap_or_default();
    }
    let compressor = resident().saturating_sub(before) / N;
    let before = resident();
    let mut decompressors: Vec<Deflate> = (0..N).map(|_| Deflate::new(params(true))).collect();
    for d in &mut decompressors {
        let _ = d.inflate(&wire, &mut Vec::new(), 1 << 20);
    }
    let decompressor = resident().saturating_sub(before) / N;
    black_box((compressors, decompressors));
    (compressor, decompressor)
}

/// This process's resident set, bytes (Linux).
fn resident() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    // `cargo test --benches` runs this too, as a quick check that it works; `cargo bench`
    // passes `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        let mut p = vec![1u8; 100];
        mask(&mut p, KEY);
        mask_bytewise(&mut p, KEY);
        assert!(p.iter().all(|&b| b == 1));
        return;
    }
    println!(
        "wsload-ws codec: best of {BATCHES} batches of >= {BATCH:?} each; ns per frame, MB/s of payload"
    );
    masking();
    println!("\ncopies placed {TYPICAL} bytes apart modulo 4 KiB:");
    framing(TYPICAL);
    println!(
        "\ncopies placed {ALIASED} bytes apart modulo 4 KiB (this machine's slow memmove case):"
    );
    framing(ALIASED);
    println!("\nper message, µs; wire bytes: a compressed message's frame of the plain frame's:");
    deflate();
}
