//! Jobs across the masters sharing a store. Each master serves the minions connected to it:
//! a job published on one master is announced (`Job`), and every master loads it from the store
//! and sends it to its own targeted minions; the slots each master decides are stored, then
//! announced (`Slots`), so every master's copy of the job (its watchers, its bus, its end) moves
//! with them. Presence (`Here`, `Left`, `Alive`) tells a master which minions are served
//! elsewhere: it neither reports them offline nor times out their slots while their master is
//! alive. Of two masters deciding one slot, the store keeps the first final state.

use std::collections::HashMap;

use halite_protocol::message::{JobReturn, MinionJobState};
use tracing::{debug, warn};

use crate::jobs::LiveJob;
use crate::net::Net;
use crate::registry::MinionEntry;
use crate::server::{loaded_slots, Master};
use crate::store::{Announcement, ClusterChange, StateChange, Store, StoreError};

impl<S: Store, N: Net> Master<S, N> {
    /// Whether `minion` is served by another live master (and not by this one).
    pub(crate) fn served_elsewhere(&self, minion: &str) -> bool {
        !self.sessions.online.contains_key(minion) && self.cluster.master_of(minion, self.clock.now()).is_some()
    }

    /// Loads a job another master published (or this one has lost track of) and sends it to
    /// the targeted minions connected here.
    pub(crate) async fn adopt_job(&mut self, jid: &str, announced: bool) -> Result<(), StoreError> {
        if self.jobs.get(jid).is_some() {
            return Ok(());
        }
        let Some((record, states)) = self.store.live_job(jid).await? else { return Ok(()) };
        if states.iter().all(|(_, state)| state.is_final()) {
            if announced {
                // It ended before this master heard of it (its announcements come together):
                // the subscribers here still hear its whole story, once.
                self.replay_finished_job(&record).await?;
            }
            return Ok(());
        }
        let grace = std::time::Duration::from_secs(self.config.timeout_grace_secs);
        let slots = loaded_slots(&record, states, self.clock.now(), self.clock.wall_ms(), grace);
        let here: Vec<String> = slots.keys().filter(|id| self.sessions.online.contains_key(*id)).cloned().collect();
        // A deployment that rides on it is found by its jid when it ends (`deploy_job_finished`):
        // whichever master sees its end may finish it.
        debug!(jid, minions_here = here.len(), "job published on another master");
        let new_event = announced.then(|| {
            let minions: Vec<&String> = slots.keys().collect();
            serde_json::json!({ "function": record.function, "target": record.target, "caller": record.caller,
                                "minions": minions })
        });
        let job = LiveJob::new(record, slots, Vec::new());
        if job.rollout.is_some() {
            // This master starts the targets it serves by the same rule.
            self.pending.rollouts_due.insert(job.record.jid.clone());
        }
        self.jobs.insert(job);
        // Its subscribers here hear of it as they would of a job published here.
        if let Some(data) = new_event {
            self.emit(format!("halite/job/{jid}/new"), data);
        }
        for minion in here {
            if let Some(peer) = self.sessions.peer_of(&minion) {
                self.deliver(jid, &minion, peer).await?;
            }
        }
        Ok(())
    }

    /// Loads the live jobs in the store this master does not hold: a master that died between
    /// storing a job and announcing it leaves it to the others, who find it here.
    pub(crate) async fn adopt_unknown_jobs(&mut self) {
        let jids = match self.store.unfinished_jids().await {
            Ok(jids) => jids,
            Err(error) => return debug!(%error, "looking for live jobs failed"),
        };
        let unknown: Vec<String> = jids.into_iter().filter(|jid| self.jobs.get(jid).is_none()).collect();
        for jid in unknown {
            debug!(%jid, "a live job nobody announced; loaded");
            if let Err(error) = self.adopt_job(&jid, false).await {
                warn!(%error, %jid, "loading a live job failed");
            }
        }
    }

