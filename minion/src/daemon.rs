//! The minion's connection loop: handshake, hello, jobs in, returns out through the outbox.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_modules::{Context, Dispatcher, FileRequest, OutgoingEvent, PeerRefusal, PeerRequest};
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{
    self, ErrorKind, ErrorMessage, Hello, Job, JobAck, JobReturn, Message, ModuleInfo, Outcome, SignedJob,
};
use halite_protocol::noise::{
    AwaitingVerdict, Claim as HandshakeClaim, HandshakeError, Initiator, LocalIdentity, MasterPin, Role, Session,
    SessionConfig, KEY_ACCEPTED_REASON, REPLACED_REASON,
};
use halite_protocol::zmtp::ZmtpError;
use halite_transport::{Backoff, CloseReason, Dealer, DealerConfig, DealerEvent, DealerSender};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

use crate::executor::execute;
use crate::outbox::{Claim, Outbox};

/// Everything the loop needs, resolved from config and enrollment.
pub(crate) struct Setup {
    /// Minion id.
    pub id: String,
    /// The masters' addresses, in the order to try them (a cluster's masters share one store:
    /// any of them serves this minion).
    pub masters: Vec<String>,
    /// Our identity.
    pub identity: LocalIdentity,
    /// The pinned master key; `None` only with trust on first use.
    pub master_key: Option<PublicIdentity>,
    /// Where to pin the master key on first use.
    pub pin_path: std::path::PathBuf,
    /// One-time enrollment token.
    pub token: Option<String>,
    /// Functions under the policy.
    pub dispatcher: Arc<Dispatcher>,
    /// New dispatchers from a reread config (SIGHUP), when the minion runs from a file.
    pub reloads: Option<mpsc::Receiver<Arc<Dispatcher>>>,
    /// Context for calls (grains, event sender).
    pub context: Context,
    /// Events from `event.send`, to forward to the master.
    pub events: mpsc::Receiver<OutgoingEvent>,
    /// Jobs functions ask the master to publish (`peer.publish`).
    pub peer_requests: mpsc::Receiver<PeerRequest>,
    /// Parts of master-served files functions ask for (`halite://` sources).
    pub file_requests: mpsc::Receiver<FileRequest>,
    /// Figures for operators, when `[metrics] listen` is set.
    pub metrics: Option<crate::metrics::MinionMetrics>,
    /// Outbox and markers.
    pub outbox: Outbox,
    /// Concurrency limit.
    pub max_concurrent_jobs: usize,
    /// A verification cache shared with other minions of this process (the swarm only).
    pub verified: Option<Arc<crate::VerifiedJobs>>,
    /// The state directory's lock, held while the minion runs (`None` in the swarm, whose
    /// minions share one process).
    pub _state_lock: Option<nix::fcntl::Flock<std::fs::File>>,
}

enum Stage {
    /// No ZMTP connection.
    Down,
    /// Message 1 sent.
    AwaitResponse(Box<Initiator>),
    /// Message 3 sent.
    AwaitVerdict(Box<AwaitingVerdict>),
    /// Authenticated.
    Up(Box<Session>),
    /// Told pending or rejected; the connection is kept until the master closes it (see
    /// [`Minion::park`]).
    Parked,
}

/// Where the master's answer to a `halite://` part goes.
type FileReply = oneshot::Sender<Result<halite_protocol::message::FileChunk, (ErrorKind, String)>>;

