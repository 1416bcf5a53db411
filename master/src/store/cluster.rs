//! What one master tells the others that share its store: changes to what every master keeps
//! in memory (accepted keys, principals) so each applies them at once, whichever master made
//! them. PostgreSQL carries them with NOTIFY; a SQLite store has one master and carries nothing.

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
    /// This principal was added, changed or removed.
    Principal {
        /// Its name.
        name: String,
    },
    /// Changes may have been missed (the connection carrying them was lost): reread
    /// everything they cover.
    Resync,
}

/// The NOTIFY channel every master of a cluster listens on.
pub(crate) const CHANNEL: &str = "halite_cluster";

/// Payloads stay well below PostgreSQL's 8,000-byte NOTIFY limit: a change naming more
/// minions than fit is sent as "reread them all".
pub(crate) const MAX_PAYLOAD: usize = 7_000;

/// A change on the wire, with the master that made it (so it ignores its own).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Announcement {
    pub(crate) from: String,
    #[serde(flatten)]
    pub(crate) change: ClusterChange,
}

impl Announcement {
    /// The payload for NOTIFY, shortened to fit.
    pub(crate) fn payload(from: &str, change: &ClusterChange) -> String {
        let text =
            serde_json::to_string(&Announcement { from: from.to_owned(), change: change.clone() }).unwrap_or_default();
        if text.len() <= MAX_PAYLOAD {
            return text;
        }
        let all = match change {
            ClusterChange::Keys { .. } => ClusterChange::Keys { ids: None },
            _ => ClusterChange::Resync,
        };
        serde_json::to_string(&Announcement { from: from.to_owned(), change: all }).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_fit_a_notify_and_read_back() {
        let change = ClusterChange::Keys { ids: Some(vec!["web1".into()]) };
        let text = Announcement::payload("m1", &change);
        let back: Announcement = serde_json::from_str(&text).unwrap();
        assert_eq!((back.from.as_str(), back.change), ("m1", change));
        let many = ClusterChange::Keys { ids: Some((0..2_000).map(|n| format!("web{n}")).collect()) };
        let text = Announcement::payload("m1", &many);
        assert!(text.len() <= MAX_PAYLOAD);
        assert_eq!(serde_json::from_str::<Announcement>(&text).unwrap().change, ClusterChange::Keys { ids: None });
    }
}
