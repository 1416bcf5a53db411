//! The master's core: one task that owns every connection's session, the registry and the
//! live jobs, and reacts to router events, timer ticks and shutdown.
//!
//! A single owner keeps the invariants simple (a minion has at most one live session; a job
//! slot changes state in one place) and needs no locks. Store calls are awaited inline, except
//! job state changes: those are group-committed, one transaction per batch of router events
//! (every store call is a round trip to SQLite's thread, and a fan-out brings thousands of
//! returns at once). A return is acknowledged to the minion only after its batch is stored, and
//! requests see every change made before them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{
    self, ErrorKind, ErrorMessage, Event, Job, JobDone, JobReturn, JobUpdate, Message, MinionJobState, Outcome,
    PrincipalAcl, PublishRequest, Published, ReturnAck, SignedJob, Value, Welcome,
};
use halite_protocol::noise::{
    AwaitingIdentity, Claim, IdentifiedPeer, LocalIdentity, Responder, Role, Session, SessionConfig,
};
use halite_transport::{PeerId, Router, RouterEvent, SendError};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::acl::{self, NoticeThrottle, RateLimiter};
use crate::bus::Bus;
use crate::clock::{now_ms, JidGenerator};
use crate::config::MasterConfig;
use crate::deploy::relay::{self, RelayDone};
use crate::gateway::local::LocalCommand;
use crate::jobs::{JobTable, LiveJob, Slot};
use crate::keys::{decide, Decision};
use crate::store::{JobRecord, MinionRecord, PrincipalRecord, StateChange, Store, StoreError};
use crate::target::Expr;

/// How often deadlines are checked.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// Router events handled in one batch before state changes are written (group commit).
const BATCH: usize = 512;
/// How often old jobs are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

enum Conn {
    /// ZMTP is up; waiting for Noise message 1.
    AwaitHello { since: Instant },
    /// Message 2 sent; waiting for message 3.
    AwaitIdentity { state: Box<AwaitingIdentity>, since: Instant },
    /// An accepted minion.
    Minion { id: String, session: Session },
    /// An authenticated client; `acl` is `None` for root.
    Client { principal: String, acl: Option<Arc<PrincipalAcl>>, session: Session },
    /// An in-process client (the HTTP gateway), authenticated by a gateway token.
    Local { principal: String, acl: Option<Arc<PrincipalAcl>>, tx: mpsc::Sender<Message> },
}

impl Conn {
    fn session_mut(&mut self) -> Option<&mut Session> {
        match self {
            Conn::Minion { session, .. } | Conn::Client { session, .. } => Some(session),
            _ => None,
        }
    }
}

/// What the registry knows of a minion.
#[derive(Debug, Clone, Default)]
pub(crate) struct MinionEntry {
    pub(crate) grains: BTreeMap<String, Value>,
    pub(crate) functions: Vec<String>,
    pub(crate) last_seen_ms: u64,
}

/// The master's state; see the module docs.
pub struct Master<S: Store> {
    pub(crate) config: MasterConfig,
    identity: LocalIdentity,
    root: PublicIdentity,
    pub(crate) router: Router,
    pub(crate) store: S,
    conns: HashMap<PeerId, Conn>,
    /// Ids with an accepted key: the universe targets are resolved against.
    pub(crate) accepted: BTreeSet<String>,
    /// Their accepted keys: a reconnecting minion is admitted without a store round trip.
    pub(crate) accepted_keys: HashMap<String, [u8; 32]>,
    pub(crate) minions: HashMap<String, MinionEntry>,
    /// Minions with a live session.
    pub(crate) online: HashMap<String, PeerId>,
    jobs: JobTable,
    jids: JidGenerator,
    pub(crate) bus: Bus,
    /// Registered client principals by name (root is not among them).
    pub(crate) principals: HashMap<String, PrincipalRecord>,
    event_buckets: HashMap<String, RateLimiter>,
    notices: NoticeThrottle,
    /// Minion events refused since start (for operators and metrics).
    pub(crate) events_denied: u64,
    /// Job state changes not yet written: written together, in one transaction, at the end of
    /// each batch of events (see [`Master::flush`]).
    pending_states: Vec<StateChange>,
    /// Minion registry entries (presence, grains) to write with the next batch.
    pub(crate) pending_minions: HashMap<String, MinionRecord>,
    /// Returns to acknowledge once `pending_states` is written.
    pending_acks: Vec<(PeerId, String)>,
    /// Job updates and finished jobs for each watching client, sent at the end of the batch.
    watcher_out: HashMap<PeerId, WatcherBatch>,
    /// Updates a watcher could not take, by watcher and job, until its `job_done`.
    watch_missed: HashMap<(PeerId, String), u32>,
    /// `deploy.apply` jobs in flight: jid → deployment id.
    pub(crate) deploy_jobs: HashMap<String, String>,
    /// Sends deployment signals to engines.
    pub(crate) relay_client: reqwest::Client,
    pub(crate) relay_tx: mpsc::UnboundedSender<RelayDone>,
    relay_rx: Option<mpsc::UnboundedReceiver<RelayDone>>,
    /// Where in-process clients (the gateway) send their commands.
    local_tx: mpsc::Sender<LocalCommand>,
    local_rx: Option<mpsc::Receiver<LocalCommand>>,
    /// Peer ids for local sessions count down from the top, far from the router's.
    next_local_peer: u64,
}

/// What one client is sent at the end of a batch.
#[derive(Default)]
struct WatcherBatch {
    updates: Vec<JobUpdate>,
    done: Vec<String>,
}

