//! The minion's decisions, as a synchronous state machine: the handshake and who to try next,
//! refusal back-off, the master's time and which jobs are fresh, run-once, the job queue, the
//! outbox's returns until acknowledged, and the requests functions make of the master.
//!
//! Everything that wakes the minion is one [`Input`], handled by [`MinionCore::handle`] at a
//! time the caller gives: the core reads no clock, opens no socket and spawns nothing. What it
//! decides comes back as [`Effect`]s (send these parts, connect, run this job...) for the
//! caller to carry out in order; the daemon (`daemon.rs`) applies them to the transport's
//! `Dealer` and the executor, tests apply them to an in-memory network in simulated time.
//!
//! The one exception is the disk, where order is the point: the outbox is written by the core
//! itself, so a job's run-once marker is synced before the [`Effect::Run`] that starts it is
//! returned, and a return is stored before the [`Effect::Send`] that carries it.

mod jobs;
mod link;
mod requests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_modules::{Dispatcher, FileRequest, OutgoingEvent, PeerRequest};
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{self, Job, JobReturn, Message, Value};
use halite_protocol::noise::{LocalIdentity, SessionError};
use halite_transport::{Backoff, CloseReason};
use tracing::{error, warn};

use crate::freshness::MasterTime;
use crate::metrics::MinionMetrics;
use crate::outbox::Outbox;
use crate::revocations::Revocations;
use crate::VerifiedJobs;

use link::Stage;
use requests::Requests;

/// What the core is made of: the minion's identity, its trust, its functions and its outbox.
pub struct Settings {
    /// Minion id.
    pub id: String,
    /// How many master addresses the link tries, in turn, before the minion backs off.
    pub masters: usize,
    /// Our identity.
    pub identity: LocalIdentity,
    /// The pinned master key; `None` only with trust on first use.
    pub master_key: Option<PublicIdentity>,
    /// Where the master key is pinned on first use (revoked master keys are kept beside it).
    pub pin_path: PathBuf,
    /// One-time enrollment token.
    pub token: Option<String>,
    /// Functions under the policy, announced in `hello`.
    pub dispatcher: Arc<Dispatcher>,
    /// Grains announced in `hello`.
    pub grains: Arc<BTreeMap<String, Value>>,
    /// Markers and returns.
    pub outbox: Outbox,
    /// Jobs run at once (at least one).
    pub max_concurrent_jobs: usize,
    /// A verification cache shared with other minions of this process (the swarm only).
    pub verified: Option<Arc<VerifiedJobs>>,
    /// Figures for operators.
    pub metrics: Option<MinionMetrics>,
}

/// Everything that wakes the minion: a closed list.
#[derive(Debug)]
pub enum Input {
    /// The link connected (again): the handshake starts.
    Connected,
    /// A message from the master on the current connection.
    Message(Vec<Vec<u8>>),
    /// The connection dropped; the link reconnects by itself unless told otherwise.
    Disconnected(CloseReason),
    /// The link is gone for good: a new one is opened.
    LinkGone,
    /// A job started by [`Effect::Run`] finished (or was stopped).
    JobFinished(JobReturn),
    /// `event.send` from a running function.
    Event(OutgoingEvent),
    /// `peer.publish` from a running function.
    Publish(PeerRequest),
    /// A part of a `halite://` file, for a running function.
    File(FileRequest),
    /// The config was reread: a new policy and function list.
    Reloaded(Arc<Dispatcher>),
    /// [`MinionCore::next_timeout`] passed.
    Timer,
    /// The minion stops: what is written is synced.
    Shutdown,
}

/// What the core asks of its caller, in the order given.
#[derive(Debug, PartialEq)]
pub enum Effect {
    /// Open a new link to the masters, replacing any current one.
    Connect,
    /// Drop the link: nothing connects until a later [`Effect::Connect`].
    DropLink,
    /// Close the current connection (with this reason) and try the next master of the list.
    MoveOn(String),
    /// The session is authenticated: the link may lift its pre-authentication limits.
    MarkAuthenticated,
    /// Send these parts on the current connection (dropped if it is gone meanwhile).
    Send(Vec<Vec<u8>>),
    /// Start this job; its marker is synced. It ends with [`Input::JobFinished`].
    Run(Job),
    /// Stop this running job (it still ends with [`Input::JobFinished`]).
    Cancel(String),
}

/// One minion's state and decisions.
pub struct MinionCore {
    id: String,
    masters: usize,
    identity: LocalIdentity,
    master_key: Option<PublicIdentity>,
    pin_path: PathBuf,
    token: Option<String>,
    dispatcher: Arc<Dispatcher>,
    grains: Arc<BTreeMap<String, Value>>,
    outbox: Outbox,
    verified: Option<Arc<VerifiedJobs>>,
    metrics: Option<MinionMetrics>,
    /// The time of the input being handled.
    now: Instant,
    /// Whether a link exists (opened by [`Effect::Connect`], not dropped since).
    linked: bool,
    stage: Stage,
    /// Jobs started and not finished (a cancelled one stays until it has stopped).
    running: HashSet<String>,
    /// Accepted jobs waiting for a free slot, in jid order (the order the master issued them).
    /// Nothing is recorded on disk for them until they start.
    queued: BTreeMap<String, jobs::Queued>,
    /// Slots free for jobs to start (`max_concurrent_jobs` at most).
    free_slots: usize,
    /// Returns the outbox could not store (a full disk): kept here, sent at every session
    /// start until acknowledged, and stored as soon as the disk takes them again.
    unsent: BTreeMap<String, JobReturn>,
    /// When the returns written since the outbox's last sync are synced, unless a job's
    /// marker syncs them first.
    sync_at: Option<Instant>,
    /// The master's clock, learned at the last `welcome`, for judging jobs' freshness.
    master_time: Option<MasterTime>,
    /// When the last `hello` left: the master's `welcome` answers it, so its time was read at
    /// or after then (a welcome that waited unread, the minion stopped, is not taken as now).
    hello_sent_at: Option<Instant>,
    /// Welcomes in a row that came too long after their hello to date the master's time.
    slow_welcomes: u32,
    /// Requests of functions waiting for the master's answer.
    requests: Requests,
    /// When refused (pending or rejected), when to knock again.
    retry_at: Option<Instant>,
    refusals: Backoff,
    /// Master keys the cluster key revoked, as masters told this minion.
    revocations: Revocations,
    /// The master of the current (or last) handshake.
    master_now: Option<PublicIdentity>,
    /// Masters that refused or failed the handshake in a row: the next one of the list is
    /// tried at once until every one has, then the minion backs off.
    handshake_failures: usize,
    effects: Vec<Effect>,
}

