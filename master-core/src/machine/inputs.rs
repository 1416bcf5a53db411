//! What the core does with the inputs that are not a connection's: what it loads at start,
//! the store shared with other masters, SIGHUP's rules, a finished file read, another master's
//! announcement, a wake for time, and the revocations that changed.

use std::time::Duration;

use halite_protocol::message::{Message, Welcome};
use halite_transport::PeerId;
use tracing::{info, warn};

use crate::authz::Access;
use crate::core::jobs::{loaded_slots, LiveJob};
use crate::core::registry::{AcceptedKeys, MinionEntry};
use crate::core::slot_moves::SlotMoves;
use crate::limits;
use crate::store::{ClusterChange, Heard, MinionRecord, UnfinishedJob};

use super::Core;

/// How late a wake may come before the loop counts the master as paused.
const PAUSE_THRESHOLD: Duration = Duration::from_secs(1);

impl Core {
    /// The minions the store holds, as loaded at start.
    pub fn load_minions(&mut self, minions: Vec<MinionRecord>) {
        for mut m in minions {
            // Grains stored before the cap existed (or under a larger one) are not carried into
            // memory; the minion announces them again when it connects.
            if limits::json_size(&m.grains) > self.config.max_grains_bytes {
                warn!(minion = %m.id, "stored grains exceed max_grains_bytes; not loaded");
                m.grains.clear();
            }
            self.registry.set_minion(
                m.id,
                MinionEntry { grains: m.grains, functions: m.functions, last_seen_ms: m.last_seen_ms, installed: None },
            );
        }
    }

    /// The unfinished jobs the store holds, as loaded at start; `mark`: the latest wall time
    /// the store recorded.
    pub fn load_jobs(&mut self, unfinished: Vec<UnfinishedJob>, mark: u64) {
        // TTLs count from the latest wall time ever reached, and are never longer than the TTL
        // itself: a clock set back while the master was down must not lengthen them.
        let (now, wall) = (self.now.at, self.now.wall_ms.max(mark));
        let grace = Duration::from_secs(self.config.timeout_grace_secs);
        for (record, states) in unfinished {
            let minions = loaded_slots(&record, states, now, wall, grace);
            let job = LiveJob::new(record, minions, Vec::new());
            if job.rollout.is_some() {
                // A rollout goes on from where it was, at the first step.
                self.rollout_queue.due(&job.record.jid);
            }
            self.jobs.insert(job);
        }
    }

    /// The store is shared with other masters: who is connected where is asked of every
    /// running master.
    pub fn share_the_store(&mut self) {
        self.cluster = crate::core::cluster_view::ClusterView::shared(self.now.wall_ms);
        self.tell_masters(ClusterChange::RollCall);
    }

    /// SIGHUP: the rules in the config file reread; the revocations as they were, if they
    /// changed (the loop then gives the store its new trust).
    /// `check` says whether the master (`identity`) may use a config's revocations.
    pub fn reread_rules<E: std::fmt::Display>(
        &mut self,
        check: impl FnOnce(&[String], &halite_protocol::noise::LocalIdentity) -> Result<(), E>,
    ) -> Option<Vec<String>> {
        let identity = &self.identity;
        let before = self.config.reread_rules(|revoked| check(revoked, identity));
        self.audit_policy("policy_reread");
        before
    }

    /// A file read for a minion finished: sent only if the minion is still connected on the
    /// session that asked.
    pub fn file_served(&mut self, served: crate::file_reads::FileServed) {
        let (peer, answer) = self.files.finished(served);
        if self.sessions.contains(&peer) {
            self.send(peer, &answer);
        }
    }

    /// Another master's announcement; true if the store is to be reread.
    pub fn on_cluster_input(&mut self, heard: Heard) -> bool {
        // The listener checked the signer when the announcement arrived, but a SIGHUP may
        // have revoked that master while it waited here (`None`: the store's own notice).
        if heard.signer.is_some_and(|key| self.config.revokes(&key)) {
            // Counted as the listener counts the announcements it refuses; logged once a
            // second at most (up to a queue of them may be waiting).
            self.metrics.get().denied("cluster_announcement");
            if self.notices.ready("cluster:revoked", Duration::from_secs(1), self.now.at) {
                warn!(from = %heard.from, "announcements of a master revoked while they waited are dropped");
            }
            return false;
        }
        let Heard { from, change, .. } = heard;
        self.with_cluster_desk(|desk| desk.on_cluster_change(&from, change))
    }

    /// Woken for time (planned for `planned`), with the store's reachability if it reports it.
    /// Waking far later than planned means the master was not running: minions' returns may be
    /// waiting unread in socket buffers. The lost time is added to every deadline, so a pause of
    /// the master never turns a minion's result into `timed_out`. Measured as the wake begins: a
    /// step that then works through a burst of inputs for seconds is the master running.
    pub fn woken(&mut self, planned: Option<std::time::Instant>, reachable: Option<bool>) {
        if let Some(planned) = planned {
            let late = self.now.at.saturating_duration_since(planned);
            if late > PAUSE_THRESHOLD {
                warn!(paused_ms = late.as_millis() as u64, "the master was not running; deadlines moved by that long");
                self.jobs.postpone_deadlines(late);
            }
        }
        if let Some(reachable) = reachable {
            self.metrics.store_reachable(reachable);
        }
        if !self.handed_over.is_empty() && !self.store_in_doubt() {
            self.handed_over.clear();
        }
    }

    /// The revocations changed (from `before`), and the store has the new trust: with other
    /// masters on it, keys and principals are reread under it; every minion connected here is
    /// told them (see `Master::revocations_changed`).
    pub fn revocations_changed(&mut self, before: &[String]) {
        if self.cluster.is_shared() {
            self.cluster.lost_track();
        }
        if self.config.revoked_masters.iter().any(|revocation| !before.contains(revocation)) {
            let minions: Vec<PeerId> = self.sessions.online_ids().filter_map(|id| self.sessions.peer_of(id)).collect();
            info!(minions = minions.len(), "a master was revoked: telling the minions connected here");
            let welcome = Message::Welcome(Welcome { revocations_only: true, ..self.welcome() });
            for peer in minions {
                self.send(peer, &welcome);
            }
        }
    }

    /// Accepted keys as read: the registry takes them, and minions parked while their key was
    /// pending knock again if theirs is now accepted.
    pub fn take_accepted(&mut self, keys: AcceptedKeys) {
        self.registry.take_accepted(keys);
        self.release_parked();
    }

    /// The job table with what records its moves: the one way a slot changes state.
    pub fn slots(&mut self) -> SlotMoves<'_> {
        let (now, wall_ms, shared) = (self.now.at, self.now.wall_ms, self.cluster.is_shared());
        SlotMoves::new(&mut self.jobs, &mut self.pending, &mut self.hearing, shared, now, wall_ms)
    }

    /// Who may see, control and receive what: the rules read with the registry and the live
    /// jobs (`crate::authz`).
    pub fn access(&self) -> Access<'_> {
        Access::of(&self.config, &self.registry, &self.jobs)
    }
}
