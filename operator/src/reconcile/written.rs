//! What this operator last wrote to each test's status, and the resourceVersion that write
//! made. A reconcile may be handed an object whose status is not that write, for two reasons:
//!
//! - the controller's cache lags (the write's watch event not in yet). Acting on the older
//!   status would take a step again or undo one: a cell recorded and its shards told to end,
//!   then seen as unrecorded and the run collected without it. Such a reconcile reads the
//!   object from the API server instead.
//! - another writer changed status: a person's `kubectl patch --subresource=status`, a
//!   replica that has not yet noticed it lost the lease. Status is this operator's record of
//!   the run (the cells released, every shard's state), so believing the change would end a
//!   run uncollected, order a cell again at another instant, or lose one. While it holds its
//!   last write, the operator decides from that and writes its own fields back; fields it
//!   does not set (another writer's condition) are left as they are (docs/operator.md,
//!   "Faults of the control plane").

use super::Context;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use wsload_spec::LoadTestResource;
use wsload_spec::status::LoadTestStatus;

/// This operator's last status write to one test.
#[derive(Debug, Clone)]
pub struct Last {
    version: String,
    status: Option<LoadTestStatus>,
}

/// Last write, per LoadTest uid.
pub type Written = Mutex<HashMap<String, Last>>;

fn lock(m: &Written) -> MutexGuard<'_, HashMap<String, Last>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The object a reconcile works on.
pub(super) struct Fresh {
    pub(super) lt: Arc<LoadTestResource>,
    /// Another writer changed status since this operator's last write: `lt` carries that
    /// write's status instead, and it must be written back even if the step changes nothing.
    pub(super) restore: bool,
}

/// Whether a cached object may predate this operator's own last write. Versions are opaque,
/// so any other one is suspect; the read that follows settles it.
fn suspect(last_written: Option<&str>, cached: Option<&str>) -> bool {
    last_written.is_some_and(|w| cached != Some(w))
}

/// The object to reconcile: the cached one when it holds this operator's last write (or none
/// was made), else the API server's, its status this operator's last write when another
/// writer changed it.
pub(super) async fn fresh(
    ctx: &Context,
    api: &Api<LoadTestResource>,
    cached: Arc<LoadTestResource>,
) -> kube::Result<Fresh> {
    let uid = cached.uid().unwrap_or_default();
    let known = lock(&ctx.written).get(&uid).cloned();
    let unchanged = Fresh {
        lt: cached.clone(),
        restore: false,
    };
    let Some(known) = known else {
        return Ok(unchanged);
    };
    if !suspect(Some(&known.version), cached.resource_version().as_deref()) {
        return Ok(unchanged);
    }
    let mut read = api.get(&cached.name_any()).await?;
    if read.status == known.status {
        // Newer than our write (a spec or metadata change) or equal to it, and the cache
        // will reach this version too.
        remember(ctx, &uid, &read);
        return Ok(Fresh {
            lt: Arc::new(read),
            restore: false,
        });
    }
    tracing::warn!("status changed by another writer; writing back this operator's own");
    read.status = known.status;
    Ok(Fresh {
        lt: Arc::new(read),
        restore: true,
    })
}

/// The top-level status fields `stored` holds that `ours` leaves unset, conditions aside:
/// set by another writer (server-side apply cannot own a field it leaves out, so a forced
/// apply keeps them). Another writer's conditions are its own and stay.
fn foreign_fields(ours: &LoadTestStatus, stored: Option<&LoadTestStatus>) -> Vec<String> {
    let keys = |st: Option<&LoadTestStatus>| -> Vec<String> {
        match st.map(serde_json::to_value) {
            Some(Ok(serde_json::Value::Object(m))) => m.keys().cloned().collect(),
            _ => Vec::new(),
        }
    };
    let ours = keys(Some(ours));
    keys(stored)
        .into_iter()
        .filter(|k| k != "conditions" && !ours.contains(k))
        .collect()
}

/// After writing back its status over another writer's: removes the fields that writer set
/// where this operator sets none. Returns the object as it is then.
pub(super) async fn clear_foreign(
    api: &Api<LoadTestResource>,
    ours: &LoadTestStatus,
    stored: LoadTestResource,
) -> kube::Result<LoadTestResource> {
    let fields = foreign_fields(ours, stored.status.as_ref());
    if fields.is_empty() {
        return Ok(stored);
    }
    let nulls: serde_json::Map<String, serde_json::Value> = fields
        .into_iter()
        .map(|k| (k, serde_json::Value::Null))
        .collect();
    // A merge patch of nulls only: it removes, and so owns, nothing.
    let patch = serde_json::json!({ "status": nulls });
    api.patch_status(
        &stored.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
}

/// Keeps the version and status a status write produced.
pub(super) fn remember(ctx: &Context, uid: &str, written: &LoadTestResource) {
    if let Some(version) = written.resource_version() {
        let last = Last {
            version,
            status: written.status.clone(),
        };
        lock(&ctx.written).insert(uid.to_owned(), last);
    }
}

pub(super) fn forget(ctx: &Context, uid: &str) {
    lock(&ctx.written).remove(uid);
}

#[cfg(test)]
mod tests {
    use super::{foreign_fields, suspect};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use wsload_spec::status::{LoadTestStatus, Phase};

    #[test]
    fn only_a_version_other_than_our_last_write_is_suspect() {
        assert!(
            !suspect(None, Some("7")),
            "nothing written: the cache is all there is"
        );
        assert!(!suspect(Some("7"), Some("7")));
        assert!(suspect(Some("7"), Some("6")));
        assert!(suspect(Some("7"), Some("8")));
        assert!(suspect(Some("7"), None));
    }

    #[test]
    fn fields_another_writer_set_where_we_set_none_are_foreign_but_conditions_are_not() {
        let ours = LoadTestStatus {
            phase: Some(Phase::Running),
            message: Some("cell 1".into()),
            ..Default::default()
        };
        let mut stored = ours.clone();
        stored.reason = Some("StoppedByHand".into());
        stored.conditions.push(Condition {
            type_: "ExternalCheck".into(),
            status: "True".into(),
            reason: "Checked".into(),
            message: String::new(),
            last_transition_time: Time(Timestamp::now()),
            observed_generation: None,
        });
        assert_eq!(foreign_fields(&ours, Some(&stored)), ["reason"]);
        assert!(foreign_fields(&ours, Some(&ours)).is_empty());
        assert!(foreign_fields(&ours, None).is_empty());
    }
}
