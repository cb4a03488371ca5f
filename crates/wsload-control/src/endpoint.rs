//! The shard side of the protocol's routing, written once for every shard that serves it (the
//! load generator's `wsload shard --await-start`, and the operator tests' fake shards): which
//! request is which call, and what a wrong method gets.

use crate::protocol::{self, State};
use wsload_metrics::{Reply, Request};

/// What a shard does for each control request; the answers are the shard's (202, 409, ...).
pub trait ShardEndpoint {
    fn state(&self) -> State;
    /// `POST /control/start` with its body.
    fn start(&self, body: &[u8]) -> Reply;
    /// `POST /control/cell` with its body.
    fn cell(&self, body: &[u8]) -> Reply;
    /// `POST /control/end`.
    fn end(&self) -> Reply;
    /// `GET /control/result`.
    fn result(&self) -> Reply;
}

/// A JSON reply (a 500 saying so if `value` cannot be serialized).
pub fn json(status: u16, value: &impl serde::Serialize) -> Reply {
    match serde_json::to_string(value) {
        Ok(body) => Reply::json(status, body),
        Err(e) => Reply::text(500, format!("cannot serialize: {e}\n")),
    }
}

/// The answer to `request` when it is a control request (`None`: not one). A finish is
/// answered with the state; the shard acts on it once the answer is sent ([`is_finish`]).
pub fn route(shard: &impl ShardEndpoint, request: &Request<'_>) -> Option<Reply> {
    let get = matches!(request.method, "GET" | "HEAD");
    let post = request.method == "POST";
    Some(match request.path {
        protocol::STATE if get => json(200, &shard.state()),
        protocol::START if post => shard.start(request.body),
        protocol::CELL if post => shard.cell(request.body),
        protocol::END if post => shard.end(),
        protocol::RESULT if get => shard.result(),
        protocol::FINISH if post => json(200, &shard.state()),
        protocol::STATE | protocol::RESULT => {
            Reply::text(405, format!("{}: only GET\n", request.path))
        }
        protocol::START | protocol::CELL | protocol::END | protocol::FINISH => {
            Reply::text(405, format!("{}: only POST\n", request.path))
        }
        _ => return None,
    })
}

/// Whether `request` was `POST /control/finish`: the shard may go, after the answer is on its
/// way (a conductor that saw the connection drop would retry a finish that worked).
pub fn is_finish(request: &Request<'_>) -> bool {
    request.method == "POST" && request.path == protocol::FINISH
}
