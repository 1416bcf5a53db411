//! [`DeployStore`](super::DeployStore) in SQL both backends speak: configs and deployments as
//! JSON documents with indexed columns, gateway tokens by hash. `deploy_store!` writes the impl
//! for a store type, with the function that turns the `?` placeholders written here into the
//! backend's own (`common_sql.rs`).

macro_rules! deploy_store {
    ($store:ty, $sql:path) => {
        impl $crate::DeployStore for $store {
            async fn put_config(
                &self,
                config: &halite_protocol::message::SoftwareConfig,
                owner: &str,
                now_ms: u64,
            ) -> Result<(), $crate::StoreError> {
                self.bounded(async move {
                    sqlx::query(&$sql("INSERT INTO software_configs (id, body, created_at, owner) VALUES (?, ?, ?, ?)"))
                        .bind(&config.id)
                        .bind($crate::deploy_records::config_json(config))
                        .bind($crate::records::db_int(now_ms))
                        .bind(owner)
                        .execute(&mut *self.conn().await?)
                        .await?;
                    Ok(())
                })
                .await
            }

            async fn config(
                &self,
                id: &str,
            ) -> Result<Option<$crate::ConfigRecord>, $crate::StoreError> {
                self.bounded(async move {
                    let row = sqlx::query(&$sql("SELECT body, owner FROM software_configs WHERE id = ?"))
                        .bind(id)
                        .fetch_optional(&mut *self.conn().await?)
                        .await?;
                    row.map(|r| {
                        Ok($crate::ConfigRecord {
                            config: $crate::deploy_records::config_from_json(&sqlx::Row::try_get::<String, _>(&r, "body")?)?,
                            owner: sqlx::Row::try_get(&r, "owner")?,
                        })
                    })
                    .transpose()
                })
                .await
            }

            async fn configs(
                &self,
                owner: Option<&str>,
                limit: u32,
            ) -> Result<Vec<halite_protocol::message::SoftwareConfig>, $crate::StoreError> {
                self.bounded(async move {
                    let rows = sqlx::query(&$sql(
                        "SELECT body FROM software_configs WHERE (? IS NULL OR owner = ?) ORDER BY created_at DESC, id LIMIT ?",
                    ))
                        .bind(owner)
                        .bind(owner)
                        .bind(i64::from(limit))
                        .fetch_all(&mut *self.conn().await?)
                        .await?;
                    rows.iter()
                        .map(|r| $crate::deploy_records::config_from_json(&sqlx::Row::try_get::<String, _>(r, "body")?))
                        .collect()
                })
                .await
            }

            async fn delete_config(&self, id: &str, owner: Option<&str>) -> Result<bool, $crate::StoreError> {
                self.bounded(async move {
                    let done = sqlx::query(&$sql("DELETE FROM software_configs WHERE id = ? AND (? IS NULL OR owner = ?)"))
                        .bind(id)
                        .bind(owner)
                        .bind(owner)
                        .execute(&mut *self.conn().await?)
                        .await?;
                    Ok(done.rows_affected() == 1)
                })
                .await
            }

            async fn put_deployment(
                &self,
                record: &$crate::DeploymentRecord,
                now_ms: u64,
            ) -> Result<(), $crate::StoreError> {
                self.bounded(async move {
                    sqlx::query(&$sql(
                        "INSERT INTO deployments (id, server_id, status, relay_pending, body, created_at, updated_at, owner, jid)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                         ON CONFLICT(id) DO UPDATE SET server_id = excluded.server_id, status = excluded.status,
                           relay_pending = excluded.relay_pending, body = excluded.body, updated_at = excluded.updated_at,
                           jid = excluded.jid",
                    ))
                    .bind(&record.deployment.id)
                    .bind(&record.deployment.server_id)
                    .bind(&record.deployment.status)
                    .bind(record.relay_pending)
                    .bind($crate::deploy_records::record_json(record))
                    .bind($crate::records::db_int(now_ms))
                    .bind($crate::records::db_int(now_ms))
                    .bind(&record.owner)
                    .bind(&record.jid)
                    .execute(&mut *self.conn().await?)
                    .await?;
                    Ok(())
                })
                .await
            }

            async fn update_deployment(
                &self,
                record: &$crate::DeploymentRecord,
                previous_jid: &str,
                now_ms: u64,
            ) -> Result<bool, $crate::StoreError> {
                self.bounded(async move {
                    // A row written before deployments kept their job (`jid` empty) is taken
                    // as it is, as a finish takes it.
                    let done = sqlx::query(&$sql(
                        "UPDATE deployments SET server_id = ?, status = ?, relay_pending = ?, body = ?, updated_at = ?,
                           jid = ?
                         WHERE id = ? AND (jid = ? OR jid = '')",
                    ))
                    .bind(&record.deployment.server_id)
                    .bind(&record.deployment.status)
                    .bind(record.relay_pending)
                    .bind($crate::deploy_records::record_json(record))
                    .bind($crate::records::db_int(now_ms))
                    .bind(&record.jid)
                    .bind(&record.deployment.id)
                    .bind(previous_jid)
                    .execute(&mut *self.conn().await?)
                    .await?;
                    Ok(done.rows_affected() == 1)
                })
                .await
            }

            async fn finish_deployment(
                &self,
                record: &$crate::DeploymentRecord,
                now_ms: u64,
            ) -> Result<bool, $crate::StoreError> {
                let in_progress = format!("status = '{}'", halite_protocol::message::status::IN_PROGRESS);
                self.overwrite_deployment_if(record, record.relay_pending, now_ms, &in_progress).await
            }

            async fn record_relayed(
                &self,
                record: &$crate::DeploymentRecord,
                now_ms: u64,
            ) -> Result<bool, $crate::StoreError> {
                self.overwrite_deployment_if(record, false, now_ms, "relay_pending").await
            }

            async fn deployment(
                &self,
                id: &str,
            ) -> Result<Option<$crate::DeploymentRecord>, $crate::StoreError> {
                self.bounded(async move {
                    let row = sqlx::query(&$sql("SELECT body, owner FROM deployments WHERE id = ?"))
                        .bind(id)
                        .fetch_optional(&mut *self.conn().await?)
                        .await?;
                    row.map(|r| $crate::deploy_records::record_from_row(&r)).transpose()
                })
                .await
            }

            async fn deployments(
                &self,
                server_id: Option<&str>,
            ) -> Result<Vec<$crate::DeploymentRecord>, $crate::StoreError> {
                self.bounded(async move {
                    let rows = sqlx::query(&$sql(
                        "SELECT body, owner FROM deployments WHERE (? IS NULL OR server_id = ?) ORDER BY created_at DESC, id",
                    ))
                    .bind(server_id)
                    .bind(server_id)
                    .fetch_all(&mut *self.conn().await?)
                    .await?;
                    rows.iter().map($crate::deploy_records::record_from_row).collect()
                })
                .await
            }

            async fn open_deployments(&self) -> Result<Vec<$crate::DeploymentRecord>, $crate::StoreError> {
                self.bounded(async move {
                    let rows = sqlx::query(&$sql("SELECT body, owner FROM deployments WHERE status = ? OR relay_pending"))
                        .bind(halite_protocol::message::status::IN_PROGRESS)
                        .fetch_all(&mut *self.conn().await?)
                        .await?;
                    rows.iter().map($crate::deploy_records::record_from_row).collect()
                })
                .await
            }

            async fn deployment_waiting_on(
                &self,
                jid: &str,
            ) -> Result<Option<$crate::DeploymentRecord>, $crate::StoreError> {
                self.bounded(async move {
                    // Rows written before the job had a column of its own have it empty, and
                    // are matched on their document.
                    let rows = sqlx::query(&$sql(
                        "SELECT body, owner FROM deployments WHERE jid IN (?, '') AND status = ?",
                    ))
                    .bind(jid)
                    .bind(halite_protocol::message::status::IN_PROGRESS)
                    .fetch_all(&mut *self.conn().await?)
                    .await?;
                    for row in &rows {
                        let record = $crate::deploy_records::record_from_row(row)?;
                        if record.jid == jid {
                            return Ok(Some(record));
                        }
                    }
                    Ok(None)
                })
                .await
            }

            async fn put_group(
                &self,
                record: &$crate::GroupRecord,
                now_ms: u64,
            ) -> Result<bool, $crate::StoreError> {
                self.bounded(async move {
                    let open = i64::from(record.group.status == halite_protocol::message::status::IN_PROGRESS);
                    let (body, now) = ($crate::records::to_json(record), $crate::records::db_int(now_ms));
                    let done = if record.revision == 0 {
                        sqlx::query(&$sql(
                            "INSERT INTO deployment_groups (id, open, body, created_at, updated_at, revision) VALUES (?, ?, ?, ?, ?, 1)
                             ON CONFLICT (id) DO NOTHING",
                        ))
                        .bind(&record.group.id)
                        .bind(open)
                        .bind(body)
                        .bind(now)
                        .bind(now)
                        .execute(&mut *self.conn().await?)
                        .await?
                    } else {
                        sqlx::query(&$sql(
                            "UPDATE deployment_groups SET open = ?, body = ?, updated_at = ?, revision = revision + 1
                             WHERE id = ? AND revision = ?",
                        ))
                        .bind(open)
                        .bind(body)
                        .bind(now)
                        .bind(&record.group.id)
                        .bind(record.revision)
                        .execute(&mut *self.conn().await?)
                        .await?
                    };
                    Ok(done.rows_affected() == 1)
                })
                .await
            }

            async fn group(&self, id: &str) -> Result<Option<$crate::GroupRecord>, $crate::StoreError> {
                self.bounded(async move {
                    let row = sqlx::query(&$sql("SELECT body, revision FROM deployment_groups WHERE id = ?"))
                        .bind(id)
                        .fetch_optional(&mut *self.conn().await?)
                        .await?;
                    row.map(|r| $crate::deploy_records::group_from_row(&r)).transpose()
                })
                .await
            }

            async fn open_groups(&self) -> Result<Vec<$crate::GroupRecord>, $crate::StoreError> {
                self.bounded(async move {
                    let rows =
                        sqlx::query(&$sql("SELECT body, revision FROM deployment_groups WHERE open = 1 ORDER BY created_at"))
                            .fetch_all(&mut *self.conn().await?)
                            .await?;
                    rows.iter().map($crate::deploy_records::group_from_row).collect()
                })
                .await
            }

            async fn delete_deployment(&self, id: &str) -> Result<bool, $crate::StoreError> {
                self.bounded(async move {
                    let done =
                        sqlx::query(&$sql("DELETE FROM deployments WHERE id = ?")).bind(id).execute(&mut *self.conn().await?).await?;
                    Ok(done.rows_affected() == 1)
                })
                .await
            }

            async fn create_api_token(
                &self,
                hash: &[u8; 32],
                principal: &str,
                owner: &str,
                now_ms: u64,
                expires_at_ms: Option<u64>,
            ) -> Result<(), $crate::StoreError> {
                self.bounded(async move {
                    // Signed as stored (and read back): the column holds at most i64::MAX.
                    let stored_expiry = expires_at_ms.map(|at| u64::try_from($crate::records::db_int(at)).unwrap_or(0));
                    let row = $crate::trust::ApiTokenRow { hash: &hash[..], principal, expires_at_ms: stored_expiry };
                    let seal = self.trust.get().seal_api_token(&row);
                    sqlx::query(&$sql(
                        "INSERT INTO api_tokens (token_hash, principal, owner, created_at, id, expires_at, signer, signature) \
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    ))
                    .bind(&hash[..])
                    .bind(principal)
                    .bind(owner)
                    .bind($crate::records::db_int(now_ms))
                    .bind($crate::records::token_id(hash))
                    .bind(expires_at_ms.map($crate::records::db_int))
                    .bind(seal.signer)
                    .bind(seal.signature)
                    .execute(&mut *self.conn().await?)
                    .await?;
                    Ok(())
                })
                .await
            }

            async fn api_token_grant(
                &self,
                hash: &[u8; 32],
                now_ms: u64,
            ) -> Result<Option<$crate::ApiTokenGrant>, $crate::StoreError> {
                self.bounded(async move {
                    let row = sqlx::query(&$sql(
                        "SELECT principal, expires_at, signer, signature FROM api_tokens \
                         WHERE token_hash = ? AND (expires_at IS NULL OR expires_at > ?)",
                    ))
                    .bind(&hash[..])
                    .bind($crate::records::db_int(now_ms))
                    .fetch_optional(&mut *self.conn().await?)
                    .await?;
                    let Some(row) = row else { return Ok(None) };
                    let grant = $crate::ApiTokenGrant {
                        id: $crate::records::token_id(hash),
                        principal: sqlx::Row::try_get(&row, "principal")?,
                        expires_at_ms: sqlx::Row::try_get::<Option<i64>, _>(&row, "expires_at")?
                            .map(|v| u64::try_from(v).unwrap_or(0)),
                    };
                    // A token opens a session only as a master signed it.
                    let signer: Option<Vec<u8>> = sqlx::Row::try_get(&row, "signer")?;
                    let signature: Option<Vec<u8>> = sqlx::Row::try_get(&row, "signature")?;
                    let signed = $crate::trust::ApiTokenRow {
                        hash: &hash[..],
                        principal: &grant.principal,
                        expires_at_ms: grant.expires_at_ms,
                    };
                    let trusted = self
                        .token_row_trusted(&grant.id, signer.as_deref(), |signer| {
                            $crate::trust::Trust::check_api_token(signer, &signed, signature.as_deref().unwrap_or_default())
                        })
                        .await?;
                    Ok(trusted.then_some(grant))
                })
                .await
            }

            async fn api_tokens(
                &self,
                owner: Option<&str>,
            ) -> Result<Vec<halite_protocol::message::ApiTokenInfo>, $crate::StoreError> {
                self.bounded(async move {
                    let rows = sqlx::query(&$sql(
                        "SELECT id, principal, created_at, expires_at FROM api_tokens WHERE (? IS NULL OR owner = ?)
                         ORDER BY created_at DESC, id",
                    ))
                    .bind(owner)
                    .bind(owner)
                    .fetch_all(&mut *self.conn().await?)
                    .await?;
                    rows.iter()
                        .map(|r| {
                            let ms = |v: i64| u64::try_from(v).unwrap_or(0);
                            Ok(halite_protocol::message::ApiTokenInfo {
                                id: sqlx::Row::try_get::<Option<String>, _>(r, "id")?.unwrap_or_default(),
                                principal: sqlx::Row::try_get(r, "principal")?,
                                created_at_ms: ms(sqlx::Row::try_get(r, "created_at")?),
                                expires_at_ms: sqlx::Row::try_get::<Option<i64>, _>(r, "expires_at")?.map(ms),
                            })
                        })
                        .collect()
                })
                .await
            }

            async fn delete_api_token(&self, id: &str, owner: Option<&str>) -> Result<bool, $crate::StoreError> {
                self.bounded(async move {
                    let done = sqlx::query(&$sql("DELETE FROM api_tokens WHERE id = ? AND (? IS NULL OR owner = ?)"))
                        .bind(id)
                        .bind(owner)
                        .bind(owner)
                        .execute(&mut *self.conn().await?)
                        .await?;
                    Ok(done.rows_affected() > 0)
                })
                .await
            }
        }

        impl $store {
            /// Writes `record` over its deployment's row (status, relay flag `relay_pending`,
            /// document) only where `guard` (SQL) holds and the row is still on `record.jid`
            /// (rows from before the job had a column have it empty): whether it did.
            async fn overwrite_deployment_if(
                &self,
                record: &$crate::DeploymentRecord,
                relay_pending: bool,
                now_ms: u64,
                guard: &str,
            ) -> Result<bool, $crate::StoreError> {
                let sql = format!(
                    "UPDATE deployments SET status = ?, relay_pending = ?, body = ?, updated_at = ?
                     WHERE id = ? AND {guard} AND (jid = ? OR jid = '')"
                );
                self.bounded(async move {
                    let done = sqlx::query(&$sql(&sql))
                        .bind(&record.deployment.status)
                        .bind(relay_pending)
                        .bind($crate::deploy_records::record_json(record))
                        .bind($crate::records::db_int(now_ms))
                        .bind(&record.deployment.id)
                        .bind(&record.jid)
                        .execute(&mut *self.conn().await?)
                        .await?;
                    Ok(done.rows_affected() == 1)
                })
                .await
            }
        }
    };
}
pub(crate) use deploy_store;
