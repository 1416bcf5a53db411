//! What the gateway's in-process sessions bring: a token's session opened (once the store
//! said what the token grants), a message, a close.

use tracing::warn;

use crate::core::sessions::Conn;
use crate::outputs::asks::{Ask, TokenGrant};
use crate::store::{ApiTokenGrant, StoreError};
use crate::token_sessions::{LocalCommand, Opened};

use super::Core;

impl Core {
    pub fn on_local(&mut self, command: LocalCommand) {
        match command {
            LocalCommand::Connect { token_hash, addr, to_client, reply } => {
                self.asks.push(Ask::TokenGrant(Box::new(TokenGrant { token_hash, addr, to_client, reply })));
            }
            LocalCommand::Message { peer, msg } => {
                if let Some(Conn::Local { principal, acl, .. }) = self.sessions.get(&peer) {
                    let (principal, acl) = (principal.clone(), acl.clone());
                    self.on_client_message(peer, &principal, acl, *msg);
                }
            }
            LocalCommand::Disconnect { peer } => {
                if matches!(self.sessions.get(&peer), Some(Conn::Local { .. })) {
                    self.forget(peer, None);
                }
            }
        }
    }

    /// What a gateway token grants, read from the store: the session it opens, or why it opens
    /// none. A store failure drops the reply, which the gateway answers as unavailable.
    pub fn token_granted(&mut self, asked: TokenGrant, granted: Result<Option<ApiTokenGrant>, StoreError>) {
        let TokenGrant { token_hash, addr, to_client, reply } = asked;
        let grant = match granted {
            Ok(grant) => grant,
            Err(error) => return warn!(%error, "store failure while handling a gateway request"),
        };
        let opened = crate::token_sessions::session_for(token_hash, grant, &self.access()).map(|session| {
            let principal = session.principal.clone();
            let peer = self.sessions.open_local(session.principal, session.acl, to_client, session.token);
            if let Some(addr) = addr {
                self.audit.connected(peer, addr);
            }
            Opened { peer, principal, reads_metrics: session.reads_metrics }
        });
        reply.send(opened);
    }
}
