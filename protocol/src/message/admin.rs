//! Client requests and master responses for administration: keys, tokens, minions, jobs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::deploy::{
    DeploymentGroup, DeploymentGroupUpdate, DeploymentUpdate, NewDeployment, NewDeploymentGroup, NewSoftwareConfig,
    SoftwareConfig, SoftwareDeployment,
};
use super::types::{JobReturn, Target, Value};

/// The most minions one `MinionList` page holds: a page is built in one step of the master's
/// loop, so its size bounds how long a listing holds the loop.
pub const MINION_LIST_PAGE_MAX: u32 = 5_000;

/// A client request; answered by a [`Response`] with the same `request_id`, or by an `error`
/// message whose `request` is the id in decimal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Client-chosen id echoed in the answer.
    pub request_id: u64,
    /// What is asked.
    pub body: RequestBody,
}

/// The administrative requests. Patterns are minion-id globs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestBody {
    /// List keys whose id matches `pattern`.
    KeyList {
        /// Id glob.
        pattern: String,
    },
    /// Accept pending and rejected keys matching `pattern`.
    KeyAccept {
        /// Id glob.
        pattern: String,
    },
    /// Reject pending and accepted keys matching `pattern`; live sessions are cut.
    KeyReject {
        /// Id glob.
        pattern: String,
    },
    /// Delete every key (any state) matching `pattern`; live sessions are cut.
    KeyDelete {
        /// Id glob.
        pattern: String,
    },
    /// Register a public key generated elsewhere as accepted for `id` (preseeding).
    KeyPreseed {
        /// Minion id.
        id: String,
        /// The 32-byte ed25519 public key.
        #[serde(with = "serde_bytes")]
        public_key: Vec<u8>,
    },
    /// Create a one-time enrollment token bound to `minion`.
    TokenCreate {
        /// The only minion id the token can enroll.
        minion: String,
        /// Validity, milliseconds.
        ttl_ms: u64,
        /// Whether the token may replace the id's accepted key (administrators only). Without
        /// it, a token for an id whose key is accepted is refused, at creation and at use.
        #[serde(default)]
        replace: bool,
    },
    /// List minions (accepted keys) whose id matches `pattern`, with presence and grains, in id
    /// order. A large fleet is listed a page at a time: `limit` entries, starting after the id
    /// `after`; a page shorter than `limit` is the last. Without `limit` every match is answered
    /// at once (in parts, as any listing), built in one step of the master's loop.
    MinionList {
        /// Id glob.
        pattern: String,
        /// Only ids after this one (the last id of the previous page).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        /// At most this many (the master answers at most [`MINION_LIST_PAGE_MAX`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
    },
    /// The most recent jobs, newest first.
    JobList {
        /// At most this many.
        limit: u32,
        /// Only the jobs that pass it (all when empty).
        #[serde(default, skip_serializing_if = "JobFilter::is_empty")]
        filter: JobFilter,
    },
    /// One job with every targeted minion's state.
    JobShow {
        /// Job id.
        jid: String,
    },
    /// Follows a job from now on: the session is sent its updates and its end, as for a job it
    /// published, and is answered with the job as it is (a finished job is answered and not
    /// followed). A client that reconnected goes on following its jobs with it.
    JobWatch {
        /// Job id.
        jid: String,
    },
    /// Fires an event on the master's bus under the principal's own namespace:
    /// `engine/<principal>/<tag>`, data `{"principal", "data"}` (an engine's alarm that rollouts
    /// abort on, a step of its own workflow). Answered with `changed [the full tag]`.
    EventFire {
        /// Relative tag: 1–255 bytes of `A-Za-z0-9_.-/`, no empty or `..` segment.
        tag: String,
        /// Body (at most 64 KiB as JSON).
        #[serde(default)]
        data: Value,
    },
    /// Pauses a job's rollout: running targets finish, no new one starts.
    JobPause {
        /// Job id.
        jid: String,
    },
    /// Resumes a paused rollout.
    JobResume {
        /// Job id.
        jid: String,
    },
    /// Registers (or replaces) a client principal with its key and ACL.
    PrincipalAdd {
        /// Name it will claim in the handshake.
        name: String,
        /// Its 32-byte ed25519 public key.
        #[serde(with = "serde_bytes")]
        public_key: Vec<u8>,
        /// What it may do.
        acl: PrincipalAcl,
    },
    /// Lists principals.
    PrincipalList,
    /// Removes a principal; its live sessions are cut.
    PrincipalRemove {
        /// Name.
        name: String,
    },
    /// Hands everything `from` created (software configs, deployments, enrollment and gateway
    /// tokens) to `to` (`root` or a registered principal): after an upgrade, the rows from
    /// before owners existed are root's until the operator gives them to the engine that made
    /// them. Answered with `changed [count of rows moved]`.
    OwnerTransfer {
        /// The current owner.
        from: String,
        /// The new owner.
        to: String,
    },
    /// Creates a bearer token for the HTTP gateway that acts as `principal` (`root` or a
    /// registered one). Shown once; stored hashed.
    ApiTokenCreate {
        /// The principal the token acts as.
        principal: String,
        /// How long it is valid, milliseconds; `None`: the master's default
        /// (`[gateway] token_ttl_days`).
        #[serde(default)]
        ttl_ms: Option<u64>,
    },
    /// Lists gateway tokens (never the tokens themselves: their ids).
    ApiTokenList,
    /// Revokes a gateway token by its id.
    ApiTokenRevoke {
        /// The token's id (as `api_token_list` shows it).
        id: String,
    },
    /// Lists enrollment tokens.
    TokenList,
    /// Revokes an enrollment token by its id.
    TokenRevoke {
        /// The token's id (as `token_list` shows it).
        id: String,
    },
    /// Stores a new software config.
    ConfigCreate(NewSoftwareConfig),
    /// One config.
    ConfigShow {
        /// Config id.
        id: String,
    },
    /// Configs, newest first.
    ConfigList {
        /// At most this many.
        limit: u32,
    },
    /// Deletes a config.
    ConfigDelete {
        /// Config id.
        id: String,
    },
    /// Deploys a config to a server: the derived config is pushed to the minion at once, or
    /// when it connects.
    DeploymentCreate(NewDeployment),
    /// Deploys a config to several servers, rolled out; answered with the group.
    DeploymentGroupCreate(NewDeploymentGroup),
    /// One deployment group.
    DeploymentGroupShow {
        /// Group id.
        id: String,
    },
    /// Changes a deployment group in place, rolled out; answered with the group.
    DeploymentGroupUpdate {
        /// Group id.
        id: String,
        /// What changes.
        update: DeploymentGroupUpdate,
    },
    /// Re-derives and pushes a deployment with new inputs, config or action.
    DeploymentUpdate {
        /// Deployment id.
        id: String,
        /// What changes.
        update: DeploymentUpdate,
    },
    /// One deployment.
    DeploymentShow {
        /// Deployment id.
        id: String,
    },
    /// Deployments, optionally of one server, newest first.
    DeploymentList {
        /// Only this minion's.
        #[serde(default)]
        server_id: Option<String>,
    },
    /// Deletes a deployment (a pending push is cancelled).
    DeploymentDelete {
        /// Deployment id.
        id: String,
    },
    /// Heat's per-server metadata: every derived config of a server's deployments.
    ServerConfigs {
        /// Minion id.
        server_id: String,
    },
    /// Audit records in store order after the record `after` (an id from a page before),
    /// those `filter` keeps and the asker may read, at most `limit`.
    AuditList {
        /// Which records.
        #[serde(default)]
        filter: AuditFilter,
        /// Only records after this id.
        #[serde(default)]
        after: Option<i64>,
        /// At most this many (the master caps it).
        limit: u32,
    },
    /// Checks every audit chain in the store (root and administrators).
    AuditVerify,
    /// What an export of the audit trail starts with: the masters' keys, the checkpoints and
    /// the chains' heads (root and administrators).
    AuditHeader,
}

