//! Jobs in flight: which minion is in which state, when each must finish, who is watching.
//!
//! [`JobTable`] is the only code that changes a slot. States move forward only
//! ([`transition_allowed`]); deadlines live in one ordered index, so a wake costs the number of
//! deadlines that passed, not the number of slots.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use halite_protocol::message::{JobReturn, JobSummary, Message, MinionJob, MinionJobState, SignedJob};
use halite_transport::PeerId;

use crate::core::rollout::RolloutRun;
use crate::store::JobRecord;

/// One minion's part in a live job.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Current state.
    pub state: MinionJobState,
    /// When the state must have changed: the timeout for sent/running, the TTL for waiting.
    pub deadline: Option<Instant>,
}

/// A slot's move to a final state, as its listeners hear it at the end of the step (see
/// `Master::hear_moves`): the metrics, the job's rollout, the deployment riding on the job. What
/// they need of the job is copied here: a job whose last slot ended leaves the table at once.
/// Moves to other states are not recorded: no listener acts on them.
#[derive(Debug, Clone)]
pub struct SlotMoved {
    pub jid: String,
    pub minion: String,
    pub state: MinionJobState,
    /// The return, for a `deploy.apply` job only (the deployment reads it): a fan-out's
    /// returns are not copied.
    pub ret: Option<JobReturn>,
    /// Whether the slot ended with a return (its round trip is measured).
    pub returned: bool,
    /// When it moved: a rollout's wait counts from then.
    pub at: Instant,
    /// When it moved by the wall clock, and when its job was created (ms).
    pub at_ms: u64,
    pub created_at_ms: u64,
    /// Whether a deployment may ride on the job (a `deploy.apply` job).
    pub deploy: bool,
}

/// Whether a slot may move from `from` to `to`. Forward only: queued → waiting → sent →
/// running → a final state; a final state never changes. `sent → sent` and `running →
/// running` are redeliveries and change nothing but the deadline.
pub fn transition_allowed(from: MinionJobState, to: MinionJobState) -> bool {
    use MinionJobState::*;
    match from {
        _ if from.is_final() => false,
        Queued => to != Queued,
        Waiting => !matches!(to, Waiting | Queued),
        Sent => !matches!(to, Waiting | Queued),
        Running => !matches!(to, Waiting | Sent | Queued),
        _ => false,
    }
}

/// A job with at least one minion not yet in a final state.
#[derive(Debug)]
pub struct LiveJob {
    /// The job as published and stored.
    pub record: JobRecord,
    /// Every targeted minion (changed only through [`JobTable`]).
    minions: BTreeMap<String, Slot>,
    /// Clients to stream updates to.
    pub watchers: Vec<PeerId>,
    /// Whether the client on each connection may see this job, once asked (see
    /// `crate::authz::Access::peer_receives`).
    pub visible_to: HashMap<PeerId, bool>,
    /// How many minions are not yet in a final state (so finishing is O(1), not O(minions)).
    remaining: usize,
    /// Its rollout, when it has one.
    pub rollout: Option<RolloutRun>,
    /// Minions whose late return (after their slot ended) was told: told once.
    late_told: std::collections::BTreeSet<String>,
}

impl LiveJob {
    /// A live job.
    pub fn new(record: JobRecord, minions: BTreeMap<String, Slot>, watchers: Vec<PeerId>) -> Self {
        let remaining = minions.values().filter(|s| !s.state.is_final()).count();
        let rollout = record.rollout.clone().map(RolloutRun::new);
        LiveJob {
            record,
            minions,
            watchers,
            visible_to: HashMap::new(),
            remaining,
            rollout,
            late_told: Default::default(),
        }
    }

    /// Whether every minion is in a final state.
    pub fn is_done(&self) -> bool {
        self.remaining == 0
    }

    /// Every targeted minion's slot.
    pub fn slots(&self) -> &BTreeMap<String, Slot> {
        &self.minions
    }

    /// The minions the job went to: its slots but the names it listed that are no minion's
    /// (`unknown`), which say nothing of who may see or control it.
    pub fn targeted(&self) -> Vec<&str> {
        self.minions.iter().filter(|(_, s)| s.state != MinionJobState::Unknown).map(|(m, _)| m.as_str()).collect()
    }

    /// The deadline for a job sent now; none for a job without a timeout (`timeout_ms` 0: it
    /// runs until its minion returns, or it is cancelled).
    pub fn run_deadline(&self, now: Instant, grace: Duration) -> Option<Instant> {
        run_deadline(self.record.timeout_ms, now, grace)
    }
}

