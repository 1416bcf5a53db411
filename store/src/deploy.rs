//! Persistent software configs, deployments and gateway tokens: the engine-facing half of the
//! store, a supertrait of [`super::Store`].

use std::collections::BTreeMap;
use std::future::Future;

use halite_protocol::message::{
    DeploymentGroup, NewDeployment, NewDeploymentGroup, SoftwareConfig, SoftwareDeployment, Value,
};
use serde::{Deserialize, Serialize};

use super::StoreError;

/// What a valid gateway token grants: the principal it acts as, until when. A session opened
/// with it is bound to it (revoked or expired, the session ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiTokenGrant {
    /// The token's id (as listed and revoked).
    pub id: String,
    /// The principal it acts as.
    pub principal: String,
    /// When it expires (wall clock, ms); `None`: never.
    pub expires_at_ms: Option<u64>,
}

/// A config with the principal that created it (`root` for configs stored before configs
/// had owners).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigRecord {
    /// What engines see.
    pub config: SoftwareConfig,
    /// Who created it.
    pub owner: String,
}

/// A deployment with what the master needs to carry it out.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentRecord {
    /// The principal that created it (`root` for deployments stored before deployments had
    /// owners); kept in its own column, not in the document.
    pub owner: String,
    /// What engines see.
    pub deployment: SoftwareDeployment,
    /// How it was asked for (signal URL, stack, timeout): re-derivation starts from it.
    pub spec: NewDeployment,
    /// The `deploy.apply` job of the current derived config.
    pub jid: String,
    /// The derived config item pushed to the minion.
    pub item: Value,
    /// The signal still has to be relayed to `spec.signal_id`.
    pub relay_pending: bool,
    /// The last signal received (or made up for a failure), for the relay.
    pub last_signal: Option<Value>,
    /// Which write finished it (unique per write; empty before it finished): a master whose
    /// write's outcome is unknown recognises its own by it.
    pub finish_id: String,
}

/// A deployment group with what the master needs to carry it out (stored as one JSON document).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// What engines see.
    pub group: DeploymentGroup,
    /// How it was asked for: each server's deployment is made from it.
    pub spec: NewDeploymentGroup,
    /// Who asked: the deployments are made as them, and the group is theirs (its owner in the
    /// sense of `authz::ownership`; recorded since groups exist).
    pub principal: String,
    /// The master that drives its rollout (its `id`).
    pub owner: String,
    /// Members recorded as starting before their starts were sent, by server: what the store
    /// must show for a start to have landed. A retry sends again only the starts that did not
    /// land, so no server is started twice.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub starting: BTreeMap<String, MemberStart>,
    /// The revision read with it (0: not stored yet); not in the document but beside it. A
    /// write is refused unless the stored revision is still this one (`DeployStore::put_group`).
    #[serde(skip)]
    pub revision: i64,
}

/// A member's start as recorded before it is sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStart {
    /// For a server that already had a deployment (run again), the job it was on before: the
    /// start landed once the deployment is on another (every run is a new job). `None`: a new
    /// deployment, created with the member's recorded id; the start landed once it exists.
    pub jid_before: Option<String>,
}

/// Configs, deployments and gateway tokens. Every method is one transaction.
///
/// An `owner: Option<&str>` argument narrows a listing or deletion to what that principal
/// created (`None`: everyone's); who gets which is decided in `authz::ownership`.
#[cfg(feature = "io")]
pub trait DeployStore: Send + Sync + 'static {
    /// Writes a deployment group: a new one (`revision` 0), or one whose stored revision is
    /// still `record.revision`, which it bumps. False: refused, the group was written since (or
    /// already exists); read it again.
    fn put_group(&self, record: &GroupRecord, now_ms: u64) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// One deployment group.
    fn group(&self, id: &str) -> impl Future<Output = Result<Option<GroupRecord>, StoreError>> + Send;
    /// Groups still in progress: what a restarted master resumes.
    fn open_groups(&self) -> impl Future<Output = Result<Vec<GroupRecord>, StoreError>> + Send;
    /// Stores a new config, created by `owner`.
    fn put_config(
        &self,
        config: &SoftwareConfig,
        owner: &str,
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// One config, with its owner.
    fn config(&self, id: &str) -> impl Future<Output = Result<Option<ConfigRecord>, StoreError>> + Send;
    /// The newest configs (of `owner` when given).
    fn configs(
        &self,
        owner: Option<&str>,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<SoftwareConfig>, StoreError>> + Send;
    /// Deletes a config (only if `owner` created it, when given); returns whether it did.
    fn delete_config(&self, id: &str, owner: Option<&str>) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Inserts or replaces a deployment.
    fn put_deployment(
        &self,
        record: &DeploymentRecord,
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Replaces a deployment updated from the row read while it waited on `previous_jid`, only
    /// if that row is still there on that job: one that another master deleted or updated
    /// meanwhile is neither brought back nor overwritten. Whether it was replaced.
    fn update_deployment(
        &self,
        record: &DeploymentRecord,
        previous_jid: &str,
        now_ms: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records a deployment's end, only if it is still in progress on `record.jid` (not updated
    /// since, with a new job): of several masters finishing one deployment, one wins (and it
    /// alone announces and relays). Whether it did.
    fn finish_deployment(
        &self,
        record: &DeploymentRecord,
        now_ms: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records that `record`'s signal was relayed (`record`, with `relay_pending` cleared), only
    /// if its relay is still pending on the same job: a deployment deleted or updated meanwhile
    /// (by another master too) is neither brought back nor overwritten. Whether it did.
    fn record_relayed(
        &self,
        record: &DeploymentRecord,
        now_ms: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// The deployment in progress on job `jid`, if any.
    fn deployment_waiting_on(
        &self,
        jid: &str,
    ) -> impl Future<Output = Result<Option<DeploymentRecord>, StoreError>> + Send;
    /// One deployment.
    fn deployment(&self, id: &str) -> impl Future<Output = Result<Option<DeploymentRecord>, StoreError>> + Send;
    /// Deployments (of one server when given), newest first.
    fn deployments(
        &self,
        server_id: Option<&str>,
    ) -> impl Future<Output = Result<Vec<DeploymentRecord>, StoreError>> + Send;
    /// Deployments still in progress or with a signal to relay: what a restarted master resumes.
    fn open_deployments(&self) -> impl Future<Output = Result<Vec<DeploymentRecord>, StoreError>> + Send;
    /// Deletes a deployment; returns whether it existed.
    fn delete_deployment(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records a gateway token (by its hash) acting as `principal`, created by `owner`, valid
    /// until `expires_at_ms` (`None`: never).
    fn create_api_token(
        &self,
        hash: &[u8; 32],
        principal: &str,
        owner: &str,
        now_ms: u64,
        expires_at_ms: Option<u64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// What a gateway token grants (its principal, until when), if it exists and has not
    /// expired at `now_ms`.
    fn api_token_grant(
        &self,
        hash: &[u8; 32],
        now_ms: u64,
    ) -> impl Future<Output = Result<Option<ApiTokenGrant>, StoreError>> + Send;
    /// Gateway tokens (created by `owner` when given), newest first (ids, never the tokens).
    fn api_tokens(
        &self,
        owner: Option<&str>,
    ) -> impl Future<Output = Result<Vec<halite_protocol::message::ApiTokenInfo>, StoreError>> + Send;
    /// Deletes the gateway token with this id (only if `owner` created it, when given); whether
    /// there was one.
    fn delete_api_token(&self, id: &str, owner: Option<&str>) -> impl Future<Output = Result<bool, StoreError>> + Send;
}
