//! What running functions ask of the master (`event.send`, `peer.publish`, parts of
//! `halite://` files): forwarded while a session is up, refused at once otherwise, and the
//! answers routed back by request id.

use std::collections::HashMap;

use halite_modules::{FileRequest, OutgoingEvent, PeerRefusal, PeerRequest};
use halite_protocol::message::{ErrorKind, ErrorMessage, Event, FileChunk, FileGet, Message, Published};
use tokio::sync::oneshot;
use tracing::warn;

use super::MinionCore;

/// Where the master's answer to a `halite://` part goes.
type FileReply = oneshot::Sender<Result<FileChunk, (ErrorKind, String)>>;

/// Requests waiting for the master's answer, by request id.
#[derive(Default)]
pub(super) struct Requests {
    publishes: HashMap<u64, oneshot::Sender<Result<Published, PeerRefusal>>>,
    files: HashMap<u64, FileReply>,
    last_id: u64,
}

impl Requests {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    /// The session ended: parts asked of it will not come, so their fetches fail now (a
    /// publish may still be answered by the master, and is left waiting).
    pub(super) fn session_lost(&mut self) {
        self.files.clear();
    }

    pub(super) fn published(&mut self, published: Published) {
        if let Some(reply) = self.publishes.remove(&published.request_id) {
            let _ = reply.send(Ok(published));
        }
    }

    pub(super) fn file_chunk(&mut self, chunk: FileChunk) {
        if let Some(reply) = self.files.remove(&chunk.request_id) {
            let _ = reply.send(Ok(chunk));
        }
    }

    /// Routes an error to the request it answers; one that answers none is handed back.
    pub(super) fn error(&mut self, error: ErrorMessage) -> Option<ErrorMessage> {
        let id = error.request.as_deref().and_then(|r| r.parse::<u64>().ok());
        if let Some(reply) = id.and_then(|id| self.files.remove(&id)) {
            let _ = reply.send(Err((error.kind, error.message)));
            return None;
        }
        match id.and_then(|id| self.publishes.remove(&id)) {
            Some(reply) => {
                let _ = reply.send(Err(PeerRefusal::Master(error.message)));
                None
            }
            None => Some(error),
        }
    }
}

impl MinionCore {
    /// `event.send` from a running function: to the master, which applies its ACL.
    pub(super) fn on_event_send(&mut self, event: OutgoingEvent) {
        if !self.is_up() {
            return warn!(tag = %event.tag, "no session with the master; event dropped");
        }
        self.send(&Message::Event(Event { tag: event.tag, data: event.data, id: None }));
        if let Some(metrics) = &self.metrics {
            metrics.event_sent();
        }
    }

    /// `peer.publish`: forwards the request and remembers where the answer goes.
    pub(super) fn on_peer_request(&mut self, mut request: PeerRequest) {
        if !self.is_up() {
            let _ = request.reply.send(Err(PeerRefusal::NoSession));
            return;
        }
        let id = self.requests.next_id();
        request.request.request_id = id;
        self.requests.publishes.insert(id, request.reply);
        self.send(&Message::Publish(request.request));
    }

    /// A part of a `halite://` file: asked of the master, answered when it comes (or at once
    /// without a session; a lost session fails what waits).
    pub(super) fn on_file_request(&mut self, request: FileRequest) {
        if !self.is_up() {
            let _ = request.reply.send(Err((ErrorKind::Other, "no session with the master".into())));
            return;
        }
        let id = self.requests.next_id();
        self.requests.files.insert(id, request.reply);
        self.send(&Message::FileGet(FileGet { request_id: id, path: request.path, offset: request.offset }));
    }
}
