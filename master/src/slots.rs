//! Job slots changing state, and who hears of it: every change is recorded for the group
//! commit, announced on the bus, queued for the job's watchers and, at the end of the step,
//! sent to them in batches within the message cap.

use halite_protocol::message::{self, JobDone, JobReturn, JobUpdate, Message, MinionJobState};
use halite_transport::SendError;
use serde_json::json;
use tracing::{debug, warn};

use crate::limits;
use crate::net::Net;
use crate::server::Master;
use crate::store::{StateChange, Store};
use crate::writes::Unreported;

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
        self.pending.states.push(change);
    }

    /// Moves a minion's slot to `state` if the transition table allows it, stores it, streams
    /// it to watchers, and finishes the job when every slot is final.
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
        if state.is_final() && self.cluster.shared {
            // Another master may store a final state for this slot first (the store keeps the
            // first): its watchers and bus hear the one stored, once, after the write.
            self.slot_ended(jid, state, &ret);
            let slot = Unreported { minion: minion.to_owned(), state, ret };
            self.pending.unreported.entry(jid.to_owned()).or_default().push(slot);
            return;
        }
        self.slot_moved(jid, minion, state, ret);
    }

    /// What follows a slot's move, whichever master decided it: the bus, the deployment riding
    /// on the job, the job's watchers, and the job's end when every slot is final.
    pub(crate) fn slot_moved(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if state.is_final() {
            self.slot_ended(jid, state, &ret);
        }
        self.tell_slot(jid, minion, state, ret);
    }

    /// What a slot's end changes in this master's own work: the rollout's next targets, the
    /// metrics, the deployment riding on the job.
    fn slot_ended(&mut self, jid: &str, state: MinionJobState, ret: &Option<JobReturn>) {
        self.rollout_target_finished(jid);
        let metrics = self.metrics.get();
        metrics.slots_final.get_or_create(&crate::metrics::State { state: state.as_str() }).inc();
        if let (Some(job), Some(_)) = (self.jobs.get(jid), ret) {
            let ms = self.clock.wall_ms().saturating_sub(job.record.created_at_ms);
            metrics.round_trip_seconds.observe(ms as f64 / 1000.0);
        }
        // Every deploy.apply job's end: a deployment may ride on it (see deploy_job_finished).
        if self.jobs.get(jid).is_some_and(|job| job.record.function == crate::deploy::DEPLOY_FUNCTION) {
            self.pending.finished_slots.push((jid.to_owned(), state, ret.clone()));
        }
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
        for (jid, slots) in std::mem::take(&mut self.pending.unreported) {
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
        if job.is_done() && !self.pending.unreported.contains_key(jid) {
            // Announced while still live, so the bus can tell who may see it.
            let ended = crate::jobs::how_it_ended(job);
            self.emit(format!("halite/job/{jid}/done"), ended);
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