/// Which audit records a listing keeps (each given field must match; none: all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AuditFilter {
    /// The principal who asked (`root`, a name, `minion:<id>`, `master`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// A minion the record concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minion: Option<String>,
    /// The action (`publish`, `key_accept`, `job_end`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The decision (`granted`, `refused`, `failed`, or a final state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Records at or after this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Records before this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    /// Also the records of reads of the trail itself (`audit_list`), which a listing leaves
    /// out unless asked for (by this, or by `action`): reading the trail page by page then
    /// never grows what it reads. An export sets it: it holds every record.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reads: bool,
}

impl AuditFilter {
    /// Whether the records of reads of the trail are left out.
    pub fn hides_reads(&self) -> bool {
        !self.reads && self.action.as_deref() != Some(AUDIT_READ)
    }
}

/// The action of a read of the audit trail.
pub const AUDIT_READ: &str = "audit_list";

/// What a check of the store's audit chains found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AuditVerification {
    /// Records checked.
    pub records: u64,
    /// Each chain's last record.
    pub heads: BTreeMap<String, u64>,
    /// The first record removed, changed or moved, if a chain is broken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request answered.
    pub request_id: u64,
    /// The answer, or one part of it (see `more`).
    pub body: ResponseBody,
    /// More parts of this answer follow: a listing too large for one message is sent in
    /// parts, each a valid body of the same kind, to be joined in order
    /// ([`ResponseBody::append`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

