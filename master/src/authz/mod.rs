//! Every "may principal X do Y" the master answers, in one place: read a job, watch it,
//! cancel it, receive an event, subscribe to a pattern, deploy to a server.
//!
//! The rules:
//! - root and administrators see and may cancel everything;
//! - another principal sees a job it published, or a job whose targeted minions all lie within
//!   its own target ACL (the union of its rules' `targets`); a `deploy.apply` job (which carries
//!   a deployment's input values) only where a rule allows `deploy.apply` on its server, the
//!   same check as for the deployment itself;
//! - it may cancel and watch exactly the jobs it sees;
//! - it receives a job's bus events only if it sees the job (a job no longer live, only root
//!   and administrators), a deployment's only if it may deploy to its server, and any event
//!   only within its `events` globs;
//! - it may subscribe only to patterns its `events` globs cover (refused otherwise, so a
//!   client never waits on events it will never get).
//!
//! Publishing, and what a job may reach through functions that call functions, is in
//! [`publish`]; who sees and acts on the configs, deployments, groups and tokens engines
//! create (their creator, root and administrators), in [`ownership`].

use std::collections::BTreeMap;

use halite_protocol::glob;
use halite_protocol::message::{PrincipalAcl, TargetKind, Value};

use halite_transport::PeerId;

use crate::net::Net;
use crate::request_error::RequestError;
use crate::server::Master;
use crate::store::Store;
use crate::target::Expr;

pub(crate) mod ownership;
pub(crate) mod publish;

/// The function that carries deployments (its arguments hold their input values).
const DEPLOY_FUNCTION: &str = "deploy.apply";

/// Most patterns one subscription may hold.
pub(crate) const MAX_PATTERNS: usize = 64;
/// Longest pattern, in bytes (tags are at most 255 bytes).
pub(crate) const MAX_PATTERN_LEN: usize = 255;

/// Who is asking: root (`None` ACL) or a principal with its ACL.
#[derive(Clone, Copy)]
pub(crate) struct Who<'a> {
    pub(crate) name: &'a str,
    pub(crate) acl: Option<&'a PrincipalAcl>,
}

impl Who<'_> {
    /// Root or an administrator: sees everything.
    pub(crate) fn sees_all(&self) -> bool {
        self.acl.is_none_or(|a| a.admin)
    }
}

/// The minions a principal or peer can see: what its rules' targets cover (`None`: all).
/// Targets are resolved within it, so neither a match nor an error ever reveals another minion.
pub(crate) struct TargetView(Option<Vec<Expr>>);

impl TargetView {
    /// Every minion.
    pub(crate) fn all() -> Self {
        TargetView(None)
    }

    /// The union of these target expressions (unparsable ones cover nothing).
    pub(crate) fn of<'a>(targets: impl Iterator<Item = &'a str>, nodegroups: &BTreeMap<String, String>) -> Self {
        TargetView(Some(targets.filter_map(|t| Expr::parse(TargetKind::Compound, t, nodegroups).ok()).collect()))
    }

    /// A principal's view: all for root and administrators, else its rules' targets.
    pub(crate) fn of_principal(acl: Option<&PrincipalAcl>, nodegroups: &BTreeMap<String, String>) -> Self {
        match acl {
            Some(acl) if !acl.admin => TargetView::of(acl.rules.iter().map(|r| r.targets.as_str()), nodegroups),
            _ => TargetView::all(),
        }
    }

    /// Whether a minion is in view.
    pub(crate) fn contains(&self, id: &str, grains: &BTreeMap<String, Value>) -> bool {
        self.0.as_ref().is_none_or(|exprs| exprs.iter().any(|e| e.matches(id, grains)))
    }
}

/// Why a subscription is refused, if it is.
pub(crate) fn check_subscription(acl: Option<&PrincipalAcl>, patterns: &[String]) -> Result<(), String> {
    if patterns.len() > MAX_PATTERNS {
        return Err(format!("at most {MAX_PATTERNS} patterns per subscription ({} given)", patterns.len()));
    }
    if let Some(long) = patterns.iter().find(|p| p.len() > MAX_PATTERN_LEN) {
        let start: String = long.chars().take(32).collect();
        return Err(format!("pattern {start:?}… is longer than {MAX_PATTERN_LEN} bytes"));
    }
    let Some(acl) = acl else { return Ok(()) };
    match patterns.iter().find(|p| !acl.events.iter().any(|allowed| glob::covers(allowed, p))) {
        Some(pattern) => Err(format!(
            "not allowed to subscribe to {pattern:?}: this principal may read only events matching {:?}",
            acl.events
        )),
        None => Ok(()),
    }
}

