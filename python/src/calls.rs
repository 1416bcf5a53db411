//! Every SDK call Python can make, as one enum: Python sends `{"op": ..., args}` as JSON, gets
//! the result as JSON. One place maps the Python API onto the SDK, for the blocking and the
//! awaitable forms alike.

use std::collections::BTreeMap;
use std::time::Duration;

use halite_client::{Client, ClientError, JobEvent, JobSpec};
use halite_protocol::message::{
    DeploymentUpdate, NewDeployment, NewDeploymentGroup, NewSoftwareConfig, PrincipalAcl, Rollout, Target, Value,
};
use serde::Deserialize;
use serde_json::json;

/// One call, as the Python package sends it.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Call {
    Publish {
        target: Target,
        function: String,
        #[serde(default)]
        args: Vec<Value>,
        #[serde(default)]
        kwargs: BTreeMap<String, Value>,
        #[serde(default)]
        timeout_ms: Option<u64>,
        #[serde(default)]
        ttl_ms: u64,
        #[serde(default)]
        rollout: Option<Rollout>,
    },
    NextJobEvent {
        jid: String,
    },
    Watch {
        jid: String,
    },
    Forget {
        jid: String,
    },
    Job {
        jid: String,
    },
    Jobs {
        limit: u32,
        #[serde(default)]
        filter: halite_protocol::message::JobFilter,
    },
    Cancel {
        jid: String,
    },
    Pause {
        jid: String,
    },
    Resume {
        jid: String,
    },
    Keys {
        pattern: String,
    },
    AcceptKeys {
        pattern: String,
    },
    RejectKeys {
        pattern: String,
    },
    DeleteKeys {
        pattern: String,
    },
    PreseedKey {
        id: String,
        public_key: String,
    },
    CreateEnrollment {
        minion: String,
        ttl_ms: u64,
        #[serde(default)]
        masters: Vec<String>,
        #[serde(default)]
        replace: bool,
    },
    EnrollmentTokens,
    RevokeEnrollmentToken {
        id: String,
    },
    Minions {
        pattern: String,
    },
    AddPrincipal {
        name: String,
        public_key: String,
        acl: PrincipalAcl,
    },
    Principals,
    RemovePrincipal {
        name: String,
    },
    CreateApiToken {
        principal: String,
        #[serde(default)]
        ttl_ms: Option<u64>,
    },
    ApiTokens,
    RevokeApiToken {
        id: String,
    },
    FireEvent {
        tag: String,
        #[serde(default)]
        data: Value,
    },
    CreateConfig {
        config: NewSoftwareConfig,
    },
    ShowConfig {
        id: String,
    },
    ListConfigs {
        limit: u32,
    },
    DeleteConfig {
        id: String,
    },
    CreateDeployment {
        spec: NewDeployment,
    },
    UpdateDeployment {
        id: String,
        update: DeploymentUpdate,
    },
    ShowDeployment {
        id: String,
    },
    ListDeployments {
        #[serde(default)]
        server_id: Option<String>,
    },
    DeleteDeployment {
        id: String,
    },
    ServerConfigs {
        server_id: String,
    },
    WaitForDeployment {
        id: String,
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    CreateDeploymentGroup {
        spec: NewDeploymentGroup,
    },
    UpdateDeploymentGroup {
        id: String,
        update: halite_protocol::message::DeploymentGroupUpdate,
    },
    ShowDeploymentGroup {
        id: String,
    },
    WaitForDeploymentGroup {
        id: String,
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    Audit {
        #[serde(default)]
        filter: halite_protocol::message::AuditFilter,
        #[serde(default)]
        after: Option<i64>,
        limit: u32,
    },
    AuditVerify,
}

/// A call as Python sent it, or a `ValueError`-worthy error naming what is wrong with it.
pub(crate) fn parse(text: &str) -> Result<Call, InvalidCall> {
    serde_json::from_str(text).map_err(InvalidCall)
}

/// A call that is not JSON of a known call's shape: serde's reason.
#[derive(Debug)]
pub(crate) struct InvalidCall(serde_json::Error);

impl std::fmt::Display for InvalidCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid call: {}", self.0)
    }
}

