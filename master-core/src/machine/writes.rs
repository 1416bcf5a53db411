//! What the loop writes at the end of a step (group commit): presence, job states, shared
//! events, then the acknowledgements and announcements that may only follow a stored write.

use halite_protocol::message::{Message, ResendReturns};
use tracing::info;

use crate::store::ClusterChange;

use super::Core;

impl Core {
    /// Minions whose returns were turned away while the store was in doubt are asked, in
    /// their session, to send again what they have not had acknowledged, once it is not. The
    /// session stays: closing it would send the minion to another master of a cluster, and a
    /// database blip would move the fleet. (A minion that reconnects sends them anyway.)
    pub fn ask_owed_returns(&mut self) {
        if self.store_in_doubt() {
            return;
        }
        for id in self.pending.take_owed_once_written() {
            if let Some(peer) = self.sessions.peer_of(&id) {
                info!(minion = %id, "the store answers again; asking the minion to send its returns again");
                self.send(peer, &Message::ResendReturns(ResendReturns {}));
            }
        }
    }

    /// Queues a change for the other masters sharing the store (nothing without any): the loop
    /// sends what a step queued once its writes are done (`halite-master`'s `Master::send_announcements`).
    pub fn tell_masters(&mut self, change: ClusterChange) {
        self.cluster.tell(change);
    }
}
