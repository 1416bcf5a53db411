//! The one decision point: "may this asker do this action?" over a closed set of actions,
//! answered with what is granted or a typed refusal. Every entry reaches it: a networked client,
//! the gateway's in-process sessions, a minion's `peer.publish`, another master.
//!
//! Requests are first classified ([`RequestKind::of`], an exhaustive match over every request
//! variant, so a new request cannot be added without deciding what it is); the handler then
//! loads the facts the decision needs (a job's caller, function and targets; a deployment's
//! server) and asks [`Policy::decide`]. Nothing else in the master compares principals, ACLs or
//! tenants.

use std::collections::BTreeMap;

use halite_protocol::message::DEPLOY_FUNCTION;
use halite_protocol::message::{ErrorKind, PrincipalAcl, RequestBody, Value};

use super::publish;
use crate::acl::PeerRule;
use crate::core::registry::Registry;
use crate::request_error::RequestError;

/// Who asks.
#[derive(Debug, Clone, Copy)]
pub enum Asker<'a> {
    /// The root principal (`root.key`).
    Root,
    /// A registered principal: an administrator, a narrow one, or a tenant's.
    Principal {
        /// Its name.
        name: &'a str,
        /// Its ACL.
        acl: &'a PrincipalAcl,
    },
    /// An accepted minion, through `peer.publish` (the `[[peers]]` rules).
    MinionPeer {
        /// Its authenticated id.
        id: &'a str,
    },
    /// Another master of the cluster, whose announcement was authenticated by the cluster key.
    ClusterPeer,
}

impl<'a> Asker<'a> {
    /// A client session's asker: root has no ACL.
    pub fn client(name: &'a str, acl: Option<&'a PrincipalAcl>) -> Self {
        match acl {
            None => Asker::Root,
            Some(acl) => Asker::Principal { name, acl },
        }
    }

    /// Root or an administrator.
    fn sees_all(&self) -> bool {
        match self {
            Asker::Root => true,
            Asker::Principal { acl, .. } => acl.admin,
            Asker::MinionPeer { .. } | Asker::ClusterPeer => false,
        }
    }
}

/// A job as decisions need it.
#[derive(Debug, Clone, Copy)]
pub struct JobFacts<'a> {
    /// Who published it (`root`, a principal's name, `minion:<id>`).
    pub caller: &'a str,
    /// Its function.
    pub function: &'a str,
    /// Every targeted minion.
    pub minions: &'a [&'a str],
}

/// What a bus event is about, as the decision to deliver it needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum About<'a> {
    /// A job's event (`halite/job/<jid>/…`): whether the asker sees that job, as
    /// [`Action::SeeJob`] decided it (a job no longer live is seen by no one but root and
    /// administrators).
    Job {
        /// Whether the asker sees the job.
        seen: bool,
    },
    /// A deployment's event (`halite/deployment/<id>/…`): its server and owner, as it carries them.
    Deployment {
        /// The server it configures.
        server: Option<&'a str>,
        /// The principal that created it.
        owner: Option<&'a str>,
    },
    /// A deployment group's event (`halite/deployment_group/<id>/…`): its owner.
    Group {
        /// The principal that created it.
        owner: Option<&'a str>,
    },
    /// Anything else: a minion's event, a key's, an engine's, the bus's own.
    Other,
}

impl<'a> About<'a> {
    /// What an event is about, from its tag and data; `sees_job` tells, for a job's event,
    /// whether the asker sees the job of that jid (asked only for a job's event).
    pub fn of(tag: &'a str, data: &'a Value, sees_job: impl FnOnce(&str) -> bool) -> Self {
        let field = |name: &str| data.get(name).and_then(Value::as_str);
        let mut parts = tag.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("halite"), Some("job"), Some(jid)) => About::Job { seen: sees_job(jid) },
            (Some("halite"), Some("deployment"), Some(_)) => {
                About::Deployment { server: field("server_id"), owner: field("owner") }
            }
            (Some("halite"), Some("deployment_group"), Some(_)) => About::Group { owner: field("owner") },
            _ => About::Other,
        }
    }
}

