//! wsload-operator: reconciles LoadTests (wsload.dev/v1alpha1) into a managed server, N
//! load-generator shards released together, and a verdict in status. See docs/operator.md.

pub mod builders;
pub mod control_key;
pub mod controller;
pub mod crd;
pub mod defaults;
#[cfg(test)]
pub mod fixtures;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod pod_cache;
pub mod pod_security;
pub mod pods;
pub mod reconcile;
pub mod results;
pub mod server_counter;
pub mod shard_entries;
pub mod text;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A LoadTest the API server handed over without a namespace: a cluster-scoped CRD, not
    /// the one the operator installs.
    #[error("invalid object: LoadTest has no namespace")]
    NoNamespace { loadtest: String },
    /// A shard's control endpoint did not answer as the protocol says.
    #[error("shard: {0}")]
    Shard(#[from] wsload_control::Error),
    #[error("leader election: {0}")]
    LeaseLost(#[from] leader::LeaseLost),
    #[error(transparent)]
    PodCache(#[from] pod_cache::Dropped),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A short label for the errors metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Serialize { .. } => "serialize",
            Error::NoNamespace { .. } => "invalid",
            Error::Shard(_) => "shard",
            Error::LeaseLost(_) => "lease",
            Error::PodCache(_) => "watch",
            Error::Listen { .. } => "io",
        }
    }

    pub(crate) fn serialize(
        what: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Serialize {
            what,
            source: Box::new(source),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loadtest_without_a_namespace_is_an_invalid_object() {
        let e = Error::NoNamespace {
            loadtest: "t".into(),
        };
        assert_eq!(e.to_string(), "invalid object: LoadTest has no namespace");
        assert_eq!(e.metric_label(), "invalid");
    }
}
