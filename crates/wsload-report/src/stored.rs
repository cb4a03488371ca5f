//! A result as stored beside a LoadTest: gzip-compressed JSON. Histograms are already deflated
//! inside, but the JSON around them (labels, counts, base64) still shrinks about 2.5x, and a
//! Kubernetes object holds at most 1 MiB. Reading accepts plain JSON too, so a result saved
//! by `wsload run --out` and one copied out of a ConfigMap read alike.
//!
//! What a read costs is bounded before it is spent: a file past [`MAX_RESULT_BYTES`] is refused
//! by its size, a gzip stream by what it inflates to (counted, not kept), a result of more than
//! [`MAX_CELLS`] cells by a count of them before any is read. Each cell keeps its histograms
//! compact ([`crate::hist`]): at most ~190 KB each, typically a few KB, none when empty.

use crate::RunResult;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::Deserialize;
use std::borrow::Cow;
use std::io::{self, Read, Write};
use wsload_spec::file::ReadError;

/// The most a result's JSON may hold, read from a file or decompressed: far above any real
/// run (results of thousands of shards take tens of MiB), far below what hurts the machine.
pub const MAX_RESULT_BYTES: u64 = 256 << 20;

/// The most cells a result may hold: the most any valid LoadTest runs (a payloadMatrix of the
/// most tiers by the most sizes). A result read keeps each cell's histograms, so this bounds it.
pub const MAX_CELLS: usize = wsload_spec::status::MAX_CELLS;

/// The first two bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error("cannot compress the result: {0}")]
    Compress(#[source] std::io::Error),
    #[error("cannot decompress the result: {0}")]
    Decompress(#[source] std::io::Error),
    #[error("the result decompresses to more than {} MiB, the most a result may be", MAX_RESULT_BYTES >> 20)]
    TooBig,
    #[error(
        "the result holds {cells} cells, more than the {MAX_CELLS} a valid LoadTest can run ({} tiers x {} message sizes)",
        wsload_spec::cel::MAX_TIERS,
        wsload_spec::cel::MAX_SIZES
    )]
    TooManyCells { cells: usize },
    #[error("not a wsload result: {0}")]
    Json(#[source] serde_json::Error),
}

pub type Result<T, E = StoredError> = std::result::Result<T, E>;

/// Compresses a result's JSON text (as a shard serves it) for storing.
pub fn compress(json: &[u8]) -> Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::with_capacity(json.len() / 2), Compression::default());
    gz.write_all(json).map_err(StoredError::Compress)?;
    gz.finish().map_err(StoredError::Compress)
}

/// Serializes and compresses a result.
pub fn encode(result: &RunResult) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(result).map_err(StoredError::Json)?;
    compress(&json)
}

/// The JSON text of a stored result, gzip-compressed or plain.
pub fn json_text(bytes: &[u8]) -> Result<Vec<u8>> {
    json(bytes).map(Cow::into_owned)
}

/// The JSON text of a stored result: plain JSON as it is, gzip inflated into a buffer of
/// exactly its size. The stream is inflated twice, first only counted: a stream that inflates
/// past [`MAX_RESULT_BYTES`] (a gzip bomb) is refused without holding any of it.
pub fn json(bytes: &[u8]) -> Result<Cow<'_, [u8]>> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(Cow::Borrowed(bytes));
    }
    inflate_within(bytes, MAX_RESULT_BYTES).map(Cow::Owned)
}

fn inflate_within(gzip: &[u8], limit: u64) -> Result<Vec<u8>> {
    let inflate = || GzDecoder::new(gzip).take(limit.saturating_add(1));
    let size = io::copy(&mut inflate(), &mut io::sink()).map_err(StoredError::Decompress)?;
    if size > limit {
        return Err(StoredError::TooBig);
    }
    read_within(inflate(), size, limit)
        .map_err(StoredError::Decompress)?
        .ok_or(StoredError::TooBig)
}