/// Everything that can be asked. Closed: a new kind of request needs a new variant here, and
/// a decision for every kind of asker in [`Policy::decide`].
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// Keys, enrollment tokens, principals, gateway tokens.
    Administer,
    /// Minion and job listings: anyone in session may ask; each answer holds only what the asker
    /// may see.
    List,
    /// An event in the asker's own `engine/<name>/` namespace.
    FireEvent,
    /// Enrollment tokens: create one for `minion` (`replace`: one that replaces its accepted
    /// key), or list and revoke one's own (`minion` is `None`).
    Enroll {
        /// The id the token would enroll.
        minion: Option<&'a str>,
        /// Whether it would replace the id's accepted key.
        replace: bool,
    },
    /// Read or watch a job.
    SeeJob(JobFacts<'a>),
    /// Cancel, pause or resume a job.
    ControlJob(JobFacts<'a>),
    /// Subscribe to bus events matching these patterns.
    Subscribe(&'a [String]),
    /// Run a function on resolved targets (never empty).
    Publish {
        /// The function.
        function: &'a str,
        /// Its keyword arguments (rules may constrain them).
        kwargs: &'a BTreeMap<String, Value>,
        /// The resolved targets.
        targets: &'a [&'a str],
    },
    /// Software configs in general (create, list): any rule for `deploy.apply`.
    UseConfigs,
    /// A deployment on this server (create, show, update, delete, its metadata).
    Deploy {
        /// The minion.
        server: &'a str,
    },
    /// See and act on something an engine created (a config, deployment, group, enrollment or
    /// gateway token) whose creator is `owner`.
    Own {
        /// Its creator.
        owner: &'a str,
    },
    /// List or delete such things in bulk: granted [`Granted::OwnedBy`] the asker alone, or all.
    ListOwned,
    /// Receive a bus event (the asker's subscription patterns aside).
    Receive {
        /// Its tag.
        tag: &'a str,
        /// What it is about.
        about: About<'a>,
    },
    /// Read the master's metrics (fleet-wide figures).
    ReadMetrics,
    /// Read the audit trail: root and administrators all of it, a tenant's principal its
    /// tenant's records, any other principal its own ([`Granted::AuditOf`]).
    ReadAudit,
    /// Apply another master's announcement.
    Announce,
}

/// What a decision grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    /// The action, as asked.
    Yes,
    /// A publish, and the function globs its job may reach (`None`: no limit).
    Reach(Option<Vec<String>>),
    /// A listing or bulk change of owned things, narrowed to those this principal created.
    OwnedBy(String),
    /// An audit listing, narrowed to one tenant's records or one principal's.
    AuditOf {
        /// Only this tenant's records.
        tenant: Option<String>,
        /// Only the records of this principal's requests.
        principal: Option<String>,
    },
}

/// Why not. `NotFound` where saying more would reveal what the asker may not see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The object is not the asker's to know of: answered as missing.
    #[error("{0}")]
    NotFound(String),
    /// Known to the asker, but not its to do.
    #[error("{0}")]
    Forbidden(String),
    /// Malformed (a subscription too large).
    #[error("{0}")]
    BadRequest(String),
}

impl Denied {
    /// The protocol's error kind for this refusal.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Denied::NotFound(_) => ErrorKind::NotFound,
            Denied::Forbidden(_) => ErrorKind::Forbidden,
            Denied::BadRequest(_) => ErrorKind::BadRequest,
        }
    }

    /// The message.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

impl From<Denied> for RequestError {
    fn from(denied: Denied) -> Self {
        RequestError::new(denied.kind(), denied.message())
    }
}

/// What kind of action a request is, before its facts are loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// [`Action::Administer`].
    Administer,
    /// [`Action::List`].
    List,
    /// [`Action::FireEvent`].
    FireEvent,
    /// [`Action::Enroll`]: enrollment tokens (each principal lists and revokes its own).
    Enroll,
    /// [`Action::SeeJob`], once the job is known.
    SeeJob,
    /// [`Action::ControlJob`], once the job is known.
    ControlJob,
    /// [`Action::UseConfigs`] (configs are also owned by their creator).
    Configs,
    /// [`Action::Deploy`], once the server is known (groups: every member's server).
    Deployment,
    /// [`Action::ReadAudit`].
    ReadAudit,
}

