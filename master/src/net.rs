//! What the master needs of the network, in two halves: the [`Outlet`] its core sends through
//! (without waiting: a full queue is reported, never waited for), and the [`Net`] the loop
//! reads events from and takes the outlet of. The daemon passes the transport's [`Router`];
//! the in-process tests (`sim/`) pass a network made of queues, so the whole master runs
//! without sockets.

use std::future::Future;

use halite_transport::{Lane, PeerId, Router, RouterEvent, RouterSender, SendError};

pub use halite_master_core::outlet::Outlet;

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
    type Outlet = RouterOutlet;

    fn outlet(&self) -> RouterOutlet {
        RouterOutlet(self.sender())
    }

    fn recv(&mut self) -> impl Future<Output = Option<RouterEvent>> + Send {
        Router::recv(self)
    }

    fn try_recv(&mut self) -> Option<RouterEvent> {
        Router::try_recv(self)
    }
}

/// The router's sending half, as the core's outlet.
pub struct RouterOutlet(RouterSender);

impl Outlet for RouterOutlet {
    fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.0.send(peer, parts)
    }

    fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.0.send_held(peer, parts)
    }

    fn release_held(&self) {
        self.0.release_held();
    }

    fn mark_authenticated(&self, peer: PeerId, lane: Lane) {
        // A peer already gone is handled by its Disconnected event.
        let _ = self.0.mark_authenticated(peer, lane);
    }

    fn disconnect(&self, peer: PeerId, reason: &str) {
        self.0.disconnect(peer, reason);
    }
}
