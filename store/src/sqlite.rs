//! The embedded SQLite store.

use std::path::Path;
use std::sync::Arc;

use halite_protocol::message::MinionJobState;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteRow, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, Row};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use super::records::{db_int, job_state, return_from_json, to_json};
use super::sqlite_checkpoint::BACKSTOP_PAGES;
use super::sqlite_hot::HotWrites;
use super::{JobRecord, MinionRecord, StateChange, Store, StoreError, UnfinishedJob};

/// Schema migrations: versioned SQL files in `store/migrations/sqlite`, embedded at build time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The migration that added signatures to key and principal rows.
const SIGNED_ROWS: i64 = 9;
/// The migration that added signatures to enrollment and gateway token rows.
const SIGNED_TOKENS: i64 = 12;

/// Minions written by one statement (4 bound values each, far below SQLite's variable limit).
const ROWS_PER_STATEMENT: usize = 200;

/// SQLite, in WAL mode: a crash (even `kill -9`) loses no committed transaction.
///
/// Two connections to the one database. The job insert and state batches, on every job's
/// path, run synchronously on the caller's thread ([`HotWrites`]); everything else goes through
/// sqlx's connection, owned here rather than by a pool: the master's core serialises its store
/// calls anyway and SQLite allows one writer at a time, while sqlx's pool pings a connection on
/// every release, a second round trip to SQLite's thread that the next call would wait for.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// `None` once closed.
    conn: Arc<Mutex<Option<SqliteConnection>>>,
    /// `None` once closed. Held only for one synchronous write, never across an await.
    hot: Arc<std::sync::Mutex<Option<HotWrites>>>,
    /// Whose rows it signs and trusts.
    trust: Arc<super::trust::TrustSlot>,
}

/// Both connections, taken away by [`SqliteStore::take_away`].
#[cfg(any(test, feature = "testing"))]
pub struct Connections(SqliteConnection, HotWrites);

