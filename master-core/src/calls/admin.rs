//! What a client's administrative request asks of the store, and what the store answered.
//!
//! A request is decided without the store (`admin/mod.rs`: who may, what is valid); what it
//! then needs of the store is an [`AdminCall`], which the loop makes (`store_calls/requests.rs`) and
//! whose [`AdminDone`] goes on in `AdminDesk::admin_answered`: the in-memory state follows what
//! was stored, and the client is answered.

use std::sync::Arc;

use halite_protocol::message::{
    ApiTokenInfo, JobDetail, JobFilter, KeyState, PrincipalAcl, RolloutStatus, TokenSummary,
};
use halite_transport::PeerId;

use crate::authz::Who;
use crate::core::registry::AcceptedKeys;
use crate::store::{KeyRecord, PrincipalRecord, StoreError};

/// Who asked, to answer them and to decide what they may see.
#[derive(Debug)]
pub struct RequestFrom {
    pub peer: PeerId,
    pub request_id: u64,
    pub principal: String,
    /// `None` for root.
    pub acl: Option<Arc<PrincipalAcl>>,
}

impl RequestFrom {
    pub fn who(&self) -> Who<'_> {
        Who { name: &self.principal, acl: self.acl.as_deref() }
    }
}

/// An administrative request's store calls, and who asked.
pub struct AdminAsk {
    pub from: RequestFrom,
    pub call: AdminCall,
    /// When it was decided (wall, ms): what its calls stamp, so a row's times agree with what
    /// the decision computed from them (a token's `created_at_ms` and its expiry).
    pub at_ms: u64,
}

/// A job listing: the newest `limit` jobs the asker may see that pass `filter`.
pub struct JobsAsk {
    pub from: RequestFrom,
    pub limit: u32,
    pub filter: JobFilter,
}

/// What an administrative request needs of the store, already decided and allowed.
#[derive(Debug)]
pub enum AdminCall {
    /// Registers a principal (or replaces its key and ACL), then rereads every principal.
    PutPrincipal(PrincipalRecord),
    /// Removes a principal, then rereads every principal.
    RemovePrincipal { name: String },
    /// Hands what `from` created to `to`.
    TransferOwner { from: String, to: String },
    /// Every key (the request's pattern picks among them).
    ListKeys { pattern: String },
    /// Moves the keys matching `pattern` whose state is in `from` to `to` (deletes them, and
    /// their minions' entries, without one), then rereads the accepted keys.
    ChangeKeys { pattern: String, from: Vec<KeyState>, to: Option<KeyState> },
    /// Accepts a key for an id unless the id has another key not denied.
    PreseedKey(KeyRecord),
    /// Records an enrollment token (by its hash) unless the minion has an accepted key and
    /// the token was not asked to replace it.
    CreateToken(NewToken),
    /// Stores a rollout's change first when there is one, then reads the job.
    ReadJob { jid: String, then: JobRead, change: Option<RolloutStatus> },
    /// Records a gateway token (by its hash) acting as `acting_as`.
    CreateApiToken { token: Secret, acting_as: String, owner: String, expires_at_ms: Option<u64> },
    /// The gateway tokens of `owner`, or everyone's.
    ListApiTokens { owner: Option<String> },
    /// Deletes a gateway token (of `owner` when given), naming whom it acted as.
    RevokeApiToken { id: String, owner: Option<String> },
    /// The enrollment tokens of `owner`, or everyone's.
    ListTokens { owner: Option<String> },
    /// Deletes an enrollment token (of `owner` when given).
    RevokeToken { id: String, owner: Option<String> },
    /// A page of the audit trail.
    AuditList { filter: halite_protocol::message::AuditFilter, after: Option<i64>, limit: u32 },
    /// A check of every audit chain, each at least as long as this master knows its own is.
    AuditVerify { known_heads: std::collections::BTreeMap<String, u64> },
    /// What an audit export starts with.
    AuditHeader,
}

/// An enrollment token to record; the token itself goes only to the client.
#[derive(Debug)]
pub struct NewToken {
    pub token: Secret,
    pub minion: String,
    pub expires_at_ms: u64,
    pub replace: bool,
    pub owner: String,
}

/// A token to hand out once: only its hash is stored, and it never shows in `Debug` output.
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// What a job read answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRead {
    /// The job as the asker may see it (a show, a watch, a pause or resume).
    Show,
    /// A pause or resume of a job no longer live: that it has finished, once it is known the
    /// asker may see it (unknown otherwise).
    Finished,
}

/// Whether a write that checks something first was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    Written,
    /// The id has another key (a preseed) or an accepted one (a token not made to replace it).
    OtherKey,
}

/// A job read, after the rollout change stored first if there was one.
#[derive(Debug)]
pub struct JobReadDone {
    pub jid: String,
    pub then: JobRead,
    pub changed: Option<(RolloutStatus, Result<(), StoreError>)>,
    pub read: Result<Option<JobDetail>, StoreError>,
}

/// What the store answered an [`AdminCall`], with what the answer needs.
#[derive(Debug)]
pub enum AdminDone {
    PrincipalPut {
        record: PrincipalRecord,
        principals: Result<Vec<PrincipalRecord>, StoreError>,
    },
    /// `None`: there was no such principal.
    PrincipalRemoved {
        name: String,
        principals: Result<Option<Vec<PrincipalRecord>>, StoreError>,
    },
    OwnerTransferred {
        from: String,
        to: String,
        moved: Result<u64, StoreError>,
    },
    Keys {
        pattern: String,
        keys: Result<Vec<KeyRecord>, StoreError>,
    },
    /// The keys changed (as they were before), in order, then either the accepted keys reread
    /// or the failure that stopped the changes.
    KeysChanged {
        to: Option<KeyState>,
        changed: Vec<KeyRecord>,
        accepted: Result<AcceptedKeys, StoreError>,
    },
    KeyPreseeded {
        record: KeyRecord,
        stored: Result<Checked, StoreError>,
    },
    TokenCreated {
        token: NewToken,
        stored: Result<Checked, StoreError>,
    },
    /// The rollout change stored first (and how), then the job read (not read if the change
    /// failed).
    JobRead(Box<JobReadDone>),
    ApiTokenCreated {
        token: Secret,
        acting_as: String,
        owner: String,
        expires_at_ms: Option<u64>,
        stored: Result<(), StoreError>,
    },
    ApiTokens(Result<Vec<ApiTokenInfo>, StoreError>),
    /// Whether there was such a token, and whom it acted as (read before it was deleted).
    ApiTokenRevoked {
        id: String,
        acting_as: Option<String>,
        revoked: Result<bool, StoreError>,
    },
    Tokens(Result<Vec<TokenSummary>, StoreError>),
    Audit(Result<Vec<halite_protocol::audit::AuditRecord>, StoreError>),
    AuditVerified(Result<halite_protocol::message::AuditVerification, StoreError>),
    AuditHeader(Result<halite_protocol::audit::ExportHeader, StoreError>),
    TokenRevoked {
        id: String,
        revoked: Result<bool, StoreError>,
    },
}
