//! What the driver may read of the core (its figures, the config it was started with, the
//! store calls it makes), what it sets once at start, and what the simulated tests look at
//! (behind the `testing` feature). Nothing here decides.

use halite_protocol::noise::LocalIdentity;

use crate::config::MasterConfig;
use crate::core::cluster_view::ClusterView;
use crate::core::jobs::JobTable;
use crate::core::registry::Registry;
use crate::core::sessions::Sessions;
use crate::keys::PendingLimits;
use crate::outputs::asks::Ask;
use crate::store::PrincipalRecord;

use super::Core;

impl Core {
    /// The time as the driver last gave it.
    pub fn now(&self) -> crate::clock::Now {
        self.now
    }

    pub fn config(&self) -> &MasterConfig {
        &self.config
    }

    pub fn identity(&self) -> &LocalIdentity {
        &self.identity
    }

    pub fn jobs(&self) -> &JobTable {
        &self.jobs
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    pub fn cluster(&self) -> &ClusterView {
        &self.cluster
    }

    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// The oldest store call a handler asked for, to make and answer ([`Core::answered`]).
    pub fn take_ask(&mut self) -> Option<Ask> {
        self.asks.take_oldest()
    }

    /// The pending-key limits, which a key decision's store calls consult and charge.
    pub fn pending_limits(&mut self) -> &mut PendingLimits {
        &mut self.pending_limits
    }

    /// The audit records gathered are due at the next commit (a request is about to read
    /// the store, or the master stops).
    pub fn audit_now(&mut self) {
        self.audit.force();
    }

    /// At start: the audit trail's last record as stored, which the next one chains to.
    pub fn audit_starts_after(&mut self, head: u64) {
        self.audit.started_at(head);
    }

    /// At start: jids are issued after the latest one stored.
    pub fn jids_resume_after(&mut self, jid: &str) {
        self.jids.resume_after(jid);
    }

    /// The principals as stored (at start, and when they must be read again).
    pub fn set_principals(&mut self, principals: Vec<PrincipalRecord>) {
        self.registry.set_principals(principals);
    }
}

/// What the simulated tests look at and stage.
#[cfg(feature = "testing")]
impl Core {
    pub fn pending(&self) -> &crate::core::writes::PendingWrites {
        &self.pending
    }

    pub fn bus(&self) -> &crate::core::bus::Bus {
        &self.bus
    }

    pub fn files(&self) -> &crate::file_reads::FileServer {
        &self.files
    }

    pub fn has_asks(&self) -> bool {
        !self.asks.is_empty()
    }

    pub fn nothing_to_hear(&self) -> bool {
        self.hearing.is_empty()
    }

    /// An event published, for its listeners to hear.
    pub fn hear_event(&mut self, tag: String, data: halite_protocol::message::Value) {
        self.hearing.event(tag, data);
    }

    /// Returns held for the store are bounded as they would be on a master far over its cap.
    pub fn cap_held_returns(&mut self) {
        self.pending.cap_held_returns_here();
    }

    /// The store is shared with other masters, none of them heard yet.
    pub fn share_store_quietly(&mut self) {
        self.cluster = ClusterView::shared(0);
    }

    /// The config, to stage what a test changes in it.
    pub fn config_mut(&mut self) -> &mut MasterConfig {
        &mut self.config
    }

    pub fn set_identity(&mut self, identity: LocalIdentity) {
        self.identity = identity;
    }
}
