//! Specs for tests, here and in the crates that plan and conduct runs (feature `fixtures`):
//! one helper where each test module wrote its own.

use crate::{LoadTest, LoadTestSpec};

/// The spec whose body (the lines under `spec:`, indented by two) is `spec_yaml`.
///
/// # Panics
///
/// When the spec is invalid: the test's own input is wrong.
pub fn spec(spec_yaml: &str) -> LoadTestSpec {
    LoadTest::from_spec_yaml(spec_yaml, "t")
        .expect("a valid spec")
        .spec
}
