//! What the core sends through: the sending side of the master's connections. Every call
//! returns at once (a full queue is reported, never waited for); the driver gives the core the
//! transport's (`halite-transport`'s `RouterSender`), the simulated tests one made of queues.

use halite_transport::{Lane, PeerId, SendError};

/// The sending side of the master's connections, as the core sees it: every call returns at
/// once.
pub trait Outlet: Send + Sync + 'static {
    /// Queues a message for a peer without waiting.
    fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError>;
    /// Like `send`, but the message may wait for [`Outlet::release_held`], to leave with the
    /// others for the same peer in one write.
    fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError>;
    /// Writes what `send_held` holds.
    fn release_held(&self);
    /// Lifts a peer's pre-authentication limits, and puts what it sends next on `lane`.
    fn mark_authenticated(&self, peer: PeerId, lane: Lane);
    /// Closes a peer's connection with a reason.
    fn disconnect(&self, peer: PeerId, reason: &str);
}
