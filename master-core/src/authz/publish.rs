//! May a publisher run a function on resolved targets, and what may the job reach from there.
//!
//! A job carries its *reach*: the function globs its caller may call on every one of its
//! targets (the function itself, and the functions of every rule that covers all targets and
//! has no argument constraints). The minion refuses any call outside it, so `plan.run` steps and
//! guards, stored plans and anything else that calls functions reach nothing the caller could
//! not call directly. A minion's `peer.publish` names the caller of the job it runs in
//! (`on_behalf_of`): the new job must then be allowed for that caller too, and reaches only
//! what both may.

use std::collections::BTreeMap;
use std::sync::Arc;

use halite_protocol::glob;
use halite_protocol::message::{PrincipalAcl, Value};

use crate::acl::{self, PeerRule};

/// Who asks for a job; decides what it may target and reach.
#[derive(Debug, Clone)]
pub enum Publisher {
    /// The root principal: anything.
    Root,
    /// A registered principal, within its ACL.
    Principal(Arc<PrincipalAcl>),
    /// A minion, within the `[[peers]]` rules for it.
    Peer(String),
}

impl Publisher {
    /// The asker it is, for [`super::Policy::decide`]; `caller` is the principal's name.
    pub fn asker<'a>(&'a self, caller: &'a str) -> super::Asker<'a> {
        match self {
            Publisher::Root => super::Asker::Root,
            Publisher::Principal(acl) => super::Asker::Principal { name: caller, acl },
            Publisher::Peer(id) => super::Asker::MinionPeer { id },
        }
    }
}

impl Publisher {
    /// The minions this publisher's targets are resolved within: all for root, a principal's
    /// view (`TargetView::of_principal`), or the targets of the `[[peers]]` rules that name
    /// the minion.
    pub fn view(&self, rules: &Rules) -> super::TargetView {
        match self {
            Publisher::Root => super::TargetView::all(),
            Publisher::Principal(acl) => super::TargetView::of_principal(Some(acl), rules.nodegroups),
            Publisher::Peer(source) => super::TargetView::of(
                peer_rules_of(rules.peers, source).map(|rule| rule.target.as_str()),
                rules.nodegroups,
            ),
        }
    }
}

/// The `[[peers]]` rules that name minion `source`: every rule a minion's publish is judged by.
pub fn peer_rules_of<'a>(peers: &'a [PeerRule], source: &'a str) -> impl Iterator<Item = &'a PeerRule> {
    peers.iter().filter(move |rule| acl::any_glob(&rule.minions, source))
}

/// The master's rules a publish is checked against.
pub struct Rules<'a> {
    pub nodegroups: &'a BTreeMap<String, String>,
    pub peers: &'a [PeerRule],
}

/// A publish to check: the function, its keyword arguments, the resolved targets with their
/// grains, and their ids (for the refusal message).
pub struct Publish<'a> {
    pub function: &'a str,
    pub kwargs: &'a BTreeMap<String, Value>,
    pub targets: &'a [(&'a str, &'a BTreeMap<String, Value>)],
}

