//! The live rollouts, as one concern: which to decide at the end of a step, what each decides,
//! where each goes when paused, resumed, stopped or changed by another master, and what follows
//! once that move is stored. [`Rollouts`] borrows the job table (each job holds its
//! [`RolloutRun`](crate::core::rollout::RolloutRun)) and the [`RolloutQueue`]; it returns what
//! to do as [`Effect`]s, and the loop carries them out (`machine/rollouts.rs`): a rollout's move
//! is stored before it is announced, and its targets start through the loop.
//!
//! With several masters, every master holding the job decides alike from the same slots and
//! starts the targets it serves (and those nobody serves); the window then holds within the
//! time an announcement takes.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use halite_protocol::message::{RolloutState, RolloutStatus};
use serde_json::json;
use tracing::{info, warn};

use crate::core::jobs::JobTable;
use crate::core::rollout::Decision;
use crate::core::rollout_queue::RolloutQueue;
use crate::outputs::asks::{Ask, RolloutCause, RolloutChange};
use crate::outputs::effects::Effect;
use crate::store::{ClusterChange, StoreError};

/// How long a rollout whose decided stop could not be stored waits before it decides again.
const STOP_RETRY: Duration = Duration::from_secs(1);

/// The live rollouts at `now`; see the module docs.
pub struct Rollouts<'a> {
    jobs: &'a mut JobTable,
    queue: &'a mut RolloutQueue,
    now: Instant,
}

impl<'a> Rollouts<'a> {
    pub fn new(jobs: &'a mut JobTable, queue: &'a mut RolloutQueue, now: Instant) -> Self {
        Rollouts { jobs, queue, now }
    }

    /// The stops of the rollouts an event aborted in this step: one per rollout, for the first
    /// event that aborted it (the others would find it stopped).
    pub fn aborted(&mut self) -> Vec<Effect> {
        let mut stopping = HashSet::new();
        let mut stops = Vec::new();
        for (jid, reason) in self.queue.take_aborts() {
            if stopping.contains(&jid) {
                continue;
            }
            if let Some(stop) = self.stop(&jid, reason, RolloutCause::Aborted) {
                stops.push(stop);
                stopping.insert(jid);
            }
        }
        stops
    }

