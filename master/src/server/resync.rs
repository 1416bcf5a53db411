//! The reread of everything another master may have changed without this one hearing of it:
//! the loop's own sequence of reads, each applied by the handler that owns what it read
//! (`cluster.rs`, `cluster_jobs.rs`). It counts as done only when every read succeeded; until
//! then the gap it covers stays open and the loop tries again (`follow_the_store`).

use crate::net::Net;
use crate::store::{Store, StoreError};
use crate::store_calls::reads;

use super::Master;

impl<S: Store, N: Net> Master<S, N> {
    /// Rereads everything another master may have changed without this one hearing of it
    /// (its listening connection was lost, the store did not answer, an announcement could not
    /// be applied): keys, principals, who is where, the live jobs it does not hold, and the
    /// states of every job it holds, so each view (watchers, bus, deadlines) follows the store.
    pub(crate) async fn resync(&mut self) -> Result<(), StoreError> {
        self.observe();
        let gap_began = self.core.resync_begins();
        let keys = reads::accepted_keys(&self.store, None).await?;
        let principals = self.store.principals().await?;
        self.observe();
        self.core.views_reread(keys, principals);
        // Slots this master decided are written first: its own view is then what the store says.
        self.flush().await;
        if !self.core.reread_held_jobs() {
            return Err(StoreError::Unavailable("job states could not be written".into()));
        }
        let live = self.store.unfinished_jids().await?;
        self.observe();
        self.core.live_jobs_reread(&live);
        // Taken up before the gap is looked at, so a live job is not counted among those missed.
        self.answer_asks().await;
        self.core.adopt_jobs_published_since(gap_began);
        // The jobs and returns asked for are read before the reread counts as done: one that
        // fails leaves the gap open for the next.
        self.answer_asks().await;
        self.observe();
        if !self.core.resync_done() {
            return Err(StoreError::Unavailable("jobs could not be reread".into()));
        }
        Ok(())
    }
}
