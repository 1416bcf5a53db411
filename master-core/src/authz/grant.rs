//! A publish decided in one call ([`Access::grant_publish`]): a minion no peer rule names is
//! refused before its target is read; the target is then resolved within what the publisher
//! can see (a minion outside its view is never matched, so neither the answer nor an error
//! reveals it or its grains), and the job authorised on what it resolved to, with the reach
//! it carries.

use halite_protocol::message::{ErrorKind, PublishRequest};

use super::publish::{Publisher, Rules};
use super::{Access, Action, Asker, Denied};
use crate::target::Expr;

/// Most ids a job records as `unknown`: an inventory with some hosts not enrolled passes, while
/// a list of made-up names cannot make a job write a slot (and an event) for each of them, nor
/// make every listing of jobs read them.
pub const MAX_UNKNOWN_IDS: usize = 1_000;

/// A publish granted: its targets (sorted), the ids it names that match no minion in view, and
/// the reach its job carries (`None`: unbounded).
#[derive(Debug)]
pub struct PublishGrant {
    pub targets: Vec<String>,
    pub unknown: Vec<String>,
    pub reach: Option<Vec<String>>,
}

/// Why a publish is refused, as its publisher is told; `denied` when the policy refused it
/// (counted, and logged), not the request's shape.
#[derive(Debug)]
pub struct PublishRefusal {
    pub kind: ErrorKind,
    pub why: String,
    pub denied: bool,
}

impl PublishRefusal {
    fn bad(kind: ErrorKind, why: String) -> Self {
        PublishRefusal { kind, why, denied: false }
    }
}