/// A client principal as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PrincipalInfo {
    /// Name (the handshake claim).
    pub name: String,
    /// Fingerprint of its key.
    pub fingerprint: String,
    /// What it may do.
    pub acl: PrincipalAcl,
}

/// Answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseBody {
    /// Keys, sorted by id.
    Keys(Vec<KeyInfo>),
    /// The ids a key change applied to.
    Changed(Vec<String>),
    /// A new enrollment token.
    Token(TokenInfo),
    /// Minions, sorted by id.
    Minions(Vec<MinionInfo>),
    /// Jobs, newest first.
    Jobs(Vec<JobSummary>),
    /// One job in detail.
    Job(JobDetail),
    /// Principals, sorted by name.
    Principals(Vec<PrincipalInfo>),
    /// A new gateway token (shown once).
    ApiToken(String),
    /// Gateway tokens, newest first.
    ApiTokens(Vec<ApiTokenInfo>),
    /// Enrollment tokens, soonest to expire first.
    Tokens(Vec<TokenSummary>),
    /// One config.
    Config(SoftwareConfig),
    /// Configs.
    Configs(Vec<SoftwareConfig>),
    /// One deployment.
    Deployment(SoftwareDeployment),
    /// A deployment group.
    DeploymentGroup(DeploymentGroup),
    /// Deployments.
    Deployments(Vec<SoftwareDeployment>),
    /// The id of what was deleted.
    Deleted(String),
    /// Derived config items.
    Items(Vec<Value>),
    /// Audit records, in store order.
    Audit(Vec<crate::audit::AuditRecord>),
    /// What a check of the audit chains found.
    AuditVerified(AuditVerification),
    /// The start of an audit export.
    AuditHeader(Box<crate::audit::ExportHeader>),
}

/// Key states, as `salt-key` has them.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    /// Seen, waiting for an admin.
    Pending,
    /// Allowed to connect.
    Accepted,
    /// Refused by an admin.
    Rejected,
    /// A different key for an id that already has one: refused automatically.
    Denied,
}

impl KeyState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Pending => "pending",
            KeyState::Accepted => "accepted",
            KeyState::Rejected => "rejected",
            KeyState::Denied => "denied",
        }
    }

    /// Parses the wire name.
    pub fn parse(name: &str) -> Option<Self> {
        [KeyState::Pending, KeyState::Accepted, KeyState::Rejected, KeyState::Denied]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// One key in the registry.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// Minion id.
    pub id: String,
    /// State.
    pub state: KeyState,
    /// Fingerprint of the public key.
    pub fingerprint: String,
}

