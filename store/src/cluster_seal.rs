//! Announcements on the wire, signed: `halite1 <signer> <signature> <body>`, the signer's
//! public key and the ed25519 signature in hex, then the body ([`Announcement`] as JSON) exactly
//! as signed. The envelope adds 202 bytes to a body of at most `MAX_PAYLOAD` (7,000): well
//! within PostgreSQL's 8,000-byte NOTIFY limit.
//!
//! A receiver acts on an announcement only if its signer is a master it trusts
//! ([`Trust::admit`]), the signature holds, and it is neither stale nor replayed: each master
//! process numbers its announcements (`seq`, from 1, in the order it sends them; `from` is a
//! random name per process) and stamps them with its wall clock (`at`). A receiver takes from
//! each signer and process only numbers above the last it took, and nothing stamped more than
//! [`FRESH_MS`] away from its own clock (so masters' clocks must agree within that). A process it
//! has not heard from yet could be sent a replay of that process's announcements of the last
//! [`FRESH_MS`]: at worst one more copy of a recent event to subscribers of a master that just
//! started; every other change is a "reread the store" that repeats harmlessly.

use std::collections::HashMap;

use halite_protocol::hex;
use halite_protocol::identity::PublicIdentity;

use super::cluster::Announcement;
use super::trust::{Trust, Untrusted};

/// The envelope's first word: its version.
const MAGIC: &str = "halite1";

/// How far an announcement's time may be from the receiver's clock.
pub(crate) const FRESH_MS: u64 = 120_000;

/// Why an announcement was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// Not the envelope (the unsigned form of older masters, or anything else).
    #[error("not a signed announcement")]
    Malformed,
    /// The signer is not trusted, or the signature does not hold.
    #[error("{0}")]
    Untrusted(#[from] Untrusted),
    /// Signed, but the body is not an announcement.
    #[error("a signed body that is not an announcement")]
    Unreadable,
    /// Its time is too far from this master's clock.
    #[error("stamped {0} ms away from this master's clock (replayed, or clocks disagree)")]
    Stale(u64),
    /// A number already taken from the same master process.
    #[error("announcement {seq} from {from} again (replayed)")]
    Replayed {
        /// The sending process.
        from: String,
        /// Its number.
        seq: u64,
    },
}

/// The NOTIFY payload for `body`, signed with this master's key.
pub(crate) fn seal(trust: &Trust, body: &str) -> String {
    let signature = trust.sign_announcement(body);
    format!("{MAGIC} {} {} {body}", hex::encode(trust.public().as_bytes()), hex::encode(&signature))
}

/// A payload taken apart, not yet checked.
#[derive(Debug)]
pub(crate) struct Envelope<'a> {
    pub signer: Vec<u8>,
    signature: Vec<u8>,
    body: &'a str,
}

/// Takes a payload apart.
pub(crate) fn envelope(payload: &str) -> Result<Envelope<'_>, Refused> {
    let mut parts = payload.splitn(4, ' ');
    let (Some(MAGIC), Some(signer), Some(signature), Some(body)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refused::Malformed);
    };
    let signer = hex::decode(signer).filter(|b| b.len() == 32).ok_or(Refused::Malformed)?;
    let signature = hex::decode(signature).filter(|b| b.len() == 64).ok_or(Refused::Malformed)?;
    Ok(Envelope { signer, signature, body })
}

/// The announcements this process sent lately, by a keyed hash of their payload. A master
/// hears its own announcements back through `LISTEN`: one it sent is dropped without checking
/// its signature (a verification costs more than the rest of a sequential job's work on the
/// master), while one that only claims to come from this process is checked, refused and
/// counted as any other. One heard back after more than [`OWN_REMEMBERED`] later ones were sent
/// is checked too, and then dropped as this process's own.
#[derive(Debug, Default)]
pub(crate) struct OwnAnnouncements {
    keys: std::collections::hash_map::RandomState,
    /// The fingerprints not heard back yet, and the last sent in the order they were sent (a
    /// fingerprint heard back stays in the order until it is the oldest: payloads are unique,
    /// each carrying its number).
    recent: std::sync::Mutex<(std::collections::HashSet<u64>, std::collections::VecDeque<u64>)>,
}

/// How many of its own announcements a master remembers (two per job; heard back within
/// milliseconds unless the listening connection lags).
pub(crate) const OWN_REMEMBERED: usize = 8_192;

impl OwnAnnouncements {
    fn fingerprint(&self, payload: &str) -> u64 {
        std::hash::BuildHasher::hash_one(&self.keys, payload)
    }

    /// Remembers a payload this process is sending.
    pub(crate) fn sent(&self, payload: &str) {
        let fingerprint = self.fingerprint(payload);
        let mut recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (unheard, order) = &mut *recent;
        unheard.insert(fingerprint);
        order.push_back(fingerprint);
        if order.len() > OWN_REMEMBERED {
            if let Some(oldest) = order.pop_front() {
                unheard.remove(&oldest);
            }
        }
    }

    /// Whether `payload` is one this process sent and has not heard back yet (it is then
    /// forgotten: the same payload again is checked as any other).
    pub(crate) fn heard(&self, payload: &str) -> bool {
        let fingerprint = self.fingerprint(payload);
        self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0.remove(&fingerprint)
    }
}

