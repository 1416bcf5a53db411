//! Who may do what: [`decide`] is the one decision point (every request of every asker is
//! one of its closed set of actions); this module adds what it needs to answer: the target view
//! a principal resolves targets in, tenants, and which bus events reach a client.
//!
//! The rules:
//! - root and administrators see and control everything;
//! - another principal sees a job it published, or a job whose targeted minions all lie within
//!   its view (the union of its rules' `targets`, within its tenant); another principal's
//!   `deploy.apply` job (which carries that principal's config and input values) never;
//! - seeing is not controlling: cancelling, pausing or resuming a job needs its publisher, an
//!   administrator, or rules that allow the job's *function* on *every* targeted minion;
//! - it receives a job's bus events only if it sees the job (a job no longer live, only root
//!   and administrators), a deployment's only if it created it and may deploy to its server,
//!   and any event only within its `events` globs (a tenant's: only about its own minions);
//! - it may subscribe only to patterns its `events` globs cover (refused otherwise, so a
//!   client never waits on events it will never get);
//! - a tenant's principal never reaches a minion outside its tenant, whatever its rules say;
//! - what an engine creates (configs, deployments, groups, enrollment and gateway tokens) is
//!   seen and acted on by its creator, root and administrators; to anyone else it does not
//!   exist, and is answered exactly like an id never used, so ids cannot be probed; the events
//!   of a deployment or group reach only its creator (and those who see everything);
//! - the master's metrics (fleet-wide figures) are for root and administrators.
//!
//! Publishing, and what a job may reach through functions that call functions, is in
//! [`publish`].

use std::collections::BTreeMap;

use halite_protocol::message::{PrincipalAcl, TargetKind, Value};

use halite_transport::PeerId;

use crate::authz::publish::Publisher;
use crate::config::MasterConfig;
use crate::core::jobs::JobTable;
use crate::core::registry::Registry;
use crate::target::Expr;

pub mod decide;
pub mod grant;
pub mod publish;

pub use decide::{Action, Asker, Denied, Granted, JobFacts, Policy, RequestKind, MAX_PATTERN_LEN};

/// Who is asking: root (`None` ACL) or a principal with its ACL.
#[derive(Clone, Copy)]
pub struct Who<'a> {
    pub name: &'a str,
    pub acl: Option<&'a PrincipalAcl>,
}

impl Who<'_> {
    /// Root or an administrator: sees everything.
    pub fn sees_all(&self) -> bool {
        self.acl.is_none_or(|a| a.admin)
    }
}

/// What a principal may do to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobAccess {
    /// Nothing: the job is answered as one that does not exist.
    None,
    /// Read and watch it.
    See,
    /// Also cancel, pause and resume it.
    Control,
}

/// The minions a principal or peer can see: what its rules' targets cover (`None`: all),
/// within its tenant if it has one. Targets are resolved within it, so neither a match nor an
/// error ever reveals another minion.
pub struct TargetView {
    exprs: Option<Vec<Expr>>,
    tenant: Option<String>,
}

impl TargetView {
    /// Every minion.
    pub fn all() -> Self {
        TargetView { exprs: None, tenant: None }
    }

    /// The union of these target expressions (unparsable ones cover nothing).
    pub fn of<'a>(targets: impl Iterator<Item = &'a str>, nodegroups: &BTreeMap<String, String>) -> Self {
        let exprs = targets.filter_map(|t| Expr::parse(TargetKind::Compound, t, nodegroups).ok()).collect();
        TargetView { exprs: Some(exprs), tenant: None }
    }

    /// A principal's view: all for root and administrators, else its rules' targets within its
    /// tenant.
    pub fn of_principal(acl: Option<&PrincipalAcl>, nodegroups: &BTreeMap<String, String>) -> Self {
        match acl {
            Some(acl) if !acl.admin => {
                let view = TargetView::of(acl.rules.iter().map(|r| r.targets.as_str()), nodegroups);
                TargetView { tenant: acl.tenant.clone(), ..view }
            }
            _ => TargetView::all(),
        }
    }

    /// Whether a minion is in view.
    pub fn contains(&self, id: &str, grains: &BTreeMap<String, Value>) -> bool {
        self.tenant.as_deref().is_none_or(|tenant| halite_protocol::message::tenant_holds(tenant, id))
            && self.exprs.as_ref().is_none_or(|exprs| exprs.iter().any(|e| e.matches(id, grains)))
    }
}

