//! The audit trail in the store ([`AuditStore`]): one hash chain per master, appended in one
//! transaction per batch, listed in store order with filters, pruned behind a signed
//! checkpoint. `audit_sql.rs` writes it once for both backends.

use std::future::Future;

use halite_protocol::audit::{AuditEntry, AuditRecord, Checkpoint};
use halite_protocol::message::AuditFilter;

/// Records read at once by a check or an export.
pub const AUDIT_PAGE: u32 = 1000;

/// What a check reads: every record, the reads of the trail included.
pub const EVERY_RECORD: AuditFilter = AuditFilter {
    principal: None,
    tenant: None,
    minion: None,
    action: None,
    decision: None,
    since_ms: None,
    until_ms: None,
    reads: true,
};

use super::StoreError;

/// The last record of a chain: its number and hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditHead {
    /// Its number (0: the chain has none yet).
    pub seq: u64,
    /// Its hash ([`halite_protocol::audit::GENESIS`] before the first).
    pub hash: [u8; 32],
}

/// How the store keeps the audit trail.
#[cfg(feature = "io")]
pub trait AuditStore {
    /// Appends `entries` to `chain` (this master's id) in one transaction, each chained to
    /// the one before it and signed with this master's key; the chain's new last record.
    /// `after` is the last record the master appended (`None`: read from the store, as at
    /// start): a master goes on from what it wrote, so records removed from the end of its
    /// chain behind its back leave a gap a check names instead of being chained over.
    fn append_audit(
        &self,
        chain: &str,
        after: Option<AuditHead>,
        entries: &[AuditEntry],
    ) -> impl Future<Output = Result<AuditHead, StoreError>> + Send;
    /// Records after the id `after` that `filter` keeps, in store order, at most `limit`.
    fn audit_page(
        &self,
        filter: &AuditFilter,
        after: Option<i64>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditRecord>, StoreError>> + Send;
    /// Where each pruned chain starts.
    fn audit_checkpoints(&self) -> impl Future<Output = Result<Vec<Checkpoint>, StoreError>> + Send;
    /// The last record number of `chain` (0: none yet).
    fn audit_head(&self, chain: &str) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// The last record number of every master's chain (those with records), for the
    /// cross-links a master writes into its own chain.
    fn audit_heads(&self) -> impl Future<Output = Result<std::collections::BTreeMap<String, u64>, StoreError>> + Send;
    /// Checks every chain: each record's hash and its signature by a master this master
    /// trusts, each chain whole from its start to at least the head `known_heads` gives it.
    fn verify_audit(
        &self,
        known_heads: &std::collections::BTreeMap<String, u64>,
    ) -> impl Future<Output = Result<halite_protocol::message::AuditVerification, StoreError>> + Send;
    /// What an export starts with: the masters registered (keys, certificates), the
    /// checkpoints and each chain's head.
    fn audit_header(&self) -> impl Future<Output = Result<halite_protocol::audit::ExportHeader, StoreError>> + Send;
    /// Removes the oldest records of `chain`: those before `before_ms`, and all but the last
    /// `keep`; a signed checkpoint then says where the chain starts. How many were removed.
    fn prune_audit(
        &self,
        chain: &str,
        before_ms: Option<u64>,
        keep: Option<u64>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// A chain's last record as the store holds it.
pub const LAST_RECORD: &str = "SELECT seq, hash FROM audit WHERE chain = ? ORDER BY seq DESC LIMIT 1";

/// Where a pruned chain starts, once it holds no record.
pub const CHECKPOINT_HEAD: &str = "SELECT seq, hash FROM audit_checkpoints WHERE chain = ?";

/// One record.
pub const INSERT_RECORD: &str = "INSERT INTO audit (chain, seq, at_ms, principal, tenant, action, decision, \
     minions, body, prev, hash, signer, signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// The number and hash of the row [`LAST_RECORD`] (or else [`CHECKPOINT_HEAD`]) found.
pub fn stored_head(chain: &str, found: Option<(i64, String)>) -> Result<(u64, [u8; 32]), StoreError> {
    let Some((seq, hash)) = found else { return Ok((0, halite_protocol::audit::GENESIS)) };
    let seq = u64::try_from(seq).unwrap_or(0);
    let hash = halite_protocol::audit::hash_from_hex(&hash)
        .ok_or_else(|| StoreError::Corrupt(format!("audit chain {chain}: record {seq}'s hash is not one")))?;
    Ok((seq, hash))
}

/// Where an append goes on: from the chain's last record in the store (`stored`), unless
/// records this master appended (`after`) are gone from its end, removed behind its back: then
/// from its own last one, so that the gap shows in every check. (A store ahead of `after` is
/// another master with the same id going on: one chain, in store order.)
pub fn next_head(chain: &str, stored: (u64, [u8; 32]), after: Option<AuditHead>) -> (u64, [u8; 32]) {
    match after {
        Some(mine) if mine.seq > stored.0 => {
            tracing::error!(
                chain,
                stored = stored.0,
                appended = mine.seq,
                "records were removed from the end of this master's audit chain behind its back; going on from the \
                 last one it appended, so that the gap shows"
            );
            (mine.seq, mine.hash)
        }
        _ => stored,
    }
}

/// The `minions` column: every id between spaces, so one is found with `LIKE '% id %'`.
pub fn minions_column(minions: &[String]) -> String {
    let mut column = String::from(" ");
    for id in minions {
        column.push_str(id);
        column.push(' ');
    }
    column
}

/// The `LIKE` pattern that finds `id` in the `minions` column (`\` escapes `%` and `_`).
pub fn minion_pattern(id: &str) -> String {
    let mut pattern = String::from("% ");
    for c in id.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(" %");
    pattern
}