struct Minion {
    setup: Setup,
    dealer: Option<Dealer>,
    /// Connection number, for [`Dealer::send_on`].
    epoch: u64,
    stage: Stage,
    running: HashMap<String, oneshot::Sender<()>>,
    /// Jobs accepted and waiting for a free slot, in jid order (the order the master issued
    /// them), with when each arrived. Nothing is recorded on disk for them until they start.
    /// Accepted jobs waiting for a slot: when each arrived, and by when (on this minion's clock)
    /// it must start, as the master said.
    queued: BTreeMap<String, (Job, Instant, Option<Instant>)>,
    /// Returns the outbox could not store (a full disk): kept here, sent at every session
    /// start until acknowledged, and stored as soon as the disk takes them again.
    unsent: BTreeMap<String, JobReturn>,
    /// The master's clock, learned at the last `welcome`, for judging jobs' freshness.
    master_time: Option<crate::freshness::MasterTime>,
    /// When the last `hello` left: the master's `welcome` answers it, so its time was read at
    /// or after then (a welcome that waited unread, the minion stopped, is not taken as now).
    hello_sent_at: Option<Instant>,
    /// Welcomes in a row that came too long after their hello to date the master's time.
    slow_welcomes: u32,
    done_tx: mpsc::Sender<JobReturn>,
    /// Slots free for jobs to start (`max_concurrent_jobs` at most).
    free_slots: usize,
    /// `peer.publish` calls waiting for the master's answer, by request id.
    pending_publishes: HashMap<u64, oneshot::Sender<Result<halite_protocol::message::Published, PeerRefusal>>>,
    /// `halite://` parts waiting for the master's answer, by request id.
    pending_files: HashMap<u64, FileReply>,
    next_request: u64,
    /// When refused (pending or rejected), wait before knocking again.
    retry_at: Option<tokio::time::Instant>,
    refusals: Backoff,
    /// Master keys the cluster key revoked, as masters told this minion.
    revocations: crate::revocations::Revocations,
    /// The master of the current (or last) handshake.
    master_now: Option<PublicIdentity>,
    /// Masters that refused or failed the handshake in a row: the next one of the list is
    /// tried at once until every one has, then the minion backs off.
    handshake_failures: usize,
    /// Messages for the master, written by their own task ([`write_out`]): this loop, the
    /// only reader of the connection's events, never waits on a full send queue.
    outgoing: mpsc::UnboundedSender<Outgoing>,
    /// Bytes waiting in `outgoing`; past [`OUTGOING_LIMIT`] the loop stops taking new messages
    /// from the master until the writer catches up (explicit backpressure, never a deadlock).
    outgoing_bytes: Arc<AtomicUsize>,
    /// When the returns written since the outbox's last sync are synced, unless a job's
    /// marker syncs them first.
    sync_at: Option<tokio::time::Instant>,
}

/// A sealed message for one connection.
struct Outgoing {
    to: DealerSender,
    epoch: u64,
    parts: Vec<Vec<u8>>,
}

/// Bytes of sealed messages the minion holds for the master before it stops reading new ones.
const OUTGOING_LIMIT: usize = 32 * 1024 * 1024;

/// Hands sealed messages to the connection, in order, waiting while its queue is full.
async fn write_out(mut outgoing: mpsc::UnboundedReceiver<Outgoing>, bytes: Arc<AtomicUsize>) {
    while let Some(message) = outgoing.recv().await {
        let size = message.parts.iter().map(Vec::len).sum::<usize>();
        // A connection gone meanwhile drops its messages: the session they were sealed for is
        // over, and what matters (returns) is in the outbox, re-sent after the next handshake.
        let _ = message.to.send_on(message.epoch, message.parts).await;
        bytes.fetch_sub(size, Ordering::AcqRel);
    }
}

