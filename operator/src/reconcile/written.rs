//! The resourceVersion of each test's last status write by this operator. The controller's
//! cache may hand a reconcile the object from before that write (its watch event not in yet).
//! Acting on the older status would take a step again or undo one: a cell recorded and its
//! shards told to end, then seen as unrecorded and the run collected without it. Such a
//! reconcile reads the object from the API server instead.

use super::Context;
use kube::ResourceExt;
use kube::api::Api;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use wsload_spec::LoadTestResource;

/// Last written resourceVersion, per LoadTest uid.
pub type Written = Mutex<HashMap<String, String>>;

fn lock(m: &Written) -> MutexGuard<'_, HashMap<String, String>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a cached object may predate this operator's own last write. Versions are opaque,
/// so any other one is suspect; the read that follows settles it.
fn suspect(last_written: Option<&str>, cached: Option<&str>) -> bool {
    last_written.is_some_and(|w| cached != Some(w))
}

/// The object to reconcile: the cached one when it holds this operator's last write (or none
/// was made), else the API server's.
pub(super) async fn fresh(
    ctx: &Context,
    api: &Api<LoadTestResource>,
    cached: Arc<LoadTestResource>,
) -> kube::Result<Arc<LoadTestResource>> {
    let uid = cached.uid().unwrap_or_default();
    let known = lock(&ctx.written).get(&uid).cloned();
    if !suspect(known.as_deref(), cached.resource_version().as_deref()) {
        return Ok(cached);
    }
    let read = api.get(&cached.name_any()).await?;
    // Newer than our write or equal to it, and the cache will reach this version too.
    remember(ctx, &uid, &read);
    Ok(Arc::new(read))
}

/// Keeps the version a status write produced.
pub(super) fn remember(ctx: &Context, uid: &str, written: &LoadTestResource) {
    if let Some(v) = written.resource_version() {
        lock(&ctx.written).insert(uid.to_owned(), v);
    }
}

pub(super) fn forget(ctx: &Context, uid: &str) {
    lock(&ctx.written).remove(uid);
}

#[cfg(test)]
mod tests {
    use super::suspect;

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
}
