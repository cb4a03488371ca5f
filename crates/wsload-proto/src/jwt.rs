//! HS256 JSON Web Tokens: just enough of RFC 7519 for the WSE handshake.
//!
//! Hand-rolled on `hmac`/`sha2` rather than a JWT crate: only HS256 is needed, and both the
//! signer and the verifier must agree on the exact claim checks the WSE server makes.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;
use std::time::{SystemTime, UNIX_EPOCH};

type HmacSha256 = Hmac<Sha256>;

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: i64 = 5;

/// Why a token was refused. `reason()` is the metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("token is not three base64url parts of JSON")]
    Malformed,
    #[error("token algorithm {0:?} is not HS256")]
    UnsupportedAlgorithm(String),
    #[error("token signature does not match the shared secret")]
    BadSignature,
    #[error("token has no numeric exp claim")]
    MissingExpiry,
    #[error("token expired at {exp} (now {now})")]
    Expired { exp: i64, now: i64 },
    #[error("token not valid before {nbf} (now {now})")]
    NotYetValid { nbf: i64, now: i64 },
    #[error("token issuer {found:?} is not {expected:?}")]
    WrongIssuer {
        expected: String,
        found: Option<String>,
    },
    #[error("token audience does not include {expected:?}")]
    WrongAudience { expected: String },
}

impl JwtError {
    /// A short, stable label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            JwtError::Malformed | JwtError::UnsupportedAlgorithm(_) => "malformed",
            JwtError::BadSignature => "bad_signature",
            JwtError::MissingExpiry | JwtError::Expired { .. } => "expired",
            JwtError::NotYetValid { .. } => "not_yet_valid",
            JwtError::WrongIssuer { .. } | JwtError::WrongAudience { .. } => "claims",
        }
    }
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn mac(secret: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    }
}

/// Signs `claims` (a JSON object) with HS256.
pub fn sign(claims: &Map<String, Value>, secret: &[u8]) -> String {
    let header = B64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = B64.encode(Value::Object(claims.clone()).to_string());
    let signing_input = format!("{header}.{payload}");
    let mut m = mac(secret);
    m.update(signing_input.as_bytes());
    let sig = B64.encode(m.finalize().into_bytes());
    format!("{signing_input}.{sig}")
}

/// The claims the WSE benchmark puts in its tokens: `sub`, `iss`, `aud`, `iat`, `exp`.
pub fn standard_claims(
    subject: &str,
    issuer: &str,
    audience: &str,
    ttl_secs: i64,
) -> Map<String, Value> {
    let now = now_secs();
    let mut c = Map::new();
    c.insert("sub".into(), subject.into());
    c.insert("iss".into(), issuer.into());
    c.insert("aud".into(), audience.into());
    c.insert("iat".into(), now.into());
    c.insert("exp".into(), (now + ttl_secs).into());
    c
}

/// What a verifier demands beyond a valid signature and expiry.
#[derive(Debug, Clone, Default)]
pub struct Validation {
    pub issuer: Option<String>,
    pub audience: Option<String>,
}

/// Checks signature, algorithm, `exp`, `nbf`, and the issuer/audience asked for.
/// Returns the claims on success.
pub fn verify(
    token: &str,
    secret: &[u8],
    validation: &Validation,
) -> Result<Map<String, Value>, JwtError> {
    verify_at(token, secret, validation, now_secs())
}

/// [`verify`] with an explicit clock, for tests.
pub fn verify_at(
    token: &str,
    secret: &[u8],
    validation: &Validation,
    now: i64,
) -> Result<Map<String, Value>, JwtError> {
    let mut parts = token.trim().split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let header: Value = decode_json(h)?;
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    if alg != "HS256" {
        return Err(JwtError::UnsupportedAlgorithm(alg.to_string()));
    }
    let sig = B64.decode(s).map_err(|_| JwtError::Malformed)?;
    let mut m = mac(secret);
    m.update(h.as_bytes());
    m.update(b".");
    m.update(p.as_bytes());
    // verify_slice compares in constant time.
    m.verify_slice(&sig).map_err(|_| JwtError::BadSignature)?;

    let Value::Object(claims) = decode_json(p)? else {
        return Err(JwtError::Malformed);
    };
    let exp = claims
        .get("exp")
        .and_then(Value::as_i64)
        .ok_or(JwtError::MissingExpiry)?;
    if exp + LEEWAY_SECS <= now {
        return Err(JwtError::Expired { exp, now });
    }
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_i64)
        && nbf > now + LEEWAY_SECS
    {
        return Err(JwtError::NotYetValid { nbf, now });
    }
    if let Some(expected) = &validation.issuer {
        let found = claims.get("iss").and_then(Value::as_str);
        if found != Some(expected.as_str()) {
            return Err(JwtError::WrongIssuer {
                expected: expected.clone(),
                found: found.map(str::to_string),
            });
        }
    }
    if let Some(expected) = &validation.audience {
        let ok = match claims.get("aud") {
            Some(Value::String(a)) => a == expected,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(expected.as_str())),
            _ => false,
        };
        if !ok {
            return Err(JwtError::WrongAudience {
                expected: expected.clone(),
            });
        }
    }
    Ok(claims)
}