/// A finished job as its `done` event tells it: how many of its minions ended in each state,
/// and which minions did not return, with their state (the ones a watcher looks for, named
/// even when they never got the job: offline, unknown, expired).
pub fn how_it_ended(job: &LiveJob) -> serde_json::Value {
    let mut states: BTreeMap<&str, usize> = BTreeMap::new();
    let mut not_returned = serde_json::Map::new();
    for (minion, slot) in &job.minions {
        *states.entry(slot.state.as_str()).or_default() += 1;
        if slot.state != MinionJobState::Returned {
            not_returned.insert(minion.clone(), slot.state.as_str().into());
        }
    }
    serde_json::json!({ "minions": job.minions.len(), "states": states, "not_returned": not_returned })
}

/// The deadline of a job of `timeout_ms` sent now (none without a timeout).
pub fn run_deadline(timeout_ms: u64, now: Instant, grace: Duration) -> Option<Instant> {
    (timeout_ms > 0).then(|| now + Duration::from_millis(timeout_ms) + grace)
}

/// A job as sent to a minion: signed as published, with the master's time by which the minion
/// must start it (the slot's `deadline` less the `grace` the master waits for a late report),
/// so a minion that gets it after the master may have given it up never runs it.
pub fn job_message(
    signed: &SignedJob,
    deadline: Option<Instant>,
    grace: Duration,
    now: Instant,
    wall_ms: u64,
) -> Message {
    let start_by_ms = deadline.map(|deadline| {
        let left = deadline.saturating_duration_since(now).saturating_sub(grace);
        wall_ms.saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
    });
    Message::Job(SignedJob { start_by_ms, ..signed.clone() })
}

/// Every live job, by jid, and their deadlines in order.
#[derive(Debug, Default)]
pub struct JobTable {
    jobs: HashMap<String, LiveJob>,
    /// The live jobs with a rollout (every bus event is checked against their abort patterns).
    rollouts: BTreeSet<String>,
    deadlines: BTreeSet<(Instant, String, String)>,
    /// The jids of the jobs that ended here lately, oldest first: a late announcement of one
    /// (a job adopted from the store before its own announcement arrived) must not bring it
    /// back or tell its story twice.
    finished: HashSet<String>,
    finished_order: VecDeque<String>,
}

/// How many finished jids [`JobTable`] remembers.
const FINISHED_REMEMBERED: usize = 65_536;

impl JobTable {
    /// Adds a job.
    pub fn insert(&mut self, job: LiveJob) {
        for (minion, slot) in &job.minions {
            if let (Some(at), false) = (slot.deadline, slot.state.is_final()) {
                self.deadlines.insert((at, job.record.jid.clone(), minion.clone()));
            }
        }
        if job.rollout.is_some() {
            self.rollouts.insert(job.record.jid.clone());
        }
        self.jobs.insert(job.record.jid.clone(), job);
    }

    /// Remembers whether the client on `peer` sees the live job `jid` (decided once per
    /// connection while the job lives: see `crate::authz::Access::peer_receives`).
    pub fn remember_visibility(&mut self, jid: &str, peer: PeerId, visible: bool) {
        if let Some(job) = self.jobs.get_mut(jid) {
            job.visible_to.insert(peer, visible);
        }
    }

    /// A live job.
    pub fn get(&self, jid: &str) -> Option<&LiveJob> {
        self.jobs.get(jid)
    }

    /// Lays a job's live states over its stored ones while it is in flight: `running` is not
    /// written, and the latest changes may still wait in the batch. A finished job is left as
    /// stored.
    pub fn overlay_live(&self, summary: &mut JobSummary, minions: Option<&mut Vec<MinionJob>>) {
        let Some(job) = self.jobs.get(&summary.jid) else { return };
        summary.states.clear();
        for slot in job.slots().values() {
            *summary.states.entry(slot.state).or_default() += 1;
        }
        for minion in minions.into_iter().flatten() {
            if let Some(slot) = job.slots().get(&minion.minion) {
                if !minion.state.is_final() {
                    minion.state = slot.state;
                }
            }
        }
    }

    /// A live job, to change its watchers.
    pub fn get_mut(&mut self, jid: &str) -> Option<&mut LiveJob> {
        self.jobs.get_mut(jid)
    }

    /// Removes a finished job.
    pub fn remove(&mut self, jid: &str) -> Option<LiveJob> {
        let job = self.jobs.remove(jid)?;
        if self.finished.insert(jid.to_owned()) {
            self.finished_order.push_back(jid.to_owned());
            if self.finished_order.len() > FINISHED_REMEMBERED {
                if let Some(oldest) = self.finished_order.pop_front() {
                    self.finished.remove(&oldest);
                }
            }
        }
        self.rollouts.remove(jid);
        for (minion, slot) in &job.minions {
            if let Some(at) = slot.deadline {
                self.deadlines.remove(&(at, jid.to_owned(), minion.clone()));
            }
        }
        Some(job)
    }

