//! A router connection's outgoing bytes, written to the socket by whoever queues them.
//!
//! Handing each message to the connection's task cost a wake-up of that task per message, and
//! on a multi-threaded runtime often a wake-up of another thread to run it (tokio wakes an idle
//! worker when a second task becomes ready on a busy one): on loopback, more than the write
//! itself. So [`Outbound::send`] frames the message and writes it at once with a non-blocking
//! write, on the caller's thread. Only what the socket does not take stays here, in order, for
//! the connection's task to finish when the socket is writable again; later messages queue
//! behind it, and the task's own bytes (heartbeats, the closing ERROR) go through the same
//! buffer, so the byte stream keeps whole frames in order whoever writes it.
//!
//! A message may also be *held* ([`Outbound::send_held`]): queued without a write until
//! [`Outbound::release`], so several small messages for one peer leave in one write, and wake
//! the peer once. Holding stops by itself past [`HOLD_LIMIT`] bytes.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use halite_protocol::zmtp::encode_message;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::budget::message_bytes;
use crate::peers::SendError;

/// Bytes a held buffer takes before it is written anyway: holding is for a few small messages,
/// never for a large answer's parts, which go as they come.
pub(crate) const HOLD_LIMIT: usize = 16 * 1024;

/// One connection's outgoing bytes.
#[derive(Debug, Default)]
pub(crate) struct Outbound {
    state: Mutex<State>,
    /// Tells the connection's task that bytes wait for it (the socket was full).
    leftover: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// The connection's stream once it is ready; until then (and after it ends) messages only
    /// queue.
    stream: Option<Arc<TcpStream>>,
    /// Framed bytes not written yet, in order.
    waiting: Vec<u8>,
    /// The connection ended: nothing more is taken.
    ended: bool,
    /// Messages are held: nothing is written until [`Outbound::release`].
    held: bool,
}

impl State {
    /// Writes what the socket takes without waiting. A full socket is not an error; any other
    /// is returned (callers other than the task leave it for the task's next write).
    fn write_some(&mut self) -> io::Result<()> {
        let Some(stream) = &self.stream else { return Ok(()) };
        let (written, result) = write_until_full(stream, &self.waiting);
        self.waiting.drain(..written);
        result
    }
}

/// Writes `bytes` until they are all written or the socket is full: how many were written, and
/// the error that stopped it (a full socket is none).
pub(crate) fn write_until_full(stream: &TcpStream, bytes: &[u8]) -> (usize, io::Result<()>) {
    let mut written = 0;
    while written < bytes.len() {
        match stream.try_write(&bytes[written..]) {
            Ok(0) => return (written, Err(io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return (written, Err(e)),
        }
    }
    (written, Ok(()))
}

impl Outbound {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues one message and writes what the socket takes now. Refused as full when more than
    /// `limit` bytes already wait (an empty buffer takes one message, however large, so nothing
    /// is refused only for its size).
    pub(crate) fn send(&self, parts: &[Vec<u8>], limit: usize) -> Result<(), SendError> {
        let mut state = self.taking(parts, limit)?;
        self.queue(&mut state, |out| encode_message(out, parts));
        Ok(())
    }

    /// Like [`Outbound::send`], but held: written at the next [`Outbound::release`] (or at once
    /// past [`HOLD_LIMIT`] bytes). Whether the buffer was not held before (and so needs
    /// releasing).
    pub(crate) fn send_held(&self, parts: &[Vec<u8>], limit: usize) -> Result<bool, SendError> {
        let mut state = self.taking(parts, limit)?;
        let newly = !state.held;
        state.held = true;
        encode_message(&mut state.waiting, parts);
        if state.waiting.len() > HOLD_LIMIT {
            self.unhold(&mut state);
        }
        Ok(newly)
    }

    /// Writes what is held.
    pub(crate) fn release(&self) {
        let mut state = self.lock();
        if state.held {
            self.unhold(&mut state);
        }
    }

    /// Stops holding and writes what the socket takes.
    fn unhold(&self, state: &mut State) {
        state.held = false;
        self.write_now(state);
    }

    /// The buffer, if it takes a message of `parts` (see [`Outbound::send`]).
    fn taking(&self, parts: &[Vec<u8>], limit: usize) -> Result<MutexGuard<'_, State>, SendError> {
        let state = self.lock();
        if state.ended {
            return Err(SendError::NotConnected);
        }
        if !state.waiting.is_empty() && state.waiting.len().saturating_add(message_bytes(parts)) > limit {
            return Err(SendError::Full);
        }
        Ok(state)
    }

    /// Queues bytes of the connection's own (already framed) behind what waits.
    pub(crate) fn send_raw(&self, bytes: &[u8]) {
        let mut state = self.lock();
        self.queue(&mut state, |out| out.extend_from_slice(bytes));
    }

    /// Appends to the buffer and writes at once if nothing was waiting before (otherwise the
    /// task, already told, is on it, or the bytes are held, and this goes after).
    fn queue(&self, state: &mut State, append: impl FnOnce(&mut Vec<u8>)) {
        let was_empty = state.waiting.is_empty();
        append(&mut state.waiting);
        if was_empty && !state.held {
            self.write_now(state);
        }
    }

    /// Writes what the socket takes, and tells the task about whatever is left.
    fn write_now(&self, state: &mut State) {
        let _ = state.write_some();
        if !state.waiting.is_empty() {
            self.leftover.notify_one();
        }
    }

    /// The connection is ready: messages go straight to `stream` from now on, starting with any
    /// queued before.
    pub(crate) fn open(&self, stream: Arc<TcpStream>) {
        let mut state = self.lock();
        state.stream = Some(stream);
        self.write_now(&mut state);
    }

    /// Whether bytes wait for the task (not held ones: those wait for their release).
    pub(crate) fn has_leftover(&self) -> bool {
        let state = self.lock();
        !state.held && !state.waiting.is_empty()
    }

    /// Resolves when bytes may wait for the task (or at once if told so before).
    pub(crate) async fn leftover(&self) {
        self.leftover.notified().await;
    }

    /// Writes until nothing waits, waiting for the socket as needed (the task's part).
    pub(crate) async fn finish(&self, stream: &TcpStream) -> io::Result<()> {
        loop {
            {
                let mut state = self.lock();
                state.write_some()?;
                if state.waiting.is_empty() {
                    return Ok(());
                }
            }
            stream.writable().await?;
        }
    }

    /// The connection ended: later sends are refused, and the stream is let go so the socket
    /// closes with the task.
    pub(crate) fn end(&self) {
        let mut state = self.lock();
        state.ended = true;
        state.stream = None;
        state.waiting = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_bounded_in_bytes_but_always_takes_one_message() {
        // No stream yet: everything waits.
        let out = Outbound::default();
        let big = vec![vec![0u8; 1000]];
        assert_eq!(out.send(&big, 10), Ok(()), "an empty buffer takes a message larger than the limit");
        assert_eq!(out.send(&[vec![1u8]], 10), Err(SendError::Full));
        assert!(out.has_leftover());
        out.end();
        assert_eq!(out.send(&[vec![1u8]], 10), Err(SendError::NotConnected));
        assert!(!out.has_leftover());
    }
}
