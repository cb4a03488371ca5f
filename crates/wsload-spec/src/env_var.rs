//! An environment variable the spec gives a process it starts (the managed server, the load
//! generator): a leaf both the portable spec and its cluster-only parts hold.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An environment variable: `name` and its `value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}