/// Why a publish is refused (told to the publisher as is).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishRefused {
    /// The policy grants it only by ownership, which never covers a publish.
    #[error("a publish is never granted by ownership")]
    ByOwnership,
    /// The policy refuses it.
    #[error("{0}")]
    Denied(Denied),
    /// The caller a minion publishes on behalf of is not a principal.
    #[error("{0}, on whose behalf this is published, is not a principal")]
    NoPrincipal(String),
    /// The caller a minion publishes on behalf of may not run it.
    #[error("on behalf of {caller}: {why}")]
    OnBehalf {
        /// That caller.
        caller: String,
        /// Why not.
        why: Box<PublishRefused>,
    },
}

/// What a principal may see, control and receive of the live jobs: [`Policy`] read with the
/// job table. Lent by the loop (`Master::access`); it decides and changes nothing.
pub struct Access<'a> {
    policy: Policy<'a>,
    jobs: &'a JobTable,
}

/// Whether a client may receive an event, and whether it sees the event's job, once decided
/// (for the job table to remember while the job lives: see [`Access::peer_receives`]).
#[cfg_attr(test, derive(Debug))]
pub struct Receipt {
    pub allowed: bool,
    pub learned: Option<(String, bool)>,
}

impl<'a> Access<'a> {
    /// The master's rules (`config`) over its registry and live jobs.
    pub fn of(config: &'a MasterConfig, registry: &'a Registry, jobs: &'a JobTable) -> Self {
        let policy = Policy { nodegroups: &config.nodegroups, peers: &config.peers, registry };
        Access { policy, jobs }
    }

    /// May `asker` do `action`? ([`Policy::decide`])
    pub fn decide(&self, asker: &Asker<'_>, action: &Action<'_>) -> Result<Granted, Denied> {
        self.policy.decide(asker, action)
    }

    /// Whether `who` may see (read, watch) a job published by `caller` with `function` on
    /// `minions` (the ones it targeted: names it listed that are no minion's do not count).
    pub fn may_see_job(&self, who: Who<'_>, caller: &str, function: &str, minions: &[&str]) -> bool {
        let job = JobFacts { caller, function, minions };
        self.decide(&Asker::client(who.name, who.acl), &Action::SeeJob(job)).is_ok()
    }

    /// Whether `who` may see a live job.
    pub fn may_see_live_job(&self, who: Who<'_>, jid: &str) -> bool {
        let Some(job) = self.jobs.get(jid) else { return false };
        let minions: Vec<&str> = job.targeted();
        self.may_see_job(who, &job.record.caller, &job.record.function, &minions)
    }

    /// What `who` may do to a live job: nothing (it does not exist for `who`), see it, or
    /// control it (cancel, pause, resume).
    pub fn job_access(&self, who: Who<'_>, jid: &str) -> JobAccess {
        let Some(job) = self.jobs.get(jid) else { return JobAccess::None };
        let minions: Vec<&str> = job.targeted();
        let facts = JobFacts { caller: &job.record.caller, function: &job.record.function, minions: &minions };
        match self.decide(&Asker::client(who.name, who.acl), &Action::ControlJob(facts)) {
            Ok(_) => JobAccess::Control,
            Err(Denied::Forbidden(_)) => JobAccess::See,
            Err(_) => JobAccess::None,
        }
    }

    /// Whether `who`, the client on `peer`, may receive an event (its subscription patterns
    /// aside). Whether it sees a job is remembered per connection while the job lives (its
    /// events come once per minion, and deciding costs a match per targeted minion): a
    /// decision made here is returned for the job table to keep.
    pub fn peer_receives(&self, peer: PeerId, who: Who<'_>, tag: &str, data: &Value) -> Receipt {
        let mut learned = None;
        let about = decide::About::of(tag, data, |jid| {
            let Some(job) = self.jobs.get(jid) else { return false };
            if let Some(&known) = job.visible_to.get(&peer) {
                return known;
            }
            let visible = self.may_see_live_job(who, jid);
            learned = Some((jid.to_owned(), visible));
            visible
        });
        Receipt { allowed: self.receives(who, tag, about), learned }
    }