/// Runs the connection loop until `shutdown` completes.
pub(crate) async fn serve(mut setup: Setup, shutdown: impl std::future::Future<Output = ()>) {
    // Functions that choose by the minion's id (`plan.apply`'s top file) learn it here, once.
    setup.context.minion = setup.id.clone();
    let (done_tx, mut done_rx) = mpsc::channel(1024);
    let free_slots = setup.max_concurrent_jobs.max(1);
    let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
    let outgoing_bytes = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn(write_out(outgoing_rx, outgoing_bytes.clone()));
    let mut minion = Minion {
        outgoing,
        outgoing_bytes,
        dealer: None,
        epoch: 0,
        stage: Stage::Down,
        running: HashMap::new(),
        queued: BTreeMap::new(),
        unsent: BTreeMap::new(),
        master_time: None,
        hello_sent_at: None,
        slow_welcomes: 0,
        done_tx,
        free_slots,
        retry_at: None,
        pending_publishes: HashMap::new(),
        pending_files: HashMap::new(),
        next_request: 1,
        refusals: Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
        revocations: crate::revocations::Revocations::load(setup.pin_path.with_file_name("revoked_masters")),
        master_now: None,
        handshake_failures: 0,
        sync_at: None,
        setup,
    };
    minion.connect();
    tokio::pin!(shutdown);
    loop {
        let (retry, sync_at) = (minion.retry_at, minion.sync_at);
        let reading = minion.outgoing_bytes.load(Ordering::Acquire) < OUTGOING_LIMIT;
        tokio::select! {
            event = next_event(&mut minion.dealer), if reading => minion.on_event(event).await,
            () = tokio::time::sleep(Duration::from_millis(10)), if !reading => {}
            Some(ret) = done_rx.recv() => minion.on_done(ret).await,
            Some(event) = minion.setup.events.recv() => minion.on_event_send(event).await,
            Some(request) = minion.setup.peer_requests.recv() => minion.on_peer_request(request).await,
            Some(request) = minion.setup.file_requests.recv() => minion.on_file_request(request).await,
            Some(dispatcher) = next_reload(&mut minion.setup.reloads) => minion.reloaded(dispatcher).await,
            () = sleep_until(retry), if retry.is_some() => {
                minion.retry_at = None;
                minion.connect();
            }
            () = sleep_until(sync_at), if sync_at.is_some() => minion.sync_returns(),
            () = &mut shutdown => break,
        }
    }
    minion.sync_returns();
    writer.abort();
    info!("minion shutting down");
}

async fn next_event(dealer: &mut Option<Dealer>) -> Option<DealerEvent> {
    match dealer {
        Some(dealer) => dealer.recv().await,
        None => std::future::pending().await,
    }
}