/// Reads a result, gzip-compressed or plain JSON. Its cells are counted before any is read.
pub fn decode(bytes: &[u8]) -> Result<RunResult> {
    let json = json(bytes)?;
    let Outline { cells } = serde_json::from_slice(&json).map_err(StoredError::Json)?;
    if cells.0 > MAX_CELLS {
        return Err(StoredError::TooManyCells { cells: cells.0 });
    }
    serde_json::from_slice(&json).map_err(StoredError::Json)
}

/// A result file: refused by its size before it is read when it is a regular file, and past
/// [`MAX_RESULT_BYTES`] of reading otherwise (a pipe, a device), never holding more than that.
pub fn read_file(path: &str) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_string(),
        source,
    };
    let too_big = || ReadError::TooBig {
        path: path.to_string(),
        limit: MAX_RESULT_BYTES,
        what: "a result file",
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // 0 for a pipe or a device: the read below is bounded alike.
    let size = file.metadata().map_err(io)?.len();
    if size > MAX_RESULT_BYTES {
        return Err(too_big());
    }
    read_within(file, size, MAX_RESULT_BYTES)
        .map_err(io)?
        .ok_or_else(too_big)
}

/// `r` read to its end, or `None` past `limit` bytes. The buffer starts at `size` and one byte
/// (the end is then seen without growing it) and doubles from there but never past `limit` and
/// one byte: `read_to_end` doubles on, to twice the limit, before the excess is known.
fn read_within(mut r: impl Read, size: u64, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let most = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
    let first = usize::try_from(size)
        .unwrap_or(usize::MAX)
        .saturating_add(1)
        .min(most);
    // Zeroed by the allocator (fresh pages), not written: unread room costs no memory.
    let mut buf = vec![0u8; first];
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            if filled >= most {
                return Ok(None);
            }
            let more = filled.max(64 << 10).min(most - filled);
            buf.reserve_exact(more);
            buf.resize(filled + more, 0);
        }
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(Some(buf))
}

/// What of a result is read before the rest: how many cells it has, each skipped unread.
#[derive(Deserialize)]
struct Outline {
    #[serde(default)]
    cells: CellCount,
}

#[derive(Default)]
struct CellCount(usize);

