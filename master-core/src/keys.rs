//! Deciding whether a minion that completed the handshake may stay: the key registry's rules,
//! as a machine the loop drives with the store calls it asks for (`store_calls/keys.rs`).

use std::time::Instant;

use halite_protocol::message::KeyState;
use sha2::{Digest, Sha256};

use crate::acl::RateLimiter;
use crate::store::{KeyRecord, TokenRecord, TokenUse};

/// The master's decision about an authenticated minion key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
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
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Limits on keys recorded as pending, so unauthenticated peers cannot fill the registry: a cap
/// on how many are pending, and a rate at which new ones are recorded.
#[derive(Debug)]
pub struct PendingLimits {
    max: u64,
    per_sec: f64,
    burst: f64,
    bucket: RateLimiter,
}

impl PendingLimits {
    /// At most `max` keys pending, arriving at `per_sec` (bursts of `burst`) from `now`.
    pub fn new(max: u64, per_sec: f64, burst: f64, now: Instant) -> Self {
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
pub enum KeyCall {
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
pub enum KeyAnswer {
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
pub enum Step {
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
pub struct KeyRules {
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
    pub fn new(id: &str, public_key: [u8; 32], has_token: bool) -> Self {
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
    pub fn record(&self, state: KeyState) -> KeyRecord {
        KeyRecord { id: self.id.clone(), public_key: self.public_key, state }
    }

    /// Takes a call's answer.
    pub fn answered(&mut self, answer: KeyAnswer) {
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
    pub fn step(&self, now: Instant, limits: &mut PendingLimits) -> Step {
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
pub fn token_problem(record: Option<TokenRecord>, id: &str, now_ms: u64) -> Option<String> {
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
