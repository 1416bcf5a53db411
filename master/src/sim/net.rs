//! In-memory connections: what arrives waits in a queue, what is sent is kept per peer, with
//! the number of writes it took (a held batch is one write, as on a socket).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use halite_transport::{Lane, PeerId, RouterEvent, SendError};

use crate::net::{Net, Outlet};

/// The network of one simulated master.
#[derive(Clone, Default)]
pub(crate) struct MemNet {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    arrived: VecDeque<RouterEvent>,
    sent: HashMap<PeerId, Vec<Vec<Vec<u8>>>>,
    closed: HashMap<PeerId, String>,
    full: HashSet<PeerId>,
    /// Messages waiting for `release_held`, in order.
    held: Vec<(PeerId, Vec<Vec<u8>>)>,
    /// Writes per peer since the last `take_writes`.
    writes: HashMap<PeerId, usize>,
}

impl MemNet {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An event that has arrived but that the core has not read yet.
    pub(crate) fn arrive(&self, event: RouterEvent) {
        self.state().arrived.push_back(event);
    }

    /// Makes `peer`'s send queue full (or not): sends to it return `Full`.
    pub(crate) fn set_full(&self, peer: PeerId, full: bool) {
        let mut state = self.state();
        if full {
            state.full.insert(peer);
        } else {
            state.full.remove(&peer);
        }
    }

    /// Why the core closed `peer`'s connection, if it did.
    pub(crate) fn closed(&self, peer: PeerId) -> Option<String> {
        self.state().closed.get(&peer).cloned()
    }

    /// How many writes reached `peer` since the last call.
    pub(crate) fn take_writes(&self, peer: PeerId) -> usize {
        self.state().writes.remove(&peer).unwrap_or_default()
    }

    /// What was sent to `peer` since the last call.
    pub(crate) fn take(&self, peer: PeerId) -> Vec<Vec<Vec<u8>>> {
        self.state().sent.remove(&peer).unwrap_or_default()
    }
}

impl State {
    /// Whether `peer` takes a message now.
    fn takes(&self, peer: PeerId) -> Result<(), SendError> {
        if self.closed.contains_key(&peer) {
            return Err(SendError::NotConnected);
        }
        if self.full.contains(&peer) {
            return Err(SendError::Full);
        }
        Ok(())
    }
}

impl Net for MemNet {
    type Outlet = MemNet;

    fn outlet(&self) -> MemNet {
        self.clone()
    }

    fn recv(&mut self) -> impl Future<Output = Option<RouterEvent>> + Send {
        let next = self.state().arrived.pop_front();
        async move {
            match next {
                Some(event) => Some(event),
                None => std::future::pending().await,
            }
        }
    }

    fn try_recv(&mut self) -> Option<RouterEvent> {
        self.state().arrived.pop_front()
    }
}

impl Outlet for MemNet {
    fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        let mut state = self.state();
        state.takes(peer)?;
        *state.writes.entry(peer).or_default() += 1;
        state.sent.entry(peer).or_default().push(parts);
        Ok(())
    }

    fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        let mut state = self.state();
        state.takes(peer)?;
        state.held.push((peer, parts));
        Ok(())
    }

    fn release_held(&self) {
        let mut state = self.state();
        let held = std::mem::take(&mut state.held);
        let mut written = HashSet::new();
        for (peer, parts) in held {
            if written.insert(peer) {
                *state.writes.entry(peer).or_default() += 1;
            }
            state.sent.entry(peer).or_default().push(parts);
        }
    }

    fn mark_authenticated(&self, _peer: PeerId, _lane: Lane) {}

    fn disconnect(&self, peer: PeerId, reason: &str) {
        self.state().closed.insert(peer, reason.to_owned());
    }
}
