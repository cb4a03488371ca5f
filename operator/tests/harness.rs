//! Proves the test harness in `support/`: the shared control plane answers, namespaces are
//! unique, kubectl talks to the same cluster.

mod support;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

#[tokio::test]
async fn cluster_serves_namespaces_to_client_and_kubectl() {
    let cluster = support::shared().await;
    let a = cluster.namespace("harness").await;
    let b = cluster.namespace("harness").await;
    assert_ne!(a, b, "namespaces must be unique");
    let ns = Api::<Namespace>::all(cluster.client().await)
        .get(&a)
        .await
        .expect("get the namespace just created");
    assert_eq!(ns.metadata.name.as_deref(), Some(a.as_str()));
    let out = cluster.kubectl_ok(&["get", "namespace", &b, "-o", "name"]);
    assert_eq!(out.trim(), format!("namespace/{b}"));
}

#[tokio::test]
async fn tests_in_parallel_share_one_control_plane() {
    let cluster = support::shared().await;
    let again = support::shared().await;
    assert!(std::ptr::eq(cluster, again));
    assert_eq!(
        cluster.kubectl_ok(&["get", "--raw", "/readyz"]).trim(),
        "ok"
    );
}
