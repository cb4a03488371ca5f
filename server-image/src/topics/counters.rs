//! The exact counters of topics, kept like `crate::stats`: per-thread cache-line slots summed at
//! scrape time.
//!
//! Where each is counted:
//! - `published{source}` and `fanout` (the subscribers the topic had at that instant, under the
//!   registry's read lock): by `Registry::publish`, once per publish.
//! - `dropped{reason="slow_consumer"}`: by `Registry::publish`, for each subscriber whose queue
//!   was full; `dropped{reason="closed"}` there too, for a queue already closed.
//! - `delivered`: by the subscriber's session (`session::deliver`) once a batch is flushed to
//!   the socket; a failed flush counts the batch as `dropped{reason="closed"}` instead.
//! - `dropped{reason="closed"}` also by `Outbox::close` when the connection ends: what was
//!   still queued, or held by the swap hook.
//!
//! So every delivery owed ends in exactly one of `delivered`, `dropped{slow_consumer}` or
//! `dropped{closed}`, and once no delivery waits in a queue,
//! `fanout = delivered + dropped{slow_consumer} + dropped{closed}`; before that, the
//! difference is what waits. The one exception is on purpose: `--test-drop-every` counts as
//! delivered what it never sends.

use crate::stats::{SLOTS, my_slot};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use wsload_http::family;
use wsload_http::prometheus_client::encoding::DescriptorEncoder;

/// Who published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A client's `publish` message (pubsub or wse profile).
    Client,
    /// The server's ticker (`--ticker-topics`).
    Ticker,
}

/// What a test hook did (see `crate::config::Hooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Drop,
    Duplicate,
    Swap,
}

#[derive(Clone, Copy)]
enum Kind {
    PublishedClient = 0,
    PublishedTicker,
    Fanout,
    Delivered,
    DroppedSlow,
    DroppedClosed,
    HookDrop,
    HookDuplicate,
    HookSwap,
}
const KINDS: usize = 9;

#[repr(align(128))]
struct Slot([AtomicU64; KINDS]);

/// Counters of publishes and their deliveries, and the subscription gauges.
pub struct Counters {
    slots: Box<[Slot]>,
    subscriptions: AtomicU64,
    topics: AtomicU64,
    /// Whether the test hooks are on, so their counter is exposed.
    hooks: bool,
}

impl Counters {
    pub fn new(hooks: bool) -> Self {
        Counters {
            slots: (0..SLOTS)
                .map(|_| Slot(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            subscriptions: AtomicU64::new(0),
            topics: AtomicU64::new(0),
            hooks,
        }
    }

    #[inline]
    fn add(&self, kind: Kind, n: u64) {
        if n > 0 {
            self.slots[my_slot()].0[kind as usize].fetch_add(n, Relaxed);
        }
    }

    fn sum(&self, kind: Kind) -> u64 {
        self.slots
            .iter()
            .map(|s| s.0[kind as usize].load(Relaxed))
            .sum()
    }

    /// One publish by `source`, fanned out to `subscribers`, of which `slow` found their queue
    /// full and `closed` their connection ending. Counted by `Registry::publish`.
    pub fn published(&self, source: Source, subscribers: u64, slow: u64, closed: u64) {
        let kind = match source {
            Source::Client => Kind::PublishedClient,
            Source::Ticker => Kind::PublishedTicker,
        };
        self.add(kind, 1);
        self.add(Kind::Fanout, subscribers);
        self.add(Kind::DroppedSlow, slow);
        self.add(Kind::DroppedClosed, closed);
    }

    /// Deliveries written to their subscriber's socket (the send buffer accepted them), counted
    /// by the subscriber's connection after the flush.
    pub fn delivered(&self, n: u64) {
        self.add(Kind::Delivered, n);
    }

    /// Deliveries queued for a connection that ended (or failed to write them) first.
    pub fn lost_to_close(&self, n: u64) {
        self.add(Kind::DroppedClosed, n);
    }

    pub fn hook(&self, hook: Hook) {
        let kind = match hook {
            Hook::Drop => Kind::HookDrop,
            Hook::Duplicate => Kind::HookDuplicate,
            Hook::Swap => Kind::HookSwap,
        };
        self.add(kind, 1);
    }

    /// The gauges, set under the registry's write lock.
    pub fn set_subscriptions(&self, subscriptions: u64, topics: u64) {
        self.subscriptions.store(subscriptions, Relaxed);
        self.topics.store(topics, Relaxed);
    }

    /// (fanout, delivered, dropped slow, dropped closed), for tests of the reconciliation.
    #[cfg(test)]
    pub fn outcomes(&self) -> (u64, u64, u64, u64) {
        (
            self.sum(Kind::Fanout),
            self.sum(Kind::Delivered),
            self.sum(Kind::DroppedSlow),
            self.sum(Kind::DroppedClosed),
        )
    }

    pub fn encode(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        family::counters(
            e,
            "wsload_server_topic_published",
            "Publishes fanned out, by who published.",
            [
                ([("source", "client")], self.sum(Kind::PublishedClient)),
                ([("source", "ticker")], self.sum(Kind::PublishedTicker)),
            ],
        )?;
        family::counter(
            e,
            "wsload_server_topic_fanout",
            "Deliveries owed: the subscribers of the topic at each publish, summed.",
            self.sum(Kind::Fanout),
        )?;
        family::counter(
            e,
            "wsload_server_topic_delivered",
            "Deliveries written to the subscriber's socket.",
            self.sum(Kind::Delivered),
        )?;
        family::counters(
            e,
            "wsload_server_topic_dropped",
            "Deliveries not made: the subscriber's queue was full (slow_consumer) or its \
             connection ended first (closed).",
            [
                ([("reason", "slow_consumer")], self.sum(Kind::DroppedSlow)),
                ([("reason", "closed")], self.sum(Kind::DroppedClosed)),
            ],
        )?;
        family::gauge(
            e,
            "wsload_server_topic_subscriptions",
            "Subscriptions now: (connection, topic) pairs.",
            self.subscriptions.load(Relaxed),
        )?;
        family::gauge(
            e,
            "wsload_server_topics",
            "Topics with at least one subscriber now.",
            self.topics.load(Relaxed),
        )?;
        if self.hooks {
            family::counters(
                e,
                "wsload_server_topic_test_hook",
                "Deliveries a --test-* hook misdelivered on purpose (drop: counted delivered).",
                [
                    ([("hook", "drop")], self.sum(Kind::HookDrop)),
                    ([("hook", "duplicate")], self.sum(Kind::HookDuplicate)),
                    ([("hook", "swap")], self.sum(Kind::HookSwap)),
                ],
            )?;
        }
        Ok(())
    }
}
