//! Install-wide defaults (the chart's values): images from a private registry, and the node
//! pool shards and servers go to when a LoadTest says nothing. A LoadTest's own choice always
//! wins; only the built-in image name and an empty placement are replaced.

use wsload_spec::{DEFAULT_LOADGEN_IMAGE, DEFAULT_SERVER_IMAGE, LoadTestResource, Placement};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Defaults {
    pub loadgen_image: Option<String>,
    pub server_image: Option<String>,
    pub loadgen_placement: Option<Placement>,
    pub server_placement: Option<Placement>,
}

impl Defaults {
    /// The LoadTest as the operator runs it: the user's spec with the install's defaults
    /// filled in where the user left the built-in ones.
    pub fn apply(&self, lt: &LoadTestResource) -> LoadTestResource {
        let mut lt = lt.clone();
        let lg = &mut lt.spec.loadgen;
        fill(&mut lg.image, DEFAULT_LOADGEN_IMAGE, &self.loadgen_image);
        fill(
            &mut lg.placement,
            &Placement::default(),
            &self.loadgen_placement,
        );
        if let Some(server) = lt.spec.target.server.as_mut() {
            fill(&mut server.image, DEFAULT_SERVER_IMAGE, &self.server_image);
            fill(
                &mut server.placement,
                &Placement::default(),
                &self.server_placement,
            );
        }
        lt
    }
}

/// `value` becomes the install's choice when it is still the `builtin` one.
fn fill<T, B>(value: &mut T, builtin: &B, install: &Option<T>)
where
    T: Clone + PartialEq<B>,
    B: ?Sized,
{
    if let Some(chosen) = install
        && *value == *builtin
    {
        *value = chosen.clone();
    }
}

/// A placement default that is not a placement's JSON, with the form expected: the operator
/// refuses to start on it.
#[derive(Debug, thiserror::Error)]
#[error(
    "{var}: {source}; write JSON like {{\"nodeSelector\": {{\"pool\": \"loadgen\"}}, \"tolerations\": []}}"
)]
pub struct PlacementError {
    /// The variable (or flag) that gave it.
    pub var: String,
    #[source]
    pub source: serde_json::Error,
}

/// Parses a placement given as JSON (`{"nodeSelector": {...}, "tolerations": [...]}`), naming
/// the variable on error.
pub fn parse_placement(var: &str, json: &str) -> Result<Placement, PlacementError> {
    serde_json::from_str(json).map_err(|source| PlacementError {
        var: var.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::yaml_loadtest as lt;

    #[test]
    fn install_defaults_fill_only_what_the_loadtest_left_default() {
        let d = Defaults {
            loadgen_image: Some("registry.local/wsload/loadgen:1".into()),
            server_image: Some("registry.local/wsload/server:1".into()),
            loadgen_placement: Some(
                parse_placement("X", r#"{"nodeSelector": {"pool": "epyc"}}"#).expect("json"),
            ),
            server_placement: None,
        };
        let plain = d.apply(&lt("  target: {server: {}}\n  scenario: throughput\n"));
        assert_eq!(plain.spec.loadgen.image, "registry.local/wsload/loadgen:1");
        assert_eq!(
            plain.spec.target.server.as_ref().map(|s| s.image.as_str()),
            Some("registry.local/wsload/server:1")
        );
        assert_eq!(
            plain
                .spec
                .loadgen
                .placement
                .node_selector
                .get("pool")
                .map(String::as_str),
            Some("epyc")
        );
        let own = d.apply(&lt(
            "  target: {server: {image: my/server:2}}\n  scenario: throughput\n  loadgen: {image: my/lg:2, placement: {nodeSelector: {pool: mine}}}\n",
        ));
        assert_eq!(own.spec.loadgen.image, "my/lg:2");
        assert_eq!(
            own.spec.target.server.as_ref().map(|s| s.image.as_str()),
            Some("my/server:2")
        );
        assert_eq!(
            own.spec
                .loadgen
                .placement
                .node_selector
                .get("pool")
                .map(String::as_str),
            Some("mine")
        );
    }

    #[test]
    fn a_placement_that_is_not_json_names_its_variable_and_the_form_expected() {
        let e = parse_placement("WSLOAD_X", "{nope")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "WSLOAD_X: key must be a string at line 1 column 2; write JSON like {\"nodeSelector\": {\"pool\": \"loadgen\"}, \"tolerations\": []}"
            )
        );
    }
}
