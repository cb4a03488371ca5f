//! One subscriber connection's bounded queue of deliveries, and the test hooks that misdeliver
//! from it on purpose.

use super::counters::{Counters, Hook};
use crate::config::Hooks;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// One publish on its way to one subscriber.
pub struct Delivery {
    pub(super) msg: Message,
    /// The topic, when the test hooks act on this subscription.
    pub(super) hooked: Option<Arc<str>>,
}

/// What the hooks remember of one hooked subscription.
#[derive(Default)]
struct Hooked {
    /// Deliveries that reached the connection, this one included.
    n: u64,
    /// A delivery the swap hook holds back until the next one.
    held: Option<Message>,
}

/// The receiving end of a connection's deliveries, read by its session.
pub struct Outbox {
    rx: mpsc::Receiver<Delivery>,
    hooks: Hooks,
    hooked: HashMap<Arc<str>, Hooked>,
}

impl Outbox {
    pub(super) fn new(rx: mpsc::Receiver<Delivery>, hooks: Hooks) -> Self {
        Outbox {
            rx,
            hooks,
            hooked: HashMap::new(),
        }
    }

    /// The next delivery; `None` once nothing can ever arrive.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.rx.recv().await
    }

    /// Puts `first` and up to `max - 1` more deliveries already waiting into `out`, as the
    /// hooks say. Returns how many deliveries to count as delivered once `out` is written.
    pub fn take(
        &mut self,
        first: Delivery,
        max: usize,
        out: &mut Vec<Message>,
        counters: &Counters,
    ) -> u64 {
        let mut count = self.place(first, out, counters);
        for _ in 1..max {
            match self.rx.try_recv() {
                Ok(d) => count += self.place(d, out, counters),
                Err(_) => break,
            }
        }
        count
    }

    fn place(&mut self, d: Delivery, out: &mut Vec<Message>, counters: &Counters) -> u64 {
        let Some(topic) = d.hooked else {
            out.push(d.msg);
            return 1;
        };
        let h = self.hooked.entry(topic).or_default();
        h.n += 1;
        let n = h.n;
        let due = |every: Option<u64>| every.is_some_and(|k| n % k == 0);
        if due(self.hooks.drop_every) {
            // The lie: counted as delivered, never sent.
            counters.hook(Hook::Drop);
            return 1;
        }
        if due(self.hooks.swap_every) && h.held.is_none() {
            counters.hook(Hook::Swap);
            h.held = Some(d.msg);
            return 0;
        }
        if due(self.hooks.duplicate_every) {
            counters.hook(Hook::Duplicate);
            out.push(d.msg.clone());
        }
        out.push(d.msg);
        match h.held.take() {
            Some(held) => {
                out.push(held);
                2
            }
            None => 1,
        }
    }

    /// Ends the queue when the connection ends: later publishes find it closed, and what is
    /// still in it, or held by a hook, is counted as lost to the close.
    pub fn close(&mut self, counters: &Counters) {
        self.rx.close();
        let mut lost = self.hooked.values().filter(|h| h.held.is_some()).count() as u64;
        while self.rx.try_recv().is_ok() {
            lost += 1;
        }
        counters.lost_to_close(lost);
    }
}
