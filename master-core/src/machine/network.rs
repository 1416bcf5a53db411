//! What connections bring: a connection opened, a message read by its session
//! (`Sessions::open`) and handed to its handler (a handshake to the admission desk, a minion's
//! to its desk, a client's decided here or at the publish desk; a request asked of the loop,
//! which answers it once the step's changes so far are written), a connection closed.

use std::sync::Arc;

use halite_protocol::message::{ErrorKind, Message, PrincipalAcl, SUBSCRIBE_REQUEST};
use halite_transport::{PeerId, RouterEvent};
use tracing::{debug, info, warn};

use crate::authz::publish::Publisher;
use crate::authz::{Action, Asker, Who};
use crate::core::sessions::{Conn, Opened};
use crate::outputs::asks::{Ask, ClientRequest};

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
            RouterEvent::Message { peer, parts } => match self.sessions.open(peer, parts, self.now.at) {
                Opened::Minion { id, msg, size } => {
                    self.with_minion_desk(|desk| desk.on_minion_message(peer, &id, msg, size))
                }
                Opened::Client { principal, acl, msg } => self.on_client_message(peer, &principal, acl, msg),
                Opened::Handshake(parts) => self.with_admission_desk(|desk| desk.on_handshake(peer, parts)),
                Opened::Unreadable(why) => self.send_error(peer, ErrorKind::BadRequest, why, None),
                Opened::Ignored => {}
            },
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
}