impl<'de> Deserialize<'de> for CellCount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Counter;
        impl<'de> serde::de::Visitor<'de> for Counter {
            type Value = CellCount;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<CellCount, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(CellCount(n))
            }
        }
        d.deserialize_seq(Counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::shard;

    #[test]
    fn a_result_survives_compression_and_plain_json_still_reads() {
        let r = shard(0, 2000, 3, 1_000_000);
        let packed = encode(&r).expect("encode");
        let plain = serde_json::to_vec(&r).expect("json");
        assert!(packed.starts_with(&GZIP_MAGIC));
        assert!(
            packed.len() * 2 < plain.len(),
            "{} vs {}",
            packed.len(),
            plain.len()
        );
        let same = |x: &RunResult| serde_json::to_vec(x).expect("json") == plain;
        assert!(same(&decode(&packed).expect("gzip")));
        assert!(same(&decode(&plain).expect("plain")));
        let err = decode(b"\x1f\x8bnot gzip").expect_err("corrupt");
        assert!(err.to_string().starts_with("cannot decompress"), "{err}");
        // Plain JSON is read where it lies.
        assert!(matches!(json(&plain).expect("plain"), Cow::Borrowed(_)));
    }

    /// The JSON of a result of `cells` copies of one cell whose histograms are not empty
    /// (built as text: serializing thousands of histograms would take longer than reading).
    fn result_of(cells: usize) -> Vec<u8> {
        let mut r = shard(0, 200, 3, 1_000_000);
        let m = &mut r.cells[0].measure.hists;
        for ms in 1..40 {
            m.connect.record(std::time::Duration::from_micros(ms * 137));
            m.tcp.record(std::time::Duration::from_micros(ms * 41));
        }
        let mut v = serde_json::to_value(&r).expect("json");
        let cell = v["cells"][0].take();
        v["cells"] = serde_json::Value::Array(vec![cell; cells]);
        serde_json::to_vec(&v).expect("json")
    }

    #[test]
    fn a_result_at_the_cell_cap_reads_and_one_past_it_is_refused() {
        let at = decode(&compress(&result_of(MAX_CELLS)).expect("gzip")).expect("at the cap");
        assert_eq!(at.cells.len(), MAX_CELLS);
        let last = &at.cells[MAX_CELLS - 1].measure.hists;
        assert_eq!((last.connect.len(), last.rtt.len()), (39, 200));
        // Three histograms of 1 to 39 values per cell, four empty: ~1.3 KB of counts a cell
        // where dense ones took 1.3 MiB (2.7 GiB at the cap).
        let held: usize = at
            .cells
            .iter()
            .map(|c| &c.measure.hists)
            .flat_map(|h| {
                [
                    &h.tcp, &h.upgrade, &h.ready, &h.connect, &h.rtt, &h.rtt_raw, &h.fanout,
                ]
            })
            .map(|h| h.counts_bytes())
            .sum();
        assert!(held < MAX_CELLS * 2000, "{held} bytes of counts");
        let e = decode(&result_of(MAX_CELLS + 1)).expect_err("past the cap");
        assert!(matches!(e, StoredError::TooManyCells { cells } if cells == MAX_CELLS + 1));
        assert_eq!(
            e.to_string(),
            "the result holds 2049 cells, more than the 2048 a valid LoadTest can run (64 tiers x 32 message sizes)"
        );
    }

    /// Inflated output is counted before it is kept: past the limit, nothing is held; within
    /// it, the buffer is its exact size.
    #[test]
    fn inflated_results_are_refused_past_the_limit() {
        let limit = 1 << 20;
        let gz = |n: usize| compress(&vec![b' '; n]).expect("gzip");
        let at = inflate_within(&gz(limit), limit as u64).expect("at the limit");
        assert_eq!((at.len(), at.capacity()), (limit, limit + 1));
        let e = inflate_within(&gz(limit + 1), limit as u64).expect_err("past the limit");
        assert!(matches!(e, StoredError::TooBig), "{e}");
        assert_eq!(
            StoredError::TooBig.to_string(),
            "the result decompresses to more than 256 MiB, the most a result may be"
        );
    }

    #[test]
    fn reads_never_hold_more_than_the_limit() {
        // A stream of unknown size (a pipe, a device) that never ends.
        assert!(
            read_within(io::repeat(7), 0, 300_000)
                .expect("read")
                .is_none()
        );
        let data = vec![7u8; 300_000];
        let all = read_within(&data[..], 0, 300_000)
            .expect("read")
            .expect("fits");
        assert_eq!(all.len(), 300_000);
        assert!(all.capacity() <= 300_001, "{}", all.capacity());
        // A known size: one buffer of that size, and the byte that shows the end.
        let sized = read_within(&data[..], 300_000, 1 << 30)
            .expect("read")
            .expect("fits");
        assert_eq!(sized.capacity(), 300_001);
    }

    #[test]
    fn a_result_file_past_the_limit_is_refused_by_its_size() {
        let path = std::env::temp_dir().join(format!("wsload-result-{}", std::process::id()));
        let file = std::fs::File::create(&path).expect("create");
        // Sparse: no disk or memory spent, and none should be.
        file.set_len(MAX_RESULT_BYTES + 1).expect("size");
        let p = path.to_str().expect("utf-8");
        let started = std::time::Instant::now();
        let e = read_file(p).expect_err("too big");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(
            e.to_string(),
            format!(
                "{p} holds more than 256 MiB, the most a result file may be; is it the right file?"
            )
        );
        file.set_len(100).expect("size");
        assert_eq!(read_file(p).expect("fits").len(), 100);
        let _ = std::fs::remove_file(&path);
    }
}
