//! Deciding whether a minion that completed the handshake may stay: the key registry's rules,
//! as a machine the loop drives with the store calls it asks for (`store_calls/keys.rs`).

use std::time::Instant;

use halite_protocol::message::KeyState;
use sha2::{Digest, Sha256};

use crate::acl::RateLimiter;
use crate::store::{KeyRecord, TokenRecord, TokenUse};

/// The master's decision about an authenticated minion key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The key is accepted: start a session.
    Accept,
    /// A token made with `--replace` enrolled this key in place of the id's accepted one.
    Replaced,
    /// The key is recorded as pending: tell the minion to retry later.
    Pending,
    /// Refused, with the reason the minion is told.
    Reject(String),
    /// Not recorded because too many unknown keys are pending or arriving: the minion is told
    /// to try again later.
    Busy(String),
    /// A different key for a known id: recorded as denied and refused.
    Denied,
}

/// Hash under which a token is stored: tokens themselves are never written to disk.
pub(crate) fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Limits on keys recorded as pending, so unauthenticated peers cannot fill the registry: a cap
/// on how many are pending, and a rate at which new ones are recorded.
#[derive(Debug)]
pub(crate) struct PendingLimits {
    max: u64,
    per_sec: f64,
    burst: f64,
    bucket: RateLimiter,
}

impl PendingLimits {
    pub(crate) fn new(max: u64, per_sec: f64, burst: f64, now: Instant) -> Self {
        PendingLimits { max, per_sec, burst, bucket: RateLimiter::new(burst, now) }
    }

    /// Whether one more new key may be recorded now (spends the allowance if so).
    fn admit_new(&mut self, now: Instant) -> bool {
        self.bucket.allow(self.per_sec, self.burst, now)
    }
}

/// A store call the rules need before they can go on; the loop makes it
/// (`store_calls/keys.rs`) and gives back its answer ([`KeyRules::answered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyCall {
    /// Every key recorded for the id.
    KeysOf,
    /// Enroll the key with its token, in one transaction (the token burns).
    Enroll,
    /// Whether an unused token is outstanding for the id.
    TokenOutstanding,
    /// How many keys are pending.
    PendingCount,
    /// Record the key in this state.
    Put(KeyState),
}

/// What a [`KeyCall`] answered.
#[derive(Debug)]
pub(crate) enum KeyAnswer {
    /// The id's keys.
    Keys(Vec<KeyRecord>),
    /// What the token did.
    Enrolled(TokenUse),
    /// Whether a token is outstanding for the id.
    Outstanding(bool),
    /// How many keys are pending.
    Pending(u64),
    /// The key is recorded in this state.
    Put(KeyState),
}

/// What the rules say next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Make this store call, then ask again.
    Call(KeyCall),
    /// Decided.
    Decided(Decision),
}

/// The registry's rules for minion `id` presenting `public_key` and maybe a token, as a
/// machine the loop drives: each [`KeyRules::step`] asks for one store call or decides, and
/// nothing here reads, writes or waits. The calls come in the order the rules need them, and
/// only those they need (an accepted key costs one read):
///
/// - a token that is valid for the id enrolls this key (one transaction: the token burns, the
///   key is accepted, any other key for the id is denied), unless the id already has an
///   accepted key: then only a token an administrator made with `--replace` enrolls (and
///   replaces it); any other is used up and this key is denied, the accepted key stays;
/// - a token that is not valid (unknown, expired, used, bound to another id) counts as none;
/// - the id's accepted key → accept; its rejected key → reject; its denied key → denied;
/// - an id with an unused token outstanding refuses keys without a token, and records nothing,
///   so nobody can take a token-bound id by connecting first;
/// - a different key while the id has a non-denied key → recorded as denied;
/// - otherwise → recorded as pending, unless too many keys are pending already or new keys
///   arrive faster than the allowed rate (then busy: try again later).
#[derive(Debug)]
pub(crate) struct KeyRules {
    id: String,
    public_key: [u8; 32],
    has_token: bool,
    keys: Option<Vec<KeyRecord>>,
    enrolled: Option<TokenUse>,
    outstanding: Option<bool>,
    pending: Option<u64>,
    put: Option<KeyState>,
}