    /// The rollouts to decide now: those whose job changed in this step, and, woken by time,
    /// those whose wait has passed. A wait that has passed is done with: it no longer wakes
    /// the loop.
    pub fn due(&mut self, woken_by_time: bool) -> Vec<String> {
        let mut due = self.queue.take_due();
        if woken_by_time {
            let now = self.now;
            let waited = self
                .jobs
                .rollout_jobs()
                .filter(|job| job.rollout.as_ref().and_then(|run| run.not_before).is_some_and(|at| at <= now));
            due.extend(waited.map(|job| job.record.jid.clone()));
        }
        for jid in &due {
            if let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) {
                run.not_before = run.not_before.filter(|at| *at > self.now);
            }
        }
        due.into_iter().collect()
    }

    /// What `jid`'s rollout does now, of the targets `serves` says this master starts: start
    /// them (and announce it), stop, or nothing. The loop carries out the starts, lets the
    /// targets that ended at once be heard, and asks again until nothing is left to do.
    pub fn decide(&mut self, jid: &str, serves: impl Fn(&str) -> bool) -> Vec<Effect> {
        let Some(job) = self.jobs.get(jid) else { return Vec::new() };
        let Some(run) = &job.rollout else { return Vec::new() };
        match run.decide(job.slots(), self.now) {
            Decision::Nothing => Vec::new(),
            Decision::Stop(reason) => self.stop(jid, reason, RolloutCause::Decided).into_iter().collect(),
            Decision::Start(ids) => {
                // The others are started by the masters serving them.
                let mine: Vec<String> = ids.into_iter().filter(|id| serves(id)).collect();
                if mine.is_empty() {
                    return Vec::new();
                }
                let mut effects: Vec<Effect> = mine
                    .iter()
                    .map(|minion| Effect::StartTarget { jid: jid.to_owned(), minion: minion.clone() })
                    .collect();
                let data = json!({ "minions": mine });
                effects.push(Effect::EmitShared { tag: format!("halite/job/{jid}/rollout/started"), data });
                effects
            }
        }
    }

    /// A target of a rollout job reached a final state `at`: the next may start after the
    /// wait, and the rollout is decided at the end of the step.
    pub fn target_finished(&mut self, jid: &str, at: Instant) {
        if let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) {
            run.target_finished(at);
            self.queue.due(jid);
        }
    }

    /// Stops a rollout for good, once stored: the store call to make, or `None` for a rollout
    /// already stopped, or none.
    pub fn stop(&self, jid: &str, reason: String, cause: RolloutCause) -> Option<Effect> {
        let status = self.change(jid, RolloutState::Stopped, Some(reason))?;
        Some(Effect::Ask(Ask::SetRollout(Box::new(RolloutChange { jid: jid.to_owned(), status, cause }))))
    }

    /// Where a live rollout goes if moved to `state` (a stopped one stays stopped), or `None`
    /// when nothing would change.
    pub fn change(&self, jid: &str, state: RolloutState, reason: Option<String>) -> Option<RolloutStatus> {
        let run = self.jobs.get(jid).and_then(|job| job.rollout.as_ref())?;
        if run.status.state == RolloutState::Stopped || run.status.state == state {
            return None;
        }
        Some(RolloutStatus { spec: run.status.spec.clone(), state, reason })
    }

    /// A rollout's move was written (or not). Stored, it is taken and announced, and what
    /// caused it goes on: an abort or a decided stop skips the queued targets, a cancel cancels.
    /// Not stored: an abort is logged, a decided stop is decided again a second later, and a
    /// cancel cancels nothing (the client may cancel again).
    pub fn stored(&mut self, change: RolloutChange, stored: Result<(), StoreError>) -> Vec<Effect> {
        let RolloutChange { jid, status, cause } = change;
        if let Err(error) = stored {
            match cause {
                RolloutCause::Aborted => warn!(%error, %jid, "stopping a rollout failed"),
                RolloutCause::Decided => {
                    warn!(%error, %jid, "advancing a rollout failed; tried again in a second");
                    if let Some(run) = self.jobs.get_mut(&jid).and_then(|job| job.rollout.as_mut()) {
                        run.not_before = Some(self.now + STOP_RETRY);
                    }
                }
                RolloutCause::Cancelled => warn!(%error, %jid, "store failure while cancelling a job"),
            }
            return Vec::new();
        }
        let reason = status.reason.clone().unwrap_or_default();
        let mut effects = Vec::new();
        if self.change(&jid, status.state, status.reason.clone()).is_some() {
            effects = self.changed(&jid, status);
        }
        match cause {
            RolloutCause::Aborted | RolloutCause::Decided => {
                info!(%jid, %reason, "rollout stopped");
                effects.push(Effect::SkipQueued { jid });
            }
            RolloutCause::Cancelled => effects.push(Effect::Cancel { jid }),
        }
        effects
    }

    /// A live rollout's stored move (`status`): taken, announced on the bus and to the other
    /// masters, and the rollout decided again.
    pub fn changed(&mut self, jid: &str, status: RolloutStatus) -> Vec<Effect> {
        let (state, reason) = (status.state, status.reason.clone());
        let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) else { return Vec::new() };
        run.status = status;
        self.queue.due(jid);
        let word = match state {
            RolloutState::Running => "resumed",
            RolloutState::Paused => "paused",
            RolloutState::Stopped => "stopped",
        };
        vec![
            Effect::Emit { tag: format!("halite/job/{jid}/rollout/{word}"), data: json!({ "reason": reason }) },
            Effect::Tell(ClusterChange::Rollout { jid: jid.to_owned() }),
        ]
    }

    /// Another master changed a rollout: where it is is reread, if this master holds it.
    pub fn changed_elsewhere(&self, jid: &str) -> Option<Effect> {
        let held = self.jobs.get(jid).is_some_and(|job| job.rollout.is_some());
        held.then(|| Effect::Ask(Ask::ReadRollout { jid: jid.to_owned() }))
    }

    /// Where a rollout another master changed is, as stored (`None`: gone): taken, and decided
    /// again; a stopped one's queued targets are skipped.
    pub fn reread(&mut self, jid: &str, status: Option<RolloutStatus>) -> Vec<Effect> {
        let Some(status) = status else { return Vec::new() };
        let stopped = status.state == RolloutState::Stopped;
        let Some(run) = self.jobs.get_mut(jid).and_then(|job| job.rollout.as_mut()) else { return Vec::new() };
        run.status = status;
        self.queue.due(jid);
        if stopped {
            vec![Effect::SkipQueued { jid: jid.to_owned() }]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use halite_protocol::message::{Amount, JobSpec, MinionJobState, Rollout, SignedJob, Target, TargetKind};

    use super::*;
    use crate::core::jobs::{LiveJob, Slot};
    use crate::core::rollout::RolloutRun;
    use crate::store::JobRecord;

    /// A table holding job `1`, rolled out one at a time to `a`, `b`, `c`, all queued.
    fn one_at_a_time() -> JobTable {
        let spec = JobSpec::new(Target { kind: TargetKind::Glob, expr: "*".into() }, "test.ping");
        let signed = SignedJob { body: Vec::new(), signature: Vec::new(), start_by_ms: None };
        let mut record = JobRecord::new("1".into(), spec, "root".into(), 0, signed);
        let rollout = Rollout { batch: Some(Amount::Count(1)), batch_wait_ms: 500, ..Rollout::default() };
        record.rollout = Some(RolloutRun::status_of(rollout));
        let queued = Slot { state: MinionJobState::Queued, deadline: None };
        let slots = ["a", "b", "c"].map(|id| (id.to_owned(), queued.clone())).into_iter().collect::<BTreeMap<_, _>>();
        let mut jobs = JobTable::default();
        jobs.insert(LiveJob::new(record, slots, Vec::new()));
        jobs
    }

    fn starts(effects: &[Effect]) -> Vec<&str> {
        effects
            .iter()
            .filter_map(|effect| match effect {
                Effect::StartTarget { minion, .. } => Some(minion.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_rollout_starts_only_the_targets_this_master_serves_and_announces_them() {
        let (mut jobs, mut queue, now) = (one_at_a_time(), RolloutQueue::default(), Instant::now());
        let mut rollouts = Rollouts::new(&mut jobs, &mut queue, now);
        let effects = rollouts.decide("1", |_| true);
        assert_eq!(starts(&effects), ["a"]);
        assert!(
            matches!(effects.last(), Some(Effect::EmitShared { tag, .. }) if tag == "halite/job/1/rollout/started")
        );
        assert!(rollouts.decide("1", |id| id != "a").is_empty(), "another master starts what it serves");
    }

    #[test]
    fn a_finished_target_makes_the_rollout_due_after_its_wait() {
        let (mut jobs, mut queue, now) = (one_at_a_time(), RolloutQueue::default(), Instant::now());
        let mut rollouts = Rollouts::new(&mut jobs, &mut queue, now);
        rollouts.target_finished("1", now);
        assert_eq!(rollouts.due(false), ["1"], "due at the end of the step");
        assert!(rollouts.due(false).is_empty(), "once");
        let later = now + Duration::from_millis(500);
        let mut rollouts = Rollouts::new(&mut jobs, &mut queue, later);
        assert_eq!(rollouts.due(true), ["1"], "woken by time once the wait has passed");
        assert!(rollouts.due(true).is_empty(), "a passed wait no longer wakes anything");
    }

    #[test]
    fn two_aborts_stop_a_rollout_once_and_the_stop_acts_only_once_stored() {
        let (mut jobs, mut queue, now) = (one_at_a_time(), RolloutQueue::default(), Instant::now());
        queue.abort([("1".to_owned(), "first".to_owned()), ("1".to_owned(), "second".to_owned())]);
        let mut rollouts = Rollouts::new(&mut jobs, &mut queue, now);
        let stops = rollouts.aborted();
        let [Effect::Ask(Ask::SetRollout(change))] = stops.as_slice() else { panic!("one stop to store") };
        assert_eq!(change.status.reason.as_deref(), Some("first"));
        let change = RolloutChange { jid: change.jid.clone(), status: change.status.clone(), cause: change.cause };

        let failed = rollouts.stored(
            RolloutChange { jid: "1".into(), status: change.status.clone(), cause: RolloutCause::Aborted },
            Err(StoreError::Unavailable("away".into())),
        );
        assert!(failed.is_empty(), "nothing acts on a stop that was not stored");
        let stored = rollouts.stored(change, Ok(()));
        assert!(matches!(&stored[0], Effect::Emit { tag, .. } if tag == "halite/job/1/rollout/stopped"));
        assert!(matches!(&stored[1], Effect::Tell(ClusterChange::Rollout { jid }) if jid == "1"));
        assert!(matches!(&stored[2], Effect::SkipQueued { jid } if jid == "1"));
        assert!(rollouts.stop("1", "again".into(), RolloutCause::Decided).is_none(), "stopped for good");
    }

    #[test]
    fn a_decided_stop_that_cannot_be_stored_is_decided_again_a_second_later() {
        let (mut jobs, mut queue, now) = (one_at_a_time(), RolloutQueue::default(), Instant::now());
        let mut rollouts = Rollouts::new(&mut jobs, &mut queue, now);
        let Some(Effect::Ask(Ask::SetRollout(change))) =
            rollouts.stop("1", "too many failures".into(), RolloutCause::Decided)
        else {
            panic!("a stop to store")
        };
        assert!(rollouts.stored(*change, Err(StoreError::Unavailable("away".into()))).is_empty());
        assert!(rollouts.due(true).is_empty(), "not before its retry");
        let mut rollouts = Rollouts::new(&mut jobs, &mut queue, now + STOP_RETRY);
        assert_eq!(rollouts.due(true), ["1"]);
    }
}
