//! In-process client sessions: the gateway talks to the master's core with the same messages
//! a networked client sends, so every check (ACLs, targeting, job streaming, the bus) is the
//! one code path. Each HTTP request opens one local session authenticated by its token, once,
//! and the core keeps it bound to that token: revoked, expired or its principal changed, the
//! session ends (told why by an error naming [`SESSION_ENDED`]).

use std::collections::VecDeque;
use std::time::Duration;

use halite_protocol::message::{
    ClientHello, ErrorKind, ErrorMessage, Event, Message, PublishRequest, Published, Request, RequestBody,
    ResponseBody, Subscribe,
};
use halite_transport::PeerId;
use tokio::sync::{mpsc, oneshot};

use crate::local_queue::{local_queue, LocalInbox};
use crate::local_sessions::Reply;
pub(crate) use crate::token_sessions::LocalCommand;
use crate::token_sessions::{Opened, SESSION_ENDED};
use halite_protocol::message::SUBSCRIBE_REQUEST;

/// How long a request may take in the core.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a local call failed; maps to an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallError {
    /// Missing or unknown token, or one revoked or expired (or its principal changed) while
    /// the session was open.
    Unauthorized(String),
    /// The core answered with an error.
    Refused(ErrorKind, String),
    /// The core is gone or did not answer in time.
    Unavailable(String),
}

/// A session with the core; ends when dropped.
pub(crate) struct LocalSession {
    commands: mpsc::Sender<LocalCommand>,
    peer: PeerId,
    principal: String,
    reads_metrics: bool,
    inbox: LocalInbox,
    /// Messages read while waiting for a subscription's answer (events it replayed), given
    /// out before the inbox's.
    early: VecDeque<Message>,
    next_request: u64,
}

impl Drop for LocalSession {
    fn drop(&mut self) {
        let _ = self.commands.try_send(LocalCommand::Disconnect { peer: self.peer });
    }
}

impl LocalSession {
    /// Authenticates a token and opens a session.
    pub(crate) async fn open(
        commands: &mpsc::Sender<LocalCommand>,
        token: &str,
        addr: Option<std::net::SocketAddr>,
    ) -> Result<Self, CallError> {
        let (to_client, inbox) = local_queue();
        let (replied, answer) = oneshot::channel();
        let reply = Reply::new(move |opened| {
            let _ = replied.send(opened);
        });
        let token_hash = crate::keys::token_hash(token);
        commands
            .send(LocalCommand::Connect { token_hash, addr, to_client, reply })
            .await
            .map_err(|_| CallError::Unavailable("the master is shutting down".into()))?;
        let Opened { peer, principal, reads_metrics } = answer
            .await
            .map_err(|_| CallError::Unavailable("the master is shutting down".into()))?
            .map_err(|refused| CallError::Unauthorized(refused.to_string()))?;
        Ok(LocalSession {
            commands: commands.clone(),
            peer,
            principal,
            reads_metrics,
            inbox,
            early: VecDeque::new(),
            next_request: 1,
        })
    }

    /// The principal the session acts as.
    pub(crate) fn principal(&self) -> &str {
        &self.principal
    }

    /// Whether the session may read the master's metrics.
    pub(crate) fn reads_metrics(&self) -> bool {
        self.reads_metrics
    }

    async fn send(&self, msg: Message) -> Result<(), CallError> {
        self.commands
            .send(LocalCommand::Message { peer: self.peer, msg: Box::new(msg) })
            .await
            .map_err(|_| CallError::Unavailable("the master is shutting down".into()))
    }

    /// The next bus event of a subscription; `Err` once, when the core ended the session (its
    /// token revoked or expired, its principal changed), then `None`.
    pub(crate) async fn next_event(&mut self) -> Option<Result<Event, CallError>> {
        loop {
            let msg = match self.early.pop_front() {
                Some(msg) => msg,
                None => self.inbox.recv().await?,
            };
            match msg {
                Message::Event(event) => return Some(Ok(event)),
                Message::Error(e) if e.request.as_deref() == Some(SESSION_ENDED) => {
                    self.inbox.close();
                    self.early.clear();
                    return Some(Err(CallError::Unauthorized(e.message)));
                }
                _ => continue,
            }
        }
    }