/// A job about to be created.
pub(crate) struct NewJob {
    pub(crate) function: String,
    pub(crate) args: Vec<Value>,
    pub(crate) kwargs: BTreeMap<String, Value>,
    pub(crate) target: message::Target,
    pub(crate) timeout_ms: u64,
    pub(crate) ttl_ms: u64,
}

/// Who asks for a job; decides what it may target.
pub(crate) enum Publisher {
    /// The root principal: anything.
    Root,
    /// A registered principal, within its ACL.
    Principal(Arc<PrincipalAcl>),
    /// A minion, within the `[[peers]]` rules for it.
    Peer(String),
}

impl<S: Store> Master<S> {
    /// Loads the registry and unfinished jobs from the store.
    pub async fn new(
        config: MasterConfig,
        identity: LocalIdentity,
        root: PublicIdentity,
        router: Router,
        store: S,
    ) -> Result<Self, StoreError> {
        let (relay_tx, relay_rx) = mpsc::unbounded_channel();
        let (local_tx, local_rx) = mpsc::channel(1024);
        let mut master = Master {
            config,
            identity,
            root,
            router,
            store,
            conns: HashMap::new(),
            accepted: BTreeSet::new(),
            accepted_keys: HashMap::new(),
            minions: HashMap::new(),
            online: HashMap::new(),
            jobs: JobTable::default(),
            jids: JidGenerator::default(),
            bus: Bus::default(),
            principals: HashMap::new(),
            event_buckets: HashMap::new(),
            notices: NoticeThrottle::default(),
            events_denied: 0,
            pending_states: Vec::new(),
            pending_acks: Vec::new(),
            pending_minions: HashMap::new(),
            watcher_out: HashMap::new(),
            watch_missed: HashMap::new(),
            deploy_jobs: HashMap::new(),
            relay_client: relay::client(),
            relay_tx,
            relay_rx: Some(relay_rx),
            local_tx,
            local_rx: Some(local_rx),
            next_local_peer: u64::MAX,
        };
        master.reload_principals().await?;
        master.reload_accepted().await?;
        for m in master.store.minions().await? {
            master
                .minions
                .insert(m.id, MinionEntry { grains: m.grains, functions: m.functions, last_seen_ms: m.last_seen_ms });
        }
        let (now, wall) = (Instant::now(), now_ms());
        let grace = Duration::from_secs(master.config.timeout_grace_secs);
        for (record, states) in master.store.unfinished_jobs().await? {
            let ttl_left = Duration::from_millis((record.created_at_ms + record.ttl_ms).saturating_sub(wall));
            let run_for = Duration::from_millis(record.timeout_ms) + grace;
            let minions = states
                .into_iter()
                .map(|(minion, state)| {
                    let deadline = match state {
                        MinionJobState::Waiting => Some(now + ttl_left),
                        // The master restarted: give sent jobs a full timeout from now, so
                        // minions have time to reconnect and deliver their outboxes.
                        MinionJobState::Sent | MinionJobState::Running => Some(now + run_for),
                        _ => None,
                    };
                    (minion, Slot { state, deadline })
                })
                .collect();
            master.jobs.insert(LiveJob::new(record, minions, Vec::new()));
        }
        master.resume_deployments().await?;
        Ok(master)
    }

    pub(crate) async fn reload_principals(&mut self) -> Result<(), StoreError> {
        self.principals = self.store.principals().await?.into_iter().map(|p| (p.name.clone(), p)).collect();
        Ok(())
    }

    /// Publishes an event on the bus. Each subscriber's queue is bounded: what does not fit is
    /// dropped and counted, and reported with a `halite/bus/dropped` notice once there is room.
    pub(crate) fn emit(&mut self, tag: String, data: Value) {
        if self.bus.is_empty() {
            return;
        }
        let recipients = self.bus.recipients(&tag);
        if recipients.is_empty() {
            return;
        }
        let event = Message::Event(Event { tag, data });
        for peer in recipients {
            let missed = self.bus.take_dropped(peer);
            if missed > 0 {
                let notice =
                    Message::Event(Event { tag: "halite/bus/dropped".into(), data: json!({ "dropped": missed }) });
                if self.try_send(peer, &notice).is_err() {
                    self.bus.restore_dropped(peer, missed);
                    self.bus.dropped(peer);
                    continue;
                }
            }
            if self.try_send(peer, &event).is_err() {
                self.bus.dropped(peer);
            }
        }
    }

