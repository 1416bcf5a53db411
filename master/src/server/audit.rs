//! The loop's part of the audit trail: requests begun as they arrive and ended by their
//! answers (`core/audit_log.rs`), what the master records by itself, and the append, in
//! batches: at most 100 ms after a record is made, and before any request reads the store.

use crate::net::Net;
use crate::store::Store;

use super::Master;

impl<S: Store, N: Net> Master<S, N> {
    /// Appends what was gathered, in one transaction, once it is due: at most 100 ms after a
    /// record is made, or at once before a request reads the store.
    pub(crate) async fn append_audit(&mut self) {
        let Some(link_due) = self.core.audit_due() else { return };
        if link_due {
            // A failed read only leaves this link out: the next is a minute away.
            if let Ok(heads) = self.store.audit_heads().await {
                self.observe();
                self.core.audit_heads_read(heads);
            }
        }
        let (entries, appended) = self.core.take_audit();
        let started = self.clock.now();
        let stored = self.store.append_audit(&self.core.config().id, appended, &entries).await;
        self.observe();
        self.count_call("append_audit", started, stored.is_ok());
        self.core.audit_appended(entries, stored);
    }
}
