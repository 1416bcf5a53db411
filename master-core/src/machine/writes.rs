//! What the driver writes at the end of a step (group commit), as the core decides it: presence,
//! job states, shared events, then the acknowledgements and announcements that may only follow
//! a stored write. The driver makes each call and hands its outcome back here.

use std::time::Duration;

use halite_protocol::message::{self, JobDone, JobReturn, Message, MinionJobState, ResendReturns, ReturnAck, Value};
use halite_transport::{PeerId, SendError};
use tracing::{info, warn};

use crate::limits;
use crate::store::{ClusterChange, MinionRecord, StateChange, StoreError};

use super::Core;

/// Returns a write acknowledges once it is stored: the minion's session, and the job.
pub type Acks = Vec<(PeerId, String)>;

impl Core {
    /// The presence records to write (minions seen, come or gone).
    pub fn presence_to_write(&mut self) -> Vec<MinionRecord> {
        self.pending.take_minions()
    }

    /// The presence write's outcome: kept to be written again if it failed; stored, the other
    /// masters are told who is here (they read the entries they are told of).
    pub fn presence_written(&mut self, records: Vec<MinionRecord>, stored: Result<(), StoreError>) {
        match stored {
            Err(error) => {
                if self.notices.ready("store:presence", Duration::from_secs(10), self.now.at) {
                    warn!(%error, minions = records.len(), "recording presence failed; retrying every 100 ms");
                }
                self.pending.keep_minions(records);
            }
            Ok(()) if self.cluster.is_shared() => {
                let ids = records.into_iter().map(|r| r.id).filter(|id| self.sessions.is_online(id)).collect();
                self.tell_masters(ClusterChange::Here { ids });
            }
            Ok(()) => {}
        }
    }

    /// The minions that left, told to the other masters; the events to share with them.
    pub fn take_departures_and_shared_events(&mut self) -> Vec<(String, Value)> {
        let ids = self.cluster.take_left_here();
        if !ids.is_empty() {
            self.tell_masters(ClusterChange::Left { ids });
        }
        self.cluster.take_shared_events()
    }

    /// Watchers are told first (sent means written to their sockets): what they are told is
    /// already decided, and their latency should not include the write.
    pub fn tell_watchers(&mut self) {
        self.send_watcher_batches();
        self.outlet.release_held();
    }

    /// Sends each watcher its batched updates, then its finished jobs. Updates a client is too
    /// slow to take are counted and reported in `job_done.missed` (the client then reads the
    /// job); a client that cannot even take `job_done` is disconnected, so it never believes a
    /// partial result complete.
    pub fn send_watcher_batches(&mut self) {
        for (peer, batch) in self.watchers.take() {
            // Several messages when the returns are large: each within the message cap.
            let mut gone = false;
            for updates in message::split_by_size(batch.updates, limits::MESSAGE_BUDGET) {
                let message = Message::JobUpdates(message::JobUpdates { updates });
                match self.try_send(peer, &message) {
                    Ok(()) => {}
                    Err(SendError::Full) => {
                        if let Message::JobUpdates(lost) = message {
                            self.watchers.missed(peer, lost.updates);
                        }
                    }
                    // Gone: nothing to report to anyone.
                    Err(_) => gone = true,
                }
            }
            if gone {
                continue;
            }
            for jid in batch.done {
                let missed = self.watchers.take_missed(peer, &jid);
                if missed > 0 {
                    warn!(peer = peer.0, %jid, missed, "a client missed job updates; told so in job_done");
                }
                if let Err(SendError::Full) = self.try_send(peer, &Message::JobDone(JobDone { jid, missed })) {
                    warn!(peer = peer.0, "client too slow to take job_done; disconnecting it");
                    self.forget(peer, Some("too slow to read job results"));
                }
            }
        }
    }

    /// The job states to write in one transaction, with the returns each acknowledges once it is
    /// stored; `None` when there are none.
    pub fn states_to_write(&mut self) -> Option<(Vec<StateChange>, Acks)> {
        self.pending.has_states().then(|| self.pending.take_states())
    }

    /// The states' write outcome. Failed, they are kept for the next flush (retried every
    /// 100 ms) and nothing is acknowledged, so the minions keep their returns meanwhile. Stored,
    /// each return it holds is acknowledged. Whether it was stored.
    pub fn states_written(&mut self, changes: &[StateChange], acks: Acks, stored: Result<(), StoreError>) -> bool {
        if let Err(error) = stored {
            if self.notices.ready("store:states", Duration::from_secs(10), self.now.at) {
                warn!(%error, changes = changes.len(), "recording job states failed; retrying every 100 ms");
            }
            self.pending.write_failed_for(changes.to_vec(), acks);
            return false;
        }
        self.pending.written();
        for (peer, jid) in acks {
            self.send(peer, &Message::ReturnAck(ReturnAck { jid }));
        }
        true
    }

    /// After the states are stored and their finals told: minions owed a resend are asked, and
    /// the other masters are told of the slots.
    pub fn states_stored(&mut self, changes: &[StateChange]) {
        self.ask_owed_returns();
        if self.cluster.is_shared() {
            self.cluster.tell_slots(changes);
        }
    }

    /// `None` if no final state decided here waits to be told; else the jobs whose finals were
    /// written late (in doubt) and must first be compared with what the store kept
    /// (`SlotMoves::set`), none if they may be told at once.
    pub fn finals_to_compare(&self) -> Option<Vec<String>> {
        if !self.pending.finals_to_tell() {
            return None;
        }
        Some(if self.pending.finals_in_doubt() { self.pending.unreported_jids() } else { Vec::new() })
    }

    /// The slots of `jid` waiting to be told whose final state the store kept otherwise, with
    /// what it kept (`stored`: the job's slots as stored).
    pub fn finals_kept_otherwise(
        &self,
        jid: &str,
        stored: &[(String, MinionJobState)],
    ) -> Vec<(String, MinionJobState)> {
        self.pending
            .unreported_of(jid)
            .iter()
            .filter_map(|slot| {
                let (_, kept) = stored.iter().find(|(minion, _)| *minion == slot.minion)?;
                (*kept != slot.state && kept.is_final()).then(|| (slot.minion.clone(), *kept))
            })
            .collect()
    }

    /// Another master recorded this slot first: this master's view, and what it will tell,
    /// follow the store's.
    pub fn follow_stored_final(&mut self, jid: &str, minion: &str, kept: MinionJobState, ret: Option<JobReturn>) {
        info!(%jid, %minion, kept = kept.as_str(), "another master recorded this slot first; following the store");
        self.slots().follow_stored(jid, minion, kept, ret);
    }

    /// The comparison could not be made (the store did not answer): nothing is told, and the
    /// store is reread once it answers.
    pub fn finals_not_compared(&mut self) {
        self.cluster.lost_track();
    }

    /// The final states waiting are stored and, where in doubt, compared: told (the bus, the
    /// watchers).
    pub fn tell_stored_finals(&mut self) {
        if self.pending.finals_in_doubt() {
            self.pending.finals_checked();
        }
        self.slots().report_stored_finals();
        self.tell_moves();
        self.tell_watchers();
    }

    /// The announcements the step queued for the other masters, in order.
    pub fn take_announcements(&mut self) -> Vec<ClusterChange> {
        self.cluster.take_told()
    }

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
