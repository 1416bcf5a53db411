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

/// Limits on keys recorded as pending, so unauthenticated peers cannot fill the registry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingLimits {
    /// Most pending keys at once.
    pub(crate) max: u64,
}

/// Applies the registry rules to minion `id` presenting `public_key` and maybe a token:
///
/// - a token that is valid for the id enrolls this key (one transaction: the token burns, the
///   key is accepted, any other key for the id is denied): the token holder always enrolls;
/// - a token that is not valid (unknown, expired, used, bound to another id) counts as none;
/// - the id's accepted key → accept; its rejected key → reject; its denied key → denied;
/// - an id with an unused token outstanding refuses keys without a token, and records nothing,
///   so nobody can take a token-bound id by connecting first;
/// - a different key while the id has a non-denied key → recorded as denied;
/// - otherwise → recorded as pending, unless too many keys are pending already.
pub(crate) async fn decide<S: Store>(
    store: &S,
    id: &str,
    public_key: &[u8; 32],
    token: Option<&str>,
    now_ms: u64,
    limits: PendingLimits,
) -> Result<Decision, StoreError> {
    let keys = store.keys_for(id).await?;
    let same = keys.iter().find(|k| &k.public_key == public_key).map(|k| k.state);
    if let Some(token) = token.filter(|_| same != Some(KeyState::Accepted)) {
        if store.enroll_with_token(&token_hash(token), id, public_key, now_ms).await? {
            return Ok(Decision::Accept);
        }
        // A used, expired or foreign token counts as none (a minion keeps its token in its
        // enrollment file after enrolling): the rules below apply.
    }
    let other_live = keys.iter().any(|k| &k.public_key != public_key && k.state != KeyState::Denied);
    let record = |state| KeyRecord { id: id.to_owned(), public_key: *public_key, state };
    match same {
        Some(KeyState::Accepted) => Ok(Decision::Accept),
        Some(KeyState::Rejected) => Ok(Decision::Reject("key rejected by the master".into())),
        Some(KeyState::Denied) => Ok(Decision::Denied),
        _ if store.token_outstanding(id, now_ms).await? => {
            Ok(Decision::Reject(format!("{id} enrolls with its enrollment token; this key came without one")))
        }
        Some(KeyState::Pending) | None if other_live => {
            store.put_key(&record(KeyState::Denied), now_ms).await?;
            Ok(Decision::Denied)
        }
        Some(KeyState::Pending) => Ok(Decision::Pending),
        None => {
            if store.pending_key_count().await? >= limits.max {
                return Ok(Decision::Reject("too many keys are pending acceptance; try again later".into()));
            }
            store.put_key(&record(KeyState::Pending), now_ms).await?;
            Ok(Decision::Pending)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

    const LIMITS: PendingLimits = PendingLimits { max: 100 };

    #[test]
    fn registry_rules() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            assert_eq!(decide(&store, "web1", &[1; 32], None, 1, LIMITS).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web1", &[1; 32], None, 2, LIMITS).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web1", &[2; 32], None, 3, LIMITS).await.unwrap(), Decision::Denied);
            store
                .put_key(&KeyRecord { id: "web1".into(), public_key: [1; 32], state: KeyState::Accepted }, 4)
                .await
                .unwrap();
            assert_eq!(decide(&store, "web1", &[1; 32], None, 5, LIMITS).await.unwrap(), Decision::Accept);
            assert_eq!(decide(&store, "web1", &[2; 32], None, 6, LIMITS).await.unwrap(), Decision::Denied);

            store.create_token(&token_hash("secret"), "web2", 100).await.unwrap();
            // A token for another id counts as none: web3 is held pending.
            assert_eq!(decide(&store, "web3", &[3; 32], Some("secret"), 7, LIMITS).await.unwrap(), Decision::Pending);
            assert!(matches!(
                decide(&store, "web2", &[4; 32], Some("wrong"), 8, LIMITS).await.unwrap(),
                Decision::Reject(_)
            ));
            assert_eq!(decide(&store, "web2", &[4; 32], Some("secret"), 9, LIMITS).await.unwrap(), Decision::Accept);
            // The token is burnt: another key cannot use it, and web2's key is now the accepted one.
            assert_eq!(decide(&store, "web2", &[5; 32], Some("secret"), 10, LIMITS).await.unwrap(), Decision::Denied);
            assert_eq!(decide(&store, "web2", &[5; 32], None, 10, LIMITS).await.unwrap(), Decision::Denied);
            assert_eq!(decide(&store, "web2", &[4; 32], None, 11, LIMITS).await.unwrap(), Decision::Accept);
        });
    }

    #[test]
    fn a_token_bound_id_cannot_be_taken_by_connecting_first() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            store.create_token(&token_hash("secret"), "db1", 1000).await.unwrap();
            // The squatter, without a token: refused, and nothing is recorded.
            assert!(matches!(decide(&store, "db1", &[6; 32], None, 1, LIMITS).await.unwrap(), Decision::Reject(_)));
            assert!(store.keys_for("db1").await.unwrap().is_empty());
            // The token holder enrolls.
            assert_eq!(decide(&store, "db1", &[7; 32], Some("secret"), 2, LIMITS).await.unwrap(), Decision::Accept);
            // Once the token is used, an unknown key is denied as usual.
            assert_eq!(decide(&store, "db1", &[6; 32], None, 3, LIMITS).await.unwrap(), Decision::Denied);
            // A key that went pending before a token was issued loses to the token holder.
            store
                .put_key(&KeyRecord { id: "db2".into(), public_key: [8; 32], state: KeyState::Pending }, 4)
                .await
                .unwrap();
            store.create_token(&token_hash("t2"), "db2", 1000).await.unwrap();
            assert_eq!(decide(&store, "db2", &[9; 32], Some("t2"), 5, LIMITS).await.unwrap(), Decision::Accept);
            let keys = store.keys_for("db2").await.unwrap();
            assert!(keys.iter().any(|k| k.public_key == [8; 32] && k.state == KeyState::Denied), "{keys:?}");
        });
    }

    #[test]
    fn pending_keys_are_capped() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            let limits = PendingLimits { max: 2 };
            assert_eq!(decide(&store, "a", &[1; 32], None, 1, limits).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "b", &[2; 32], None, 1, limits).await.unwrap(), Decision::Pending);
            assert!(matches!(decide(&store, "c", &[3; 32], None, 1, limits).await.unwrap(), Decision::Reject(_)));
            // A key already pending is still answered as pending.
            assert_eq!(decide(&store, "a", &[1; 32], None, 2, limits).await.unwrap(), Decision::Pending);
        });
    }
}