impl RequestKind {
    /// Classifies a request. Exhaustive on purpose: no request is decided by default.
    pub fn of(body: &RequestBody) -> RequestKind {
        match body {
            RequestBody::KeyList { .. }
            | RequestBody::KeyAccept { .. }
            | RequestBody::KeyReject { .. }
            | RequestBody::KeyDelete { .. }
            | RequestBody::KeyPreseed { .. }
            | RequestBody::PrincipalAdd { .. }
            | RequestBody::PrincipalList
            | RequestBody::PrincipalRemove { .. }
            | RequestBody::OwnerTransfer { .. }
            | RequestBody::ApiTokenCreate { .. }
            | RequestBody::ApiTokenList
            | RequestBody::ApiTokenRevoke { .. } => RequestKind::Administer,
            RequestBody::TokenCreate { .. } | RequestBody::TokenList | RequestBody::TokenRevoke { .. } => {
                RequestKind::Enroll
            }
            RequestBody::MinionList { .. } | RequestBody::JobList { .. } => RequestKind::List,
            RequestBody::EventFire { .. } => RequestKind::FireEvent,
            RequestBody::JobShow { .. } | RequestBody::JobWatch { .. } => RequestKind::SeeJob,
            RequestBody::JobPause { .. } | RequestBody::JobResume { .. } => RequestKind::ControlJob,
            RequestBody::ConfigCreate(_)
            | RequestBody::ConfigShow { .. }
            | RequestBody::ConfigList { .. }
            | RequestBody::ConfigDelete { .. } => RequestKind::Configs,
            RequestBody::DeploymentCreate(_)
            | RequestBody::DeploymentGroupCreate(_)
            | RequestBody::DeploymentGroupShow { .. }
            | RequestBody::DeploymentGroupUpdate { .. }
            | RequestBody::DeploymentUpdate { .. }
            | RequestBody::DeploymentShow { .. }
            | RequestBody::DeploymentList { .. }
            | RequestBody::DeploymentDelete { .. }
            | RequestBody::ServerConfigs { .. } => RequestKind::Deployment,
            RequestBody::AuditList { .. } => RequestKind::ReadAudit,
            // Whole chains: every tenant's records.
            RequestBody::AuditVerify | RequestBody::AuditHeader => RequestKind::Administer,
        }
    }
}

/// Most patterns one subscription may hold.
pub const MAX_PATTERNS: usize = 64;
/// Longest pattern, in bytes (tags are at most 255 bytes).
pub const MAX_PATTERN_LEN: usize = 255;

/// The master's rules and what it knows of minions: everything a decision reads.
pub struct Policy<'a> {
    pub nodegroups: &'a BTreeMap<String, String>,
    pub peers: &'a [PeerRule],
    pub registry: &'a Registry,
}

