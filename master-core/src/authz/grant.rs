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
