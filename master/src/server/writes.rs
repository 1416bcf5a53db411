//! What the loop writes at the end of a step (group commit): presence, job states, shared
//! events, then the acknowledgements and announcements that may only follow a stored write.

use std::time::Duration;

use halite_protocol::message::{Message, MinionJobState, ReturnAck};
use tracing::{info, warn};

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
    /// include: a minion drops a return from its outbox only once it is stored.
    async fn write_pending(&mut self) {
        // The audit records gathered, once a batch of them is due (at most 100 ms after the
        // first, or at once before a request reads the store).
        self.append_audit().await;
        let records = self.core.pending.take_minions();
        if !records.is_empty() {
            let started = self.clock.now();
            let stored = self.store.put_minions(&records).await;
            self.observe();
            self.core.metrics.store_call(
                "put_minions",
                self.clock.now().saturating_duration_since(started),
                stored.is_ok(),
            );
            match stored {
                Err(error) => {
                    if self.core.notices.ready("store:presence", Duration::from_secs(10), self.clock.now()) {
                        warn!(%error, minions = records.len(), "recording presence failed; retrying every 100 ms");
                    }
                    self.core.pending.keep_minions(records);
                }
                Ok(()) if self.core.cluster.is_shared() => {
                    // Stored first, so the other masters read the entries they are told of.
                    let ids = records.into_iter().map(|r| r.id).filter(|id| self.core.sessions.is_online(id)).collect();
                    self.core.tell_masters(ClusterChange::Here { ids });
                }
                Ok(()) => {}
            }
        }
        let ids = self.core.cluster.take_left_here();
        if !ids.is_empty() {
            self.core.tell_masters(ClusterChange::Left { ids });
        }
        for (tag, data) in self.core.cluster.take_shared_events() {
            self.share_event(tag, data).await;
        }
        // Watchers first (sent means written to their sockets): what they are told is already
        // decided, and their latency should not include the write. Minions are acknowledged
        // only after it.
        self.core.send_watcher_batches();
        self.core.outlet.release_held();
        if !self.core.pending.has_states() {
            self.tell_stored_finals().await;
            self.core.ask_owed_returns();
            return;
        }
        let (changes, acks) = self.core.pending.take_states();
        let started = self.clock.now();
        let stored = if changes.is_empty() { Ok(()) } else { self.store.set_states(&changes).await };
        self.observe();
        if !changes.is_empty() {
            let took = self.clock.now().saturating_duration_since(started);
            self.core.metrics.store_call("set_states", took, stored.is_ok());
        }
        if let Err(error) = stored {
            // Kept for the next flush (retried every 100 ms): nothing is acknowledged until it is stored,
            // so the minions keep their returns meanwhile.
            if self.core.notices.ready("store:states", Duration::from_secs(10), self.clock.now()) {
                warn!(%error, changes = changes.len(), "recording job states failed; retrying every 100 ms");
            }
            self.core.pending.write_failed_for(changes, acks);
            return;
        }
        self.core.pending.written();
        for (peer, jid) in acks {
            self.core.send(peer, &Message::ReturnAck(ReturnAck { jid }));
        }
        self.tell_stored_finals().await;
        self.core.ask_owed_returns();
        if self.core.cluster.is_shared() {
            self.core.cluster.tell_slots(&changes);
        }
    }

    /// Tells the final states decided here that are now stored (see `SlotMoves::set`):
    /// those written late are first compared with what the store kept, and told as it kept
    /// them. Nothing is told while they are not stored, or cannot be compared.
    async fn tell_stored_finals(&mut self) {
        if !self.core.pending.finals_to_tell() {
            return;
        }
        if self.core.pending.finals_in_doubt() {
            if !self.follow_stored_finals().await {
                return;
            }
            self.core.pending.finals_checked();
        }
        self.core.slots().report_stored_finals();
        self.core.tell_moves();
        self.core.send_watcher_batches();
        self.core.outlet.release_held();
    }

    /// Compares the final states waiting to be told with what the store kept: where another
    /// master's came first, this master's view, and what it will tell, follow the store's.
    /// False if the store could not be read (a reread is then due).
    async fn follow_stored_finals(&mut self) -> bool {
        let jids = self.core.pending.unreported_jids();
        for jid in jids {
            let stored = match self.store.live_job(&jid).await {
                Ok(Some((_, states))) => states,
                Ok(None) => continue,
                Err(error) => {
                    warn!(%error, %jid, "could not compare a job's final states with the store");
                    self.core.cluster.lost_track();
                    return false;
                }
            };
            self.observe();
            // The slots the store kept otherwise, with what it kept.
            let differing: Vec<(String, MinionJobState)> = self
                .core
                .pending
                .unreported_of(&jid)
                .iter()
                .filter_map(|slot| {
                    let (_, kept) = stored.iter().find(|(minion, _)| *minion == slot.minion)?;
                    (*kept != slot.state && kept.is_final()).then(|| (slot.minion.clone(), *kept))
                })
                .collect();
            for (minion, kept) in differing {
                let ret = match self.store.returns_of(&jid, std::slice::from_ref(&minion)).await {
                    Ok(mut returns) => returns.pop().map(|(_, ret)| ret),
                    Err(error) => {
                        warn!(%error, %jid, "could not read a return another master stored");
                        self.core.cluster.lost_track();
                        return false;
                    }
                };
                self.observe();
                info!(%jid, %minion, kept = kept.as_str(), "another master recorded this slot first; following the store");
                self.core.slots().follow_stored(&jid, &minion, kept, ret);
            }
        }
        true
    }

    /// Tells the other masters what the step queued, in order. One that cannot be sent is
    /// logged, not an error of the request: the change is stored, and a master that missed an
    /// announcement rereads everything when its listening connection comes back.
    pub(crate) async fn send_announcements(&mut self) {
        for change in self.core.cluster.take_told() {
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