impl MinionCore {
    /// A minion not connected yet; [`MinionCore::start`] opens its link.
    pub fn new(settings: Settings, now: Instant) -> Self {
        let revocations = Revocations::load(settings.pin_path.with_file_name("revoked_masters"));
        MinionCore {
            id: settings.id,
            masters: settings.masters,
            identity: settings.identity,
            master_key: settings.master_key,
            pin_path: settings.pin_path,
            token: settings.token,
            dispatcher: settings.dispatcher,
            grains: settings.grains,
            outbox: settings.outbox,
            verified: settings.verified,
            metrics: settings.metrics,
            now,
            linked: false,
            stage: Stage::Down,
            running: HashSet::new(),
            queued: BTreeMap::new(),
            free_slots: settings.max_concurrent_jobs.max(1),
            unsent: BTreeMap::new(),
            sync_at: None,
            master_time: None,
            hello_sent_at: None,
            slow_welcomes: 0,
            requests: Requests::default(),
            retry_at: None,
            refusals: Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
            revocations,
            master_now: None,
            handshake_failures: 0,
            effects: Vec::new(),
        }
    }

    /// Opens the link.
    pub fn start(&mut self) -> Vec<Effect> {
        self.connect();
        std::mem::take(&mut self.effects)
    }

    /// Handles one input at `now`; what to do about it, in order.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        self.now = now;
        match input {
            Input::Connected => self.connected(),
            Input::Message(parts) => self.on_message(parts),
            Input::Disconnected(reason) => self.disconnected(reason),
            Input::LinkGone => self.connect(),
            Input::JobFinished(ret) => self.on_done(ret),
            Input::Event(event) => self.on_event_send(event),
            Input::Publish(request) => self.on_peer_request(request),
            Input::File(request) => self.on_file_request(request),
            Input::Reloaded(dispatcher) => self.reloaded(dispatcher),
            Input::Timer => {
                if self.retry_at.is_some_and(|at| at <= now) {
                    self.retry_at = None;
                    self.connect();
                }
                if self.sync_at.is_some_and(|at| at <= now) {
                    self.sync_returns();
                }
            }
            Input::Shutdown => self.sync_returns(),
        }
        std::mem::take(&mut self.effects)
    }

    /// When [`Input::Timer`] is due: the next knock after a refusal, or the outbox's sync.
    pub fn next_timeout(&self) -> Option<Instant> {
        match (self.retry_at, self.sync_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The functions and policy jobs run under now.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// Returns the master has not acknowledged yet (stored, or kept in memory).
    pub fn unacknowledged(&self) -> usize {
        self.outbox.pending_count() + self.unsent.len()
    }

    /// Whether a session with a master is up.
    pub fn is_up(&self) -> bool {
        matches!(self.stage, Stage::Up(_))
    }

    /// The config was reread: jobs from now on use the new policy and actions (running ones
    /// finish with the old), and the master hears the new function list.
    fn reloaded(&mut self, dispatcher: Arc<Dispatcher>) {
        tracing::info!("config reread: policy, custom actions and plans reloaded");
        self.dispatcher = dispatcher;
        if self.is_up() {
            self.hello();
        }
    }

    /// Syncs the returns written since the outbox's last sync; retried a second later if the
    /// disk fails (they stay in memory, and are re-sent from there, until acknowledged).
    fn sync_returns(&mut self) {
        self.sync_at = None;
        if let Err(error) = self.outbox.sync() {
            error!(%error, "could not sync the outbox; its unacknowledged returns would not survive a machine failure");
            self.sync_at = Some(self.now + Duration::from_secs(1));
        }
    }

    /// Parts for the current connection, if there is a link.
    fn send_raw(&mut self, parts: Vec<Vec<u8>>) {
        if self.linked {
            self.effects.push(Effect::Send(parts));
        }
    }

    /// Seals and sends a message, if a session is up.
    fn send(&mut self, msg: &Message) {
        let Stage::Up(session) = &mut self.stage else { return };
        match session.seal(&message::encode(msg), self.now) {
            Ok(parts) => self.send_raw(parts),
            // Not a lost session: this one message cannot go (returns are fitted before they
            // are stored, so this is something else, and reconnecting would not help).
            Err(error @ SessionError::MessageTooLarge { .. }) => {
                error!(%error, "a message to the master is too large; not sent")
            }
            Err(error) => {
                warn!(%error, "session ended; reconnecting");
                self.connect();
            }
        }
    }
}