fn decode_json(part: &str) -> Result<Value, JwtError> {
    let bytes = B64.decode(part).map_err(|_| JwtError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"test-secret";

    fn strict() -> Validation {
        Validation {
            issuer: Some("wse-bench".into()),
            audience: Some("wse-bench".into()),
        }
    }

    #[test]
    fn round_trip_accepts_fresh_token() {
        let token = sign(
            &standard_claims("user-1", "wse-bench", "wse-bench", 3600),
            SECRET,
        );
        let claims = verify(&token, SECRET, &strict()).expect("fresh token verifies");
        assert_eq!(claims["sub"], "user-1");
    }

    /// A token signed elsewhere (Python's `hmac`/`hashlib`), so that the signer and the verifier
    /// cannot agree on a wrong MAC: the digest crates change under them in upgrades.
    const KNOWN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJhdWQiOiJ3c2UtYmVuY2giLCJleHAiOjQxMDI0NDQ4MDAsImlzcyI6IndzZS1iZW5jaCIsInN1YiI6InVzZXItMSJ9.Q_vYI3zk31CXglaH8HIpWYgx_kJK3tNpK-21bxG7Xsc";

    #[test]
    fn signs_and_verifies_a_token_made_elsewhere() {
        let mut c = Map::new();
        // Alphabetical, so the payload is the same with or without serde_json's preserve_order.
        c.insert("aud".into(), "wse-bench".into());
        c.insert("exp".into(), 4_102_444_800_i64.into());
        c.insert("iss".into(), "wse-bench".into());
        c.insert("sub".into(), "user-1".into());
        assert_eq!(sign(&c, SECRET), KNOWN);
        let claims = verify_at(KNOWN, SECRET, &strict(), 1_700_000_000).expect("verifies");
        assert_eq!(claims["sub"], "user-1");
    }

    #[test]
    fn rejects_wrong_secret() {
        let token = sign(
            &standard_claims("u", "wse-bench", "wse-bench", 3600),
            SECRET,
        );
        assert_eq!(
            verify(&token, b"other", &strict()),
            Err(JwtError::BadSignature)
        );
    }

    #[test]
    fn rejects_expired_and_future_tokens() {
        let mut c = standard_claims("u", "wse-bench", "wse-bench", 3600);
        c.insert("exp".into(), 1000.into());
        let token = sign(&c, SECRET);
        assert!(matches!(
            verify_at(&token, SECRET, &strict(), 2000),
            Err(JwtError::Expired { exp: 1000, .. })
        ));
        // Inside the leeway it still passes.
        assert!(verify_at(&token, SECRET, &strict(), 1000 + LEEWAY_SECS - 1).is_ok());

        c.insert("exp".into(), 10_000.into());
        c.insert("nbf".into(), 5000.into());
        let token = sign(&c, SECRET);
        assert!(matches!(
            verify_at(&token, SECRET, &strict(), 2000),
            Err(JwtError::NotYetValid { .. })
        ));
    }

    #[test]
    fn rejects_missing_expiry_and_wrong_claims() {
        let mut c = standard_claims("u", "someone", "wse-bench", 3600);
        let token = sign(&c, SECRET);
        assert!(matches!(
            verify(&token, SECRET, &strict()),
            Err(JwtError::WrongIssuer { .. })
        ));
        // No issuer demanded: the same token passes.
        assert!(verify(&token, SECRET, &Validation::default()).is_ok());

        c.insert("aud".into(), serde_json::json!(["x", "wse-bench"]));
        c.insert("iss".into(), "wse-bench".into());
        assert!(verify(&sign(&c, SECRET), SECRET, &strict()).is_ok());
        c.insert("aud".into(), "x".into());
        assert!(matches!(
            verify(&sign(&c, SECRET), SECRET, &strict()),
            Err(JwtError::WrongAudience { .. })
        ));

        c.remove("exp");
        assert_eq!(
            verify(&sign(&c, SECRET), SECRET, &Validation::default()),
            Err(JwtError::MissingExpiry)
        );
    }

    #[test]
    fn rejects_garbage_and_other_algorithms() {
        assert_eq!(
            verify("abc", SECRET, &Validation::default()),
            Err(JwtError::Malformed)
        );
        assert_eq!(
            verify("a.b.c.d", SECRET, &Validation::default()),
            Err(JwtError::Malformed)
        );
        let none_header = B64.encode(br#"{"alg":"none"}"#);
        let body = B64.encode(br#"{"exp":99999999999}"#);
        let token = format!("{none_header}.{body}.");
        assert_eq!(
            verify(&token, SECRET, &Validation::default()),
            Err(JwtError::UnsupportedAlgorithm("none".into()))
        );
    }
}
