//! PostgreSQL's append to the audit trail, in one transaction per batch (SQLite's goes through
//! its hot connection, `sqlite_hot_audit.rs`).

use halite_protocol::audit::{hash_from_hex, AuditEntry};

use super::audit::{minions_column, next_head, stored_head, AuditHead, CHECKPOINT_HEAD, INSERT_RECORD, LAST_RECORD};
use super::common_sql::postgres_sql;
use super::records::db_int;
use super::{PostgresStore, StoreError};

impl PostgresStore {
    /// Appends `entries` to `chain`, going on from [`next_head`].
    pub async fn append_audit_records(
        &self,
        chain: &str,
        after: Option<AuditHead>,
        entries: &[AuditEntry],
    ) -> Result<AuditHead, StoreError> {
        self.bounded(async move {
            let mut conn = self.conn().await?;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let (last, checkpoint) = (postgres_sql(LAST_RECORD), postgres_sql(CHECKPOINT_HEAD));
            let head = |sql| sqlx::query_as::<_, (i64, String)>(sql).bind(chain);
            let found = match head(&last).fetch_optional(&mut *tx).await? {
                Some(found) => Some(found),
                None => head(&checkpoint).fetch_optional(&mut *tx).await?,
            };
            let (seq, prev) = next_head(chain, stored_head(chain, found)?, after);
            let records = self.trust.get().chain_audit(chain, seq, prev, entries);
            let insert = postgres_sql(INSERT_RECORD);
            for (record, entry) in records.iter().zip(entries) {
                sqlx::query(&insert)
                    .bind(chain)
                    .bind(db_int(record.seq))
                    .bind(db_int(entry.at_ms))
                    .bind(&entry.principal)
                    .bind(&entry.tenant)
                    .bind(&entry.action)
                    .bind(&entry.decision)
                    .bind(minions_column(&entry.minions))
                    .bind(&record.body)
                    .bind(&record.prev)
                    .bind(&record.hash)
                    .bind(&record.signer)
                    .bind(&record.signature)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            let hash = records.last().and_then(|last| hash_from_hex(&last.hash)).unwrap_or(prev);
            Ok(AuditHead { seq: seq + entries.len() as u64, hash })
        })
        .await
    }
}