/// Checks the signature of an envelope whose signer is trusted, and reads its body.
pub(crate) fn open(signer: &PublicIdentity, envelope: &Envelope<'_>) -> Result<Announcement, Refused> {
    Trust::check_announcement(signer, envelope.body, &envelope.signature)?;
    serde_json::from_str(envelope.body).map_err(|_| Refused::Unreadable)
}

/// The last number taken from each master process, by signer and process.
#[derive(Debug, Default)]
pub(crate) struct ReplayGuard {
    last: HashMap<([u8; 32], String), (u64, u64)>,
}

impl ReplayGuard {
    /// Takes `announcement` from `signer` at `now_ms`, or says why not.
    pub(crate) fn take(
        &mut self,
        signer: &PublicIdentity,
        announcement: &Announcement,
        now_ms: u64,
    ) -> Result<(), Refused> {
        let skew = now_ms.abs_diff(announcement.at);
        if skew > FRESH_MS {
            return Err(Refused::Stale(skew));
        }
        let key = (*signer.as_bytes(), announcement.from.clone());
        if let Some(&(seq, _)) = self.last.get(&key) {
            if announcement.seq <= seq {
                return Err(Refused::Replayed { from: announcement.from.clone(), seq: announcement.seq });
            }
        }
        self.last.insert(key, (announcement.seq, announcement.at));
        // Processes not heard from within the window are forgotten: anything of theirs that
        // could come again is stale.
        if self.last.len() > 64 {
            self.last.retain(|_, (_, at)| now_ms.abs_diff(*at) <= FRESH_MS);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::identity::IdentityKey;

    use super::*;
    use crate::ClusterChange;

    fn trust(seed: u8) -> Trust {
        Trust::new(IdentityKey::from_seed(&[seed; 32]), None, "m", Vec::new())
    }

    fn body(seq: u64, at: u64) -> String {
        Announcement::payload("p1", seq, at, &ClusterChange::Cancel { jid: "j1".into() })
    }

    #[test]
    fn a_sealed_announcement_opens_with_its_signer_only() {
        let (one, two) = (trust(1), trust(2));
        let payload = seal(&one, &body(1, 5));
        let sealed = envelope(&payload).unwrap();
        assert_eq!(sealed.signer, one.public().as_bytes().to_vec());
        let opened = open(&one.public(), &sealed).unwrap();
        assert_eq!((opened.seq, opened.change), (1, ClusterChange::Cancel { jid: "j1".into() }));
        assert_eq!(open(&two.public(), &sealed).unwrap_err(), Refused::Untrusted(Untrusted::BadSignature));
        // A body changed after signing.
        let changed = payload.replace("j1", "j2");
        assert!(matches!(open(&one.public(), &envelope(&changed).unwrap()), Err(Refused::Untrusted(_))));
    }

    #[test]
    fn only_a_payload_this_process_sent_is_taken_for_its_own_and_once() {
        let own = OwnAnnouncements::default();
        let one = trust(1);
        let sent = seal(&one, &body(1, 5));
        own.sent(&sent);
        // A forgery claiming the same process (a database role knows its name): not taken.
        let forged = format!("halite1 {} {} {}", "00".repeat(32), "00".repeat(64), body(1, 5));
        assert!(!own.heard(&forged));
        assert!(own.heard(&sent));
        // The same payload again (a replay) is checked as any other.
        assert!(!own.heard(&sent));
        // Bounded: the oldest are forgotten.
        let payloads: Vec<String> = (0..OWN_REMEMBERED as u64 + 1).map(|seq| body(seq + 2, 5)).collect();
        for payload in &payloads {
            own.sent(payload);
        }
        assert!(!own.heard(&payloads[0]));
        assert!(own.heard(&payloads[1]));
        assert!(own.heard(&payloads[OWN_REMEMBERED]));
    }

    #[test]
    fn the_unsigned_form_and_garbage_are_malformed() {
        let old = r#"{"from":"x","change":"cancel","jid":"j1"}"#;
        for payload in
            [old, "", "halite1", "halite1 zz yy {}", &format!("halite1 {} {} {{}}", "ab".repeat(31), "cd".repeat(64))]
        {
            assert_eq!(envelope(payload).unwrap_err(), Refused::Malformed, "{payload}");
        }
    }

    #[test]
    fn a_sealed_announcement_fits_a_notify() {
        let big = ClusterChange::Here { ids: vec!["m".repeat(255); 20] };
        let text = Announcement::payload(&"f".repeat(16), u64::MAX, u64::MAX, &big);
        assert!(seal(&trust(1), &text).len() < 8_000);
    }

    #[test]
    fn replays_and_stale_announcements_are_refused() {
        let signer = trust(1).public();
        let mut guard = ReplayGuard::default();
        let at = |seq, at| serde_json::from_str::<Announcement>(&body(seq, at)).unwrap();
        let now = 1_000_000;
        assert_eq!(guard.take(&signer, &at(1, now), now), Ok(()));
        assert_eq!(guard.take(&signer, &at(2, now), now + 5), Ok(()));
        assert!(matches!(guard.take(&signer, &at(2, now), now + 5), Err(Refused::Replayed { seq: 2, .. })));
        assert!(matches!(guard.take(&signer, &at(1, now), now + 5), Err(Refused::Replayed { seq: 1, .. })));
        assert_eq!(guard.take(&signer, &at(3, now - FRESH_MS - 1), now), Err(Refused::Stale(FRESH_MS + 1)));
        // Another signer's numbers are its own.
        assert_eq!(guard.take(&trust(2).public(), &at(1, now), now), Ok(()));
    }
}
