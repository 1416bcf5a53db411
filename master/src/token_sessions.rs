//! In-process sessions (the gateway's) are bound to the token they were opened with, not only
//! checked when they open: revoking the token (on this master or another sharing the store),
//! its expiry, or a change of its principal ends every session opened with it (the loop wakes when a token expires).
//! Each is told why just before its queue closes, so an event stream ends with a reason
//! instead of outliving its authorisation.

use std::sync::Arc;

use halite_protocol::message::{ErrorKind, ErrorMessage, Message};
use halite_transport::PeerId;
use tracing::info;

use crate::core::sessions::{Conn, LocalToken};
use crate::gateway::local::Opened;
use crate::net::Net;
use crate::server::Master;
use crate::store::{ApiTokenGrant, Store, StoreError};

/// The `request` of the error that ends an in-process session (its `message` says why).
pub(crate) const SESSION_ENDED: &str = "session";

/// What an in-process session is told when the core ends it.
pub(crate) fn session_ended(why: &str) -> Message {
    Message::Error(ErrorMessage {
        kind: ErrorKind::Forbidden,
        message: why.to_owned(),
        request: Some(SESSION_ENDED.into()),
    })
}

/// Why a token opens no session (told to the gateway's caller as is).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TokenRefused {
    /// Unknown or expired.
    #[error("unknown token")]
    Unknown,
    /// The principal it acts as was removed.
    #[error("the token's principal {0} no longer exists")]
    PrincipalGone(String),
}

impl<S: Store, N: Net> Master<S, N> {
    /// Opens an in-process session for what a token grants (`None`: unknown or expired).
    pub(crate) fn open_local(
        &mut self,
        hash: [u8; 32],
        grant: Option<ApiTokenGrant>,
        tx: crate::gateway::local_queue::LocalSender,
    ) -> Result<Opened, TokenRefused> {
        let Some(grant) = grant else { return Err(TokenRefused::Unknown) };
        let acl = match grant.principal.as_str() {
            "root" => None,
            name => match self.registry.principal(name) {
                Some(record) => Some(Arc::new(record.acl.clone())),
                None => return Err(TokenRefused::PrincipalGone(name.to_owned())),
            },
        };
        let asker = crate::authz::Asker::client(&grant.principal, acl.as_deref());
        let reads_metrics = self.access().decide(&asker, &crate::authz::Action::ReadMetrics).is_ok();
        let peer = self.sessions.next_local();
        let token = LocalToken { hash, id: grant.id, expires_at_ms: grant.expires_at_ms };
        let principal = grant.principal;
        self.sessions.insert(peer, Conn::Local { principal: principal.clone(), acl, tx, token });
        Ok(Opened { peer, principal, reads_metrics })
    }

    /// Ends the in-process sessions opened with the token `id` (revoked through this master).
    pub(crate) fn cut_token_sessions(&mut self, id: &str) {
        let peers = self.local_sessions(|token| token.id == id);
        self.end_local(peers, "token revoked");
    }

    /// Ends the in-process sessions whose token has expired (the loop wakes when the first
    /// one does: a live event stream has a deadline, not only a check when it opens).
    pub(crate) fn expire_token_sessions(&mut self) {
        let peers = self.sessions.expired_tokens(self.clock.wall_ms());
        self.end_local(peers, "token expired");
    }

    /// Looks up again the tokens of `principal`'s in-process sessions and ends those whose
    /// token is gone: another master revoked it (its announcement names the principal), or
    /// announcements were missed and everything is reread.
    pub(crate) async fn recheck_tokens(&mut self, principal: &str) -> Result<(), StoreError> {
        let now = self.clock.wall_ms();
        let mut gone = Vec::new();
        for peer in self.sessions.clients_of(principal) {
            let Some(Conn::Local { token, .. }) = self.sessions.get(&peer) else { continue };
            if self.store.api_token_grant(&token.hash, now).await?.is_none() {
                gone.push(peer);
            }
        }
        self.end_local(gone, "token revoked");
        Ok(())
    }

    /// The in-process sessions whose token `pick` selects.
    fn local_sessions(&self, pick: impl Fn(&LocalToken) -> bool) -> Vec<PeerId> {
        self.sessions
            .iter()
            .filter(|(_, conn)| matches!(conn, Conn::Local { token, .. } if pick(token)))
            .map(|(peer, _)| *peer)
            .collect()
    }

    fn end_local(&mut self, peers: Vec<PeerId>, why: &str) {
        for peer in peers {
            info!(peer = peer.0, why, "ending a gateway session");
            self.forget(peer, Some(why));
        }
    }
}
