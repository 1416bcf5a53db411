//! The store calls of the key registry's rules (`keys.rs`), made in the order the rules ask for
//! them, and the read behind a token's problem.

use crate::keys::{self, Decision, KeyAnswer, KeyCall, KeyRules, PendingLimits, Step};
use crate::store::{Store, StoreError};

/// Decides minion `id`'s `public_key` (presented with `token` or not) by the registry's rules,
/// making the store calls they ask for; `now_ms` (wall) stamps what they write, `now` spends
/// the new keys' allowance.
pub(crate) async fn decide<S: Store>(
    store: &S,
    id: &str,
    public_key: &[u8; 32],
    token: Option<&str>,
    (now_ms, now): (u64, std::time::Instant),
    limits: &mut PendingLimits,
) -> Result<Decision, StoreError> {
    let mut rules = KeyRules::new(id, *public_key, token.is_some());
    loop {
        let call = match rules.step(now, limits) {
            Step::Decided(decision) => return Ok(decision),
            Step::Call(call) => call,
        };
        let answer = match call {
            KeyCall::KeysOf => KeyAnswer::Keys(store.keys_for(id).await?),
            KeyCall::Enroll => {
                let hash = keys::token_hash(token.unwrap_or_default());
                KeyAnswer::Enrolled(store.enroll_with_token(&hash, id, public_key, now_ms).await?)
            }
            KeyCall::TokenOutstanding => KeyAnswer::Outstanding(store.token_outstanding(id, now_ms).await?),
            KeyCall::PendingCount => KeyAnswer::Pending(store.pending_key_count().await?),
            KeyCall::Put(state) => {
                store.put_key(&rules.record(state), now_ms).await?;
                KeyAnswer::Put(state)
            }
        };
        rules.answered(answer);
    }
}

