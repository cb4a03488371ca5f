//! The upgrade request (RFC 6455 4.1) as the LoadTest asks for it: its headers, the offered
//! subprotocols and compression, and its credential (a fixed token, or a JWT signed per
//! connection), rendered once for every connection to copy.

use super::error::SetupError;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::{Request, generate_request};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use wsload_spec::{LoadTestSpec, TokenPlacement};
use wsload_ws::DeflateOffer;

/// The upgrade request every connection of a run sends, rendered once: per connection only
/// its key (and a JWT's claims) change.
pub struct Upgrade {
    /// As tungstenite renders it, without its closing blank line: every connection copies it
    /// and writes its own key at `key_at` (and its own token, if any).
    request: Vec<u8>,
    key_at: usize,
    /// Subprotocols the request offers (the server picks one of them, or none).
    pub(super) protocols: Option<Vec<String>>,
    /// The per-connection token (a JWT); a fixed token is part of `request`.
    token: Token,
}

impl Upgrade {
    /// The request to `url` with `spec.auth`, `spec.subprotocols` and `spec.compression`.
    pub fn new(spec: &LoadTestSpec, url: &str) -> Result<Upgrade, SetupError> {
        let request = url
            .into_client_request()
            .map_err(|e| SetupError::field(format!("spec.target.url {url:?}"), e))?;
        let (headers, token) = auth(spec)?;
        let rendered = render(request, &headers, &token, spec)?;
        Ok(Upgrade {
            request: rendered.request,
            key_at: rendered.key_at,
            protocols: rendered.protocols,
            // A fixed token is in the rendered request already.
            token: match token {
                Token::Fixed(..) => Token::None,
                t => t,
            },
        })
    }

    /// The upgrade request of connection `n` and the `Sec-WebSocket-Accept` it expects.
    pub fn for_connection(&self, n: u64) -> (Vec<u8>, String) {
        let jwt = match &self.token {
            Token::Jwt {
                secret,
                claims,
                subject,
                ttl,
                placement,
            } => {
                let sub = subject.replace("{i}", &n.to_string());
                let now = wsload_proto::jwt::now_secs();
                let mut c = claims.clone();
                c.insert("sub".into(), sub.into());
                c.insert("iat".into(), now.into());
                c.insert("exp".into(), (now + ttl).into());
                token_header(&wsload_proto::jwt::sign(&c, secret), *placement)
            }
            _ => None,
        };
        let mut req = Vec::with_capacity(self.request.len() + 2 + jwt.as_ref().map_or(0, Vec::len));
        req.extend_from_slice(&self.request);
        let key = wsload_ws::new_key();
        req[self.key_at..self.key_at + key.len()].copy_from_slice(&key);
        if let Some(h) = jwt {
            req.extend_from_slice(&h);
        }
        req.extend_from_slice(b"\r\n");
        (req, derive_accept_key(&key))
    }
}

enum Token {
    None,
    Fixed(String, TokenPlacement),
    Jwt {
        secret: Vec<u8>,
        claims: serde_json::Map<String, serde_json::Value>,
        subject: String,
        ttl: i64,
        placement: TokenPlacement,
    },
}

fn resolve_secret(s: &wsload_spec::SecretValue, field: &'static str) -> Result<String, SetupError> {
    if let Some(v) = &s.value {
        return Ok(v.clone());
    }
    if let Some(var) = &s.from_env {
        return std::env::var(var).map_err(|_| SetupError::SecretFromEnv {
            field,
            var: var.clone(),
        });
    }
    // In a cluster the operator turns secretRef into an environment variable of the pod.
    if let Some(r) = &s.secret_ref {
        let var = secret_env_name(&r.name, &r.key);
        return std::env::var(&var).map_err(|_| SetupError::SecretRef {
            field,
            name: r.name.clone(),
            key: r.key.clone(),
            var: var.clone(),
        });
    }
    Err(SetupError::NoSecret { field })
}

/// Shared with the operator, which names the same variables in the shard pods' env.
pub use wsload_spec::secret_env_name;

/// The header a token sent as `placement` goes in, and its value.
fn token_name_value(token: &str, placement: TokenPlacement) -> (&'static str, String) {
    match placement {
        TokenPlacement::Cookie => ("cookie", format!("access_token={token}")),
        TokenPlacement::Bearer => ("authorization", format!("Bearer {token}")),
    }
}

/// The `name: value` header line of a token sent as `placement`.
fn token_header(token: &str, placement: TokenPlacement) -> Option<Vec<u8>> {
    let (name, value) = token_name_value(token, placement);
    // As before: a value that is not a valid header value is left out.
    HeaderValue::from_str(&value).ok()?;
    Some(format!("{name}: {value}\r\n").into_bytes())
}

