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
//! - count: the same frames only peeked and skipped, as the counting reads go.
//!
//! The framing table comes twice: with each copy's source and destination mid-page apart, and
//! 16 bytes apart modulo a page, where this machine's memmove is an order of magnitude slower
//! for large copies (see [`TYPICAL`]).

use bytes::BytesMut;
use std::hint::black_box;
use std::time::{Duration, Instant};
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
            while let Ok(Some((h, p))) = frame::take(&mut rd, false) {
                black_box((h, p));
            }
        });
        let count = time(|| {
            rd.clear();
            rd.extend_from_slice(black_box(wire));
            while let Ok(Some(h)) = frame::peek(&mut rd, false) {
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
}
