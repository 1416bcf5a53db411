//! Jobs across the masters sharing a store. Each master serves the minions connected to it:
//! a job published on one master is announced (`Job`), and every master loads it from the store
//! and sends it to its own targeted minions; the slots each master decides are stored, then
//! announced (`Slots`), so every master's copy of the job (its watchers, its bus, its end) moves
//! with them. Presence (`Here`, `Left`, `Alive`) tells a master which minions are served
//! elsewhere: it neither reports them offline nor times out their slots while their master is
//! alive. Of two masters deciding one slot, the store keeps the first final state.
//!
//! Nothing here awaits or acts on the master: the loop lends a [`ClusterJobsDesk`] (the live
//! jobs and what listens to them, the registry's minions; the sessions and config, read-only)
//! and carries out the [`Effect`]s it returns: store calls, events, deliveries, slots' moves
//! (`Core::with_cluster_jobs`).

use std::collections::HashMap;

use halite_protocol::message::{JobReturn, MinionJobState};
use tracing::{debug, warn};

use crate::acl::NoticeThrottle;
use crate::clock::Now;
use crate::config::MasterConfig;
use crate::core::cluster_view::ClusterView;
use crate::core::hearing::{Hearing, SlotChange};
use crate::core::jobs::{loaded_slots, transition_allowed, JobTable, LiveJob};
use crate::core::registry::{MinionEntry, Registry};
use crate::core::rollout_queue::RolloutQueue;
use crate::core::sessions::Sessions;
use crate::core::watchers::Watchers;
use crate::outputs::asks::Ask;
use crate::outputs::effects::{Effect, Effects, SlotOp};
use crate::store::{JobRecord, MinionRecord, StoreError, UnfinishedJob};

/// What jobs across the masters are followed with: what they change, and what they read.
pub struct ClusterJobsDesk<'a> {
    pub config: &'a MasterConfig,
    pub jobs: &'a mut JobTable,
    pub hearing: &'a mut Hearing,
    pub rollout_queue: &'a mut RolloutQueue,
    pub watchers: &'a mut Watchers,
    pub registry: &'a mut Registry,
    pub cluster: &'a mut ClusterView,
    pub notices: &'a mut NoticeThrottle,
    pub sessions: &'a Sessions,
    /// The time, read when a decision needs it.
    pub now: Now,
    pub out: Effects,
}

