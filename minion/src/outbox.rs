//! The durable outbox and the at-most-once job markers.
//!
//! - `jobs/<jid>`: created (and synced) before a job starts; its existence means "this jid has
//!   started on this minion", so a second delivery, even after a restart, never runs it again.
//! - `outbox/<jid>`: the job's return, written atomically (temporary file, fsync, rename, fsync of
//!   the directory) before it is sent, and deleted only when the master acknowledges it.
//!
//! Jids reach file names only through [`Outbox::path`], which refuses anything that is not a
//! valid id ([`halite_protocol::id::validate`]: no `/`, no leading `.`): a jid from the master,
//! even one holding the master's key, can never name another file.
//!
//! Markers are pruned by the jids' own times (the master's clock), counted back from the newest
//! jid this minion has a marker for, never by the minion's wall clock: a guest whose clock jumps
//! a month ahead does not forget what it ran. A marker whose return is still in the outbox is
//! kept whatever its age.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

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

    /// `dir/jid`, once `jid` is known to be a plain name.
    fn path(dir: &Path, jid: &str) -> io::Result<PathBuf> {
        halite_protocol::id::validate(jid)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("jid {jid:?} refused: {e}")))?;
        Ok(dir.join(jid))
    }

    /// Records that `jid` starts now, durably. Returns [`Claim::Seen`] if it had already.
    pub fn claim(&self, jid: &str) -> io::Result<Claim> {
        match OpenOptions::new().write(true).create_new(true).mode(0o600).open(Self::path(&self.markers, jid)?) {
            Ok(file) => {
                file.sync_all()?;
                sync_dir(&self.markers)?;
                Ok(Claim::New)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Claim::Seen),
            Err(e) => Err(e),
        }
    }

    /// Whether `jid` started here before (its marker exists).
    pub fn started(&self, jid: &str) -> bool {
        Self::path(&self.markers, jid).is_ok_and(|path| path.exists())
    }

    /// Writes a return durably.
    pub fn store(&self, ret: &JobReturn) -> io::Result<()> {
        let path = Self::path(&self.outbox, &ret.jid)?;
        let tmp = self.outbox.join(format!(".{}.tmp", ret.jid));
        let written = (|| {
            let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            file.write_all(&message::encode(&Message::JobReturn(ret.clone())))?;
            file.sync_all()?;
            fs::rename(&tmp, &path)?;
            sync_dir(&self.outbox)
        })();
        if written.is_err() {
            // A full disk leaves no half-written temporary file behind.
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// The stored return for `jid`, if any.
    pub fn get(&self, jid: &str) -> Option<JobReturn> {
        let bytes = fs::read(Self::path(&self.outbox, jid).ok()?).ok()?;
        match message::decode_for_minion(&bytes) {
            Ok(Message::JobReturn(ret)) => Some(ret),
            _ => None,
        }
    }

    /// Deletes the return for `jid` (the master has it); whether there was one.
    pub fn remove(&self, jid: &str) -> io::Result<bool> {
        match fs::remove_file(Self::path(&self.outbox, jid)?) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every stored return, oldest jid first. An entry that does not decode (a damaged disk
    /// block, a hand edit) is moved aside to `.damaged.<jid>`, logged, and stands in the list
    /// as a failed return saying so, so its job is reported rather than forgotten.
    pub fn pending(&self) -> Vec<JobReturn> {
        let Ok(entries) = fs::read_dir(&self.outbox) else { return Vec::new() };
        let mut jids: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| !name.starts_with('.'))
            .collect();
        jids.sort();
        let mut returns = Vec::with_capacity(jids.len());
        for jid in jids {
            if let Some(ret) = self.get(&jid) {
                returns.push(ret);
                continue;
            }
            let Ok(path) = Self::path(&self.outbox, &jid) else { continue };
            let aside = self.outbox.join(format!(".damaged.{jid}"));
            tracing::error!(%jid, aside = %aside.display(), "a stored return is damaged; moved aside and reported failed");
            if fs::rename(&path, &aside).is_err() {
                continue;
            }
            let ret = JobReturn {
                jid: jid.clone(),
                minion: String::new(),
                success: false,
                retcode: 1,
                outputs: serde_json::json!({
                    "error": format!("the minion's stored return for this job was damaged; kept as {}", aside.display()),
                }),
                truncated: false,
                duration_ms: 0,
                outcome: halite_protocol::message::Outcome::Interrupted,
            };
            // Stored again whole, so it too waits for its acknowledgement.
            if self.store(&ret).is_ok() {
                returns.push(ret);
            }
        }
        returns
    }

    /// Deletes markers of jids issued more than `age` before the newest marked jid (by the
    /// times the jids carry), except those whose return is still in the outbox. Markers whose
    /// names are not jid times are kept.
    pub fn prune_markers(&self, age: Duration) -> io::Result<usize> {
        let mut marked: Vec<(u64, PathBuf, String)> = Vec::new();
        for entry in fs::read_dir(&self.markers)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if let Some(issued) = halite_protocol::time::parse_compact_utc(&name) {
                marked.push((issued, entry.path(), name));
            }
        }
        let Some(newest) = marked.iter().map(|(issued, _, _)| *issued).max() else { return Ok(0) };
        let cutoff = newest.saturating_sub(u64::try_from(age.as_micros()).unwrap_or(u64::MAX));
        let mut pruned = 0;
        for (issued, path, jid) in marked {
            if issued < cutoff && !self.outbox.join(&jid).exists() {
                fs::remove_file(path)?;
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
        assert!(outbox.remove("1").unwrap());
        assert!(!outbox.remove("1").unwrap(), "removing twice finds nothing");
        assert_eq!(reopened.pending(), vec![ret("2")]);
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("halite-outbox-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_damaged_entry_is_moved_aside_and_reported_failed() {
        let dir = scratch("damaged");
        let outbox = Outbox::open(&dir).unwrap();
        outbox.store(&ret("20261122000000000001")).unwrap();
        fs::write(dir.join("outbox/20261122000000000002"), b"\xc1garbage").unwrap();
        let pending = outbox.pending();
        assert_eq!(pending.len(), 2);
        assert_eq!(pending[0], ret("20261122000000000001"));
        assert!(!pending[1].success);
        assert!(pending[1].outputs["error"].as_str().unwrap().contains("damaged"));
        assert!(dir.join("outbox/.damaged.20261122000000000002").exists());
        // The stand-in is stored: it is there until acknowledged, and only once.
        assert_eq!(outbox.pending(), pending);
        assert!(fs::read_dir(dir.join("outbox")).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp")));
    }

    /// A return_ack (or any message) naming another file is refused: a master holding the key
    /// cannot delete a file or a run-once marker through a jid.
    #[test]
    fn jids_never_name_other_files() {
        let dir = scratch("paths");
        let outbox = Outbox::open(&dir).unwrap();
        assert_eq!(outbox.claim("20261122000000000001").unwrap(), Claim::New);
        let victim = dir.join("victim");
        fs::write(&victim, "keep").unwrap();
        for jid in ["../victim", "../jobs/20261122000000000001", "/etc/passwd", "..", ".hidden", ""] {
            assert!(outbox.remove(jid).is_err(), "{jid:?} accepted");
            assert!(outbox.claim(jid).is_err(), "{jid:?} accepted");
            assert!(outbox.store(&ret(jid)).is_err(), "{jid:?} accepted");
            assert!(outbox.get(jid).is_none());
        }
        assert!(victim.exists());
        assert_eq!(outbox.claim("20261122000000000001").unwrap(), Claim::Seen, "the marker is still there");
    }

    /// Pruning counts back from the newest jid, by the master's times: the minion's own clock,
    /// however wrong, cannot make it forget a jid it ran.
    #[test]
    fn markers_are_pruned_by_jid_time_never_by_the_local_clock() {
        let dir = scratch("prune");
        let outbox = Outbox::open(&dir).unwrap();
        let day = |d: u32| format!("202611{d:02}000000000000");
        for d in [1, 10, 20] {
            assert_eq!(outbox.claim(&day(d)).unwrap(), Claim::New);
        }
        outbox.claim("local-test").unwrap();
        outbox.store(&ret(&day(1))).unwrap();
        // Nothing is older than 30 days before the newest jid, whatever the local clock says.
        assert_eq!(outbox.prune_markers(Duration::from_secs(30 * 86_400)).unwrap(), 0);
        // With 5 days kept: day 10 goes; day 1 stays while its return awaits its ack.
        assert_eq!(outbox.prune_markers(Duration::from_secs(5 * 86_400)).unwrap(), 1);
        assert_eq!(outbox.claim(&day(1)).unwrap(), Claim::Seen);
        assert_eq!(outbox.claim(&day(20)).unwrap(), Claim::Seen);
        assert_eq!(outbox.claim("local-test").unwrap(), Claim::Seen);
        outbox.remove(&day(1)).unwrap();
        assert_eq!(outbox.prune_markers(Duration::from_secs(5 * 86_400)).unwrap(), 1);
    }
}
