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
    /// Rolls Deployment `name` for disruption `index`, due at `at` (Unix ms) and begun `late`
    /// ms after. The annotation's value is that instant, the same however often this runs
    /// (an operator restarted before status was written): patched again, it rolls nothing
    /// more.
    pub(super) async fn begin_roll(
        &mut self,
        index: u32,
        name: &str,
        at: u64,
        late: u64,
    ) -> Result<()> {
        let began = clock_millis();
        let mut entry = DisruptionStatus {
            index,
            began_at_millis: began,
            ..Default::default()
        };
        let ns = self.lt.metadata.namespace.clone().unwrap_or_default();
        let field = format!("spec.disruptions[{index}].restart.deployment");
        let failed = match self.patch_template(name, at).await {
            Ok(d) if d.spec.as_ref().and_then(|s| s.paused) == Some(true) => Some(format!(
                "{field}: deployment {name} is paused (spec.paused), so nothing rolls; resume it (kubectl rollout resume deployment/{name}) before the test"
            )),
            Ok(d) => {
                entry.generation = d.metadata.generation;
                entry.message = format!(
                    "deployment {name} rolled ({RESTARTED_AT} set on its pod template) {late} ms after the instant"
                );
                None
            }
            Err(kube::Error::Api(s)) if s.code == 403 => Some(format!(
                "{field}: the operator may not patch Deployments in namespace {ns} (the API server: {}); install the chart with rbac.rollDeployments: [{ns}] (a Role there lets it get and patch Deployments, nothing else)",
                s.message
            )),
            Err(kube::Error::Api(s)) if s.code == 404 => Some(format!(
                "{field}: no Deployment {name} in namespace {ns}; name the Deployment that serves target.url, in the LoadTest's namespace"
            )),
            // Refused for another reason (an admission webhook, a conflict): said as the API
            // server said it, never tried again and again unseen.
            Err(kube::Error::Api(s)) => Some(format!(
                "{field}: deployment {name} could not be patched: {} ({})",
                s.message, s.code
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

    /// Sets the roll's annotation, at `at` (Unix ms), on Deployment `name`'s pod template.
    async fn patch_template(&self, name: &str, at: u64) -> kube::Result<Deployment> {
        let stamp = k8s_openapi::jiff::Timestamp::from_millisecond(i64::try_from(at).unwrap_or(0))
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
            .to_string();
        let patch = serde_json::json!({
            "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}
        });
        self.apis
            .deployments
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
    }

    /// Whether the last cell has a Deployment roll not yet done.
    pub(super) fn rolling(&self) -> bool {
        let Some(cell) = self.st.cells.last() else {
            return false;
        };
        cell.disruptions
            .iter()
            .any(|e| e.ended_at_millis.is_none() && self.rolled(e.index).is_some())
    }

    /// The Deployment disruption `index` rolls, if it rolls one.
    fn rolled(&self, index: u32) -> Option<String> {
        self.lt
            .spec
            .disruptions
            .get(index as usize)?
            .restart
            .as_ref()?
            .deployment
            .clone()
    }

    /// Carries on the last cell's rolls not yet done, once it is over; how soon to look
    /// again while one is not.
    pub(super) async fn rolls_left(&mut self) -> Result<Option<Duration>> {
        let Some(cell) = self.st.cells.last() else {
            return Ok(None);
        };
        let open: Vec<DisruptionStatus> = cell
            .disruptions
            .iter()
            .filter(|e| e.ended_at_millis.is_none())
            .cloned()
            .collect();
        let mut soon = None;
        for e in open {
            let Some(name) = self.rolled(e.index) else {
                continue;
            };
            if let Some(next) = self.carry_on_roll(e, &name, clock_millis()).await? {
                soon = Some(next);
            }
        }
        Ok(soon)
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
        if stalled(&d) {
            let why = format!(
                "spec.disruptions[{}].restart.deployment: deployment {name} did not roll out within its progressDeadlineSeconds (condition Progressing: ProgressDeadlineExceeded)",
                e.index
            );
            if let Some(entry) = self.entry_mut(e.index) {
                entry.ended_at_millis = Some(now);
                entry
                    .message
                    .push_str("; its rollout stalled (ProgressDeadlineExceeded)");
            }
            self.mark_failed(Reason::DisruptionFailed, why);
            return Ok(None);
        }
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

/// Whether the Deployment controller gave up on the rollout (its progress deadline passed).
fn stalled(d: &Deployment) -> bool {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            })
        })
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
    use k8s_openapi::api::apps::v1::{
        Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus,
    };

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

    #[test]
    fn a_rollout_past_its_progress_deadline_has_stalled() {
        let with = |reason: &str| {
            deployment(
                2,
                DeploymentStatus {
                    conditions: Some(vec![DeploymentCondition {
                        type_: "Progressing".into(),
                        status: "False".into(),
                        reason: Some(reason.into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
            )
        };
        assert!(super::stalled(&with("ProgressDeadlineExceeded")));
        assert!(!super::stalled(&with("ReplicaSetUpdated")));
        assert!(!super::stalled(&Deployment::default()));
    }
}
