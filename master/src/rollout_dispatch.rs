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

use crate::authz::JobAccess;
use crate::core::rollout::Decision;
use crate::net::Net;
use crate::request_error::RequestError;
use crate::server::Master;
use crate::store::{ClusterChange, Store, StoreError};

impl<S: Store, N: Net> Master<S, N> {
    /// Decides every rollout whose job changed in this step, and when woken by time those whose wait
    /// has passed.
    pub(crate) async fn advance_rollouts(&mut self, tick: bool) {
        for (jid, reason) in self.rollout_queue.take_aborts() {
            if let Err(error) = self.stop_rollout(&jid, reason).await {
                warn!(%error, %jid, "stopping a rollout failed");
            }
        }
        // The targets the stopped rollouts skipped are heard before deciding what is due.
        self.hear_moves();
        self.record_deployment_ends().await;
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
            if let Err(error) = self.advance_rollout(&jid).await {
                warn!(%error, %jid, "advancing a rollout failed; tried again in a second");
                let retry = self.clock.now() + Duration::from_secs(1);
                if let Some(run) = self.jobs.get_mut(&jid).and_then(|job| job.rollout.as_mut()) {
                    run.not_before = Some(retry);
                }
            }
        }
    }

    /// Carries out what the rollout decides, again until it decides nothing: a target that
    /// started offline (waiting for its TTL, or ended `offline`) leaves its place to the next.
    async fn advance_rollout(&mut self, jid: &str) -> Result<(), StoreError> {
        // A wait that has passed is done with: it no longer wakes the loop.
        let now = self.clock.now();
        if let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) {
            run.not_before = run.not_before.filter(|at| *at > now);
        }
        loop {
            let now = self.clock.now();
            let Some(job) = self.jobs.get(jid) else { return Ok(()) };
            let Some(run) = &job.rollout else { return Ok(()) };
            match run.decide(job.slots(), now) {
                Decision::Nothing => return Ok(()),
                Decision::Stop(reason) => return self.stop_rollout(jid, reason).await,
                Decision::Start(ids) => {
                    let mine: Vec<String> = ids.into_iter().filter(|id| !self.served_elsewhere(id)).collect();
                    if mine.is_empty() {
                        // The masters serving them start them.
                        return Ok(());
                    }
                    for id in &mine {
                        self.start_target(jid, id);
                    }
                    // A target that ended at once (offline) is heard before deciding again: the
                    // rollout's wait counts from its end.
                    self.hear_moves();
                    self.record_deployment_ends().await;
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

    /// Stops a rollout for good: its queued targets end `skipped`.
    pub(crate) async fn stop_rollout(&mut self, jid: &str, reason: String) -> Result<(), StoreError> {
        if !self.change_rollout(jid, RolloutState::Stopped, Some(reason.clone())).await? {
            return Ok(());
        }
        info!(%jid, %reason, "rollout stopped");
        self.slots().skip_queued(jid);
        Ok(())
    }

    /// Moves a live rollout to `state` (a stopped one stays stopped): stored, announced on the
    /// bus and to the other masters. Whether it changed.
    async fn change_rollout(
        &mut self,
        jid: &str,
        state: RolloutState,
        reason: Option<String>,
    ) -> Result<bool, StoreError> {
        let Some(run) = self.jobs.get(jid).and_then(|job| job.rollout.as_ref()) else { return Ok(false) };
        if run.status.state == RolloutState::Stopped || run.status.state == state {
            return Ok(false);
        }
        let status = RolloutStatus { spec: run.status.spec.clone(), state, reason: reason.clone() };
        self.store.set_rollout(jid, &status).await?;
        if let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) {
            run.status = status;
        }
        let word = match state {
            RolloutState::Running => "resumed",
            RolloutState::Paused => "paused",
            RolloutState::Stopped => "stopped",
        };
        self.emit(format!("halite/job/{jid}/rollout/{word}"), json!({ "reason": reason }));
        self.tell_masters(ClusterChange::Rollout { jid: jid.to_owned() });
        self.rollout_queue.due(jid);
        Ok(true)
    }

    /// Another master changed a rollout: reread where it is.
    pub(crate) async fn rollout_changed_elsewhere(&mut self, jid: &str) -> Result<(), StoreError> {
        if self.jobs.get(jid).is_none_or(|job| job.rollout.is_none()) {
            return Ok(());
        }
        let Some(status) = self.store.job(jid).await?.and_then(|detail| detail.summary.rollout) else {
            return Ok(());
        };
        let stopped = status.state == RolloutState::Stopped;
        if let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) {
            run.status = status;
        }
        if stopped {
            self.slots().skip_queued(jid);
        }
        self.rollout_queue.due(jid);
        Ok(())
    }

    /// A client's pause or resume of a job it may see.
    pub(crate) async fn pause_or_resume(
        &mut self,
        jid: &str,
        pause: bool,
        access: JobAccess,
    ) -> Result<(), RequestError> {
        let job = match access {
            JobAccess::None => None,
            JobAccess::See => {
                let verb = if pause { "pause" } else { "resume" };
                return Err(RequestError::forbidden(format!(
                    "not allowed to {verb} job {jid}: only its publisher, an administrator or rules allowing its function on every target may"
                )));
            }
            JobAccess::Control => self.jobs.get(jid),
        };
        let Some(job) = job else {
            return Err(RequestError::not_found(format!("no running job {jid}")));
        };
        let Some(run) = &job.rollout else {
            return Err(RequestError::bad_request(format!(
                "job {jid} has no rollout to pause or resume (it was sent to every target at once)"
            )));
        };
        if run.status.state == RolloutState::Stopped {
            let why = run.status.reason.clone().unwrap_or_default();
            return Err(RequestError::bad_request(format!("the rollout of job {jid} has stopped: {why}")));
        }
        let (state, reason) = if pause {
            (RolloutState::Paused, Some("paused by a client".to_owned()))
        } else {
            (RolloutState::Running, None)
        };
        self.change_rollout(jid, state, reason).await.map_err(RequestError::from)?;
        Ok(())
    }

    /// A cancelled rollout starts nothing more.
    pub(crate) async fn cancel_rollout(&mut self, jid: &str) -> Result<(), StoreError> {
        self.change_rollout(jid, RolloutState::Stopped, Some("cancelled".to_owned())).await.map(drop)
    }
}
