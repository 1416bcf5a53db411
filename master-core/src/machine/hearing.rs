//! What the loop hands to the concerns that listen to what a step decided (recorded in
//! `core/hearing.rs`): each slot that moved, to the bus and the job's watchers, then the job's
//! end ([`Core::tell_moves`], after each input); each slot that ended
//! ([`crate::core::jobs::SlotMoved`]) to the metrics, rollouts and deployments, and each event
//! published to the rollouts and groups (at
//! the end of the step). The slot code and `emit` call none of them; the loop (`Master::step`)
//! hands them what was recorded, in a fixed order.
//!
//! It decides nothing itself and awaits nothing, nor records deployments or advances rollouts
//! and deployment groups: the loop does those after it in the step, from what their listeners
//! noted.

use halite_protocol::message::JobUpdate;
use serde_json::json;

use super::Core;

impl Core {
    /// Hands each slot end recorded since the last call to its listeners, move by move, in
    /// this order: the metrics; the job's rollout (its next targets may start: decided by
    /// `advance_rollouts`, after the wait counted from the move); the deployment riding on a
    /// `deploy.apply` job (noted for the loop, which stores and announces it right after:
    /// `DeployDesk::record_deployment_ends`, so its group, which hears the announcement, moves on
    /// in the same step).
    pub fn hear_moves(&mut self) {
        // Told first, as each was decided before its end is heard.
        self.tell_moves();
        for moved in self.hearing.take_moves() {
            self.metrics.get().slot_ended(&moved);
            self.rollouts().target_finished(&moved.jid, moved.at);
            if moved.deploy {
                self.hearing.deployment_ended(moved);
            }
        }
    }

    /// Tells each slot move recorded since the last call to the bus (a final state) and the
    /// job's watchers, then ends each job they finished: its `done` on the bus, its watchers
    /// told (at the end of the step), and the job leaves the table.
    pub fn tell_moves(&mut self) {
        let (changes, may_end) = self.hearing.take_changes();
        for change in changes {
            if change.state.is_final() {
                let data = json!({ "state": change.state.as_str(), "ret": change.ret });
                self.emit(format!("halite/job/{}/ret/{}", change.jid, change.minion), data);
            }
            let Some(job) = self.jobs.get_mut(&change.jid) else { continue };
            let update = JobUpdate { jid: change.jid, minion: change.minion, state: change.state, ret: change.ret };
            self.watchers.update(&job.watchers, update);
        }
        for jid in may_end {
            self.end_if_done(&jid);
        }
    }

    /// Ends a job whose every slot is final and told.
    fn end_if_done(&mut self, jid: &str) {
        // A final state not yet told holds the job's end back (its `ret` comes first).
        let Some(job) = self.jobs.get(jid) else { return };
        if job.is_done() && !self.pending.holds_final_of(jid) {
            // Announced while still live, so the bus can tell who may see it.
            let ended = crate::core::jobs::how_it_ended(job);
            let entry = crate::core::audit_log::job_end(job, &ended, self.now.wall_ms);
            self.audit_record(entry);
            self.emit(format!("halite/job/{jid}/done"), ended);
            // Its events are heard while it lives (who may receive them depends on it).
            self.hand_out_events();
            if let Some(job) = self.jobs.remove(jid) {
                self.watchers.done(job.watchers, jid);
            }
        }
    }

    /// Hands each event published since the last call to the rollouts (their `abort_on`), then
    /// to the deployment groups (their `abort_on`, and their members' deployments); the slot
    /// moves not yet told are told first, so their events are among them.
    ///
    /// Called at the end of the step, and also before a job joins or leaves the table: a
    /// rollout hears only the events published after it started, and an event about a job is
    /// judged (who may receive it) while the job lives.
    pub fn hear_events(&mut self) {
        self.tell_moves();
        self.hand_out_events();
    }

    fn hand_out_events(&mut self) {
        for (tag, data) in self.hearing.take_events() {
            let access = crate::authz::Access::of(&self.config, &self.registry, &self.jobs);
            let receives = |caller: &str, tag: &str, data: &_| access.caller_receives(caller, tag, data);
            let aborts = crate::core::rollout::aborted_by(&self.jobs, &tag, &data, receives);
            self.groups.hear(&tag, &data, receives);
            self.rollout_queue.abort(aborts);
        }
    }
}