    pub(crate) async fn reload_accepted(&mut self) -> Result<(), StoreError> {
        self.accepted_keys = self
            .store
            .keys()
            .await?
            .into_iter()
            .filter(|k| k.state == halite_protocol::message::KeyState::Accepted)
            .map(|k| (k.id, k.public_key))
            .collect();
        self.accepted = self.accepted_keys.keys().cloned().collect();
        Ok(())
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), StoreError> {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_purge: Option<Instant> = None;
        let (_, mut relays) = mpsc::unbounded_channel();
        if let Some(rx) = self.relay_rx.take() {
            relays = rx;
        }
        let (_, mut locals) = mpsc::channel(1);
        if let Some(rx) = self.local_rx.take() {
            locals = rx;
        }
        loop {
            tokio::select! {
                Some(command) = locals.recv() => {
                    if let Err(error) = self.on_local(command).await {
                        warn!(%error, "store failure while handling a gateway request");
                    }
                    self.flush().await;
                }
                Some(done) = relays.recv() => {
                    if let Err(error) = self.relay_finished(done).await {
                        warn!(%error, "recording a relay failed");
                    }
                }
                event = self.router.recv() => match event {
                    Some(event) => {
                        self.on_router_event(event).await;
                        // Whatever else has arrived is handled in the same batch, so one
                        // transaction records a burst of returns.
                        for _ in 1..BATCH {
                            let Some(event) = self.router.try_recv() else { break };
                            self.on_router_event(event).await;
                        }
                        self.flush().await;
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    self.on_tick().await;
                    self.flush().await;
                    if last_purge.is_none_or(|t| t.elapsed() >= PURGE_EVERY) {
                        last_purge = Some(Instant::now());
                        let before = now_ms().saturating_sub(self.config.keep_jobs_hours * 3_600_000);
                        match self.store.purge_jobs(before).await {
                            Ok(0) => {}
                            Ok(n) => info!(jobs = n, "purged jobs past retention"),
                            Err(error) => warn!(%error, "purging old jobs failed"),
                        }
                    }
                }
                () = &mut shutdown => break,
            }
        }
        self.flush().await;
        info!("master shutting down");
        Ok(())
    }

    /// Writes the batched state changes in one transaction, then acknowledges the returns they
    /// include: a minion drops a return from its outbox only once it is stored.
    pub(crate) async fn flush(&mut self) {
        if !self.pending_minions.is_empty() {
            let records: Vec<MinionRecord> = self.pending_minions.drain().map(|(_, r)| r).collect();
            if let Err(error) = self.store.put_minions(&records).await {
                warn!(%error, minions = records.len(), "recording presence failed");
            }
        }
        // Watchers first: what they are told is already decided, and their latency should not
        // include the write. Minions are acknowledged only after it.
        self.send_watcher_batches();
        if self.pending_states.is_empty() && self.pending_acks.is_empty() {
            return;
        }
        let changes = std::mem::take(&mut self.pending_states);
        let acks = std::mem::take(&mut self.pending_acks);
        if let Err(error) = self.store.set_states(&changes).await {
            // Kept for the next flush (every tick): nothing is acknowledged until it is stored,
            // so the minions keep their returns meanwhile.
            warn!(%error, changes = changes.len(), "recording job states failed; will retry");
            self.pending_states.splice(0..0, changes);
            self.pending_acks.splice(0..0, acks);
            return;
        }
        for (peer, jid) in acks {
            self.send(peer, &Message::ReturnAck(ReturnAck { jid }));
        }
    }

    async fn on_router_event(&mut self, event: RouterEvent) {
        match event {
            RouterEvent::Connected { peer, addr, .. } => {
                debug!(peer = peer.0, %addr, "connection");
                self.conns.insert(peer, Conn::AwaitHello { since: Instant::now() });
            }
            RouterEvent::Message { peer, parts } => {
                if let Err(error) = self.on_message(peer, parts).await {
                    warn!(%error, "store failure while handling a message");
                }
            }
            RouterEvent::Disconnected { peer, reason } => match self.conns.remove(&peer) {
                Some(Conn::Minion { id, .. }) => {
                    info!(minion = %id, %reason, "minion disconnected");
                    if self.online.get(&id) == Some(&peer) {
                        self.online.remove(&id);
                        self.touch(&id);
                    }
                }
                Some(Conn::Client { principal, .. }) => {
                    debug!(%principal, %reason, "client disconnected");
                    self.jobs.forget_watcher(peer);
                    self.watch_missed.retain(|(p, _), _| *p != peer);
                }
                _ => debug!(peer = peer.0, %reason, "unauthenticated connection closed"),
            },
        }
    }

    /// Records presence; written with the next batch.
    fn touch(&mut self, id: &str) {
        let entry = self.minions.entry(id.to_owned()).or_default();
        entry.last_seen_ms = now_ms();
        let record = MinionRecord {
            id: id.to_owned(),
            grains: entry.grains.clone(),
            functions: entry.functions.clone(),
            last_seen_ms: entry.last_seen_ms,
        };
        self.pending_minions.insert(id.to_owned(), record);
    }

    /// Seals and queues a message for an authenticated peer, reporting a full queue. A session
    /// that can no longer seal (expired, nonces exhausted) ends the connection.
    fn try_send(&mut self, peer: PeerId, msg: &Message) -> Result<(), SendError> {
        if let Some(Conn::Local { tx, .. }) = self.conns.get(&peer) {
            return tx.try_send(msg.clone()).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => SendError::Full,
                mpsc::error::TrySendError::Closed(_) => SendError::NotConnected,
            });
        }
        let Some(session) = self.conns.get_mut(&peer).and_then(Conn::session_mut) else {
            return Err(SendError::NotConnected);
        };
        match session.seal(&message::encode(msg), Instant::now()) {
            Ok(parts) => self.router.send(peer, parts),
            Err(error) => {
                warn!(peer = peer.0, %error, "session cannot seal; disconnecting");
                self.router.disconnect(peer, "session ended");
                Err(SendError::NotConnected)
            }
        }
    }

    /// [`Master::try_send`] for messages whose loss the peer recovers from (it retries, or its
    /// job times out): a full queue is logged, a vanished peer ignored.
    pub(crate) fn send(&mut self, peer: PeerId, msg: &Message) {
        if let Err(SendError::Full) = self.try_send(peer, msg) {
            warn!(peer = peer.0, "send queue full; message dropped");
        }
    }

    pub(crate) fn send_error(&mut self, peer: PeerId, kind: ErrorKind, message: String, request: Option<String>) {
        self.send(peer, &Message::Error(ErrorMessage { kind, message, request }));
    }

    async fn on_message(&mut self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), StoreError> {
        let Some(conn) = self.conns.remove(&peer) else { return Ok(()) };
        match conn {
            // In-process sessions never arrive from the router.
            local @ Conn::Local { .. } => {
                self.conns.insert(peer, local);
            }
            Conn::AwaitHello { .. } => {
                let result = Claim::new(&self.config.id, None)
                    .and_then(|claim| Responder::new(&self.identity, claim, SessionConfig::default()))
                    .and_then(|r| r.read_hello(single(&parts)?));
                match result {
                    Ok((state, msg2)) => {
                        let _ = self.router.send(peer, vec![msg2]);
                        self.conns.insert(peer, Conn::AwaitIdentity { state: Box::new(state), since: Instant::now() });
                    }
                    Err(error) => self.drop_peer(peer, &error.to_string()),
                }
            }
            Conn::AwaitIdentity { state, .. } => match state.read_identity(single(&parts).unwrap_or_default()) {
                Ok(identified) => self.admit(peer, identified).await?,
                Err(error) => self.drop_peer(peer, &error.to_string()),
            },
            Conn::Minion { id, mut session } => {
                let opened = session.open(&parts, Instant::now());
                self.conns.insert(peer, Conn::Minion { id: id.clone(), session });
                match opened.map_err(|e| e.to_string()).and_then(|b| message::decode(&b).map_err(|e| e.to_string())) {
                    Ok(msg) => self.on_minion_message(peer, &id, msg).await?,
                    Err(error) => {
                        warn!(minion = %id, %error, "undecodable message");
                        self.send_error(peer, ErrorKind::BadRequest, error, None);
                    }
                }
            }
            Conn::Client { principal, acl, mut session } => {
                let opened = session.open(&parts, Instant::now());
                self.conns.insert(peer, Conn::Client { principal: principal.clone(), acl: acl.clone(), session });
                match opened.map_err(|e| e.to_string()).and_then(|b| message::decode(&b).map_err(|e| e.to_string())) {
                    Ok(msg) => self.on_client_message(peer, &principal, acl, msg).await?,
                    Err(error) => self.send_error(peer, ErrorKind::BadRequest, error, None),
                }
            }
        }
        Ok(())
    }

    /// Ends a minion's live session at once: nothing more is sent to it or accepted from it.
    pub(crate) fn cut_minion(&mut self, id: &str) {
        if let Some(peer) = self.online.remove(id) {
            info!(minion = id, "key no longer accepted; disconnecting");
            self.conns.remove(&peer);
            self.router.disconnect(peer, "key no longer accepted");
        }
    }

    /// Replaces stored states with live ones for a job still in flight (`running` is not
    /// written, and the latest changes may still be in the batch).
    pub(crate) fn overlay_live(
        &mut self,
        summary: &mut message::JobSummary,
        minions: Option<&mut Vec<message::MinionJob>>,
    ) {
        let Some(job) = self.jobs.get_mut(&summary.jid) else { return };
        summary.states.clear();
        for slot in job.minions.values() {
            *summary.states.entry(slot.state).or_default() += 1;
        }
        for minion in minions.into_iter().flatten() {
            if let Some(slot) = job.minions.get(&minion.minion) {
                if !minion.state.is_final() {
                    minion.state = slot.state;
                }
            }
        }
    }

    /// Where in-process clients send commands (see [`crate::gateway`]).
    pub(crate) fn local_commands(&self) -> mpsc::Sender<LocalCommand> {
        self.local_tx.clone()
    }

    async fn on_local(&mut self, command: LocalCommand) -> Result<(), StoreError> {
        match command {
            LocalCommand::Connect { token_hash, to_client, reply } => {
                let principal = self.store.api_token_principal(&token_hash).await?;
                let acl = match principal.as_deref() {
                    None => Err("unknown token".to_owned()),
                    Some("root") => Ok(None),
                    Some(name) => self
                        .principals
                        .get(name)
                        .map(|p| Some(Arc::new(p.acl.clone())))
                        .ok_or_else(|| format!("the token's principal {name} no longer exists")),
                };
                let answer = acl.map(|acl| {
                    let peer = PeerId(self.next_local_peer);
                    self.next_local_peer -= 1;
                    let principal = principal.unwrap_or_default();
                    self.conns.insert(peer, Conn::Local { principal, acl, tx: to_client });
                    peer
                });
                let _ = reply.send(answer);
            }
            LocalCommand::Message { peer, msg } => {
                if let Some(Conn::Local { principal, acl, .. }) = self.conns.get(&peer) {
                    let (principal, acl) = (principal.clone(), acl.clone());
                    self.on_client_message(peer, &principal, acl, *msg).await?;
                }
            }
            LocalCommand::Disconnect { peer } => {
                if matches!(self.conns.get(&peer), Some(Conn::Local { .. })) {
                    self.conns.remove(&peer);
                    self.bus.unsubscribe(peer);
                    self.jobs.forget_watcher(peer);
                    self.watch_missed.retain(|(p, _), _| *p != peer);
                }
            }
        }
        Ok(())
    }

    /// Ends every session of a principal that was removed.
    pub(crate) fn cut_clients(&mut self, principal: &str) {
        let peers: Vec<PeerId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(c, Conn::Client { principal: p, .. } | Conn::Local { principal: p, .. } if p == principal)
            })
            .map(|(peer, _)| *peer)
            .collect();
        for peer in peers {
            self.conns.remove(&peer);
            self.bus.unsubscribe(peer);
            self.router.disconnect(peer, "principal removed");
        }
    }

    fn drop_peer(&mut self, peer: PeerId, reason: &str) {
        debug!(peer = peer.0, reason, "handshake failed");
        self.conns.remove(&peer);
        self.router.disconnect(peer, reason);
    }

    /// Sends a refusal verdict, then closes.
    fn refuse(&mut self, peer: PeerId, verdict: Result<Vec<Vec<u8>>, halite_protocol::noise::HandshakeError>) {
        if let Ok(parts) = verdict {
            let _ = self.router.send(peer, parts);
        }
        self.router.disconnect(peer, "not accepted");
    }

    async fn admit(&mut self, peer: PeerId, identified: IdentifiedPeer) -> Result<(), StoreError> {
        let now = Instant::now();
        let who = identified.peer().clone();
        match who.role {
            Role::Client => {
                let acl = if who.identity == self.root && who.name == "root" {
                    Some(None)
                } else {
                    self.principals
                        .get(&who.name)
                        .filter(|p| p.public_key == *who.identity.as_bytes())
                        .map(|p| Some(Arc::new(p.acl.clone())))
                };
                if let Some(acl) = acl {
                    if let Ok((session, verdict)) = identified.accept(now) {
                        let _ = self.router.send(peer, verdict);
                        let _ = self.router.mark_authenticated(peer);
                        self.conns.insert(peer, Conn::Client { principal: who.name, acl, session });
                    }
                } else {
                    warn!(principal = %who.name, fingerprint = %who.identity.fingerprint(), "unknown client refused");
                    self.refuse(peer, identified.reject("unknown principal", now));
                }
            }
            Role::Minion => {
                let id = who.name.clone();
                if let Err(error) = halite_protocol::id::validate(&id) {
                    warn!(%error, "minion with an invalid id refused");
                    self.refuse(peer, identified.reject(&format!("invalid minion id: {error}"), now));
                    return Ok(());
                }
                let decision = if self.accepted_keys.get(&id) == Some(who.identity.as_bytes()) {
                    Decision::Accept
                } else {
                    decide(&self.store, &id, who.identity.as_bytes(), identified.enrollment_token(), now_ms()).await?
                };
                match decision {
                    Decision::Accept => {
                        if !self.accepted.contains(&id) {
                            info!(minion = %id, "minion enrolled with a token");
                            self.accepted.insert(id.clone());
                            self.accepted_keys.insert(id.clone(), *who.identity.as_bytes());
                            self.emit(
                                format!("halite/key/{id}/accepted"),
                                json!({ "fingerprint": who.identity.fingerprint(), "by": "token" }),
                            );
                        }
                        let Ok((session, verdict)) = identified.accept(now) else { return Ok(()) };
                        let _ = self.router.send(peer, verdict);
                        let _ = self.router.mark_authenticated(peer);
                        if let Some(old) = self.online.insert(id.clone(), peer) {
                            if old != peer {
                                self.conns.remove(&old);
                                self.router.disconnect(old, "replaced by a newer connection");
                            }
                        }
                        info!(minion = %id, "minion authenticated");
                        self.conns.insert(peer, Conn::Minion { id, session });
                    }
                    Decision::Pending => {
                        info!(minion = %id, fingerprint = %who.identity.fingerprint(), "minion key pending acceptance");
                        self.emit(
                            format!("halite/key/{id}/pending"),
                            json!({ "fingerprint": who.identity.fingerprint() }),
                        );
                        self.refuse(peer, identified.defer("key pending acceptance", now));
                    }
                    Decision::Reject(reason) => self.refuse(peer, identified.reject(&reason, now)),
                    Decision::Denied => {
                        warn!(minion = %id, fingerprint = %who.identity.fingerprint(),
                              "a different key for a known minion id was denied");
                        self.emit(
                            format!("halite/key/{id}/denied"),
                            json!({ "fingerprint": who.identity.fingerprint() }),
                        );
                        self.refuse(peer, identified.reject("denied: another key is registered for this id", now));
                    }
                }
            }
            Role::Master => self.refuse(peer, identified.reject("a master cannot connect as a peer", now)),
        }
        Ok(())
    }

    async fn on_minion_message(&mut self, peer: PeerId, id: &str, msg: Message) -> Result<(), StoreError> {
        match msg {
            Message::Hello(hello) => {
                if hello.id != id {
                    warn!(minion = id, claimed = %hello.id, "hello names another id; using the authenticated one");
                }
                let entry = self.minions.entry(id.to_owned()).or_default();
                entry.grains = hello.grains;
                entry.functions = hello.functions;
                self.touch(id);
                let welcome = Welcome { master_id: self.config.id.clone(), version: env!("CARGO_PKG_VERSION").into() };
                self.send(peer, &Message::Welcome(welcome));
                self.emit(format!("halite/minion/{id}/connected"), json!({}));
                for jid in self.jobs.deliverable_to(id) {
                    self.deliver(&jid, id, peer).await?;
                }
            }
            Message::JobAck(ack) => {
                if ack.accepted {
                    self.set_slot(&ack.jid, id, MinionJobState::Running, None).await?;
                }
            }
            Message::JobReturn(mut ret) => {
                ret.minion = id.to_owned();
                let state = match ret.outcome {
                    Outcome::Completed if ret.success => MinionJobState::Returned,
                    Outcome::Completed | Outcome::Interrupted | Outcome::Refused => MinionJobState::Failed,
                    Outcome::TimedOut => MinionJobState::TimedOut,
                    Outcome::Cancelled => MinionJobState::Cancelled,
                    Outcome::Denied => MinionJobState::Denied,
                };
                let jid = ret.jid.clone();
                self.set_slot(&jid, id, state, Some(ret)).await?;
                // Acknowledged only once stored (at the end of this batch): the minion keeps it
                // in its outbox until then.
                self.pending_acks.push((peer, jid));
            }
            Message::JobProgress(progress) => debug!(minion = id, jid = %progress.jid, "progress"),
            Message::Event(event) => self.on_minion_event(id, event),
            Message::Publish(request) => {
                let caller = format!("minion:{id}");
                self.publish(peer, &caller, Publisher::Peer(id.to_owned()), request).await?;
            }
            other => {
                let what = format!("{other:?}");
                let what = what.split('(').next().unwrap_or_default().to_owned();
                self.send_error(peer, ErrorKind::BadRequest, format!("{what} is not a minion message"), None);
            }
        }
        Ok(())
    }

    /// Sends a live job to a connected minion and marks it sent.
    async fn deliver(&mut self, jid: &str, minion: &str, peer: PeerId) -> Result<(), StoreError> {
        let grace = Duration::from_secs(self.config.timeout_grace_secs);
        let Some(job) = self.jobs.get_mut(jid) else { return Ok(()) };
        let deadline = job.run_deadline(Instant::now(), grace);
        let signed = job.record.signed.clone();
        let Some(slot) = job.minions.get_mut(minion) else { return Ok(()) };
        let was = slot.state;
        slot.state = if was == MinionJobState::Running { MinionJobState::Running } else { MinionJobState::Sent };
        slot.deadline = Some(deadline);
        self.send(peer, &Message::Job(signed));
        if was == MinionJobState::Waiting {
            self.record_state(jid, minion, MinionJobState::Sent, None);
            self.notify(jid, minion, MinionJobState::Sent, None);
        }
        Ok(())
    }

    fn record_state(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        let change = StateChange { jid: jid.to_owned(), minion: minion.to_owned(), state, ret, at_ms: now_ms() };
        self.pending_states.push(change);
    }

    /// Moves a minion's slot to `state` (unless it is already final), stores it, streams it to
    /// watchers, and finishes the job when every slot is final.
    async fn set_slot(
        &mut self,
        jid: &str,
        minion: &str,
        state: MinionJobState,
        ret: Option<JobReturn>,
    ) -> Result<(), StoreError> {
        let Some(job) = self.jobs.get_mut(jid) else {
            debug!(jid, minion, "update for a job that is no longer live");
            return Ok(());
        };
        if !job.set_state(minion, state) {
            return Ok(());
        }
        // `running` lives in memory only: a restarted master treats sent and running jobs alike,
        // and job listings show the live state. One write less per job.
        if state != MinionJobState::Running {
            self.record_state(jid, minion, state, ret.clone());
        }
        if state.is_final() {
            self.emit(format!("halite/job/{jid}/ret/{minion}"), json!({ "state": state.as_str(), "ret": ret }));
            if self.deploy_jobs.contains_key(jid) {
                self.deploy_job_finished(jid, state, ret.as_ref()).await?;
            }
        }
        self.notify(jid, minion, state, ret);
        self.finish_if_done(jid);
        Ok(())
    }

    /// Queues a state change for the job's watchers; sent batched by [`Master::flush`].
    fn notify(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        let Some(job) = self.jobs.get_mut(jid) else { return };
        let update = JobUpdate { jid: jid.to_owned(), minion: minion.to_owned(), state, ret };
        if let Some((last, others)) = job.watchers.split_last() {
            for watcher in others {
                self.watcher_out.entry(*watcher).or_default().updates.push(update.clone());
            }
            // The last watcher takes the update itself: returns can be large.
            self.watcher_out.entry(*last).or_default().updates.push(update);
        }
    }

    fn finish_if_done(&mut self, jid: &str) {
        if self.jobs.get_mut(jid).is_some_and(|j| j.is_done()) {
            if let Some(job) = self.jobs.remove(jid) {
                self.emit(format!("halite/job/{jid}/done"), json!({}));
                for watcher in job.watchers {
                    self.watcher_out.entry(watcher).or_default().done.push(jid.to_owned());
                }
            }
        }
    }

    /// Sends each watcher its batched updates, then its finished jobs. Updates a client is too
    /// slow to take are counted and reported in `job_done.missed` (the client then reads the
    /// job); a client that cannot even take `job_done` is disconnected, so it never believes a
    /// partial result complete.
    fn send_watcher_batches(&mut self) {
        for (peer, batch) in std::mem::take(&mut self.watcher_out) {
            if !batch.updates.is_empty() {
                let updates = message::JobUpdates { updates: batch.updates };
                let message = Message::JobUpdates(updates);
                match self.try_send(peer, &message) {
                    Ok(()) => {}
                    Err(SendError::Full) => {
                        if let Message::JobUpdates(lost) = message {
                            for update in lost.updates {
                                *self.watch_missed.entry((peer, update.jid)).or_default() += 1;
                            }
                        }
                    }
                    // Gone: nothing to report to anyone.
                    Err(_) => continue,
                }
            }
            for jid in batch.done {
                let missed = self.watch_missed.remove(&(peer, jid.clone())).unwrap_or(0);
                if missed > 0 {
                    warn!(peer = peer.0, %jid, missed, "a client missed job updates; told so in job_done");
                }
                if let Err(SendError::Full) = self.try_send(peer, &Message::JobDone(JobDone { jid, missed })) {
                    warn!(peer = peer.0, "client too slow to take job_done; disconnecting it");
                    self.conns.remove(&peer);
                    self.bus.unsubscribe(peer);
                    self.jobs.forget_watcher(peer);
                    self.router.disconnect(peer, "too slow to read job results");
                }
            }
        }
    }

    async fn on_client_message(
        &mut self,
        peer: PeerId,
        principal: &str,
        acl: Option<Arc<PrincipalAcl>>,
        msg: Message,
    ) -> Result<(), StoreError> {
        match msg {
            Message::Subscribe(subscribe) => {
                self.bus.subscribe(peer, subscribe.patterns, acl.map(|a| a.events.clone()));
            }
            Message::ClientHello(_) => {
                let welcome = Welcome { master_id: self.config.id.clone(), version: env!("CARGO_PKG_VERSION").into() };
                self.send(peer, &Message::Welcome(welcome));
            }
            Message::Publish(request) => {
                let publisher = match acl {
                    None => Publisher::Root,
                    Some(acl) => Publisher::Principal(acl),
                };
                self.publish(peer, principal, publisher, request).await?
            }
            Message::Cancel(cancel) => self.cancel(peer, &cancel.jid).await?,
            Message::Request(request) => {
                // Requests read the store: they see every state change made before them.
                self.flush().await;
                let id = request.request_id;
                match self.handle_request(request.body, principal, acl.as_deref()).await {
                    Ok(body) => self.send(peer, &Message::Response(message::Response { request_id: id, body })),
                    Err((kind, error)) => self.send_error(peer, kind, error, Some(id.to_string())),
                }
            }
            _ => self.send_error(peer, ErrorKind::BadRequest, "not a client message".into(), None),
        }
        Ok(())
    }

    async fn publish(
        &mut self,
        peer: PeerId,
        caller: &str,
        publisher: Publisher,
        request: PublishRequest,
    ) -> Result<(), StoreError> {
        let request_id = Some(request.request_id.to_string());
        if request.batch.is_some() || request.error_budget.is_some() {
            let message = "batch and error_budget are not supported by this master version".to_owned();
            self.send_error(peer, ErrorKind::BadRequest, message, request_id);
            return Ok(());
        }
        if !request.function.contains('.') || request.function.len() > 128 {
            self.send_error(
                peer,
                ErrorKind::BadRequest,
                format!("bad function name {:?}", request.function),
                request_id,
            );
            return Ok(());
        }
        let expr = match Expr::parse(request.target.kind, &request.target.expr, &self.config.nodegroups) {
            Ok(expr) => expr,
            Err(error) => {
                self.send_error(peer, ErrorKind::BadRequest, error.to_string(), request_id);
                return Ok(());
            }
        };
        let empty = BTreeMap::new();
        let targets: Vec<String> = self
            .accepted
            .iter()
            .filter(|id| expr.matches(id, self.minions.get(*id).map_or(&empty, |m| &m.grains)))
            .cloned()
            .collect();
        if targets.is_empty() {
            self.send_error(peer, ErrorKind::NotFound, "no minions matched the target".into(), request_id);
            return Ok(());
        }
        // A minion that publishes gets its answer, not a stream of updates.
        let watchers = if matches!(publisher, Publisher::Peer(_)) { Vec::new() } else { vec![peer] };
        if let Err(why) = self.authorize(&publisher, &request, &targets) {
            warn!(%caller, function = %request.function, %why, "publish refused");
            self.send_error(peer, ErrorKind::Forbidden, why, request_id);
            return Ok(());
        }

        let job = NewJob {
            function: request.function,
            args: request.args,
            kwargs: request.kwargs,
            target: request.target,
            timeout_ms: request.timeout_ms,
            ttl_ms: request.ttl_ms,
        };
        self.start_job(caller, job, targets, Some((peer, request.request_id, watchers))).await?;
        Ok(())
    }

    /// Creates, stores and sends a job to already resolved and authorised `targets`. The
    /// publishing client (when there is one) gets `published` first, then the updates.
    pub(crate) async fn start_job(
        &mut self,
        caller: &str,
        new: NewJob,
        targets: Vec<String>,
        publisher: Option<(PeerId, u64, Vec<PeerId>)>,
    ) -> Result<String, StoreError> {
        let NewJob { function, args, kwargs, target, timeout_ms, ttl_ms } = new;
        let jid = self.jids.next();
        let created_at_ms = now_ms();
        let job = Job {
            jid: jid.clone(),
            function: function.clone(),
            args: args.clone(),
            kwargs: kwargs.clone(),
            timeout_ms,
            issued_at_ms: created_at_ms,
            ttl_ms,
            caller: caller.to_owned(),
        };
        let signed = SignedJob::sign(&job, self.identity.key());
        let record = JobRecord {
            jid: jid.clone(),
            function,
            target,
            args,
            kwargs,
            caller: caller.to_owned(),
            created_at_ms,
            timeout_ms,
            ttl_ms,
            signed,
        };
        let now = Instant::now();
        let run_deadline =
            now + Duration::from_millis(record.timeout_ms) + Duration::from_secs(self.config.timeout_grace_secs);
        let mut slots = BTreeMap::new();
        let mut states = Vec::with_capacity(targets.len());
        for id in &targets {
            let (state, deadline) = if self.online.contains_key(id) {
                (MinionJobState::Sent, Some(run_deadline))
            } else if record.ttl_ms > 0 {
                (MinionJobState::Waiting, Some(now + Duration::from_millis(record.ttl_ms)))
            } else {
                (MinionJobState::Offline, None)
            };
            slots.insert(id.clone(), Slot { state, deadline });
            states.push((id.clone(), state));
        }
        // Stored before anything is sent: a master killed right after sending still knows the job.
        self.store.insert_job(&record, &states).await?;
        info!(%jid, function = %record.function, minions = targets.len(), %caller, "job published");
        self.emit(
            format!("halite/job/{jid}/new"),
            json!({ "function": record.function, "target": record.target, "caller": caller, "minions": targets }),
        );
        let job_message = Message::Job(record.signed.clone());
        let watchers = match publisher {
            Some((peer, request_id, watchers)) => {
                let published = Published { request_id, jid: jid.clone(), minions: targets.clone() };
                self.send(peer, &Message::Published(published));
                watchers
            }
            None => Vec::new(),
        };
        self.jobs.insert(LiveJob::new(record, slots, watchers));
        for (id, state) in states {
            if let (MinionJobState::Sent, Some(&minion_peer)) = (state, self.online.get(&id)) {
                self.send(minion_peer, &job_message);
            }
            self.notify(&jid, &id, state, None);
        }
        self.finish_if_done(&jid);
        Ok(jid)
    }

    async fn cancel(&mut self, peer: PeerId, jid: &str) -> Result<(), StoreError> {
        let Some(job) = self.jobs.get_mut(jid) else {
            self.send_error(peer, ErrorKind::NotFound, format!("no running job {jid}"), Some(jid.to_owned()));
            return Ok(());
        };
        if !job.watchers.contains(&peer) {
            job.watchers.push(peer);
        }
        self.cancel_live(jid).await
    }

    /// Cancels a job if it is still live: running minions are told to stop, the others'
    /// slots end cancelled.
    pub(crate) async fn cancel_live(&mut self, jid: &str) -> Result<(), StoreError> {
        let Some(job) = self.jobs.get_mut(jid) else { return Ok(()) };
        let slots: Vec<(String, MinionJobState)> = job.minions.iter().map(|(m, s)| (m.clone(), s.state)).collect();
        for (minion, state) in slots {
            match (state, self.online.get(&minion).copied()) {
                (MinionJobState::Sent | MinionJobState::Running, Some(minion_peer)) => {
                    // The minion kills the job and returns it as cancelled.
                    self.send(minion_peer, &Message::Cancel(message::Cancel { jid: jid.to_owned() }));
                }
                (s, _) if !s.is_final() => self.set_slot(jid, &minion, MinionJobState::Cancelled, None).await?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether `publisher` may run `request` on `targets` (already resolved, never empty).
    fn authorize(&self, publisher: &Publisher, request: &PublishRequest, targets: &[String]) -> Result<(), String> {
        let empty = BTreeMap::new();
        let resolved: Vec<(&str, &BTreeMap<String, Value>)> =
            targets.iter().map(|id| (id.as_str(), self.minions.get(id).map_or(&empty, |m| &m.grains))).collect();
        let groups = &self.config.nodegroups;
        match publisher {
            Publisher::Root => Ok(()),
            Publisher::Principal(acl) => {
                let covered = acl.rules.iter().any(|rule| {
                    acl::any_glob(&rule.functions, &request.function)
                        && acl::args_allowed(&rule.args, &request.kwargs)
                        && acl::all_within(&rule.targets, groups, &resolved).unwrap_or(false)
                });
                if covered {
                    Ok(())
                } else {
                    Err(format!("not allowed to run {} on {}", request.function, targets.join(",")))
                }
            }
            Publisher::Peer(source) => {
                let covered = self.config.peers.iter().any(|rule| {
                    acl::any_glob(&rule.minions, source)
                        && acl::any_glob(&rule.functions, &request.function)
                        && acl::all_within(&rule.target, groups, &resolved).unwrap_or(false)
                });
                if covered {
                    Ok(())
                } else {
                    Err(format!("no peer rule lets {source} run {} on {}", request.function, targets.join(",")))
                }
            }
        }
    }

    /// A minion's `event.send`: checked against the `[[events]]` ACL, size and rate, then
    /// published under the minion's authenticated namespace. The tag and body are the minion's;
    /// the id is never taken from them.
    fn on_minion_event(&mut self, id: &str, event: Event) {
        let now = Instant::now();
        let size = serde_json::to_vec(&event.data).map_or(usize::MAX, |b| b.len());
        // Borrowed, not cloned: this runs for every minion event.
        let rule = self.config.events.iter().find(|r| acl::any_glob(&r.minions, id));
        let refusal = if !acl::valid_tag(&event.tag) {
            Some("malformed tag")
        } else if acl::reserved_tag(&event.tag) {
            Some("reserved namespace")
        } else {
            match rule {
                None => Some("no event rule for this minion"),
                Some(rule) if !acl::any_glob(&rule.allow, &event.tag) => Some("tag not allowed"),
                Some(rule) if size > rule.max_bytes => Some("event too large"),
                Some(rule) => {
                    let bucket =
                        self.event_buckets.entry(id.to_owned()).or_insert_with(|| RateLimiter::new(rule.burst, now));
                    (!bucket.allow(rule.rate_per_sec, rule.burst, now)).then_some("rate limit exceeded")
                }
            }
        };
        match refusal {
            None => self.emit(format!("minion/{id}/{}", event.tag), json!({ "minion": id, "data": event.data })),
            Some(reason) => {
                self.events_denied += 1;
                debug!(minion = id, tag = %event.tag, reason, "minion event refused");
                if self.notices.ready(id, Duration::from_secs(1), now) {
                    let tag: String = event.tag.chars().take(255).collect();
                    self.emit(
                        "halite/acl/denied".into(),
                        json!({ "minion": id, "tag": tag, "reason": reason, "denied_total": self.events_denied }),
                    );
                }
            }
        }
    }

    async fn on_tick(&mut self) {
        let now = Instant::now();
        let handshake_timeout = Duration::from_secs(self.config.handshake_timeout_secs);
        let stale: Vec<PeerId> = self
            .conns
            .iter()
            .filter(|(_, c)| match c {
                Conn::AwaitHello { since } | Conn::AwaitIdentity { since, .. } => now - *since > handshake_timeout,
                _ => false,
            })
            .map(|(p, _)| *p)
            .collect();
        for peer in stale {
            self.drop_peer(peer, "handshake timed out");
        }
        for (jid, minion, state) in self.jobs.expired(now) {
            let new = if state == MinionJobState::Waiting { MinionJobState::Expired } else { MinionJobState::TimedOut };
            if let Err(error) = self.set_slot(&jid, &minion, new, None).await {
                warn!(%error, "recording a deadline failed");
            }
        }
    }
}

fn single(parts: &[Vec<u8>]) -> Result<&[u8], halite_protocol::noise::HandshakeError> {
    match parts {
        [one] => Ok(one),
        _ => Err(halite_protocol::noise::HandshakeError::Malformed("handshake messages have one part")),
    }
}