impl Policy<'_> {
    /// May `asker` do `action`?
    pub fn decide(&self, asker: &Asker<'_>, action: &Action<'_>) -> Result<Granted, Denied> {
        match (asker, action) {
            // Another master acts only through announcements, and announcements come only from
            // masters: the cluster key authenticated it before it got here.
            (Asker::ClusterPeer, Action::Announce) => Ok(Granted::Yes),
            (_, Action::Announce) => Err(Denied::Forbidden("only a master of the cluster announces changes".into())),
            (Asker::ClusterPeer, _) => Err(Denied::Forbidden("another master may only announce changes".into())),
            // A minion may only publish on its peers, within the `[[peers]]` rules naming it.
            (Asker::MinionPeer { id }, Action::Publish { .. }) if !self.has_peer_rule(id) => {
                Err(Denied::Forbidden(format!("no peer rule lets {id} publish jobs")))
            }
            (Asker::MinionPeer { .. }, Action::Publish { .. }) => self.publish(asker, action),
            (Asker::MinionPeer { id }, _) => {
                Err(Denied::Forbidden(format!("minion {id} may only publish on its peers")))
            }
            (_, Action::Publish { .. }) => self.publish(asker, action),
            (_, Action::Subscribe(patterns)) => check_subscription(asker, patterns),
            (_, Action::Receive { tag, about }) => self.receive(asker, tag, about),
            (asker, _) if asker.sees_all() => Ok(Granted::Yes),
            (Asker::Principal { acl, .. }, Action::ReadAudit) if acl.tenant.is_some() => {
                Ok(Granted::AuditOf { tenant: acl.tenant.clone(), principal: None })
            }
            (Asker::Principal { name, .. }, Action::ReadAudit) => {
                Ok(Granted::AuditOf { tenant: None, principal: Some((*name).to_owned()) })
            }
            (Asker::Principal { name, .. }, Action::Own { owner }) => {
                if owner == name {
                    Ok(Granted::Yes)
                } else {
                    Err(Denied::NotFound("no such object".into()))
                }
            }
            (Asker::Principal { name, .. }, Action::ListOwned) => Ok(Granted::OwnedBy((*name).to_owned())),
            (_, Action::ReadMetrics) => {
                Err(Denied::Forbidden("the master's metrics are for administrators (fleet-wide figures)".into()))
            }
            // What remains: a principal that is not an administrator.
            (_, Action::Administer) => Err(Denied::Forbidden("this principal may not administer the master".into())),
            (_, Action::List | Action::FireEvent) => Ok(Granted::Yes),
            (_, Action::Enroll { replace: true, .. }) => {
                Err(Denied::Forbidden("only an administrator may replace a minion's accepted key".into()))
            }
            (_, Action::Enroll { minion: None, .. }) => Ok(Granted::Yes),
            // An engine enrolls the servers it boots: ids it may deploy to, that have no accepted
            // key (a token for such an id would take the identity over).
            (Asker::Principal { acl, .. }, Action::Enroll { minion: Some(minion), .. }) => {
                if !self.rules_cover(acl, DEPLOY_FUNCTION, &[minion]) {
                    Err(Denied::Forbidden(format!(
                        "not allowed to enroll {minion} (needs admin, or a rule for deploy.apply on it)"
                    )))
                } else if self.registry.has_accepted(minion) {
                    Err(Denied::Forbidden(format!(
                        "{minion} already has an accepted key: only an administrator may enroll it again"
                    )))
                } else {
                    Ok(Granted::Yes)
                }
            }
            (Asker::Principal { name, acl }, Action::SeeJob(job)) => {
                if self.sees_job(name, acl, job) {
                    Ok(Granted::Yes)
                } else {
                    Err(Denied::NotFound("no such job".into()))
                }
            }
            (Asker::Principal { name, acl }, Action::ControlJob(job)) => {
                if !self.sees_job(name, acl, job) {
                    Err(Denied::NotFound("no such job".into()))
                } else if job.caller == *name || self.rules_cover(acl, job.function, job.minions) {
                    Ok(Granted::Yes)
                } else {
                    Err(Denied::Forbidden(
                        "only its publisher, an administrator or rules allowing its function on every target may change a job"
                            .into(),
                    ))
                }
            }
            (Asker::Principal { acl, .. }, Action::UseConfigs) => {
                if acl.rules.iter().any(|rule| crate::acl::any_glob(&rule.functions, DEPLOY_FUNCTION)) {
                    Ok(Granted::Yes)
                } else {
                    Err(Denied::Forbidden("not allowed to deploy (needs a rule for deploy.apply)".into()))
                }
            }
            (Asker::Principal { acl, .. }, Action::Deploy { server }) => {
                if self.rules_cover(acl, DEPLOY_FUNCTION, &[server]) {
                    Ok(Granted::Yes)
                } else {
                    Err(Denied::Forbidden(format!("not allowed to deploy on {server} (needs a rule for deploy.apply)")))
                }
            }
            (Asker::Root, _) => Ok(Granted::Yes),
        }
    }

    /// Whether a client receives an event: root everything; a principal what its `events` globs
    /// cover, an administrator all of that; any other principal within its tenant, a job's
    /// events if it sees the job, a deployment's or a group's only if it created it (and, for a
    /// deployment, may still deploy to its server).
    fn receive(&self, asker: &Asker<'_>, tag: &str, about: &About<'_>) -> Result<Granted, Denied> {
        let (name, acl) = match asker {
            Asker::Root => return Ok(Granted::Yes),
            Asker::Principal { name, acl } => (*name, *acl),
            Asker::MinionPeer { .. } | Asker::ClusterPeer => {
                return Err(Denied::Forbidden("only clients receive events".into()));
            }
        };
        let withheld = || Err(Denied::Forbidden("event withheld".into()));
        if !acl.events.iter().any(|p| halite_protocol::glob::matches(p, tag)) {
            return withheld();
        }
        if acl.admin {
            return Ok(Granted::Yes);
        }
        if let Some(tenant) = acl.tenant.as_deref() {
            if !tenant_may_receive(acl, tenant, name, tag) {
                return withheld();
            }
        }
        let receives = match *about {
            About::Job { seen } => seen,
            About::Deployment { server, owner } => {
                owner == Some(name) && server.is_some_and(|server| self.rules_cover(acl, DEPLOY_FUNCTION, &[server]))
            }
            About::Group { owner } => owner == Some(name),
            About::Other => true,
        };
        if receives {
            Ok(Granted::Yes)
        } else {
            withheld()
        }
    }

    /// A principal sees a job it published, or one whose every target lies in its view. A
    /// `deploy.apply` job of another principal never: it carries that principal's config and
    /// input values, which belong to their creator.
    fn sees_job(&self, name: &str, acl: &PrincipalAcl, job: &JobFacts<'_>) -> bool {
        if job.caller == name {
            return true;
        }
        if job.minions.is_empty() {
            return false;
        }
        if job.function == DEPLOY_FUNCTION {
            return false;
        }
        let view = super::TargetView::of_principal(Some(acl), self.nodegroups);
        job.minions.iter().all(|id| view.contains(id, self.registry.grains(id)))
    }

    /// Whether, for every one of `minions`, a rule of `acl` allows `function` there (within the
    /// principal's tenant).
    pub fn rules_cover(&self, acl: &PrincipalAcl, function: &str, minions: &[&str]) -> bool {
        !minions.is_empty()
            && minions.iter().all(|&minion| {
                let grains = self.registry.grains(minion);
                acl.in_tenant(minion)
                    && acl.rules.iter().any(|rule| {
                        crate::acl::any_glob(&rule.functions, function)
                            && crate::acl::all_within(&rule.targets, self.nodegroups, &[(minion, grains)])
                                .unwrap_or(false)
                    })
            })
    }

    fn has_peer_rule(&self, id: &str) -> bool {
        publish::peer_rules_of(self.peers, id).next().is_some()
    }

    fn publish(&self, asker: &Asker<'_>, action: &Action<'_>) -> Result<Granted, Denied> {
        let Action::Publish { function, kwargs, targets } = action else {
            return Err(Denied::BadRequest("not a publish".into()));
        };
        let resolved: Vec<(&str, &BTreeMap<String, Value>)> =
            targets.iter().map(|id| (*id, self.registry.grains(id))).collect();
        let rules = publish::Rules { nodegroups: self.nodegroups, peers: self.peers };
        let check = publish::Publish { function, kwargs, targets: &resolved };
        publish::authorize(asker, &rules, &check).map(Granted::Reach)
    }
}

