//! The part of [`Store`](super::Store) both backends write in the same SQL: keys, tokens, the
//! minion registry, job listings and details, principals, the meta values and retention.
//! Written once with `?` placeholders; each backend's `$sql` function turns them into its own
//! (SQLite takes them as they are, PostgreSQL numbers them). What differs (bulk writes, which
//! each backend batches its own way, and opening, checking and closing) stays in `sqlite.rs`
//! and `postgres.rs`.

/// The statements as written here, for SQLite (which takes `?` as it is).
pub(crate) fn sqlite_sql(sql: &str) -> std::borrow::Cow<'_, str> {
    std::borrow::Cow::Borrowed(sql)
}

/// PostgreSQL numbers its placeholders: each `?` becomes `$1`, `$2`, … in order.
pub(crate) fn postgres_sql(sql: &str) -> std::borrow::Cow<'_, str> {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Ids looked up at most per `IN (…)` list: one query per this many.
pub(crate) const IN_LIST_MAX: usize = 500;

/// `n` placeholders for an `IN (…)` list.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// A return that came after its slot ended: only the return, marked late, and only if the slot
/// has none yet (bound as `ret, updated_at, jid, minion`).
pub(crate) const LATE_RETURN: &str =
    "UPDATE job_minions SET ret = ?, late = TRUE, updated_at = ? WHERE jid = ? AND minion = ? AND ret IS NULL";

/// The page of a job listing: the `limit` newest jids older than `before` (bound as
/// `before, before, limit`).
pub(crate) const PAGE: &str =
    "SELECT jid FROM jobs WHERE (CAST(? AS TEXT) IS NULL OR jid < ?) ORDER BY jid DESC LIMIT ?";

/// One row per job and minion: the last state, and the last return given (what applying the
/// changes one by one would leave), so one multi-row statement can write them.
pub(crate) fn merge_changes<'a>(changes: impl Iterator<Item = &'a super::StateChange>) -> Vec<super::StateChange> {
    let mut merged: Vec<super::StateChange> = Vec::new();
    let mut index: std::collections::HashMap<(&str, &str), usize> = std::collections::HashMap::new();
    for change in changes {
        match index.get(&(change.jid.as_str(), change.minion.as_str())) {
            Some(&i) => {
                let ret = change.ret.clone().or_else(|| merged[i].ret.take());
                merged[i] = super::StateChange { ret, ..change.clone() };
            }
            None => {
                index.insert((change.jid.as_str(), change.minion.as_str()), merged.len());
                merged.push(change.clone());
            }
        }
    }
    merged
}

/// Row readers and per-job helpers for a store type whose rows are `$row`; invoked at module
/// level, with `sqlx::Row` in scope.
macro_rules! common_helpers {
    ($store:ty, $row:ty, $sql:path) => {
        fn corrupt(what: impl std::fmt::Display) -> $crate::StoreError {
            $crate::StoreError::Corrupt(what.to_string())
        }

        fn ms(value: i64) -> u64 {
            u64::try_from(value).unwrap_or(0)
        }

        fn key_from_row(row: &$row) -> Result<$crate::KeyRecord, $crate::StoreError> {
            let public_key: Vec<u8> = row.try_get("public_key")?;
            let state: String = row.try_get("state")?;
            Ok($crate::KeyRecord {
                id: row.try_get("id")?,
                public_key: public_key.try_into().map_err(|_| corrupt("public key is not 32 bytes"))?,
                state: $crate::records::key_state(&state)?,
            })
        }

        fn job_from_row(row: &$row) -> Result<$crate::JobRecord, $crate::StoreError> {
            let kind: String = row.try_get("target_kind")?;
            Ok($crate::JobRecord {
                jid: row.try_get("jid")?,
                function: row.try_get("function")?,
                target: halite_protocol::message::Target {
                    kind: $crate::records::target_kind(&kind)?,
                    expr: row.try_get("target_expr")?,
                },
                args: $crate::records::json(&row.try_get::<String, _>("args")?)?,
                kwargs: $crate::records::json(&row.try_get::<String, _>("kwargs")?)?,
                caller: row.try_get("caller")?,
                created_at_ms: ms(row.try_get("created_at")?),
                timeout_ms: ms(row.try_get("timeout_ms")?),
                ttl_ms: ms(row.try_get("ttl_ms")?),
                signed: halite_protocol::message::SignedJob {
                    body: row.try_get("body")?,
                    signature: row.try_get("signature")?,
                    start_by_ms: None,
                },
                rollout: row
                    .try_get::<Option<String>, _>("rollout")?
                    .map(|text| $crate::records::json(&text))
                    .transpose()?,
            })
        }

        impl $store {
            /// Runs `sql` with `{PAGE}` standing for the page's jids.
            async fn page_rows(
                &self,
                sql: &str,
                before: Option<&str>,
                limit: u32,
            ) -> Result<Vec<$row>, $crate::StoreError> {
                let sql = sql.replace("{PAGE}", $crate::common_sql::PAGE);
                Ok(sqlx::query(&$sql(&sql))
                    .bind(before)
                    .bind(before)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *self.conn().await?)
                    .await?)
            }

            async fn summary(
                &self,
                job: &$crate::JobRecord,
            ) -> Result<halite_protocol::message::JobSummary, $crate::StoreError> {
                let rows =
                    sqlx::query(&$sql("SELECT state, COUNT(*) AS n FROM job_minions WHERE jid = ? GROUP BY state"))
                        .bind(&job.jid)
                        .fetch_all(&mut *self.conn().await?)
                        .await?;
                let mut states = std::collections::BTreeMap::new();
                for row in rows {
                    let n: i64 = row.try_get("n")?;
                    states.insert(
                        $crate::records::job_state(&row.try_get::<String, _>("state")?)?,
                        u32::try_from(n).unwrap_or(u32::MAX),
                    );
                }
                Ok(halite_protocol::message::JobSummary {
                    jid: job.jid.clone(),
                    function: job.function.clone(),
                    target: job.target.clone(),
                    caller: job.caller.clone(),
                    created_at_ms: job.created_at_ms,
                    states,
                    rollout: job.rollout.clone(),
                })
            }
        }
    };
}
pub(crate) use common_helpers;

