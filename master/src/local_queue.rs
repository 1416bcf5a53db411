//! The queue from the core to one in-process session, bounded in messages *and* bytes: a
//! gateway stream whose HTTP client reads slowly holds at most [`QUEUE_BYTES`] of events, as a
//! networked client holds at most its router send queue (a count alone let 1 MiB returns pile
//! up to a gigabyte behind a slow reader).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use halite_protocol::message::{encoded_len, Message};
use halite_transport::SendError;
use tokio::sync::mpsc::{self, error::TrySendError};

use crate::local_sessions::{LocalOutlet, LocalSender};

/// Messages one local session can have queued towards it before the core drops (bus events)
/// or reports a full queue.
const QUEUE: usize = 1024;
/// Bytes (as encoded) one local session can have queued; an empty queue still takes one message.
pub(crate) const QUEUE_BYTES: usize = 32 * 1024 * 1024;

/// A new queue: the core's end and the session's.
pub(crate) fn local_queue() -> (LocalSender, LocalInbox) {
    let (tx, inbox) = queue();
    (Arc::new(tx), inbox)
}

fn queue() -> (QueueSender, LocalInbox) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let queued = Arc::new(AtomicUsize::new(0));
    (QueueSender { tx, queued: queued.clone() }, LocalInbox { rx, queued })
}

/// The core's end.
#[derive(Debug)]
struct QueueSender {
    tx: mpsc::Sender<(Message, usize)>,
    queued: Arc<AtomicUsize>,
}

impl LocalOutlet for QueueSender {
    /// Queues a message unless the queue is full (in messages or bytes: `Full`) or the session
    /// is gone (`NotConnected`).
    fn try_send(&self, msg: Message) -> Result<(), SendError> {
        let size = encoded_len(&msg);
        let queued = self.queued.load(Ordering::Acquire);
        if queued > 0 && queued.saturating_add(size) > QUEUE_BYTES {
            return Err(SendError::Full);
        }
        self.queued.fetch_add(size, Ordering::AcqRel);
        self.tx.try_send((msg, size)).map_err(|error| {
            self.queued.fetch_sub(size, Ordering::AcqRel);
            match error {
                TrySendError::Full(_) => SendError::Full,
                TrySendError::Closed(_) => SendError::NotConnected,
            }
        })
    }
}

/// The session's end.
#[derive(Debug)]
pub(crate) struct LocalInbox {
    rx: mpsc::Receiver<(Message, usize)>,
    queued: Arc<AtomicUsize>,
}

impl LocalInbox {
    /// The next message; `None` once the core closed the queue and it is empty.
    pub(crate) async fn recv(&mut self) -> Option<Message> {
        let (msg, size) = self.rx.recv().await?;
        self.queued.fetch_sub(size, Ordering::AcqRel);
        Some(msg)
    }

    /// Stops the core queueing more.
    pub(crate) fn close(&mut self) {
        self.rx.close();
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::Event;

    use super::*;

    fn event(bytes: usize) -> Message {
        Message::Event(Event { tag: "x".into(), data: serde_json::json!("y".repeat(bytes)), id: None })
    }

    #[test]
    fn a_slow_reader_holds_at_most_its_bytes_and_reading_frees_them() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        runtime.block_on(async {
            let (tx, mut inbox) = queue();
            let mib = 1024 * 1024;
            let mut taken = 0;
            while tx.try_send(event(mib)).is_ok() {
                taken += 1;
                assert!(taken < 100, "no byte bound");
            }
            assert_eq!(taken, QUEUE_BYTES / mib - 1, "32 MiB of 1 MiB events (each a little more)");
            assert!(inbox.recv().await.is_some());
            assert!(tx.try_send(event(mib)).is_ok(), "reading one makes room for one");
            assert!(tx.try_send(event(mib)).is_err());
            while tx.queued.load(Ordering::Acquire) > 0 {
                inbox.recv().await;
            }
            // An empty queue takes one message of any size.
            assert!(tx.try_send(event(QUEUE_BYTES + 1)).is_ok());
        });
    }
}
