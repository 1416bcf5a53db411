//! The jobs a client follows: per job, the updates received and not yet handed out, whether
//! the job ended, and whether any update was missed on the way (then the job is read back at
//! its end, so every minion's final state is still handed out once).
//!
//! The driver fills them as messages arrive; [`crate::Client::next_job_event`] empties them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use halite_protocol::message::{JobDetail, JobUpdate};
use tokio::sync::Notify;

use crate::ClientError;

/// Updates held for one job before further ones are dropped (and read back at the end): a
/// job's updates are a few per target, so only a consumer that stopped reading reaches it.
const MAX_QUEUED: usize = 65_536;

/// Ended jobs nobody read to their end are kept for this many more jobs, then forgotten.
const MAX_ENDED: usize = 1_024;

/// One followed job.
#[derive(Default)]
pub(crate) struct Follow {
    state: Mutex<FollowState>,
    /// Woken when the state changes.
    pub(crate) changed: Notify,
}

#[derive(Default)]
pub(crate) struct FollowState {
    /// Received, not yet handed out.
    pub(crate) queue: VecDeque<JobUpdate>,
    /// Minions whose final state was received (so a read-back adds only the others).
    pub(crate) finals_received: HashSet<String>,
    /// Minions whose final state was handed out.
    pub(crate) finals_handed: HashSet<String>,
    /// The job ended.
    pub(crate) done: bool,
    /// Updates were missed (by the master's queue for this client, or this one).
    pub(crate) missed: bool,
    /// The master refused something about this job.
    pub(crate) error: Option<ClientError>,
}

impl FollowState {
    /// A received update.
    pub(crate) fn push(&mut self, update: JobUpdate) {
        if update.state.is_final() && !self.finals_received.insert(update.minion.clone()) {
            return;
        }
        if self.queue.len() >= MAX_QUEUED {
            self.missed = true;
            // Read back at the end, from the job itself.
            if update.state.is_final() {
                self.finals_received.remove(&update.minion);
            }
            return;
        }
        self.queue.push_back(update);
    }

    /// The job as the master shows it: final states not yet received are added, and a job
    /// whose every minion is final has ended.
    pub(crate) fn apply(&mut self, detail: JobDetail) {
        let jid = detail.summary.jid.clone();
        let ended = !detail.minions.is_empty() && detail.minions.iter().all(|m| m.state.is_final());
        for minion in detail.minions.into_iter().filter(|m| m.state.is_final()) {
            if self.finals_handed.contains(&minion.minion) || self.finals_received.contains(&minion.minion) {
                continue;
            }
            self.finals_received.insert(minion.minion.clone());
            self.queue.push_back(JobUpdate {
                jid: jid.clone(),
                minion: minion.minion,
                state: minion.state,
                ret: minion.ret,
            });
        }
        if ended {
            self.done = true;
        }
    }
}

/// Every followed job of one client, shared by its handles and its driver.
#[derive(Default)]
pub(crate) struct Follows {
    jobs: Mutex<HashMap<String, Arc<Follow>>>,
    /// Ended jobs in the order they ended, to forget the oldest unread ones.
    ended: Mutex<VecDeque<String>>,
}

impl Follow {
    pub(crate) fn lock(&self) -> MutexGuard<'_, FollowState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the state and wakes whoever waits on it.
    pub(crate) fn update(&self, change: impl FnOnce(&mut FollowState)) {
        change(&mut self.lock());
        self.changed.notify_waiters();
    }
}

impl Follows {
    fn jobs(&self) -> MutexGuard<'_, HashMap<String, Arc<Follow>>> {
        self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The job's follow, if it is followed.
    pub(crate) fn get(&self, jid: &str) -> Option<Arc<Follow>> {
        self.jobs().get(jid).cloned()
    }

    /// Follows a job (if not already); whether this call started following it.
    pub(crate) fn start(&self, jid: &str) -> bool {
        let mut jobs = self.jobs();
        if jobs.contains_key(jid) {
            return false;
        }
        jobs.insert(jid.to_owned(), Arc::default());
        true
    }

