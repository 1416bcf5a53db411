//! Where the loop hands inputs to their handlers and answers what the handlers asked of the
//! store (`outputs/asks.rs`): the one place a handler's store call is awaited. Each answer goes to
//! the handler's synchronous continuation before anything else happens.
//!
//! What clients send once in session (over the network or in-process through the gateway) is
//! handed out here too: subscriptions, publishes, cancels and requests. A request is asked of
//! the loop, which answers it once the step's changes so far are written
//! (`AdminDesk::answer_request`, or `deploy/`'s, in parts when large).

use std::sync::Arc;

use halite_protocol::message::{ErrorKind, Message, PrincipalAcl};
use halite_transport::{PeerId, RouterEvent};
use tracing::{debug, info, warn};

use crate::admission::Unsealed;
use crate::authz::publish::Publisher;
use crate::authz::{Action, Asker, Who};
use crate::core::sessions::Conn;
use crate::outputs::asks::{Ask, ClientRequest, TokenGrant};
use crate::store::{ApiTokenGrant, StoreError};
use crate::token_sessions::LocalCommand;
use crate::token_sessions::Opened;

use halite_protocol::message::SUBSCRIBE_REQUEST;

use super::Core;

impl Core {
    pub fn on_network(&mut self, event: RouterEvent) {
        match event {
            RouterEvent::Connected { peer, addr, .. } => {
                debug!(peer = peer.0, %addr, "connection");
                self.audit.connected(peer, addr);
                let now = self.now.at;
                self.sessions.insert(peer, Conn::AwaitHello { since: now });
                self.sessions.watch(peer, now + self.config.handshake_timeout());
            }
            RouterEvent::Message { peer, parts } => {
                match self.with_admission_desk(|desk| desk.on_message(peer, parts)) {
                    Some(Unsealed::Minion { id, msg, size }) => {
                        self.with_minion_desk(|desk| desk.on_minion_message(peer, &id, msg, size))
                    }
                    Some(Unsealed::Client { principal, acl, msg }) => {
                        self.on_client_message(peer, &principal, acl, msg)
                    }
                    None => {}
                }
            }
            RouterEvent::Disconnected { peer, reason } => {
                match self.sessions.get(&peer) {
                    Some(Conn::Minion { id, .. }) => info!(minion = %id, %reason, "minion disconnected"),
                    Some(Conn::Client { principal, .. }) => debug!(%principal, %reason, "client disconnected"),
                    _ => debug!(peer = peer.0, %reason, "unauthenticated connection closed"),
                }
                self.forget(peer, None);
            }
        }
    }

    pub fn on_client_message(&mut self, peer: PeerId, principal: &str, acl: Option<Arc<PrincipalAcl>>, msg: Message) {
        self.audit_begin(peer, principal, acl.as_deref(), &msg);
        match msg {
            Message::Subscribe(subscribe) => {
                let asker = Asker::client(principal, acl.as_deref());
                match self.access().decide(&asker, &Action::Subscribe(&subscribe.patterns)) {
                    Ok(_) => {
                        let patterns = subscribe.patterns.clone();
                        self.audit.settle(peer, SUBSCRIBE_REQUEST, self.now.wall_ms);
                        self.bus.subscribe(peer, subscribe.patterns, acl.map(|a| a.events.clone()));
                        if let Some(after) = subscribe.after {
                            self.replay_events(peer, &patterns, &after);
                        }
                    }
                    Err(denied) => {
                        warn!(%principal, why = %denied, "subscription refused");
                        self.send_error(peer, denied.kind(), denied.message(), Some(SUBSCRIBE_REQUEST.into()));
                    }
                }
            }
            Message::ClientHello(_) => {
                self.send(peer, &Message::Welcome(self.welcome()));
            }
            Message::Publish(request) => {
                let publisher = match acl {
                    None => Publisher::Root,
                    Some(acl) => Publisher::Principal(acl),
                };
                self.with_publish_desk(|desk| desk.publish(peer, principal, publisher, request))
            }
            Message::Cancel(cancel) => {
                let who = Who { name: principal, acl: acl.as_deref() };
                let access = self.access().job_access(who, &cancel.jid);
                self.with_publish_desk(|desk| desk.cancel(peer, &cancel.jid, access));
                self.audit.settle(peer, &cancel.jid, self.now.wall_ms);
            }
            Message::Request(request) => {
                let principal = principal.to_owned();
                self.asks.push(Ask::Request(Box::new(ClientRequest { peer, principal, acl, request })));
            }
            _ => self.send_error(peer, ErrorKind::BadRequest, "not a client message".into(), None),
        }
    }

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
