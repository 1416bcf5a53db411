//! The durable outbox and the at-most-once job markers.
//!
//! - `jobs/<jid>`: created (and synced) before a job starts; its existence means "this jid has
//!   started on this minion", so a second delivery, even after a restart, never runs it again.
//! - `outbox/<jid>`: the job's return, written atomically (temporary file, fsync, rename, fsync of
//!   the directory) before it is sent, and deleted only when the master acknowledges it.
//!
//! Jids reach file names only after [`halite_protocol::id::validate`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use halite_protocol::message::{self, JobReturn, Message};

/// Whether a jid was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// First sight: run it.
    New,
    /// It started before (maybe in a previous process): never run it again.
    Seen,
}

/// The outbox and markers under a state directory.
#[derive(Debug, Clone)]
pub struct Outbox {
    outbox: PathBuf,
    markers: PathBuf,
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Outbox {
    /// Opens (creating) `state_dir/outbox` and `state_dir/jobs`.
    pub fn open(state_dir: &Path) -> io::Result<Self> {
        let outbox = state_dir.join("outbox");
        let markers = state_dir.join("jobs");
        for dir in [&outbox, &markers] {
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        Ok(Outbox { outbox, markers })
    }

    /// Records that `jid` starts now, durably. Returns [`Claim::Seen`] if it had already.
    pub fn claim(&self, jid: &str) -> io::Result<Claim> {
        match OpenOptions::new().write(true).create_new(true).mode(0o600).open(self.markers.join(jid)) {
            Ok(file) => {
                file.sync_all()?;
                sync_dir(&self.markers)?;
                Ok(Claim::New)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Claim::Seen),
            Err(e) => Err(e),
        }
    }

    /// Writes a return durably.
    pub fn store(&self, ret: &JobReturn) -> io::Result<()> {
        let path = self.outbox.join(&ret.jid);
        let tmp = self.outbox.join(format!(".{}.tmp", ret.jid));
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        file.write_all(&message::encode(&Message::JobReturn(ret.clone())))?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        sync_dir(&self.outbox)
    }

    /// The stored return for `jid`, if any.
    pub fn get(&self, jid: &str) -> Option<JobReturn> {
        let bytes = fs::read(self.outbox.join(jid)).ok()?;
        match message::decode(&bytes) {
            Ok(Message::JobReturn(ret)) => Some(ret),
            _ => None,
        }
    }

    /// Deletes the return for `jid` (the master has it).
    pub fn remove(&self, jid: &str) -> io::Result<()> {
        match fs::remove_file(self.outbox.join(jid)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every stored return, oldest jid first.
    pub fn pending(&self) -> Vec<JobReturn> {
        let Ok(entries) = fs::read_dir(&self.outbox) else { return Vec::new() };
        let mut jids: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect();
        jids.sort();
        jids.iter().filter_map(|jid| self.get(jid)).collect()
    }

    /// Deletes markers older than `age` (a jid is never redelivered that late).
    pub fn prune_markers(&self, age: Duration) -> io::Result<usize> {
        let cutoff = SystemTime::now() - age;
        let mut pruned = 0;
        for entry in fs::read_dir(&self.markers)? {
            let entry = entry?;
            if entry.metadata()?.modified()? < cutoff {
                fs::remove_file(entry.path())?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_protocol::message::Outcome;

    fn ret(jid: &str) -> JobReturn {
        JobReturn {
            jid: jid.into(),
            minion: String::new(),
            success: true,
            retcode: 0,
            outputs: serde_json::json!({"a": 1}),
            truncated: false,
            duration_ms: 1,
            outcome: Outcome::Completed,
        }
    }

    #[test]
    fn markers_claim_once_and_returns_persist_until_removed() {
        let dir = std::env::temp_dir().join(format!("halite-outbox-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let outbox = Outbox::open(&dir).unwrap();
        assert_eq!(outbox.claim("1").unwrap(), Claim::New);
        assert_eq!(outbox.claim("1").unwrap(), Claim::Seen);
        // A new process sees the same.
        let reopened = Outbox::open(&dir).unwrap();
        assert_eq!(reopened.claim("1").unwrap(), Claim::Seen);

        outbox.store(&ret("2")).unwrap();
        outbox.store(&ret("1")).unwrap();
        assert_eq!(reopened.pending(), vec![ret("1"), ret("2")]);
        outbox.remove("1").unwrap();
        outbox.remove("1").unwrap();
        assert_eq!(reopened.pending(), vec![ret("2")]);
        assert_eq!(outbox.prune_markers(Duration::from_secs(3600)).unwrap(), 0);
        assert_eq!(outbox.prune_markers(Duration::ZERO).unwrap(), 1);
    }
}
