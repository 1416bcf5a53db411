//! The embedded SQLite store.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::str::FromStr;

use halite_protocol::message::{JobDetail, JobSummary, MinionJob, MinionJobState, SignedJob, Target};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::Row;

use super::records::{
    acl_from_json, acl_json, job_state, job_state_name, json, key_state, key_state_name, return_from_json, return_json,
    target_kind, target_kind_name, to_json,
};
use super::{
    JobListing, JobRecord, KeyRecord, MinionRecord, PrincipalRecord, StateChange, Store, StoreError, UnfinishedJob,
};

/// Schema migrations: versioned SQL files in `master/migrations/sqlite`, embedded at build time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// Keeps the newest jid ever stored (jobs are purged; the sequence must not restart).
const LAST_JID_SQL: &str = " INSERT INTO meta (key, value) VALUES ('last_jid', ?) \
     ON CONFLICT(key) DO UPDATE SET value = excluded.value WHERE excluded.value > meta.value;";

/// A return that came after its slot ended: kept beside the final state, the first one wins.
const LATE_RETURN_SQL: &str = "UPDATE job_minions SET ret = ?, late = 1, updated_at = ? \
     WHERE jid = ? AND minion = ? AND ret IS NULL";

fn state_rows_sql(rows: usize) -> String {
    let values = vec!["(?, ?, ?, ?, ?)"; rows].join(", ");
    format!(
        "WITH v(jid, minion, state, ret, at) AS (VALUES {values}) \
         UPDATE job_minions SET state = v.state, ret = COALESCE(v.ret, job_minions.ret), updated_at = v.at \
         FROM v WHERE job_minions.jid = v.jid AND job_minions.minion = v.minion"
    )
}

fn bind_states<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    changes: &'q [StateChange],
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    for change in changes {
        query = query
            .bind(&change.jid)
            .bind(&change.minion)
            .bind(job_state_name(change.state))
            .bind(change.ret.as_ref().map(return_json))
            .bind(db_int(change.at_ms));
    }
    query
}

fn minion_rows_sql(rows: usize) -> String {
    let values = vec!["(?, ?, ?, ?)"; rows].join(", ");
    format!(" INSERT INTO job_minions (jid, minion, state, updated_at) VALUES {values};")
}

/// Rows written by one statement (5 bound values each, far below SQLite's variable limit).
const ROWS_PER_STATEMENT: usize = 200;

/// SQLite, in WAL mode: a crash (even `kill -9`) loses no committed transaction.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) and migrates the database at `path`.
    ///
    /// A database that was open when its master stopped uncleanly keeps its latest commits in
    /// `<path>-wal`; if that file is missing (the database was copied alone, or the log
    /// deleted) opening it would silently drop them, so it is refused unless `accept_loss`.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, false).await
    }

    /// [`SqliteStore::open`], optionally accepting a database whose write-ahead log is lost.
    pub async fn open_with(path: &Path, accept_loss: bool) -> Result<Self, StoreError> {
        if !accept_loss {
            check_log(path).await?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true);
        // One connection: the master's core serialises store calls anyway, and SQLite allows
        // one writer at a time.
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
        let store = SqliteStore { pool };
        store.migrate().await?;
        // Marks the file open, in the main file itself (the checkpoint), so a copy of it alone
        // after a crash is recognised; `close` removes the mark.
        sqlx::query("INSERT OR REPLACE INTO meta (key, value) VALUES ('open', '1')").execute(&store.pool).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&store.pool).await?;
        Ok(store)
    }

    /// An in-memory database, for tests.
    pub async fn in_memory() -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:")?.foreign_keys(true);
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
        let store = SqliteStore { pool };
        store.migrate().await?;
        Ok(store)
    }

    pub(super) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        adopt_user_version(&self.pool).await?;
        MIGRATOR.run(&self.pool).await.map_err(|error| match error {
            sqlx::migrate::MigrateError::Execute(error) => StoreError::from(error),
            other => StoreError::Corrupt(format!("schema migration: {other}")),
        })
    }
}