    /// Slots another master decided (and stored): this master's copy of the job follows, with
    /// the returns read from the store for its watchers and bus.
    pub(crate) async fn apply_remote_slots(
        &mut self,
        jid: &str,
        states: Vec<(String, MinionJobState)>,
    ) -> Result<(), StoreError> {
        if self.jobs.get(jid).is_none() {
            // Not known here yet (the announcements crossed): loaded as stored, these included.
            return self.adopt_job(jid, false).await;
        }
        // The returns of the slots that ended, in one read: of those minions only, not the whole
        // job (a fan-out's returns come in many announcements). None ended: no query.
        let ended: Vec<String> = states.iter().filter(|(_, state)| state.is_final()).map(|(m, _)| m.clone()).collect();
        let mut returns: HashMap<String, JobReturn> = self.store.returns_of(jid, &ended).await?.into_iter().collect();
        for (minion, state) in states {
            let was = self.jobs.state(jid, &minion);
            if was.is_none_or(|s| s == state) || !self.jobs.set_state(jid, &minion, state) {
                continue;
            }
            // Another master's rollout started a target connected here: this master sends it.
            if was == Some(MinionJobState::Queued) && state == MinionJobState::Sent {
                if let Some(peer) = self.sessions.peer_of(&minion) {
                    self.deliver(jid, &minion, peer).await?;
                }
            }
            let ret = if state.is_final() { returns.remove(&minion) } else { None };
            self.slot_moved(jid, &minion, state, ret);
        }
        Ok(())
    }

    /// The events of a job that ended on another master before this one heard of it.
    async fn replay_finished_job(&mut self, record: &crate::store::JobRecord) -> Result<(), StoreError> {
        let Some(detail) = self.store.job(&record.jid).await? else { return Ok(()) };
        let jid = &record.jid;
        let minions: Vec<&String> = detail.minions.iter().map(|m| &m.minion).collect();
        let new = serde_json::json!({ "function": record.function, "target": record.target, "caller": record.caller,
                                      "minions": minions });
        self.emit(format!("halite/job/{jid}/new"), new);
        for minion in &detail.minions {
            let data = serde_json::json!({ "state": minion.state.as_str(), "ret": minion.ret });
            self.emit(format!("halite/job/{jid}/ret/{}", minion.minion), data);
        }
        self.emit(format!("halite/job/{jid}/done"), serde_json::json!({}));
        Ok(())
    }

    /// Announces the slots this master just stored, job by job.
    pub(crate) async fn tell_slots(&self, changes: &[StateChange]) {
        let mut by_job: Vec<(String, Vec<(String, MinionJobState)>)> = Vec::new();
        for change in changes.iter().filter(|c| !c.late) {
            match by_job.iter_mut().find(|(jid, _)| *jid == change.jid) {
                Some((_, states)) => states.push((change.minion.clone(), change.state)),
                None => by_job.push((change.jid.clone(), vec![(change.minion.clone(), change.state)])),
            }
        }
        for (jid, states) in by_job {
            self.tell_other_masters(ClusterChange::Slots { jid, states }).await;
        }
    }

    /// Announces an event published here; one too large to announce is stored and announced
    /// by id.
    pub(crate) async fn share_event(&self, tag: String, data: halite_protocol::message::Value) {
        let change = ClusterChange::Event { tag, data };
        if Announcement::fits(self.store.instance(), &change) {
            return self.tell_other_masters(change).await;
        }
        let ClusterChange::Event { tag, data } = change else { return };
        let digest = crate::store::event_digest(&tag, &serde_json::to_string(&data).unwrap_or_else(|_| "null".into()));
        match self.store.put_shared_event(&tag, &data, self.clock.wall_ms()).await {
            Ok(id) => self.tell_other_masters(ClusterChange::StoredEvent { id, digest }).await,
            Err(error) => warn!(%error, %tag, "an event could not be shared with the other masters"),
        }
    }

    /// Minions connected to `master`: noted, and their entries (grains) reread, so targets
    /// resolve against what they announced there.
    pub(crate) async fn arrived_elsewhere(&mut self, master: &str, ids: Vec<String>) -> Result<(), StoreError> {
        for id in &ids {
            self.cluster.arrived(id, master);
        }
        for record in self.store.minions_named(&ids).await? {
            let entry =
                MinionEntry { grains: record.grains, functions: record.functions, last_seen_ms: record.last_seen_ms };
            self.registry.minions.insert(record.id, entry);
        }
        Ok(())
    }
}
