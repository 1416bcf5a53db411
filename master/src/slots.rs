//! Job slots changing state, and who hears of it: every change is recorded for the group
//! commit, announced on the bus, queued for the job's watchers and, at the end of the step,
//! sent to them in batches within the message cap. A slot's end is also recorded as a value
//! ([`SlotMoved`]) for the concerns that listen to it (metrics, rollouts, deployments), which
//! the loop hands it to at the end of the step (`Master::hear_moves`): this file calls none of
//! them.

use halite_protocol::message::{self, JobDone, JobReturn, JobUpdate, Message, MinionJobState};
use halite_transport::SendError;
use serde_json::json;
use tracing::{debug, warn};

use crate::core::jobs::SlotMoved;
use crate::core::writes::Unreported;
use crate::limits;
use crate::net::Net;
use crate::server::Master;
use crate::store::{StateChange, Store};

impl<S: Store, N: Net> Master<S, N> {
    /// Queues a slot's new state (and return) for the group commit at the end of the step.
    pub(crate) fn record_state(
        &mut self,
        jid: &str,
        minion: &str,
        state: MinionJobState,
        ret: Option<JobReturn>,
        late: bool,
    ) {
        let at_ms = self.clock.wall_ms();
        let change = StateChange { jid: jid.to_owned(), minion: minion.to_owned(), state, ret, at_ms, late };
        self.pending.record(change);
    }

    /// Moves a minion's slot to `state` if the transition table allows it, queues it for the
    /// group commit, streams it to watchers, records its end for the listeners, and finishes
    /// the job when every slot is final. Nothing here waits or fails: the write is the step's.
    pub(crate) fn set_slot(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if !self.jobs.set_state(jid, minion, state) {
            debug!(jid, minion, state = state.as_str(), "no change: the slot is gone, final, or already there");
            return;
        }
        // `running` lives in memory only: a restarted master treats sent and running jobs alike,
        // and job listings show the live state. One write less per job.
        if state != MinionJobState::Running {
            self.record_state(jid, minion, state, ret.clone(), false);
        }
        if state.is_final() && self.cluster.is_shared() {
            // Another master may store a final state for this slot first (the store keeps the
            // first): its watchers and bus hear the one stored, once, after the write.
            self.slot_ended(jid, minion, state, &ret);
            let slot = Unreported { minion: minion.to_owned(), state, ret };
            self.pending.hold_final(jid, slot);
            return;
        }
        self.slot_moved(jid, minion, state, ret);
    }

    /// What follows a slot's move, whichever master decided it: the bus, the job's watchers,
    /// and the job's end when every slot is final; its end is recorded for the listeners.
    pub(crate) fn slot_moved(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if state.is_final() {
            self.slot_ended(jid, minion, state, &ret);
        }
        self.tell_slot(jid, minion, state, ret);
    }

    /// Records a slot's end for its listeners, which hear it at the end of the step
    /// (`Master::hear_moves`); the job may have left the table by then.
    fn slot_ended(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: &Option<JobReturn>) {
        let Some(job) = self.jobs.get(jid) else { return };
        let deploy = job.record.function == crate::deploy::DEPLOY_FUNCTION;
        let moved = SlotMoved {
            jid: jid.to_owned(),
            minion: minion.to_owned(),
            state,
            ret: if deploy { ret.clone() } else { None },
            returned: ret.is_some(),
            at: self.clock.now(),
            at_ms: self.clock.wall_ms(),
            created_at_ms: job.record.created_at_ms,
            deploy,
        };
        self.hearing.slot_ended(moved);
    }

    /// Tells the bus and the job's watchers of a slot's move, and ends the job when every
    /// slot is final.
    fn tell_slot(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        self.tell_move(jid, minion, state, ret);
        self.finish_if_done(jid);
    }

    /// Tells the bus (a final state) and the job's watchers of a slot's move.
    fn tell_move(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if state.is_final() {
            self.emit(format!("halite/job/{jid}/ret/{minion}"), json!({ "state": state.as_str(), "ret": ret }));
        }
        self.notify(jid, minion, state, ret);
    }

    /// Tells of the final states decided here once they are stored (see [`Master::set_slot`]):
    /// each as the store holds it, then each job's end, after every one of its slots.
    pub(crate) fn report_stored_finals(&mut self) {
        for (jid, slots) in self.pending.take_unreported() {
            for slot in slots {
                self.tell_move(&jid, &slot.minion, slot.state, slot.ret);
            }
            self.finish_if_done(&jid);
        }
    }

    /// Queues a state change for the job's watchers; sent batched by [`Master::flush`].
    pub(crate) fn notify(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        let Some(job) = self.jobs.get_mut(jid) else { return };
        let update = JobUpdate { jid: jid.to_owned(), minion: minion.to_owned(), state, ret };
        self.watchers.update(&job.watchers, update);
    }

    pub(crate) fn finish_if_done(&mut self, jid: &str) {
        // A final state not yet told holds the job's end back (its `ret` comes first).
        let Some(job) = self.jobs.get(jid) else { return };
        if job.is_done() && !self.pending.holds_final_of(jid) {
            // Announced while still live, so the bus can tell who may see it.
            let ended = crate::core::jobs::how_it_ended(job);
            self.emit(format!("halite/job/{jid}/done"), ended);
            // Its events are heard while it lives (who may receive them depends on it).
            self.hear_events();
            if let Some(job) = self.jobs.remove(jid) {
                self.watchers.done(job.watchers, jid);
            }
        }
    }

    /// Sends each watcher its batched updates, then its finished jobs. Updates a client is too
    /// slow to take are counted and reported in `job_done.missed` (the client then reads the
    /// job); a client that cannot even take `job_done` is disconnected, so it never believes a
    /// partial result complete.
    pub(crate) fn send_watcher_batches(&mut self) {
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
}
