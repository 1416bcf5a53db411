//! What the core knows of in-process sessions (the gateway's): the outlet it queues their
//! messages on, and the reply a session waits for when it opens (the commands they send are
//! `token_sessions.rs`'s). The
//! queue itself, and the waiting, are the driver's (`halite-master`'s `local_queue.rs` and
//! `gateway/local.rs`).

use std::sync::Arc;

use halite_protocol::message::Message;
use halite_transport::SendError;

/// Where the core queues one in-process session's messages, without waiting: a full queue
/// (in messages or bytes) is `Full`, a session gone `NotConnected`.
pub trait LocalOutlet: Send + Sync + std::fmt::Debug {
    /// Queues a message for the session.
    fn try_send(&self, msg: Message) -> Result<(), SendError>;
}

/// The core's end of a session's queue.
pub type LocalSender = Arc<dyn LocalOutlet>;

/// An answer someone waits for: given once, or dropped unanswered (the waiter then hears the
/// master is gone).
pub struct Reply<T>(Box<dyn FnOnce(T) + Send + Sync>);

impl<T> Reply<T> {
    /// A reply handed to `deliver`.
    pub fn new(deliver: impl FnOnce(T) + Send + Sync + 'static) -> Self {
        Reply(Box::new(deliver))
    }

    /// Answers.
    pub fn send(self, value: T) {
        (self.0)(value);
    }
}

impl<T> std::fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reply")
    }
}

/// A session's queue for tests: takes everything and keeps nothing.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug)]
pub struct Discard;

#[cfg(any(test, feature = "testing"))]
impl LocalOutlet for Discard {
    fn try_send(&self, _: Message) -> Result<(), SendError> {
        Ok(())
    }
}
