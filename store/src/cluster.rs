//! What one master tells the others that share its store: changes to what every master keeps
//! in memory (accepted keys, principals, live jobs, who is connected where) so each applies them
//! at once, whichever master made them. PostgreSQL carries them with NOTIFY; a SQLite store has
//! one master and carries nothing. Every announcement is sent after what it describes is stored:
//! it says "read this", never carries data the store does not have.
//!
//! Any role that may connect to the database may NOTIFY: every announcement is signed by its
//! master's key and numbered (`cluster_seal.rs`), and one that is not from a trusted master, or
//! is replayed, is dropped before anything acts on it.

use halite_protocol::message::MinionJobState;
use serde::{Deserialize, Serialize};

/// A change another master made in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum ClusterChange {
    /// Keys of these minions changed (accepted, rejected, deleted, enrolled); `None`: any,
    /// reread them all.
    Keys {
        /// The minions.
        ids: Option<Vec<String>>,
    },
    /// This principal was added, changed or removed, or one of its gateway tokens was revoked:
    /// its sessions are checked again (and its tokens' sessions looked up in the store).
    Principal {
        /// Its name.
        name: String,
    },
    /// Changes may have been missed (the connection carrying them was lost): reread
    /// everything they cover.
    Resync,
    /// The store's own notice: the connection carrying the changes is lost, and what is
    /// announced is missed until a [`ClusterChange::Resync`] says it is back. Never announced.
    ListenerLost,
    /// A job was published: the masters its minions are connected to send it to them.
    Job {
        /// The job.
        jid: String,
    },
    /// A job was cancelled: each master stops it on the minions it serves.
    Cancel {
        /// The job.
        jid: String,
    },
    /// Where a job's rollout is changed (paused, resumed, stopped): stored, to be reread.
    Rollout {
        /// The job.
        jid: String,
    },
    /// Slots of a job moved (stored, returns included).
    Slots {
        /// The job.
        jid: String,
        /// Each minion's new state.
        states: Vec<(String, MinionJobState)>,
    },
    /// These minions are connected to the announcing master (their entries are stored).
    Here {
        /// The minions.
        ids: Vec<String>,
    },
    /// These minions left the announcing master.
    Left {
        /// The minions.
        ids: Vec<String>,
    },
    /// The announcing master is alive (sent every few seconds; a master not heard from for a
    /// while is taken as gone, with the minions it served).
    Alive,
    /// A master started (or lost track): every master announces the minions connected to it.
    RollCall,
    /// An event published on the announcing master's bus (minion events, keys, deployments),
    /// for the subscribers of every master.
    Event {
        /// Its tag.
        tag: String,
        /// Its data.
        data: serde_json::Value,
    },
    /// The same, too large to announce: stored, to be read by id.
    StoredEvent {
        /// Its row.
        id: i64,
        /// [`event_digest`] of the event: the row is taken only if it still matches (the
        /// announcement is signed, the row is not).
        digest: String,
    },
}

/// A change and the master that announced it.
#[derive(Debug, Clone)]
pub struct Heard {
    /// The announcing master's id.
    pub from: String,
    /// The key that signed the announcement (`None`: a notice of the store itself, such as
    /// [`ClusterChange::Resync`] after its connection came back). Checked again when the change
    /// is applied: a master revoked while its announcement waited is not taken at its word.
    pub signer: Option<halite_protocol::identity::PublicIdentity>,
    /// What it announced.
    pub change: ClusterChange,
}

impl Heard {
    /// A change no master signed: the store's own notice (or a test's).
    pub fn new(from: String, change: ClusterChange) -> Self {
        Heard { from, signer: None, change }
    }
}

/// The NOTIFY channel every master of a cluster listens on.
pub(crate) const CHANNEL: &str = "halite_cluster";

/// Payloads stay well below PostgreSQL's 8,000-byte NOTIFY limit: a change naming more
/// minions than fit is sent as "reread them all" (keys), or split by the master (lists of
/// minions and slots, [`ClusterChange::split`]).
pub(crate) const MAX_PAYLOAD: usize = 7_000;

