//! The reread of everything another master may have changed without this one hearing of it:
//! the loop's own sequence of reads, each applied by the handler that owns what it read
//! (`cluster.rs`, `cluster_jobs.rs`). It counts as done only when every read succeeded; until
//! then the gap it covers stays open and the loop tries again (`follow_the_store`).

use crate::store::StoreError;

use super::Core;

impl Core {
    /// A read another master's change needed failed: the store is reread once it answers
    /// (`crate::cluster::read_failed`).
    pub fn cluster_read_failed(&mut self, error: &StoreError) {
        crate::cluster::read_failed(&mut self.cluster, &mut self.notices, self.now.at, error);
    }
}