/// Why `token` did not enroll minion `id`, read from the store (`keys::token_problem`).
pub(crate) async fn token_problem<S: Store>(
    store: &S,
    token: &str,
    id: &str,
    now_ms: u64,
) -> Result<Option<String>, StoreError> {
    Ok(keys::token_problem(store.token(&keys::token_hash(token)).await?, id, now_ms))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use halite_protocol::message::KeyState;

    use super::*;
    use crate::keys::{token_hash, KeyRules, PendingLimits};
    use crate::store::{KeyRecord, SqliteStore, Store, TokenUse};

    fn at(ms: u64) -> (u64, Instant) {
        (ms, Instant::now())
    }

    fn limits() -> PendingLimits {
        PendingLimits::new(100, 1000.0, 1000.0, Instant::now())
    }

    #[test]
    fn a_token_that_did_not_enroll_says_why() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            store.create_token(&token_hash("t-web2"), "web2", 100, false, "root").await.unwrap();
            let problem = |token: &'static str, id: &'static str, now| {
                let store = &store;
                async move { token_problem(store, token, id, now).await.unwrap().unwrap_or_default() }
            };
            assert!(problem("nope", "web2", 1).await.contains("not known to this master"));
            assert!(problem("t-web2", "web3", 1).await.contains("bound to another minion id (web2)"));
            assert!(problem("t-web2", "web2", 100).await.contains("expired at 1970-01-01T00:00:00Z"));
            assert_eq!(problem("t-web2", "web2", 50).await, "", "valid: not the reason");
            let used = store.enroll_with_token(&token_hash("t-web2"), "web2", &[1; 32], 50).await.unwrap();
            assert_eq!(used, TokenUse::Enrolled { replaced: false });
            assert!(problem("t-web2", "web2", 50).await.contains("already used"));
        });
    }

    #[test]
    fn registry_rules() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            assert_eq!(decide(&store, "web1", &[1; 32], None, at(1), &mut limits()).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web1", &[1; 32], None, at(2), &mut limits()).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "web1", &[2; 32], None, at(3), &mut limits()).await.unwrap(), Decision::Denied);
            store
                .put_key(&KeyRecord { id: "web1".into(), public_key: [1; 32], state: KeyState::Accepted }, 4)
                .await
                .unwrap();
            assert_eq!(decide(&store, "web1", &[1; 32], None, at(5), &mut limits()).await.unwrap(), Decision::Accept);
            assert_eq!(decide(&store, "web1", &[2; 32], None, at(6), &mut limits()).await.unwrap(), Decision::Denied);

            store.create_token(&token_hash("secret"), "web2", 100, false, "root").await.unwrap();
            // A token for another id counts as none: web3 is held pending.
            assert_eq!(
                decide(&store, "web3", &[3; 32], Some("secret"), at(7), &mut limits()).await.unwrap(),
                Decision::Pending
            );
            assert!(matches!(
                decide(&store, "web2", &[4; 32], Some("wrong"), at(8), &mut limits()).await.unwrap(),
                Decision::Reject(_)
            ));
            assert_eq!(
                decide(&store, "web2", &[4; 32], Some("secret"), at(9), &mut limits()).await.unwrap(),
                Decision::Accept
            );
            // The token is burnt: another key cannot use it, and web2's key is now the accepted one.
            assert_eq!(
                decide(&store, "web2", &[5; 32], Some("secret"), at(10), &mut limits()).await.unwrap(),
                Decision::Denied
            );
            assert_eq!(decide(&store, "web2", &[5; 32], None, at(10), &mut limits()).await.unwrap(), Decision::Denied);
            assert_eq!(decide(&store, "web2", &[4; 32], None, at(11), &mut limits()).await.unwrap(), Decision::Accept);
        });
    }

    #[test]
    fn a_token_bound_id_cannot_be_taken_by_connecting_first() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            store.create_token(&token_hash("secret"), "db1", 1000, false, "root").await.unwrap();
            // The squatter, without a token: refused, and nothing is recorded.
            assert!(matches!(
                decide(&store, "db1", &[6; 32], None, at(1), &mut limits()).await.unwrap(),
                Decision::Reject(_)
            ));
            assert!(store.keys_for("db1").await.unwrap().is_empty());
            // The token holder enrolls.
            assert_eq!(
                decide(&store, "db1", &[7; 32], Some("secret"), at(2), &mut limits()).await.unwrap(),
                Decision::Accept
            );
            // Once the token is used, an unknown key is denied as usual.
            assert_eq!(decide(&store, "db1", &[6; 32], None, at(3), &mut limits()).await.unwrap(), Decision::Denied);
            // A key that went pending before a token was issued loses to the token holder.
            store
                .put_key(&KeyRecord { id: "db2".into(), public_key: [8; 32], state: KeyState::Pending }, 4)
                .await
                .unwrap();
            store.create_token(&token_hash("t2"), "db2", 1000, false, "root").await.unwrap();
            assert_eq!(
                decide(&store, "db2", &[9; 32], Some("t2"), at(5), &mut limits()).await.unwrap(),
                Decision::Accept
            );
            let keys = store.keys_for("db2").await.unwrap();
            assert!(keys.iter().any(|k| k.public_key == [8; 32] && k.state == KeyState::Denied), "{keys:?}");
        });
    }

    #[test]
    fn a_token_does_not_take_an_accepted_identity_over_unless_made_to_replace() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            let accepted = |id: &str, key| KeyRecord { id: id.into(), public_key: key, state: KeyState::Accepted };
            // A token made before the real key was accepted: used afterwards, it is refused.
            store.create_token(&token_hash("stale"), "web1", 1000, false, "root").await.unwrap();
            store.put_key(&accepted("web1", [1; 32]), 1).await.unwrap();
            assert_eq!(
                decide(&store, "web1", &[2; 32], Some("stale"), at(2), &mut limits()).await.unwrap(),
                Decision::Denied
            );
            let keys = store.keys_for("web1").await.unwrap();
            assert!(keys.iter().any(|k| k.public_key == [1; 32] && k.state == KeyState::Accepted), "{keys:?}");
            assert!(keys.iter().any(|k| k.public_key == [2; 32] && k.state == KeyState::Denied), "{keys:?}");
            assert!(store.token(&token_hash("stale")).await.unwrap().unwrap().used, "used up");
            assert_eq!(decide(&store, "web1", &[1; 32], None, at(3), &mut limits()).await.unwrap(), Decision::Accept);
            // A token made to replace: the new key is accepted, the old one denied.
            store.create_token(&token_hash("swap"), "web1", 1000, true, "root").await.unwrap();
            assert_eq!(
                decide(&store, "web1", &[3; 32], Some("swap"), at(4), &mut limits()).await.unwrap(),
                Decision::Replaced
            );
            assert_eq!(decide(&store, "web1", &[1; 32], None, at(5), &mut limits()).await.unwrap(), Decision::Denied);
            assert_eq!(decide(&store, "web1", &[3; 32], None, at(5), &mut limits()).await.unwrap(), Decision::Accept);
            // A replacing token for an id with no accepted key simply enrolls.
            store.create_token(&token_hash("fresh"), "web9", 1000, true, "root").await.unwrap();
            assert_eq!(
                decide(&store, "web9", &[4; 32], Some("fresh"), at(6), &mut limits()).await.unwrap(),
                Decision::Accept
            );
        });
    }

    #[test]
    fn pending_keys_are_capped() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            let mut capped = PendingLimits::new(2, 1000.0, 1000.0, Instant::now());
            let limits = &mut capped;
            assert_eq!(decide(&store, "a", &[1; 32], None, at(1), limits).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "b", &[2; 32], None, at(1), limits).await.unwrap(), Decision::Pending);
            assert!(matches!(decide(&store, "c", &[3; 32], None, at(1), limits).await.unwrap(), Decision::Busy(_)));
            // A key already pending is still answered as pending.
            assert_eq!(decide(&store, "a", &[1; 32], None, at(2), limits).await.unwrap(), Decision::Pending);
        });
    }

    #[test]
    fn new_pending_keys_are_rate_limited() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
            let store = SqliteStore::in_memory().await.unwrap();
            let start = Instant::now();
            let mut limits = PendingLimits::new(100, 1.0, 2.0, start);
            let at = |secs| (1, start + std::time::Duration::from_secs(secs));
            assert_eq!(decide(&store, "a", &[1; 32], None, at(0), &mut limits).await.unwrap(), Decision::Pending);
            assert_eq!(decide(&store, "b", &[2; 32], None, at(0), &mut limits).await.unwrap(), Decision::Pending);
            let busy = decide(&store, "c", &[3; 32], None, at(0), &mut limits).await.unwrap();
            assert!(matches!(&busy, Decision::Busy(reason) if reason.contains("arriving")), "{busy:?}");
            assert!(store.keys_for("c").await.unwrap().is_empty(), "a refused key is not recorded");
            // Keys already known are answered without spending the allowance.
            assert_eq!(decide(&store, "a", &[1; 32], None, at(0), &mut limits).await.unwrap(), Decision::Pending);
            // A second later there is room for one more.
            assert_eq!(decide(&store, "c", &[3; 32], None, at(1), &mut limits).await.unwrap(), Decision::Pending);
        });
    }

    /// The rules ask for the calls they need, in order, and no more: an accepted key costs one
    /// read; a new key is counted, spends the allowance once and is recorded before it is
    /// called pending.
    #[test]
    fn the_rules_ask_only_for_the_calls_they_need_in_order() {
        let now = Instant::now();
        let key = |state| KeyRecord { id: "web1".into(), public_key: [1; 32], state };
        let mut limits = PendingLimits::new(10, 1.0, 1.0, now);

        let mut accepted = KeyRules::new("web1", [1; 32], true);
        assert_eq!(accepted.step(now, &mut limits), Step::Call(KeyCall::KeysOf));
        accepted.answered(KeyAnswer::Keys(vec![key(KeyState::Accepted)]));
        assert_eq!(accepted.step(now, &mut limits), Step::Decided(Decision::Accept), "no token tried, nothing counted");

        let mut new = KeyRules::new("web2", [2; 32], false);
        let mut calls = Vec::new();
        let decided = loop {
            match new.step(now, &mut limits) {
                Step::Decided(decision) => break decision,
                Step::Call(call) => {
                    calls.push(call);
                    new.answered(match call {
                        KeyCall::KeysOf => KeyAnswer::Keys(Vec::new()),
                        KeyCall::TokenOutstanding => KeyAnswer::Outstanding(false),
                        KeyCall::PendingCount => KeyAnswer::Pending(3),
                        KeyCall::Put(state) => KeyAnswer::Put(state),
                        KeyCall::Enroll => unreachable!("no token was presented"),
                    });
                }
            }
        };
        assert_eq!(decided, Decision::Pending);
        assert_eq!(
            calls,
            [KeyCall::KeysOf, KeyCall::TokenOutstanding, KeyCall::PendingCount, KeyCall::Put(KeyState::Pending)]
        );
        // The burst of one was spent by that key alone: the next new key now is busy.
        let mut next = KeyRules::new("web3", [3; 32], false);
        next.answered(KeyAnswer::Keys(Vec::new()));
        next.answered(KeyAnswer::Outstanding(false));
        next.answered(KeyAnswer::Pending(4));
        assert!(matches!(next.step(now, &mut limits), Step::Decided(Decision::Busy(_))));
    }
}
