//! A namespace conducted by the operator in this process, with a fake fleet of shard pods
//! (fake_shards.rs) in place of a kubelet: the setting of the tests of how the operator
//! conducts shards (scale.rs, control_plane.rs).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use wsload_operator::reconcile::Config;
use wsload_spec::LoadTestResource;

use super::Cluster;
use super::fake_shards::{FakeFleet, FleetOpts};

pub struct FleetEnv {
    pub cluster: &'static Cluster,
    pub client: kube::Client,
    pub ns: String,
    pub lts: Api<LoadTestResource>,
    pub config_maps: Api<ConfigMap>,
    pub fleet: FakeFleet,
    config: Config,
    operator: tokio::task::JoinHandle<()>,
}

impl Drop for FleetEnv {
    fn drop(&mut self) {
        self.operator.abort();
    }
}

fn operator(client: &kube::Client, ns: &str, config: &Config) -> tokio::task::JoinHandle<()> {
    let addr = "127.0.0.1:0".parse().expect("addr");
    super::run_operator(client.clone(), ns, None, addr, config.clone())
}

impl FleetEnv {
    /// A new namespace named from `prefix` in `cluster`, its fleet, and an operator scoped to
    /// it looking at running tests every `poll`.
    pub async fn start(
        cluster: &'static Cluster,
        prefix: &str,
        fleet: FleetOpts,
        poll: Duration,
    ) -> FleetEnv {
        super::test_logs();
        cluster.apply_crds().await;
        let ns = cluster.namespace(prefix).await;
        let client = cluster.client().await;
        let fleet = FakeFleet::start(client.clone(), &ns, fleet).await;
        let config = Config {
            poll,
            ..Config::default()
        };
        let operator = operator(&client, &ns, &config);
        FleetEnv {
            cluster,
            lts: Api::namespaced(client.clone(), &ns),
            config_maps: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            fleet,
            config,
            operator,
        }
    }

    /// Stops the operator: once this returns, it sends nothing more (its requests in flight
    /// are dropped with it).
    pub async fn stop_operator(&mut self) {
        self.operator.abort();
        let _ = (&mut self.operator).await;
    }

    /// A new operator process, as a restarted one: nothing in memory, only what status holds.
    pub fn start_operator(&mut self) {
        self.operator.abort();
        self.operator = operator(&self.client, &self.ns, &self.config);
    }

    /// Creates the LoadTest `name` with `spec`, validated first.
    pub async fn create(&self, name: &str, spec: &str) {
        super::loadtests::create_valid(&self.lts, name, spec).await;
    }
}