/// Which bus events a tenant's principal may receive at all (its subscription and the job and
/// deployment checks aside): those about its own minions, its own engine events, and the
/// bus's own notices. Key events and other principals' engine events are never a tenant's.
fn tenant_may_receive(acl: &PrincipalAcl, tenant: &str, name: &str, tag: &str) -> bool {
    let mut parts = tag.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("minion"), Some(id), _) | (Some("halite"), Some("minion"), Some(id)) => acl.in_tenant(id),
        (Some("halite"), Some("job" | "deployment" | "deployment_group" | "bus"), _) => true,
        (Some("engine"), Some(principal), _) => principal == name,
        _ => {
            tracing::debug!(tenant, tag, "event outside a tenant's namespace withheld");
            false
        }
    }
}

/// Whether a subscription is allowed: bounded, and (for a principal) within its `events` globs,
/// so a client never waits on events it will never get.
fn check_subscription(asker: &Asker<'_>, patterns: &[String]) -> Result<Granted, Denied> {
    if patterns.len() > MAX_PATTERNS {
        return Err(Denied::BadRequest(format!(
            "at most {MAX_PATTERNS} patterns per subscription ({} given)",
            patterns.len()
        )));
    }
    if let Some(long) = patterns.iter().find(|p| p.len() > MAX_PATTERN_LEN) {
        let start: String = long.chars().take(32).collect();
        return Err(Denied::BadRequest(format!("pattern {start:?}… is longer than {MAX_PATTERN_LEN} bytes")));
    }
    let acl = match asker {
        Asker::Root => return Ok(Granted::Yes),
        Asker::Principal { acl, .. } => acl,
        Asker::MinionPeer { .. } | Asker::ClusterPeer => {
            return Err(Denied::Forbidden("only clients subscribe to events".into()));
        }
    };
    match patterns.iter().find(|p| !acl.events.iter().any(|allowed| halite_protocol::glob::covers(allowed, p))) {
        Some(pattern) => Err(Denied::Forbidden(format!(
            "not allowed to subscribe to {pattern:?}: this principal may read only events matching {:?}",
            acl.events
        ))),
        None => Ok(Granted::Yes),
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::{
        DeploymentUpdate, NewDeployment, NewDeploymentGroup, NewSoftwareConfig, PrincipalRule,
    };

    use super::*;

    /// Every request there is, one of each.
    fn every_request() -> Vec<RequestBody> {
        let config = NewSoftwareConfig {
            name: "c".into(),
            group: "script".into(),
            config: Value::from("true"),
            inputs: Vec::new(),
            outputs: Vec::new(),
            options: None,
        };
        vec![
            RequestBody::KeyList { pattern: "*".into() },
            RequestBody::KeyAccept { pattern: "*".into() },
            RequestBody::KeyReject { pattern: "*".into() },
            RequestBody::KeyDelete { pattern: "*".into() },
            RequestBody::KeyPreseed { id: "web1".into(), public_key: vec![1; 32] },
            RequestBody::TokenCreate { minion: "web1".into(), ttl_ms: 1, replace: true },
            RequestBody::MinionList { pattern: "*".into(), after: None, limit: None },
            RequestBody::JobList { limit: 1, filter: Default::default() },
            RequestBody::JobShow { jid: "1".into() },
            RequestBody::JobWatch { jid: "1".into() },
            RequestBody::EventFire { tag: "x".into(), data: Value::Null },
            RequestBody::JobPause { jid: "1".into() },
            RequestBody::JobResume { jid: "1".into() },
            RequestBody::PrincipalAdd { name: "p".into(), public_key: vec![1; 32], acl: PrincipalAcl::default() },
            RequestBody::PrincipalList,
            RequestBody::PrincipalRemove { name: "p".into() },
            RequestBody::OwnerTransfer { from: "root".into(), to: "p".into() },
            RequestBody::ApiTokenCreate { principal: "p".into(), ttl_ms: None },
            RequestBody::ApiTokenList,
            RequestBody::ApiTokenRevoke { id: "t".into() },
            RequestBody::TokenList,
            RequestBody::TokenRevoke { id: "t".into() },
            RequestBody::ConfigCreate(config),
            RequestBody::ConfigShow { id: "c".into() },
            RequestBody::ConfigList { limit: 1 },
            RequestBody::ConfigDelete { id: "c".into() },
            RequestBody::DeploymentCreate(NewDeployment { server_id: "web1".into(), ..NewDeployment::default() }),
            RequestBody::DeploymentGroupCreate(NewDeploymentGroup::default()),
            RequestBody::DeploymentGroupShow { id: "g".into() },
            RequestBody::DeploymentGroupUpdate { id: "g".into(), update: Default::default() },
            RequestBody::DeploymentUpdate { id: "d".into(), update: DeploymentUpdate::default() },
            RequestBody::DeploymentShow { id: "d".into() },
            RequestBody::DeploymentList { server_id: None },
            RequestBody::DeploymentDelete { id: "d".into() },
            RequestBody::ServerConfigs { server_id: "web1".into() },
            RequestBody::AuditList { filter: Default::default(), after: None, limit: 10 },
            RequestBody::AuditVerify,
            RequestBody::AuditHeader,
        ]
    }

    fn rule(targets: &str, functions: &[&str]) -> PrincipalRule {
        PrincipalRule {
            targets: targets.into(),
            functions: functions.iter().map(|f| (*f).to_owned()).collect(),
            args: BTreeMap::new(),
        }
    }

    fn admin_acl() -> PrincipalAcl {
        PrincipalAcl { admin: true, events: vec!["*".into()], ..PrincipalAcl::default() }
    }

    /// Rules as wide as can be, confined to proja-*.
    fn tenant_acl() -> PrincipalAcl {
        PrincipalAcl {
            rules: vec![rule("*", &["*"])],
            events: vec!["*".into()],
            tenant: Some("proja".into()),
            ..PrincipalAcl::default()
        }
    }

    /// Every kind of asker, in the order of [`verdicts`]: root, `admin`, `narrow`, the tenant
    /// `proja`, the minion peer web2, another master.
    fn every_asker<'a>(admin: &'a PrincipalAcl, narrow: &'a PrincipalAcl, tenant: &'a PrincipalAcl) -> [Asker<'a>; 6] {
        [
            Asker::Root,
            Asker::Principal { name: "admin", acl: admin },
            Asker::Principal { name: "narrow", acl: narrow },
            Asker::Principal { name: "proja", acl: tenant },
            Asker::MinionPeer { id: "web2" },
            Asker::ClusterPeer,
        ]
    }

    /// What each kind of asker gets, in the order root, admin, narrow, tenant, minion peer,
    /// cluster peer: `Y` granted, `F` forbidden, `N` answered as not found, `B` bad request.
    fn verdicts(policy: &Policy<'_>, askers: &[Asker<'_>], action: &Action<'_>) -> String {
        askers
            .iter()
            .map(|asker| match policy.decide(asker, action) {
                Ok(_) => 'Y',
                Err(Denied::Forbidden(_)) => 'F',
                Err(Denied::NotFound(_)) => 'N',
                Err(Denied::BadRequest(_)) => 'B',
            })
            .collect()
    }

    #[test]
    fn every_request_of_every_kind_of_asker_is_decided_here() {
        let admin = admin_acl();
        // Sees web*, may ping there and deploy there, may run nothing else.
        let narrow = PrincipalAcl {
            rules: vec![rule("web*", &["test.ping", "deploy.apply"])],
            events: vec!["halite/job/*".into(), "halite/deployment/*".into(), "halite/deployment_group/*".into()],
            ..PrincipalAcl::default()
        };
        let tenant = tenant_acl();
        let askers = every_asker(&admin, &narrow, &tenant);
        let registry = Registry::default();
        let nodegroups = BTreeMap::new();
        let peers =
            [PeerRule { minions: vec!["web2".into()], target: "web*".into(), functions: vec!["test.ping".into()] }];
        let policy = Policy { nodegroups: &nodegroups, peers: &peers, registry: &registry };

        // Root's cmd.run on web1: the narrow principal sees it (web1 is in its view), may not
        // steer it (cmd.run is not its function); the tenant does not even see it.
        let roots_job = JobFacts { caller: "root", function: "cmd.run", minions: &["web1"] };
        let tenants_job = JobFacts { caller: "proja", function: "test.ping", minions: &["proja-web1"] };
        let expected = |kind: RequestKind| match kind {
            RequestKind::Administer => "YYFFFF",
            RequestKind::List | RequestKind::FireEvent => "YYYYFF",
            RequestKind::Enroll => "YYYFFF",
            RequestKind::SeeJob => "YYYNFF",
            RequestKind::ControlJob => "YYFNFF",
            RequestKind::Configs => "YYYYFF",
            RequestKind::Deployment => "YYYFFF",
            RequestKind::ReadAudit => "YYYYFF",
        };
        for body in every_request() {
            let kind = RequestKind::of(&body);
            let action = match kind {
                RequestKind::Administer => Action::Administer,
                RequestKind::List => Action::List,
                RequestKind::FireEvent => Action::FireEvent,
                RequestKind::Enroll => Action::Enroll { minion: Some("web1"), replace: false },
                RequestKind::SeeJob => Action::SeeJob(roots_job),
                RequestKind::ControlJob => Action::ControlJob(roots_job),
                RequestKind::Configs => Action::UseConfigs,
                RequestKind::Deployment => Action::Deploy { server: "web1" },
                RequestKind::ReadAudit => Action::ReadAudit,
            };
            assert_eq!(verdicts(&policy, &askers, &action), expected(kind), "{body:?} as {kind:?}");
        }

        // Only an administrator makes a token that replaces a key.
        let replacing = Action::Enroll { minion: Some("web1"), replace: true };
        assert_eq!(verdicts(&policy, &askers, &replacing), "YYFFFF");
        // Another's deploy.apply job carries its config and inputs: only root and administrators
        // see it, even where the asker may deploy.
        let roots_deployment = JobFacts { caller: "root", function: DEPLOY_FUNCTION, minions: &["web1"] };
        assert_eq!(verdicts(&policy, &askers, &Action::SeeJob(roots_deployment)), "YYNNFF");
        // A tenant controls its own job; the narrow principal does not see it.
        assert_eq!(verdicts(&policy, &askers, &Action::ControlJob(tenants_job)), "YYNYFF");
        // Deploying into the tenant: only the tenant (and root and admins).
        assert_eq!(verdicts(&policy, &askers, &Action::Deploy { server: "proja-web1" }), "YYFYFF");

        // Publishing test.ping on web1: the minion peer by its [[peers]] rule, the tenant never
        // outside its namespace; an administrator runs only what its rules allow (it has none:
        // administering is not running code); cmd.run only by root.
        let kwargs = BTreeMap::new();
        let ping = Action::Publish { function: "test.ping", kwargs: &kwargs, targets: &["web1"] };
        assert_eq!(verdicts(&policy, &askers, &ping), "YFYFYF");
        let run = Action::Publish { function: "cmd.run", kwargs: &kwargs, targets: &["web1"] };
        assert_eq!(verdicts(&policy, &askers, &run), "YFFFFF");
        let inside = Action::Publish { function: "cmd.run", kwargs: &kwargs, targets: &["proja-web1"] };
        assert_eq!(verdicts(&policy, &askers, &inside), "YFFYFF");
        let unruled = Asker::MinionPeer { id: "db1" };
        let refused = policy.decide(&unruled, &ping).unwrap_err();
        assert!(refused.message().contains("no peer rule"), "{refused}");

        // Subscriptions within each one's events ACL; announcements only from the cluster.
        let job_events = ["halite/job/*".to_owned()];
        assert_eq!(verdicts(&policy, &askers, &Action::Subscribe(&job_events)), "YYYYFF");
        let everything = ["*".to_owned()];
        assert_eq!(verdicts(&policy, &askers, &Action::Subscribe(&everything)), "YYFYFF");
        assert_eq!(verdicts(&policy, &askers, &Action::Announce), "FFFFFY");

        // What an engine created is its creator's (and root's and administrators'); to anyone
        // else it does not exist. Listings are narrowed to one's own.
        assert_eq!(verdicts(&policy, &askers, &Action::Own { owner: "narrow" }), "YYYNFF");
        assert_eq!(verdicts(&policy, &askers, &Action::Own { owner: "root" }), "YYNNFF");
        assert_eq!(verdicts(&policy, &askers, &Action::ListOwned), "YYYYFF");
        let listed = |asker: &Asker<'_>| policy.decide(asker, &Action::ListOwned).unwrap();
        assert_eq!(listed(&askers[1]), Granted::Yes, "an administrator lists everyone's");
        assert_eq!(listed(&askers[2]), Granted::OwnedBy("narrow".into()));
        assert_eq!(listed(&askers[3]), Granted::OwnedBy("proja".into()));
        // Fleet-wide figures are for root and administrators.
        assert_eq!(verdicts(&policy, &askers, &Action::ReadMetrics), "YYFFFF");
    }

    #[test]
    fn events_reach_only_those_who_may_see_what_they_are_about() {
        let admin = admin_acl();
        let narrow = PrincipalAcl {
            rules: vec![rule("web*", &["deploy.apply"])],
            events: vec!["halite/**".into()],
            ..PrincipalAcl::default()
        };
        let tenant = tenant_acl();
        let askers = every_asker(&admin, &narrow, &tenant);
        let registry = Registry::default();
        let nodegroups = BTreeMap::new();
        let policy = Policy { nodegroups: &nodegroups, peers: &[], registry: &registry };
        let receive = |tag: &'static str, data: Value, sees: bool| {
            let about = About::of(tag, &data, |_| sees);
            verdicts(&policy, &askers, &Action::Receive { tag, about })
        };
        let deployment = |server: &str, owner: &str| serde_json::json!({ "server_id": server, "owner": owner });
        // A deployment's events (its inputs and outputs) go to its creator alone, while it may
        // still deploy there.
        assert_eq!(receive("halite/deployment/d1/COMPLETE", deployment("web1", "narrow"), false), "YYYFFF");
        assert_eq!(receive("halite/deployment/d1/COMPLETE", deployment("web1", "root"), false), "YYFFFF");
        assert_eq!(receive("halite/deployment/d1/COMPLETE", deployment("db1", "narrow"), false), "YYFFFF");
        assert_eq!(receive("halite/deployment/d2/DELETED", deployment("proja-web1", "proja"), false), "YYFYFF");
        assert_eq!(
            receive("halite/deployment/d3/relayed", serde_json::json!({}), false),
            "YYFFFF",
            "no owner: no one's"
        );
        let group = |owner: &str| serde_json::json!({ "id": "g1", "owner": owner });
        assert_eq!(receive("halite/deployment_group/g1/COMPLETE", group("narrow"), false), "YYYFFF");
        assert_eq!(receive("halite/deployment_group/g1/COMPLETE", group("proja"), false), "YYFYFF");
        // A job's events go to those who see the job.
        assert_eq!(receive("halite/job/1/ret/web1", Value::Null, true), "YYYYFF");
        assert_eq!(receive("halite/job/1/ret/web1", Value::Null, false), "YYFFFF");
        // A minion's events: within the events globs, and a tenant's own minions only.
        assert_eq!(receive("minion/web1/app/ok", Value::Null, false), "YYFFFF");
        assert_eq!(receive("minion/proja-web1/app/ok", Value::Null, false), "YYFYFF");
        assert_eq!(receive("halite/key/web1/accepted", Value::Null, false), "YYYFFF");
    }
}
