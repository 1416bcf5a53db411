//! In-process sessions (the gateway's) are bound to the token they were opened with, not only
//! checked when they open: revoking the token (on this master or another sharing the store),
//! its expiry, or a change of its principal ends every session opened with it (the loop wakes when a token expires).
//! Each is told why just before its queue closes, so an event stream ends with a reason
//! instead of outliving its authorisation.

use std::sync::Arc;

use halite_protocol::message::{ErrorKind, ErrorMessage, Message, PrincipalAcl};
use halite_transport::PeerId;

use crate::authz::{Access, Action, Asker};
use crate::core::sessions::LocalToken;
use crate::local_sessions::{LocalSender, Reply};
use crate::store::ApiTokenGrant;

/// The `request` of the error that ends an in-process session (its `message` says why).
pub const SESSION_ENDED: &str = "session";

/// What an in-process session is told when the core ends it.
pub fn session_ended(why: &str) -> Message {
    Message::Error(ErrorMessage {
        kind: ErrorKind::Forbidden,
        message: why.to_owned(),
        request: Some(SESSION_ENDED.into()),
    })
}

/// Why a token opens no session (told to the gateway's caller as is).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    /// Unknown or expired.
    #[error("unknown token")]
    Unknown,
    /// The principal it acts as was removed.
    #[error("the token's principal {0} no longer exists")]
    PrincipalGone(String),
}

/// What a session opened with a token is: whom it acts as, with what rules, bound to which
/// token. Decided by [`session_for`]; the loop opens it (`Sessions::open_local`).
pub struct LocalSession {
    pub principal: String,
    pub acl: Option<Arc<PrincipalAcl>>,
    pub token: LocalToken,
    /// Whether it may read the master's metrics (decided once, when it opens).
    pub reads_metrics: bool,
}

/// The session a token opens (`grant`: what the store holds for its hash, `None` when it is
/// unknown or expired). Its principal's rules are taken as they are now; a principal removed
/// since the token was made opens nothing.
pub fn session_for(
    hash: [u8; 32],
    grant: Option<ApiTokenGrant>,
    access: &Access<'_>,
) -> Result<LocalSession, TokenRefused> {
    let Some(grant) = grant else { return Err(TokenRefused::Unknown) };
    let acl = match grant.principal.as_str() {
        "root" => None,
        name => match access.principal(name) {
            Some(record) => Some(Arc::new(record.acl.clone())),
            None => return Err(TokenRefused::PrincipalGone(name.to_owned())),
        },
    };
    let asker = Asker::client(&grant.principal, acl.as_deref());
    let reads_metrics = access.decide(&asker, &Action::ReadMetrics).is_ok();
    let token = LocalToken { hash, id: grant.id, expires_at_ms: grant.expires_at_ms };
    Ok(LocalSession { principal: grant.principal, acl, token, reads_metrics })
}

/// A session the core opened: its id, and the principal its token acts as.
#[derive(Debug)]
pub struct Opened {
    /// The session's id in the core.
    pub peer: PeerId,
    /// The principal.
    pub principal: String,
    /// Whether it may read the master's metrics (decided when the session opened).
    pub reads_metrics: bool,
}

