//! What a client's upgrade request says that a profile needs once the connection is admitted.

use tokio_tungstenite::tungstenite::handshake::server::Request;

/// What the upgrade request said that a profile needs later.
#[derive(Debug, Default)]
pub struct HandshakeInfo {
    pub path: String,
    /// From the `access_token` cookie, else `Authorization: Bearer`.
    pub token: Option<String>,
    /// `format=msgpack` in the query string.
    pub msgpack: bool,
}

impl HandshakeInfo {
    pub fn from_request(req: &Request) -> Self {
        let cookie_token = req
            .headers()
            .get_all("cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|kv| kv.trim().strip_prefix("access_token=").map(str::to_string));
        let bearer = || {
            req.headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    v.strip_prefix("Bearer ")
                        .or_else(|| v.strip_prefix("bearer "))
                })
                .map(|t| t.trim().to_string())
        };
        let msgpack = req.uri().query().is_some_and(|q| {
            q.split('&')
                .any(|kv| kv.eq_ignore_ascii_case("format=msgpack"))
        });
        HandshakeInfo {
            path: req.uri().path().to_string(),
            token: cookie_token.or_else(bearer),
            msgpack,
        }
    }
}
