//! What the master needs of the network, in two halves: the [`Outlet`] its core sends through
//! (without waiting: a full queue is reported, never waited for), and the [`Net`] the loop
//! reads events from and takes the outlet of. The daemon passes the transport's [`Router`];
//! the in-process tests (`sim/`) pass a network made of queues, so the whole master runs
//! without sockets.

use std::future::Future;

use halite_transport::{Lane, PeerId, Router, RouterEvent, RouterSender, SendError};

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

/// The master's connections, as the loop sees them.
pub trait Net: Send + 'static {
    /// What the core sends through.
    type Outlet: Outlet;
    /// The sending side, for the core to hold.
    fn outlet(&self) -> Self::Outlet;
    /// The next event; `None` once the network is gone for good.
    fn recv(&mut self) -> impl Future<Output = Option<RouterEvent>> + Send;
    /// An event already waiting, without waiting for one.
    fn try_recv(&mut self) -> Option<RouterEvent>;
}

impl Net for Router {
    type Outlet = RouterSender;

    fn outlet(&self) -> RouterSender {
        self.sender()
    }

    fn recv(&mut self) -> impl Future<Output = Option<RouterEvent>> + Send {
        Router::recv(self)
    }

    fn try_recv(&mut self) -> Option<RouterEvent> {
        Router::try_recv(self)
    }
}

impl Outlet for RouterSender {
    fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        RouterSender::send(self, peer, parts)
    }

    fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        RouterSender::send_held(self, peer, parts)
    }

    fn release_held(&self) {
        RouterSender::release_held(self);
    }

    fn mark_authenticated(&self, peer: PeerId, lane: Lane) {
        // A peer already gone is handled by its Disconnected event.
        let _ = RouterSender::mark_authenticated(self, peer, lane);
    }

    fn disconnect(&self, peer: PeerId, reason: &str) {
        RouterSender::disconnect(self, peer, reason);
    }
}
