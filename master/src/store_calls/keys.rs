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