/// The shared [`Store`](super::Store) methods, invoked inside a backend's `impl Store` (after
/// `common_helpers!` in the same module).
macro_rules! common_store_methods {
    ($sql:path) => {
    async fn keys(&self) -> Result<Vec<$crate::KeyRecord>, $crate::StoreError> {
        self.bounded(async move {
            let rows = sqlx::query(&$sql("SELECT id, public_key, state, signer, signature FROM keys ORDER BY id, state"))
                .fetch_all(&mut *self.conn().await?)
                .await?;
            self.checked_keys(&rows).await
        })
        .await
    }

    async fn keys_for(&self, id: &str) -> Result<Vec<$crate::KeyRecord>, $crate::StoreError> {
        self.bounded(async move {
            let rows = sqlx::query(&$sql("SELECT id, public_key, state, signer, signature FROM keys WHERE id = ?"))
                .bind(id)
                .fetch_all(&mut *self.conn().await?)
                .await?;
            self.checked_keys(&rows).await
        })
        .await
    }

    async fn put_key(&self, key: &$crate::KeyRecord, now_ms: u64) -> Result<(), $crate::StoreError> {
        self.bounded(async move {
            let state = $crate::records::key_state_name(key.state);
            let seal = self.trust.get().seal_key(&key.id, &key.public_key, state);
            sqlx::query(&$sql("INSERT INTO keys (id, public_key, state, updated_at, signer, signature) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (id, public_key) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at, \
                 signer = excluded.signer, signature = excluded.signature"),
            )
            .bind(&key.id)
            .bind(&key.public_key[..])
            .bind(state)
            .bind($crate::records::db_int(now_ms))
            .bind(seal.signer)
            .bind(seal.signature)
            .execute(&mut *self.conn().await?)
            .await?;
            Ok(())
        })
        .await
    }

    async fn delete_key(&self, id: &str, public_key: &[u8; 32]) -> Result<(), $crate::StoreError> {
        self.bounded(async move {
            sqlx::query(&$sql("DELETE FROM keys WHERE id = ? AND public_key = ?"))
                .bind(id)
                .bind(&public_key[..])
                .execute(&mut *self.conn().await?)
                .await?;
            Ok(())
        })
        .await
    }

    async fn create_token(
        &self,
        hash: &[u8; 32],
        minion: &str,
        expires_at_ms: u64,
        replaces_key: bool,
        owner: &str,
    ) -> Result<(), $crate::StoreError> {
        self.bounded(async move {
            // A replacing token names the key it replaces: the one accepted now.
            let replaced: Option<Vec<u8>> = if replaces_key {
                sqlx::query_scalar(&$sql("SELECT public_key FROM keys WHERE id = ? AND state = 'accepted' ORDER BY updated_at DESC LIMIT 1"))
                    .bind(minion)
                    .fetch_optional(&mut *self.conn().await?)
                    .await?
            } else {
                None
            };
            // Signed as stored (and read back): the column holds at most i64::MAX.
            let stored_expiry = ms($crate::records::db_int(expires_at_ms));
            let row = $crate::trust::EnrollmentTokenRow {
                hash: &hash[..],
                minion,
                expires_at_ms: stored_expiry,
                replaces: replaced.as_deref(),
            };
            let seal = self.trust.get().seal_enrollment_token(&row);
            sqlx::query(&$sql("INSERT INTO tokens (token_hash, minion, expires_at, id, replaces_key, owner, signer, signature, replaced_key) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"))
                .bind(&hash[..])
                .bind(minion)
                .bind($crate::records::db_int(expires_at_ms))
                .bind($crate::records::token_id(hash))
                .bind(replaces_key)
                .bind(owner)
                .bind(seal.signer)
                .bind(seal.signature)
                .bind(replaced.as_deref())
                .execute(&mut *self.conn().await?)
                .await?;
            Ok(())
        })
        .await
    }

    async fn enroll_with_token(
        &self,
        hash: &[u8; 32],
        minion: &str,
        public_key: &[u8; 32],
        now_ms: u64,
    ) -> Result<$crate::TokenUse, $crate::StoreError> {
        self.bounded(async move {
            // The token is honoured only as a master signed it: checked first (the check may read
            // the signer's registration), then burnt in the transaction only if its row is still
            // the one checked.
            let row = sqlx::query(&$sql("SELECT expires_at, replaced_key, \
                 signer, signature FROM tokens WHERE token_hash = ? AND minion = ? AND used_at IS NULL AND expires_at > ?"))
            .bind(&hash[..])
            .bind(minion)
            .bind($crate::records::db_int(now_ms))
            .fetch_optional(&mut *self.conn().await?)
            .await?;
            let Some(row) = row else { return Ok($crate::TokenUse::Invalid) };
            let signature: Option<Vec<u8>> = row.try_get("signature")?;
            let replaced: Option<Vec<u8>> = row.try_get("replaced_key")?;
            if !self.enrollment_row_trusted(&row, &hash[..], minion).await? {
                return Ok($crate::TokenUse::Invalid);
            }
            let mut conn = self.conn().await?;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let burnt = sqlx::query(&$sql("UPDATE tokens SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND signature = ?"))
                .bind($crate::records::db_int(now_ms))
                .bind(&hash[..])
                .bind(signature.as_deref())
                .execute(&mut *tx)
                .await?;
            if burnt.rows_affected() != 1 {
                return Ok($crate::TokenUse::Invalid);
            }
            // Read in the same transaction that burns the token: a key accepted meanwhile counts.
            let accepted: Vec<Vec<u8>> = sqlx::query_scalar(&$sql("SELECT public_key FROM keys WHERE id = ? AND state = 'accepted' AND public_key != ?"))
                .bind(minion)
                .bind(&public_key[..])
                .fetch_all(&mut *tx)
                .await?;
            // A token never takes an accepted identity over unless made to, and then only the key
            // accepted when it was made (a token put back unused after replacing it replaces nothing).
            let replaces_accepted = replaced.as_deref().is_some_and(|key| accepted.iter().all(|a| a.as_slice() == key));
            let (state, used) = match (accepted.is_empty(), replaces_accepted) {
                (true, _) => ("accepted", $crate::TokenUse::Enrolled { replaced: false }),
                (false, true) => ("accepted", $crate::TokenUse::Enrolled { replaced: true }),
                (false, false) => ("denied", $crate::TokenUse::Refused),
            };
            if state == "accepted" {
                // The token holder is the minion: any other key recorded for the id is denied (and
                // loses its signature: one made for another state must not come back with it).
                sqlx::query(&$sql("UPDATE keys SET state = 'denied', updated_at = ?, signer = NULL, signature = NULL WHERE id = ? AND public_key != ?"))
                    .bind($crate::records::db_int(now_ms))
                    .bind(minion)
                    .bind(&public_key[..])
                    .execute(&mut *tx)
                    .await?;
            }
            let seal = self.trust.get().seal_key(minion, public_key, state);
            sqlx::query(&$sql("INSERT INTO keys (id, public_key, state, updated_at, signer, signature) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT(id, public_key) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at, \
                 signer = excluded.signer, signature = excluded.signature"),
            )
            .bind(minion)
            .bind(&public_key[..])
            .bind(state)
            .bind($crate::records::db_int(now_ms))
            .bind(seal.signer)
            .bind(seal.signature)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(used)
        })
        .await
    }

    async fn token_outstanding(&self, minion: &str, now_ms: u64) -> Result<bool, $crate::StoreError> {
        self.bounded(async move {
            // Only a token a master made binds the id: a row written past the masters does not
            // lock its minion out.
            let rows = sqlx::query(&$sql("SELECT token_hash, expires_at, replaced_key, \
                 signer, signature FROM tokens WHERE minion = ? AND used_at IS NULL AND expires_at > ? \
                 ORDER BY signature IS NULL LIMIT 16"))
                .bind(minion)
                .bind($crate::records::db_int(now_ms))
                .fetch_all(&mut *self.conn().await?)
                .await?;
            for row in &rows {
                let hash: Vec<u8> = row.try_get("token_hash")?;
                if self.enrollment_row_trusted(row, &hash, minion).await? {
                    return Ok(true);
                }
            }
            Ok(false)
        })
        .await
    }

    async fn pending_key_count(&self) -> Result<u64, $crate::StoreError> {
        self.bounded(async move {
            let n: i64 =
                sqlx::query_scalar(&$sql("SELECT COUNT(*) FROM keys WHERE state = 'pending'")).fetch_one(&mut *self.conn().await?).await?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    async fn minions(&self) -> Result<Vec<$crate::MinionRecord>, $crate::StoreError> {
        self.bounded(async move {
            let rows = sqlx::query(&$sql("SELECT id, grains, functions, last_seen FROM minions ORDER BY id"))
                .fetch_all(&mut *self.conn().await?)
                .await?;
            rows.iter()
                .map(|row| {
                    Ok($crate::MinionRecord {
                        id: row.try_get("id")?,
                        grains: $crate::records::json(&row.try_get::<String, _>("grains")?)?,
                        functions: $crate::records::json(&row.try_get::<String, _>("functions")?)?,
                        last_seen_ms: ms(row.try_get("last_seen")?),
                    })
                })
                .collect()
        })
        .await
    }

    async fn minions_named(
        &self,
        ids: &[String],
    ) -> Result<Vec<$crate::MinionRecord>, $crate::StoreError> {
        self.bounded(async move {
            let mut out = Vec::with_capacity(ids.len());
            for chunk in ids.chunks($crate::common_sql::IN_LIST_MAX) {
                let sql = format!(
                    "SELECT id, grains, functions, last_seen FROM minions WHERE id IN ({}) ORDER BY id",
                    $crate::common_sql::placeholders(chunk.len())
                );
                let sql = $sql(&sql);
                let mut query = sqlx::query(&sql);
                for id in chunk {
                    query = query.bind(id);
                }
                for row in query.fetch_all(&mut *self.conn().await?).await? {
                    out.push($crate::MinionRecord {
                        id: row.try_get("id")?,
                        grains: $crate::records::json(&row.try_get::<String, _>("grains")?)?,
                        functions: $crate::records::json(&row.try_get::<String, _>("functions")?)?,
                        last_seen_ms: ms(row.try_get("last_seen")?),
                    });
                }
            }
            Ok(out)
        })
        .await
    }

    async fn unfinished_jids(&self) -> Result<Vec<String>, $crate::StoreError> {
        self.bounded(async move {
            Ok(sqlx::query_scalar(&$sql(
                "SELECT DISTINCT jid FROM job_minions WHERE state IN ('waiting', 'sent', 'running', 'queued') ORDER BY jid",
            ))
            .fetch_all(&mut *self.conn().await?)
            .await?)
        })
        .await
    }

    async fn token(&self, hash: &[u8; 32]) -> Result<Option<$crate::TokenRecord>, $crate::StoreError> {
        self.bounded(async move {
            let row = sqlx::query(&$sql("SELECT minion, expires_at, used_at FROM tokens WHERE token_hash = ?"))
                .bind(&hash[..])
                .fetch_optional(&mut *self.conn().await?)
                .await?;
            row.map(|row| {
                Ok($crate::TokenRecord {
                    minion: row.try_get("minion")?,
                    expires_at_ms: ms(row.try_get("expires_at")?),
                    used: row.try_get::<Option<i64>, _>("used_at")?.is_some(),
                })
            })
            .transpose()
        })
        .await
    }

    async fn live_job(&self, jid: &str) -> Result<Option<$crate::UnfinishedJob>, $crate::StoreError> {
        self.bounded(async move {
            let Some(row) = sqlx::query(&$sql("SELECT * FROM jobs WHERE jid = ?")).bind(jid).fetch_optional(&mut *self.conn().await?).await?
            else {
                return Ok(None);
            };
            let job = job_from_row(&row)?;
            let states = sqlx::query(&$sql("SELECT minion, state FROM job_minions WHERE jid = ? ORDER BY minion"))
                .bind(jid)
                .fetch_all(&mut *self.conn().await?)
                .await?
                .iter()
                .map(|r| Ok((r.try_get("minion")?, $crate::records::job_state(&r.try_get::<String, _>("state")?)?)))
                .collect::<Result<Vec<_>, $crate::StoreError>>()?;
            Ok(Some((job, states)))
        })
        .await
    }

    async fn set_rollout(
        &self,
        jid: &str,
        rollout: &halite_protocol::message::RolloutStatus,
    ) -> Result<(), $crate::StoreError> {
        self.bounded(async move {
            sqlx::query(&$sql("UPDATE jobs SET rollout = ? WHERE jid = ?"))
                .bind($crate::records::to_json(rollout))
                .bind(jid)
                .execute(&mut *self.conn().await?)
                .await?;
            Ok(())
        })
        .await
    }

    async fn delete_minion(&self, id: &str) -> Result<(), $crate::StoreError> {
        self.bounded(async move {
            sqlx::query(&$sql("DELETE FROM minions WHERE id = ?")).bind(id).execute(&mut *self.conn().await?).await?;
            Ok(())
        })
        .await
    }

    async fn jobs(&self, before: Option<&str>, limit: u32, with_minions: bool) -> Result<Vec<$crate::JobListing>, $crate::StoreError> {
        self.bounded(async move {
            // Three queries for the whole page, whatever its size: the jobs, their state counts,
            // and (when asked) their minions.
            let rows = self.page_rows("SELECT * FROM jobs WHERE jid IN ({PAGE}) ORDER BY jid DESC", before, limit).await?;
            let mut out = Vec::with_capacity(rows.len());
            let mut index = std::collections::HashMap::with_capacity(rows.len());
            for row in &rows {
                let job = job_from_row(row)?;
                index.insert(job.jid.clone(), out.len());
                let summary = halite_protocol::message::JobSummary {
                    jid: job.jid,
                    function: job.function,
                    target: job.target,
                    caller: job.caller,
                    created_at_ms: job.created_at_ms,
                    states: std::collections::BTreeMap::new(),
                    rollout: job.rollout,
                };
                out.push($crate::JobListing { summary, minions: Vec::new() });
            }
            let counts = self
                .page_rows(
                    "SELECT jid, state, COUNT(*) AS n FROM job_minions WHERE jid IN ({PAGE}) GROUP BY jid, state",
                    before,
                    limit,
                )
                .await?;
            for row in counts {
                let jid: String = row.try_get("jid")?;
                let n: i64 = row.try_get("n")?;
                if let Some(&i) = index.get(&jid) {
                    let state = $crate::records::job_state(&row.try_get::<String, _>("state")?)?;
                    out[i].summary.states.insert(state, u32::try_from(n).unwrap_or(u32::MAX));
                }
            }
            if with_minions {
                let minions = self
                    .page_rows(
                        // The minions each job targeted (names it listed that are no minion's,
                        // `unknown`, say nothing of who may see it, and may be many).
                        "SELECT jid, minion FROM job_minions WHERE jid IN ({PAGE}) AND state <> 'unknown' \
                         ORDER BY jid, minion",
                        before,
                        limit,
                    )
                    .await?;
                for row in minions {
                    let jid: String = row.try_get("jid")?;
                    if let Some(&i) = index.get(&jid) {
                        out[i].minions.push(row.try_get("minion")?);
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn returns_of(
        &self,
        jid: &str,
        minions: &[String],
    ) -> Result<Vec<(String, halite_protocol::message::JobReturn)>, $crate::StoreError> {
        self.bounded(async move {
            let mut out = Vec::with_capacity(minions.len());
            for chunk in minions.chunks($crate::common_sql::IN_LIST_MAX) {
                let sql = format!(
                    "SELECT minion, ret FROM job_minions WHERE jid = ? AND ret IS NOT NULL AND minion IN ({}) ORDER BY minion",
                    $crate::common_sql::placeholders(chunk.len())
                );
                let sql = $sql(&sql);
                let mut query = sqlx::query(&sql).bind(jid);
                for minion in chunk {
                    query = query.bind(minion);
                }
                for row in query.fetch_all(&mut *self.conn().await?).await? {
                    let ret: String = row.try_get("ret")?;
                    out.push((row.try_get("minion")?, return_from_json(&ret)?));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn job(&self, jid: &str) -> Result<Option<halite_protocol::message::JobDetail>, $crate::StoreError> {
        self.bounded(async move {
            let Some(row) = sqlx::query(&$sql("SELECT * FROM jobs WHERE jid = ?")).bind(jid).fetch_optional(&mut *self.conn().await?).await?
            else {
                return Ok(None);
            };
            let job = job_from_row(&row)?;
            let rows = sqlx::query(&$sql("SELECT minion, state, ret, late FROM job_minions WHERE jid = ? ORDER BY minion"))
                .bind(jid)
                .fetch_all(&mut *self.conn().await?)
                .await?;
            let mut minions = Vec::with_capacity(rows.len());
            for row in rows {
                let ret: Option<String> = row.try_get("ret")?;
                minions.push(halite_protocol::message::MinionJob {
                    minion: row.try_get("minion")?,
                    state: $crate::records::job_state(&row.try_get::<String, _>("state")?)?,
                    ret: ret.as_deref().map(return_from_json).transpose()?,
                    late: row.try_get("late")?,
                    away: None,
                });
            }
            let summary = self.summary(&job).await?;
            Ok(Some(halite_protocol::message::JobDetail { summary, args: job.args, kwargs: job.kwargs, minions }))
        })
        .await
    }

    async fn principals(&self) -> Result<Vec<$crate::PrincipalRecord>, $crate::StoreError> {
        self.bounded(async move {
            let rows = sqlx::query(&$sql("SELECT name, public_key, acl, signer, signature FROM principals ORDER BY name"))
                .fetch_all(&mut *self.conn().await?)
                .await?;
            self.checked_principals(&rows).await
        })
        .await
    }

    async fn put_principal(&self, principal: &$crate::PrincipalRecord, now_ms: u64) -> Result<(), $crate::StoreError> {
        self.bounded(async move {
            let acl = $crate::records::acl_json(&principal.acl);
            let seal = self.trust.get().seal_principal(&principal.name, &principal.public_key, &acl);
            sqlx::query(&$sql(
                "INSERT INTO principals (name, public_key, acl, updated_at, signer, signature) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (name) DO UPDATE SET public_key = excluded.public_key, acl = excluded.acl, \
                 updated_at = excluded.updated_at, signer = excluded.signer, signature = excluded.signature",
            ))
                .bind(&principal.name)
                .bind(&principal.public_key[..])
                .bind(acl)
                .bind($crate::records::db_int(now_ms))
                .bind(seal.signer)
                .bind(seal.signature)
                .execute(&mut *self.conn().await?)
                .await?;
            Ok(())
        })
        .await
    }

    async fn set_trust(&self, trust: $crate::trust::Trust, now_ms: u64) -> Result<u64, $crate::StoreError> {
        // In use at once, whether or not the database answers: what a master revoked now signs
        // is refused from the next row or announcement read, not from the next registration.
        self.trust.set(trust.sharing(Self::SHARED));
        self.bounded(async move { self.put_trust(now_ms).await }).await
    }

    async fn delete_principal(&self, name: &str) -> Result<bool, $crate::StoreError> {
        self.bounded(async move {
            let mut conn = self.conn().await?;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let done = sqlx::query(&$sql("DELETE FROM principals WHERE name = ?")).bind(name).execute(&mut *tx).await?;
            sqlx::query(&$sql("DELETE FROM api_tokens WHERE principal = ?")).bind(name).execute(&mut *tx).await?;
            for owned in ["software_configs", "deployments", "tokens", "api_tokens"] {
                sqlx::query(&$sql(&format!("UPDATE {owned} SET owner = 'root' WHERE owner = ?"))).bind(name).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(done.rows_affected() == 1)
        })
        .await
    }

    async fn transfer_owner(&self, from: &str, to: &str) -> Result<u64, $crate::StoreError> {
        self.bounded(async move {
            let mut conn = self.conn().await?;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let mut moved = 0;
            for owned in ["software_configs", "deployments", "tokens", "api_tokens"] {
                let done = sqlx::query(&$sql(&format!("UPDATE {owned} SET owner = ? WHERE owner = ?")))
                    .bind(to)
                    .bind(from)
                    .execute(&mut *tx)
                    .await?;
                moved += done.rows_affected();
            }
            tx.commit().await?;
            Ok(moved)
        })
        .await
    }

    async fn tokens(&self, owner: Option<&str>) -> Result<Vec<halite_protocol::message::TokenSummary>, $crate::StoreError> {
        self.bounded(async move {
            let rows = sqlx::query(&$sql(
                "SELECT id, minion, expires_at, used_at FROM tokens WHERE (? IS NULL OR owner = ?) ORDER BY expires_at, minion",
            ))
                .bind(owner)
                .bind(owner)
                .fetch_all(&mut *self.conn().await?)
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(halite_protocol::message::TokenSummary {
                        id: r.try_get::<Option<String>, _>("id")?.unwrap_or_default(),
                        minion: r.try_get("minion")?,
                        expires_at_ms: ms(r.try_get("expires_at")?),
                        used: r.try_get::<Option<i64>, _>("used_at")?.is_some(),
                    })
                })
                .collect()
        })
        .await
    }

    async fn delete_token(&self, id: &str, owner: Option<&str>) -> Result<bool, $crate::StoreError> {
        self.bounded(async move {
            let done = sqlx::query(&$sql("DELETE FROM tokens WHERE id = ? AND (? IS NULL OR owner = ?)"))
                .bind(id)
                .bind(owner)
                .bind(owner)
                .execute(&mut *self.conn().await?)
                .await?;
            Ok(done.rows_affected() > 0)
        })
        .await
    }

    async fn last_jid(&self) -> Result<Option<String>, $crate::StoreError> {
        self.bounded(async move {
            // The newest job stored, or the newest that retention deleted (recorded as it purged).
            Ok(sqlx::query_scalar(&$sql("SELECT max(jid) FROM (SELECT max(jid) AS jid FROM jobs \
                 UNION ALL SELECT value AS jid FROM meta WHERE key = 'last_jid') AS known"))
                .fetch_one(&mut *self.conn().await?)
                .await?)
        })
        .await
    }

    async fn wall_mark(&self) -> Result<Option<u64>, $crate::StoreError> {
        self.bounded(async move {
            let value: Option<String> =
                sqlx::query_scalar(&$sql("SELECT value FROM meta WHERE key = 'wall_mark'")).fetch_optional(&mut *self.conn().await?).await?;
            value.map(|v| v.parse().map_err(|_| corrupt("wall mark is not a number"))).transpose()
        })
        .await
    }

    async fn set_wall_mark(&self, ms: u64) -> Result<(), $crate::StoreError> {
        self.bounded(async move {
            sqlx::query(&$sql("INSERT INTO meta (key, value) VALUES ('wall_mark', ?) ON CONFLICT(key) DO UPDATE \
                 SET value = excluded.value WHERE CAST(excluded.value AS BIGINT) > CAST(meta.value AS BIGINT)"),
            )
            .bind(ms.to_string())
            .execute(&mut *self.conn().await?)
            .await?;
            Ok(())
        })
        .await
    }

    async fn purge_jobs(&self, before_ms: u64) -> Result<u64, $crate::StoreError> {
        self.bounded(async move {
            let mut conn = self.conn().await?;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            // The newest jid is kept first: jids must go on growing when every job is purged.
            sqlx::query(&$sql("INSERT INTO meta (key, value) SELECT 'last_jid', newest.jid \
                 FROM (SELECT max(jid) AS jid FROM jobs) AS newest WHERE newest.jid IS NOT NULL \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE excluded.value > meta.value"))
            .execute(&mut *tx)
            .await?;
            let done = sqlx::query(&$sql("DELETE FROM jobs WHERE created_at < ? AND NOT EXISTS (SELECT 1 FROM job_minions m \
                 WHERE m.jid = jobs.jid AND m.state IN ('waiting', 'sent', 'running', 'queued'))"),
            )
            .bind($crate::records::db_int(before_ms))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(done.rows_affected())
        })
        .await
    }
    };
}
pub(crate) use common_store_methods;
