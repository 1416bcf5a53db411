//! Deciding whether a minion that completed the handshake may stay: the key registry's rules.

use halite_protocol::message::KeyState;
use sha2::{Digest, Sha256};

use crate::store::{KeyRecord, Store, StoreError};

/// The master's decision about an authenticated minion key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The key is accepted: start a session.
    Accept,
    /// The key is recorded as pending: tell the minion to retry later.
    Pending,
    /// Refused, with the reason the minion is told.
    Reject(String),
    /// A different key for a known id: recorded as denied and refused.
    Denied,
}

/// Hash under which a token is stored: tokens themselves are never written to disk.
pub(crate) fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Applies the registry rules to minion `id` presenting `public_key` and maybe a token:
///
/// - the id's accepted key → accept; its rejected key → reject; its pending key → pending,
///   unless a valid token promotes it;
/// - a different key while the id has a non-denied key → recorded as denied;
/// - an unknown id → accepted if a valid token bound to it is presented (the token burns),
///   else recorded as pending.
pub(crate) async fn decide<S: Store>(
    store: &S,
    id: &str,
    public_key: &[u8; 32],
    token: Option<&str>,
    now_ms: u64,
) -> Result<Decision, StoreError> {
    let keys = store.keys_for(id).await?;
    let same = keys.iter().find(|k| &k.public_key == public_key);
    let other_live = keys.iter().any(|k| &k.public_key != public_key && k.state != KeyState::Denied);
    let record = |state| KeyRecord { id: id.to_owned(), public_key: *public_key, state };
    match same.map(|k| k.state) {
        Some(KeyState::Accepted) => Ok(Decision::Accept),
        Some(KeyState::Rejected) => Ok(Decision::Reject("key rejected by the master".into())),
        Some(KeyState::Denied) => Ok(Decision::Denied),
        Some(KeyState::Pending) | None if other_live => {
            store.put_key(&record(KeyState::Denied), now_ms).await?;
            Ok(Decision::Denied)
        }
        Some(KeyState::Pending) | None => {
            let enrolled = match token {
                Some(token) => store.burn_token(&token_hash(token), id, now_ms).await?,
                None => false,
            };
            let state = if enrolled { KeyState::Accepted } else { KeyState::Pending };
            store.put_key(&record(state), now_ms).await?;
            Ok(if enrolled { Decision::Accept } else { Decision::Pending })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

    #[test]
    fn registry_rules() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            assert_eq!(decide(&store, "web1", &[1; 32], None, 1).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web1", &[1; 32], None, 2).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web1", &[2; 32], None, 3).await.unwrap(), Decision::Denied);
            store
                .put_key(&KeyRecord { id: "web1".into(), public_key: [1; 32], state: KeyState::Accepted }, 4)
                .await
                .unwrap();
            assert_eq!(decide(&store, "web1", &[1; 32], None, 5).await.unwrap(), Decision::Accept);
            assert_eq!(decide(&store, "web1", &[2; 32], None, 6).await.unwrap(), Decision::Denied);

            store.create_token(&token_hash("secret"), "web2", 100).await.unwrap();
            assert_eq!(decide(&store, "web3", &[3; 32], Some("secret"), 7).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web2", &[4; 32], Some("wrong"), 8).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web2", &[4; 32], Some("secret"), 9).await.unwrap(), Decision::Accept);
            // The token is burnt: another key cannot use it, and web2's key is now the accepted one.
            assert_eq!(decide(&store, "web2", &[5; 32], Some("secret"), 10).await.unwrap(), Decision::Denied);
            assert_eq!(decide(&store, "web2", &[4; 32], None, 11).await.unwrap(), Decision::Accept);
        });
    }
}
