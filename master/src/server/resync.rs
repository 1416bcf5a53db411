//! The reread of everything another master may have changed without this one hearing of it:
//! the loop's own sequence of reads, each applied by the handler that owns what it read
//! (`cluster.rs`, `cluster_jobs.rs`). It counts as done only when every read succeeded; until
//! then the gap it covers stays open and the loop tries again (`follow_the_store`).

use tracing::info;

use crate::net::Net;
use crate::store::{ClusterChange, Store, StoreError};
use crate::store_calls::reads;

use super::Master;

impl<S: Store, N: Net> Master<S, N> {
    /// Rereads everything another master may have changed without this one hearing of it
    /// (its listening connection was lost, the store did not answer, an announcement could not
    /// be applied): keys, principals, who is where, the live jobs it does not hold, and the
    /// states of every job it holds, so each view (watchers, bus, deadlines) follows the store.
    pub(crate) async fn resync(&mut self) -> Result<(), StoreError> {
        // Said once per gap: while the store does not answer, this is tried again every 100 ms.
        self.observe();
        let (first, gap_began) = self.core.cluster.resync_begins(self.core.now.wall_ms);
        if first {
            info!("rereading keys, principals and jobs (changes by other masters may have been missed)");
        }
        let keys = reads::accepted_keys(&self.store, None).await?;
        let principals = self.store.principals().await?;
        self.observe();
        self.core.with_cluster_desk(|desk| desk.views_reread(keys, principals));
        // A read failed before this reread is covered by it; one failed during it is not.
        self.core.cluster.take_read_failed();
        // Slots this master decided are written first: its own view is then what the store says.
        self.flush().await;
        if self.core.pending.has_states() {
            return Err(StoreError::Unavailable("job states could not be written".into()));
        }
        let held = self.core.jobs.jids();
        self.core.with_cluster_jobs(|desk| desk.reread_jobs(&held));
        // Who is where, and the jobs published meanwhile.
        self.core.tell_masters(ClusterChange::RollCall);
        let live = self.store.unfinished_jids().await?;
        self.observe();
        self.core.with_cluster_jobs(|desk| live.iter().for_each(|jid| desk.adopt_job(jid)));
        // Taken up before the gap is looked at, so a live job is not counted among those missed.
        self.answer_asks().await;
        // And those published and ended while this master heard nothing.
        self.core.with_cluster_jobs(|desk| desk.adopt_jobs_published_since(gap_began));
        // The jobs and returns asked for are read before the reread counts as done: one that
        // fails leaves the gap open for the next.
        self.answer_asks().await;
        if self.core.cluster.take_read_failed() {
            return Err(StoreError::Unavailable("jobs could not be reread".into()));
        }
        self.observe();
        self.core.cluster.resynced(self.core.now.at);
        Ok(())
    }
}