impl<S: Store, N: Net> Master<S, N> {
    /// Whether `who` may see (read, watch, cancel) a job published by `caller` with `function`
    /// on `minions`.
    pub(crate) fn may_see_job(&self, who: Who<'_>, caller: &str, function: &str, minions: &[&str]) -> bool {
        let acl = match who.acl {
            Some(acl) if !acl.admin && caller != who.name => acl,
            _ => return true,
        };
        if minions.is_empty() {
            return false;
        }
        if function == DEPLOY_FUNCTION {
            return minions.iter().all(|server| self.may_deploy_to(acl, server));
        }
        let view = TargetView::of_principal(Some(acl), &self.config.nodegroups);
        minions.iter().all(|id| view.contains(id, self.registry.grains(id)))
    }

    /// Whether `who` may see a live job.
    pub(crate) fn may_see_live_job(&self, who: Who<'_>, jid: &str) -> bool {
        let Some(job) = self.jobs.get(jid) else { return false };
        let minions: Vec<&str> = job.slots().keys().map(String::as_str).collect();
        self.may_see_job(who, &job.record.caller, &job.record.function, &minions)
    }

    /// Whether the client on `peer` may receive an event (its subscription patterns aside).
    /// Events of a job that is no longer live (a late return) go only to those who see
    /// everything. A job's answer is remembered per connection while the job lives: its events
    /// come once per minion, and deciding costs a match per targeted minion.
    pub(crate) fn peer_may_receive(&mut self, peer: PeerId, tag: &str, data: &Value) -> bool {
        let Some((name, acl)) = self.principal_on(peer) else { return false };
        let Some(acl) = acl else { return true };
        if !acl.events.iter().any(|p| glob::matches(p, tag)) {
            return false;
        }
        if acl.admin {
            return true;
        }
        let mut parts = tag.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("halite"), Some("job"), Some(jid)) => {
                let Some(job) = self.jobs.get(jid) else { return false };
                if let Some(&known) = job.visible_to.get(&peer) {
                    return known;
                }
                let visible = self.may_see_live_job(Who { name: &name, acl: Some(&acl) }, jid);
                if let Some(job) = self.jobs.get_mut(jid) {
                    job.visible_to.insert(peer, visible);
                }
                visible
            }
            (Some("halite"), Some("deployment"), Some(_)) => {
                data.get("server_id").and_then(Value::as_str).is_some_and(|server| self.may_deploy_to(&acl, server))
            }
            _ => true,
        }
    }

    /// Whether a principal may create an enrollment token for `minion`: root and administrators
    /// for any id; another principal (an engine enrolling the servers it boots) for an id it may
    /// deploy to that has no accepted key, since a token for such an id would replace the key
    /// and only an administrator decides that.
    pub(crate) fn may_enroll(&self, acl: Option<&PrincipalAcl>, minion: &str) -> Result<(), RequestError> {
        let Some(acl) = acl.filter(|a| !a.admin) else { return Ok(()) };
        if !self.may_deploy_to(acl, minion) {
            return Err(RequestError::forbidden(format!(
                "not allowed to enroll {minion} (needs admin, or a rule for deploy.apply on it)"
            )));
        }
        if self.registry.accepted.contains(minion) {
            return Err(RequestError::forbidden(format!(
                "{minion} already has an accepted key: only an administrator may enroll it again"
            )));
        }
        Ok(())
    }

    /// Whether an ACL allows `deploy.apply` on `server`.
    pub(crate) fn may_deploy_to(&self, acl: &PrincipalAcl, server: &str) -> bool {
        let grains = self.registry.grains(server);
        acl.admin
            || acl.rules.iter().any(|rule| {
                crate::acl::any_glob(&rule.functions, DEPLOY_FUNCTION)
                    && crate::acl::all_within(&rule.targets, &self.config.nodegroups, &[(server, grains)])
                        .unwrap_or(false)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_limited_and_checked_against_the_events_acl() {
        let acl = PrincipalAcl { events: vec!["halite/job/*".into(), "minion/db*/*".into()], ..Default::default() };
        assert!(check_subscription(Some(&acl), &["halite/job/*/ret/*".into()]).is_ok());
        assert!(check_subscription(Some(&acl), &["minion/db1/app/*".into()]).is_ok());
        let refused = check_subscription(Some(&acl), &["*".into()]).unwrap_err();
        assert!(refused.contains("not allowed to subscribe to \"*\""), "{refused}");
        assert!(check_subscription(Some(&acl), &["minion/*/app".into()]).is_err());
        assert!(check_subscription(None, &["*".into()]).is_ok());
        let many = vec!["halite/job/*".to_owned(); MAX_PATTERNS + 1];
        assert!(check_subscription(None, &many).unwrap_err().contains("at most"));
        assert!(check_subscription(None, &["x".repeat(300)]).unwrap_err().contains("longer than"));
    }
}