impl std::error::Error for InvalidCall {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Carries `call` out; its result as JSON text.
pub(crate) async fn execute(client: &Client, call: Call) -> Result<String, ClientError> {
    let value = match call {
        Call::Publish { target, function, args, kwargs, timeout_ms, ttl_ms, rollout } => {
            let spec = JobSpec::new(target, function);
            let timeout_ms = timeout_ms.unwrap_or(spec.timeout_ms);
            let spec = JobSpec { args, kwargs, timeout_ms, ttl_ms, rollout, ..spec };
            let published = client.publish(spec).await?;
            json!({ "jid": published.jid, "minions": published.minions, "unknown": published.unknown })
        }
        Call::NextJobEvent { jid } => match client.next_job_event(&jid).await? {
            JobEvent::Update(update) => json!({ "update": to_json(&update)? }),
            JobEvent::Done => json!({ "done": true }),
        },
        Call::Watch { jid } => to_json(&client.watch(&jid).await?)?,
        Call::Forget { jid } => {
            client.forget(&jid);
            Value::Null
        }
        Call::Job { jid } => to_json(&client.job(&jid).await?)?,
        Call::Jobs { limit, filter } => to_json(&client.jobs_filtered(limit, filter).await?)?,
        Call::Cancel { jid } => to_json(&client.cancel(&jid).await?)?,
        Call::Pause { jid } => to_json(&client.pause(&jid).await?)?,
        Call::Resume { jid } => to_json(&client.resume(&jid).await?)?,
        Call::Keys { pattern } => to_json(&client.keys(&pattern).await?)?,
        Call::AcceptKeys { pattern } => to_json(&client.accept_keys(&pattern).await?)?,
        Call::RejectKeys { pattern } => to_json(&client.reject_keys(&pattern).await?)?,
        Call::DeleteKeys { pattern } => to_json(&client.delete_keys(&pattern).await?)?,
        Call::PreseedKey { id, public_key } => {
            client.preseed_key(&id, public_key_bytes(&public_key)?).await?;
            Value::Null
        }
        Call::CreateEnrollment { minion, ttl_ms, masters, replace } => {
            to_json(&client.create_enrollment(&minion, Duration::from_millis(ttl_ms), &masters, replace).await?)?
        }
        Call::EnrollmentTokens => to_json(&client.enrollment_tokens().await?)?,
        Call::RevokeEnrollmentToken { id } => {
            client.revoke_enrollment_token(&id).await?;
            Value::Null
        }
        Call::Minions { pattern } => to_json(&client.minions(&pattern).await?)?,
        Call::AddPrincipal { name, public_key, acl } => {
            client.add_principal(&name, public_key_bytes(&public_key)?, acl).await?;
            Value::Null
        }
        Call::Principals => to_json(&client.principals().await?)?,
        Call::RemovePrincipal { name } => {
            client.remove_principal(&name).await?;
            Value::Null
        }
        Call::CreateApiToken { principal, ttl_ms } => {
            Value::String(client.create_api_token(&principal, ttl_ms.map(Duration::from_millis)).await?)
        }
        Call::ApiTokens => to_json(&client.api_tokens().await?)?,
        Call::RevokeApiToken { id } => {
            client.revoke_api_token(&id).await?;
            Value::Null
        }
        Call::FireEvent { tag, data } => Value::String(client.fire_event(&tag, data).await?),
        Call::CreateConfig { config } => to_json(&client.create_config(config).await?)?,
        Call::ShowConfig { id } => to_json(&client.show_config(&id).await?)?,
        Call::ListConfigs { limit } => to_json(&client.list_configs(limit).await?)?,
        Call::DeleteConfig { id } => {
            client.delete_config(&id).await?;
            Value::Null
        }
        Call::CreateDeployment { spec } => to_json(&client.create_deployment(spec).await?)?,
        Call::UpdateDeployment { id, update } => to_json(&client.update_deployment(&id, update).await?)?,
        Call::ShowDeployment { id } => to_json(&client.show_deployment(&id).await?)?,
        Call::ListDeployments { server_id } => to_json(&client.list_deployments(server_id.as_deref()).await?)?,
        Call::DeleteDeployment { id } => {
            client.delete_deployment(&id).await?;
            Value::Null
        }
        Call::ServerConfigs { server_id } => Value::Array(client.server_configs(&server_id).await?),
        Call::WaitForDeployment { id, timeout_ms } => {
            to_json(&client.wait_for_deployment(&id, timeout_ms.map(Duration::from_millis)).await?)?
        }
        Call::CreateDeploymentGroup { spec } => to_json(&client.create_deployment_group(spec).await?)?,
        Call::ShowDeploymentGroup { id } => to_json(&client.show_deployment_group(&id).await?)?,
        Call::UpdateDeploymentGroup { id, update } => to_json(&client.update_deployment_group(&id, update).await?)?,
        Call::WaitForDeploymentGroup { id, timeout_ms } => {
            to_json(&client.wait_for_deployment_group(&id, timeout_ms.map(Duration::from_millis)).await?)?
        }
        Call::Audit { filter, after, limit } => to_json(&client.audit(filter, after, limit).await?)?,
        Call::AuditVerify => to_json(&client.audit_verify().await?)?,
    };
    Ok(value.to_string())
}

fn to_json(value: &impl serde::Serialize) -> Result<Value, ClientError> {
    serde_json::to_value(value).map_err(|e| ClientError::Protocol(format!("cannot render an answer as JSON: {e}")))
}

/// An ed25519 public key given as 64 hex digits.
fn public_key_bytes(text: &str) -> Result<[u8; 32], ClientError> {
    halite_protocol::hex::decode(text.trim())
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
        .ok_or_else(|| ClientError::Config(format!("public key: expected 64 hex digits, got {text:?}")))
}