/// `spec.auth`: its extra headers, and the token every connection sends (a JWT wins over a
/// fixed token; both secrets must resolve).
fn auth(spec: &LoadTestSpec) -> Result<(Vec<(HeaderName, HeaderValue)>, Token), SetupError> {
    let mut headers = Vec::new();
    let mut token = Token::None;
    let Some(auth) = &spec.auth else {
        return Ok((headers, token));
    };
    for (k, v) in &auth.headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| SetupError::field(format!("spec.auth.headers.{k}"), e))?;
        let value = HeaderValue::from_str(v)
            .map_err(|e| SetupError::field(format!("spec.auth.headers.{k}"), e))?;
        headers.push((name, value));
    }
    if let Some(t) = &auth.token {
        token = Token::Fixed(resolve_secret(t, "spec.auth.token")?, auth.send_as);
    }
    if let Some(jwt) = &auth.jwt {
        let secret = resolve_secret(&jwt.secret, "spec.auth.jwt.secret")?.into_bytes();
        let mut claims = serde_json::Map::new();
        if let Some(iss) = &jwt.issuer {
            claims.insert("iss".into(), iss.clone().into());
        }
        if let Some(aud) = &jwt.audience {
            claims.insert("aud".into(), aud.clone().into());
        }
        claims.extend(jwt.claims.clone());
        token = Token::Jwt {
            secret,
            claims,
            subject: jwt.subject.clone(),
            ttl: jwt.ttl.get().as_secs() as i64,
            placement: auth.send_as,
        };
    }
    Ok((headers, token))
}

/// The upgrade request rendered once, for every connection to copy.
struct Rendered {
    /// Without its closing blank line: a JWT header may follow.
    request: Vec<u8>,
    /// Where the 24-byte `Sec-WebSocket-Key` value starts.
    key_at: usize,
    /// Subprotocols the request offers.
    protocols: Option<Vec<String>>,
}

/// The request as tungstenite's client writes it (custom headers, the offered subprotocols
/// and compression, and a fixed token included), rendered once: per connection only the key
/// (and a JWT) change.
fn render(
    mut req: Request,
    headers: &[(HeaderName, HeaderValue)],
    token: &Token,
    spec: &LoadTestSpec,
) -> Result<Rendered, SetupError> {
    for (k, v) in headers {
        req.headers_mut().insert(k.clone(), v.clone());
    }
    if !spec.subprotocols.is_empty() {
        let v = HeaderValue::from_str(&spec.subprotocols.join(", "))
            .map_err(|e| SetupError::field("spec.subprotocols", e))?;
        req.headers_mut().insert("sec-websocket-protocol", v);
    }
    if let Some(offer) = deflate_offer(spec) {
        let v = HeaderValue::from_str(&offer.header_value())
            .map_err(|e| SetupError::field("spec.compression", e))?;
        req.headers_mut().insert("sec-websocket-extensions", v);
    }
    if let Token::Fixed(t, placement) = token {
        let (name, value) = token_name_value(t, *placement);
        if let Ok(v) = HeaderValue::from_str(&value) {
            req.headers_mut().append(name, v);
        }
    }
    let protocols = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(|p| p.trim().to_string()).collect());
    let (mut rendered, key) =
        generate_request(req).map_err(|e| SetupError::field("spec.auth.headers", e))?;
    let key_line = format!("Sec-WebSocket-Key: {key}\r\n");
    let key_at = rendered
        .windows(key_line.len())
        .position(|w| w == key_line.as_bytes())
        .filter(|_| key.len() == 24)
        .ok_or(SetupError::NoKey)?
        + "Sec-WebSocket-Key: ".len();
    rendered.truncate(rendered.len().saturating_sub(2));
    Ok(Rendered {
        request: rendered,
        key_at,
        protocols,
    })
}

/// `spec.compression` as the request offers it.
pub(super) fn deflate_offer(spec: &LoadTestSpec) -> Option<DeflateOffer> {
    spec.compression.map(|c| DeflateOffer {
        server_max_window_bits: c.server_max_window_bits,
        client_max_window_bits: c.client_max_window_bits,
        server_no_context_takeover: c.server_no_context_takeover,
        client_no_context_takeover: c.client_no_context_takeover,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_env_names_are_shell_safe() {
        assert_eq!(
            secret_env_name("wse-jwt", "secret.key"),
            "WSLOAD_SECRET_WSE_JWT_SECRET_KEY"
        );
    }
}