/// A gateway token as listed: its id (the first 12 hex digits of its SHA-256), never itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiTokenInfo {
    /// Id, for `api_token_revoke`.
    pub id: String,
    /// The principal it acts as.
    pub principal: String,
    /// When it was made, Unix milliseconds.
    pub created_at_ms: u64,
    /// When it stops working, Unix milliseconds; `None`: never.
    pub expires_at_ms: Option<u64>,
}

/// An enrollment token as listed: its id, never itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSummary {
    /// Id, for `token_revoke`.
    pub id: String,
    /// The only minion id it enrolls.
    pub minion: String,
    /// When it expires, Unix milliseconds.
    pub expires_at_ms: u64,
    /// Whether it enrolled its minion already (it works once).
    pub used: bool,
}

/// An enrollment token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// The secret token (shown once).
    pub token: String,
    /// The minion it enrolls.
    pub minion: String,
    /// Expiry, Unix milliseconds.
    pub expires_at_ms: u64,
}

/// A minion as the registry knows it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinionInfo {
    /// Minion id.
    pub id: String,
    /// Whether it has a live session with this master now.
    pub connected: bool,
    /// Whether, not connected here, it has a live session with another master of the cluster
    /// (masters sharing one store). Masters before this field omit it.
    #[serde(default)]
    pub connected_elsewhere: bool,
    /// Last time it was connected or sent anything, Unix milliseconds (0: never).
    pub last_seen_ms: u64,
    /// Announced grains.
    pub grains: BTreeMap<String, Value>,
    /// Announced functions.
    pub functions: Vec<String>,
}

/// Where a job stands on one minion. The last seven are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum MinionJobState {
    /// Offline when published; the job waits for it until its TTL.
    Waiting,
    /// Sent over the minion's session, not yet acknowledged.
    Sent,
    /// The minion acknowledged it and is running it.
    Running,
    /// Returned successfully.
    Returned,
    /// Returned a failure, or refused the job.
    Failed,
    /// Still running when the timeout hit (the minion killed it, or never answered).
    TimedOut,
    /// Not connected when published, and the job had no TTL.
    Offline,
    /// Cancelled before it finished.
    Cancelled,
    /// Its TTL passed before the minion connected.
    Expired,
    /// The minion's policy does not allow the function for this caller.
    Denied,
    /// Not yet dispatched: the job's rollout starts it when its window allows.
    Queued,
    /// Never dispatched: the job's rollout stopped first (its reason is the job's).
    Skipped,
    /// Named by the target (a list, or an id without wildcards) but no minion this caller may
    /// target has that id: nothing was sent, and the job shows it rather than leave it out.
    Unknown,
}

impl MinionJobState {
    /// Whether this state is the end of the job on this minion.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            MinionJobState::Waiting | MinionJobState::Sent | MinionJobState::Running | MinionJobState::Queued
        )
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        use MinionJobState::*;
        match self {
            Waiting => "waiting",
            Sent => "sent",
            Running => "running",
            Returned => "returned",
            Failed => "failed",
            TimedOut => "timed_out",
            Offline => "offline",
            Cancelled => "cancelled",
            Expired => "expired",
            Denied => "denied",
            Queued => "queued",
            Skipped => "skipped",
            Unknown => "unknown",
        }
    }

    /// Parses the wire name.
    pub fn parse(name: &str) -> Option<Self> {
        use MinionJobState::*;
        [
            Waiting, Sent, Running, Returned, Failed, TimedOut, Offline, Cancelled, Expired, Denied, Queued, Skipped,
            Unknown,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// A job's state change on one minion, streamed to the client that published it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobUpdate {
    /// Job id.
    pub jid: String,
    /// The minion.
    pub minion: String,
    /// Its new state.
    pub state: MinionJobState,
    /// The return, when the state came from one.
    #[serde(default)]
    pub ret: Option<JobReturn>,
}

/// Every targeted minion of the job reached a final state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDone {
    /// Job id.
    pub jid: String,
    /// Updates for this job the master could not queue for this client (it was not reading
    /// fast enough); the client reads the job's final states with `job_show` instead.
    #[serde(default)]
    pub missed: u32,
}

