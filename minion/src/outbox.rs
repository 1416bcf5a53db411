//! The durable outbox and the at-most-once job markers, kept in one append-only journal
//! (`<state_dir>/journal`, format in [`crate::journal`]) and mirrored in memory.
//!
//! - a "started" record is appended and synced before a job starts: a jid with one is never run
//!   again, even after a restart;
//! - a "return" record is appended before the return is sent, and synced right after it
//!   leaves, by [`Outbox::sync`] or by the next "started" record's sync, whichever comes first
//!   (the daemon asks within [`RETURN_SYNC_DELAY`]): the sync is off the return's way, and a
//!   minion running job after job syncs once per job. It stays pending until an "acked"
//!   record (appended, not synced: losing it only re-sends a return the master already has,
//!   which it keeps once) says the master stored it.
//!
//! Why a return may leave before its sync: the record is in the page cache once written, so
//! only the machine failing (not the minion being killed) can lose it, and only within those
//! few milliseconds; its jid's marker is synced, so after such a failure the job is reported
//! interrupted, never run again — the outcome of the machine failing just before the job
//! ended. A master that did get the return keeps it, and ignores the report.
//!
//! The journal is rewritten with only what is live (markers, pending returns) when it has
//! doubled since the last rewrite, and at every start that finds anything in it. Jids are
//! checked as ids ([`halite_protocol::id::validate`]) before they are recorded.
//!
//! Markers are pruned by the jids' own times (the master's clock), counted back from the newest
//! jid this minion has a marker for, never by the minion's wall clock: a guest whose clock jumps
//! a month ahead does not forget what it ran. A marker whose return is still pending is kept
//! whatever its age. Each marker costs about 60 bytes of memory while it is kept.
//!
//! State directories of earlier versions (a file per marker under `jobs/`, per return under
//! `outbox/`) are taken into the journal at start ([`crate::outbox_legacy`]).

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use halite_protocol::message::{self, JobReturn, Message, Outcome};

use crate::journal::{self, Kind, Read};

/// Whether a jid was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// First sight: run it.
    New,
    /// It started before (maybe in a previous process): never run it again.
    Seen,
}

/// Markers are kept until this much older than the newest marked jid.
pub const MARKER_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long after a return is written the daemon syncs it at the latest.
pub const RETURN_SYNC_DELAY: Duration = Duration::from_millis(2);

/// The journal is not rewritten below this size.
const MIN_REWRITE: u64 = 1024 * 1024;

/// The outbox and markers of one state directory. One process at a time (the state directory
/// is locked by the minion).
#[derive(Debug)]
pub struct Outbox {
    dir: PathBuf,
    file: File,
    /// Where the next record goes.
    len: u64,
    /// The size at which the journal is rewritten next.
    rewrite_at: u64,
    started: HashSet<String>,
    /// Pending returns by jid, as encoded in the journal (read back whole at start), so
    /// storing one encodes it once and a rewrite copies it as it is.
    returns: BTreeMap<String, Vec<u8>>,
    /// Encoding buffer, reused.
    record: Vec<u8>,
    /// Whether a return was written since the journal was last synced.
    unsynced: bool,
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn checked(jid: &str) -> io::Result<()> {
    halite_protocol::id::validate(jid)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("jid {jid:?} refused: {e}")))
}

/// `ret` as a return record's body carries it.
pub(crate) fn encoded(ret: &JobReturn) -> Vec<u8> {
    message::encode(&Message::JobReturn(ret.clone()))
}

/// The return a record's body carries, if it is one, for `jid`.
pub(crate) fn decoded(jid: &str, body: &[u8]) -> Option<JobReturn> {
    match message::decode_for_minion(body) {
        Ok(Message::JobReturn(ret)) if ret.jid == jid => Some(ret),
        _ => None,
    }
}