    /// Stops following a job.
    pub(crate) fn forget(&self, jid: &str) {
        self.jobs().remove(jid);
    }

    /// The job ended: kept until read to its end, or until `MAX_ENDED` more jobs have ended.
    pub(crate) fn ended(&self, jid: &str) {
        let mut ended = self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ended.push_back(jid.to_owned());
        while ended.len() > MAX_ENDED {
            if let Some(old) = ended.pop_front() {
                if self.get(&old).is_some_and(|follow| follow.lock().done) {
                    self.forget(&old);
                }
            }
        }
    }

    /// The jobs followed that have not ended (to watch again after a reconnect).
    pub(crate) fn unfinished(&self) -> Vec<String> {
        self.jobs().iter().filter(|(_, follow)| !follow.lock().done).map(|(jid, _)| jid.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_protocol::message::{JobSummary, MinionJob, MinionJobState, Target, TargetKind};

    fn update(minion: &str, state: MinionJobState) -> JobUpdate {
        JobUpdate { jid: "j1".into(), minion: minion.into(), state, ret: None }
    }

    fn detail(states: &[(&str, MinionJobState)]) -> JobDetail {
        JobDetail {
            summary: JobSummary {
                jid: "j1".into(),
                function: "test.ping".into(),
                target: Target { kind: TargetKind::Glob, expr: "*".into() },
                caller: "root".into(),
                created_at_ms: 0,
                states: Default::default(),
                rollout: None,
            },
            args: Vec::new(),
            kwargs: Default::default(),
            minions: states
                .iter()
                .map(|(m, s)| MinionJob { minion: (*m).into(), state: *s, ret: None, late: false, away: None })
                .collect(),
        }
    }

    #[test]
    fn a_final_state_is_queued_once_whether_received_or_read_back() {
        let mut state = FollowState::default();
        state.push(update("a", MinionJobState::Sent));
        state.push(update("a", MinionJobState::Returned));
        state.push(update("a", MinionJobState::Returned));
        state.apply(detail(&[("a", MinionJobState::Returned), ("b", MinionJobState::Running)]));
        assert_eq!(state.queue.len(), 2, "the repeated final state and the read-back add nothing");
        assert!(!state.done, "b is still running");
        state.apply(detail(&[("a", MinionJobState::Returned), ("b", MinionJobState::TimedOut)]));
        let minions: Vec<_> = state.queue.iter().map(|u| (u.minion.as_str(), u.state)).collect();
        assert_eq!(
            minions,
            [("a", MinionJobState::Sent), ("a", MinionJobState::Returned), ("b", MinionJobState::TimedOut)]
        );
        assert!(state.done, "every minion is final");
    }

    #[test]
    fn updates_past_the_cap_are_missed_and_their_final_states_read_back() {
        let mut state = FollowState::default();
        for i in 0..MAX_QUEUED {
            state.push(update(&format!("m{i}"), MinionJobState::Sent));
        }
        assert!(!state.missed);
        state.push(update("late", MinionJobState::Returned));
        assert!(state.missed, "a full queue drops and says so");
        assert_eq!(state.queue.len(), MAX_QUEUED, "memory stays bounded");
        state.queue.clear();
        state.apply(detail(&[("late", MinionJobState::Returned)]));
        assert_eq!(state.queue.len(), 1, "the dropped final state comes back from the job");
    }

    #[test]
    fn ended_jobs_nobody_reads_are_forgotten_past_the_limit() {
        let follows = Follows::default();
        for i in 0..=MAX_ENDED {
            let jid = format!("j{i}");
            assert!(follows.start(&jid));
            follows.get(&jid).unwrap().update(|s| s.done = true);
            follows.ended(&jid);
        }
        assert!(follows.get("j0").is_none(), "the oldest ended job is forgotten");
        assert!(follows.get("j1").is_some());
        assert!(!follows.start("j1"), "already followed");
    }
}
