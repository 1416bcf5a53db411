//! The loop's part of the audit trail: requests begun as they arrive and ended by their
//! answers (`core/audit_log.rs`), what the master records by itself, and the append, in
//! batches: at most 100 ms after a record is made, and before any request reads the store.

use std::time::Duration;

use halite_protocol::audit::AuditEntry;
use halite_protocol::message::{tenant_part, Message, PrincipalAcl};
use halite_transport::PeerId;
use tracing::warn;

use crate::core::audit_log::Begun;

use crate::store::{AuditHead, StoreError};

use super::Core;

impl Core {
    /// A client's (or a minion's `peer.publish`) message arrived: the request it makes is
    /// recorded once answered.
    pub fn audit_begin(&mut self, peer: PeerId, principal: &str, acl: Option<&PrincipalAcl>, msg: &Message) {
        if let Some(described) = crate::audit_requests::describe(msg) {
            self.audit_begin_described(peer, principal, acl, described);
        }
    }

    /// [`Core::audit_begin`] of a request already described.
    pub fn audit_begin_described(
        &mut self,
        peer: PeerId,
        principal: &str,
        acl: Option<&PrincipalAcl>,
        (key, action, minions, args): (String, String, Vec<String>, serde_json::Value),
    ) {
        let detail = serde_json::json!({
            "session": peer.0,
            "address": self.audit.address(peer).map(|a| a.to_string()),
            "args": args,
        });
        let tenant = acl.and_then(|acl| acl.tenant.clone());
        let begun = Begun { principal: principal.to_owned(), tenant, action, minions, detail };
        self.audit.begin(peer, key, self.now.wall_ms, begun);
    }

    /// The policy the master runs with (at start, and as SIGHUP rereads it): its rules'
    /// digest and counts, so a change of them shows in the trail.
    pub fn audit_policy(&mut self, action: &str) {
        use sha2::Digest;
        let config = &self.config;
        let rules = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            config.events, config.peers, config.nodegroups, config.revoked_masters, config.deploy, config.files.shared
        );
        let digest = halite_protocol::hex::encode(&sha2::Sha256::digest(rules.as_bytes()));
        let detail = serde_json::json!({
            "rules_sha256": digest,
            "event_rules": config.events.len(),
            "peer_rules": config.peers.len(),
            "nodegroups": config.nodegroups.keys().collect::<Vec<_>>(),
            "revoked_masters": config.revoked_masters.len(),
            "shared_files": config.files.shared,
        });
        let entry = AuditEntry {
            at_ms: self.now.wall_ms,
            kind: "policy".into(),
            principal: "master".into(),
            tenant: None,
            action: action.into(),
            decision: "granted".into(),
            reason: None,
            minions: Vec::new(),
            detail,
        };
        self.audit.push(entry);
    }

    /// Something the master records by itself.
    pub fn audit_record(&mut self, entry: AuditEntry) {
        self.audit.push(entry);
    }

    /// Whether the audit records gathered are due to be appended ([`AuditLog::due`]): if so,
    /// whether the other masters' chain heads are to be read first to link them.
    ///
    /// [`AuditLog::due`]: crate::core::audit_log::AuditLog::due
    pub fn audit_due(&mut self) -> Option<bool> {
        self.audit.due(self.now.at).then(|| self.audit.link_due(self.now.wall_ms))
    }

    /// The other masters' chain heads, read: the next append links them.
    pub fn audit_heads_read(&mut self, heads: std::collections::BTreeMap<String, u64>) {
        self.audit.link(&self.config.id, heads, self.now.wall_ms);
    }

    /// The records to append, each given the tenant of the minions it concerns when they lie
    /// in one, and the chain position they follow.
    pub fn take_audit(&mut self) -> (Vec<AuditEntry>, Option<AuditHead>) {
        let mut entries = self.audit.take();
        let tenants: Vec<&str> = self.registry.tenants().collect();
        for entry in entries.iter_mut().filter(|e| e.tenant.is_none() && !e.minions.is_empty()) {
            let first = tenant_part(&entry.minions[0]).filter(|t| tenants.contains(t));
            if let Some(tenant) = first {
                if entry.minions.iter().all(|m| tenant_part(m) == Some(tenant)) {
                    entry.tenant = Some(tenant.to_owned());
                }
            }
        }
        (entries, self.audit.appended())
    }

    /// The append's outcome: what the store did not take is tried again with the next commit.
    pub fn audit_appended(&mut self, entries: Vec<AuditEntry>, stored: Result<AuditHead, StoreError>) {
        match stored {
            Ok(head) => self.audit.stored(head),
            Err(error) => {
                if self.notices.ready("store:audit", Duration::from_secs(10), self.now.at) {
                    warn!(%error, records = entries.len(), "appending to the audit trail failed; retrying with the next commit");
                }
                self.audit.put_back(entries);
            }
        }
    }
}
