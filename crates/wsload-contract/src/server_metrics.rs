//! The reference server's connection counters, as wsload-server exposes them and as the
//! conductors read them each cell to say, beside what the clients saw, what the server did
//! with their connections: a handshake it gave up on, an idle connection it closed.

/// Connections admitted after the WebSocket handshake (a counter; exposed with `_total`).
pub const CONNECTIONS_ACCEPTED: &str = "wsload_server_connections_accepted";
/// Admitted connections open now (a gauge).
pub const CONNECTIONS_ACTIVE: &str = "wsload_server_connections_active";
/// Connections refused before admission, by [`REASON`] (one of [`rejected`]).
pub const CONNECTIONS_REJECTED: &str = "wsload_server_connections_rejected";
/// Admitted connections that ended, by [`REASON`] (one of [`closed`]).
pub const CONNECTIONS_CLOSED: &str = "wsload_server_connections_closed";
/// The label naming why.
pub const REASON: &str = "reason";

/// Why a connection that reached the handshake was never admitted.
pub mod rejected {
    /// At `--max-connections`.
    pub const CAPACITY: &str = "capacity";
    /// The server was shutting down.
    pub const DRAINING: &str = "draining";
    /// No complete upgrade within `--handshake-timeout` of the TCP accept.
    pub const HANDSHAKE_TIMEOUT: &str = "handshake_timeout";
    /// The upgrade request was invalid, or the stream failed during it.
    pub const HANDSHAKE_ERROR: &str = "handshake_error";
    /// Every reason above: what a reading keeps where it must stay small (a LoadTest status).
    pub const ALL: [&str; 4] = [CAPACITY, DRAINING, HANDSHAKE_TIMEOUT, HANDSHAKE_ERROR];
}

/// Why an admitted connection ended.
pub mod closed {
    /// The client closed, with a close frame or by ending the stream.
    pub const CLIENT: &str = "client";
    /// The client dropped TCP without a closing handshake.
    pub const RESET: &str = "reset";
    /// Nothing came from the client for `--idle-timeout`.
    pub const IDLE_TIMEOUT: &str = "idle_timeout";
    pub const MESSAGE_TOO_BIG: &str = "message_too_big";
    pub const PROTOCOL_ERROR: &str = "protocol_error";
    pub const IO_ERROR: &str = "io_error";
    pub const SHUTDOWN: &str = "shutdown";
    pub const AUTH_FAILED: &str = "auth_failed";
    /// Every reason above: what a reading keeps where it must stay small (a LoadTest status).
    pub const ALL: [&str; 8] = [
        CLIENT,
        RESET,
        IDLE_TIMEOUT,
        MESSAGE_TOO_BIG,
        PROTOCOL_ERROR,
        IO_ERROR,
        SHUTDOWN,
        AUTH_FAILED,
    ];
}
