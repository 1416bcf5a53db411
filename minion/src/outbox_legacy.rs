//! State directories of earlier versions kept a file per fact: `jobs/<jid>` (a run-once
//! marker) and `outbox/<jid>` (an unacknowledged return). At start they are taken into the
//! journal, and their directories removed once it is written: an upgraded guest forgets
//! neither what it ran nor what it owes its master.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::outbox::{damaged_return, decoded, encoded};

/// The directories taken in, to remove once the journal holds what they held.
#[must_use]
pub(crate) struct TakenIn(Vec<PathBuf>);

impl TakenIn {
    /// Whether there was nothing to take in.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Removes them; a failure only leaves them to be taken in again (and merged) next start.
    pub(crate) fn remove(self) {
        for dir in self.0 {
            if let Err(error) = fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), %error, "could not remove a state directory already taken into the journal");
            }
        }
    }
}

/// The names in `dir` that are ids, if `dir` exists.
fn ids_in(dir: &Path) -> io::Result<Vec<String>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir)? {
        let Ok(name) = entry?.file_name().into_string() else { continue };
        if halite_protocol::id::validate(&name).is_ok() {
            ids.push(name);
        }
    }
    Ok(ids)
}

/// Adds the markers and returns of an earlier version's `state_dir` to `started` and `returns`.
/// A return that does not read back stands as a failed return saying so (its bytes kept as
/// `outbox.damaged.<jid>` beside the journal), as one damaged in the journal would.
pub(crate) fn take_in(
    state_dir: &Path,
    started: &mut HashSet<String>,
    returns: &mut BTreeMap<String, Vec<u8>>,
) -> io::Result<TakenIn> {
    let mut dirs = Vec::new();
    let markers = state_dir.join("jobs");
    if markers.is_dir() {
        started.extend(ids_in(&markers)?);
        dirs.push(markers);
    }
    let outbox = state_dir.join("outbox");
    if outbox.is_dir() {
        for jid in ids_in(&outbox)? {
            let path = outbox.join(&jid);
            // The file holds the return as the journal does.
            let body = fs::read(&path)?;
            let body = if decoded(&jid, &body).is_some() {
                body
            } else {
                let aside = state_dir.join(format!("outbox.damaged.{jid}"));
                fs::copy(&path, &aside)?;
                tracing::error!(%jid, aside = %aside.display(), "a stored return is damaged; kept aside and reported failed");
                encoded(&damaged_return(&jid, &aside))
            };
            returns.insert(jid, body);
        }
        dirs.push(outbox);
    }
    Ok(TakenIn(dirs))
}

#[cfg(test)]
mod tests {
    use crate::outbox::Outbox;
    use halite_protocol::message::{self, JobReturn, Message, Outcome};

    use super::*;

    #[test]
    fn an_earlier_state_directory_is_taken_into_the_journal() {
        let dir = std::env::temp_dir().join(format!("halite-outbox-legacy-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("jobs")).unwrap();
        fs::create_dir_all(dir.join("outbox")).unwrap();
        for jid in ["20261122000000000001", "20261122000000000002", "20261122000000000003"] {
            fs::write(dir.join("jobs").join(jid), b"").unwrap();
        }
        let ret = JobReturn {
            jid: "20261122000000000002".into(),
            minion: String::new(),
            success: true,
            retcode: 0,
            outputs: serde_json::json!({"stdout": "kept"}),
            truncated: false,
            duration_ms: 3,
            outcome: Outcome::Completed,
        };
        fs::write(dir.join("outbox/20261122000000000002"), message::encode(&Message::JobReturn(ret.clone()))).unwrap();
        fs::write(dir.join("outbox/20261122000000000003"), b"\xc1 not a return").unwrap();
        fs::write(dir.join("outbox/.20261122000000000004.tmp"), b"half").unwrap();

        let outbox = Outbox::open(&dir).unwrap();
        assert!(!dir.join("jobs").exists() && !dir.join("outbox").exists());
        drop(outbox);
        // Read back from the journal alone.
        let outbox = Outbox::open(&dir).unwrap();
        for jid in ["20261122000000000001", "20261122000000000002", "20261122000000000003"] {
            assert!(outbox.started(jid), "{jid}");
        }
        let pending = outbox.pending();
        assert_eq!(pending.len(), 2);
        assert_eq!(pending[0], ret);
        assert!(!pending[1].success);
        assert!(pending[1].outputs["error"].as_str().unwrap().contains("outbox.damaged.20261122000000000003"));
        assert_eq!(fs::read(dir.join("outbox.damaged.20261122000000000003")).unwrap(), b"\xc1 not a return");
    }
}
