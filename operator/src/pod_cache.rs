//! The tests' pods as the controller's own watch holds them, and the one wait every reconcile
//! makes for its first full listing.
//!
//! kube-runtime's `Store::wait_until_ready` wakes only one of several concurrent waiters: it
//! polls a single oneshot receiver, which keeps the waker of whoever polled it last. The
//! controller runs its reconciles as futures of one task, each with its own waker, so when a
//! restarted operator reconciles several LoadTests before its pod listing arrives, all but one
//! of them slept forever (a test stuck in Running, found by the cluster smoke test). Here one
//! caller waits on the store and the others on a `tokio::sync::OnceCell`, which wakes them all.

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use std::sync::Arc;
use tokio::sync::OnceCell;

pub struct PodCache {
    store: Store<Pod>,
    ready: OnceCell<()>,
}

/// The watch feeding the cache ended before its first listing.
#[derive(Debug, thiserror::Error)]
#[error("the pod watch stopped before its first listing")]
pub struct Dropped;

impl PodCache {
    pub fn new(store: Store<Pod>) -> PodCache {
        PodCache {
            store,
            ready: OnceCell::new(),
        }
    }

    /// Returns once the cache holds a complete listing (at once ever after), so a pod missing
    /// from it is gone, not unread.
    pub async fn ready(&self) -> Result<(), Dropped> {
        self.ready
            .get_or_try_init(|| async { self.store.wait_until_ready().await.map_err(|_| Dropped) })
            .await
            .map(|_| ())
    }

    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.store.state()
    }

    /// The store itself, for a task that reads it apart from any reconcile.
    pub fn store(&self) -> Store<Pod> {
        self.store.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use futures_util::stream::FuturesUnordered;
    use kube::runtime::{reflector, watcher};
    use std::time::Duration;

    /// Reconciles as the controller runs them: futures of one task, each with its own waker.
    async fn concurrent_waiters(n: usize, wait: impl AsyncFn() -> bool) -> usize {
        let mut waiters: FuturesUnordered<_> = (0..n).map(|_| wait()).collect();
        let mut woken = 0;
        while let Ok(Some(ok)) = tokio::time::timeout(Duration::from_secs(2), waiters.next()).await
        {
            assert!(ok);
            woken += 1;
        }
        woken
    }

    fn listed(writer: &mut reflector::store::Writer<Pod>) {
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    #[tokio::test]
    async fn every_concurrent_waiter_wakes_when_the_first_listing_arrives() {
        let (store, mut writer) = reflector::store();
        let cache = PodCache::new(store);
        let wait = async || cache.ready().await.is_ok();
        let (woken, ()) = tokio::join!(concurrent_waiters(5, wait), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            listed(&mut writer);
        });
        assert_eq!(woken, 5);
        // And later callers pass at once.
        assert!(cache.ready().await.is_ok());
    }

    /// Why this module exists: the store's own wait, used the same way, leaves waiters asleep.
    /// Should kube-runtime fix it, this test says so and the cell can go.
    #[tokio::test]
    async fn the_stores_own_wait_wakes_only_one_of_them() {
        let (store, mut writer) = reflector::store::<Pod>();
        let wait = async || store.wait_until_ready().await.is_ok();
        let (woken, ()) = tokio::join!(concurrent_waiters(5, wait), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            listed(&mut writer);
        });
        assert!(woken < 5, "all {woken} woke: kube-runtime's wait is fixed");
    }

    #[tokio::test]
    async fn a_watch_that_ends_unlisted_is_an_error_not_a_hang() {
        let (store, writer) = reflector::store::<Pod>();
        let cache = PodCache::new(store);
        drop(writer);
        assert!(cache.ready().await.is_err());
    }
}