/// How long opening waits for another process's write lock before saying so (and being
/// tried again, `open_retrying` in the crate root).
const LOCK_PROBE_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);
/// How long a statement waits for a lock (sqlx's default).
const STATEMENT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether opening a database failed only because another process holds its lock
/// (`SQLITE_BUSY`, `SQLITE_LOCKED`): worth waiting for, unlike any other failure.
pub fn is_busy(error: &StoreError) -> bool {
    matches!(error, StoreError::Unavailable(message)
        if message.contains("database is locked") || message.contains("database table is locked"))
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

    /// Writes a consistent copy of the database at `path` to `into` (which must not exist),
    /// read through a read-only connection: the source is not written, not even migrated or
    /// marked open (what `migrate-store` reads from). Refused, as [`SqliteStore::open`] is,
    /// for a database whose write-ahead log is lost, unless `accept_loss`.
    pub async fn snapshot(path: &Path, into: &Path, accept_loss: bool) -> Result<(), StoreError> {
        if !accept_loss {
            check_log(path).await?;
        }
        let options = SqliteConnectOptions::new().filename(path).read_only(true);
        let mut conn = options.connect().await?;
        let copied = sqlx::query("VACUUM INTO ?").bind(into.to_string_lossy().into_owned()).execute(&mut conn).await;
        let _ = conn.close().await;
        copied?;
        Ok(())
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
            .pragma("wal_autocheckpoint", BACKSTOP_PAGES.to_string())
            .foreign_keys(true)
            .busy_timeout(LOCK_PROBE_WAIT);
        let mut conn = options.connect().await?;
        // Another process holding the write lock (a backup, an operator's sqlite3) is found
        // at once, for the caller to wait out, instead of on each statement; then statements
        // wait for a lock as long as usual.
        sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await?;
        sqlx::query("ROLLBACK").execute(&mut conn).await?;
        sqlx::query(&format!("PRAGMA busy_timeout = {}", STATEMENT_LOCK_WAIT.as_millis())).execute(&mut conn).await?;
        let store = SqliteStore::from_connection(conn);
        store.migrate().await?;
        store.open_hot(path, true)?;
        // Marks the file open, in the main file itself (the checkpoint), so a copy of it alone
        // after a crash is recognised; `close` removes the mark.
        let mut conn = store.conn().await?;
        sqlx::query("INSERT OR REPLACE INTO meta (key, value) VALUES ('open', '1')").execute(&mut *conn).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut *conn).await?;
        drop(conn);
        Ok(store)
    }

    /// An in-memory database, for tests.
    ///
    /// Both connections share it through SQLite's shared cache, by a name unique in the
    /// process. sqlx's connection reads uncommitted: shared-cache connections lock whole tables,
    /// and a read statement sqlx has not reset yet must not make a hot write fail as locked.
    pub async fn in_memory() -> Result<Self, StoreError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let name = format!("halite-memory-{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let options = SqliteConnectOptions::new()
            .filename(format!("file:{name}"))
            .in_memory(true)
            .shared_cache(true)
            .pragma("read_uncommitted", "true")
            .foreign_keys(true);
        let store = SqliteStore::from_connection(options.connect().await?);
        store.migrate().await?;
        store.open_hot(Path::new(&format!("file:{name}?mode=memory&cache=shared")), false)?;
        Ok(store)
    }

    fn from_connection(conn: SqliteConnection) -> Self {
        SqliteStore {
            conn: Arc::new(Mutex::new(Some(conn))),
            hot: Arc::new(std::sync::Mutex::new(None)),
            trust: Arc::default(),
        }
    }

    /// The hot writes' connection slot. A write that panicked left no transaction open
    /// (`HotWrites` rolls back on unwinding), so a poisoned lock is taken as it is.
    fn hot_slot(&self) -> std::sync::MutexGuard<'_, Option<HotWrites>> {
        self.hot.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens the hot writes' connection (with its checkpoint thread for a database file), once
    /// the schema is in place.
    fn open_hot(&self, path: &Path, checkpoint_thread: bool) -> Result<(), StoreError> {
        *self.hot_slot() = Some(HotWrites::open(path, checkpoint_thread)?);
        Ok(())
    }

    /// Runs `write` on the hot connection; an error once the store is closed.
    fn hot<T>(&self, write: impl FnOnce(&mut HotWrites) -> Result<T, StoreError>) -> Result<T, StoreError> {
        write(self.hot_slot().as_mut().ok_or_else(|| StoreError::Unavailable("the database is closed".into()))?)
    }

    /// Takes the connections away, as a lost database would: every call fails as unavailable
    /// until [`SqliteStore::give_back`].
    #[cfg(any(test, feature = "testing"))]
    pub async fn take_away(&self) -> Option<Connections> {
        let conn = self.conn.lock().await.take()?;
        let hot = self.hot_slot().take()?;
        Some(Connections(conn, hot))
    }

    /// Gives back the connections [`SqliteStore::take_away`] took.
    #[cfg(any(test, feature = "testing"))]
    pub async fn give_back(&self, Connections(conn, hot): Connections) {
        *self.conn.lock().await = Some(conn);
        *self.hot_slot() = Some(hot);
    }

    /// Runs `sql` on the database behind the store's back (a trigger that refuses one write,
    /// say: a store that fails part way through a request).
    #[cfg(any(test, feature = "testing"))]
    #[allow(clippy::expect_used)] // a test hook: SQL that does not run is the test's own mistake
    pub async fn execute_for_test(&self, sql: &str) {
        let mut conn = self.conn.lock().await;
        let conn = conn.as_mut().expect("the store's connection is here");
        sqlx::raw_sql(sql).execute(&mut *conn).await.expect("test SQL runs");
    }

    /// Runs one call of the store. SQLite lives in this process, on a local file that one master
    /// uses: nothing for a call to wait on that a deadline would end sooner.
    pub async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        call.await
    }

    /// The connection, for the SQL both backends share; an error once the store is closed.
    pub async fn conn(&self) -> Result<MappedMutexGuard<'_, SqliteConnection>, StoreError> {
        MutexGuard::try_map(self.conn.lock().await, Option::as_mut)
            .map_err(|_| StoreError::Unavailable("the database is closed".into()))
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        adopt_user_version(&mut conn).await?;
        // No migrations table yet: a new database, nothing applied.
        let applied = |version: i64| {
            sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations WHERE version = ?").bind(version)
        };
        let signed = applied(SIGNED_ROWS).fetch_optional(&mut *conn).await.unwrap_or(None);
        let signed_tokens = applied(SIGNED_TOKENS).fetch_optional(&mut *conn).await.unwrap_or(None);
        MIGRATOR.run(&mut *conn).await.map_err(|error| match error {
            sqlx::migrate::MigrateError::Execute(error) => StoreError::from(error),
            other => StoreError::Corrupt(format!("schema migration: {other}")),
        })?;
        if signed.is_none() {
            self.trust.found_legacy_rows();
        }
        if signed_tokens.is_none() {
            self.trust.found_legacy_tokens();
        }
        Ok(())
    }

    /// Whether other masters share this store: no.
    const SHARED: bool = false;
}

