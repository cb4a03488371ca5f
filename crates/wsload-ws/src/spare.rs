//! The buffers the connections of one thread take turns with.

use bytes::BytesMut;
use std::cell::RefCell;

/// The buffers the connections of one thread take turns with. A wsload worker is one thread
/// with its own runtime, so this is the worker's: one read and one write buffer stay warm in
/// cache instead of one of each per connection (at 1 KiB echoes, 100 connections' 64 KiB read
/// buffers were 6 MB the kernel copied into), and an idle connection keeps none (at 15,000 held
/// connections their own buffers and the handshakes' were most of the client's memory).
///
/// A connection borrows the read buffer for one poll and gives it back before returning,
/// keeping it only while it holds a complete frame not yet taken (its next poll takes it) or a
/// large incomplete one; the write buffer it keeps while frames are queued. Either way the next
/// connection finds an empty buffer (possibly with no capacity) and grows it.
pub(crate) struct Spare {
    pub(crate) read: BytesMut,
    pub(crate) write: Vec<u8>,
}

thread_local! {
    static SPARE: RefCell<Spare> = RefCell::new(Spare {
        read: BytesMut::new(),
        write: Vec::new(),
    });
}

impl Spare {
    /// Runs `f` on this thread's spare buffers, for a moment (never across a poll of anything
    /// else). `None` when they cannot be reached (the thread is ending): the connection then
    /// works on buffers of its own.
    pub(crate) fn with<R>(f: impl FnOnce(&mut Spare) -> R) -> Option<R> {
        SPARE
            .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
            .ok()
            .flatten()
    }
}
