//! The `LoadTest` resource, `wsload.dev/v1alpha1`: one definition for the load generator
//! (which reads it from a file) and the operator (which reads it from the API server).
//! The kube `CustomResource` made from [`LoadTestSpec`] (`LoadTestResource`, from which the
//! CRD is generated) is the `crd` feature's, the operator's: the file shape, [`LoadTest`], needs
//! no kube, so the load generator links none.

pub mod builtin;
pub mod cel;
pub mod cluster;
pub mod connection_limits;
pub mod conversation;
pub mod decimal;
pub mod env_var;
pub mod fanout;
pub mod file;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod json_path;
pub mod matching;
pub mod reconnect;
pub mod refused;
pub mod scenario;
pub mod server_connections;
pub mod shares;
pub mod spec;
pub mod status;
pub mod target_url;
pub mod template;
pub mod threshold;
pub mod ticker;
pub mod timing;
pub mod units;
pub mod validate;
pub mod yaml;

pub use cluster::*;
pub use connection_limits::ConnectionLimits;
pub use conversation::{Compression, Conversation};
pub use env_var::EnvVar;
pub use spec::*;
pub use status::*;
pub use target_url::TargetUrl;
pub use threshold::Threshold;
pub use ticker::ticker_args;
pub use units::{Dur, Percent};
pub use validate::FieldError;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const GROUP: &str = "wsload.dev";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "wsload.dev/v1alpha1";
pub const KIND: &str = "LoadTest";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Read(#[from] file::ReadError),
    #[error("{path}: not UTF-8 text: {source}")]
    NotText {
        path: String,
        #[source]
        source: std::string::FromUtf8Error,
    },
    #[error("{path}: {field}: {message}")]
    Parse {
        path: String,
        field: String,
        message: String,
    },
    #[error(
        "{path}: apiVersion {found:?} / kind {kind:?}: this file is not a LoadTest (want apiVersion: {API_VERSION}, kind: {KIND})"
    )]
    NotALoadTest {
        path: String,
        found: String,
        kind: String,
    },
    #[error("{path}: invalid LoadTest:\n{}", .errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid {
        path: String,
        errors: Vec<FieldError>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A LoadTest as written in a file: exactly what `kubectl apply -f` takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadTest {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: LoadTestSpec,
}

impl LoadTest {
    /// A LoadTest from the YAML of its spec alone (the lines under `spec:`, indented by two),
    /// as tests write them.
    pub fn from_spec_yaml(spec_yaml: &str, path: &str) -> Result<LoadTest> {
        let doc = format!("apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nspec:\n{spec_yaml}");
        LoadTest::from_yaml(&doc, path)
    }

    /// Parses and validates a LoadTest document; `path` names it in errors, which name the
    /// field (`spec.connections[1]: ...`) and, for a parse error, the line and column.
    pub fn from_yaml(text: &str, path: &str) -> Result<LoadTest> {
        let lt = yaml::parse::<LoadTest>(text).map_err(|e| Error::Parse {
            path: path.to_string(),
            field: e.field,
            message: e.message,
        })?;
        if lt.api_version != API_VERSION || lt.kind != KIND {
            return Err(Error::NotALoadTest {
                path: path.to_string(),
                found: lt.api_version,
                kind: lt.kind,
            });
        }
        let mut errors = validate::validate(&lt.spec).err().unwrap_or_default();
        if !lt.metadata.name.is_empty()
            && let Some(e) = validate::name(&lt.metadata.name)
        {
            errors.insert(0, e);
        }
        if !errors.is_empty() {
            return Err(Error::Invalid {
                path: path.to_string(),
                errors,
            });
        }
        Ok(lt)
    }

    /// Reads (at most [`file::MAX_LOADTEST_BYTES`]), parses and validates a LoadTest file.
    pub fn from_file(path: &str) -> Result<LoadTest> {
        let bytes = file::read_bounded(path, file::MAX_LOADTEST_BYTES, "a LoadTest file")?;
        let text = String::from_utf8(bytes).map_err(|source| Error::NotText {
            path: path.to_string(),
            source,
        })?;
        Self::from_yaml(&text, path)
    }

    /// The test's name, or `loadtest` when the file has none.
    pub fn name(&self) -> &str {
        if self.metadata.name.is_empty() {
            "loadtest"
        } else {
            &self.metadata.name
        }
    }
}

#[cfg(test)]
mod tests;
