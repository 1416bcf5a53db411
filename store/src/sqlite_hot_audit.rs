//! SQLite's append to the audit trail, on the hot connection (`sqlite_hot.rs`): it comes with
//! every commit a request is answered in, so it pays no thread hop through sqlx.

use rusqlite::{params, OptionalExtension};

use halite_protocol::audit::{hash_from_hex, AuditEntry, AuditRecord};

use super::audit::{minions_column, next_head, stored_head, AuditHead, CHECKPOINT_HEAD, INSERT_RECORD, LAST_RECORD};
use super::records::db_int;
use super::sqlite_hot::HotWrites;
use super::StoreError;

impl HotWrites {
    /// Appends `entries` to `chain` in one transaction, going on from [`next_head`]; `sign`
    /// makes the records (chained and signed) after a record number and hash.
    pub(crate) fn append_audit(
        &mut self,
        chain: &str,
        after: Option<AuditHead>,
        entries: &[AuditEntry],
        sign: impl FnOnce(u64, [u8; 32]) -> Vec<AuditRecord>,
    ) -> Result<AuditHead, StoreError> {
        let mut head = None;
        self.in_transaction(|conn| {
            let last = |sql: &str| -> Result<Option<(i64, String)>, StoreError> {
                Ok(conn.prepare_cached(sql)?.query_row([chain], |row| Ok((row.get(0)?, row.get(1)?))).optional()?)
            };
            let found = match last(LAST_RECORD)? {
                Some(found) => Some(found),
                None => last(CHECKPOINT_HEAD)?,
            };
            let (seq, prev) = next_head(chain, stored_head(chain, found)?, after);
            let records = sign(seq, prev);
            let mut insert = conn.prepare_cached(INSERT_RECORD)?;
            for (record, entry) in records.iter().zip(entries) {
                insert.execute(params![
                    chain,
                    db_int(record.seq),
                    db_int(entry.at_ms),
                    entry.principal,
                    entry.tenant,
                    entry.action,
                    entry.decision,
                    minions_column(&entry.minions),
                    record.body,
                    record.prev,
                    record.hash,
                    record.signer,
                    record.signature,
                ])?;
            }
            let hash = records.last().and_then(|last| hash_from_hex(&last.hash)).unwrap_or(prev);
            head = Some(AuditHead { seq: seq + entries.len() as u64, hash });
            Ok(())
        })?;
        head.ok_or_else(|| StoreError::Corrupt("the audit append ended without its head".into()))
    }
}
