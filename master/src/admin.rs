//! Administrative requests from clients: keys, tokens, minions, jobs.

use halite_protocol::hex;
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{ErrorKind, KeyInfo, KeyState, MinionInfo, RequestBody, ResponseBody, TokenInfo};
use rand_core::RngCore;
use tracing::info;

use crate::clock::now_ms;
use crate::keys::token_hash;
use crate::server::Master;
use crate::store::{KeyRecord, Store, StoreError};
use crate::target::glob;

type Reply = Result<ResponseBody, (ErrorKind, String)>;

fn internal(error: StoreError) -> (ErrorKind, String) {
    (ErrorKind::Internal, error.to_string())
}

/// Most jobs one listing returns.
const MAX_JOB_LIST: u32 = 1000;

impl<S: Store> Master<S> {
    pub(crate) async fn handle_request(&mut self, body: RequestBody) -> Reply {
        match body {
            RequestBody::KeyList { pattern } => {
                let keys = self.store.keys().await.map_err(internal)?;
                Ok(ResponseBody::Keys(
                    keys.into_iter()
                        .filter(|k| glob::matches(&pattern, &k.id))
                        .map(|k| KeyInfo { fingerprint: fingerprint(&k.public_key), id: k.id, state: k.state })
                        .collect(),
                ))
            }
            RequestBody::KeyAccept { pattern } => {
                self.change_keys(&pattern, &[KeyState::Pending, KeyState::Rejected], Some(KeyState::Accepted)).await
            }
            RequestBody::KeyReject { pattern } => {
                self.change_keys(&pattern, &[KeyState::Pending, KeyState::Accepted], Some(KeyState::Rejected)).await
            }
            RequestBody::KeyDelete { pattern } => {
                let all = [KeyState::Pending, KeyState::Accepted, KeyState::Rejected, KeyState::Denied];
                self.change_keys(&pattern, &all, None).await
            }
            RequestBody::KeyPreseed { id, public_key } => {
                halite_protocol::id::validate(&id).map_err(|e| (ErrorKind::BadRequest, e.to_string()))?;
                let key =
                    PublicIdentity::from_bytes(&public_key).map_err(|e| (ErrorKind::BadRequest, e.to_string()))?;
                let existing = self.store.keys_for(&id).await.map_err(internal)?;
                if existing.iter().any(|k| k.public_key != *key.as_bytes() && k.state != KeyState::Denied) {
                    return Err((ErrorKind::BadRequest, format!("{id} already has another key; delete it first")));
                }
                let record = KeyRecord { id: id.clone(), public_key: *key.as_bytes(), state: KeyState::Accepted };
                self.store.put_key(&record, now_ms()).await.map_err(internal)?;
                self.reload_accepted().await.map_err(internal)?;
                info!(minion = %id, fingerprint = %key.fingerprint(), "preseeded key accepted");
                Ok(ResponseBody::Changed(vec![id]))
            }
            RequestBody::TokenCreate { minion, ttl_ms } => {
                halite_protocol::id::validate(&minion).map_err(|e| (ErrorKind::BadRequest, e.to_string()))?;
                if ttl_ms == 0 {
                    return Err((ErrorKind::BadRequest, "token ttl must be positive".into()));
                }
                let mut secret = [0u8; 32];
                rand_core::OsRng.fill_bytes(&mut secret);
                let token = hex::encode(&secret);
                let expires_at_ms = now_ms().saturating_add(ttl_ms);
                self.store.create_token(&token_hash(&token), &minion, expires_at_ms).await.map_err(internal)?;
                info!(%minion, "enrollment token created");
                Ok(ResponseBody::Token(TokenInfo { token, minion, expires_at_ms }))
            }
            RequestBody::MinionList { pattern } => {
                let minions = self
                    .accepted
                    .iter()
                    .filter(|id| glob::matches(&pattern, id))
                    .map(|id| {
                        let entry = self.minions.get(id).cloned().unwrap_or_default();
                        MinionInfo {
                            id: id.clone(),
                            connected: self.online.contains_key(id),
                            last_seen_ms: entry.last_seen_ms,
                            grains: entry.grains,
                            functions: entry.functions,
                        }
                    })
                    .collect();
                Ok(ResponseBody::Minions(minions))
            }
            RequestBody::JobList { limit } => {
                Ok(ResponseBody::Jobs(self.store.jobs(limit.min(MAX_JOB_LIST)).await.map_err(internal)?))
            }
            RequestBody::JobShow { jid } => match self.store.job(&jid).await.map_err(internal)? {
                Some(detail) => Ok(ResponseBody::Job(detail)),
                None => Err((ErrorKind::NotFound, format!("no job {jid}"))),
            },
        }
    }

    /// Moves keys matching `pattern` whose state is in `from` to `to` (or deletes them), and
    /// cuts the live sessions of minions that lost their accepted key.
    async fn change_keys(&mut self, pattern: &str, from: &[KeyState], to: Option<KeyState>) -> Reply {
        let keys = self.store.keys().await.map_err(internal)?;
        let mut changed = Vec::new();
        for key in keys.into_iter().filter(|k| from.contains(&k.state) && glob::matches(pattern, &k.id)) {
            match to {
                Some(state) => self.store.put_key(&KeyRecord { state, ..key.clone() }, now_ms()).await,
                None => self.store.delete_key(&key.id, &key.public_key).await,
            }
            .map_err(internal)?;
            if to.is_none() {
                self.store.delete_minion(&key.id).await.map_err(internal)?;
                self.minions.remove(&key.id);
            }
            if to != Some(KeyState::Accepted) {
                self.cut_minion(&key.id);
            }
            changed.push(key.id);
        }
        changed.sort();
        changed.dedup();
        self.reload_accepted().await.map_err(internal)?;
        Ok(ResponseBody::Changed(changed))
    }
}

fn fingerprint(public_key: &[u8; 32]) -> String {
    PublicIdentity::from_bytes(public_key).map(|k| k.fingerprint()).unwrap_or_else(|_| hex::encode(public_key))
}
