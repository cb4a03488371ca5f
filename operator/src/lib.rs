//! wsload-operator: reconciles LoadTests (wsload.dev/v1alpha1) into a managed server, N
//! load-generator shards released together, and a verdict in status. See docs/operator.md.

pub mod crd;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("serialize: {0}")]
    Serialize(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
