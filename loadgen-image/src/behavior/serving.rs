//! Connections served from their open until the measured phase begins (a fanout's and a
//! hold's): read and answered meanwhile, their tasks spawned at the open and joined at the
//! cell's end.

use super::worker::WorkerState;
use crate::connect::Dialer;
use crate::conversation::Out;
use crate::model::Behavior;
use std::cell::{OnceCell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// Where a worker's fanout connections are served from their open until their measured
/// phase begins, and the tasks they run in. A connection left unread until then would miss
/// its server's heartbeat (Socket.IO closes it after 3 s) and fill with what a server that
/// publishes on its own sends before the window, read only after the window's end.
pub struct Serving {
    /// What serving before the start needs: the conversation, the worker's statistics and
    /// live slot; every instant of it lies past any cell
    /// ([`super::worker::Instants::before_start`]).
    pub(super) early: WorkerState,
    /// The measured message of the connections that captured nothing it uses.
    pub(super) common: Option<Arc<Out>>,
    pub(super) behavior: Behavior,
    pub(super) measured: OnceCell<Rc<WorkerState>>,
    pub(super) begun: Notify,
    pub(super) tasks: RefCell<JoinSet<()>>,
    /// What a dropped connection dials again with (`spec.reconnect`).
    pub(super) dialer: Arc<Dialer>,
}

impl Serving {
    /// `early` is the worker's state as it is known before the start, its instants
    /// beyond any cell; `behavior` the cell's (a fanout).
    pub fn new(early: WorkerState, behavior: Behavior, dialer: Arc<Dialer>) -> Serving {
        Serving {
            dialer,
            common: early.script.shared_message(),
            behavior,
            early,
            measured: OnceCell::new(),
            begun: Notify::new(),
            tasks: RefCell::new(JoinSet::new()),
        }
    }

    /// The measured message of a connection that captured `vars` on open.
    pub(super) fn message_for(&self, vars: &[bytes::Bytes]) -> Arc<Out> {
        self.early.script.message_for(vars, &self.common)
    }

    /// Runs a served connection's task (its whole life, from its open) until its end.
    pub(super) fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        self.tasks.borrow_mut().spawn_local(task);
    }

    /// The measured phase begins for every connection served, with `ctx`.
    pub fn begin(&self, ctx: Rc<WorkerState>) {
        if self.measured.set(ctx).is_ok() {
            self.begun.notify_waiters();
        }
    }

    /// Until every connection's task has ended.
    pub async fn join(&self) {
        let mut tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        while tasks.join_next().await.is_some() {}
    }

    /// The measured phase's state, once it begins.
    pub(super) async fn measured(&self) -> Rc<WorkerState> {
        loop {
            let begun = self.begun.notified();
            if let Some(ctx) = self.measured.get() {
                return ctx.clone();
            }
            begun.await;
        }
    }
}