/// What stands for a return that cannot be read back: a failed return saying so, so its job is
/// reported rather than forgotten.
pub(crate) fn damaged_return(jid: &str, kept: &Path) -> JobReturn {
    JobReturn {
        jid: jid.to_owned(),
        minion: String::new(),
        success: false,
        retcode: 1,
        outputs: serde_json::json!({
            "error": format!("the minion's stored return for this job was damaged; kept as {}", kept.display()),
        }),
        truncated: false,
        duration_ms: 0,
        outcome: Outcome::Interrupted,
    }
}

impl Outbox {
    /// Opens (creating) the journal under `state_dir`, reads it back, takes in an earlier
    /// version's files, and rewrites it with what is live.
    pub fn open(state_dir: &Path) -> io::Result<Self> {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(state_dir)?;
        let path = state_dir.join("journal");
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path)?;
        let mut outbox = Outbox {
            dir: state_dir.to_path_buf(),
            file,
            len: 0,
            rewrite_at: MIN_REWRITE,
            started: HashSet::new(),
            returns: BTreeMap::new(),
            record: Vec::new(),
            unsynced: false,
        };
        let scan = journal::scan(&bytes);
        // Damage is kept for whoever looks into it: the rewrite below drops it from the journal.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let kept = state_dir.join(format!("journal.damaged-{}", now.as_millis()));
        if scan.damaged {
            fs::write(&kept, &bytes)?;
            tracing::error!(kept = %kept.display(), "the minion's journal is damaged; a copy is kept, and what it still says is used");
        }
        for record in scan.records {
            outbox.apply(record, &kept);
        }
        let legacy = crate::outbox_legacy::take_in(state_dir, &mut outbox.started, &mut outbox.returns)?;
        // A new (or empty) state directory has nothing to prune or rewrite.
        if !bytes.is_empty() || !legacy.is_empty() {
            outbox.prune(MARKER_RETENTION);
            outbox.rewrite()?;
            legacy.remove();
        }
        Ok(outbox)
    }

    /// Takes one record read back into memory; a damaged one errs on the safe side.
    fn apply(&mut self, record: Read, kept: &Path) {
        match record {
            Read::Intact { kind: Kind::Started, jid, .. } => {
                self.started.insert(jid);
            }
            Read::Intact { kind: Kind::Return, jid, body } => {
                let body = if decoded(&jid, &body).is_some() { body } else { encoded(&damaged_return(&jid, kept)) };
                self.returns.insert(jid, body);
            }
            Read::Intact { kind: Kind::Acked, jid, .. } => {
                self.returns.remove(&jid);
            }
            Read::Damaged { kind: Some(Kind::Started), jid: Some(jid) } => {
                tracing::error!(%jid, "a damaged run-once marker: the jid counts as started");
                self.started.insert(jid);
            }
            Read::Damaged { kind: Some(Kind::Return), jid: Some(jid) } => {
                tracing::error!(%jid, "a damaged return: reported to the master as failed");
                self.returns.insert(jid.clone(), encoded(&damaged_return(&jid, kept)));
            }
            Read::Damaged { kind, jid } => {
                // A lost acknowledgement only sends its return again; a record whose header is
                // gone cannot be placed at all.
                tracing::error!(?kind, ?jid, "a damaged journal record was skipped");
            }
        }
    }

    /// Appends one record, synced (with every record before it) when `durable`.
    fn append(&mut self, kind: Kind, jid: &str, body: &[u8], durable: bool) -> io::Result<()> {
        self.record.clear();
        journal::encode(&mut self.record, kind, jid, body);
        journal::write_at(&self.file, self.len, &self.record, durable)?;
        self.len += self.record.len() as u64;
        if durable {
            self.unsynced = false;
        }
        Ok(())
    }

    /// Syncs the journal if a return was written since its last sync.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Whether a return was written since the last sync.
    pub fn unsynced(&self) -> bool {
        self.unsynced
    }

    /// Rewrites the journal once it has doubled since the last rewrite. A failure (a full
    /// disk) keeps the current journal, which stays whole, and tries again at twice the size.
    fn rewrite_when_due(&mut self) {
        if self.len < self.rewrite_at {
            return;
        }
        if let Err(error) = self.rewrite() {
            tracing::warn!(%error, "could not rewrite the journal; it grows until the next try");
            self.rewrite_at = self.len.saturating_mul(2);
        }
    }

    /// Writes what is live to a new journal, synced, and puts it in place of the old one.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut live = Vec::new();
        for jid in &self.started {
            journal::encode(&mut live, Kind::Started, jid, b"");
        }
        for (jid, body) in &self.returns {
            journal::encode(&mut live, Kind::Return, jid, body);
        }
        let path = self.dir.join("journal");
        let tmp = self.dir.join("journal.new");
        let written = (|| {
            let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            journal::write_at(&file, 0, &live, true)?;
            fs::rename(&tmp, &path)?;
            sync_dir(&self.dir)?;
            Ok(file)
        })();
        match written {
            Ok(file) => {
                self.file = file;
                self.len = live.len() as u64;
                self.unsynced = false;
                self.rewrite_at = self.len.saturating_mul(2).max(MIN_REWRITE);
                Ok(())
            }
            Err(error) => {
                let _ = fs::remove_file(&tmp);
                Err(error)
            }
        }
    }

    /// Records that `jid` starts now, durably. Returns [`Claim::Seen`] if it had already.
    pub fn claim(&mut self, jid: &str) -> io::Result<Claim> {
        checked(jid)?;
        if self.started.contains(jid) {
            return Ok(Claim::Seen);
        }
        self.append(Kind::Started, jid, b"", true)?;
        self.started.insert(jid.to_owned());
        self.rewrite_when_due();
        Ok(Claim::New)
    }

    /// Whether `jid` started here before.
    pub fn started(&self, jid: &str) -> bool {
        self.started.contains(jid)
    }

    /// Keeps a return until it is acknowledged: written now, durable once synced
    /// ([`Outbox::sync`], or the next [`Outbox::claim`]).
    pub fn store(&mut self, ret: &JobReturn) -> io::Result<()> {
        checked(&ret.jid)?;
        let body = encoded(ret);
        self.append(Kind::Return, &ret.jid, &body, false)?;
        self.unsynced = true;
        self.returns.insert(ret.jid.clone(), body);
        self.rewrite_when_due();
        Ok(())
    }

    /// The stored return for `jid`, if any.
    pub fn get(&self, jid: &str) -> Option<JobReturn> {
        self.returns.get(jid).and_then(|body| decoded(jid, body))
    }

    /// Drops the return for `jid` (the master has it); whether there was one. An error means
    /// the drop was not recorded: the return goes again after a restart.
    pub fn remove(&mut self, jid: &str) -> io::Result<bool> {
        checked(jid)?;
        if self.returns.remove(jid).is_none() {
            return Ok(false);
        }
        self.append(Kind::Acked, jid, b"", false)?;
        self.rewrite_when_due();
        Ok(true)
    }

    /// Every stored return, oldest jid first.
    pub fn pending(&self) -> Vec<JobReturn> {
        self.returns.iter().filter_map(|(jid, body)| decoded(jid, body)).collect()
    }

    /// How many returns wait for their acknowledgement.
    pub fn pending_count(&self) -> usize {
        self.returns.len()
    }

    /// Forgets markers of jids issued more than `age` before the newest marked jid (by the
    /// times the jids carry), except those whose return is pending. Markers whose names are not
    /// jid times are kept. Returns how many went.
    fn prune(&mut self, age: Duration) -> usize {
        let issued = |jid: &str| halite_protocol::time::parse_compact_utc(jid);
        let Some(newest) = self.started.iter().filter_map(|jid| issued(jid)).max() else { return 0 };
        let cutoff = newest.saturating_sub(u64::try_from(age.as_micros()).unwrap_or(u64::MAX));
        let before = self.started.len();
        let returns = &self.returns;
        self.started.retain(|jid| issued(jid).is_none_or(|at| at >= cutoff) || returns.contains_key(jid));
        before - self.started.len()
    }

    /// [`Self::prune`], then the journal rewritten without them.
    pub fn prune_markers(&mut self, age: Duration) -> io::Result<usize> {
        let pruned = self.prune(age);
        if pruned > 0 {
            self.rewrite()?;
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("halite-outbox-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn markers_claim_once_and_returns_persist_until_removed() {
        let dir = scratch("basic");
        let mut outbox = Outbox::open(&dir).unwrap();
        assert_eq!(outbox.claim("1").unwrap(), Claim::New);
        assert_eq!(outbox.claim("1").unwrap(), Claim::Seen);
        // A new process sees the same.
        assert_eq!(Outbox::open(&dir).unwrap().claim("1").unwrap(), Claim::Seen);
        let mut outbox = Outbox::open(&dir).unwrap();

        outbox.store(&ret("2")).unwrap();
        outbox.store(&ret("1")).unwrap();
        assert_eq!(Outbox::open(&dir).unwrap().pending(), vec![ret("1"), ret("2")]);
        let mut outbox = Outbox::open(&dir).unwrap();
        assert!(outbox.remove("1").unwrap());
        assert!(!outbox.remove("1").unwrap(), "removing twice finds nothing");
        let reopened = Outbox::open(&dir).unwrap();
        assert_eq!(reopened.pending(), vec![ret("2")]);
        assert!(reopened.started("1") && !reopened.started("2"));
    }

    #[test]
    fn a_return_is_synced_by_sync_or_by_the_next_marker_and_an_ack_needs_none() {
        let dir = scratch("sync");
        let mut outbox = Outbox::open(&dir).unwrap();
        assert!(!outbox.unsynced());
        outbox.store(&ret("1")).unwrap();
        assert!(outbox.unsynced());
        outbox.sync().unwrap();
        assert!(!outbox.unsynced());
        outbox.store(&ret("2")).unwrap();
        assert!(outbox.remove("1").unwrap());
        assert!(outbox.unsynced(), "return 2 is still to sync");
        assert_eq!(outbox.claim("3").unwrap(), Claim::New);
        assert!(!outbox.unsynced(), "the marker's sync took the return along");
        assert!(outbox.remove("2").unwrap());
        assert!(!outbox.unsynced(), "an acknowledgement alone is not synced");
        // Written is readable by the next process even before the sync (a minion killed, not
        // its machine).
        outbox.store(&ret("4")).unwrap();
        drop(outbox);
        assert_eq!(Outbox::open(&dir).unwrap().pending(), vec![ret("4")]);
    }

    /// What a crash leaves after any prefix of the journal's writes reads back as the facts
    /// whose writes completed: never a marker lost once claimed, never a return lost once stored.
    #[test]
    fn any_prefix_of_the_journal_reads_back_as_what_completed() {
        let dir = scratch("prefix");
        let mut outbox = Outbox::open(&dir).unwrap();
        let mut sizes = vec![outbox.len];
        outbox.claim("20261122000000000001").unwrap();
        sizes.push(outbox.len);
        outbox.store(&ret("20261122000000000001")).unwrap();
        sizes.push(outbox.len);
        outbox.remove("20261122000000000001").unwrap();
        sizes.push(outbox.len);
        let whole = fs::read(dir.join("journal")).unwrap();
        drop(outbox);
        for cut in 0..=whole.len() {
            fs::write(dir.join("journal"), &whole[..cut]).unwrap();
            let outbox = Outbox::open(&dir).unwrap();
            let completed = sizes.iter().filter(|&&s| s as usize <= cut).count() - 1;
            assert_eq!(outbox.started("20261122000000000001"), completed >= 1, "cut at {cut}");
            assert_eq!(outbox.pending().len(), usize::from(completed == 2), "cut at {cut}");
            assert!(!fs::read_dir(&dir).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains("damaged")));
        }
    }

    #[test]
    fn a_damaged_return_is_reported_failed_and_the_journal_kept() {
        let dir = scratch("damaged");
        let mut outbox = Outbox::open(&dir).unwrap();
        outbox.store(&ret("20261122000000000001")).unwrap();
        outbox.store(&ret("20261122000000000002")).unwrap();
        outbox.claim("20261122000000000003").unwrap();
        drop(outbox);
        // A bit flipped in the second return's body.
        let mut bytes = fs::read(dir.join("journal")).unwrap();
        let second = bytes.windows(20).rposition(|w| w == b"20261122000000000002").unwrap();
        bytes[second + 30] ^= 0x01;
        fs::write(dir.join("journal"), &bytes).unwrap();

        let outbox = Outbox::open(&dir).unwrap();
        let pending = outbox.pending();
        assert_eq!(pending.len(), 2);
        assert_eq!(pending[0], ret("20261122000000000001"));
        assert!(!pending[1].success);
        assert!(pending[1].outputs["error"].as_str().unwrap().contains("damaged"));
        assert!(outbox.started("20261122000000000003"), "records after the damage are read");
        let kept: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("journal.damaged-"))
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(pending[1].outputs["error"].as_str().unwrap().contains(&kept[0]));
        // The stand-in is stored: it is there until acknowledged, and only once.
        assert_eq!(Outbox::open(&dir).unwrap().pending(), pending);
    }

    /// A return_ack (or any message) naming something that is not an id is refused.
    #[test]
    fn jids_must_be_ids() {
        let dir = scratch("paths");
        let mut outbox = Outbox::open(&dir).unwrap();
        for jid in ["../victim", "../jobs/20261122000000000001", "/etc/passwd", "..", ".hidden", "", &"x".repeat(300)] {
            assert!(outbox.remove(jid).is_err(), "{jid:?} accepted");
            assert!(outbox.claim(jid).is_err(), "{jid:?} accepted");
            assert!(outbox.store(&ret(jid)).is_err(), "{jid:?} accepted");
            assert!(outbox.get(jid).is_none());
        }
        assert_eq!(fs::metadata(dir.join("journal")).unwrap().len(), 0);
    }

    /// Pruning counts back from the newest jid, by the master's times: the minion's own clock,
    /// however wrong, cannot make it forget a jid it ran.
    #[test]
    fn markers_are_pruned_by_jid_time_never_by_the_local_clock() {
        let dir = scratch("prune");
        let mut outbox = Outbox::open(&dir).unwrap();
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
        let mut outbox = Outbox::open(&dir).unwrap();
        assert_eq!(outbox.claim(&day(1)).unwrap(), Claim::Seen);
        assert_eq!(outbox.claim(&day(20)).unwrap(), Claim::Seen);
        assert_eq!(outbox.claim("local-test").unwrap(), Claim::Seen);
        assert_eq!(outbox.claim(&day(10)).unwrap(), Claim::New, "pruned, so new again");
        outbox.remove(&day(1)).unwrap();
        assert_eq!(outbox.prune_markers(Duration::from_secs(5 * 86_400)).unwrap(), 2);
    }

    /// The journal is rewritten as it grows: its size follows what is live, not what happened.
    #[test]
    fn the_journal_stays_the_size_of_what_is_live() {
        let dir = scratch("rewrite");
        let mut outbox = Outbox::open(&dir).unwrap();
        let big = JobReturn { outputs: serde_json::json!({ "stdout": "x".repeat(10_000) }), ..ret("") };
        for i in 0..1_000 {
            let jid = format!("2026112200000000{i:04}");
            outbox.claim(&jid).unwrap();
            outbox.store(&JobReturn { jid: jid.clone(), ..big.clone() }).unwrap();
            outbox.remove(&jid).unwrap();
        }
        let size = fs::metadata(dir.join("journal")).unwrap().len();
        assert!(size <= 2 * MIN_REWRITE + 20_000, "{size} bytes for 1,000 markers");
        let reopened = Outbox::open(&dir).unwrap();
        assert!(reopened.pending().is_empty());
        assert!((0..1_000).all(|i| reopened.started(&format!("2026112200000000{i:04}"))));
        assert!(!dir.join("journal.new").exists());
    }
}
