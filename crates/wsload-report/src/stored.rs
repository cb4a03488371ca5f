//! A result as stored beside a LoadTest: gzip-compressed JSON. Histograms are already deflated
//! inside, but the JSON around them (labels, counts, base64) still shrinks about 2.5x, and a
//! Kubernetes object holds at most 1 MiB. Reading accepts plain JSON too, so a result saved
//! by `wsload run --out` and one copied out of a ConfigMap read alike.

use crate::RunResult;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use std::io::{Read, Write};

/// The most a result's JSON may hold, read from a file or decompressed: far above any real
/// run (results of thousands of shards take tens of MiB), far below what hurts the machine.
pub const MAX_RESULT_BYTES: u64 = 256 << 20;

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
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(bytes.to_vec());
    }
    let mut out = Vec::with_capacity(bytes.len() * 3);
    GzDecoder::new(bytes)
        .take(MAX_RESULT_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(StoredError::Decompress)?;
    if out.len() as u64 > MAX_RESULT_BYTES {
        return Err(StoredError::TooBig);
    }
    Ok(out)
}

/// Reads a result, gzip-compressed or plain JSON.
pub fn decode(bytes: &[u8]) -> Result<RunResult> {
    serde_json::from_slice(&json_text(bytes)?).map_err(StoredError::Json)
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
    }
}