    /// Moves a minion's slot to `state` if the transition table allows it; returns whether it
    /// changed. A final state clears the slot's deadline.
    pub fn set_state(&mut self, jid: &str, minion: &str, state: MinionJobState) -> bool {
        let Some(job) = self.jobs.get_mut(jid) else { return false };
        let Some(slot) = job.minions.get_mut(minion) else { return false };
        if !transition_allowed(slot.state, state) {
            return false;
        }
        let changed = slot.state != state;
        slot.state = state;
        if state.is_final() {
            job.remaining -= 1;
            if let Some(at) = slot.deadline.take() {
                self.deadlines.remove(&(at, jid.to_owned(), minion.to_owned()));
            }
        }
        changed
    }

    /// Replaces a final state with the one the store kept (another master recorded the slot
    /// first, while this one could not write): the one change of a final state there is.
    pub fn correct_final(&mut self, jid: &str, minion: &str, state: MinionJobState) -> bool {
        let Some(job) = self.jobs.get_mut(jid) else { return false };
        let Some(slot) = job.minions.get_mut(minion) else { return false };
        if !slot.state.is_final() || !state.is_final() || slot.state == state {
            return false;
        }
        slot.state = state;
        true
    }

    /// Whether a late return of `minion` is the first one of this job (noted if so).
    pub fn first_late_return(&mut self, jid: &str, minion: &str) -> bool {
        self.jobs.get_mut(jid).is_some_and(|job| job.late_told.insert(minion.to_owned()))
    }

    /// Sets the deadline of a slot that is not final.
    pub fn set_deadline(&mut self, jid: &str, minion: &str, deadline: Option<Instant>) {
        let Some(slot) = self.jobs.get_mut(jid).and_then(|j| j.minions.get_mut(minion)) else { return };
        if slot.state.is_final() {
            return;
        }
        if let Some(old) = std::mem::replace(&mut slot.deadline, deadline) {
            self.deadlines.remove(&(old, jid.to_owned(), minion.to_owned()));
        }
        if let Some(deadline) = deadline {
            self.deadlines.insert((deadline, jid.to_owned(), minion.to_owned()));
        }
    }

    /// The state of one slot.
    pub fn state(&self, jid: &str, minion: &str) -> Option<MinionJobState> {
        self.jobs.get(jid)?.minions.get(minion).map(|s| s.state)
    }

    /// Jobs for which `minion` is waiting, sent or running: what to (re)deliver when it
    /// connects. A target its rollout has not started yet is not among them.
    pub fn deliverable_to(&self, minion: &str) -> Vec<String> {
        let mut jids: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.minions.get(minion).is_some_and(|s| !s.state.is_final() && s.state != MinionJobState::Queued))
            .map(|j| j.record.jid.clone())
            .collect();
        jids.sort();
        jids
    }

    /// (jid, minion, state) of every slot whose deadline has passed, earliest first.
    pub fn expired(&self, now: Instant) -> Vec<(String, String, MinionJobState)> {
        self.deadlines
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .filter_map(|(_, jid, minion)| Some((jid.clone(), minion.clone(), self.state(jid, minion)?)))
            .collect()
    }

    /// The earliest deadline of a slot.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _, _)| *at)
    }

    /// Moves every deadline `by` later (the master was paused for that long).
    pub fn postpone_deadlines(&mut self, by: Duration) {
        let old = std::mem::take(&mut self.deadlines);
        for (at, jid, minion) in old {
            let at = at + by;
            if let Some(slot) = self.jobs.get_mut(&jid).and_then(|j| j.minions.get_mut(&minion)) {
                slot.deadline = Some(at);
            }
            self.deadlines.insert((at, jid, minion));
        }
    }

    /// Whether the job `jid` ended here lately (see [`JobTable::remove`]).
    pub fn finished_lately(&self, jid: &str) -> bool {
        self.finished.contains(jid)
    }

    /// The jids of the live jobs.
    pub fn jids(&self) -> Vec<String> {
        self.jobs.keys().cloned().collect()
    }

    /// How many jobs are live.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether no job is live.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Whether a live job has a rollout.
    pub fn has_rollouts(&self) -> bool {
        !self.rollouts.is_empty()
    }

    /// The live jobs with a rollout.
    pub fn rollout_jobs(&self) -> impl Iterator<Item = &LiveJob> {
        self.rollouts.iter().filter_map(|jid| self.jobs.get(jid))
    }

    /// Stops streaming to a client that went away.
    pub fn forget_watcher(&mut self, peer: PeerId) {
        for job in self.jobs.values_mut() {
            job.watchers.retain(|w| *w != peer);
        }
    }
}