/// Databases made before migrations were files counted them in `PRAGMA user_version`: the
/// migrations they already ran are recorded as applied (same versions, same checksums), once,
/// so sqlx's migrator takes over from there.
async fn adopt_user_version(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let mut tx = conn.begin().await?;
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

super::common_sql::common_helpers!(SqliteStore, SqliteRow, super::common_sql::sqlite_sql);
super::signed_rows::signed_row_helpers!(SqliteStore, SqliteRow, super::common_sql::sqlite_sql);

impl Store for SqliteStore {
    super::common_sql::common_store_methods!(super::common_sql::sqlite_sql);

    async fn put_minions(&self, minions: &[MinionRecord]) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin().await?;
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

    async fn insert_job(&self, job: &JobRecord, states: &[(String, MinionJobState)]) -> Result<(), StoreError> {
        self.hot(|hot| hot.insert_job(job, states))
    }

    async fn set_states(&self, changes: &[StateChange]) -> Result<(), StoreError> {
        let (late, changes): (Vec<&StateChange>, Vec<&StateChange>) = changes.iter().partition(|c| c.late);
        let merged = super::common_sql::merge_changes(changes.into_iter());
        self.hot(|hot| hot.set_states(&merged, &late))
    }

    async fn unfinished_jobs(&self) -> Result<Vec<UnfinishedJob>, StoreError> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE jid IN (SELECT jid FROM job_minions WHERE state IN ('waiting', 'sent', 'running', 'queued')) \
             ORDER BY created_at",
        )
        .fetch_all(&mut *self.conn().await?)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let job = job_from_row(row)?;
            let states = sqlx::query("SELECT minion, state FROM job_minions WHERE jid = ?")
                .bind(&job.jid)
                .fetch_all(&mut *self.conn().await?)
                .await?
                .iter()
                .map(|r| Ok((r.try_get("minion")?, job_state(&r.try_get::<String, _>("state")?)?)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            out.push((job, states));
        }
        Ok(out)
    }

    async fn check(&self) -> Result<(), StoreError> {
        let rows: Vec<String> = sqlx::query_scalar("PRAGMA quick_check").fetch_all(&mut *self.conn().await?).await?;
        if rows.len() == 1 && rows[0] == "ok" {
            Ok(())
        } else {
            Err(corrupt(format!(
                "integrity check failed: {}; restore it from a backup or move it away to start empty",
                rows.join("; ")
            )))
        }
    }

    async fn close(&self) {
        // With its checkpoint thread, stopped before the last checkpoint, which folds in the
        // whole log.
        drop(self.hot_slot().take());
        let Some(mut conn) = self.conn.lock().await.take() else { return };
        if let Err(error) = sqlx::query("DELETE FROM meta WHERE key = 'open'").execute(&mut conn).await {
            tracing::warn!(%error, "marking the database closed failed");
        }
        // Folds the write-ahead log into the main file: a copy of master.db alone is complete.
        if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&mut conn).await {
            tracing::warn!(%error, "checkpointing the database failed");
        }
        if let Err(error) = conn.close().await {
            tracing::warn!(%error, "closing the database failed");
        }
    }
}

