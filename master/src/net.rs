//! What the core needs of the network: the router's side it talks to. The daemon passes the
//! transport's [`Router`]; the in-process tests (`sim/`) pass a network made of queues, so the
//! whole core runs without sockets.

use std::future::Future;

use halite_transport::{Lane, PeerId, Router, RouterEvent, SendError};

/// The master's connections, as the core sees them.
pub trait Net: Send + 'static {
    /// The next event; `None` once the network is gone for good.
    fn recv(&mut self) -> impl Future<Output = Option<RouterEvent>> + Send;
    /// An event already waiting, without waiting for one.
    fn try_recv(&mut self) -> Option<RouterEvent>;
    /// Queues a message for a peer without waiting.
    fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError>;
    /// Like `send`, but the message may wait for [`Net::release_held`], to leave with the
    /// others for the same peer in one write.
    fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError>;
    /// Writes what `send_held` holds.
    fn release_held(&self);
    /// Lifts a peer's pre-authentication limits, and puts what it sends next on `lane`.
    fn mark_authenticated(&self, peer: PeerId, lane: Lane);
    /// Closes a peer's connection with a reason.
    fn disconnect(&self, peer: PeerId, reason: &str);
}

impl Net for Router {
    fn recv(&mut self) -> impl Future<Output = Option<RouterEvent>> + Send {
        Router::recv(self)
    }

    fn try_recv(&mut self) -> Option<RouterEvent> {
        Router::try_recv(self)
    }

    fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        Router::send(self, peer, parts)
    }

    fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        Router::send_held(self, peer, parts)
    }

    fn release_held(&self) {
        Router::release_held(self);
    }

    fn mark_authenticated(&self, peer: PeerId, lane: Lane) {
        // A peer already gone is handled by its Disconnected event.
        let _ = Router::mark_authenticated(self, peer, lane);
    }

    fn disconnect(&self, peer: PeerId, reason: &str) {
        Router::disconnect(self, peer, reason);
    }
}
