//! Where the loop ends connections: the one clean-up path for every peer ([`Core::forget`]),
//! and the ways the loop ends sessions itself or as handlers' effects ask (a minion cut,
//! gateway sessions ended, parked connections released, a failed handshake dropped).

use halite_transport::PeerId;
use tracing::{debug, info};

use crate::core::sessions::Conn;

use super::Core;

impl Core {
    /// Forgets a peer, whichever way it went (closed, refused, replaced, cut, too slow): its
    /// session, its presence, its subscriptions, its watches, its pending batches. With a
    /// reason, its connection is also closed. The one clean-up path for every peer.
    pub fn forget(&mut self, peer: PeerId, close: Option<&str>) {
        match (self.sessions.remove(&peer), close) {
            (Some(Conn::Refused { parked: true, .. }), _) => self.sessions.unpark(peer),
            (Some(Conn::Minion { id, .. }), _) if self.sessions.went_offline(&id, peer) => {
                self.pending.put_minion(self.registry.seen(&id, self.now.wall_ms));
                self.cluster.left_here(id);
            }
            // An in-process session is told why it ends (its queue closes right after).
            (Some(Conn::Local { tx, .. }), Some(reason)) => {
                let _ = tx.try_send(crate::token_sessions::session_ended(reason));
            }
            _ => {}
        }
        self.audit.ended(peer);
        self.bus.unsubscribe(peer);
        self.jobs.forget_watcher(peer);
        self.watchers.forget(peer);
        if let Some(reason) = close {
            self.outlet.disconnect(peer, reason);
        }
    }

    /// Hands a batch of minions over to the other masters (`crate::handover`: the store has
    /// been unreachable here while another master is ready): their sessions are closed, a
    /// thousand at a time, so a minion given several masters moves to the next. Nothing once
    /// the store answers again.
    pub fn hand_over(&mut self) {
        const BATCH: usize = 1_000;
        if !self.store_in_doubt() {
            self.handed_over.clear();
            return;
        }
        let ids: Vec<String> =
            self.sessions.online_ids().filter(|id| !self.handed_over.contains(*id)).take(BATCH).cloned().collect();
        if ids.is_empty() {
            return;
        }
        info!(minions = ids.len(), "this master cannot reach its database and another can: handing minions over");
        for id in ids {
            self.handed_over.insert(id.clone());
            if let Some(peer) = self.sessions.peer_of(&id) {
                self.forget(peer, Some(halite_protocol::noise::GO_ELSEWHERE_REASON));
            }
        }
    }

    /// Closes the parked connections of minions whose key is now accepted: each knocks again
    /// at once and is let in (on whichever master the acceptance reached).
    pub fn release_parked(&mut self) {
        let accepted: Vec<(String, PeerId)> = self
            .sessions
            .parked()
            .filter(|(id, _)| self.registry.has_accepted(id))
            .map(|(id, peer)| (id.clone(), *peer))
            .collect();
        for (id, peer) in accepted {
            info!(minion = %id, "key accepted; the minion's waiting connection is closed so it connects again");
            self.forget(peer, Some(halite_protocol::noise::KEY_ACCEPTED_REASON));
        }
    }

    pub fn drop_peer(&mut self, peer: PeerId, reason: &str) {
        debug!(peer = peer.0, reason, "handshake failed");
        self.forget(peer, Some(reason));
    }

    /// Ends these in-process sessions (their token was revoked or expired), telling each why
    /// before its queue closes.
    pub fn end_gateway_sessions(&mut self, peers: Vec<PeerId>, why: &str) {
        for peer in peers {
            info!(peer = peer.0, why, "ending a gateway session");
            self.forget(peer, Some(why));
        }
    }

    /// Ends a minion's live session at once: nothing more is sent to it or accepted from it.
    pub fn cut_minion(&mut self, id: &str) {
        if let Some(peer) = self.sessions.peer_of(id) {
            info!(minion = id, "key no longer accepted; disconnecting");
            self.forget(peer, Some("key no longer accepted"));
        }
    }
}
