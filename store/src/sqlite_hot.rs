//! The SQLite store's two writes on every job's path (a new job with its minions, and a batch of
//! state changes), run synchronously on the calling thread through a second connection to the
//! same database.
//!
//! Why a second connection: sqlx runs each SQLite connection on a thread of its own, so every
//! call is two thread wake-ups (there and back), and on a small machine those cost more than
//! the write itself. In WAL mode with `synchronous = NORMAL` a commit is a few page writes to
//! the log, tens of microseconds: less than a task may block its worker. Every other call
//! (listings, keys, migrations, opening and closing) stays on sqlx.
//!
//! Both connections write one file and SQLite lets one writer in at a time. The master's core
//! is the store's one caller and makes one call at a time, so neither waits on the other; the
//! busy timeout covers anything else (a `sqlite3` shell holding a write lock) with a bounded
//! wait and then a typed error.

use std::path::Path;
use std::time::Duration;

use halite_protocol::message::MinionJobState;
use rusqlite::{params, Connection, ErrorCode, OpenFlags};

use super::common_sql::LATE_RETURN;
use super::records::db_int;
use super::records::{job_state_name, return_json, target_kind_name, to_json};
use super::sqlite_checkpoint::{Checkpointer, BACKSTOP_PAGES, COMMITS_PER_CHECKPOINT};
use super::{JobRecord, StateChange, StoreError};

/// How long a write waits for another writer before failing as unavailable.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const INSERT_JOB: &str = "INSERT INTO jobs (jid, function, target_kind, target_expr, args, kwargs, caller, \
     created_at, timeout_ms, ttl_ms, body, signature, rollout) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

const INSERT_SLOT: &str = "INSERT INTO job_minions (jid, minion, state, updated_at) VALUES (?, ?, ?, ?)";

/// A slot's new state (and return, if it brings one), only while the slot is unfinished: a
/// final state is never overwritten.
const UPDATE_SLOT: &str = "UPDATE job_minions SET state = ?, ret = COALESCE(?, ret), updated_at = ? \
     WHERE jid = ? AND minion = ? AND state IN ('waiting', 'sent', 'running', 'queued')";

/// The connection for the hot writes.
#[derive(Debug)]
pub(crate) struct HotWrites {
    conn: Connection,
    /// A database file's checkpoint thread (stopped with this connection), and the commits since
    /// it was last asked for a checkpoint.
    checkpoints: Option<(Checkpointer, u32)>,
}

impl HotWrites {
    /// Opens the (already created and migrated) database at `path`, a file name or a
    /// `file:` URI. With `checkpoint_thread` (a database file), its log is checkpointed by a
    /// thread of its own rather than by its commits (`sqlite_checkpoint`).
    pub(crate) fn open(path: &Path, checkpoint_thread: bool) -> Result<Self, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        let checkpoints = if checkpoint_thread {
            conn.pragma_update(None, "wal_autocheckpoint", BACKSTOP_PAGES)?;
            Some((Checkpointer::start(path)?, 0))
        } else {
            None
        };
        Ok(HotWrites { conn, checkpoints })
    }

    /// Counts a commit, asking for a checkpoint every [`COMMITS_PER_CHECKPOINT`].
    fn committed(&mut self) {
        let Some((checkpointer, commits)) = &mut self.checkpoints else { return };
        *commits += 1;
        if *commits >= COMMITS_PER_CHECKPOINT {
            *commits = 0;
            checkpointer.ask();
        }
    }

    /// Runs `write` in one IMMEDIATE transaction: committed if it succeeds, rolled back if it
    /// fails, returns early or panics. BEGIN and COMMIT are cached statements like the writes
    /// (rusqlite's `Transaction` parses them again on every call).
    pub(crate) fn in_transaction(
        &mut self,
        write: impl FnOnce(&Connection) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let open = OpenTransaction(&self.conn);
        write(&self.conn)?;
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        drop(open);
        self.committed();
        Ok(())
    }

    /// Stores a job and its minions' first states, all or nothing.
    pub(crate) fn insert_job(
        &mut self,
        job: &JobRecord,
        states: &[(String, MinionJobState)],
    ) -> Result<(), StoreError> {
        self.in_transaction(|conn| {
            conn.prepare_cached(INSERT_JOB)?.execute(params![
                job.jid,
                job.function,
                target_kind_name(job.target.kind),
                job.target.expr,
                to_json(&job.args),
                to_json(&job.kwargs),
                job.caller,
                db_int(job.created_at_ms),
                db_int(job.timeout_ms),
                db_int(job.ttl_ms),
                job.signed.body,
                &job.signed.signature[..],
                job.rollout.as_ref().map(to_json),
            ])?;
            let mut slot = conn.prepare_cached(INSERT_SLOT)?;
            for (minion, state) in states {
                slot.execute(params![job.jid, minion, job_state_name(*state), db_int(job.created_at_ms)])?;
            }
            Ok(())
        })
    }

    /// Writes merged state changes, then late returns, in one transaction.
    pub(crate) fn set_states(&mut self, merged: &[StateChange], late: &[&StateChange]) -> Result<(), StoreError> {
        if merged.is_empty() && late.is_empty() {
            return Ok(());
        }
        self.in_transaction(|conn| {
            let mut update = conn.prepare_cached(UPDATE_SLOT)?;
            for change in merged {
                update.execute(params![
                    job_state_name(change.state),
                    change.ret.as_ref().map(return_json),
                    db_int(change.at_ms),
                    change.jid,
                    change.minion,
                ])?;
            }
            let mut late_return = conn.prepare_cached(LATE_RETURN)?;
            for change in late {
                late_return.execute(params![
                    change.ret.as_ref().map(return_json),
                    db_int(change.at_ms),
                    change.jid,
                    change.minion,
                ])?;
            }
            Ok(())
        })
    }
}

/// A transaction [`HotWrites::in_transaction`] began: rolled back when dropped still open (an
/// error, including a COMMIT refused as busy, or a panic).
struct OpenTransaction<'a>(&'a Connection);

impl Drop for OpenTransaction<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        match error.sqlite_error_code() {
            Some(ErrorCode::ConstraintViolation) => StoreError::Conflict(error.to_string()),
            Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt(error.to_string()),
            _ => StoreError::Unavailable(error.to_string()),
        }
    }
}
