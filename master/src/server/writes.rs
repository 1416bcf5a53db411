//! What the loop writes at the end of a step (group commit): presence, job states, shared
//! events, then the acknowledgements and announcements that may only follow a stored write.

use tracing::warn;

use crate::net::Net;
use crate::store::{Announcement, ClusterChange, Store};

use super::Master;

impl<S: Store, N: Net> Master<S, N> {
    /// Carries out what the step decided: writes it ([`Master::write_pending`]), then tells
    /// the other masters what it queued for them, each already stored. The one place the loop
    /// announces.
    pub(crate) async fn flush(&mut self) {
        self.core.tell_moves();
        self.write_pending().await;
        self.send_announcements().await;
    }

    /// Writes the batched state changes in one transaction, then acknowledges the returns they
    /// include: a minion drops a return from its outbox only once it is stored. The core decides
    /// what is written and what follows each outcome; the driver makes the calls.
    async fn write_pending(&mut self) {
        // The audit records gathered, once a batch of them is due (at most 100 ms after the
        // first, or at once before a request reads the store).
        self.append_audit().await;
        let records = self.core.presence_to_write();
        if !records.is_empty() {
            let started = self.clock.now();
            let stored = self.store.put_minions(&records).await;
            self.observe();
            self.count_call("put_minions", started, stored.is_ok());
            self.core.presence_written(records, stored);
        }
        for (tag, data) in self.core.take_departures_and_shared_events() {
            self.share_event(tag, data).await;
        }
        // Minions are acknowledged only after the write; watchers are told before it.
        self.core.tell_watchers();
        let Some((changes, acks)) = self.core.states_to_write() else {
            self.tell_stored_finals().await;
            self.core.ask_owed_returns();
            return;
        };
        let started = self.clock.now();
        let stored = if changes.is_empty() { Ok(()) } else { self.store.set_states(&changes).await };
        self.observe();
        if !changes.is_empty() {
            self.count_call("set_states", started, stored.is_ok());
        }
        if !self.core.states_written(&changes, acks, stored) {
            return;
        }
        self.tell_stored_finals().await;
        self.core.states_stored(&changes);
    }

    /// Tells the final states decided here that are now stored (see `SlotMoves::set`):
    /// those written late are first compared with what the store kept, and told as it kept
    /// them. Nothing is told while they are not stored, or cannot be compared.
    async fn tell_stored_finals(&mut self) {
        let Some(jids) = self.core.finals_to_compare() else { return };
        for jid in jids {
            if !self.follow_stored_finals(&jid).await {
                self.core.finals_not_compared();
                return;
            }
        }
        self.core.tell_stored_finals();
    }

    /// Compares `jid`'s final states waiting to be told with what the store kept: where another
    /// master's came first, the core follows the store's. False if the store could not be read
    /// (a reread is then due).
    async fn follow_stored_finals(&mut self, jid: &str) -> bool {
        let stored = match self.store.live_job(jid).await {
            Ok(Some((_, states))) => states,
            Ok(None) => return true,
            Err(error) => {
                warn!(%error, %jid, "could not compare a job's final states with the store");
                return false;
            }
        };
        self.observe();
        for (minion, kept) in self.core.finals_kept_otherwise(jid, &stored) {
            let ret = match self.store.returns_of(jid, std::slice::from_ref(&minion)).await {
                Ok(mut returns) => returns.pop().map(|(_, ret)| ret),
                Err(error) => {
                    warn!(%error, %jid, "could not read a return another master stored");
                    return false;
                }
            };
            self.observe();
            self.core.follow_stored_final(jid, &minion, kept, ret);
        }
        true
    }

    /// Tells the other masters what the step queued, in order. One that cannot be sent is
    /// logged, not an error of the request: the change is stored, and a master that missed an
    /// announcement rereads everything when its listening connection comes back.
    pub(crate) async fn send_announcements(&mut self) {
        for change in self.core.take_announcements() {
            for part in change.split() {
                if let Err(error) = self.store.announce(&part).await {
                    warn!(%error, "could not tell the other masters of a change");
                    break;
                }
            }
        }
    }

    /// Announces an event published here; one too large to announce is stored and announced
    /// by id.
    pub(crate) async fn share_event(&mut self, tag: String, data: halite_protocol::message::Value) {
        let change = ClusterChange::Event { tag, data };
        if Announcement::fits(self.store.instance(), &change) {
            return self.core.tell_masters(change);
        }
        let ClusterChange::Event { tag, data } = change else { return };
        let digest = crate::store::event_digest(&tag, &serde_json::to_string(&data).unwrap_or_else(|_| "null".into()));
        match self.store.put_shared_event(&tag, &data, self.clock.wall_ms()).await {
            Ok(id) => self.core.tell_masters(ClusterChange::StoredEvent { id, digest }),
            Err(error) => warn!(%error, %tag, "an event could not be shared with the other masters"),
        }
    }
}