    /// Whether `who` may receive an event (its subscription patterns aside): what a
    /// subscriber gets, and what a rollout's `abort_on` of a job `who` published hears.
    pub fn may_receive(&self, who: Who<'_>, tag: &str, data: &Value) -> bool {
        let about = decide::About::of(tag, data, |jid| self.may_see_live_job(who, jid));
        self.receives(who, tag, about)
    }

    /// [`Action::Receive`] for `who`.
    fn receives(&self, who: Who<'_>, tag: &str, about: decide::About<'_>) -> bool {
        self.decide(&Asker::client(who.name, who.acl), &Action::Receive { tag, about }).is_ok()
    }

    /// Whether `who` may see and act on something created by `owner` (a config, deployment,
    /// group or token); to anyone else it does not exist.
    pub fn may_own(&self, who: Who<'_>, owner: &str) -> bool {
        self.decide(&Asker::client(who.name, who.acl), &Action::Own { owner }).is_ok()
    }

    /// The owner a listing or bulk deletion in the store is narrowed to for `who`: `None`
    /// (everyone's) for root and administrators, else `who`'s own.
    pub fn owned_by<'w>(&self, who: Who<'w>) -> Option<&'w str> {
        match self.decide(&Asker::client(who.name, who.acl), &Action::ListOwned) {
            Ok(Granted::Yes) => None,
            _ => Some(who.name),
        }
    }

    /// Whether `publisher` may run `request` on `targets` (already resolved, never empty):
    /// what the job may reach if so (see [`publish::authorize`]). A minion publishing on behalf
    /// of its job's caller needs that caller's permission too.
    pub fn authorize_publish(
        &self,
        caller: &str,
        publisher: &Publisher,
        request: &halite_protocol::message::PublishRequest,
        targets: &[String],
    ) -> Result<Option<Vec<String>>, PublishRefused> {
        let ids: Vec<&str> = targets.iter().map(String::as_str).collect();
        let action = Action::Publish { function: &request.spec.function, kwargs: &request.spec.kwargs, targets: &ids };
        let decide = |asker: &Asker<'_>| match self.decide(asker, &action) {
            Ok(Granted::Reach(reach)) => Ok(reach),
            Ok(Granted::Yes) => Ok(None),
            Ok(Granted::OwnedBy(_) | Granted::AuditOf { .. }) => Err(PublishRefused::ByOwnership),
            Err(denied) => Err(PublishRefused::Denied(denied)),
        };
        let reach = decide(&publisher.asker(caller))?;
        let (Publisher::Peer(_), Some(caller)) = (publisher, &request.on_behalf_of) else { return Ok(reach) };
        let on_behalf = match caller.as_str() {
            "root" => Asker::Root,
            // A local call on the minion (`halite-minion call`): its own administrator.
            "local" => return Ok(reach),
            name => match name.strip_prefix("minion:") {
                Some(minion) => Asker::MinionPeer { id: minion },
                None => match self.principal(name) {
                    Some(principal) => Asker::Principal { name, acl: &principal.acl },
                    None => return Err(PublishRefused::NoPrincipal(caller.clone())),
                },
            },
        };
        let theirs = decide(&on_behalf)
            .map_err(|why| PublishRefused::OnBehalf { caller: caller.clone(), why: Box::new(why) })?;
        Ok(publish::both(reach, theirs))
    }

    /// A registered principal, as it is now.
    pub fn principal(&self, name: &str) -> Option<&'a crate::store::PrincipalRecord> {
        self.policy.registry.principal(name)
    }

    /// Who a job's caller is, to decide what it may receive: root, a registered principal
    /// (as its ACL is now), or `None` for a caller that receives no events (a minion's
    /// `peer.publish`, a principal since removed).
    pub fn caller_acl(&self, caller: &str) -> Option<Option<&'a PrincipalAcl>> {
        match caller {
            "root" => Some(None),
            name => self.principal(name).map(|p| Some(&p.acl)),
        }
    }

    /// Whether the job's caller `caller` may receive an event: what a rollout's or a
    /// group's `abort_on` hears (a caller that receives nothing hears nothing).
    pub fn caller_receives(&self, caller: &str, tag: &str, data: &Value) -> bool {
        self.caller_acl(caller).is_some_and(|acl| self.may_receive(Who { name: caller, acl }, tag, data))
    }
}

#[cfg(test)]
mod tests {
    use super::decide::MAX_PATTERNS;
    use super::*;