// Configs, deployments and gateway tokens: the SQL both backends share.
super::deploy_sql::deploy_store!(SqliteStore, super::common_sql::sqlite_sql);
super::audit_sql::audit_helpers!(SqliteStore);
super::audit_sql::audit_store!(SqliteStore, super::common_sql::sqlite_sql);

impl SqliteStore {
    /// Appends to the audit trail on the hot connection (`sqlite_hot_audit.rs`).
    async fn append_audit_records(
        &self,
        chain: &str,
        after: Option<super::audit::AuditHead>,
        entries: &[halite_protocol::audit::AuditEntry],
    ) -> Result<super::audit::AuditHead, StoreError> {
        let trust = self.trust.get();
        self.hot(|hot| {
            hot.append_audit(chain, after, entries, |seq, prev| trust.chain_audit(chain, seq, prev, entries))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{conformance_suite, job};

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
            let (_dir, path, store) = file_store("reopen").await;
            insert_sent(&store, "1", 10).await;
            store.close().await;
            let store = SqliteStore::open(&path).await.unwrap();
            assert_eq!(store.jobs(None, 5, false).await.unwrap().len(), 1);
        });
    }

    /// The log is folded into the main file by the checkpoint thread, asked every so many
    /// commits, long before the writers' own threshold would: the core's thread never runs a
    /// checkpoint.
    #[test]
    fn the_log_is_checkpointed_off_the_writers_thread() {
        rt().block_on(async {
            let (dir, path, store) = file_store("checkpoint").await;
            let main_file = || std::fs::metadata(&path).unwrap().len();
            let before = main_file();
            let commits = crate::sqlite_checkpoint::COMMITS_PER_CHECKPOINT as u64 + 10;
            for n in 1..=commits {
                let jid = format!("{n:08}");
                insert_sent(&store, &jid, n).await;
            }
            let logged_pages = std::fs::metadata(dir.join("master.db-wal")).unwrap().len() / 4096;
            assert!(logged_pages < u64::from(BACKSTOP_PAGES), "the writers' own checkpoint would run: {logged_pages}");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while main_file() == before {
                assert!(std::time::Instant::now() < deadline, "no checkpoint folded the log in");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            store.close().await;
            let reopened = SqliteStore::open(&path).await.unwrap();
            assert_eq!(reopened.jobs(None, 1000, false).await.unwrap().len() as u64, commits);
        });
    }

    /// A new database file in a scratch directory of its own: the directory, the file, the store.
    async fn file_store(name: &str) -> (std::path::PathBuf, std::path::PathBuf, SqliteStore) {
        let dir = scratch(name);
        let path = dir.join("master.db");
        let store = SqliteStore::open(&path).await.unwrap();
        (dir, path, store)
    }

    /// Stores job `jid` (created at `at`), sent to web1.
    async fn insert_sent(store: &SqliteStore, jid: &str, at: u64) {
        store.insert_job(&job(jid, at), &[("web1".to_owned(), MinionJobState::Sent)]).await.unwrap();
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
            let (dir, path, store) = file_store("nowal").await;
            insert_sent(&store, "1", 10).await;
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
            let (dir, path, store) = file_store("walcheck").await;
            for n in 1..=3 {
                let jid = n.to_string();
                insert_sent(&store, &jid, n).await;
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
                // The four migrations of the user_version days.
                for migration in MIGRATOR.iter().take(4) {
                    sqlx::raw_sql(&migration.sql).execute(&mut conn).await.unwrap();
                }
                sqlx::raw_sql("PRAGMA user_version = 4").execute(&mut conn).await.unwrap();
                sqlx::raw_sql("INSERT INTO principals VALUES ('heat', x'00', '{}', 1)")
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            let store = SqliteStore::open(&path).await.unwrap();
            let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
                .fetch_one(&mut *store.conn().await.unwrap())
                .await
                .unwrap();
            assert_eq!(applied, MIGRATOR.iter().count() as i64);
            let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM principals")
                .fetch_one(&mut *store.conn().await.unwrap())
                .await
                .unwrap();
            assert_eq!(kept, 1, "nothing was re-run over the existing tables");
        });
    }