/// Job state changes batched: what happened to a client's jobs in one turn of the master.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobUpdates {
    /// In the order they happened.
    pub updates: Vec<JobUpdate>,
}

/// A job in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobSummary {
    /// Job id.
    pub jid: String,
    /// Function.
    pub function: String,
    /// The target as given.
    pub target: Target,
    /// Who published it.
    pub caller: String,
    /// When, Unix milliseconds.
    pub created_at_ms: u64,
    /// How many minions are in each state.
    pub states: BTreeMap<MinionJobState, u32>,
    /// The job's rollout and where it is, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::types::RolloutStatus>,
}

/// Which jobs a listing keeps; every field given must hold.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFilter {
    /// Glob on the function (`pkg.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Glob on the target as it was given (`web*` finds `-L web1,web2` and `web*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Glob on who published it (a principal's name, `root`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// Jobs with at least one minion in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<MinionJobState>,
    /// Published at or after this time, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Published before this time, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
}

impl JobFilter {
    /// Whether it keeps every job.
    pub fn is_empty(&self) -> bool {
        *self == JobFilter::default()
    }

    /// Whether `job` passes it (its states as they are now).
    pub fn keeps(&self, job: &JobSummary) -> bool {
        let glob =
            |pattern: &Option<String>, text: &str| pattern.as_deref().is_none_or(|p| crate::glob::matches(p, text));
        glob(&self.function, &job.function)
            && glob(&self.target, &job.target.expr)
            && glob(&self.caller, &job.caller)
            && self.state.is_none_or(|state| job.states.get(&state).is_some_and(|n| *n > 0))
            && self.since_ms.is_none_or(|since| job.created_at_ms >= since)
            && self.until_ms.is_none_or(|until| job.created_at_ms < until)
    }
}

/// One minion's part in a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MinionJob {
    /// The minion.
    pub minion: String,
    /// Its state.
    pub state: MinionJobState,
    /// Its return, if any.
    #[serde(default)]
    pub ret: Option<JobReturn>,
    /// The return came after the slot had already ended (`state` says how, usually
    /// `timed_out`); it is kept, never thrown away.
    #[serde(default)]
    pub late: bool,
    /// Set while the slot is not final and its minion is connected to no master (it left in
    /// the middle of the job): what becomes of the slot, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub away: Option<String>,
}

/// A job in detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobDetail {
    /// Summary.
    pub summary: JobSummary,
    /// Positional arguments.
    pub args: Vec<Value>,
    /// Keyword arguments.
    pub kwargs: BTreeMap<String, Value>,
    /// Every targeted minion, sorted by id.
    pub minions: Vec<MinionJob>,
}

/// One rule of a principal's ACL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PrincipalRule {
    /// Compound target expression every targeted minion must match.
    pub targets: String,
    /// Function globs.
    pub functions: Vec<String>,
    /// Optional constraints: keyword argument → anchored regex its string value must match.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
}

/// What a client principal may do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PrincipalAcl {
    /// Publish rules; a job must be covered entirely by one rule.
    #[serde(default)]
    pub rules: Vec<PrincipalRule>,
    /// Event tag globs it may subscribe to.
    #[serde(default)]
    pub events: Vec<String>,
    /// Whether it may manage keys, tokens and principals.
    #[serde(default)]
    pub admin: bool,
    /// The tenant it is confined to: only minions whose ids start with `<tenant>-` (a name
    /// without `-`, [`validate_tenant`]), and the
    /// jobs, events and deployments about them (`None`: no confinement beyond its rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl PrincipalAcl {
    /// Whether a minion id lies in this principal's tenant (always, without one).
    pub fn in_tenant(&self, minion: &str) -> bool {
        self.tenant.as_deref().is_none_or(|tenant| super::tenant_holds(tenant, minion))
    }
}
