//! The store calls of clients' requests and deployment groups' work (`admin/calls.rs`,
//! `deploy/calls.rs`, `deploy/group_calls.rs`), each one or a few store calls made in order. The loop makes them (`Master::answer_asks`); they touch nothing
//! but the store, and a failure stops the calls after it.

use halite_protocol::message::KeyState;

use super::reads;
use crate::calls::admin::{AdminCall, AdminDone, Checked, JobReadDone, NewToken};
use crate::calls::deploy::{DeployCall, DeployDone, DeploymentWrite};
use crate::calls::group::{GroupCall, GroupDone};
use crate::core::registry::AcceptedKeys;
use crate::keys::token_hash;
use crate::store::{KeyRecord, Store, StoreError};
use crate::target::glob;

/// Makes `call`'s store calls; `now_ms` (wall time) stamps what they write.
pub(crate) async fn run<S: Store>(store: &S, call: AdminCall, now_ms: u64) -> AdminDone {
    match call {
        AdminCall::PutPrincipal(record) => {
            let principals = match store.put_principal(&record, now_ms).await {
                Ok(()) => store.principals().await,
                Err(error) => Err(error),
            };
            AdminDone::PrincipalPut { record, principals }
        }
        AdminCall::RemovePrincipal { name } => {
            let principals = match store.delete_principal(&name).await {
                Ok(true) => store.principals().await.map(Some),
                Ok(false) => Ok(None),
                Err(error) => Err(error),
            };
            AdminDone::PrincipalRemoved { name, principals }
        }
        AdminCall::TransferOwner { from, to } => {
            let moved = store.transfer_owner(&from, &to).await;
            AdminDone::OwnerTransferred { from, to, moved }
        }
        AdminCall::ListKeys { pattern } => AdminDone::Keys { pattern, keys: store.keys().await },
        AdminCall::ChangeKeys { pattern, from, to } => {
            let mut changed = Vec::new();
            let accepted = change_keys(store, &pattern, &from, to, now_ms, &mut changed).await;
            AdminDone::KeysChanged { to, changed, accepted }
        }
        AdminCall::PreseedKey(record) => {
            let stored = preseed_key(store, &record, now_ms).await;
            AdminDone::KeyPreseeded { record, stored }
        }
        AdminCall::CreateToken(token) => {
            let stored = create_token(store, &token).await;
            AdminDone::TokenCreated { token, stored }
        }
        AdminCall::ReadJob { jid, then, change } => {
            let changed = match change {
                Some(status) => {
                    let stored = store.set_rollout(&jid, &status).await;
                    Some((status, stored))
                }
                None => None,
            };
            let read = match &changed {
                Some((_, Err(error))) => Err(error.clone()),
                _ => store.job(&jid).await,
            };
            AdminDone::JobRead(Box::new(JobReadDone { jid, then, changed, read }))
        }
        AdminCall::CreateApiToken { token, acting_as, owner, expires_at_ms } => {
            let hash = token_hash(&token.0);
            let stored = store.create_api_token(&hash, &acting_as, &owner, now_ms, expires_at_ms).await;
            AdminDone::ApiTokenCreated { token, acting_as, owner, expires_at_ms, stored }
        }
        AdminCall::ListApiTokens { owner } => AdminDone::ApiTokens(store.api_tokens(owner.as_deref()).await),
        AdminCall::RevokeApiToken { id, owner } => {
            // Whose it is, so the other masters recheck that principal's sessions.
            let (acting_as, revoked) = match store.api_tokens(None).await {
                Ok(tokens) => {
                    let acting_as = tokens.into_iter().find(|t| t.id == id).map(|t| t.principal);
                    (acting_as, store.delete_api_token(&id, owner.as_deref()).await)
                }
                Err(error) => (None, Err(error)),
            };
            AdminDone::ApiTokenRevoked { id, acting_as, revoked }
        }
        AdminCall::ListTokens { owner } => AdminDone::Tokens(store.tokens(owner.as_deref()).await),
        AdminCall::AuditList { filter, after, limit } => {
            AdminDone::Audit(store.audit_page(&filter, after, limit).await)
        }
        AdminCall::AuditVerify { known_heads } => AdminDone::AuditVerified(store.verify_audit(&known_heads).await),
        AdminCall::AuditHeader => AdminDone::AuditHeader(store.audit_header().await),
        AdminCall::RevokeToken { id, owner } => {
            let revoked = store.delete_token(&id, owner.as_deref()).await;
            AdminDone::TokenRevoked { id, revoked }
        }
    }
}