impl ClusterJobsDesk<'_> {
    fn read_failed(&mut self, error: &StoreError) {
        crate::cluster::read_failed(self.cluster, self.notices, self.now.at, error);
    }

    /// Loads a job another master published (or this one has lost track of) and sends it to
    /// the targeted minions connected here ([`ClusterJobsDesk::job_loaded`] goes on once it is read).
    pub fn adopt_job(&mut self, jid: &str) {
        if !self.holds_or_finished(jid) {
            self.out.ask(Ask::LoadJob { jid: jid.to_owned() });
        }
    }

    fn holds_or_finished(&self, jid: &str) -> bool {
        self.jobs.get(jid).is_some() || self.jobs.finished_lately(jid)
    }

    /// A job to adopt, as read. Its subscribers here hear of it as they would of a job
    /// published here, once, whenever this master adopts it: its `new`, then a `ret` for every
    /// slot already final in the store (announced before this master held the job, those are
    /// not announced again), and its `done` if it already ended.
    pub fn job_loaded(&mut self, jid: &str, loaded: Result<Option<StoredJob>, StoreError>) {
        let stored = match loaded {
            Ok(Some(stored)) => stored,
            Ok(None) => return,
            Err(error) => return self.read_failed(&error),
        };
        // Asked for twice in one step (a reread finds it twice): taken once.
        if self.holds_or_finished(jid) {
            return;
        }
        let StoredJob { record, states, mut returns } = stored;
        // A job signed by a master the cluster key revoked is not taken up (the rows are that
        // master's word, and its minions would refuse it).
        if record.signed.signer_key().is_some_and(|key| self.config.revokes(&key)) {
            warn!(jid, "a job signed by a revoked master is not taken up");
            return;
        }
        let minions: Vec<&String> = states.iter().map(|(minion, _)| minion).collect();
        let new = serde_json::json!({ "function": record.function, "target": record.target, "caller": record.caller,
                                      "minions": minions });
        let finals: Vec<(String, MinionJobState)> = states.iter().filter(|(_, s)| s.is_final()).cloned().collect();
        let grace = std::time::Duration::from_secs(self.config.timeout_grace_secs);
        let slots = loaded_slots(&record, states, self.now.at, self.now.wall_ms, grace);
        let here: Vec<String> = slots
            .iter()
            .filter(|(id, slot)| !slot.state.is_final() && self.sessions.is_online(id))
            .map(|(id, _)| id.clone())
            .collect();
        // A deployment that rides on it is found by its jid when it ends (`deploy_job_finished`):
        // whichever master sees its end may finish it.
        debug!(jid, minions_here = here.len(), ended = finals.len(), "job published on another master");
        let job = LiveJob::new(record, slots, Vec::new());
        if job.rollout.is_some() && !job.is_done() {
            // This master starts the targets it serves by the same rule.
            self.rollout_queue.due(&job.record.jid);
        }
        // Its rollout hears only the events published after it: the loop hands out those before
        // (`Master::answer_asks`).
        self.jobs.insert(job);
        self.out.emit(format!("halite/job/{jid}/new"), new);
        for (minion, state) in finals {
            let ret = returns.remove(&minion);
            self.hearing.slot_changed(SlotChange { jid: jid.to_owned(), minion, state, ret });
        }
        // It ended before this master heard of it: `done`, and it is forgotten at once.
        self.hearing.job_may_end(jid);
        for minion in here {
            if let Some(peer) = self.sessions.peer_of(&minion) {
                self.out.push(Effect::Deliver { jid: jid.to_owned(), minion, peer });
            }
        }
    }

    /// Tells this master's subscribers of the jobs published from `since_ms` on that it neither
    /// holds nor finished ([`ClusterJobsDesk::missed_jobs_read`] goes on once they are read).
    pub fn adopt_jobs_published_since(&mut self, since_ms: u64) {
        self.out.ask(Ask::ReadMissedJobs { since_ms });
    }

    /// The jobs this master missed, newest first (and whether there were more than it takes
    /// up): one that began and ended while it heard nothing (its listener cut, the store away)
    /// is adopted like any other, its `new`, `ret`s and `done` once, oldest first. At most
    /// [`GAP_JOBS_MAX`](crate::core::cluster_view::GAP_JOBS_MAX), the newest.
    pub fn missed_jobs_read(&mut self, read: Result<(Vec<String>, bool), StoreError>) {
        let (missed, more) = match read {
            Ok(read) => read,
            Err(error) => return self.read_failed(&error),
        };
        if more {
            warn!(
                jobs = missed.len(),
                "more jobs were published while this master heard nothing; its subscribers are told of the newest only"
            );
        }
        if !missed.is_empty() {
            debug!(jobs = missed.len(), "jobs published while this master heard nothing");
        }
        for jid in missed.iter().rev() {
            self.adopt_job(jid);
        }
    }

    /// Compares the jobs this master holds with the store's live ones
    /// ([`ClusterJobsDesk::live_jobs_read`] goes on once they are read).
    pub fn sweep_jobs(&mut self) {
        self.out.ask(Ask::ReadLiveJobs);
    }

    /// The jobs live in the store, as read: one live there that this master does not hold is
    /// loaded (a master that died between storing a job and announcing it leaves it to the
    /// others, who find it here), and one it holds that the store has ended is reread (an
    /// announcement lost on the way).
    pub fn live_jobs_read(&mut self, read: Result<Vec<String>, StoreError>) {
        let live: std::collections::HashSet<String> = match read {
            Ok(live) => live.into_iter().collect(),
            Err(error) => {
                debug!(%error, "comparing live jobs with the store failed");
                return self.cluster.lost_track();
            }
        };
        let ended_elsewhere: Vec<String> = self.jobs.jids().into_iter().filter(|jid| !live.contains(jid)).collect();
        if !ended_elsewhere.is_empty() {
            debug!(jobs = ended_elsewhere.len(), "jobs ended in the store but live here; reread");
            self.reread_jobs(&ended_elsewhere);
        }
        let mut unknown: Vec<String> = live.into_iter().filter(|jid| self.jobs.get(jid).is_none()).collect();
        unknown.sort();
        for jid in unknown {
            debug!(%jid, "a live job nobody announced; loaded");
            self.adopt_job(&jid);
        }
    }

    /// Brings this master's copy of each job in `jids` to the states the store holds (the
    /// changes it missed are applied as if announced: [`ClusterJobsDesk::job_reread`]).
    pub fn reread_jobs(&mut self, jids: &[String]) {
        for jid in jids {
            if self.jobs.get(jid).is_some() {
                self.out.ask(Ask::RereadJob { jid: jid.clone() });
            }
        }
    }

    /// A job held here, as the store holds it (`None`: purged).
    pub fn job_reread(&mut self, jid: &str, read: Result<Option<UnfinishedJob>, StoreError>) {
        let stored = match read {
            Ok(stored) => stored,
            Err(error) => return self.read_failed(&error),
        };
        if self.jobs.get(jid).is_none() {
            return;
        }
        match stored {
            Some((_, states)) => {
                let changed: Vec<(String, MinionJobState)> =
                    states.into_iter().filter(|(minion, state)| self.jobs.state(jid, minion) != Some(*state)).collect();
                if !changed.is_empty() {
                    self.apply_remote_slots(jid, changed);
                }
            }
            // Purged from the store meanwhile: nothing can still come of it.
            None => {
                // Its events are heard while it lives (who may receive them depends on it): the
                // loop hands them out before (`Master::answer_asks`).
                if let Some(job) = self.jobs.remove(jid) {
                    self.watchers.done(job.watchers, jid);
                }
            }
        }
    }

    /// Slots another master decided (and stored): this master's copy of the job follows, with
    /// the returns read from the store for its watchers and bus ([`ClusterJobsDesk::remote_slots_read`]).
    pub fn apply_remote_slots(&mut self, jid: &str, states: Vec<(String, MinionJobState)>) {
        if self.jobs.get(jid).is_none() {
            // Not known here yet (the announcements crossed): loaded as stored, these included.
            return self.adopt_job(jid);
        }
        // The returns of the slots that ended, in one read: of those minions only, not the whole
        // job (a fan-out's returns come in many announcements). None ended: no read.
        if states.iter().any(|(_, state)| state.is_final()) {
            self.out.ask(Ask::ReadReturns { jid: jid.to_owned(), states });
        } else {
            self.remote_slots_read(jid, states, Ok(HashMap::new()));
        }
    }

    /// Slots another master decided, with the returns of those that ended, as read.
    pub fn remote_slots_read(
        &mut self,
        jid: &str,
        states: Vec<(String, MinionJobState)>,
        returns: Result<HashMap<String, JobReturn>, StoreError>,
    ) {
        let mut returns = match returns {
            Ok(returns) => returns,
            Err(error) => return self.read_failed(&error),
        };
        for (minion, state) in states {
            // Moved by the slot's owner (`SlotMoves::elsewhere`), as the effects are carried out
            // in order: the move first, then what follows it.
            let Some(was) = self.jobs.state(jid, &minion) else { continue };
            if was == state || !transition_allowed(was, state) {
                continue;
            }
            let ret = if state.is_final() { returns.remove(&minion) } else { None };
            self.out.slot(SlotOp::Moved { jid: jid.to_owned(), minion: minion.clone(), state, ret });
            // Another master's rollout started a target connected here: this master sends it.
            if was == MinionJobState::Queued && state == MinionJobState::Sent {
                if let Some(peer) = self.sessions.peer_of(&minion) {
                    self.out.push(Effect::Deliver { jid: jid.to_owned(), minion, peer });
                }
            }
        }
    }

    /// What minions connected to another master announced there, as read: targets resolve
    /// against it here.
    pub fn minions_read(&mut self, read: Result<Vec<MinionRecord>, StoreError>) {
        let records = match read {
            Ok(records) => records,
            Err(error) => return self.read_failed(&error),
        };
        for record in records {
            let entry = MinionEntry {
                grains: record.grains,
                functions: record.functions,
                last_seen_ms: record.last_seen_ms,
                installed: None,
            };
            self.registry.set_minion(record.id, entry);
        }
    }
}

/// A job as stored, with the returns of its slots already final.
#[derive(Debug)]
pub struct StoredJob {
    pub record: JobRecord,
    pub states: Vec<(String, MinionJobState)>,
    pub returns: HashMap<String, JobReturn>,
}
