//! The state every task of the server shares, and the admission count it keeps.

use crate::config::{Config, Profile};
use crate::stats::Stats;
use crate::topics::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_util::sync::CancellationToken;
use wsload_proto::jwt::Validation;

/// Broadcast messages a slow connection may fall behind before it skips some, at least.
const BROADCAST_BACKLOG: usize = 1024;

/// Ticks a connection may fall behind before it skips: with a batch per tick, 1,024 messages
/// could be less than one tick, and every connection would skip at every tick however fast it
/// read.
const BROADCAST_BACKLOG_TICKS: usize = 16;

/// The broadcast feed's backlog for `batch` messages a tick.
pub fn broadcast_backlog(batch: u32) -> usize {
    BROADCAST_BACKLOG.max(BROADCAST_BACKLOG_TICKS * batch as usize)
}

/// What every task of the server reads: the configuration, the counters, the shutdown signal,
/// the JWT checks, the WebSocket limits, the broadcast feed, the topics, and the admission count.
pub struct ServerState {
    pub config: Config,
    pub stats: Stats,
    pub shutdown: CancellationToken,
    pub validation: Validation,
    pub ws_config: WebSocketConfig,
    pub broadcast: Option<broadcast::Sender<Message>>,
    /// Empty, and its counters not exposed, unless a topic profile is served.
    pub topics: Registry,
    admitted: AtomicU64,
    pub accept_error_log: AcceptErrorLog,
}

impl ServerState {
    /// The state of a server with this configuration; `open_files_limit` as start-up raised it.
    pub fn new(config: Config, open_files_limit: Option<u64>) -> ServerState {
        let ws_config = WebSocketConfig::default()
            .read_buffer_size(config.read_buffer_size)
            .write_buffer_size(64 * 1024)
            .max_write_buffer_size(64 * 1024 + 2 * config.max_message_size)
            .max_message_size(Some(config.max_message_size))
            .max_frame_size(Some(config.max_message_size));
        let broadcast = config
            .serves(Profile::Broadcast)
            .then(|| broadcast::channel(broadcast_backlog(config.broadcast_batch)).0);
        let stats = Stats::new(config.profiles());
        if let Some(limit) = open_files_limit {
            stats.set_open_files_limit(limit);
        }
        let topics = Registry::new(config.topics.subscriber_queue, config.topics.hooks);
        ServerState {
            stats,
            topics,
            validation: Validation {
                issuer: config.jwt_issuer.clone(),
                audience: config.jwt_audience.clone(),
            },
            shutdown: CancellationToken::new(),
            ws_config,
            broadcast,
            admitted: AtomicU64::new(0),
            accept_error_log: AcceptErrorLog::new(),
            config,
        }
    }

    /// Takes one of `--max-connections` places; the guard gives it back.
    pub fn admit(&self) -> Option<Admission<'_>> {
        let before = self.admitted.fetch_add(1, Ordering::AcqRel);
        let cap = self.config.max_connections;
        if cap > 0 && before >= cap {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Admission(&self.admitted))
    }

    /// Connections admitted and not yet ended.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }
}

/// One admitted connection's place, given back when it ends.
pub struct Admission<'a>(&'a AtomicU64);
impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accept failures are logged at most once a second (for all listeners together): out of
/// descriptors, accept fails on every retry until a connection closes, and a line per retry
/// would flood the log.
pub struct AcceptErrorLog {
    epoch: Instant,
    /// Milliseconds from `epoch` to the last line written; `NEVER` before the first.
    last_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl AcceptErrorLog {
    const EVERY_MS: u64 = 1000;
    const NEVER: u64 = u64::MAX;

    fn new() -> Self {
        AcceptErrorLog {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(Self::NEVER),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(failures not logged since the last line)` when a line may be written now.
    pub fn due(&self, now: Instant) -> Option<u64> {
        let now_ms = u64::try_from(now.saturating_duration_since(self.epoch).as_millis())
            .unwrap_or(Self::NEVER - 1);
        let last = self.last_ms.load(Ordering::Relaxed);
        let quiet = last == Self::NEVER || now_ms >= last.saturating_add(Self::EVERY_MS);
        // The exchange makes one listener the writer when several fail at the same moment.
        if quiet
            && self
                .last_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_broadcast_backlog_holds_sixteen_ticks() {
        assert_eq!(broadcast_backlog(1), 1024);
        assert_eq!(broadcast_backlog(64), 1024);
        assert_eq!(broadcast_backlog(100), 1600);
        assert_eq!(
            broadcast_backlog(crate::config::MAX_BROADCAST_BATCH),
            65_536
        );
    }

    #[test]
    fn accept_errors_are_logged_at_most_once_a_second() {
        let log = AcceptErrorLog::new();
        let t0 = Instant::now();
        assert_eq!(log.due(t0), Some(0));
        for ms in [100, 500, 999] {
            assert_eq!(log.due(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(log.due(t0 + Duration::from_millis(1000)), Some(3));
        assert_eq!(log.due(t0 + Duration::from_millis(1500)), None);
    }
}