    /// Configs, deployments and tokens stored before they had owners belong to root.
    #[test]
    fn rows_from_before_owners_belong_to_root() {
        use crate::DeployStore;
        rt().block_on(async {
            let path = scratch("owners").join("master.db");
            let rows = "INSERT INTO software_configs VALUES ('c0', '{\"id\": \"c0\"}', 1);
                 INSERT INTO deployments VALUES ('d0', 'web1', 'COMPLETE', 0, '{\"deployment\": {\"id\": \"d0\"}}', 1, 1);
                 INSERT INTO tokens (token_hash, minion, expires_at, id) VALUES (x'07', 'web2', 100, '07');
                 INSERT INTO api_tokens (token_hash, principal, created_at, id) VALUES (x'04', 'heat', 1, '04');";
            database_at_version(&path, 7, rows).await;
            let store = SqliteStore::open(&path).await.unwrap();
            assert_eq!(store.config("c0").await.unwrap().unwrap().owner, "root");
            assert_eq!(store.deployment("d0").await.unwrap().unwrap().owner, "root");
            assert_eq!(store.configs(Some("root"), 10).await.unwrap().len(), 1);
            assert_eq!(store.tokens(Some("root")).await.unwrap().len(), 1);
            assert!(store.tokens(Some("heat")).await.unwrap().is_empty());
            assert_eq!(store.api_tokens(Some("root")).await.unwrap().len(), 1);
        });
    }

    /// A deployment stored before deployments kept their job in a column is still found by its
    /// job, and finished by its job's end.
    #[test]
    fn deployments_from_before_the_job_column_are_found_and_finished_by_their_job() {
        use crate::DeployStore;
        rt().block_on(async {
            let path = scratch("deployment-jobs").join("master.db");
            let row = "INSERT INTO deployments (id, server_id, status, relay_pending, body, created_at, updated_at, owner)
                 VALUES ('d0', 'web1', 'IN_PROGRESS', 0,
                   '{\"deployment\": {\"id\": \"d0\", \"server_id\": \"web1\", \"status\": \"IN_PROGRESS\"}, \"jid\": \"j0\"}',
                   1, 1, 'heat');";
            database_at_version(&path, 12, row).await;
            let store = SqliteStore::open(&path).await.unwrap();
            let mut found = store.deployment_waiting_on("j0").await.unwrap().expect("found by its document's job");
            assert_eq!(found.deployment.id, "d0");
            assert_eq!(store.deployment_waiting_on("j1").await.unwrap(), None);
            found.deployment.status = "COMPLETE".into();
            assert!(store.finish_deployment(&found, 2).await.unwrap(), "finished as before the column");
            assert_eq!(store.deployment_waiting_on("j0").await.unwrap(), None);
        });
    }

    /// A database at `path` migrated up to schema `version`, with `rows` inserted as an older
    /// master would have stored them.
    async fn database_at_version(path: &std::path::Path, version: i64, rows: &str) {
        let options = SqliteConnectOptions::new().filename(path).create_if_missing(true);
        let mut conn = sqlx::ConnectOptions::connect(&options).await.unwrap();
        for migration in MIGRATOR.iter().take_while(|m| m.version <= version) {
            sqlx::raw_sql(&migration.sql).execute(&mut conn).await.unwrap();
        }
        sqlx::raw_sql(&format!("PRAGMA user_version = {version}")).execute(&mut conn).await.unwrap();
        sqlx::raw_sql(rows).execute(&mut conn).await.unwrap();
    }
}
