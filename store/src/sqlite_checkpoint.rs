//! Checkpoints of the SQLite write-ahead log, on a thread of their own.
//!
//! SQLite folds its log back into the main file (a checkpoint) on the thread of whichever commit
//! finds the log past 1,000 pages. In the master that is the core's thread, and a checkpoint
//! holds it for milliseconds: it copies every logged page and syncs both files, so every job
//! the core would have handled meanwhile waits (at full speed, about 4 ms in every 60).
//!
//! Instead the hot connection leaves automatic checkpoints to a backstop ([`BACKSTOP_PAGES`],
//! for a checkpointer that cannot keep up) and asks this thread for one every
//! [`COMMITS_PER_CHECKPOINT`] commits; the thread also checkpoints every [`INTERVAL`] for the
//! other connection's writes. Its checkpoints are PASSIVE: they never wait for a reader or a
//! writer, so the core goes on appending to the log while one runs. The log file is reused from
//! its start only after a checkpoint that caught up with every commit; under steady writes that
//! is the backstop's, once in [`BACKSTOP_PAGES`], and short: this thread has already copied all
//! but the latest pages.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;

/// Hot commits between two requested checkpoints: with a job's two commits logging about eight
/// pages, near SQLite's own 1,000-page threshold.
pub(crate) const COMMITS_PER_CHECKPOINT: u32 = 256;

/// How often the thread checkpoints unasked: also how long a commit may wait in the log before
/// a checkpoint syncs it to disk. (The store's unit tests take a copy of a database file right
/// after writing, as a crash would leave it, and expect the write still only in the log.)
#[cfg(not(test))]
const INTERVAL: Duration = Duration::from_secs(1);
#[cfg(test)]
const INTERVAL: Duration = Duration::from_secs(60);

/// The hot connection's own automatic checkpoint threshold (pages): reached only if this
/// thread cannot keep up.
pub(crate) const BACKSTOP_PAGES: u32 = 4_000;

/// What the thread is asked.
#[derive(Debug)]
enum Ask {
    /// A checkpoint, soon.
    Checkpoint,
    /// To end.
    Stop,
}

/// The checkpointing thread; stopped (and joined) on drop.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    requests: SyncSender<Ask>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the database file at `path`.
    pub(crate) fn start(path: &Path) -> Result<Self, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        // The checkpoint syncs the log before copying it, and the main file after, as the
        // writers' own checkpoints did.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // One pending request is enough: a checkpoint catches up with everything logged.
        let (requests, asked) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("halite-checkpoint".into())
            .spawn(move || run(&conn, &asked))
            .map_err(|error| StoreError::Unavailable(format!("starting the checkpoint thread: {error}")))?;
        Ok(Checkpointer { requests, thread: Some(thread) })
    }

    /// Asks for a checkpoint, without waiting: if one is already asked for, that one will do.
    pub(crate) fn ask(&self) {
        let _ = self.requests.try_send(Ask::Checkpoint);
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // Waits at most for the checkpoint under way to end.
        let _ = self.requests.send(Ask::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Checkpoints when asked or every [`INTERVAL`], until told to stop.
fn run(conn: &Connection, asked: &mpsc::Receiver<Ask>) {
    loop {
        match asked.recv_timeout(INTERVAL) {
            Ok(Ask::Checkpoint) | Err(RecvTimeoutError::Timeout) => {}
            Ok(Ask::Stop) | Err(RecvTimeoutError::Disconnected) => return,
        }
        // Busy (another checkpoint runs) or a failing disk: the next one tries again, and the
        // writers' backstop still bounds the log.
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!(%error, "checkpoint failed; trying again at the next");
        }
    }
}