/// What the gateway asks of the core.
#[derive(Debug)]
pub enum LocalCommand {
    /// Opens a session for the principal a gateway token (by its SHA-256) acts as.
    Connect {
        /// The token's SHA-256.
        token_hash: [u8; 32],
        /// The HTTP client's address, for the audit trail.
        addr: Option<std::net::SocketAddr>,
        /// Where the session's messages go.
        to_client: LocalSender,
        /// The session opened, or why not.
        reply: Reply<Result<Opened, TokenRefused>>,
    },
    /// A message from the session's client.
    Message {
        /// The session.
        peer: PeerId,
        /// What its client sent.
        msg: Box<Message>,
    },
    /// The session ended.
    Disconnect {
        /// The session.
        peer: PeerId,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::jobs::JobTable;
    use crate::core::registry::Registry;
    use crate::core::sessions::Sessions;
    use crate::store::PrincipalRecord;
    use halite_transport::PeerId;

    fn grant(id: &str, principal: &str, expires_at_ms: Option<u64>) -> Option<ApiTokenGrant> {
        Some(ApiTokenGrant { id: id.into(), principal: principal.into(), expires_at_ms })
    }

    /// A token opens a session as its principal is now: root and administrators read the
    /// metrics, others do not, and a token unknown or of a removed principal opens nothing.
    #[test]
    fn a_token_opens_a_session_as_its_principal_is_now() {
        let mut registry = Registry::default();
        let record = |name: &str, admin| PrincipalRecord {
            name: name.into(),
            public_key: [0; 32],
            acl: PrincipalAcl { admin, ..PrincipalAcl::default() },
        };
        registry.set_principals([record("heat", false), record("ops", true)]);
        let (config, jobs) = (crate::config::MasterConfig::default(), JobTable::default());
        let access = Access::of(&config, &registry, &jobs);

        let heat = session_for([1; 32], grant("t1", "heat", Some(5)), &access).unwrap();
        assert_eq!((heat.principal.as_str(), heat.reads_metrics), ("heat", false));
        assert_eq!((heat.token.hash, heat.token.id.as_str(), heat.token.expires_at_ms), ([1; 32], "t1", Some(5)));
        assert!(heat.acl.is_some_and(|acl| !acl.admin));
        assert!(session_for([2; 32], grant("t2", "ops", None), &access).unwrap().reads_metrics);
        let root = session_for([3; 32], grant("t3", "root", None), &access).unwrap();
        assert!(root.acl.is_none() && root.reads_metrics);
        assert_eq!(session_for([4; 32], None, &access).err(), Some(TokenRefused::Unknown));
        assert_eq!(
            session_for([5; 32], grant("t5", "gone", None), &access).err(),
            Some(TokenRefused::PrincipalGone("gone".into()))
        );
    }

    /// The sessions a token opened are found by its id, by its principal (with the hash to
    /// look it up again) and by its expiry; each leaves every index when it ends.
    #[test]
    fn sessions_are_found_by_their_token_and_leave_with_it() {
        let mut sessions = Sessions::default();
        let token = |id: &str, hash: u8, expires_at_ms| LocalToken { hash: [hash; 32], id: id.into(), expires_at_ms };
        let a = open(&mut sessions, "heat", token("t1", 1, Some(10)));
        let b = open(&mut sessions, "heat", token("t1", 1, Some(10)));
        let c = open(&mut sessions, "heat", token("t2", 2, None));
        let d = open(&mut sessions, "ops", token("t3", 3, Some(20)));
        assert_ne!(a, b);
        assert_eq!(sorted(sessions.opened_with_token("t1")), sorted(vec![a, b]));
        assert_eq!(sorted(sessions.tokens_of("heat")), sorted(vec![(a, [1; 32]), (b, [1; 32]), (c, [2; 32])]));
        assert_eq!(sessions.tokens_of("ops"), vec![(d, [3; 32])]);
        assert!(sessions.expired_tokens(9).is_empty());
        assert_eq!(sorted(sessions.expired_tokens(10)), sorted(vec![a, b]));
        assert_eq!(sessions.next_token_expiry_ms(), Some(10));
        sessions.remove(&a);
        sessions.remove(&b);
        assert!(sessions.opened_with_token("t1").is_empty());
        assert_eq!(sessions.next_token_expiry_ms(), Some(20));
        assert_eq!(sessions.expired_tokens(u64::MAX), vec![d]);
    }

    fn open(sessions: &mut Sessions, principal: &str, token: LocalToken) -> PeerId {
        sessions.open_local(principal.into(), None, Arc::new(crate::local_sessions::Discard), token)
    }

    fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
        v.sort();
        v
    }
}