/// Whether a function name is well-formed: `module.function`, letters, digits, `_`, `-`, `.`
/// (no glob characters, so a name in a job's reach matches only itself).
pub fn valid_function(name: &str) -> bool {
    name.contains('.')
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A rule covering every target: its function globs, and its argument constraints if it has any.
type Covering<'a> = (&'a [String], Option<&'a BTreeMap<String, String>>);

/// `Ok(reach)` when `publisher` may run the publish (`None`: no limit), `Err(why)` otherwise.
/// The asker is borrowed: a publish's hot path copies no ACL.
pub fn authorize(
    publisher: &super::Asker<'_>,
    rules: &Rules,
    publish: &Publish,
) -> Result<Option<Vec<String>>, super::Denied> {
    let within = |expr: &str| acl::all_within(expr, rules.nodegroups, publish.targets).unwrap_or(false);
    let covering: Vec<Covering> = match publisher {
        super::Asker::Root => return Ok(None),
        super::Asker::ClusterPeer => {
            return Err(super::Denied::Forbidden("another master may only announce changes".into()))
        }
        // A tenant's principal reaches nothing outside its tenant, whatever its rules say.
        super::Asker::Principal { acl, .. } if !publish.targets.iter().all(|(id, _)| acl.in_tenant(id)) => Vec::new(),
        super::Asker::Principal { acl, .. } => acl
            .rules
            .iter()
            .filter(|rule| within(&rule.targets))
            .map(|rule| (rule.functions.as_slice(), Some(&rule.args).filter(|a| !a.is_empty())))
            .collect(),
        super::Asker::MinionPeer { id: source } => peer_rules_of(rules.peers, source)
            .filter(|rule| within(&rule.target))
            .map(|rule| (rule.functions.as_slice(), None))
            .collect(),
    };
    let allowed = covering.iter().any(|(functions, args)| {
        acl::any_glob(functions, publish.function) && args.is_none_or(|a| acl::args_allowed(a, publish.kwargs))
    });
    if !allowed {
        let ids: Vec<String> = publish.targets.iter().map(|(id, _)| (*id).to_owned()).collect();
        return Err(super::Denied::Forbidden(match publisher {
            super::Asker::MinionPeer { id: source } => {
                format!("no peer rule lets {source} run {} on {}", publish.function, list_some(&ids))
            }
            _ => format!("not allowed to run {} on {}", publish.function, list_some(&ids)),
        }));
    }
    let mut reach = vec![publish.function.to_owned()];
    for (functions, args) in covering {
        if args.is_none() {
            reach.extend(functions.iter().cloned());
        }
    }
    reach.sort();
    reach.dedup();
    Ok(Some(reach))
}

/// What two reaches both allow, conservatively: the globs of each that a glob of the other
/// covers (`None` is no limit).
pub fn both(a: Option<Vec<String>>, b: Option<Vec<String>>) -> Option<Vec<String>> {
    match (a, b) {
        (None, other) | (other, None) => other,
        (Some(a), Some(b)) => {
            let covered = |g: &String, by: &[String]| by.iter().any(|outer| glob::covers(outer, g));
            let mut reach: Vec<String> =
                a.iter().filter(|g| covered(g, &b)).chain(b.iter().filter(|g| covered(g, &a))).cloned().collect();
            reach.sort();
            reach.dedup();
            Some(reach)
        }
    }
}

/// Up to ten ids, then how many more: errors stay short and never list a whole fleet.
pub fn list_some(ids: &[String]) -> String {
    const SHOWN: usize = 10;
    match ids.len() {
        0 => "no minion (none of the target's minions is within a rule)".into(),
        n if n <= SHOWN => ids.join(","),
        n => format!("{} and {} more", ids[..SHOWN].join(","), n - SHOWN),
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::PrincipalRule as AclRule;

    use super::*;

    fn principal(rules: &[(&str, &[&str])]) -> Publisher {
        Publisher::Principal(Arc::new(PrincipalAcl {
            rules: rules
                .iter()
                .map(|(targets, functions)| AclRule {
                    targets: (*targets).into(),
                    functions: functions.iter().map(|f| (*f).to_owned()).collect(),
                    args: BTreeMap::new(),
                })
                .collect(),
            ..PrincipalAcl::default()
        }))
    }

    fn check(publisher: &Publisher, function: &str, ids: &[&str]) -> Result<Option<Vec<String>>, super::super::Denied> {
        let (groups, grains) = (BTreeMap::new(), BTreeMap::new());
        let targets: Vec<(&str, &BTreeMap<String, Value>)> = ids.iter().map(|id| (*id, &grains)).collect();
        let rules = Rules { nodegroups: &groups, peers: &[] };
        authorize(&publisher.asker("ops"), &rules, &Publish { function, kwargs: &BTreeMap::new(), targets: &targets })
    }

    #[test]
    fn a_job_reaches_what_its_caller_may_call_on_every_target() {
        let ops = principal(&[("web*", &["plan.run", "test.*"]), ("web1", &["pkg.install"]), ("db*", &["cmd.run"])]);
        let reach = check(&ops, "plan.run", &["web1", "web2"]).unwrap().unwrap();
        assert_eq!(reach, ["plan.run", "test.*"], "pkg.install covers web1 only, cmd.run only db*");
        let reach = check(&ops, "plan.run", &["web1"]).unwrap().unwrap();
        assert_eq!(reach, ["pkg.install", "plan.run", "test.*"]);
        assert!(check(&ops, "cmd.run", &["web1"]).is_err());
        assert_eq!(check(&Publisher::Root, "cmd.run", &["web1"]), Ok(None));
    }

    #[test]
    fn two_reaches_meet_conservatively() {
        let a = Some(vec!["pkg.*".to_owned(), "test.ping".to_owned()]);
        let b = Some(vec!["pkg.install".to_owned(), "test.*".to_owned(), "cmd.run".to_owned()]);
        assert_eq!(both(a.clone(), b), Some(vec!["pkg.install".to_owned(), "test.ping".to_owned()]));
        assert_eq!(both(a.clone(), None), a);
    }

    #[test]
    fn function_names_cannot_be_globs() {
        assert!(valid_function("pkg.install") && valid_function("my_actions.deploy-app"));
        assert!(!valid_function("cmd.*") && !valid_function("ping") && !valid_function("a.[b]"));
    }
}