/// Makes a deployment request's store calls; `now_ms` (wall time) stamps what they write.
pub(crate) async fn run_deploy<S: Store>(store: &S, call: DeployCall, now_ms: u64) -> DeployDone {
    match call {
        DeployCall::PutConfig { config, owner } => {
            let stored = store.put_config(&config, &owner, now_ms).await;
            DeployDone::ConfigPut { config, stored }
        }
        DeployCall::ReadConfig { id } => {
            let read = store.config(&id).await;
            DeployDone::Config { id, read }
        }
        DeployCall::ListConfigs { owner, limit } => DeployDone::Configs(store.configs(owner.as_deref(), limit).await),
        DeployCall::DeleteConfig { id, owner } => {
            let deleted = store.delete_config(&id, owner.as_deref()).await;
            DeployDone::ConfigDeleted { id, deleted }
        }
        DeployCall::ReadDeployment { id, then } => {
            let read = store.deployment(&id).await;
            DeployDone::Deployment { id, then, read }
        }
        DeployCall::ListDeployments { server_id, then } => {
            DeployDone::Deployments { then, read: store.deployments(server_id.as_deref()).await }
        }
        DeployCall::DeleteDeployment(record) => {
            let deleted = store.delete_deployment(&record.deployment.id).await;
            DeployDone::DeploymentDeleted { record, deleted }
        }
        DeployCall::ReadPush(push) => {
            let deployment = &push.record.deployment;
            let read =
                reads::push_inputs(store, &deployment.config_id, &deployment.server_id, &deployment.action, now_ms)
                    .await;
            DeployDone::PushRead { push, read }
        }
        DeployCall::PutDeployment { write, pushed } => {
            let DeploymentWrite { record, read_on } = *write;
            let stored = match &read_on {
                Some(previous_jid) => store.update_deployment(&record, previous_jid, now_ms).await,
                None => store.put_deployment(&record, now_ms).await.map(|()| true),
            };
            DeployDone::DeploymentPut { record: Box::new(record), pushed, stored }
        }
    }
}

/// Makes a deployment group's store calls; `now_ms` (wall time) stamps what they write.
pub(crate) async fn run_group<S: Store>(store: &S, id: &str, call: GroupCall, now_ms: u64) -> GroupDone {
    match call {
        GroupCall::ReadForAdvance { reply } => {
            GroupDone::ReadForAdvance { reply, read: reads::group_advancing(store, id).await }
        }
        GroupCall::ReadForStop { reason } => GroupDone::ReadForStop { reason, read: store.group(id).await },
        GroupCall::ReadForRequest(then) => GroupDone::ReadForRequest { then, read: store.group(id).await },
        GroupCall::ReadConfig { config_id, then } => GroupDone::Config { then, read: store.config(&config_id).await },
        GroupCall::Put { record, then } => {
            let stored = store.put_group(&record, now_ms).await;
            GroupDone::Put { record, then, stored }
        }
    }
}

/// Moves the keys matching `pattern` whose state is in `from` to `to`, or deletes them (and
/// their minions' entries) without one, pushing each onto `changed` once its key is written
/// (or may have been); then rereads every accepted key.
async fn change_keys<S: Store>(
    store: &S,
    pattern: &str,
    from: &[KeyState],
    to: Option<KeyState>,
    now_ms: u64,
    changed: &mut Vec<KeyRecord>,
) -> Result<AcceptedKeys, StoreError> {
    let keys = store.keys().await?;
    for key in keys.into_iter().filter(|k| from.contains(&k.state) && glob::matches(pattern, &k.id)) {
        let written = match to {
            Some(state) => store.put_key(&KeyRecord { state, ..key.clone() }, now_ms).await,
            None => store.delete_key(&key.id, &key.public_key).await,
        };
        match written {
            Ok(()) => changed.push(key.clone()),
            // It may have been written: counted as changed (cut, told), and the reread that
            // follows on the other masters finds what the store holds.
            Err(error) if error.is_indeterminate() => {
                changed.push(key);
                return Err(error);
            }
            Err(error) => return Err(error),
        }
        if to.is_none() {
            // The key is gone already: a failure here still leaves it counted as changed.
            store.delete_minion(&key.id).await?;
        }
    }
    reads::accepted_keys(store, None).await
}

/// Accepts `record`'s key unless its id has another key not denied.
async fn preseed_key<S: Store>(store: &S, record: &KeyRecord, now_ms: u64) -> Result<Checked, StoreError> {
    let existing = store.keys_for(&record.id).await?;
    if existing.iter().any(|k| k.public_key != record.public_key && k.state != KeyState::Denied) {
        return Ok(Checked::OtherKey);
    }
    store.put_key(record, now_ms).await?;
    Ok(Checked::Written)
}

/// Records an enrollment token unless its minion has an accepted key that it was not made to
/// replace: a token enrolls whoever holds it, so it would take that identity over.
async fn create_token<S: Store>(store: &S, token: &NewToken) -> Result<Checked, StoreError> {
    let keys = store.keys_for(&token.minion).await?;
    if !token.replace && keys.iter().any(|k| k.state == KeyState::Accepted) {
        return Ok(Checked::OtherKey);
    }
    let hash = token_hash(&token.token.0);
    store.create_token(&hash, &token.minion, token.expires_at_ms, token.replace, &token.owner).await?;
    Ok(Checked::Written)
}