/// The slots of a job loaded from the store (at start, or published by another master): a
/// waiting slot gets what is left of its TTL (counted from `wall`, never more than the TTL), a
/// sent or running one a full timeout from now, so its minion has time to reconnect and
/// deliver its outbox.
pub fn loaded_slots(
    record: &crate::store::JobRecord,
    states: Vec<(String, MinionJobState)>,
    now: Instant,
    wall: u64,
    grace: Duration,
) -> std::collections::BTreeMap<String, Slot> {
    let ttl_left = (record.created_at_ms + record.ttl_ms).saturating_sub(wall).min(record.ttl_ms);
    let ttl_left = Duration::from_millis(ttl_left);
    let run_deadline = run_deadline(record.timeout_ms, now, grace);
    states
        .into_iter()
        .map(|(minion, state)| {
            let deadline = match state {
                MinionJobState::Waiting => Some(now + ttl_left),
                MinionJobState::Sent | MinionJobState::Running => run_deadline,
                _ => None,
            };
            (minion, Slot { state, deadline })
        })
        .collect()
}

/// What tests beside this crate's build on (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use halite_protocol::message::{JobSpec, MinionJobState::*, SignedJob, Target, TargetKind};

    use super::{JobTable, LiveJob, Slot};
    use crate::store::JobRecord;

    /// A table holding job `1` with two slots: `a` sent, `b` waiting.
    pub fn table(now: Instant) -> JobTable {
        let spec = JobSpec {
            timeout_ms: 1000,
            ..JobSpec::new(Target { kind: TargetKind::Glob, expr: "*".into() }, "test.ping")
        };
        let signed = SignedJob { body: Vec::new(), signature: Vec::new(), start_by_ms: None };
        let record = JobRecord::new("1".into(), spec, "root".into(), 0, signed);
        let slot = |state, after: u64| Slot { state, deadline: Some(now + Duration::from_secs(after)) };
        let slots = BTreeMap::from([("a".to_owned(), slot(Sent, 2)), ("b".to_owned(), slot(Waiting, 1))]);
        let mut jobs = JobTable::default();
        jobs.insert(LiveJob::new(record, slots, Vec::new()));
        jobs
    }

    /// A successful return of job `jid` (its minion left empty).
    pub fn ret(jid: &str) -> halite_protocol::message::JobReturn {
        halite_protocol::message::JobReturn {
            jid: jid.into(),
            minion: String::new(),
            success: true,
            retcode: 0,
            outputs: serde_json::json!({ "ok": true }),
            truncated: false,
            duration_ms: 5,
            outcome: halite_protocol::message::Outcome::Completed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MinionJobState::*;

    use super::testing::table;

    #[test]
    fn slots_move_forward_only_and_a_final_state_never_changes() {
        let mut jobs = table(Instant::now());
        assert!(!jobs.set_state("1", "b", Waiting));
        assert!(jobs.set_state("1", "a", Running));
        assert!(!jobs.set_state("1", "a", Sent), "running never goes back to sent");
        assert!(jobs.set_state("1", "a", TimedOut));
        assert!(!jobs.set_state("1", "a", Returned), "a final state is kept");
        assert_eq!(jobs.state("1", "a"), Some(TimedOut));
        assert!(!jobs.get("1").is_some_and(LiveJob::is_done));
        assert!(jobs.set_state("1", "b", Expired));
        assert!(jobs.get("1").is_some_and(LiveJob::is_done));
    }

    #[test]
    fn deadlines_expire_in_order_are_postponed_and_leave_with_their_slot() {
        let now = Instant::now();
        let mut jobs = table(now);
        assert!(jobs.expired(now).is_empty());
        let late = now + Duration::from_secs(3);
        let names: Vec<String> = jobs.expired(late).into_iter().map(|(_, m, _)| m).collect();
        assert_eq!(names, ["b", "a"], "earliest first");
        jobs.postpone_deadlines(Duration::from_secs(10));
        assert!(jobs.expired(late).is_empty());
        jobs.set_state("1", "b", Expired);
        let names: Vec<String> = jobs.expired(late + Duration::from_secs(10)).into_iter().map(|(_, m, _)| m).collect();
        assert_eq!(names, ["a"], "a final slot has no deadline");
        jobs.remove("1");
        assert!(jobs.expired(late + Duration::from_secs(60)).is_empty());
        assert!(jobs.finished_lately("1") && !jobs.finished_lately("2"));
    }
}
