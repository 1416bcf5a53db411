//! Jobs in flight: which minion is in which state, when each must finish, who is watching.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use halite_protocol::message::MinionJobState;
use halite_transport::PeerId;

use crate::store::JobRecord;

/// One minion's part in a live job.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// Current state.
    pub state: MinionJobState,
    /// When the state must have changed: the timeout for sent/running, the TTL for waiting.
    pub deadline: Option<Instant>,
}

/// A job with at least one minion not yet in a final state.
#[derive(Debug)]
pub(crate) struct LiveJob {
    /// The job as published and stored.
    pub record: JobRecord,
    /// Every targeted minion.
    pub minions: BTreeMap<String, Slot>,
    /// Clients to stream updates to.
    pub watchers: Vec<PeerId>,
    /// How many minions are not yet in a final state (so finishing is O(1), not O(minions)).
    remaining: usize,
}

impl LiveJob {
    /// A live job.
    pub(crate) fn new(record: JobRecord, minions: BTreeMap<String, Slot>, watchers: Vec<PeerId>) -> Self {
        let remaining = minions.values().filter(|s| !s.state.is_final()).count();
        LiveJob { record, minions, watchers, remaining }
    }

    /// Whether every minion is in a final state.
    pub(crate) fn is_done(&self) -> bool {
        self.remaining == 0
    }

    /// Moves a minion's slot to `state`; `false` (and no change) when it is already final.
    pub(crate) fn set_state(&mut self, minion: &str, state: MinionJobState) -> bool {
        let Some(slot) = self.minions.get_mut(minion) else { return false };
        if slot.state.is_final() {
            return false;
        }
        slot.state = state;
        if state.is_final() {
            slot.deadline = None;
            self.remaining -= 1;
        }
        true
    }

    /// The deadline for a job sent now.
    pub(crate) fn run_deadline(&self, now: Instant, grace: Duration) -> Instant {
        now + Duration::from_millis(self.record.timeout_ms) + grace
    }
}

/// Every live job, by jid.
#[derive(Debug, Default)]
pub(crate) struct JobTable {
    jobs: HashMap<String, LiveJob>,
}

impl JobTable {
    /// Adds a job.
    pub(crate) fn insert(&mut self, job: LiveJob) {
        self.jobs.insert(job.record.jid.clone(), job);
    }

    /// A live job.
    pub(crate) fn get_mut(&mut self, jid: &str) -> Option<&mut LiveJob> {
        self.jobs.get_mut(jid)
    }

    /// Removes a finished job.
    pub(crate) fn remove(&mut self, jid: &str) -> Option<LiveJob> {
        self.jobs.remove(jid)
    }

    /// Jobs for which `minion` is waiting, sent or running: what to (re)deliver when it connects.
    pub(crate) fn deliverable_to(&self, minion: &str) -> Vec<String> {
        let mut jids: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.minions.get(minion).is_some_and(|s| !s.state.is_final()))
            .map(|j| j.record.jid.clone())
            .collect();
        jids.sort();
        jids
    }

    /// (jid, minion, state) of every slot whose deadline has passed.
    pub(crate) fn expired(&self, now: Instant) -> Vec<(String, String, MinionJobState)> {
        let mut out = Vec::new();
        for job in self.jobs.values() {
            for (minion, slot) in &job.minions {
                if !slot.state.is_final() && slot.deadline.is_some_and(|d| now >= d) {
                    out.push((job.record.jid.clone(), minion.clone(), slot.state));
                }
            }
        }
        out
    }

    /// Stops streaming to a client that went away.
    pub(crate) fn forget_watcher(&mut self, peer: PeerId) {
        for job in self.jobs.values_mut() {
            job.watchers.retain(|w| *w != peer);
        }
    }
}
