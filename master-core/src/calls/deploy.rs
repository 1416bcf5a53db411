//! What a request for configs or deployments asks of the store, and what the store answered.
//!
//! A request is decided without the store (`deploy/mod.rs`); its store calls are a
//! [`DeployCall`], made by the loop (`store_calls/requests.rs`), and the [`DeployDone`] goes on in
//! `DeployDesk::deploy_answered`, which may ask again: a push reads its config and server, its
//! job is stored (`Ask::InsertDeploymentJob`), then the deployment that names the job.

use halite_protocol::message::{DeploymentUpdate, MinionJobState, SoftwareConfig, Value};
use serde_json::Map;

use crate::authz::Who;
use crate::calls::admin::RequestFrom;
use crate::store::{ConfigRecord, DeploymentRecord, StoreError};

/// A deployment request's store calls, and who asked.
pub struct DeployAsk {
    pub from: Requester,
    pub call: DeployCall,
}

/// Who waits on a deployment request.
pub enum Requester {
    /// A client: answered.
    Client(RequestFrom),
    /// A deployment group, starting one of its members: told (`GroupDesk::member_pushed`).
    Member(Member),
}

/// A group's member being started.
#[derive(Debug, Clone)]
pub struct Member {
    pub group: String,
    pub server: String,
    /// Who created the group: its members' deployments are theirs.
    pub principal: String,
}

impl Requester {
    /// The client the request is checked against; none for a group's member, which is
    /// started as the group decided (checked when the group was made: its creator may deploy
    /// to each server and read its config), so nothing a member asks passes a check.
    pub fn client(&self) -> Option<Who<'_>> {
        match self {
            Requester::Client(from) => Some(from.who()),
            Requester::Member(_) => None,
        }
    }

    /// The principal the request is made as (the caller of a pushed deployment's job).
    pub fn principal(&self) -> &str {
        match self {
            Requester::Client(from) => &from.principal,
            Requester::Member(member) => &member.principal,
        }
    }
}

/// What a request for configs or deployments needs of the store, already allowed.
#[derive(Debug)]
pub enum DeployCall {
    PutConfig {
        config: Box<SoftwareConfig>,
        owner: String,
    },
    ReadConfig {
        id: String,
    },
    ListConfigs {
        owner: Option<String>,
        limit: u32,
    },
    DeleteConfig {
        id: String,
        owner: Option<String>,
    },
    ReadDeployment {
        id: String,
        then: DeploymentRead,
    },
    /// Deployments, of one server when given.
    ListDeployments {
        server_id: Option<String>,
        then: Listing,
    },
    DeleteDeployment(Box<DeploymentRecord>),
    /// What a push needs read: its config, and whether anyone is enrolling as its server.
    ReadPush(Box<Push>),
    /// A deployment stored: pushed (its job stored first) or finished without a job.
    PutDeployment {
        write: Box<DeploymentWrite>,
        pushed: bool,
    },
}

/// What a deployment read is for.
#[derive(Debug)]
pub enum DeploymentRead {
    Show,
    Delete,
    Update(DeploymentUpdate),
    /// A group's kept member run again with the group's config, inputs and action.
    Restart(DeploymentUpdate),
}

/// What a deployment listing answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// The deployments themselves.
    Deployments,
    /// Their derived configs, oldest first (what a server's agent polls for).
    ServerConfigs,
}

/// A deployment to push: its job waits on what the store says of its config and server.
#[derive(Debug)]
pub struct Push {
    pub record: DeploymentRecord,
    /// An existing deployment run again: its previous job is superseded.
    pub update: bool,
    /// The config must be one the asker may read (a client's create, or its update naming a
    /// config; a group checked its config once, when it was made).
    pub config_checked: bool,
}

/// A deployment to store: new, or updated from the row read while it waited on `read_on`
/// (stored only if that row is still there on that job).
#[derive(Debug)]
pub struct DeploymentWrite {
    pub record: DeploymentRecord,
    pub read_on: Option<String>,
}

/// What a push needs read.
#[derive(Debug)]
pub struct PushInputs {
    pub config: Option<ConfigRecord>,
    /// Nobody is enrolling as the server (no key of any state, no outstanding token): its job
    /// waits less (`deployment_unenrolled_wait_secs`).
    pub server_unknown: bool,
}

/// What the store answered a [`DeployCall`], with what the answer needs.
// Made once per store call and moved at once into its continuation: boxing the larger
// variants would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum DeployDone {
    ConfigPut {
        config: Box<SoftwareConfig>,
        stored: Result<(), StoreError>,
    },
    Config {
        id: String,
        read: Result<Option<ConfigRecord>, StoreError>,
    },
    Configs(Result<Vec<SoftwareConfig>, StoreError>),
    ConfigDeleted {
        id: String,
        deleted: Result<bool, StoreError>,
    },
    Deployment {
        id: String,
        then: DeploymentRead,
        read: Result<Option<DeploymentRecord>, StoreError>,
    },
    Deployments {
        then: Listing,
        read: Result<Vec<DeploymentRecord>, StoreError>,
    },
    DeploymentDeleted {
        record: Box<DeploymentRecord>,
        deleted: Result<bool, StoreError>,
    },
    PushRead {
        push: Box<Push>,
        read: Result<PushInputs, StoreError>,
    },
    /// `Ok(false)`: an update whose deployment another master deleted or updated meanwhile.
    DeploymentPut {
        record: Box<DeploymentRecord>,
        pushed: bool,
        stored: Result<bool, StoreError>,
    },
}

/// A `deploy.apply` job that ended, and what was known of it before the store was read (made and
/// decided by `deploy/ending.rs`).
#[derive(Debug)]
pub struct DeploymentEnd {
    pub jid: String,
    /// The server whose slot ended (the job's one target).
    pub minion: String,
    /// How the job ended.
    pub state: MinionJobState,
    /// The deployment this master published the job for (`None`: published on another master,
    /// or adopted before that master recorded which deployment the job carries).
    pub id: Option<String>,
    /// What the hook signalled, if it did.
    pub signal: Option<Map<String, Value>>,
    /// What the job's return said went wrong, for a job that sent no signal.
    pub error: Option<String>,
    /// Set when the job expired after the short wait for a server nobody was enrolling as: how
    /// short (ms). The reason then says the server never enrolled, if it still has no key.
    pub short_wait_ms: Option<u64>,
    /// The deployment as an earlier write of this end left it, if that write's outcome is
    /// unknown: found stored as written, the write was made and what follows it is still due.
    pub written: Option<DeploymentRecord>,
}

/// A `deploy.apply` job's end whose deployment is still to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct EndToRecord {
    pub jid: String,
    /// The deployment, if this master knows it.
    pub id: Option<String>,
    /// The deployment as a write whose outcome is unknown left it (see
    /// `DeploymentEnd::written`).
    pub written: Option<DeploymentRecord>,
}
