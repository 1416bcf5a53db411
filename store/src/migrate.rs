//! `halite-master migrate-store`: copies a SQLite store into an empty PostgreSQL one, table by
//! table, in one PostgreSQL transaction (a failed copy leaves the target empty).
//!
//! Rows are copied as stored (hashes, signed jobs, returns), not re-derived through the
//! [`Store`](super::Store) trait: enrollment and gateway tokens exist only as hashes, and every
//! job keeps its signature.

use sqlx::postgres::PgArguments;
use sqlx::sqlite::SqliteRow;
use sqlx::{Arguments, Row};

use super::{PostgresStore, SqliteStore, StoreError};

/// How a column is read from SQLite and bound for PostgreSQL.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    OptText,
    Blob,
    Int,
    OptInt,
    OptBlob,
    /// An INTEGER 0/1 on SQLite, a BOOLEAN on PostgreSQL.
    Bool,
}

use Kind::{Blob, Bool, Int, OptBlob, OptInt, OptText, Text};

/// Every table, parents before children (job_minions references jobs).
const TABLES: &[(&str, &[(&str, Kind)])] = &[
    // Signatures are copied as they are: the master whose key made them reads them on PostgreSQL.
    (
        "keys",
        &[
            ("id", Text),
            ("public_key", Blob),
            ("state", Text),
            ("updated_at", Int),
            ("signer", OptBlob),
            ("signature", OptBlob),
        ],
    ),
    (
        "tokens",
        &[
            ("token_hash", Blob),
            ("minion", Text),
            ("expires_at", Int),
            ("used_at", OptInt),
            ("id", OptText),
            ("replaces_key", Bool),
            ("owner", Text),
            ("signer", OptBlob),
            ("signature", OptBlob),
            ("replaced_key", OptBlob),
        ],
    ),
    ("minions", &[("id", Text), ("grains", Text), ("functions", Text), ("last_seen", Int)]),
    (
        "jobs",
        &[
            ("jid", Text),
            ("function", Text),
            ("target_kind", Text),
            ("target_expr", Text),
            ("args", Text),
            ("kwargs", Text),
            ("caller", Text),
            ("created_at", Int),
            ("timeout_ms", Int),
            ("ttl_ms", Int),
            ("body", Blob),
            ("signature", Blob),
            ("rollout", OptText),
        ],
    ),
    (
        "job_minions",
        &[("jid", Text), ("minion", Text), ("state", Text), ("ret", OptText), ("late", Bool), ("updated_at", Int)],
    ),
    (
        "principals",
        &[
            ("name", Text),
            ("public_key", Blob),
            ("acl", Text),
            ("updated_at", Int),
            ("signer", OptBlob),
            ("signature", OptBlob),
        ],
    ),
    ("masters", &[("public_key", Blob), ("id", Text), ("certificate", OptBlob), ("updated_at", Int)]),
    ("software_configs", &[("id", Text), ("body", Text), ("created_at", Int), ("owner", Text)]),
    (
        "deployments",
        &[
            ("id", Text),
            ("server_id", Text),
            ("status", Text),
            ("relay_pending", Bool),
            ("body", Text),
            ("created_at", Int),
            ("updated_at", Int),
            ("owner", Text),
            ("jid", Text),
        ],
    ),
    (
        "api_tokens",
        &[
            ("token_hash", Blob),
            ("principal", Text),
            ("created_at", Int),
            ("id", OptText),
            ("expires_at", OptInt),
            ("owner", Text),
            ("signer", OptBlob),
            ("signature", OptBlob),
        ],
    ),
    (
        "deployment_groups",
        &[("id", Text), ("open", Int), ("body", Text), ("created_at", Int), ("updated_at", Int), ("revision", Int)],
    ),
    // `open` is SQLite's own clean-shutdown mark.
    ("meta", &[("key", Text), ("value", Text)]),
    // The trail keeps its ids (its store order) and every hash and signature: it verifies on
    // PostgreSQL as it did on SQLite, and the masters append to the same chains.
    (
        "audit",
        &[
            ("id", Int),
            ("chain", Text),
            ("seq", Int),
            ("at_ms", Int),
            ("principal", Text),
            ("tenant", OptText),
            ("action", Text),
            ("decision", Text),
            ("minions", Text),
            ("body", Text),
            ("prev", Text),
            ("hash", Text),
            ("signer", Text),
            ("signature", Text),
        ],
    ),
    ("audit_checkpoints", &[("chain", Text), ("seq", Int), ("hash", Text), ("signer", Text), ("signature", Text)]),
];

/// Rows read from SQLite and written to PostgreSQL per statement (at most 14 columns: far
/// below PostgreSQL's 65,535 bound values).
const ROWS_PER_BATCH: usize = 500;

