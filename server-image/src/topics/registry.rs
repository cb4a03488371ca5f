//! Who subscribes to what, and the fan-out of one publish to a topic's subscribers.

use super::counters::{Counters, Source};
use super::outbox::{Delivery, Outbox};
use crate::config::Hooks;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_tungstenite::tungstenite::Message;

/// One subscription: where its deliveries go.
struct Entry {
    conn: u64,
    tx: mpsc::Sender<Delivery>,
    /// The topic, when the test hooks act on this subscription (the first of its topic).
    hooked: Option<Arc<str>>,
}

#[derive(Default)]
struct Table {
    /// Only topics with at least one subscriber: a topic's entry goes with its last one.
    topics: HashMap<Arc<str>, Vec<Entry>>,
    subscriptions: u64,
}

/// The topics of the whole server, shared by the pubsub and wse profiles and the ticker.
pub struct Registry {
    table: RwLock<Table>,
    next_conn: AtomicU64,
    queue: usize,
    hooks: Hooks,
    pub counters: Counters,
}

impl Registry {
    /// `queue`: deliveries each subscriber connection may have waiting.
    pub fn new(queue: usize, hooks: Hooks) -> Self {
        Registry {
            table: RwLock::new(Table::default()),
            next_conn: AtomicU64::new(0),
            queue: queue.max(1),
            hooks,
            counters: Counters::new(hooks.any()),
        }
    }

    /// A new connection's subscriptions (for its profile handler) and its queue of deliveries
    /// (for its session, which writes them).
    pub fn connect(&self) -> (Subscriber<'_>, Outbox) {
        let (tx, rx) = mpsc::channel(self.queue);
        let subscriber = Subscriber {
            registry: self,
            conn: self.next_conn.fetch_add(1, Relaxed),
            tx,
            topics: HashSet::new(),
        };
        (subscriber, Outbox::new(rx, self.hooks))
    }

    /// A poisoned lock only means a panic elsewhere; the table itself is always consistent.
    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `msg` (one shared buffer: cloning a `Message` clones a reference) for every
    /// subscriber `topic` has now, never waiting: a full queue drops that delivery. Returns how
    /// many subscribers there were.
    pub fn publish(&self, topic: &str, msg: &Message, source: Source) -> u64 {
        let table = self.table.read().unwrap_or_else(PoisonError::into_inner);
        let Some(entries) = table.topics.get(topic) else {
            self.counters.published(source, 0, 0, 0);
            return 0;
        };
        let (mut slow, mut closed) = (0, 0);
        for e in entries {
            let delivery = Delivery {
                msg: msg.clone(),
                hooked: e.hooked.clone(),
            };
            match e.tx.try_send(delivery) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => slow += 1,
                Err(TrySendError::Closed(_)) => closed += 1,
            }
        }
        let subscribers = entries.len() as u64;
        self.counters.published(source, subscribers, slow, closed);
        subscribers
    }

    fn set_gauges(&self, table: &Table) {
        self.counters
            .set_subscriptions(table.subscriptions, table.topics.len() as u64);
    }
}

/// One connection's subscriptions; dropping it unsubscribes from every topic.
pub struct Subscriber<'a> {
    registry: &'a Registry,
    conn: u64,
    tx: mpsc::Sender<Delivery>,
    topics: HashSet<Arc<str>>,
}

impl<'a> Subscriber<'a> {
    pub fn registry(&self) -> &'a Registry {
        self.registry
    }

    /// Subscribes to `topic`; subscribing twice is one subscription.
    pub fn subscribe(&mut self, topic: &str) {
        if self.topics.contains(topic) {
            return;
        }
        let name: Arc<str> = Arc::from(topic);
        let mut table = self.registry.write();
        let entries = table.topics.entry(name.clone()).or_default();
        let hooked = (entries.is_empty() && self.registry.hooks.any()).then(|| name.clone());
        entries.push(Entry {
            conn: self.conn,
            tx: self.tx.clone(),
            hooked,
        });
        table.subscriptions += 1;
        self.registry.set_gauges(&table);
        self.topics.insert(name);
    }

    /// Unsubscribes from `topic`; returns whether it was subscribed.
    pub fn unsubscribe(&mut self, topic: &str) -> bool {
        if !self.topics.remove(topic) {
            return false;
        }
        let mut table = self.registry.write();
        remove(&mut table, topic, self.conn);
        self.registry.set_gauges(&table);
        true
    }
}

fn remove(table: &mut Table, topic: &str, conn: u64) {
    let Some(entries) = table.topics.get_mut(topic) else {
        return;
    };
    if let Some(i) = entries.iter().position(|e| e.conn == conn) {
        entries.swap_remove(i);
        table.subscriptions -= 1;
    }
    if entries.is_empty() {
        table.topics.remove(topic);
    }
}

impl Drop for Subscriber<'_> {
    fn drop(&mut self) {
        if self.topics.is_empty() {
            return;
        }
        let mut table = self.registry.write();
        for topic in self.topics.drain() {
            remove(&mut table, &topic, self.conn);
        }
        self.registry.set_gauges(&table);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn msg(i: u64) -> Message {
        Message::Text(format!("m{i}").into())
    }

    /// Every owed delivery ends as delivered, dropped for a full queue, or lost to a close.
    #[test]
    fn every_delivery_owed_is_accounted_for() {
        let registry = Registry::new(2, Hooks::default());
        let (mut fast, mut fast_box) = registry.connect();
        let (mut slow, mut slow_box) = registry.connect();
        let (mut gone, mut gone_box) = registry.connect();
        for s in [&mut fast, &mut slow, &mut gone] {
            s.subscribe("a");
        }
        fast.subscribe("a");
        assert_eq!(registry.counters.outcomes(), (0, 0, 0, 0));
        gone_box.close(&registry.counters);
        let mut out = Vec::new();
        for i in 0..4 {
            assert_eq!(registry.publish("a", &msg(i), Source::Client), 3);
            // The fast subscriber's session writes each at once.
            if let Some(d) = fast_box.recv().now_or_never().flatten() {
                let n = fast_box.take(d, 8, &mut out, &registry.counters);
                registry.counters.delivered(n);
            }
        }
        assert_eq!(out, (0..4).map(msg).collect::<Vec<_>>());
        // slow: 2 queued, 2 dropped; gone: 4 lost.
        assert_eq!(registry.counters.outcomes(), (12, 4, 2, 4));
        slow_box.close(&registry.counters);
        assert_eq!(registry.counters.outcomes(), (12, 4, 2, 6));
        drop(gone);
        drop(slow);
        assert_eq!(registry.publish("a", &msg(9), Source::Ticker), 1);
        fast.unsubscribe("a");
        assert_eq!(registry.publish("a", &msg(10), Source::Ticker), 0);
        assert!(registry.write().topics.is_empty());
    }
}
