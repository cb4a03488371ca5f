//! The CRD, generated from the spec crate's types: `wsload-operator crd` prints it and
//! `crds/loadtest.yaml` is its canonical copy.

use crate::{Error, Result};

/// The LoadTest CRD as YAML.
pub fn yaml() -> Result<String> {
    Err(Error::Serialize("the CRD is not generated yet".into()))
}