impl Access<'_> {
    /// Whether `publisher` (as `caller`) may publish `request`, and on which minions: the one
    /// place a publish is authorised.
    pub fn grant_publish(
        &self,
        caller: &str,
        publisher: &Publisher,
        request: &PublishRequest,
    ) -> Result<PublishGrant, PublishRefusal> {
        let spec = &request.spec;
        let policy = &self.policy;
        if let Publisher::Peer(source) = publisher {
            let nothing = Action::Publish { function: &spec.function, kwargs: &spec.kwargs, targets: &[] };
            if let Err(denied @ Denied::Forbidden(_)) = self.decide(&Asker::MinionPeer { id: source }, &nothing) {
                return Err(PublishRefusal { kind: denied.kind(), why: denied.message(), denied: true });
            }
        }
        let expr = Expr::parse(spec.target.kind, &spec.target.expr, policy.nodegroups)
            .map_err(|error| PublishRefusal::bad(ErrorKind::BadRequest, error.to_string()))?;
        let view = publisher.view(&Rules { nodegroups: policy.nodegroups, peers: policy.peers });
        let registry = policy.registry;
        let in_view = |id: &&str| {
            let grains = registry.grains(id);
            view.contains(id, grains) && expr.matches(id, grains)
        };
        // A target that names its minions outright (one id, a list) is looked up, not matched
        // against the whole fleet: most jobs an engine sends go to one server. Sorted either
        // way (the unknown ids are told apart by a binary search).
        let named = expr.named_ids();
        let targets: Vec<String> = match &named {
            Some(named) => {
                let mut targets: Vec<String> = named
                    .iter()
                    .copied()
                    .filter(|id| registry.has_accepted(id))
                    .filter(in_view)
                    .map(str::to_owned)
                    .collect();
                targets.sort_unstable();
                targets
            }
            None => registry.accepted_ids().iter().map(String::as_str).filter(in_view).map(str::to_owned).collect(),
        };
        // Ids the target names that match no minion in view: shown as unknown, each in its own
        // final slot, rather than silently left out. One outside the caller's view is unknown
        // to it exactly like one that does not exist.
        let unknown: Vec<String> = match named {
            Some(named) if !targets.is_empty() => {
                let mut unknown: Vec<String> = named
                    .into_iter()
                    .filter(|id| targets.binary_search_by(|t| t.as_str().cmp(id)).is_err())
                    .map(str::to_owned)
                    .collect();
                unknown.sort();
                unknown
            }
            _ => Vec::new(),
        };
        // What is not even an id cannot be a minion: said at once, never recorded (nor shown to
        // whoever reads the job later).
        if let Some((id, error)) =
            unknown.iter().find_map(|id| halite_protocol::id::validate(id).err().map(|e| (id, e)))
        {
            let why = format!("the target names {id:?}, which is not a minion id: {error}");
            return Err(PublishRefusal::bad(ErrorKind::BadRequest, why));
        }
        if unknown.len() > MAX_UNKNOWN_IDS {
            let why = format!(
                "{} of the ids the target names match no minion you may target (first: {}); a job names at most \
                 {MAX_UNKNOWN_IDS} such ids: check the list",
                unknown.len(),
                unknown.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            );
            return Err(PublishRefusal::bad(ErrorKind::BadRequest, why));
        }
        if targets.is_empty() {
            let why = match publisher {
                Publisher::Root => "no minions matched the target",
                Publisher::Principal(_) => "no minions matched the target among those this principal may target",
                Publisher::Peer(_) => "no minions matched the target among those a peer rule lets this minion target",
            };
            return Err(PublishRefusal::bad(ErrorKind::NotFound, why.into()));
        }
        let reach = self.authorize_publish(caller, publisher, request, &targets).map_err(|why| PublishRefusal {
            kind: ErrorKind::Forbidden,
            why: why.to_string(),
            denied: true,
        })?;
        Ok(PublishGrant { targets, unknown, reach })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use halite_protocol::message::{JobSpec, PrincipalAcl, PrincipalRule, Target, TargetKind};

    use super::*;
    use crate::config::MasterConfig;
    use crate::core::registry::Registry;

    fn request(kind: TargetKind, expr: &str) -> PublishRequest {
        PublishRequest::new(1, JobSpec::new(Target { kind, expr: expr.into() }, "test.ping"))
    }

    /// A principal allowed `test.ping` on `web*`, and three minions: two in its view, one not.
    fn fleet() -> (MasterConfig, Registry, Publisher) {
        let mut registry = Registry::default();
        for id in ["web1", "web2", "db1"] {
            registry.accept(id, [7; 32]);
        }
        let rule =
            PrincipalRule { targets: "web*".into(), functions: vec!["test.ping".into()], args: Default::default() };
        let acl = PrincipalAcl { rules: vec![rule], ..PrincipalAcl::default() };
        (MasterConfig::default(), registry, Publisher::Principal(Arc::new(acl)))
    }

    #[test]
    fn a_minion_outside_the_view_is_answered_exactly_like_one_that_does_not_exist() {
        let (config, registry, ops) = fleet();
        let jobs = crate::core::jobs::testing::table(std::time::Instant::now());
        let access = Access::of(&config, &registry, &jobs);
        let granted = access.grant_publish("ops", &ops, &request(TargetKind::List, "web2,db1,ghost,web1")).unwrap();
        assert_eq!(granted.targets, ["web1", "web2"]);
        assert_eq!(granted.unknown, ["db1", "ghost"], "db1 is unknown to ops, as ghost is");
        let outside = access.grant_publish("ops", &ops, &request(TargetKind::Glob, "db1")).unwrap_err();
        let absent = access.grant_publish("ops", &ops, &request(TargetKind::Glob, "ghost")).unwrap_err();
        assert_eq!((outside.kind, &outside.why, outside.denied), (absent.kind, &absent.why, absent.denied));
        assert_eq!(outside.kind, ErrorKind::NotFound);
        // A glob is matched within the view only: root reaches db1, ops does not.
        let all = access.grant_publish("root", &Publisher::Root, &request(TargetKind::Glob, "*")).unwrap();
        assert_eq!(all.targets.len(), 3);
        let mine = access.grant_publish("ops", &ops, &request(TargetKind::Glob, "*")).unwrap();
        assert_eq!(mine.targets, ["web1", "web2"]);
    }

    #[test]
    fn a_function_outside_the_rules_is_denied_and_a_minion_no_peer_rule_names_is_refused_before_its_target_is_read() {
        let (config, registry, ops) = fleet();
        let jobs = crate::core::jobs::testing::table(std::time::Instant::now());
        let access = Access::of(&config, &registry, &jobs);
        let mut run = request(TargetKind::Glob, "web1");
        run.spec.function = "cmd.run".into();
        let refused = access.grant_publish("ops", &ops, &run).unwrap_err();
        assert_eq!((refused.kind, refused.denied), (ErrorKind::Forbidden, true), "{}", refused.why);
        // The target does not even parse: a peer without a rule learns nothing from it.
        let peer = Publisher::Peer("web1".into());
        let refused =
            access.grant_publish("minion:web1", &peer, &request(TargetKind::Compound, "G@ and (")).unwrap_err();
        assert_eq!((refused.kind, refused.denied), (ErrorKind::Forbidden, true), "{}", refused.why);
        let bad = access.grant_publish("ops", &ops, &request(TargetKind::Compound, "G@ and (")).unwrap_err();
        assert_eq!((bad.kind, bad.denied), (ErrorKind::BadRequest, false));
    }
}
