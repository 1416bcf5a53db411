//! Job slots changing state: every change is recorded for the group commit, and as values for
//! those that listen: the move ([`SlotChange`]: the bus, the job's watchers, the job's end) and,
//! for a final state, the end ([`SlotMoved`]: metrics, rollouts, deployments). The loop hands
//! them to their listeners (`listeners.rs`): this file calls none of them.

use halite_protocol::message::{JobReturn, MinionJobState};
use tracing::debug;

use crate::core::hearing::SlotChange;
use crate::core::jobs::SlotMoved;
use crate::core::writes::Unreported;
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
    /// group commit and records the move for its listeners. Nothing here waits or fails: the
    /// write is the step's.
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

    /// Records a slot's move, whichever master decided it, for the bus, the job's watchers and
    /// the job's end (told by the loop: `Master::tell_moves`), and its end for the listeners of
    /// slot ends.
    pub(crate) fn slot_moved(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if state.is_final() {
            self.slot_ended(jid, minion, state, &ret);
        }
        self.hearing.slot_changed(SlotChange { jid: jid.to_owned(), minion: minion.to_owned(), state, ret });
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

    /// Records the final states decided here once they are stored (see [`Master::set_slot`]),
    /// each as the store holds it, for the bus and the jobs' watchers; each job's end is looked
    /// at after every one of its slots.
    pub(crate) fn report_stored_finals(&mut self) {
        for (jid, slots) in self.pending.take_unreported() {
            for slot in slots {
                let change = SlotChange { jid: jid.clone(), minion: slot.minion, state: slot.state, ret: slot.ret };
                self.hearing.slot_changed(change);
            }
        }
    }
}