impl KeyRules {
    /// The rules for `id`'s `public_key`, presented with a token or not.
    pub(crate) fn new(id: &str, public_key: [u8; 32], has_token: bool) -> Self {
        KeyRules {
            id: id.to_owned(),
            public_key,
            has_token,
            keys: None,
            enrolled: None,
            outstanding: None,
            pending: None,
            put: None,
        }
    }

    /// The record a [`KeyCall::Put`] writes.
    pub(crate) fn record(&self, state: KeyState) -> KeyRecord {
        KeyRecord { id: self.id.clone(), public_key: self.public_key, state }
    }

    /// Takes a call's answer.
    pub(crate) fn answered(&mut self, answer: KeyAnswer) {
        match answer {
            KeyAnswer::Keys(keys) => self.keys = Some(keys),
            KeyAnswer::Enrolled(used) => self.enrolled = Some(used),
            KeyAnswer::Outstanding(outstanding) => self.outstanding = Some(outstanding),
            KeyAnswer::Pending(count) => self.pending = Some(count),
            KeyAnswer::Put(state) => self.put = Some(state),
        }
    }

    /// The next call the rules need, or the decision, at `now` (a new key spends the
    /// allowance of `limits` once, just before it is recorded).
    pub(crate) fn step(&self, now: Instant, limits: &mut PendingLimits) -> Step {
        let Some(keys) = &self.keys else { return Step::Call(KeyCall::KeysOf) };
        let same = keys.iter().find(|k| k.public_key == self.public_key).map(|k| k.state);
        if self.has_token && same != Some(KeyState::Accepted) {
            match self.enrolled {
                None => return Step::Call(KeyCall::Enroll),
                Some(TokenUse::Enrolled { replaced: false }) => return Step::Decided(Decision::Accept),
                Some(TokenUse::Enrolled { replaced: true }) => return Step::Decided(Decision::Replaced),
                Some(TokenUse::Refused) => return Step::Decided(Decision::Denied),
                // A used, expired or foreign token counts as none (a minion keeps its token in
                // its enrollment file after enrolling): the rules below apply.
                Some(TokenUse::Invalid) => {}
            }
        }
        match same {
            Some(KeyState::Accepted) => return Step::Decided(Decision::Accept),
            Some(KeyState::Rejected) => return Step::Decided(Decision::Reject("key rejected by the master".into())),
            Some(KeyState::Denied) => return Step::Decided(Decision::Denied),
            Some(KeyState::Pending) | None => {}
        }
        match self.outstanding {
            None => return Step::Call(KeyCall::TokenOutstanding),
            Some(true) => {
                let id = &self.id;
                return Step::Decided(Decision::Reject(format!(
                    "{id} enrolls with its enrollment token; this key came without one"
                )));
            }
            Some(false) => {}
        }
        let other_live = keys.iter().any(|k| k.public_key != self.public_key && k.state != KeyState::Denied);
        if other_live {
            return match self.put {
                Some(KeyState::Denied) => Step::Decided(Decision::Denied),
                _ => Step::Call(KeyCall::Put(KeyState::Denied)),
            };
        }
        if same == Some(KeyState::Pending) || self.put == Some(KeyState::Pending) {
            return Step::Decided(Decision::Pending);
        }
        let Some(pending) = self.pending else { return Step::Call(KeyCall::PendingCount) };
        if pending >= limits.max {
            return Step::Decided(Decision::Busy("too many keys are pending acceptance; try again later".into()));
        }
        if !limits.admit_new(now) {
            return Step::Decided(Decision::Busy("too many new keys are arriving; try again later".into()));
        }
        Step::Call(KeyCall::Put(KeyState::Pending))
    }
}

/// Why a token a minion presented for `id` did not enroll it (`record`: the token as stored,
/// if it is), in words for the minion's log; `None` when it is valid: then it is not why the
/// key waits.
pub(crate) fn token_problem(record: Option<TokenRecord>, id: &str, now_ms: u64) -> Option<String> {
    let Some(record) = record else {
        return Some("its enrollment token is not known to this master (mistyped, or made by another)".into());
    };
    if record.minion != id {
        Some(format!("its enrollment token is bound to another minion id ({})", record.minion))
    } else if record.used {
        Some("its enrollment token was already used".into())
    } else if record.expires_at_ms <= now_ms {
        let at = halite_protocol::time::iso8601_utc(record.expires_at_ms);
        Some(format!("its enrollment token expired at {at}; create a new one (halite key token create)"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SqliteStore, Store};
    use crate::store_calls::keys::{decide, token_problem};

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