/// Databases made before migrations were files counted them in `PRAGMA user_version`: the
/// migrations they already ran are recorded as applied (same versions, same checksums), once,
/// so sqlx's migrator takes over from there.
async fn adopt_user_version(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    let version: i64 = sqlx::query_scalar("PRAGMA user_version").fetch_one(&mut *tx).await?;
    if version > 0 {
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
             installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, \
             checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
        )
        .execute(&mut *tx)
        .await?;
        for migration in MIGRATOR.iter().take_while(|m| m.version <= version) {
            sqlx::query(
                "INSERT OR IGNORE INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                 VALUES (?, ?, TRUE, ?, 0)",
            )
            .bind(migration.version)
            .bind(&*migration.description)
            .bind(&*migration.checksum)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::raw_sql("PRAGMA user_version = 0").execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

fn wal_path(path: &Path) -> std::path::PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    wal.into()
}

/// Refuses a database whose write-ahead log is missing after an unclean stop, or damaged
/// before its last committed transaction: opening either would silently lose what the log held.
async fn check_log(path: &Path) -> Result<(), StoreError> {
    let wal = wal_path(path);
    let hint = "Put the -wal file back beside it (copy both together), or start with --accept-wal-loss \
                to go on with what SQLite can read";
    if left_open_without_log(path).await {
        return Err(StoreError::Corrupt(format!(
            "{} was not closed cleanly and its write-ahead log {} is missing: the jobs, returns and keys \
             written last are not in it. {hint}",
            path.display(),
            wal.display(),
        )));
    }
    match super::wal::check(&wal) {
        Ok(Some(damage)) => Err(StoreError::Corrupt(format!(
            "the write-ahead log {} is damaged at {}, before transactions it records: they would be lost. {hint}",
            wal.display(),
            if damage.frame == 0 { "its header".to_owned() } else { format!("frame {}", damage.frame) },
        ))),
        Ok(None) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(StoreError::Unavailable(format!("reading {}: {error}", wal.display()))),
    }
}

/// Whether the database at `path` is marked open (its master did not close it) while its
/// write-ahead log is gone. Read without touching the file (immutable), so nothing is lost
/// by looking.
async fn left_open_without_log(path: &Path) -> bool {
    if !path.exists() || wal_path(path).exists() {
        return false;
    }
    let options = SqliteConnectOptions::new().filename(path).read_only(true).immutable(true);
    let Ok(mut conn) = sqlx::ConnectOptions::connect(&options).await else { return false };
    let marked: Result<Option<String>, _> =
        sqlx::query_scalar("SELECT value FROM meta WHERE key = 'open'").fetch_optional(&mut conn).await;
    let _ = sqlx::Connection::close(conn).await;
    matches!(marked, Ok(Some(_)))
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

fn key_from_row(row: &SqliteRow) -> Result<KeyRecord, StoreError> {
    let public_key: Vec<u8> = row.try_get("public_key")?;
    let state: String = row.try_get("state")?;
    Ok(KeyRecord {
        id: row.try_get("id")?,
        public_key: public_key.try_into().map_err(|_| corrupt("public key is not 32 bytes"))?,
        state: key_state(&state)?,
    })
}

fn ms(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

pub(super) fn db_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn job_from_row(row: &SqliteRow) -> Result<JobRecord, StoreError> {
    let kind: String = row.try_get("target_kind")?;
    Ok(JobRecord {
        jid: row.try_get("jid")?,
        function: row.try_get("function")?,
        target: Target { kind: target_kind(&kind)?, expr: row.try_get("target_expr")? },
        args: json(&row.try_get::<String, _>("args")?)?,
        kwargs: json(&row.try_get::<String, _>("kwargs")?)?,
        caller: row.try_get("caller")?,
        created_at_ms: ms(row.try_get("created_at")?),
        timeout_ms: ms(row.try_get("timeout_ms")?),
        ttl_ms: ms(row.try_get("ttl_ms")?),
        signed: SignedJob { body: row.try_get("body")?, signature: row.try_get("signature")? },
    })
}

impl SqliteStore {
    /// Runs `sql` with `{PAGE}` standing for the page's jids: the `limit` newest jobs older than
    /// `before`.
    async fn page_rows(&self, sql: &str, before: Option<&str>, limit: u32) -> Result<Vec<SqliteRow>, StoreError> {
        const PAGE: &str = "SELECT jid FROM jobs WHERE (?1 IS NULL OR jid < ?1) ORDER BY jid DESC LIMIT ?2";
        let sql = sql.replace("{PAGE}", PAGE);
        Ok(sqlx::query(&sql).bind(before).bind(i64::from(limit)).fetch_all(&self.pool).await?)
    }

    async fn summary(&self, job: &JobRecord) -> Result<JobSummary, StoreError> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM job_minions WHERE jid = ? GROUP BY state")
            .bind(&job.jid)
            .fetch_all(&self.pool)
            .await?;
        let mut states = BTreeMap::new();
        for row in rows {
            let n: i64 = row.try_get("n")?;
            states.insert(job_state(&row.try_get::<String, _>("state")?)?, u32::try_from(n).unwrap_or(u32::MAX));
        }
        Ok(JobSummary {
            jid: job.jid.clone(),
            function: job.function.clone(),
            target: job.target.clone(),
            caller: job.caller.clone(),
            created_at_ms: job.created_at_ms,
            states,
        })
    }
}

impl Store for SqliteStore {
    async fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT id, public_key, state FROM keys ORDER BY id, state").fetch_all(&self.pool).await?;
        rows.iter().map(key_from_row).collect()
    }

    async fn keys_for(&self, id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT id, public_key, state FROM keys WHERE id = ?").bind(id).fetch_all(&self.pool).await?;
        rows.iter().map(key_from_row).collect()
    }

    async fn put_key(&self, key: &KeyRecord, now_ms: u64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO keys (id, public_key, state, updated_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (id, public_key) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
        )
        .bind(&key.id)
        .bind(&key.public_key[..])
        .bind(key_state_name(key.state))
        .bind(db_int(now_ms))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn delete_key(&self, id: &str, public_key: &[u8; 32]) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM keys WHERE id = ? AND public_key = ?")
            .bind(id)
            .bind(&public_key[..])
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn create_token(&self, hash: &[u8; 32], minion: &str, expires_at_ms: u64) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO tokens (token_hash, minion, expires_at) VALUES (?, ?, ?)")
            .bind(&hash[..])
            .bind(minion)
            .bind(db_int(expires_at_ms))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn enroll_with_token(
        &self,
        hash: &[u8; 32],
        minion: &str,
        public_key: &[u8; 32],
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let burnt = sqlx::query(
            "UPDATE tokens SET used_at = ? WHERE token_hash = ? AND minion = ? AND used_at IS NULL AND expires_at > ?",
        )
        .bind(db_int(now_ms))
        .bind(&hash[..])
        .bind(minion)
        .bind(db_int(now_ms))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !burnt {
            return Ok(false);
        }
        // The token holder is the minion: any other key recorded for the id is denied.
        sqlx::query("UPDATE keys SET state = 'denied', updated_at = ? WHERE id = ? AND public_key != ?")
            .bind(db_int(now_ms))
            .bind(minion)
            .bind(&public_key[..])
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO keys (id, public_key, state, updated_at) VALUES (?, ?, 'accepted', ?) \
             ON CONFLICT(id, public_key) DO UPDATE SET state = 'accepted', updated_at = excluded.updated_at",
        )
        .bind(minion)
        .bind(&public_key[..])
        .bind(db_int(now_ms))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn token_outstanding(&self, minion: &str, now_ms: u64) -> Result<bool, StoreError> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM tokens WHERE minion = ? AND used_at IS NULL AND expires_at > ? LIMIT 1")
                .bind(minion)
                .bind(db_int(now_ms))
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }

    async fn pending_key_count(&self) -> Result<u64, StoreError> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM keys WHERE state = 'pending'").fetch_one(&self.pool).await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn minions(&self) -> Result<Vec<MinionRecord>, StoreError> {
        let rows = sqlx::query("SELECT id, grains, functions, last_seen FROM minions ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(MinionRecord {
                    id: row.try_get("id")?,
                    grains: json(&row.try_get::<String, _>("grains")?)?,
                    functions: json(&row.try_get::<String, _>("functions")?)?,
                    last_seen_ms: ms(row.try_get("last_seen")?),
                })
            })
            .collect()
    }

    async fn put_minions(&self, minions: &[MinionRecord]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for chunk in minions.chunks(ROWS_PER_STATEMENT) {
            let values = vec!["(?, ?, ?, ?)"; chunk.len()].join(", ");
            let sql = format!("INSERT OR REPLACE INTO minions (id, grains, functions, last_seen) VALUES {values}");
            let mut query = sqlx::query(&sql);
            for minion in chunk {
                query = query
                    .bind(&minion.id)
                    .bind(to_json(&minion.grains))
                    .bind(to_json(&minion.functions))
                    .bind(db_int(minion.last_seen_ms));
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn delete_minion(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM minions WHERE id = ?").bind(id).execute(&self.pool).await?;
        Ok(())
    }

    async fn insert_job(&self, job: &JobRecord, states: &[(String, MinionJobState)]) -> Result<(), StoreError> {
        // The job and its first chunk of minions go in one multi-statement query, a single
        // round trip to SQLite's thread; bigger jobs add one statement per chunk.
        let mut chunks = states.chunks(ROWS_PER_STATEMENT);
        let first = chunks.next().unwrap_or(&[]);
        let more = states.len() > ROWS_PER_STATEMENT;
        let mut sql = String::from(
            "BEGIN IMMEDIATE; INSERT INTO jobs (jid, function, target_kind, target_expr, args, kwargs, caller, \
             created_at, timeout_ms, ttl_ms, body, signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);",
        );
        sql.push_str(LAST_JID_SQL);
        if !first.is_empty() {
            sql.push_str(&minion_rows_sql(first.len()));
        }
        if !more {
            sql.push_str(" COMMIT;");
        }
        let mut query = sqlx::query(&sql)
            .bind(&job.jid)
            .bind(&job.function)
            .bind(target_kind_name(job.target.kind))
            .bind(&job.target.expr)
            .bind(to_json(&job.args))
            .bind(to_json(&job.kwargs))
            .bind(&job.caller)
            .bind(db_int(job.created_at_ms))
            .bind(db_int(job.timeout_ms))
            .bind(db_int(job.ttl_ms))
            .bind(&job.signed.body)
            .bind(&job.signed.signature)
            .bind(&job.jid);
        for (minion, state) in first {
            query = query.bind(&job.jid).bind(minion).bind(job_state_name(*state)).bind(db_int(job.created_at_ms));
        }
        let mut result = query.execute(&self.pool).await.map(drop);
        if more && result.is_ok() {
            for chunk in chunks {
                let sql = minion_rows_sql(chunk.len());
                let mut query = sqlx::query(&sql);
                for (minion, state) in chunk {
                    query =
                        query.bind(&job.jid).bind(minion).bind(job_state_name(*state)).bind(db_int(job.created_at_ms));
                }
                result = query.execute(&self.pool).await.map(drop);
                if result.is_err() {
                    break;
                }
            }
            if result.is_ok() {
                result = sqlx::query("COMMIT").execute(&self.pool).await.map(drop);
            }
        }
        if let Err(error) = result {
            // Leave no transaction open on the connection, whatever statement failed.
            let _ = sqlx::query("ROLLBACK").execute(&self.pool).await;
            return Err(error.into());
        }
        Ok(())
    }

    async fn set_states(&self, changes: &[StateChange]) -> Result<(), StoreError> {
        let (late, changes): (Vec<&StateChange>, Vec<&StateChange>) = changes.iter().partition(|c| c.late);
        // One row per job and minion: the last state, and the last return given.
        let mut merged: Vec<StateChange> = Vec::with_capacity(changes.len());
        let mut index: HashMap<(&str, &str), usize> = HashMap::with_capacity(changes.len());
        for change in changes {
            match index.get(&(change.jid.as_str(), change.minion.as_str())) {
                Some(&i) => {
                    let ret = change.ret.clone().or_else(|| merged[i].ret.take());
                    merged[i] = StateChange { ret, ..change.clone() };
                }
                None => {
                    index.insert((change.jid.as_str(), change.minion.as_str()), merged.len());
                    merged.push(change.clone());
                }
            }
        }
        // One statement is atomic on its own; more need a transaction (each statement, begin
        // and commit is a round trip to SQLite's thread, so small batches skip it).
        if late.is_empty() && merged.len() <= ROWS_PER_STATEMENT {
            if !merged.is_empty() {
                let sql = state_rows_sql(merged.len());
                bind_states(sqlx::query(&sql), &merged).execute(&self.pool).await?;
            }
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for chunk in merged.chunks(ROWS_PER_STATEMENT) {
            let sql = state_rows_sql(chunk.len());
            bind_states(sqlx::query(&sql), chunk).execute(&mut *tx).await?;
        }
        // After the states: a late return in the same batch as its slot's end lands beside it.
        for change in late {
            sqlx::query(LATE_RETURN_SQL)
                .bind(change.ret.as_ref().map(return_json))
                .bind(db_int(change.at_ms))
                .bind(&change.jid)
                .bind(&change.minion)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn jobs(&self, before: Option<&str>, limit: u32, with_minions: bool) -> Result<Vec<JobListing>, StoreError> {
        // Three queries for the whole page, whatever its size: the jobs, their state counts,
        // and (when asked) their minions.
        let rows = self.page_rows("SELECT * FROM jobs WHERE jid IN ({PAGE}) ORDER BY jid DESC", before, limit).await?;
        let mut out = Vec::with_capacity(rows.len());
        let mut index = HashMap::with_capacity(rows.len());
        for row in &rows {
            let job = job_from_row(row)?;
            index.insert(job.jid.clone(), out.len());
            let summary = JobSummary {
                jid: job.jid,
                function: job.function,
                target: job.target,
                caller: job.caller,
                created_at_ms: job.created_at_ms,
                states: BTreeMap::new(),
            };
            out.push(JobListing { summary, minions: Vec::new() });
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
                let state = job_state(&row.try_get::<String, _>("state")?)?;
                out[i].summary.states.insert(state, u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
        if with_minions {
            let minions = self
                .page_rows(
                    "SELECT jid, minion FROM job_minions WHERE jid IN ({PAGE}) ORDER BY jid, minion",
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
    }

    async fn job(&self, jid: &str) -> Result<Option<JobDetail>, StoreError> {
        let Some(row) = sqlx::query("SELECT * FROM jobs WHERE jid = ?").bind(jid).fetch_optional(&self.pool).await?
        else {
            return Ok(None);
        };
        let job = job_from_row(&row)?;
        let rows = sqlx::query("SELECT minion, state, ret, late FROM job_minions WHERE jid = ? ORDER BY minion")
            .bind(jid)
            .fetch_all(&self.pool)
            .await?;
        let mut minions = Vec::with_capacity(rows.len());
        for row in rows {
            let ret: Option<String> = row.try_get("ret")?;
            minions.push(MinionJob {
                minion: row.try_get("minion")?,
                state: job_state(&row.try_get::<String, _>("state")?)?,
                ret: ret.as_deref().map(return_from_json).transpose()?,
                late: row.try_get::<i64, _>("late")? != 0,
            });
        }
        let summary = self.summary(&job).await?;
        Ok(Some(JobDetail { summary, args: job.args, kwargs: job.kwargs, minions }))
    }

    async fn unfinished_jobs(&self) -> Result<Vec<UnfinishedJob>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE jid IN (SELECT jid FROM job_minions WHERE state IN ('waiting', 'sent', 'running')) \
             ORDER BY created_at",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let job = job_from_row(row)?;
            let states = sqlx::query("SELECT minion, state FROM job_minions WHERE jid = ?")
                .bind(&job.jid)
                .fetch_all(&self.pool)
                .await?
                .iter()
                .map(|r| Ok((r.try_get("minion")?, job_state(&r.try_get::<String, _>("state")?)?)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            out.push((job, states));
        }
        Ok(out)
    }

    async fn principals(&self) -> Result<Vec<PrincipalRecord>, StoreError> {
        let rows =
            sqlx::query("SELECT name, public_key, acl FROM principals ORDER BY name").fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                let key: Vec<u8> = row.try_get("public_key")?;
                Ok(PrincipalRecord {
                    name: row.try_get("name")?,
                    public_key: key.try_into().map_err(|_| corrupt("principal key is not 32 bytes"))?,
                    acl: acl_from_json(&row.try_get::<String, _>("acl")?)?,
                })
            })
            .collect()
    }

    async fn put_principal(&self, principal: &PrincipalRecord, now_ms: u64) -> Result<(), StoreError> {
        sqlx::query("INSERT OR REPLACE INTO principals (name, public_key, acl, updated_at) VALUES (?, ?, ?, ?)")
            .bind(&principal.name)
            .bind(&principal.public_key[..])
            .bind(acl_json(&principal.acl))
            .bind(db_int(now_ms))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn delete_principal(&self, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM principals WHERE name = ?").bind(name).execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn last_jid(&self) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT value FROM meta WHERE key = 'last_jid'").fetch_optional(&self.pool).await?)
    }

    async fn wall_mark(&self) -> Result<Option<u64>, StoreError> {
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'wall_mark'").fetch_optional(&self.pool).await?;
        value.map(|v| v.parse().map_err(|_| corrupt("wall mark is not a number"))).transpose()
    }

    async fn set_wall_mark(&self, ms: u64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES ('wall_mark', ?1) ON CONFLICT(key) DO UPDATE \
             SET value = excluded.value WHERE CAST(excluded.value AS INTEGER) > CAST(meta.value AS INTEGER)",
        )
        .bind(ms.to_string())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn check(&self) -> Result<(), StoreError> {
        let rows: Vec<String> = sqlx::query_scalar("PRAGMA quick_check").fetch_all(&self.pool).await?;
        if rows.len() == 1 && rows[0] == "ok" {
            Ok(())
        } else {
            Err(corrupt(format!("integrity check failed: {}", rows.join("; "))))
        }
    }

    async fn close(&self) {
        if self.pool.is_closed() {
            return;
        }
        if let Err(error) = sqlx::query("DELETE FROM meta WHERE key = 'open'").execute(&self.pool).await {
            tracing::warn!(%error, "marking the database closed failed");
        }
        // Folds the write-ahead log into the main file: a copy of master.db alone is complete.
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.pool).await {
            tracing::warn!(%error, "checkpointing the database failed");
        }
        self.pool.close().await;
    }

    async fn purge_jobs(&self, before_ms: u64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM jobs WHERE created_at < ? AND NOT EXISTS (SELECT 1 FROM job_minions m \
             WHERE m.jid = jobs.jid AND m.state IN ('waiting', 'sent', 'running'))",
        )
        .bind(db_int(before_ms))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::{conformance_suite, job};

    conformance_suite!(async { SqliteStore::in_memory().await.expect("in-memory store") });

    /// The same cases on a database file, as the daemon uses it (WAL, one connection).
    mod on_a_file {
        use super::*;

        async fn fresh() -> SqliteStore {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = scratch(&format!("conformance-{n}"));
            SqliteStore::open(&dir.join("master.db")).await.expect("file store")
        }

        conformance_suite!(fresh());
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_file_database_survives_reopening() {
        rt().block_on(async {
            let dir = std::env::temp_dir().join(format!("halite-store-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("master.db");
            {
                let store = SqliteStore::open(&path).await.unwrap();
                store.insert_job(&job("1", 10), &[("web1".to_owned(), MinionJobState::Sent)]).await.unwrap();
                store.close().await;
            }
            let store = SqliteStore::open(&path).await.unwrap();
            assert_eq!(store.jobs(None, 5, false).await.unwrap().len(), 1);
        });
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("halite-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_database_copied_without_its_log_after_a_crash_is_refused() {
        rt().block_on(async {
            let dir = scratch("nowal");
            let path = dir.join("master.db");
            let store = SqliteStore::open(&path).await.unwrap();
            store.insert_job(&job("1", 10), &[("web1".to_owned(), MinionJobState::Sent)]).await.unwrap();
            // The crash: the file is copied while open, without master.db-wal.
            let copy = dir.join("copy.db");
            std::fs::copy(&path, &copy).unwrap();
            let error = SqliteStore::open(&copy).await.unwrap_err().to_string();
            assert!(error.contains("copy.db-wal") && error.contains("not closed cleanly"), "{error}");
            // The operator may accept the loss.
            let recovered = SqliteStore::open_with(&copy, true).await.unwrap();
            assert!(recovered.jobs(None, 5, false).await.unwrap().is_empty(), "the job was only in the log");
            recovered.close().await;
            // The original, closed cleanly, then copied alone: complete, and opens.
            store.close().await;
            assert!(!dir.join("master.db-wal").exists());
            std::fs::copy(&path, &copy).unwrap();
            let reopened = SqliteStore::open(&copy).await.unwrap();
            assert_eq!(reopened.jobs(None, 5, false).await.unwrap().len(), 1);
        });
    }

    /// A copy taken while the master runs (as a crash leaves it) opens with everything; a log
    /// damaged before its last commit is refused, naming the frame; a torn end is a crash and
    /// opens.
    #[test]
    fn a_damaged_write_ahead_log_is_refused_and_a_torn_end_is_not() {
        rt().block_on(async {
            let dir = scratch("walcheck");
            let path = dir.join("master.db");
            let store = SqliteStore::open(&path).await.unwrap();
            for n in 1..=3 {
                let jid = n.to_string();
                store.insert_job(&job(&jid, n), &[("web1".to_owned(), MinionJobState::Sent)]).await.unwrap();
            }
            let copy = |name: &str| {
                let db = dir.join(format!("{name}.db"));
                std::fs::copy(&path, &db).unwrap();
                std::fs::copy(dir.join("master.db-wal"), dir.join(format!("{name}.db-wal"))).unwrap();
                db
            };
            let frame = |n: u64| 32 + (n - 1) * (24 + 4096);

            let intact = copy("intact");
            let reopened = SqliteStore::open(&intact).await.unwrap();
            assert_eq!(reopened.jobs(None, 10, false).await.unwrap().len(), 3, "replayed from the log");
            reopened.close().await;

            let damaged = copy("damaged");
            let wal = dir.join("damaged.db-wal");
            let mut bytes = std::fs::read(&wal).unwrap();
            assert!(bytes.len() as u64 > frame(4), "several frames in the log");
            let at = usize::try_from(frame(2) + 24 + 100).unwrap();
            bytes[at] ^= 0xff;
            std::fs::write(&wal, &bytes).unwrap();
            let error = SqliteStore::open(&damaged).await.unwrap_err().to_string();
            assert!(error.contains("damaged at frame 2") && error.contains("damaged.db-wal"), "{error}");
            assert!(SqliteStore::open_with(&damaged, true).await.is_ok(), "the operator may accept the loss");

            let torn = copy("torn");
            let wal = dir.join("torn.db-wal");
            let bytes = std::fs::read(&wal).unwrap();
            std::fs::write(&wal, &bytes[..bytes.len() - 1000]).unwrap();
            let reopened = SqliteStore::open(&torn).await.unwrap();
            assert_eq!(reopened.jobs(None, 10, false).await.unwrap().len(), 2, "the torn last transaction is dropped");
            store.close().await;
        });
    }

    #[test]
    fn a_database_numbered_by_user_version_is_adopted_by_the_migrator() {
        rt().block_on(async {
            let dir = scratch("adopt");
            let path = dir.join("master.db");
            {
                let options = SqliteConnectOptions::new().filename(&path).create_if_missing(true);
                let mut conn = sqlx::ConnectOptions::connect(&options).await.unwrap();
                for migration in MIGRATOR.iter() {
                    sqlx::raw_sql(&migration.sql).execute(&mut conn).await.unwrap();
                }
                sqlx::raw_sql("PRAGMA user_version = 4").execute(&mut conn).await.unwrap();
                sqlx::raw_sql("INSERT INTO principals VALUES ('heat', x'00', '{}', 1)")
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            let store = SqliteStore::open(&path).await.unwrap();
            let applied: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations").fetch_one(&store.pool).await.unwrap();
            assert_eq!(applied, MIGRATOR.iter().count() as i64);
            let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM principals").fetch_one(&store.pool).await.unwrap();
            assert_eq!(kept, 1, "nothing was re-run over the existing tables");
        });
    }
}
