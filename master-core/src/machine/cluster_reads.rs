//! The reread of everything another master may have changed without this one hearing of it,
//! as the core sees it: the driver makes the sequence of reads (`halite-master`'s `resync.rs`),
//! each applied by the handler that owns what it read (`cluster.rs`, `cluster_jobs.rs`). It
//! counts as done only when every read succeeded; until then the gap it covers stays open and
//! the driver tries again at its next wake.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::core::registry::AcceptedKeys;
use crate::store::{ClusterChange, PrincipalRecord, StoreError};

use super::Core;

/// What following a shared store asks of the driver at a wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreDuty {
    /// Nothing (no other master shares the store, or nothing is due).
    Nothing,
    /// Reread everything: a gap in what this master heard.
    Resync,
    /// Write what is pending, then compare the jobs held with the store's live ones.
    Sweep,
}

impl Core {
    /// What following the store asks at `now` (a wake): after any gap in what this master
    /// heard, a reread every 100 ms until one succeeds; and every few seconds a sweep.
    pub fn store_duty(&mut self, now: Instant) -> StoreDuty {
        if !self.cluster.is_shared() {
            return StoreDuty::Nothing;
        }
        self.cluster.note_interruptions(self.store_interruptions);
        if self.cluster.needs_resync() {
            StoreDuty::Resync
        } else if self.cluster.sweep_due(now) {
            StoreDuty::Sweep
        } else {
            StoreDuty::Nothing
        }
    }

    /// A reread failed: said once every 10 s at most; tried again at the next wake.
    pub fn resync_failed(&mut self, error: &StoreError, now: Instant) {
        if self.notices.ready("store:resync", Duration::from_secs(10), now) {
            warn!(%error, "rereading the store failed; trying again every 100 ms");
        }
    }

    /// A reread begins: when the gap it covers began (wall time).
    pub fn resync_begins(&mut self) -> u64 {
        // Said once per gap: while the store does not answer, this is tried again every 100 ms.
        let (first, gap_began) = self.cluster.resync_begins(self.now.wall_ms);
        if first {
            info!("rereading keys, principals and jobs (changes by other masters may have been missed)");
        }
        gap_began
    }

    /// Keys and principals as reread. A read failed before this reread is covered by it; one
    /// failed during it is not.
    pub fn views_reread(&mut self, keys: AcceptedKeys, principals: Vec<PrincipalRecord>) {
        self.with_cluster_desk(|desk| desk.views_reread(keys, principals));
        self.cluster.take_read_failed();
    }

    /// After the slots this master decided were written: every job it holds is reread, and who
    /// is where asked. False if states are still unwritten (its own view is not yet the store's).
    pub fn reread_held_jobs(&mut self) -> bool {
        if self.pending.has_states() {
            return false;
        }
        let held = self.jobs.jids();
        self.with_cluster_jobs(|desk| desk.reread_jobs(&held));
        self.tell_masters(ClusterChange::RollCall);
        true
    }

    /// The jobs live in the store, as read: those not held here are taken up.
    pub fn live_jobs_reread(&mut self, live: &[String]) {
        self.with_cluster_jobs(|desk| live.iter().for_each(|jid| desk.adopt_job(jid)));
    }

    /// And those published (and maybe ended) from `gap_began` on, while this master heard nothing.
    pub fn adopt_jobs_published_since(&mut self, gap_began: u64) {
        self.with_cluster_jobs(|desk| desk.adopt_jobs_published_since(gap_began));
    }

    /// The reread's reads are answered: done unless one failed (the gap then stays open).
    pub fn resync_done(&mut self) -> bool {
        if self.cluster.take_read_failed() {
            return false;
        }
        self.cluster.resynced(self.now.at);
        true
    }

    /// The sweep's comparison of the jobs held with the store's live ones.
    pub fn sweep_jobs(&mut self) {
        self.with_cluster_jobs(|desk| desk.sweep_jobs());
    }

    /// A read another master's change needed failed: the store is reread once it answers
    /// (`crate::cluster::read_failed`).
    pub fn cluster_read_failed(&mut self, error: &StoreError) {
        crate::cluster::read_failed(&mut self.cluster, &mut self.notices, self.now.at, error);
    }
}
