//! The open-file limit: every connection is a descriptor, so RLIMIT_NOFILE is the most
//! connections one process can hold.

use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};

/// Descriptors the server needs besides its connections: stdio, the runtime's epoll and waker,
/// the signal pipe, the listeners, metrics scrapes, and sockets still in their handshake.
pub const OVERHEAD: u64 = 64;

/// The kernel's ceiling for RLIMIT_NOFILE: an `unlimited` hard limit cannot be used as a soft
/// one (setrlimit fails with EPERM above it).
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Raises the soft RLIMIT_NOFILE to the hard one and returns the soft limit in force
/// afterwards (`None` when it cannot be read). Failures are logged, never fatal: the server
/// still serves as many connections as the old limit allows.
pub fn raise_open_file_limit() -> Option<u64> {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the open-file limit (RLIMIT_NOFILE)");
            return None;
        }
    };
    let target = if hard == RLIM_INFINITY {
        nr_open().unwrap_or(hard)
    } else {
        hard
    };
    if soft >= target {
        tracing::info!(soft, hard, "open-file limit");
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => {
            tracing::info!("raised the soft open-file limit from {soft} to {target}");
            Some(target)
        }
        Err(e) => {
            tracing::warn!(
                "cannot raise the soft open-file limit from {soft} to the hard limit {hard}: {e}"
            );
            Some(soft)
        }
    }
}

/// The warning for a `--max-connections` this process cannot reach under `limit` open files,
/// with the ways out; `None` when it can (or there is no cap).
pub fn capacity_warning(max_connections: u64, limit: u64) -> Option<String> {
    let room = limit.saturating_sub(OVERHEAD);
    (max_connections > room).then(|| {
        format!(
            "--max-connections {max_connections} is more than this server can hold: its \
             open-file limit is {limit}, room for about {room} connections; connections past \
             that fail at accept (counted as wsload_server_accept_errors_total{{kind=\"file_limit\"}}). \
             Raise the hard limit (ulimit -Hn, or the container runtime's nofile ulimit) or run \
             more replicas (target.server.replicas, each with --reuse-port on one port)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_warning_names_the_limit_and_the_fixes() {
        assert_eq!(capacity_warning(0, 1024), None);
        assert_eq!(capacity_warning(1024 - OVERHEAD, 1024), None);
        let w = capacity_warning(30_000, 20_000).expect("warning");
        assert!(w.contains("--max-connections 30000"), "{w}");
        assert!(w.contains("open-file limit is 20000"), "{w}");
        assert!(w.contains("ulimit -Hn"), "{w}");
        assert!(w.contains("target.server.replicas"), "{w}");
    }

    #[test]
    fn raising_leaves_the_soft_limit_at_the_hard_one() {
        let after = raise_open_file_limit().expect("limit");
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        assert_eq!(after, soft);
        assert!(
            soft == hard || hard == RLIM_INFINITY,
            "soft {soft}, hard {hard}"
        );
    }
}