/// A change on the wire, with the master that made it (so it ignores its own), its number
/// among that master's announcements and when it was sent (so a replay is told apart).
#[derive(Debug, Serialize, Deserialize)]
pub struct Announcement {
    pub(crate) from: String,
    pub(crate) seq: u64,
    pub(crate) at: u64,
    #[serde(flatten)]
    pub(crate) change: ClusterChange,
}

/// What a stored event's announcement carries to check the row against: SHA-256 of its tag
/// and its data as stored (JSON text), hex.
pub fn event_digest(tag: &str, data_json: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update((tag.len() as u64).to_be_bytes());
    hash.update(tag.as_bytes());
    hash.update(data_json.as_bytes());
    halite_protocol::hex::encode(&hash.finalize())
}

impl ClusterChange {
    /// Lists of minions or slots cut into changes that each fit one announcement.
    pub fn split(self) -> Vec<ClusterChange> {
        /// Ids are at most 255 bytes; slots add a state name.
        const PER_CHANGE: usize = 20;
        match self {
            ClusterChange::Here { ids } => {
                ids.chunks(PER_CHANGE).map(|c| ClusterChange::Here { ids: c.to_vec() }).collect()
            }
            ClusterChange::Left { ids } => {
                ids.chunks(PER_CHANGE).map(|c| ClusterChange::Left { ids: c.to_vec() }).collect()
            }
            ClusterChange::Slots { jid, states } => states
                .chunks(PER_CHANGE)
                .map(|c| ClusterChange::Slots { jid: jid.clone(), states: c.to_vec() })
                .collect(),
            other => vec![other],
        }
    }
}

impl Announcement {
    fn text(from: &str, seq: u64, at: u64, change: ClusterChange) -> String {
        serde_json::to_string(&Announcement { from: from.to_owned(), seq, at, change }).unwrap_or_default()
    }

    /// Whether `change` fits one announcement as it is (whatever its number and time).
    pub fn fits(from: &str, change: &ClusterChange) -> bool {
        Self::text(from, u64::MAX, u64::MAX, change.clone()).len() <= MAX_PAYLOAD
    }

    /// The body for NOTIFY (signed and sent by `cluster_seal`), shortened to fit.
    pub fn payload(from: &str, seq: u64, at: u64, change: &ClusterChange) -> String {
        let text = Self::text(from, seq, at, change.clone());
        if text.len() <= MAX_PAYLOAD {
            return text;
        }
        let all = match change {
            ClusterChange::Keys { .. } => ClusterChange::Keys { ids: None },
            _ => ClusterChange::Resync,
        };
        Self::text(from, seq, at, all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_fit_a_notify_and_read_back() {
        let change = ClusterChange::Keys { ids: Some(vec!["web1".into()]) };
        let text = Announcement::payload("m1", 7, 1_000, &change);
        let back: Announcement = serde_json::from_str(&text).unwrap();
        assert_eq!((back.from.as_str(), back.seq, back.at, back.change), ("m1", 7, 1_000, change));
        let many = ClusterChange::Keys { ids: Some((0..2_000).map(|n| format!("web{n}")).collect()) };
        let text = Announcement::payload("m1", u64::MAX, u64::MAX, &many);
        assert!(text.len() <= MAX_PAYLOAD);
        assert_eq!(serde_json::from_str::<Announcement>(&text).unwrap().change, ClusterChange::Keys { ids: None });
    }

    #[test]
    fn lists_split_into_announcements_that_each_fit() {
        let id = "m".repeat(255);
        let here = ClusterChange::Here { ids: vec![id.clone(); 101] }.split();
        assert_eq!(here.len(), 6);
        let slots = ClusterChange::Slots {
            jid: "20261122000000000001".into(),
            states: vec![(id, MinionJobState::Returned); 45],
        }
        .split();
        assert_eq!(slots.len(), 3);
        for change in here.iter().chain(&slots) {
            let text = Announcement::payload(&"f".repeat(16), u64::MAX, u64::MAX, change);
            assert!(text.len() <= MAX_PAYLOAD, "{}", text.len());
            assert_eq!(&serde_json::from_str::<Announcement>(&text).unwrap().change, change, "not shortened");
        }
    }
}
