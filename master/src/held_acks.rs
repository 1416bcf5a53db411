//! Acknowledgements of stored returns, held until something else goes to their minion or the
//! next tick.
//!
//! A return is acknowledged once it is stored, and the minion then drops it from its outbox.
//! Sent at once, each acknowledgement is a message of its own: a write, and a wake-up of the
//! minion, at the moment the master answers the job's watchers and its publisher prepares the
//! next job. Held, it leaves in front of the next message for that minion (a busy minion gets it
//! with its next job, in the same write) or at the next tick, at most [`crate::server::TICK`]
//! later. Holding it only keeps the return in the minion's outbox that much longer: should this
//! master die meanwhile, the minion delivers the return again to the master it reaches next,
//! which stores it once (a final state is never overwritten) and acknowledges it.

use std::collections::HashMap;

use halite_transport::PeerId;

/// Held acknowledgements (jids), by minion connection.
#[derive(Debug, Default)]
pub(crate) struct HeldAcks(HashMap<PeerId, Vec<String>>);

impl HeldAcks {
    /// Holds the acknowledgement of `jid`'s stored return for `peer`.
    pub(crate) fn hold(&mut self, peer: PeerId, jid: String) {
        self.0.entry(peer).or_default().push(jid);
    }

    /// What is held for `peer`, to send before anything else goes to it.
    pub(crate) fn take(&mut self, peer: PeerId) -> Option<Vec<String>> {
        if self.0.is_empty() {
            return None;
        }
        self.0.remove(&peer)
    }

    /// Everything held, to send at a tick.
    pub(crate) fn take_all(&mut self) -> HashMap<PeerId, Vec<String>> {
        std::mem::take(&mut self.0)
    }

    /// Drops what was held for a connection that is gone: its minion delivers the returns again
    /// on its next session, and they are acknowledged then.
    pub(crate) fn forget(&mut self, peer: PeerId) {
        self.0.remove(&peer);
    }
}