    #[test]
    fn subscriptions_are_limited_and_checked_against_the_events_acl() {
        let acl = PrincipalAcl { events: vec!["halite/job/*".into(), "minion/db*/*".into()], ..Default::default() };
        let registry = crate::core::registry::Registry::default();
        let nodegroups = BTreeMap::new();
        let policy = Policy { nodegroups: &nodegroups, peers: &[], registry: &registry };
        let ops = Asker::Principal { name: "ops", acl: &acl };
        let subscribe = |asker: &Asker<'_>, patterns: &[&str]| {
            let patterns: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
            policy.decide(asker, &Action::Subscribe(&patterns))
        };
        assert!(subscribe(&ops, &["halite/job/*/ret/*"]).is_ok());
        assert!(subscribe(&ops, &["minion/db1/app/*"]).is_ok());
        let refused = subscribe(&ops, &["*"]).unwrap_err();
        assert_eq!(refused.kind(), halite_protocol::message::ErrorKind::Forbidden);
        assert!(refused.message().contains("not allowed to subscribe to \"*\""), "{refused}");
        assert!(subscribe(&ops, &["minion/*/app"]).is_err());
        assert!(subscribe(&Asker::Root, &["*"]).is_ok());
        let many = vec!["halite/job/*"; MAX_PATTERNS + 1];
        assert!(subscribe(&Asker::Root, &many).unwrap_err().message().contains("at most"));
        let long = "x".repeat(300);
        assert!(subscribe(&Asker::Root, &[long.as_str()]).unwrap_err().message().contains("longer than"));
        assert!(subscribe(&Asker::MinionPeer { id: "web1" }, &["minion/web1/*"]).is_err());
    }

    /// A principal sees a job only if every targeted minion is in its view, may control it
    /// only with the function on all of them; whether a client sees a job's events is decided
    /// once and returned for the job table to keep, then read back.
    #[test]
    fn job_access_follows_the_targeted_minions_and_a_visibility_is_decided_once() {
        let rule = |targets: &str| halite_protocol::message::PrincipalRule {
            targets: targets.into(),
            functions: vec!["test.ping".into()],
            args: BTreeMap::new(),
        };
        let acl = |targets: &[&str]| PrincipalAcl {
            rules: targets.iter().map(|t| rule(t)).collect(),
            events: vec!["*".into()],
            ..PrincipalAcl::default()
        };
        let (half, whole) = (acl(&["a"]), acl(&["a", "b"]));
        let registry = crate::core::registry::Registry::default();
        let mut jobs = crate::core::jobs::testing::table(std::time::Instant::now());
        let config = MasterConfig::default();
        let (narrow, wide) = (Who { name: "narrow", acl: Some(&half) }, Who { name: "wide", acl: Some(&whole) });
        assert_eq!(Access::of(&config, &registry, &jobs).job_access(narrow, "1"), JobAccess::None);
        assert_eq!(Access::of(&config, &registry, &jobs).job_access(wide, "1"), JobAccess::Control);
        assert_eq!(
            Access::of(&config, &registry, &jobs).job_access(wide, "2"),
            JobAccess::None,
            "a job not live here has no access to give"
        );
        assert_eq!(
            Access::of(&config, &registry, &jobs).job_access(Who { name: "root", acl: None }, "1"),
            JobAccess::Control
        );

        let data = serde_json::json!({ "jid": "1" });
        let (peer, tag) = (PeerId(7), "halite/job/1/ret/a");
        let first = Access::of(&config, &registry, &jobs).peer_receives(peer, narrow, tag, &data);
        assert!(!first.allowed);
        assert_eq!(first.learned, Some(("1".to_owned(), false)));
        // Remembered the other way round, the remembered answer is the one read back.
        jobs.remember_visibility("1", peer, true);
        let again = Access::of(&config, &registry, &jobs).peer_receives(peer, narrow, tag, &data);
        assert!(again.allowed, "the remembered visibility is read, not decided again");
        assert_eq!(again.learned, None);
        assert!(
            !Access::of(&config, &registry, &jobs).may_receive(narrow, tag, &data),
            "a check without a peer decides afresh"
        );
        assert!(Access::of(&config, &registry, &jobs).may_receive(wide, tag, &data));
        assert!(Access::of(&config, &registry, &jobs).caller_receives("root", tag, &data));
        assert!(
            !Access::of(&config, &registry, &jobs).caller_receives("gone", tag, &data),
            "a removed caller hears nothing"
        );
    }
}
