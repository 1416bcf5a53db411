//! Master keys the cluster key revoked, as masters told this minion (in `welcome`): checked
//! against the key the minion pins, kept in `state_dir/revoked_masters` (one key per line, hex),
//! and refused in every handshake from then on, whichever master it reaches.

use std::path::PathBuf;

use halite_protocol::hex;
use halite_protocol::identity::PublicIdentity;
use halite_protocol::noise::Revocation;
use tracing::warn;

/// The revoked master keys this minion knows.
pub(crate) struct Revocations {
    path: PathBuf,
    keys: Vec<PublicIdentity>,
}

impl Revocations {
    /// Reads the kept list (an unreadable line is skipped with a warning).
    pub(crate) fn load(path: PathBuf) -> Self {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .filter_map(|line| {
                let key = hex::decode(line).and_then(|b| PublicIdentity::from_bytes(&b).ok());
                if key.is_none() {
                    warn!(path = %path.display(), "an unreadable line in the revoked masters file; skipped");
                }
                key
            })
            .collect();
        Revocations { path, keys }
    }

    /// The revoked keys, for the handshake.
    pub(crate) fn keys(&self) -> Vec<PublicIdentity> {
        self.keys.clone()
    }

    /// Whether `key` is revoked.
    pub(crate) fn contains(&self, key: &PublicIdentity) -> bool {
        self.keys.contains(key)
    }

    /// Adds the revocations `cluster` signed (others are ignored with a warning) and keeps the
    /// list on disk.
    pub(crate) fn learn(&mut self, revocations: &[String], cluster: &PublicIdentity) {
        let before = self.keys.len();
        for text in revocations {
            match Revocation::from_hex(text).and_then(|r| r.verify(cluster).map(|()| r)) {
                Ok(revocation) if !self.keys.contains(&revocation.master) => self.keys.push(revocation.master),
                Ok(_) => {}
                Err(error) => warn!(%error, "a master revocation not signed by the pinned key; ignored"),
            }
        }
        if self.keys.len() > before {
            let text: String = self.keys.iter().map(|k| format!("{}\n", hex::encode(k.as_bytes()))).collect();
            if let Err(error) = std::fs::write(&self.path, text) {
                warn!(%error, path = %self.path.display(), "could not keep the revoked master keys");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::identity::IdentityKey;

    use super::*;

    #[test]
    fn revocations_signed_by_the_pinned_key_are_kept_across_restarts_and_others_ignored() {
        let dir = std::env::temp_dir().join(format!("halite-revoked-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("revoked_masters");
        let cluster = IdentityKey::from_seed(&[1; 32]);
        let retired = IdentityKey::from_seed(&[2; 32]).public();
        let stranger = IdentityKey::from_seed(&[3; 32]);
        let mut revocations = Revocations::load(path.clone());
        let good = Revocation::issue(&cluster, &retired).to_hex();
        let forged = Revocation::issue(&stranger, &cluster.public()).to_hex();
        revocations.learn(&[good.clone(), forged, "nonsense".into(), good], &cluster.public());
        assert_eq!(revocations.keys(), vec![retired]);
        let again = Revocations::load(path);
        assert!(again.contains(&retired) && !again.contains(&cluster.public()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