/// Rows copied, per table, in copy order.
pub type Copied = Vec<(&'static str, u64)>;

/// Copies everything in `from` into `to`, which must hold no data yet.
pub async fn sqlite_to_postgres(from: &SqliteStore, to: &PostgresStore) -> Result<Copied, StoreError> {
    let mut tx = to.pool()?.begin().await?;
    for (table, _) in TABLES {
        let filter = if *table == "meta" { " WHERE key NOT IN ('open')" } else { "" };
        let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}{filter}")).fetch_one(&mut *tx).await?;
        if n > 0 {
            return Err(StoreError::Conflict(format!(
                "the target database already holds data ({n} rows in {table}); migrate into an empty database"
            )));
        }
    }
    let mut copied = Vec::with_capacity(TABLES.len());
    for (table, columns) in TABLES {
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        let skip_open = if *table == "meta" { "AND key <> 'open'" } else { "" };
        let select = format!(
            "SELECT rowid AS _rowid, {} FROM {table} WHERE rowid > ? {skip_open} ORDER BY rowid LIMIT {ROWS_PER_BATCH}",
            names.join(", ")
        );
        let mut after = 0i64;
        let mut count = 0u64;
        loop {
            let rows = sqlx::query(&select).bind(after).fetch_all(&mut *from.conn().await?).await?;
            let Some(last) = rows.last() else { break };
            after = last.try_get("_rowid")?;
            count += rows.len() as u64;
            insert_rows(&mut tx, table, columns, &rows).await?;
        }
        copied.push((*table, count));
    }
    // The trail's ids were copied: PostgreSQL numbers the next record after them.
    sqlx::query(
        "SELECT setval(pg_get_serial_sequence('audit', 'id'), COALESCE((SELECT MAX(id) FROM audit), 0) + 1, false)",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(copied)
}

async fn insert_rows(
    tx: &mut sqlx::PgConnection,
    table: &str,
    columns: &[(&str, Kind)],
    rows: &[SqliteRow],
) -> Result<(), StoreError> {
    let mut args = PgArguments::default();
    let mut tuples = Vec::with_capacity(rows.len());
    let mut n = 0;
    for row in rows {
        let mut places = Vec::with_capacity(columns.len());
        for (name, kind) in columns {
            n += 1;
            places.push(format!("${n}"));
            let added = match kind {
                Text => args.add(row.try_get::<String, _>(*name)?),
                OptText => args.add(row.try_get::<Option<String>, _>(*name)?),
                Blob => args.add(row.try_get::<Vec<u8>, _>(*name)?),
                Int => args.add(row.try_get::<i64, _>(*name)?),
                OptInt => args.add(row.try_get::<Option<i64>, _>(*name)?),
                OptBlob => args.add(row.try_get::<Option<Vec<u8>>, _>(*name)?),
                Bool => args.add(row.try_get::<i64, _>(*name)? != 0),
            };
            added.map_err(|error| StoreError::Corrupt(format!("{table}.{name}: {error}")))?;
        }
        tuples.push(format!("({})", places.join(", ")));
    }
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    let sql = format!("INSERT INTO {table} ({}) VALUES {}", names.join(", "), tuples.join(", "));
    sqlx::query_with(&sql, args).execute(&mut *tx).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use halite_protocol::message::{
        JobReturn, KeyState, MinionJobState, NewDeployment, Outcome, PrincipalAcl, SoftwareConfig, SoftwareDeployment,
    };
    use serde_json::json;

    use halite_protocol::audit::AuditEntry;
    use halite_protocol::message::AuditFilter;

    use super::*;
    use crate::audit::AuditStore;
    use crate::conformance::job;
    use crate::test_postgres::fresh_database;
    use crate::{DeployStore, DeploymentRecord, KeyRecord, MinionRecord, PrincipalRecord, StateChange, Store};

    /// The master's own keys, on SQLite and then on PostgreSQL.
    fn master() -> crate::trust::Trust {
        let key = halite_protocol::identity::IdentityKey::from_seed(&[3; 32]);
        crate::trust::Trust::new(key, None, "m1", Vec::new())
    }

    async fn filled_sqlite() -> SqliteStore {
        let store = SqliteStore::in_memory().await.unwrap();
        store.set_trust(master(), 1).await.unwrap();
        store
            .put_key(&KeyRecord { id: "web1".into(), public_key: [1; 32], state: KeyState::Accepted }, 1)
            .await
            .unwrap();
        store
            .put_key(&KeyRecord { id: "web2".into(), public_key: [2; 32], state: KeyState::Pending }, 2)
            .await
            .unwrap();
        // Made to replace web1's accepted key: the flag must survive the copy.
        store.create_token(&[7; 32], "web1", 10_000, true, "root").await.unwrap();
        store.create_token(&[8; 32], "web3", 10_000, false, "heat").await.unwrap();
        store
            .put_minions(&[MinionRecord {
                id: "web1".into(),
                grains: BTreeMap::from([("os".into(), json!("Debian"))]),
                functions: vec!["test.ping".into()],
                last_seen_ms: 5,
            }])
            .await
            .unwrap();
        store
            .put_principal(
                &PrincipalRecord { name: "heat".into(), public_key: [3; 32], acl: PrincipalAcl::default() },
                3,
            )
            .await
            .unwrap();
        // Enough jobs for several batches, one with a return, one late, one unfinished.
        for n in 0..1_200u64 {
            let jid = format!("20261122{n:012}");
            store.insert_job(&job(&jid, n), &[("web1".into(), MinionJobState::Sent)]).await.unwrap();
        }
        let ret = JobReturn {
            jid: "20261122000000000001".into(),
            minion: "web1".into(),
            success: true,
            retcode: 0,
            outputs: json!({"stdout": "hi"}),
            truncated: false,
            duration_ms: 4,
            outcome: Outcome::Completed,
        };
        let change = |jid: &str, state, ret: Option<JobReturn>, late| StateChange {
            jid: jid.into(),
            minion: "web1".into(),
            state,
            ret,
            at_ms: 9,
            late,
        };
        let mut changes = vec![change("20261122000000000001", MinionJobState::Returned, Some(ret.clone()), false)];
        changes.push(change("20261122000000000002", MinionJobState::TimedOut, None, false));
        let late = JobReturn { jid: "20261122000000000002".into(), ..ret.clone() };
        changes.push(change("20261122000000000002", MinionJobState::TimedOut, Some(late), true));
        for n in 3..1_199u64 {
            changes.push(change(&format!("20261122{n:012}"), MinionJobState::Returned, None, false));
        }
        store.set_states(&changes).await.unwrap();
        store.set_wall_mark(77).await.unwrap();
        let config: SoftwareConfig =
            serde_json::from_value(json!({"id": "c1", "name": "c1", "group": "script", "config": "echo hi", "inputs": [], "outputs": [], "creation_time": "2026-11-22T00:00:00Z"})).unwrap();
        store.put_config(&config, "heat", 3).await.unwrap();
        let spec: NewDeployment = serde_json::from_value(json!({"config_id": "c1", "server_id": "web1"})).unwrap();
        let deployment = SoftwareDeployment {
            id: "d1".into(),
            config_id: "c1".into(),
            server_id: "web1".into(),
            input_values: Default::default(),
            output_values: Default::default(),
            action: "CREATE".into(),
            status: "IN_PROGRESS".into(),
            status_reason: String::new(),
            derived_config_id: "d1-d".into(),
            creation_time: "2026-11-22T00:00:00Z".into(),
            updated_time: None,
        };
        let record = DeploymentRecord {
            owner: "heat".into(),
            deployment,
            spec,
            jid: "20261122000000001199".into(),
            item: json!({}),
            relay_pending: true,
            last_signal: None,
            finish_id: String::new(),
        };
        store.put_deployment(&record, 4).await.unwrap();
        store.create_api_token(&[4; 32], "heat", "ops", 5, None).await.unwrap();
        // An audit trail pruned behind a checkpoint, longer than one batch.
        let entries: Vec<AuditEntry> = (0..700u64).map(audit_entry).collect();
        store.append_audit("m1", None, &entries).await.unwrap();
        assert_eq!(store.prune_audit("m1", None, Some(650)).await.unwrap(), 50);
        store
    }

    fn audit_entry(n: u64) -> AuditEntry {
        AuditEntry {
            at_ms: n,
            kind: "request".into(),
            principal: "heat".into(),
            tenant: Some("acme".into()),
            action: "key_list".into(),
            decision: "granted".into(),
            reason: None,
            minions: vec!["web1".into()],
            detail: json!({ "n": n }),
        }
    }

    #[test]
    fn everything_a_sqlite_master_kept_reads_back_the_same_from_postgres() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let from = filled_sqlite().await;
            let to = PostgresStore::connect(fresh_database().await).await.unwrap();
            let copied = sqlite_to_postgres(&from, &to).await.unwrap();
            let count = |table: &str| copied.iter().find(|(t, _)| *t == table).unwrap().1;
            assert_eq!((count("jobs"), count("job_minions"), count("keys")), (1_200, 1_200, 2));
            // The same master on PostgreSQL reads the rows it signed on SQLite as signed.
            assert_eq!(to.set_trust(master(), 2).await.unwrap(), 0, "nothing left to sign");
            assert_eq!(to.keys().await.unwrap()[0].state, KeyState::Accepted);
            assert_eq!(to.principals().await.unwrap().len(), from.principals().await.unwrap().len());
            assert!(!to.principals().await.unwrap().is_empty());

            assert_eq!(to.keys().await.unwrap(), from.keys().await.unwrap());
            assert_eq!(to.minions().await.unwrap(), from.minions().await.unwrap());
            assert_eq!(to.principals().await.unwrap(), from.principals().await.unwrap());
            assert_eq!(to.last_jid().await.unwrap(), from.last_jid().await.unwrap());
            assert_eq!(to.wall_mark().await.unwrap(), Some(77));
            for jid in ["20261122000000000001", "20261122000000000002", "20261122000000001199"] {
                assert_eq!(to.job(jid).await.unwrap(), from.job(jid).await.unwrap(), "{jid}");
            }
            assert!(to.job("20261122000000000002").await.unwrap().unwrap().minions[0].late);
            assert_eq!(to.jobs(None, 2_000, true).await.unwrap(), from.jobs(None, 2_000, true).await.unwrap());
            assert_eq!(to.unfinished_jobs().await.unwrap(), from.unfinished_jobs().await.unwrap());
            assert_eq!(to.configs(None, 10).await.unwrap(), from.configs(None, 10).await.unwrap());
            assert_eq!(to.deployment("d1").await.unwrap(), from.deployment("d1").await.unwrap());
            // Owners are carried: what heat made stays heat's (and ops's token ops's).
            assert_eq!(to.config("c1").await.unwrap().unwrap().owner, "heat");
            assert_eq!(to.configs(Some("heat"), 10).await.unwrap().len(), 1);
            assert_eq!(to.deployment("d1").await.unwrap().unwrap().owner, "heat");
            assert_eq!(to.tokens(Some("heat")).await.unwrap().len(), 1);
            assert_eq!(to.api_tokens(Some("ops")).await.unwrap().len(), 1);
            assert!(to.api_tokens(Some("heat")).await.unwrap().is_empty());
            assert_eq!(to.open_deployments().await.unwrap().len(), 1);
            // Tokens survive as hashes: they still work, once.
            assert_eq!(to.api_token_grant(&[4; 32], 6).await.unwrap().map(|g| g.principal).as_deref(), Some("heat"));
            assert_eq!(to.api_tokens(None).await.unwrap(), from.api_tokens(None).await.unwrap());
            assert_eq!(to.tokens(None).await.unwrap(), from.tokens(None).await.unwrap());
            // The enrollment token too, with its permission to replace web1's key.
            assert_eq!(
                to.enroll_with_token(&[7; 32], "web1", &[9; 32], 50).await.unwrap(),
                crate::TokenUse::Enrolled { replaced: true }
            );
            assert_eq!(to.tokens(Some("heat")).await.unwrap().len(), 1, "the owner is carried over");
            assert_eq!(
                to.enroll_with_token(&[8; 32], "web3", &[10; 32], 50).await.unwrap(),
                crate::TokenUse::Enrolled { replaced: false }
            );

            // The trail reads and verifies the same, and the master goes on appending to it.
            let everything = AuditFilter { reads: true, ..AuditFilter::default() };
            let trail = to.audit_page(&everything, None, 1_000).await.unwrap();
            assert_eq!(trail, from.audit_page(&everything, None, 1_000).await.unwrap());
            assert_eq!(trail.len(), 650);
            assert_eq!(to.audit_checkpoints().await.unwrap(), from.audit_checkpoints().await.unwrap());
            let heads = BTreeMap::from([("m1".to_owned(), 700)]);
            let verified = to.verify_audit(&heads).await.unwrap();
            assert_eq!((verified.records, verified.broken.as_deref()), (650, None), "{verified:?}");
            assert_eq!(to.append_audit("m1", None, &[audit_entry(700)]).await.unwrap().seq, 701);
            let last = to.audit_page(&everything, trail.last().map(|r| r.id), 10).await.unwrap();
            assert_eq!(last.iter().map(|r| r.seq).collect::<Vec<_>>(), [701]);
            assert!(to.verify_audit(&BTreeMap::from([("m1".to_owned(), 701)])).await.unwrap().broken.is_none());

            // A second run into a database with data is refused, and changes nothing.
            let error = sqlite_to_postgres(&from, &to).await.unwrap_err().to_string();
            assert!(error.contains("already holds data"), "{error}");
            assert_eq!(to.jobs(None, 2_000, false).await.unwrap().len(), 1_200);
        });
    }
}