async fn next_reload(reloads: &mut Option<mpsc::Receiver<Arc<Dispatcher>>>) -> Option<Arc<Dispatcher>> {
    match reloads {
        Some(reloads) => reloads.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

impl Minion {
    fn connect(&mut self) {
        info!(masters = %self.setup.masters.join(", "), id = %self.setup.id, "connecting");
        let config = DealerConfig { reconnect_max: Duration::from_secs(10), ..DealerConfig::default() };
        self.dealer = Some(Dealer::connect_any(self.setup.masters.clone(), config));
        self.epoch = 0;
        self.stage = Stage::Down;
    }

    /// The config was reread: jobs from now on use the new policy and actions (running ones
    /// finish with the old), and the master hears the new function list.
    async fn reloaded(&mut self, dispatcher: Arc<Dispatcher>) {
        info!("config reread: policy, custom actions and plans reloaded");
        self.setup.dispatcher = dispatcher;
        if matches!(self.stage, Stage::Up(_)) {
            self.hello().await;
        }
    }

    /// This master will not do: the next one of the list is tried at once, and once every
    /// one has failed in a row the minion backs off.
    async fn next_master(&mut self, reason: &str) {
        self.handshake_failures += 1;
        self.stage = Stage::Down;
        match &self.dealer {
            Some(dealer) if self.handshake_failures < self.setup.masters.len() => {
                let _ = dealer.move_on(reason).await;
            }
            _ => {
                self.handshake_failures = 0;
                self.back_off();
            }
        }
    }

    /// Drops the connection and knocks again later (the master said pending or rejected).
    fn back_off(&mut self) {
        self.dealer = None;
        self.stage = Stage::Down;
        self.retry_at = Some(tokio::time::Instant::now() + self.refusals.next_delay());
    }

    /// The master said pending or rejected: the connection stays open, and the master closes
    /// it once the key is accepted (the dealer then connects again at once); the minion knocks
    /// again after its backoff anyway.
    fn park(&mut self) {
        self.stage = Stage::Parked;
        self.retry_at = Some(tokio::time::Instant::now() + self.refusals.next_delay());
    }

    /// Syncs the returns written since the outbox's last sync; retried a second later if the
    /// disk fails (they stay in memory, and are re-sent from there, until acknowledged).
    fn sync_returns(&mut self) {
        self.sync_at = None;
        if let Err(error) = self.setup.outbox.sync() {
            error!(%error, "could not sync the outbox; its unacknowledged returns would not survive a machine failure");
            self.sync_at = Some(tokio::time::Instant::now() + Duration::from_secs(1));
        }
    }

    /// Queues a message for the writer task; never waits.
    async fn send_raw(&self, parts: Vec<Vec<u8>>) {
        if let Some(dealer) = &self.dealer {
            let size = parts.iter().map(Vec::len).sum::<usize>();
            self.outgoing_bytes.fetch_add(size, Ordering::AcqRel);
            let message = Outgoing { to: dealer.sender(), epoch: self.epoch, parts };
            if self.outgoing.send(message).is_err() {
                self.outgoing_bytes.fetch_sub(size, Ordering::AcqRel);
            }
        }
    }

    async fn send(&mut self, msg: &Message) {
        let Stage::Up(session) = &mut self.stage else { return };
        match session.seal(&message::encode(msg), Instant::now()) {
            Ok(parts) => self.send_raw(parts).await,
            // Not a lost session: this one message cannot go (returns are fitted before they
            // are stored, so this is something else, and reconnecting would not help).
            Err(error @ halite_protocol::noise::SessionError::MessageTooLarge { .. }) => {
                error!(%error, "a message to the master is too large; not sent")
            }
            Err(error) => {
                warn!(%error, "session ended; reconnecting");
                self.connect();
            }
        }
    }

    async fn on_event(&mut self, event: Option<DealerEvent>) {
        match event {
            None => self.connect(),
            Some(DealerEvent::Connected(_)) => {
                self.epoch += 1;
                let pin = match self.setup.master_key {
                    Some(key) => MasterPin::Key(key),
                    None => MasterPin::TrustOnFirstUse,
                };
                let claim = match HandshakeClaim::new(&self.setup.id, self.setup.token.as_deref()) {
                    Ok(claim) => claim,
                    Err(error) => return error!(%error, "cannot claim this id"),
                };
                match Initiator::start(&self.setup.identity, Role::Minion, claim, pin, SessionConfig::default()) {
                    Ok((initiator, msg1)) => {
                        let initiator = initiator.refusing(self.revocations.keys());
                        self.stage = Stage::AwaitResponse(Box::new(initiator));
                        self.send_raw(vec![msg1]).await;
                    }
                    Err(error) => error!(%error, "cannot start a handshake"),
                }
            }
            Some(DealerEvent::Disconnected(reason)) => {
                let replaced =
                    matches!(&reason, CloseReason::Protocol(ZmtpError::PeerError(why)) if why == REPLACED_REASON);
                if replaced {
                    // Another process with this minion's key and id took the session: reconnecting
                    // at once would only take it back, forever. Back off, and say so.
                    warn!("another process with this minion's key and id connected to the master; backing off");
                    return self.back_off();
                }
                let accepted =
                    matches!(&reason, CloseReason::Protocol(ZmtpError::PeerError(why)) if why == KEY_ACCEPTED_REASON);
                if accepted {
                    // Parked, and let in now: the dealer connects again at once.
                    info!("the master accepted this minion's key; connecting again");
                    self.retry_at = None;
                    self.refusals.reset();
                } else if matches!(self.stage, Stage::Parked) {
                    // Closed without a word of acceptance (a master that does not park, or the
                    // wait is over): knocked again after the backoff, not at once.
                    self.dealer = None;
                    self.stage = Stage::Down;
                    return;
                } else if matches!(self.stage, Stage::Up(_)) {
                    warn!(%reason, "disconnected from the master; reconnecting");
                }
                // Parts asked of that session will not come: their fetches fail now.
                self.pending_files.clear();
                if let Some(metrics) = &self.setup.metrics {
                    metrics.session(false);
                }
                self.stage = Stage::Down;
            }
            Some(DealerEvent::Message(parts)) => self.on_message(parts).await,
        }
    }

    async fn on_message(&mut self, parts: Vec<Vec<u8>>) {
        match std::mem::replace(&mut self.stage, Stage::Down) {
            Stage::Down | Stage::Parked => {}
            Stage::AwaitResponse(initiator) => {
                let Some(msg2) = parts.first() else { return };
                match initiator.read_response(msg2) {
                    Ok((awaiting, msg3)) => {
                        self.master_now = Some(awaiting.master().identity);
                        self.pin_master(awaiting.master().identity);
                        self.stage = Stage::AwaitVerdict(Box::new(awaiting));
                        self.send_raw(vec![msg3]).await;
                    }
                    Err(error) => {
                        error!(%error, "master handshake failed");
                        self.next_master("master handshake failed").await;
                    }
                }
            }
            Stage::AwaitVerdict(awaiting) => match awaiting.read_verdict(&parts, Instant::now()) {
                Ok(session) => {
                    info!(id = %self.setup.id, "authenticated to the master");
                    if let Some(metrics) = &self.setup.metrics {
                        metrics.session(true);
                    }
                    self.refusals.reset();
                    self.retry_at = None;
                    self.handshake_failures = 0;
                    self.stage = Stage::Up(Box::new(session));
                    if let Some(dealer) = &self.dealer {
                        let _ = dealer.mark_authenticated().await;
                    }
                    self.hello().await;
                }
                Err(HandshakeError::Pending(reason)) => {
                    info!(%reason, "waiting for the master to accept this minion's key");
                    self.park();
                }
                Err(error @ HandshakeError::Rejected(_)) => {
                    error!(%error, "the master refused this minion");
                    self.park();
                }
                Err(error) => {
                    error!(%error, "the master refused this minion");
                    self.back_off();
                }
            },
            Stage::Up(mut session) => {
                let opened = session.open(&parts, Instant::now());
                self.stage = Stage::Up(session);
                match opened
                    .map_err(message::UnreadableMessage::from)
                    .and_then(|b| message::decode_for_minion(&b).map_err(message::UnreadableMessage::from))
                {
                    Ok(msg) => self.on_session_message(msg).await,
                    Err(error) => warn!(%error, "undecodable message from the master"),
                }
            }
        }
    }

    fn pin_master(&mut self, key: PublicIdentity) {
        if self.setup.master_key.is_none() {
            warn!(fingerprint = %key.fingerprint(), "trusting the master key on first use and pinning it");
            if let Err(error) = halite_transport::keyfile::write_public(&self.setup.pin_path, &key) {
                error!(%error, "could not pin the master key");
            }
            self.setup.master_key = Some(key);
        }
    }

    async fn hello(&mut self) {
        let dispatcher = &self.setup.dispatcher;
        let functions: Vec<String> = dispatcher
            .registry
            .iter()
            .map(|f| f.name().to_owned())
            .filter(|name| dispatcher.policy.check(name, "*", dispatcher.registry.is_action(name)).is_ok())
            .collect();
        let mut modules: Vec<String> =
            functions.iter().filter_map(|f| f.split_once('.')).map(|(m, _)| m.to_owned()).collect();
        modules.dedup();
        let hello = Hello {
            id: self.setup.id.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            grains: self.setup.context.grains.as_ref().clone(),
            modules: modules
                .into_iter()
                .map(|name| ModuleInfo { name, version: env!("CARGO_PKG_VERSION").into() })
                .collect(),
            functions,
            installed: dispatcher.registry.iter().map(|f| f.name().to_owned()).collect(),
        };
        self.hello_sent_at = Some(Instant::now());
        self.send(&Message::Hello(hello)).await;
        // Returns the master has not acknowledged yet, from before a restart or a disconnect.
        for ret in self.setup.outbox.pending() {
            debug!(jid = %ret.jid, "re-sending an unacknowledged return");
            self.send(&Message::JobReturn(crate::fit::fit(ret))).await;
        }
        let unsent: Vec<JobReturn> = self.unsent.values().cloned().collect();
        for ret in unsent {
            self.send(&Message::JobReturn(ret)).await;
        }
    }

    async fn on_session_message(&mut self, msg: Message) {
        match msg {
            Message::Welcome(welcome) => {
                debug!(master = %welcome.master_id, "welcomed");
                // Dated from the hello it answers, never later: the master's time can then only be
                // overestimated (by a round trip), so a job is never thought fresher than it is.
                let asked = self.hello_sent_at.take().unwrap_or_else(Instant::now);
                // A welcome long after its hello says little: the minion may have stopped before
                // its hello left (the master's time is then later than the hello) or after the
                // welcome came (it is not). Asked again, jobs waiting for the answer (and sent
                // again after it); past a few tries the hello's time is kept, which only ever
                // refuses a job, never runs a late one.
                if asked.elapsed() > crate::freshness::WELCOME_WITHIN && self.slow_welcomes < 3 {
                    self.slow_welcomes += 1;
                    debug!(
                        waited_ms = asked.elapsed().as_millis() as u64,
                        "a slow welcome; asking the master's time again"
                    );
                    self.hello().await;
                    return;
                }
                self.slow_welcomes = 0;
                self.master_time = crate::freshness::MasterTime::learned(welcome.now_ms, asked);
                if let Some(pinned) = self.setup.master_key {
                    self.revocations.learn(&welcome.revoked, &pinned);
                }
                if self.master_now.is_some_and(|m| self.revocations.contains(&m)) {
                    warn!("this master's key was revoked by the cluster key; moving to another master");
                    self.next_master("master key revoked").await;
                }
            }
            Message::Job(signed) => self.on_job(signed).await,
            Message::ReturnAck(ack) => {
                let in_memory = self.unsent.remove(&ack.jid).is_some();
                let on_disk = self.setup.outbox.remove(&ack.jid).unwrap_or_else(|error| {
                    warn!(jid = %ack.jid, %error, "could not delete an acknowledged return");
                    false
                });
                if let (Some(metrics), true) = (&self.setup.metrics, in_memory || on_disk) {
                    metrics.return_acknowledged();
                }
            }
            Message::Cancel(cancel) => {
                if let Some(stop) = self.running.remove(&cancel.jid) {
                    info!(jid = %cancel.jid, "cancelling");
                    let _ = stop.send(());
                } else if self.queued.remove(&cancel.jid).is_some() {
                    info!(jid = %cancel.jid, "cancelled before it started");
                    let why = "cancelled before it started".to_owned();
                    self.on_done(not_started(&cancel.jid, Outcome::Cancelled, why)).await;
                }
            }
            Message::Published(published) => {
                if let Some(reply) = self.pending_publishes.remove(&published.request_id) {
                    let _ = reply.send(Ok(published));
                }
            }
            Message::FileChunk(chunk) => {
                if let Some(reply) = self.pending_files.remove(&chunk.request_id) {
                    let _ = reply.send(Ok(chunk));
                }
            }
            Message::Error(error) => {
                let id = error.request.as_deref().and_then(|r| r.parse::<u64>().ok());
                if let Some(reply) = id.and_then(|id| self.pending_files.remove(&id)) {
                    let _ = reply.send(Err((error.kind, error.message)));
                    return;
                }
                let waiting = id.and_then(|id| self.pending_publishes.remove(&id));
                match waiting {
                    Some(reply) => {
                        let _ = reply.send(Err(PeerRefusal::Master(error.message)));
                    }
                    None => warn!(kind = ?error.kind, message = %error.message, "the master reported an error"),
                }
            }
            other => debug!(?other, "ignored message"),
        }
    }

    async fn refuse(&mut self, kind: ErrorKind, message: String, request: Option<String>) {
        warn!(?kind, %message, "job refused");
        self.send(&Message::Error(ErrorMessage { kind, message, request })).await;
    }

    async fn on_job(&mut self, signed: SignedJob) {
        if self.hello_sent_at.is_some() {
            // The welcome answering our hello, with the master's time, has not been read: a job
            // read now may have waited unread (this minion stopped) past the time it was given to
            // start, and nothing tells it from a fresh one. The master sends every unfinished job
            // again right after that welcome, dated then.
            return debug!("a job before the master's welcome: left for the delivery that follows it");
        }
        let Some(master) = self.setup.master_key else { return };
        let verdict = match &self.setup.verified {
            Some(cache) => cache.verify(&signed, &master),
            None => signed.verify(&master),
        };
        let job: Job = match verdict {
            Ok(job) => job,
            Err(error) => return self.refuse(ErrorKind::BadSignature, error.to_string(), None).await,
        };
        if signed.signer_key().is_some_and(|k| self.revocations.contains(&k)) {
            let why = "signed by a master whose key the cluster key revoked".to_owned();
            return self.refuse(ErrorKind::BadSignature, why, Some(job.jid)).await;
        }
        if let Err(error) = halite_protocol::id::validate(&job.jid) {
            return self.refuse(ErrorKind::BadRequest, format!("bad jid: {error}"), Some(job.jid)).await;
        }
        if self.running.contains_key(&job.jid) || self.queued.contains_key(&job.jid) {
            return debug!(jid = %job.jid, "duplicate delivery of an accepted job");
        }
        if let Some(ret) = self.setup.outbox.get(&job.jid).or_else(|| self.unsent.get(&job.jid).cloned()) {
            return self.send(&Message::JobReturn(ret)).await;
        }
        if self.setup.outbox.started(&job.jid) {
            // Started before, not running now, no stored return: this minion restarted while it
            // ran. Running it again could do its side effects twice.
            warn!(jid = %job.jid, "job was interrupted by a restart; not running it again");
            let why = "the minion restarted while this job ran; it is not run twice".to_owned();
            return self.on_done(not_started(&job.jid, Outcome::Interrupted, why)).await;
        }
        if let Some(why) = crate::freshness::expired(&job, self.master_time, Instant::now()) {
            warn!(jid = %job.jid, "{why}");
            return self.on_done(not_started(&job.jid, Outcome::TimedOut, why)).await;
        }
        let start_by_ms = signed.start_by_ms.filter(|_| job.timeout_ms > 0);
        let start_by = match crate::freshness::start_deadline(start_by_ms, self.master_time, Instant::now()) {
            Ok(start_by) => start_by,
            Err(why) => {
                warn!(jid = %job.jid, "{why}");
                return self.on_done(not_started(&job.jid, Outcome::TimedOut, why.to_string())).await;
            }
        };
        self.send(&Message::JobAck(JobAck { jid: job.jid.clone(), accepted: true, reason: String::new() })).await;
        self.queued.insert(job.jid.clone(), (job, Instant::now(), start_by));
        self.start_queued().await;
    }

    /// Starts queued jobs, lowest jid first, while slots are free. A job that waited past its
    /// timeout is not started (the master counts its timeout from delivery); one that starts
    /// gets only the time it has left, and its run-once marker is written (and synced) first.
    async fn start_queued(&mut self) {
        while self.free_slots > 0 {
            let Some((jid, (mut job, arrived, start_by))) = self.queued.pop_first() else { return };
            if let Some(late) = start_by.and_then(|by| Instant::now().checked_duration_since(by)) {
                let why = format!(
                    "not started: it waited for a free slot until {} ms past the time the master gave to start it \
                     (the master may already have recorded it timed out)",
                    late.as_millis()
                );
                warn!(%jid, "{why}");
                self.on_done(not_started(&jid, Outcome::TimedOut, why)).await;
                continue;
            }
            let waited = arrived.elapsed();
            let timeout = Duration::from_millis(job.timeout_ms);
            if job.timeout_ms > 0 && waited >= timeout {
                let why = format!(
                    "not started: it waited {} ms for a free slot, past its {} ms timeout",
                    waited.as_millis(),
                    job.timeout_ms
                );
                warn!(%jid, "{why}");
                self.on_done(not_started(&jid, Outcome::TimedOut, why)).await;
                continue;
            }
            match self.setup.outbox.claim(&jid) {
                // The marker's sync took every return written before it along.
                Ok(Claim::New) => self.sync_at = self.sync_at.filter(|_| self.setup.outbox.unsynced()),
                Ok(Claim::Seen) => {
                    let why = "the minion restarted while this job ran; it is not run twice".to_owned();
                    self.on_done(not_started(&jid, Outcome::Interrupted, why)).await;
                    continue;
                }
                Err(error) => {
                    let why = format!("not started: the run-once marker could not be written ({error})");
                    error!(%jid, "{why}");
                    self.on_done(not_started(&jid, Outcome::Refused, why)).await;
                    continue;
                }
            }
            if job.timeout_ms > 0 {
                job.timeout_ms = (timeout - waited).as_millis().max(1) as u64;
            }
            info!(%jid, function = %job.function, caller = %job.caller, "running job");
            let (stop_tx, stop_rx) = oneshot::channel();
            self.running.insert(jid, stop_tx);
            if let Some(metrics) = &self.setup.metrics {
                metrics.running(self.running.len());
            }
            self.free_slots -= 1;
            let (dispatcher, context, done) =
                (self.setup.dispatcher.clone(), self.setup.context.clone(), self.done_tx.clone());
            tokio::spawn(async move {
                let ret = execute(dispatcher, context, job, stop_rx).await;
                let _ = done.send(ret).await;
            });
        }
    }

    /// `event.send` from a running function: to the master, which applies its ACL.
    async fn on_event_send(&mut self, event: OutgoingEvent) {
        if !matches!(self.stage, Stage::Up(_)) {
            return warn!(tag = %event.tag, "no session with the master; event dropped");
        }
        self.send(&Message::Event(halite_protocol::message::Event { tag: event.tag, data: event.data, id: None }))
            .await;
        if let Some(metrics) = &self.setup.metrics {
            metrics.event_sent();
        }
    }

    /// `peer.publish`: forwards the request and remembers where the answer goes.
    async fn on_peer_request(&mut self, mut request: PeerRequest) {
        if !matches!(self.stage, Stage::Up(_)) {
            let _ = request.reply.send(Err(PeerRefusal::NoSession));
            return;
        }
        let id = self.next_request;
        self.next_request += 1;
        request.request.request_id = id;
        self.pending_publishes.insert(id, request.reply);
        self.send(&Message::Publish(request.request)).await;
    }

    /// A part of a `halite://` file: asked of the master, answered when it comes (or at once
    /// without a session; a lost session fails what waits).
    async fn on_file_request(&mut self, request: FileRequest) {
        if !matches!(self.stage, Stage::Up(_)) {
            let _ = request.reply.send(Err((ErrorKind::Other, "no session with the master".into())));
            return;
        }
        let id = self.next_request;
        self.next_request += 1;
        self.pending_files.insert(id, request.reply);
        let get = halite_protocol::message::FileGet { request_id: id, path: request.path, offset: request.offset };
        self.send(&Message::FileGet(get)).await;
    }

    /// A job finished: outbox it (durably) first, then send it.
    async fn on_done(&mut self, ret: JobReturn) {
        // Cut to what a message may carry before it is stored: a return that cannot be sealed
        // would never leave the outbox.
        let ret = crate::fit::fit(ret);
        if self.running.remove(&ret.jid).is_some() {
            self.free_slots += 1;
        }
        if let Some(metrics) = &self.setup.metrics {
            metrics.running(self.running.len());
            metrics.finished(ret.outcome);
            metrics.return_kept();
        }
        info!(jid = %ret.jid, success = ret.success, outcome = ?ret.outcome, "job finished");
        // Returns kept in memory by an earlier failure are stored once the disk takes them.
        let stored: Vec<String> = self
            .unsent
            .values()
            .filter(|kept| self.setup.outbox.store(kept).is_ok())
            .map(|kept| kept.jid.clone())
            .collect();
        for jid in stored {
            self.unsent.remove(&jid);
        }
        if let Err(error) = self.setup.outbox.store(&ret) {
            error!(jid = %ret.jid, %error, "could not write the return to the outbox; keeping it in memory until acknowledged");
            self.unsent.insert(ret.jid.clone(), ret.clone());
        }
        self.send(&Message::JobReturn(ret)).await;
        // Synced once it is on its way (see `outbox`).
        if self.setup.outbox.unsynced() && self.sync_at.is_none() {
            self.sync_at = Some(tokio::time::Instant::now() + crate::outbox::RETURN_SYNC_DELAY);
        }
        // Box::pin: starting a queued job may end one at once (not started), which ends here.
        Box::pin(self.start_queued()).await;
    }
}

/// The return of a job that never started (interrupted before, timed out in the queue,
/// cancelled while queued, or refused).
fn not_started(jid: &str, outcome: Outcome, why: String) -> JobReturn {
    JobReturn {
        jid: jid.to_owned(),
        minion: String::new(),
        success: false,
        retcode: 1,
        outputs: json!({ "error": why }),
        truncated: false,
        duration_ms: 0,
        outcome,
    }
}
