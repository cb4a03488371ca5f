//! Why a run's connections cannot be set up, before any is dialed: a field of the spec that
//! does not make a request (the input's fault), a secret that cannot be read here, or a
//! target that resolves to nothing. A connection that fails once dialed is counted by reason
//! instead (crate::connect::failure).

use std::io;

/// A cause of another kind than ours, kept as the error's source.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A field of the spec that does not make a valid request or TLS setup.
    #[error("{field}: {source}")]
    Field {
        field: String,
        #[source]
        source: Cause,
    },
    #[error("{field}.fromEnv: environment variable {var} is not set")]
    SecretFromEnv { field: &'static str, var: String },
    #[error(
        "{field}.secretRef {name}/{key}: not available outside a cluster; set {var} or use value/fromEnv"
    )]
    SecretRef {
        field: &'static str,
        name: String,
        key: String,
        var: String,
    },
    #[error("{field}: no value")]
    NoSecret { field: &'static str },
    #[error("the upgrade request has no Sec-WebSocket-Key")]
    NoKey,
    #[error("spec.tls.caFile {path:?}: no PEM certificate in it")]
    NoCertificate { path: String },
    /// The target's name resolves to no address: no connection can be established, so the
    /// run measures nothing.
    #[error("target: cannot resolve {host}:{port}: no connection can be established: {source}")]
    Unresolvable {
        host: String,
        port: u16,
        #[source]
        source: io::Error,
    },
    #[error("target: {host}:{port} resolves to no address")]
    NoAddress { host: String, port: u16 },
}

impl SetupError {
    pub fn field(field: impl Into<String>, source: impl Into<Cause>) -> SetupError {
        SetupError::Field {
            field: field.into(),
            source: source.into(),
        }
    }
}
