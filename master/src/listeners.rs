//! What the loop hands, at the end of each step, to the concerns that listen to what the step
//! decided: each slot that ended ([`SlotMoved`]) and each event published. The slot code
//! records a slot's end and tells the bus and the job's watchers, and `emit` publishes on the
//! bus; neither calls the metrics, the rollouts, the deployments or the groups. The loop
//! (`Master::step`) hands them what was recorded here, in a fixed order.
//!
//! It decides nothing itself, nor advances rollouts or deployment groups: those run after it
//! in the step, from what their listeners noted.

use tracing::warn;

use crate::core::jobs::SlotMoved;
use crate::net::Net;
use crate::server::Master;
use crate::store::Store;

impl<S: Store, N: Net> Master<S, N> {
    /// Hands each slot end recorded since the last call to its listeners, move by move, in
    /// this order: the metrics; the job's rollout (its next targets may start: decided by
    /// `advance_rollouts`, after the wait counted from the move); the deployment riding on a
    /// `deploy.apply` job (stored and announced now, so its group, which hears the
    /// announcement, moves on in the same step).
    pub(crate) async fn hear_moves(&mut self) {
        for moved in self.hearing.take_moves() {
            self.count_slot_end(&moved);
            self.rollout_target_finished(&moved.jid, moved.at);
            if moved.deploy {
                if let Err(error) = self.deploy_job_finished(&moved.jid, moved.state, moved.ret.as_ref()).await {
                    warn!(%error, jid = %moved.jid, minion = %moved.minion, "recording a deployment's result failed");
                }
            }
        }
    }

    /// Hands each event published since the last call to the rollouts (their `abort_on`), then
    /// to the deployment groups (their `abort_on`, and their members' deployments).
    ///
    /// Called at the end of the step, and also before a job joins or leaves the table: a
    /// rollout hears only the events published after it started, and an event about a job is
    /// judged (who may receive it) while the job lives.
    pub(crate) fn hear_events(&mut self) {
        for (tag, data) in self.hearing.take_events() {
            self.rollouts_hear(&tag, &data);
            self.groups_hear(&tag, &data);
        }
    }

    /// Counts a slot's end, and the round trip of one that ended with a return.
    fn count_slot_end(&self, moved: &SlotMoved) {
        let metrics = self.metrics.get();
        metrics.slots_final.get_or_create(&crate::metrics::State { state: moved.state.as_str() }).inc();
        if moved.returned {
            let ms = moved.at_ms.saturating_sub(moved.created_at_ms);
            metrics.round_trip_seconds.observe(ms as f64 / 1000.0);
        }
    }
}
