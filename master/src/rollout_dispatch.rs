//! Rollouts carried out: the master asks each live rollout what to do ([`RolloutRun::decide`])
//! at the end of every step in which one of its targets finished, when its wait ends (waits,
//! restarts), and after a resume; then starts targets, or stops the rollout. Pause, resume,
//! cancel and abort events change where a rollout is; each change is stored before it is
//! answered, announced on the bus (`halite/job/<jid>/rollout/...`) and to the other masters.
//!
//! Rollouts listen: the loop hands them each target's end and each event
//! (`Master::hear_moves`, `Master::hear_events`) before it advances them; neither the slot
//! code nor `emit` calls them.
//!
//! With several masters, every master holding the job decides alike from the same slots and
//! starts the targets it serves (and those nobody serves); the window then holds within the
//! time an announcement takes.

use std::time::{Duration, Instant};

use halite_protocol::message::{MinionJobState, RolloutState, RolloutStatus};
use serde_json::json;
use tracing::{info, warn};

use crate::core::asks::{Ask, RolloutCause, RolloutChange};
use crate::core::rollout::Decision;
use crate::net::Net;
use crate::server::Master;
use crate::store::{ClusterChange, Store, StoreError};

impl<S: Store, N: Net> Master<S, N> {
    /// Stops the rollouts an event aborted in this step. Each stop is stored before it acts
    /// ([`Master::rollout_stored`]): the loop answers it before any rollout is decided.
    pub(crate) fn stop_aborted_rollouts(&mut self) {
        let mut stopping = std::collections::HashSet::new();
        for (jid, reason) in self.rollout_queue.take_aborts() {
            // Stopped for the first event that aborted it: the others find it stopped.
            if !stopping.contains(&jid) && self.stop_rollout(&jid, reason, RolloutCause::Aborted) {
                stopping.insert(jid);
            }
        }
    }

    /// Decides every rollout whose job changed in this step, and when woken by time those whose
    /// wait has passed.
    pub(crate) fn advance_rollouts(&mut self, tick: bool) {
        let mut due = self.rollout_queue.take_due();
        if tick {
            let now = self.clock.now();
            let waited = self
                .jobs
                .rollout_jobs()
                .filter(|job| job.rollout.as_ref().and_then(|run| run.not_before).is_some_and(|at| at <= now));
            due.extend(waited.map(|job| job.record.jid.clone()));
        }
        for jid in due {
            self.advance_rollout(&jid);
        }
    }

