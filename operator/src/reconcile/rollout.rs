//! A `restart: {deployment: NAME}` disruption: the user's own Deployment, the one behind
//! `target.url`, rolled as `kubectl rollout restart` rolls it (its pod template annotated
//! with the instant), paced by its own strategy; done once the Deployment has observed the
//! change and every replica is updated and available. The operator may patch Deployments only
//! in the namespaces the chart's `rbac.rollDeployments` names: elsewhere the roll fails the
//! test (`DisruptionFailed`), its figures kept, with the value to set.

use super::disrupt::clock_millis;
use super::reason::Reason;
use super::view::{View, humantime};
use crate::Result;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use std::time::Duration;
use wsload_spec::status::DisruptionStatus;

/// The pod template annotation whose change rolls the Deployment.
pub const RESTARTED_AT: &str = "wsload.dev/restartedAt";

/// How soon to look again while the roll goes on.
const LOOK: Duration = Duration::from_millis(500);

impl View<'_> {
    /// Rolls Deployment `name` for disruption `index`, `late` ms after its instant.
    pub(super) async fn begin_roll(&mut self, index: u32, name: &str, late: u64) -> Result<()> {
        let began = clock_millis();
        let mut entry = DisruptionStatus {
            index,
            began_at_millis: began,
            ..Default::default()
        };
        let stamp = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = serde_json::json!({
            "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}
        });
        let ns = self.lt.metadata.namespace.clone().unwrap_or_default();
        let failed = match self
            .apis
            .deployments
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(d) => {
                entry.generation = d.metadata.generation;
                entry.message = format!(
                    "deployment {name} rolled ({RESTARTED_AT} set on its pod template) {late} ms after the instant"
                );
                None
            }
            Err(kube::Error::Api(s)) if s.code == 403 => Some(format!(
                "spec.disruptions[{index}].restart.deployment: the operator may not patch Deployments in namespace {ns}; install the chart with rbac.rollDeployments: [{ns}] (a Role there lets it get and patch Deployments, nothing else)"
            )),
            Err(kube::Error::Api(s)) if s.code == 404 => Some(format!(
                "spec.disruptions[{index}].restart.deployment: no Deployment {name} in namespace {ns}; name the Deployment that serves target.url, in the LoadTest's namespace"
            )),
            Err(e) => return Err(e.into()),
        };
        tracing::info!(
            disruption = index,
            deployment = name,
            late_ms = late,
            rolled = failed.is_none(),
            "disruption began"
        );
        if let Some(why) = &failed {
            entry.ended_at_millis = Some(began);
            entry.message = format!("deployment {name} not rolled: {why}");
        }
        if let Some(c) = self.st.cells.last_mut() {
            c.disruptions.push(entry);
        }
        if let Some(why) = failed {
            // The cell goes on and its figures are kept; the test fails: it is not the one
            // asked for.
            self.mark_failed(Reason::DisruptionFailed, why);
        }
        Ok(())
    }

    /// Whether Deployment `name`'s roll for `e` is done; how soon to look again if not.
    pub(super) async fn carry_on_roll(
        &mut self,
        e: DisruptionStatus,
        name: &str,
        now: u64,
    ) -> Result<Option<Duration>> {
        let d = match self.apis.deployments.get(name).await {
            Ok(d) => d,
            // Gone meanwhile: nothing left to wait for.
            Err(kube::Error::Api(s)) if s.code == 404 => {
                if let Some(entry) = self.entry_mut(e.index) {
                    entry.ended_at_millis = Some(now);
                    entry
                        .message
                        .push_str("; the Deployment was deleted during its roll");
                }
                return Ok(None);
            }
            Err(err) => return Err(err.into()),
        };
        if !rolled_out(&d, e.generation) {
            return Ok(Some(LOOK));
        }
        let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        if let Some(entry) = self.entry_mut(e.index) {
            entry.ended_at_millis = Some(now);
            entry.message.push_str(&format!(
                "; its {replicas} replicas updated and available {} after",
                humantime(Duration::from_millis(now.saturating_sub(e.began_at_millis)))
            ));
        }
        tracing::info!(
            disruption = e.index,
            deployment = name,
            "disruption: rollout done"
        );
        Ok(None)
    }
}

/// Whether `d` has rolled out the template of `generation`: observed it, every replica
/// updated and available, and no replica of an older template left.
pub fn rolled_out(d: &Deployment, generation: Option<i64>) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(s) = &d.status else {
        return false;
    };
    s.observed_generation >= generation
        && s.updated_replicas.unwrap_or(0) >= want
        && s.available_replicas.unwrap_or(0) >= want
        && s.replicas.unwrap_or(0) <= want
}

#[cfg(test)]
mod tests {
    use super::rolled_out;
    use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};

    fn deployment(replicas: i32, status: DeploymentStatus) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            status: Some(status),
            ..Default::default()
        }
    }

    #[test]
    fn a_rollout_is_done_once_the_new_template_is_observed_updated_and_available_alone() {
        let status =
            |observed: i64, replicas: i32, updated: i32, available: i32| DeploymentStatus {
                observed_generation: Some(observed),
                replicas: Some(replicas),
                updated_replicas: Some(updated),
                available_replicas: Some(available),
                ..Default::default()
            };
        assert!(rolled_out(&deployment(3, status(5, 3, 3, 3)), Some(5)));
        // The controller has not seen the patch yet: its figures are the old template's.
        assert!(!rolled_out(&deployment(3, status(4, 3, 3, 3)), Some(5)));
        // Updated but not yet available, or an old replica still up beside the new ones.
        assert!(!rolled_out(&deployment(3, status(5, 3, 3, 2)), Some(5)));
        assert!(!rolled_out(&deployment(3, status(5, 4, 3, 3)), Some(5)));
        assert!(!rolled_out(&deployment(3, status(5, 3, 2, 3)), Some(5)));
        assert!(!rolled_out(&Deployment::default(), Some(1)));
    }
}
