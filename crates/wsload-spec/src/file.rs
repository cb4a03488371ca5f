//! Files read whole (a LoadTest, a stored result), with a limit: a wrong path such as
//! `/dev/zero` or a multi-gigabyte log must be refused at once, not read into memory.

use std::io::Read;

/// The most a LoadTest file may hold. A LoadTest is a Kubernetes object, which the API
/// server stores in etcd (at most ~1.5 MiB); 1 MiB is far above any real spec.
pub const MAX_LOADTEST_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} holds more than {}, the most {what} may be; is it the right file?",
        size(*.limit)
    )]
    TooBig {
        path: String,
        limit: u64,
        what: &'static str,
    },
}

/// A byte count as the messages say it (`1 MiB`).
pub fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// The whole of `path`, refused past `limit` bytes without reading more than one byte over
/// it (so a device or a pipe that never ends costs nothing). `what` names the file's kind in
/// the error ("a LoadTest file").
pub fn read_bounded(path: &str, limit: u64, what: &'static str) -> Result<Vec<u8>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooBig {
            path: path.to_string(),
            limit,
            what,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_limit() {
        let e = read_bounded("/dev/zero", 4096, "a test file").expect_err("endless");
        assert!(matches!(e, ReadError::TooBig { limit: 4096, .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "/dev/zero holds more than 4 KiB, the most a test file may be; is it the right file?"
        );
    }

    #[test]
    fn a_file_at_the_limit_reads_whole() {
        let path = std::env::temp_dir().join(format!("wsload-bounded-{}", std::process::id()));
        std::fs::write(&path, vec![b'x'; 100]).expect("write");
        let p = path.to_str().expect("utf-8");
        assert_eq!(read_bounded(p, 100, "f").expect("fits").len(), 100);
        assert!(matches!(
            read_bounded(p, 99, "f"),
            Err(ReadError::TooBig { .. })
        ));
        let _ = std::fs::remove_file(&path);
    }
}