    /// Carries out what the rollout decides, again until it decides nothing: a target that
    /// started offline (waiting for its TTL, or ended `offline`) leaves its place to the next.
    fn advance_rollout(&mut self, jid: &str) {
        // A wait that has passed is done with: it no longer wakes the loop.
        let now = self.clock.now();
        if let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) {
            run.not_before = run.not_before.filter(|at| *at > now);
        }
        loop {
            let now = self.clock.now();
            let Some(job) = self.jobs.get(jid) else { return };
            let Some(run) = &job.rollout else { return };
            match run.decide(job.slots(), now) {
                Decision::Nothing => return,
                Decision::Stop(reason) => {
                    self.stop_rollout(jid, reason, RolloutCause::Decided);
                    return;
                }
                Decision::Start(ids) => {
                    let mine: Vec<String> = ids.into_iter().filter(|id| !self.served_elsewhere(id)).collect();
                    if mine.is_empty() {
                        // The masters serving them start them.
                        return;
                    }
                    for id in &mine {
                        self.start_target(jid, id);
                    }
                    // A target that ended at once (offline) is heard before deciding again: the
                    // rollout's wait counts from its end. (A rollout's job is never a
                    // deployment's: the loop records deployments after the rollouts.)
                    self.hear_moves();
                    self.emit_shared(format!("halite/job/{jid}/rollout/started"), json!({ "minions": mine }));
                }
            }
        }
    }

    /// Starts one queued target: sent if it is connected, waiting for its TTL if not (offline
    /// without a TTL ends it `offline`).
    fn start_target(&mut self, jid: &str, minion: &str) {
        let now = self.clock.now();
        let Some(job) = self.jobs.get(jid) else { return };
        let ttl = Duration::from_millis(job.record.ttl_ms);
        match self.sessions.peer_of(minion) {
            Some(peer) => {
                self.slots().set(jid, minion, MinionJobState::Sent, None);
                self.deliver(jid, minion, peer);
            }
            None if !ttl.is_zero() => {
                self.slots().set(jid, minion, MinionJobState::Waiting, None);
                self.jobs.set_deadline(jid, minion, Some(now + ttl));
            }
            None => self.slots().set(jid, minion, MinionJobState::Offline, None),
        }
    }

    /// A target of a rollout job reached a final state `at`: the next may start (after the
    /// wait). A listener of slot ends (see `Master::hear_moves`).
    pub(crate) fn rollout_target_finished(&mut self, jid: &str, at: Instant) {
        if let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) {
            run.target_finished(at);
            self.rollout_queue.due(jid);
        }
    }

    /// Stops a rollout for good, once stored: its queued targets end `skipped` (or, for a
    /// cancelled job, cancelled by the cancel that follows). Whether a stop was asked for (a
    /// rollout already stopped, or none, asks nothing).
    pub(crate) fn stop_rollout(&mut self, jid: &str, reason: String, cause: RolloutCause) -> bool {
        let Some(status) = self.rollout_change(jid, RolloutState::Stopped, Some(reason)) else { return false };
        self.asks.push(Ask::SetRollout(Box::new(RolloutChange { jid: jid.to_owned(), status, cause })));
        true
    }

    /// Where a live rollout goes if moved to `state` (a stopped one stays stopped), or `None`
    /// when nothing would change.
    pub(crate) fn rollout_change(
        &self,
        jid: &str,
        state: RolloutState,
        reason: Option<String>,
    ) -> Option<RolloutStatus> {
        let run = self.jobs.get(jid).and_then(|job| job.rollout.as_ref())?;
        if run.status.state == RolloutState::Stopped || run.status.state == state {
            return None;
        }
        Some(RolloutStatus { spec: run.status.spec.clone(), state, reason })
    }

    /// A rollout's move was written (or not): stored, it is taken, announced on the bus and to
    /// the other masters, and what caused it goes on.
    pub(crate) fn rollout_stored(&mut self, change: RolloutChange, stored: Result<(), StoreError>) {
        let RolloutChange { jid, status, cause } = change;
        if let Err(error) = stored {
            match cause {
                RolloutCause::Aborted => warn!(%error, %jid, "stopping a rollout failed"),
                RolloutCause::Decided => {
                    warn!(%error, %jid, "advancing a rollout failed; tried again in a second");
                    let retry = self.clock.now() + Duration::from_secs(1);
                    if let Some(run) = self.jobs.get_mut(&jid).and_then(|job| job.rollout.as_mut()) {
                        run.not_before = Some(retry);
                    }
                }
                // Nothing was cancelled: the client may cancel again.
                RolloutCause::Cancelled => warn!(%error, %jid, "store failure while cancelling a job"),
            }
            return;
        }
        let reason = status.reason.clone().unwrap_or_default();
        if self.rollout_change(&jid, status.state, status.reason.clone()).is_some() {
            self.rollout_changed(&jid, status);
        }
        match cause {
            RolloutCause::Aborted | RolloutCause::Decided => {
                info!(%jid, %reason, "rollout stopped");
                self.slots().skip_queued(&jid);
            }
            RolloutCause::Cancelled => self.cancel_after_rollout(&jid),
        }
    }

    /// A live rollout's stored move (`status`): taken, announced on the bus and to the other
    /// masters, and the rollout decided again.
    pub(crate) fn rollout_changed(&mut self, jid: &str, status: RolloutStatus) {
        let (state, reason) = (status.state, status.reason.clone());
        let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) else { return };
        run.status = status;
        let word = match state {
            RolloutState::Running => "resumed",
            RolloutState::Paused => "paused",
            RolloutState::Stopped => "stopped",
        };
        self.emit(format!("halite/job/{jid}/rollout/{word}"), json!({ "reason": reason }));
        self.tell_masters(ClusterChange::Rollout { jid: jid.to_owned() });
        self.rollout_queue.due(jid);
    }

    /// Another master changed a rollout: where it is is reread ([`Master::rollout_reread`]).
    pub(crate) fn rollout_changed_elsewhere(&mut self, jid: &str) {
        if self.jobs.get(jid).is_some_and(|job| job.rollout.is_some()) {
            self.asks.push(Ask::ReadRollout { jid: jid.to_owned() });
        }
    }

    /// Where a rollout another master changed is, as stored (`None`: gone): taken. A store that
    /// did not answer means the other masters' changes may be missed: everything is reread.
    pub(crate) fn rollout_reread(&mut self, jid: &str, stored: Result<Option<RolloutStatus>, StoreError>) {
        let status = match stored {
            Ok(Some(status)) => status,
            Ok(None) => return,
            Err(error) => return self.cluster_read_failed(&error),
        };
        let stopped = status.state == RolloutState::Stopped;
        let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) else { return };
        run.status = status;
        if stopped {
            self.slots().skip_queued(jid);
        }
        self.rollout_queue.due(jid);
    }
}
