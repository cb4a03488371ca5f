//! LoadTests as the operator's tests write them, and what they read back from the results.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use wsload_spec::LoadTestResource;

/// The LoadTest `name` with `spec` (YAML lines indented two spaces), not validated: tests of
/// the operator's own judgement create specs it must refuse.
pub fn loadtest(name: &str, spec: &str) -> LoadTestResource {
    let doc = format!(
        "apiVersion: wsload.dev/v1alpha1\nkind: LoadTest\nmetadata:\n  name: {name}\nspec:\n{spec}"
    );
    wsload_spec::yaml::parse(&doc).unwrap_or_else(|e| panic!("LoadTest {name}: {e}\n{doc}"))
}

/// The LoadTest `name`, checked first as `wsload validate` would, so that a test whose own
/// spec is wrong says so instead of failing later as the operator's fault.
pub fn valid_loadtest(name: &str, spec: &str) -> LoadTestResource {
    wsload_spec::LoadTest::from_spec_yaml(spec, name)
        .unwrap_or_else(|err| panic!("the test's own spec for {name} is invalid: {err}"));
    loadtest(name, spec)
}

/// Creates [`valid_loadtest`] in `lts`'s namespace.
pub async fn create_valid(lts: &Api<LoadTestResource>, name: &str, spec: &str) {
    lts.create(&PostParams::default(), &valid_loadtest(name, spec))
        .await
        .unwrap_or_else(|e| panic!("create LoadTest {name}: {e}"));
}

/// `binaryData[key]` of a result ConfigMap; panics naming the keys it has instead.
pub fn binary(cm: &ConfigMap, key: &str) -> Vec<u8> {
    cm.binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_else(|| {
            panic!(
                "{} has no binaryData[{key}] (data keys {:?}, binaryData keys {:?})",
                cm.metadata.name.as_deref().unwrap_or("?"),
                cm.data.as_ref().map(|d| d.keys().collect::<Vec<_>>()),
                cm.binary_data
                    .as_ref()
                    .map(|d| d.keys().collect::<Vec<_>>())
            )
        })
}
