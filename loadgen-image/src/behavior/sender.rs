//! The measured message as one connection sends it ([`Outgoing`]): made per message with the
//! connection's number and the message's `${seq}`; and as a counting or blasting loop sends it
//! ([`Sender`]), the same bytes each time when every message is alike.

use super::worker::WorkerState;
use crate::connect::Ws;
use crate::conversation::{Fill, Out, SendTime};
use std::sync::Arc;
use tokio_tungstenite::tungstenite::Message;

/// The conversation's measured message as one connection sends it: made per message with the
/// connection's number and the message's `${seq}`, counted from 1.
pub(super) struct Outgoing {
    pub(super) message: Arc<Out>,
    /// The connection's number (`${conn}`).
    pub(super) conn: u64,
    /// The last `${seq}` made: they only grow, so a number above it was never sent.
    pub(super) seq: u64,
}

impl Outgoing {
    pub(super) fn new(message: Arc<Out>, conn: u64) -> Outgoing {
        Outgoing {
            message,
            conn,
            seq: 0,
        }
    }

    /// The next message's values, its `${seq}` counted up, its `${pad}` to `size`.
    pub(super) fn next_fill(&mut self, size: usize) -> Fill {
        self.seq += 1;
        Fill {
            conn: self.conn,
            seq: self.seq,
            size,
        }
    }

    /// The next message, made in the worker's arena.
    pub(super) fn next_message(&mut self, ctx: &WorkerState) -> Message {
        let fill = self.next_fill(ctx.size);
        self.message
            .message(&mut ctx.scratch.arena.borrow_mut(), &fill)
    }
}

/// What a counting or blasting loop sends: the conversation's message, made per message
/// with its `${seq}` (or the same bytes each time, when every message is alike).
pub(super) struct Sender {
    out: Outgoing,
    /// `${sendTime}` of the burst being made (see `Sender::burst`).
    time: SendTime,
}

impl Sender {
    pub(super) fn new(message: Arc<Out>, conn: u64) -> Sender {
        Sender {
            out: Outgoing::new(message, conn),
            time: SendTime::default(),
        }
    }

    /// A burst begins: its messages are made now, and carry this instant as their
    /// `${sendTime}` (one clock read per burst instead of one per message).
    pub(super) fn burst(&mut self) {
        if self.out.message.has_time() {
            self.time = SendTime::now();
        }
    }

    /// Queues the next message on `ws`; its length.
    pub(super) fn queue(&mut self, ws: &mut Ws, ctx: &WorkerState) -> u64 {
        let fill = self.out.next_fill(ctx.size);
        let out = &self.out.message;
        if let Some(bytes) = out.constant() {
            ws.queue_data(out.is_text(), bytes);
            return bytes.len() as u64;
        }
        if out.transforms() {
            // MsgPack or zlib: made whole, then encoded.
            let bytes = out.bytes(&mut ctx.scratch.arena.borrow_mut(), &fill);
            ws.queue_data(out.is_text(), &bytes);
            return bytes.len() as u64;
        }
        // Copied into the write buffer at once: made in the worker's scratch, from the last
        // message made there with its numbers written over.
        let mut pre = ctx.scratch.render.borrow_mut();
        let bytes = pre.make(out, &fill, &self.time);
        ws.queue_data(out.is_text(), bytes);
        bytes.len() as u64
    }

    /// The next message.
    pub(super) fn message(&mut self, ctx: &WorkerState) -> Message {
        self.out.next_message(ctx)
    }
}
