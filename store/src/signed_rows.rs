//! Signed key and principal rows, in the SQL both backends share: who signed a row is checked
//! against the masters this master trusts ([`Trust`](super::trust::Trust)), and a row that grants
//! something without a valid signature is not honoured: an accepted key reads as pending (an
//! admin may accept it, which signs it), a principal is left out. Both are logged as errors and
//! counted (`halite_denials_total{kind="store_row"}`).

/// Invoked at module level after `common_helpers!`, with `sqlx::Row` in scope.
macro_rules! signed_row_helpers {
    ($store:ty, $row:ty, $sql:path) => {
        impl $store {
            /// The registration of master key `key` in the `masters` table, if any.
            pub async fn registration(
                &self,
                key: &[u8],
            ) -> Result<Option<$crate::trust::Registration>, $crate::StoreError> {
                let row = sqlx::query(&$sql("SELECT id, certificate FROM masters WHERE public_key = ?"))
                    .bind(key)
                    .fetch_optional(&mut *self.conn().await?)
                    .await?;
                row.map(|row| {
                    Ok($crate::trust::Registration {
                        id: row.try_get("id")?,
                        certificate: row.try_get("certificate")?,
                    })
                })
                .transpose()
            }

            /// The master that signed something, if this master trusts it (reading its
            /// registration when it is not known yet).
            pub async fn trusted_signer(
                &self,
                trust: &$crate::trust::Trust,
                signer: Option<&[u8]>,
            ) -> Result<
                Result<halite_protocol::identity::PublicIdentity, $crate::trust::Untrusted>,
                $crate::StoreError,
            > {
                let Some(signer) = signer else { return Ok(Err($crate::trust::Untrusted::Unsigned)) };
                match trust.known(signer) {
                    Ok(Some(key)) => return Ok(Ok(key)),
                    Ok(None) => {}
                    Err(untrusted) => return Ok(Err(untrusted)),
                }
                let registration = self.registration(signer).await?;
                let key = halite_protocol::identity::PublicIdentity::from_bytes(signer)
                    .map_err(|_| corrupt("a checked key no longer parses"))?;
                Ok(trust.admit(&key, registration.as_ref()).map(|()| key))
            }

            /// Whether a key row as read is a master's word for its state; what is not is
            /// logged and counted.
            async fn key_row_trusted(
                &self,
                trust: &$crate::trust::Trust,
                row: &$row,
                key: &$crate::KeyRecord,
            ) -> Result<bool, $crate::StoreError> {
                let signer: Option<Vec<u8>> = row.try_get("signer")?;
                let signature: Option<Vec<u8>> = row.try_get("signature")?;
                let state = $crate::records::key_state_name(key.state);
                let checked = match self.trusted_signer(trust, signer.as_deref()).await? {
                    Ok(signer) => $crate::trust::Trust::check_key(
                        &signer,
                        &key.id,
                        &key.public_key,
                        state,
                        signature.as_deref().unwrap_or_default(),
                    ),
                    Err(untrusted) => Err(untrusted),
                };
                if let Err(why) = checked {
                    trust.rows_refused.inc();
                    tracing::error!(minion = %key.id, %why, "an accepted key row no master signed: taken as pending (written past the masters?)");
                    return Ok(false);
                }
                Ok(true)
            }

            /// Key rows as read, an accepted one read as pending unless signed by a trusted master.
            async fn checked_keys(&self, rows: &[$row]) -> Result<Vec<$crate::KeyRecord>, $crate::StoreError> {
                let trust = self.trust.get();
                let mut keys = Vec::with_capacity(rows.len());
                for row in rows {
                    let mut key = key_from_row(row)?;
                    if key.state == halite_protocol::message::KeyState::Accepted
                        && !self.key_row_trusted(&trust, row, &key).await?
                    {
                        key.state = halite_protocol::message::KeyState::Pending;
                    }
                    keys.push(key);
                }
                Ok(keys)
            }

            /// Principal rows as read, those signed by a trusted master.
            async fn checked_principals(
                &self,
                rows: &[$row],
            ) -> Result<Vec<$crate::PrincipalRecord>, $crate::StoreError> {
                let trust = self.trust.get();
                let mut principals = Vec::with_capacity(rows.len());
                for row in rows {
                    let name: String = row.try_get("name")?;
                    let key: Vec<u8> = row.try_get("public_key")?;
                    let acl: String = row.try_get("acl")?;
                    let signer: Option<Vec<u8>> = row.try_get("signer")?;
                    let signature: Option<Vec<u8>> = row.try_get("signature")?;
                    let checked = match self.trusted_signer(&trust, signer.as_deref()).await? {
                        Ok(signer) => $crate::trust::Trust::check_principal(
                            &signer,
                            &name,
                            &key,
                            &acl,
                            signature.as_deref().unwrap_or_default(),
                        ),
                        Err(untrusted) => Err(untrusted),
                    };
                    if let Err(why) = checked {
                        trust.rows_refused.inc();
                        tracing::error!(principal = %name, %why, "a principal row no master signed: ignored (written past the masters?)");
                        continue;
                    }
                    principals.push($crate::PrincipalRecord {
                        name,
                        public_key: key.try_into().map_err(|_| corrupt("principal key is not 32 bytes"))?,
                        acl: $crate::records::acl_from_json(&acl)?,
                    });
                }
                Ok(principals)
            }

            /// Whether a token row's seal (`signer`, `signature`) is a trusted master's over
            /// `check`'s row; what is not is logged and counted.
            pub async fn token_row_trusted(
                &self,
                what: &str,
                signer: Option<&[u8]>,
                check: impl FnOnce(&halite_protocol::identity::PublicIdentity) -> Result<(), $crate::trust::Untrusted>,
            ) -> Result<bool, $crate::StoreError> {
                let trust = self.trust.get();
                let checked = match self.trusted_signer(&trust, signer).await? {
                    Ok(signer) => check(&signer),
                    Err(untrusted) => Err(untrusted),
                };
                if let Err(why) = checked {
                    trust.rows_refused.inc();
                    tracing::error!(token = what, %why, "a token row no master signed: not honoured (written past the masters?)");
                    return Ok(false);
                }
                Ok(true)
            }

            /// Whether an enrollment token row as read (`expires_at`, `replaced_key`, `signer`,
            /// `signature`) for `hash` and `minion` is a trusted master's.
            pub async fn enrollment_row_trusted(
                &self,
                row: &$row,
                hash: &[u8],
                minion: &str,
            ) -> Result<bool, $crate::StoreError> {
                let signature: Option<Vec<u8>> = row.try_get("signature")?;
                let signer: Option<Vec<u8>> = row.try_get("signer")?;
                let replaced: Option<Vec<u8>> = row.try_get("replaced_key")?;
                let signed = $crate::trust::EnrollmentTokenRow {
                    hash,
                    minion,
                    expires_at_ms: ms(row.try_get("expires_at")?),
                    replaces: replaced.as_deref(),
                };
                let id = halite_protocol::hex::encode(&hash[..hash.len().min(6)]);
                self.token_row_trusted(&id, signer.as_deref(), |signer| {
                    $crate::trust::Trust::check_enrollment_token(signer, &signed, signature.as_deref().unwrap_or_default())
                })
                .await
            }

            /// Signs the enrollment and gateway token rows from before their signatures (see
            /// [`Self::put_trust`]); how many.
            async fn sign_legacy_tokens(
                &self,
                trust: &$crate::trust::Trust,
            ) -> Result<u64, $crate::StoreError> {
                let mut conn = self.conn().await?;
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                // A replacing token from before names the key accepted at the upgrade.
                let tokens = sqlx::query(&$sql(
                    "SELECT token_hash, minion, expires_at, CASE WHEN replaces_key THEN \
                     (SELECT public_key FROM keys WHERE keys.id = tokens.minion AND keys.state = 'accepted' \
                      ORDER BY keys.updated_at DESC LIMIT 1) END AS replaced \
                     FROM tokens WHERE signature IS NULL",
                ))
                .fetch_all(&mut *tx)
                .await?;
                for row in &tokens {
                    let hash: Vec<u8> = row.try_get("token_hash")?;
                    let replaced: Option<Vec<u8>> = row.try_get("replaced")?;
                    let seal = trust.seal_enrollment_token(&$crate::trust::EnrollmentTokenRow {
                        hash: &hash,
                        minion: &row.try_get::<String, _>("minion")?,
                        expires_at_ms: ms(row.try_get("expires_at")?),
                        replaces: replaced.as_deref(),
                    });
                    sqlx::query(&$sql("UPDATE tokens SET signer = ?, signature = ?, replaced_key = ? WHERE token_hash = ?"))
                        .bind(seal.signer)
                        .bind(seal.signature)
                        .bind(replaced.as_deref())
                        .bind(&hash)
                        .execute(&mut *tx)
                        .await?;
                }
                let api_tokens = sqlx::query(&$sql(
                    "SELECT token_hash, principal, expires_at FROM api_tokens WHERE signature IS NULL",
                ))
                .fetch_all(&mut *tx)
                .await?;
                for row in &api_tokens {
                    let hash: Vec<u8> = row.try_get("token_hash")?;
                    let seal = trust.seal_api_token(&$crate::trust::ApiTokenRow {
                        hash: &hash,
                        principal: &row.try_get::<String, _>("principal")?,
                        expires_at_ms: row.try_get::<Option<i64>, _>("expires_at")?.map(ms),
                    });
                    sqlx::query(&$sql("UPDATE api_tokens SET signer = ?, signature = ? WHERE token_hash = ?"))
                        .bind(seal.signer)
                        .bind(seal.signature)
                        .bind(&hash)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                let signed = (tokens.len() + api_tokens.len()) as u64;
                if signed > 0 {
                    tracing::info!(enrollment = tokens.len(), gateway = api_tokens.len(), "signed the token rows from before the upgrade");
                }
                Ok(signed)
            }

            /// With the trust in use (`set_trust`): registers this master in `masters` (its key, id and
            /// certificate, for the others to check its signatures), and signs the rows that
            /// predate signatures if this process applied the migration that added them (then
            /// they are the operator's rows from before the upgrade: the migration runs once, and
            /// nothing could write a row after it and before this, at the master's start).
            /// Returns how many rows it signed.
            async fn put_trust(&self, now_ms: u64) -> Result<u64, $crate::StoreError> {
                let trust = self.trust.get();
                let registration = trust.registration();
                sqlx::query(&$sql(
                    "INSERT INTO masters (public_key, id, certificate, updated_at) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (public_key) DO UPDATE SET id = excluded.id, certificate = excluded.certificate, \
                     updated_at = excluded.updated_at",
                ))
                .bind(&trust.public().as_bytes()[..])
                .bind(&registration.id)
                .bind(registration.certificate.as_deref())
                .bind($crate::records::db_int(now_ms))
                .execute(&mut *self.conn().await?)
                .await?;
                let mut signed = 0;
                if self.trust.legacy_tokens() {
                    signed += self.sign_legacy_tokens(&trust).await?;
                }
                if !self.trust.legacy_rows() {
                    return Ok(signed);
                }
                let mut conn = self.conn().await?;
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let keys = sqlx::query(&$sql("SELECT id, public_key, state FROM keys WHERE signature IS NULL"))
                    .fetch_all(&mut *tx)
                    .await?;
                for row in &keys {
                    let key = key_from_row(row)?;
                    let seal = trust.seal_key(&key.id, &key.public_key, $crate::records::key_state_name(key.state));
                    sqlx::query(&$sql("UPDATE keys SET signer = ?, signature = ? WHERE id = ? AND public_key = ?"))
                        .bind(seal.signer)
                        .bind(seal.signature)
                        .bind(&key.id)
                        .bind(&key.public_key[..])
                        .execute(&mut *tx)
                        .await?;
                }
                let principals =
                    sqlx::query(&$sql("SELECT name, public_key, acl FROM principals WHERE signature IS NULL"))
                        .fetch_all(&mut *tx)
                        .await?;
                for row in &principals {
                    let name: String = row.try_get("name")?;
                    let key: Vec<u8> = row.try_get("public_key")?;
                    let seal = trust.seal_principal(&name, &key, &row.try_get::<String, _>("acl")?);
                    sqlx::query(&$sql("UPDATE principals SET signer = ?, signature = ? WHERE name = ?"))
                        .bind(seal.signer)
                        .bind(seal.signature)
                        .bind(&name)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                signed += (keys.len() + principals.len()) as u64;
                if keys.len() + principals.len() > 0 {
                    tracing::info!(keys = keys.len(), principals = principals.len(), "signed the key and principal rows from before the upgrade");
                }
                Ok(signed)
            }
        }
    };
}
pub(crate) use signed_row_helpers;
