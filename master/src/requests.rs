//! What clients send once in session (over the network or in-process through the gateway):
//! subscriptions, publishes, cancels and requests. A request is asked of the loop, which
//! answers it once the step's changes so far are written (`Master::answer_request`, in parts
//! when large).

use std::sync::Arc;

use halite_protocol::message::{self, ErrorKind, Message, PrincipalAcl};
use halite_transport::PeerId;
use tokio::sync::mpsc;
use tracing::warn;

use crate::authz::publish::Publisher;
use crate::authz::{Action, Asker, Who};
use crate::core::asks::{Ask, ClientRequest, TokenGrant};
use crate::core::sessions::Conn;
use crate::gateway::local::{LocalCommand, Opened};
use crate::limits;
use crate::net::Net;
use crate::server::{Master, SUBSCRIBE_REQUEST};
use crate::store::{ApiTokenGrant, Store, StoreError};

impl<S: Store, N: Net> Master<S, N> {
    pub(crate) fn on_client_message(
        &mut self,
        peer: PeerId,
        principal: &str,
        acl: Option<Arc<PrincipalAcl>>,
        msg: Message,
    ) {
        match msg {
            Message::Subscribe(subscribe) => {
                let asker = Asker::client(principal, acl.as_deref());
                match self.access().decide(&asker, &Action::Subscribe(&subscribe.patterns)) {
                    Ok(_) => {
                        let patterns = subscribe.patterns.clone();
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
                self.publish(peer, principal, publisher, request)
            }
            Message::Cancel(cancel) => {
                let who = Who { name: principal, acl: acl.as_deref() };
                let access = self.access().job_access(who, &cancel.jid);
                self.cancel(peer, &cancel.jid, access)
            }
            Message::Request(request) => {
                let principal = principal.to_owned();
                self.asks.push(Ask::Request(Box::new(ClientRequest { peer, principal, acl, request })));
            }
            _ => self.send_error(peer, ErrorKind::BadRequest, "not a client message".into(), None),
        }
    }

    /// Sends a resuming subscriber what it missed after event `after`: the logged events its
    /// patterns match and it may see, oldest first, after a `halite/bus/gap` notice if some
    /// may be missing. Each goes through the subscriber's bounded queue like a live event.
    fn replay_events(&mut self, peer: PeerId, patterns: &[String], after: &str) {
        let since = self.event_log.since(after);
        let gap = since.gap.clone();
        let events: Vec<(String, halite_protocol::message::Value, String)> = since
            .events
            .into_iter()
            .filter(|e| patterns.iter().any(|p| halite_protocol::glob::matches(p, &e.tag)))
            .map(|e| (e.tag.clone(), e.data(), self.event_log.id(e.seq)))
            .collect();
        if let Some(why) = gap {
            let notice = halite_protocol::message::Event {
                tag: "halite/bus/gap".into(),
                data: serde_json::json!({ "after": after, "reason": why }),
                id: None,
            };
            self.send(peer, &Message::Event(notice));
        }
        for (tag, data, id) in events {
            if !self.peer_may_receive(peer, &tag, &data) {
                continue;
            }
            if self
                .try_send(peer, &Message::Event(halite_protocol::message::Event { tag, data, id: Some(id) }))
                .is_err()
            {
                self.bus.dropped(peer);
                self.metrics.get().bus_dropped.inc();
            }
        }
    }

    pub(crate) fn on_local(&mut self, command: LocalCommand) {
        match command {
            LocalCommand::Connect { token_hash, to_client, reply } => {
                self.asks.push(Ask::TokenGrant(Box::new(TokenGrant { token_hash, to_client, reply })));
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
    pub(crate) fn token_granted(&mut self, asked: TokenGrant, granted: Result<Option<ApiTokenGrant>, StoreError>) {
        let TokenGrant { token_hash, to_client, reply } = asked;
        let grant = match granted {
            Ok(grant) => grant,
            Err(error) => return warn!(%error, "store failure while handling a gateway request"),
        };
        let opened = crate::token_sessions::session_for(token_hash, grant, &self.access()).map(|session| {
            let principal = session.principal.clone();
            let peer = self.sessions.open_local(session.principal, session.acl, to_client, session.token);
            Opened { peer, principal, reads_metrics: session.reads_metrics }
        });
        let _ = reply.send(opened);
    }

    /// Where in-process clients send commands (see [`crate::gateway`]).
    pub(crate) fn local_commands(&self) -> mpsc::Sender<LocalCommand> {
        self.local_tx.clone()
    }

    /// Answers a request; over a connection, a listing too large for one message goes in
    /// parts (`more`), each within the message cap, so no answer ever drops its client.
    pub(crate) fn respond(&mut self, peer: PeerId, request_id: u64, body: message::ResponseBody) {
        let parts = match self.sessions.get(&peer) {
            Some(Conn::Local { .. }) => vec![body],
            _ => body.into_parts(limits::MESSAGE_BUDGET),
        };
        let last = parts.len().saturating_sub(1);
        for (index, body) in parts.into_iter().enumerate() {
            self.send(peer, &Message::Response(message::Response { request_id, body, more: index < last }));
        }
    }
}
