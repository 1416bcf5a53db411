//! [`AuditStore`](super::audit::AuditStore) in SQL both backends speak. `audit_store!` writes
//! the impl for a store type, with the function that turns the `?` placeholders written here
//! into the backend's own (`common_sql.rs`).

/// One page of a listing, every filter optional (bound as each value twice, then `limit`).
pub(crate) const PAGE: &str = "SELECT id, chain, seq, body, prev, hash, signer, signature FROM audit \
     WHERE (CAST(? AS BIGINT) IS NULL OR id > ?) AND (CAST(? AS TEXT) IS NULL OR principal = ?) \
     AND (CAST(? AS TEXT) IS NULL OR tenant = ?) AND (CAST(? AS TEXT) IS NULL OR action = ?) \
     AND (CAST(? AS TEXT) IS NULL OR decision = ?) AND (CAST(? AS BIGINT) IS NULL OR at_ms >= ?) \
     AND (CAST(? AS BIGINT) IS NULL OR at_ms < ?) AND (CAST(? AS TEXT) IS NULL OR minions LIKE ? ESCAPE '\\') \
     AND (CAST(? AS BIGINT) = 0 OR action <> 'audit_list') ORDER BY id LIMIT ?";

macro_rules! audit_store {
    ($store:ty, $sql:path) => {
        impl $crate::audit::AuditStore for $store {
            async fn append_audit(
                &self,
                chain: &str,
                after: Option<$crate::audit::AuditHead>,
                entries: &[halite_protocol::audit::AuditEntry],
            ) -> Result<$crate::audit::AuditHead, $crate::StoreError> {
                self.append_audit_records(chain, after, entries).await
            }

            async fn audit_page(
                &self,
                filter: &halite_protocol::message::AuditFilter,
                after: Option<i64>,
                limit: u32,
            ) -> Result<Vec<halite_protocol::audit::AuditRecord>, $crate::StoreError> {
                let since = filter.since_ms.map($crate::records::db_int);
                let until = filter.until_ms.map($crate::records::db_int);
                let minion = filter.minion.as_deref().map($crate::audit::minion_pattern);
                self.bounded(async move {
                    let rows = sqlx::query(&$sql($crate::audit_sql::PAGE))
                        .bind(after)
                        .bind(after)
                        .bind(&filter.principal)
                        .bind(&filter.principal)
                        .bind(&filter.tenant)
                        .bind(&filter.tenant)
                        .bind(&filter.action)
                        .bind(&filter.action)
                        .bind(&filter.decision)
                        .bind(&filter.decision)
                        .bind(since)
                        .bind(since)
                        .bind(until)
                        .bind(until)
                        .bind(&minion)
                        .bind(&minion)
                        .bind(i64::from(filter.hides_reads()))
                        .bind(i64::from(limit))
                        .fetch_all(&mut *self.conn().await?)
                        .await?;
                    rows.iter().map(|row| Ok($crate::audit_sql::record_of(row)?)).collect()
                })
                .await
            }

            async fn audit_checkpoints(&self) -> Result<Vec<halite_protocol::audit::Checkpoint>, $crate::StoreError> {
                use sqlx::Row;
                self.bounded(async move {
                    let rows = sqlx::query(&$sql(
                        "SELECT chain, seq, hash, signer, signature FROM audit_checkpoints ORDER BY chain",
                    ))
                    .fetch_all(&mut *self.conn().await?)
                    .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(halite_protocol::audit::Checkpoint {
                                chain: row.try_get("chain")?,
                                seq: u64::try_from(row.try_get::<i64, _>("seq")?).unwrap_or(0),
                                hash: row.try_get("hash")?,
                                signer: row.try_get("signer")?,
                                signature: row.try_get("signature")?,
                            })
                        })
                        .collect()
                })
                .await
            }

            async fn audit_head(&self, chain: &str) -> Result<u64, $crate::StoreError> {
                self.bounded(async move {
                    let head: Option<i64> = sqlx::query_scalar(&$sql(
                        "SELECT max(seq) FROM (SELECT max(seq) AS seq FROM audit WHERE chain = ? \
                         UNION ALL SELECT seq FROM audit_checkpoints WHERE chain = ?) AS heads",
                    ))
                    .bind(chain)
                    .bind(chain)
                    .fetch_one(&mut *self.conn().await?)
                    .await?;
                    Ok(head.and_then(|h| u64::try_from(h).ok()).unwrap_or(0))
                })
                .await
            }

            async fn audit_heads(&self) -> Result<std::collections::BTreeMap<String, u64>, $crate::StoreError> {
                use sqlx::Row;
                self.bounded(async move {
                    // One index lookup per master, not a scan of the trail.
                    let rows = sqlx::query(&$sql(
                        "SELECT chain, (SELECT max(seq) FROM audit WHERE audit.chain = masters.chain) AS head \
                         FROM (SELECT DISTINCT id AS chain FROM masters) AS masters",
                    ))
                    .fetch_all(&mut *self.conn().await?)
                    .await?;
                    let mut heads = std::collections::BTreeMap::new();
                    for row in &rows {
                        if let Some(head) = row.try_get::<Option<i64>, _>("head")? {
                            heads.insert(row.try_get::<String, _>("chain")?, u64::try_from(head).unwrap_or(0));
                        }
                    }
                    Ok(heads)
                })
                .await
            }

            async fn verify_audit(
                &self,
                known_heads: &std::collections::BTreeMap<String, u64>,
            ) -> Result<halite_protocol::message::AuditVerification, $crate::StoreError> {
                let checkpoints = self.audit_checkpoints().await?;
                let trust = self.trust.get();
                // Each signer's standing, looked up once (the lookup reads the store).
                let standing: std::sync::Mutex<std::collections::HashMap<String, bool>> = Default::default();
                let broken = |error: halite_protocol::audit::Broken| halite_protocol::message::AuditVerification {
                    records: 0,
                    heads: Default::default(),
                    broken: Some(error.to_string()),
                };
                for checkpoint in &checkpoints {
                    let trusted = self.signer_trusted(&trust, &checkpoint.signer).await?;
                    standing
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(checkpoint.signer.clone(), trusted);
                }
                let trusted = |key: &halite_protocol::identity::PublicIdentity, _chain: &str| {
                    standing
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get(&halite_protocol::hex::encode(key.as_bytes()))
                        .copied()
                        .unwrap_or(false)
                };
                let mut verifier = match halite_protocol::audit::Verifier::new(&trusted, &checkpoints) {
                    Ok(verifier) => verifier,
                    Err(error) => return Ok(broken(error)),
                };
                let mut after = None;
                loop {
                    let page = self.audit_page(&$crate::audit::EVERY_RECORD, after, $crate::audit::AUDIT_PAGE).await?;
                    let Some(last) = page.last() else { break };
                    after = Some(last.id);
                    for record in &page {
                        if !standing
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .contains_key(&record.signer)
                        {
                            let known = self.signer_trusted(&trust, &record.signer).await?;
                            standing
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .insert(record.signer.clone(), known);
                        }
                        if let Err(error) = verifier.check(record) {
                            return Ok(broken(error));
                        }
                    }
                }
                Ok(match verifier.finish(known_heads) {
                    Ok(verified) => halite_protocol::message::AuditVerification {
                        records: verified.records,
                        heads: verified.heads,
                        broken: None,
                    },
                    Err(error) => broken(error),
                })
            }

            async fn audit_header(&self) -> Result<halite_protocol::audit::ExportHeader, $crate::StoreError> {
                use sqlx::Row;
                let checkpoints = self.audit_checkpoints().await?;
                let (masters, heads) = self
                    .bounded(async move {
                        let mut conn = self.conn().await?;
                        let rows = sqlx::query(&$sql("SELECT id, public_key, certificate FROM masters ORDER BY id"))
                            .fetch_all(&mut *conn)
                            .await?;
                        let masters = rows
                            .iter()
                            .map(|row| {
                                Ok(halite_protocol::audit::ExportedMaster {
                                    id: row.try_get("id")?,
                                    key: halite_protocol::hex::encode(&row.try_get::<Vec<u8>, _>("public_key")?),
                                    certificate: row
                                        .try_get::<Option<Vec<u8>>, _>("certificate")?
                                        .map(|c| halite_protocol::hex::encode(&c)),
                                })
                            })
                            .collect::<Result<Vec<_>, $crate::StoreError>>()?;
                        let rows = sqlx::query(&$sql("SELECT chain, max(seq) AS head FROM audit GROUP BY chain"))
                            .fetch_all(&mut *conn)
                            .await?;
                        let heads = rows
                            .iter()
                            .map(|row| {
                                Ok((
                                    row.try_get::<String, _>("chain")?,
                                    u64::try_from(row.try_get::<i64, _>("head")?).unwrap_or(0),
                                ))
                            })
                            .collect::<Result<std::collections::BTreeMap<_, _>, $crate::StoreError>>()?;
                        Ok((masters, heads))
                    })
                    .await?;
                Ok(halite_protocol::audit::ExportHeader {
                    format: halite_protocol::audit::EXPORT_FORMAT.into(),
                    masters,
                    checkpoints,
                    heads,
                })
            }

            async fn prune_audit(
                &self,
                chain: &str,
                before_ms: Option<u64>,
                keep: Option<u64>,
            ) -> Result<u64, $crate::StoreError> {
                let before = before_ms.map($crate::records::db_int);
                self.bounded(async move {
                    let mut conn = self.conn().await?;
                    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                    let by_age: Option<i64> = match before {
                        None => None,
                        Some(before) => {
                            sqlx::query_scalar(&$sql("SELECT max(seq) FROM audit WHERE chain = ? AND at_ms < ?"))
                                .bind(chain)
                                .bind(before)
                                .fetch_one(&mut *tx)
                                .await?
                        }
                    };
                    let head: Option<i64> = sqlx::query_scalar(&$sql("SELECT max(seq) FROM audit WHERE chain = ?"))
                        .bind(chain)
                        .fetch_one(&mut *tx)
                        .await?;
                    let by_count = match (keep, head) {
                        (Some(keep), Some(head)) => Some(head - i64::try_from(keep).unwrap_or(i64::MAX)),
                        _ => None,
                    };
                    let Some(cut) = by_age.max(by_count).filter(|cut| *cut > 0) else { return Ok(0) };
                    let hash: Option<String> =
                        sqlx::query_scalar(&$sql("SELECT hash FROM audit WHERE chain = ? AND seq = ?"))
                            .bind(chain)
                            .bind(cut)
                            .fetch_optional(&mut *tx)
                            .await?;
                    // Already pruned past it.
                    let Some(hash) = hash else { return Ok(0) };
                    let hash = halite_protocol::audit::hash_from_hex(&hash).ok_or_else(|| {
                        $crate::StoreError::Corrupt(format!("audit chain {chain}: record {cut}'s hash is not one"))
                    })?;
                    let checkpoint = self.trust.get().audit_checkpoint(chain, u64::try_from(cut).unwrap_or(0), &hash);
                    sqlx::query(&$sql(
                        "INSERT INTO audit_checkpoints (chain, seq, hash, signer, signature) VALUES (?, ?, ?, ?, ?) \
                         ON CONFLICT (chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash, \
                         signer = excluded.signer, signature = excluded.signature",
                    ))
                    .bind(chain)
                    .bind(cut)
                    .bind(&checkpoint.hash)
                    .bind(&checkpoint.signer)
                    .bind(&checkpoint.signature)
                    .execute(&mut *tx)
                    .await?;
                    let done = sqlx::query(&$sql("DELETE FROM audit WHERE chain = ? AND seq <= ?"))
                        .bind(chain)
                        .bind(cut)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(done.rows_affected())
                })
                .await
            }
        }
    };
}
pub(crate) use audit_store;

/// Invoked at module level after `signed_row_helpers!`: whether an audit record's signer
/// (hex) is a master this master trusts.
macro_rules! audit_helpers {
    ($store:ty) => {
        impl $store {
            async fn signer_trusted(
                &self,
                trust: &$crate::trust::Trust,
                signer: &str,
            ) -> Result<bool, $crate::StoreError> {
                let Some(bytes) = halite_protocol::hex::decode(signer) else { return Ok(false) };
                Ok(self.trusted_signer(trust, Some(&bytes)).await?.is_ok())
            }
        }
    };
}
pub(crate) use audit_helpers;

/// A record as read.
pub(crate) fn record_of<R: sqlx::Row>(row: &R) -> Result<halite_protocol::audit::AuditRecord, sqlx::Error>
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(halite_protocol::audit::AuditRecord {
        id: row.try_get("id")?,
        chain: row.try_get("chain")?,
        seq: u64::try_from(row.try_get::<i64, _>("seq")?).unwrap_or(0),
        body: row.try_get("body")?,
        prev: row.try_get("prev")?,
        hash: row.try_get("hash")?,
        signer: row.try_get("signer")?,
        signature: row.try_get("signature")?,
    })
}