    /// An administrative or deployment request and its answer.
    pub(crate) async fn request(&mut self, body: RequestBody) -> Result<ResponseBody, CallError> {
        let request_id = self.next_request;
        self.next_request += 1;
        self.send(Message::Request(Request { request_id, body })).await?;
        let wanted = request_id.to_string();
        self.answer(|msg| match msg {
            Message::Response(r) if r.request_id == request_id => Some(Ok(r.body)),
            Message::Error(e) if e.request.as_deref() == Some(wanted.as_str()) => Some(Err(refused(e))),
            _ => None,
        })
        .await
    }

    /// Publishes a job; the answer is its jid and minions (returns are not awaited).
    pub(crate) async fn publish(&mut self, mut request: PublishRequest) -> Result<Published, CallError> {
        request.request_id = self.next_request;
        self.next_request += 1;
        let request_id = request.request_id;
        let wanted = request_id.to_string();
        self.send(Message::Publish(request)).await?;
        self.answer(|msg| match msg {
            Message::Published(p) if p.request_id == request_id => Some(Ok(p)),
            Message::Error(e) if e.request.as_deref() == Some(wanted.as_str()) => Some(Err(refused(e))),
            _ => None,
        })
        .await
    }

    /// Cancels a job (the master answers only if it is not one this session may see).
    pub(crate) async fn cancel(&mut self, jid: String) -> Result<(), CallError> {
        self.send(Message::Cancel(halite_protocol::message::Cancel { jid: jid.clone() })).await?;
        // A refused cancel (not found, or seen but not the caller's to stop) is answered with
        // an error naming the jid: waited for, so the caller is never told it cancelled.
        self.taken_or_refused(&jid).await
    }

    /// Subscribes to bus events whose tags match `patterns`, resuming after event `after`.
    /// Answers only once the core has taken or refused it: a hello sent right after is
    /// answered in order, after the refusal if there is one (the core acknowledges no
    /// subscription by itself). Events that arrive meanwhile are kept for [`Self::next_event`].
    pub(crate) async fn subscribe(&mut self, patterns: Vec<String>, after: Option<String>) -> Result<(), CallError> {
        self.send(Message::Subscribe(Subscribe { patterns, after })).await?;
        self.taken_or_refused(SUBSCRIBE_REQUEST).await
    }

    /// Waits until the core has taken or refused what was just sent (`request`: what its
    /// refusal names): a hello sent now is answered in order, after the refusal if there is one.
    async fn taken_or_refused(&mut self, request: &str) -> Result<(), CallError> {
        let hello = ClientHello { principal: self.principal.clone(), version: env!("CARGO_PKG_VERSION").into() };
        self.send(Message::ClientHello(hello)).await?;
        let wait = async {
            while let Some(msg) = self.inbox.recv().await {
                match msg {
                    Message::Welcome(_) => return Ok(()),
                    Message::Error(e) if e.request.as_deref() == Some(request) => return Err(refused(e)),
                    Message::Error(e) if e.request.as_deref() == Some(SESSION_ENDED) => {
                        return Err(CallError::Unauthorized(e.message))
                    }
                    msg => self.early.push_back(msg),
                }
            }
            Err(CallError::Unavailable("the master closed the session".into()))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| Err(CallError::Unavailable("the master did not answer in time".into())))
    }

    async fn answer<T>(
        &mut self,
        mut pick: impl FnMut(Message) -> Option<Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let wait = async {
            while let Some(msg) = self.inbox.recv().await {
                if let Message::Error(e) = &msg {
                    if e.request.as_deref() == Some(SESSION_ENDED) {
                        return Err(CallError::Unauthorized(e.message.clone()));
                    }
                }
                if let Some(result) = pick(msg) {
                    return result;
                }
            }
            Err(CallError::Unavailable("the master closed the session".into()))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| Err(CallError::Unavailable("the master did not answer in time".into())))
    }
}

fn refused(error: ErrorMessage) -> CallError {
    CallError::Refused(error.kind, error.message)
}
