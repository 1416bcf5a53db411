//! What a function call may know about and use.

use std::collections::BTreeMap;
use std::sync::Arc;

use halite_protocol::message::{ErrorKind, FileChunk, PublishRequest, Published, Value};
use tokio::sync::{mpsc, oneshot, watch};

use crate::{Dispatcher, Runner};

/// An event a function hands to the minion for the master (`event.send`).
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingEvent {
    /// Tag, relative to the minion's namespace.
    pub tag: String,
    /// Body.
    pub data: Value,
}

/// A job a function asks the master to run on other minions (`peer.publish`), with where
/// the master's answer goes.
#[derive(Debug)]
pub struct PeerRequest {
    /// The publish request (its `request_id` is set by the minion daemon).
    pub request: PublishRequest,
    /// The master's answer: the job and its minions, or why it refused.
    pub reply: oneshot::Sender<Result<Published, PeerRefusal>>,
}

/// Why a `peer.publish` was not published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerRefusal {
    /// The minion has no session with the master to forward it on.
    #[error("no session with the master")]
    NoSession,
    /// The master refused it; its message.
    #[error("{0}")]
    Master(String),
}

/// A part of a file the master serves (`halite://`), with where the master's answer goes.
#[derive(Debug)]
pub struct FileRequest {
    /// The `halite://` URL's path.
    pub path: String,
    /// Where the part starts.
    pub offset: u64,
    /// The part, or why the master refused it.
    pub reply: oneshot::Sender<Result<FileChunk, (ErrorKind, String)>>,
}

/// Per-call context.
#[derive(Debug, Clone)]
pub struct Context {
    /// `test=true`: report what would change without changing it.
    pub test: bool,
    /// When the call must be done (the job's timeout); `None` for no limit.
    pub deadline: Option<tokio::time::Instant>,
    /// Becomes `true` when the job is cancelled. Dropping the call's future is what stops it;
    /// this lets long functions notice early and clean up.
    pub cancelled: watch::Receiver<bool>,
    /// Spawns processes (process groups, caps, users, timeouts).
    pub runner: Runner,
    /// This minion's grains, collected at start-up.
    pub grains: Arc<BTreeMap<String, Value>>,
    /// Who asked (the job's caller; `local` for `halite-minion call`).
    pub caller: String,
    /// This minion's id, as the master knows it (`plan.apply` matches the top file's targets
    /// against it); empty where there is none (a bare call in a test).
    pub minion: String,
    /// Function globs the caller may reach, from the master-signed job: every call through the
    /// dispatcher, nested ones included, must match one. `None`: no limit beyond the policy.
    pub reach: Option<Arc<[String]>>,
    /// The registry and policy, for functions that call functions (`plan.run`, `sys.*`).
    pub dispatcher: Option<Arc<Dispatcher>>,
    /// Where `event.send` puts events; `None` when there is no master (local calls).
    pub events: Option<mpsc::Sender<OutgoingEvent>>,
    /// Where `peer.publish` sends requests; `None` when there is no master.
    pub peer: Option<mpsc::Sender<PeerRequest>>,
    /// Where `halite://` sources are fetched from; `None` when there is no master.
    pub files: Option<mpsc::Sender<FileRequest>>,
}

impl Context {
    /// The paths functions may not touch, from the dispatcher (none without one: a bare call
    /// in a test has no minion secrets to keep).
    pub fn paths(&self) -> &crate::PathGuard {
        static NONE: std::sync::OnceLock<crate::PathGuard> = std::sync::OnceLock::new();
        match &self.dispatcher {
            Some(dispatcher) => &dispatcher.paths,
            None => NONE.get_or_init(crate::PathGuard::default),
        }
    }
}

impl Default for Context {
    fn default() -> Self {
        let (_, cancelled) = watch::channel(false);
        Context {
            test: false,
            deadline: None,
            cancelled,
            runner: Runner,
            grains: Arc::default(),
            caller: "local".into(),
            minion: String::new(),
            reach: None,
            dispatcher: None,
            events: None,
            peer: None,
            files: None,
        }
    }
}
