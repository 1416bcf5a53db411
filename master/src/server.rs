//! The master's core: one task that owns every connection's session, the registry and the
//! live jobs. Everything that wakes it is an [`Input`]; [`Master::step`] handles one, then
//! writes what it changed ([`Master::flush`]).
//!
//! A single owner keeps the invariants simple (a minion has at most one live session; a job
//! slot changes state in one place) and needs no locks. Store calls are awaited inline, except
//! job state changes: those are group-committed, one transaction per step (every store call is
//! a round trip to SQLite's thread, and a fan-out brings thousands of returns at once). A return
//! is acknowledged to the minion only after its step is stored, and requests see every change
//! made before them.
//!
//! The core reads time only from its [`Clock`] and talks to connections only through its
//! [`Net`], so the tests in `sim/` run it in-process, in simulated time.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{
    self, ErrorKind, ErrorMessage, Event, Job, JobDone, JobReturn, JobUpdate, Message, MinionJobState, Outcome,
    PrincipalAcl, PublishRequest, Published, ReturnAck, SignedJob, Value, Welcome,
};
use halite_protocol::noise::{
    Claim, IdentifiedPeer, LocalIdentity, Responder, Role, SessionConfig,
};
use halite_transport::{PeerId, Router, RouterEvent, SendError};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::acl::{self, NoticeThrottle, RateLimiter};
use crate::authz::publish::{self, Publisher};
use crate::authz::{TargetView, Who};
use crate::bus::Bus;
use crate::clock::{Clock, JidGenerator};
use crate::config::MasterConfig;
use crate::deploy::relay::{self, RelayDone};
use crate::gateway::local::LocalCommand;
use crate::jobs::{JobTable, LiveJob, Slot};
use crate::keys::{decide, Decision, PendingLimits};
use crate::limits;
use crate::net::Net;
use crate::registry::{MinionEntry, Registry};
use crate::sessions::{Conn, Sessions};
use crate::watchers::Watchers;
use crate::writes::PendingWrites;
use crate::store::{JobRecord, MinionRecord, StateChange, Store, StoreError};
use crate::target::Expr;

/// The `request` an `error` refusing a subscription names.
pub(crate) const SUBSCRIBE_REQUEST: &str = "subscribe";
/// How often deadlines are checked.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// Router events handled in one step before state changes are written (group commit).
const BATCH: usize = 512;
/// How often the wall clock reached is recorded (TTLs resume from it after a restart).
const WALL_MARK_EVERY: Duration = Duration::from_secs(5);
/// How often old jobs are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// A gap between ticks longer than this means the master itself was not running (SIGSTOP, a
/// VM migration, a long swap storm): the time it lost is not charged to the minions' jobs.
const PAUSE_THRESHOLD: Duration = Duration::from_secs(1);

/// Everything that wakes the core: one closed list.
#[derive(Debug)]
pub(crate) enum Input {
    /// A connection event from the network.
    Net(RouterEvent),
    /// A command from an in-process client (the HTTP gateway).
    Local(LocalCommand),
    /// A deployment signal relay finished.
    Relay(RelayDone),
    /// Time passed: deadlines, handshake timeouts, retention.
    Tick,
}

/// The master's state; see the module docs.
pub struct Master<S: Store, N: Net = Router> {
    pub(crate) config: MasterConfig,
    identity: LocalIdentity,
    root: PublicIdentity,
    pub(crate) net: N,
    pub(crate) store: S,
    /// The only time source.
    pub(crate) clock: Arc<dyn Clock>,
    /// Every connection and its session; which minions are online.
    pub(crate) sessions: Sessions,
    /// Accepted keys, minions, principals.
    pub(crate) registry: Registry,
    pub(crate) jobs: JobTable,
    jids: JidGenerator,
    pub(crate) bus: Bus,
    event_buckets: HashMap<String, RateLimiter>,
    notices: NoticeThrottle,
    /// Minion events refused since start (for operators and metrics).
    pub(crate) events_denied: u64,
    /// The pending-key cap and arrival rate.
    pending_limits: PendingLimits,
    /// Unknown keys turned away by those limits since start.
    keys_refused: u64,
    /// Decided, not yet stored: written together at the end of each step ([`Master::flush`]).
    pub(crate) pending: PendingWrites,
    /// What each watching client is told at the end of the step.
    watchers: Watchers,
    /// `deploy.apply` jobs in flight: jid → deployment id.
    pub(crate) deploy_jobs: HashMap<String, String>,
    /// Sends deployment signals to engines.
    pub(crate) relay_client: reqwest::Client,
    pub(crate) relay_tx: mpsc::UnboundedSender<RelayDone>,
    relay_rx: Option<mpsc::UnboundedReceiver<RelayDone>>,
    /// Where in-process clients (the gateway) send their commands.
    local_tx: mpsc::Sender<LocalCommand>,
    local_rx: Option<mpsc::Receiver<LocalCommand>>,
    /// When the last tick ran (a long gap means the master was paused).
    last_tick: Option<Instant>,
    /// When retention last ran.
    last_purge: Option<Instant>,
    /// When the wall clock was last recorded in the store.
    last_wall_mark: Option<Instant>,
}

/// A job about to be created.
pub(crate) struct NewJob {
    pub(crate) function: String,
    pub(crate) args: Vec<Value>,
    pub(crate) kwargs: BTreeMap<String, Value>,
    pub(crate) target: message::Target,
    pub(crate) timeout_ms: u64,
    pub(crate) ttl_ms: u64,
    /// What the job may reach through functions that call functions (see `authz::publish`).
    pub(crate) reach: Option<Vec<String>>,
}

impl<S: Store, N: Net> Master<S, N> {
    /// Loads the registry and unfinished jobs from the store.
    pub async fn new(
        config: MasterConfig,
        identity: LocalIdentity,
        root: PublicIdentity,
        net: N,
        store: S,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let (relay_tx, relay_rx) = mpsc::unbounded_channel();
        let (local_tx, local_rx) = mpsc::channel(1024);
        let pending_limits = PendingLimits::new(
            config.max_pending_keys,
            config.pending_keys_per_sec,
            config.pending_keys_burst,
            clock.now(),
        );
        let mut master = Master {
            config,
            identity,
            root,
            net,
            store,
            clock,
            sessions: Sessions::default(),
            registry: Registry::default(),
            jobs: JobTable::default(),
            jids: JidGenerator::default(),
            bus: Bus::default(),
            event_buckets: HashMap::new(),
            notices: NoticeThrottle::default(),
            events_denied: 0,
            pending_limits,
            keys_refused: 0,
            pending: PendingWrites::default(),
            watchers: Watchers::default(),
            deploy_jobs: HashMap::new(),
            relay_client: relay::client(),
            relay_tx,
            relay_rx: Some(relay_rx),
            local_tx,
            local_rx: Some(local_rx),
            last_tick: None,
            last_purge: None,
            last_wall_mark: None,
        };
        master.reload_principals().await?;
        master.reload_accepted().await?;
        for mut m in master.store.minions().await? {
            // Grains stored before the cap existed (or under a larger one) are not carried into
            // memory; the minion announces them again when it connects.
            if limits::json_size(&m.grains) > master.config.max_grains_bytes {
                warn!(minion = %m.id, "stored grains exceed max_grains_bytes; not loaded");
                m.grains.clear();
            }
            master
                .registry
                .minions
                .insert(m.id, MinionEntry { grains: m.grains, functions: m.functions, last_seen_ms: m.last_seen_ms });
        }
        if let Some(jid) = master.store.last_jid().await? {
            master.jids.resume_after(&jid);
        }
        // TTLs count from the latest wall time ever reached, and are never longer than the TTL
        // itself: a clock set back while the master was down must not lengthen them.
        let mark = master.store.wall_mark().await?.unwrap_or(0);
        let (now, wall) = (master.clock.now(), master.clock.wall_ms().max(mark));
        let grace = Duration::from_secs(master.config.timeout_grace_secs);
        for (record, states) in master.store.unfinished_jobs().await? {
            let ttl_left = (record.created_at_ms + record.ttl_ms).saturating_sub(wall).min(record.ttl_ms);
            let ttl_left = Duration::from_millis(ttl_left);
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
        self.registry.principals = self.store.principals().await?.into_iter().map(|p| (p.name.clone(), p)).collect();
        Ok(())
    }

    /// Publishes an event on the bus. Each subscriber's queue is bounded: what does not fit is
    /// dropped and counted, and reported with a `halite/bus/dropped` notice once there is room.
    pub(crate) fn emit(&mut self, tag: String, data: Value) {
        if self.bus.is_empty() {
            return;
        }
        let mut recipients = self.bus.recipients(&tag);
        recipients.retain(|peer| self.peer_may_receive(*peer, &tag, &data));
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

    /// The principal on a client connection and its ACL (`None` for root), for
    /// [`crate::authz`].
    pub(crate) fn principal_on(&self, peer: PeerId) -> Option<(String, Option<Arc<PrincipalAcl>>)> {
        match self.sessions.conns.get(&peer)? {
            Conn::Client { principal, acl, .. } | Conn::Local { principal, acl, .. } => {
                Some((principal.clone(), acl.clone()))
            }
            _ => None,
        }
    }

    pub(crate) async fn reload_accepted(&mut self) -> Result<(), StoreError> {
        let keys = self.store.keys().await?;
        self.registry.set_accepted(
            keys.into_iter()
                .filter(|k| k.state == halite_protocol::message::KeyState::Accepted)
                .map(|k| (k.id, k.public_key)),
        );
        Ok(())
    }

    /// Serves until `shutdown` completes, then writes what is pending.
    pub async fn serve(mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), StoreError> {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (_, mut relays) = mpsc::unbounded_channel();
        if let Some(rx) = self.relay_rx.take() {
            relays = rx;
        }
        let (_, mut locals) = mpsc::channel(1);
        if let Some(rx) = self.local_rx.take() {
            locals = rx;
        }
        loop {
            let input = tokio::select! {
                event = self.net.recv() => match event {
                    Some(event) => Input::Net(event),
                    None => break,
                },
                Some(command) = locals.recv() => Input::Local(command),
                Some(done) = relays.recv() => Input::Relay(done),
                _ = tick.tick() => Input::Tick,
                () = &mut shutdown => break,
            };
            self.step(input).await;
        }
        self.flush().await;
        if let Err(error) = self.store.set_wall_mark(self.clock.wall_ms()).await {
            warn!(%error, "recording the wall clock failed");
        }
        info!("master shutting down");
        self.store.close().await;
        Ok(())
    }

    /// Handles one input, then writes and sends what it changed.
    pub(crate) async fn step(&mut self, input: Input) {
        match input {
            Input::Net(event) => {
                self.on_router_event(event).await;
                // Whatever else has arrived is handled in the same step, so one transaction
                // records a burst of returns.
                self.drain_net(BATCH - 1).await;
            }
            Input::Local(command) => {
                if let Err(error) = self.on_local(command).await {
                    warn!(%error, "store failure while handling a gateway request");
                }
            }
            Input::Relay(done) => {
                if let Err(error) = self.relay_finished(done).await {
                    warn!(%error, "recording a relay failed");
                }
            }
            Input::Tick => {
                // Inputs already received are processed before deadlines fire.
                self.drain_net(usize::MAX).await;
                self.on_tick().await;
            }
        }
        // Deployments react to their jobs' final states once the step has made them.
        for (jid, state, ret) in std::mem::take(&mut self.pending.finished_slots) {
            if let Err(error) = self.deploy_job_finished(&jid, state, ret.as_ref()).await {
                warn!(%error, %jid, "recording a deployment's result failed");
            }
        }
        self.flush().await;
    }

    /// Handles up to `limit` network events that are already waiting.
    async fn drain_net(&mut self, limit: usize) {
        for _ in 0..limit {
            let Some(event) = self.net.try_recv() else { break };
            self.on_router_event(event).await;
        }
    }

    /// Writes the batched state changes in one transaction, then acknowledges the returns they
    /// include: a minion drops a return from its outbox only once it is stored.
    pub(crate) async fn flush(&mut self) {
        if !self.pending.minions.is_empty() {
            let records: Vec<MinionRecord> = self.pending.minions.drain().map(|(_, r)| r).collect();
            if let Err(error) = self.store.put_minions(&records).await {
                warn!(%error, minions = records.len(), "recording presence failed");
            }
        }
        // Watchers first: what they are told is already decided, and their latency should not
        // include the write. Minions are acknowledged only after it.
        self.send_watcher_batches();
        if self.pending.states.is_empty() && self.pending.acks.is_empty() {
            return;
        }
        let (changes, acks) = self.pending.take_states();
        let stored = if changes.is_empty() { Ok(()) } else { self.store.set_states(&changes).await };
        if let Err(error) = stored {
            // Kept for the next flush (every tick): nothing is acknowledged until it is stored,
            // so the minions keep their returns meanwhile.
            warn!(%error, changes = changes.len(), "recording job states failed; will retry");
            self.pending.restore_states(changes, acks);
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
                self.sessions.conns.insert(peer, Conn::AwaitHello { since: self.clock.now() });
            }
            RouterEvent::Message { peer, parts } => {
                if let Err(error) = self.on_message(peer, parts).await {
                    warn!(%error, "store failure while handling a message");
                }
            }
            RouterEvent::Disconnected { peer, reason } => {
                match self.sessions.conns.get(&peer) {
                    Some(Conn::Minion { id, .. }) => info!(minion = %id, %reason, "minion disconnected"),
                    Some(Conn::Client { principal, .. }) => debug!(%principal, %reason, "client disconnected"),
                    _ => debug!(peer = peer.0, %reason, "unauthenticated connection closed"),
                }
                self.forget(peer, None);
            }
        }
    }

    /// Forgets a peer, whichever way it went (closed, refused, replaced, cut, too slow): its
    /// session, its presence, its subscriptions, its watches, its pending batches. With a
    /// reason, its connection is also closed. The one clean-up path for every peer.
    pub(crate) fn forget(&mut self, peer: PeerId, close: Option<&str>) {
        if let Some(Conn::Minion { id, .. }) = self.sessions.conns.remove(&peer) {
            if self.sessions.online.get(&id) == Some(&peer) {
                self.sessions.online.remove(&id);
                self.touch(&id);
            }
        }
        self.bus.unsubscribe(peer);
        self.jobs.forget_watcher(peer);
        self.watchers.forget(peer);
        if let Some(reason) = close {
            self.net.disconnect(peer, reason);
        }
    }

    /// Records presence; written with the next batch.
    fn touch(&mut self, id: &str) {
        let entry = self.registry.minions.entry(id.to_owned()).or_default();
        entry.last_seen_ms = self.clock.wall_ms();
        let record = MinionRecord {
            id: id.to_owned(),
            grains: entry.grains.clone(),
            functions: entry.functions.clone(),
            last_seen_ms: entry.last_seen_ms,
        };
        self.pending.minions.insert(id.to_owned(), record);
    }

    /// Seals and queues a message for an authenticated peer, reporting a full queue. A session
    /// that can no longer seal (expired, nonces exhausted) ends the connection.
    fn try_send(&mut self, peer: PeerId, msg: &Message) -> Result<(), SendError> {
        if let Some(Conn::Local { tx, .. }) = self.sessions.conns.get(&peer) {
            return tx.try_send(msg.clone()).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => SendError::Full,
                mpsc::error::TrySendError::Closed(_) => SendError::NotConnected,
            });
        }
        let Some(session) = self.sessions.conns.get_mut(&peer).and_then(Conn::session_mut) else {
            return Err(SendError::NotConnected);
        };
        match session.seal(&message::encode(msg), self.clock.now()) {
            Ok(parts) => self.net.send(peer, parts),
            Err(error) => {
                warn!(peer = peer.0, %error, "session cannot seal; disconnecting");
                self.net.disconnect(peer, "session ended");
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

    /// Answers a request; over a connection, a listing too large for one message goes in
    /// parts (`more`), each within the message cap, so no answer ever drops its client.
    fn respond(&mut self, peer: PeerId, request_id: u64, body: message::ResponseBody) {
        let parts = match self.sessions.conns.get(&peer) {
            Some(Conn::Local { .. }) => vec![body],
            _ => body.into_parts(limits::MESSAGE_BUDGET),
        };
        let last = parts.len().saturating_sub(1);
        for (index, body) in parts.into_iter().enumerate() {
            self.send(peer, &Message::Response(message::Response { request_id, body, more: index < last }));
        }
    }

    pub(crate) fn send_error(&mut self, peer: PeerId, kind: ErrorKind, message: String, request: Option<String>) {
        self.send(peer, &Message::Error(ErrorMessage { kind, message, request }));
    }

    async fn on_message(&mut self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), StoreError> {
        let Some(conn) = self.sessions.conns.remove(&peer) else { return Ok(()) };
        match conn {
            // In-process sessions never arrive from the router.
            local @ Conn::Local { .. } => {
                self.sessions.conns.insert(peer, local);
            }
            Conn::AwaitHello { .. } => {
                let result = Claim::new(&self.config.id, None)
                    .and_then(|claim| Responder::new(&self.identity, claim, SessionConfig::default()))
                    .and_then(|r| r.read_hello(single(&parts)?));
                match result {
                    Ok((state, msg2)) => {
                        let _ = self.net.send(peer, vec![msg2]);
                        self.sessions.conns
                            .insert(peer, Conn::AwaitIdentity { state: Box::new(state), since: self.clock.now() });
                    }
                    Err(error) => self.drop_peer(peer, &error.to_string()),
                }
            }
            Conn::AwaitIdentity { state, .. } => match state.read_identity(single(&parts).unwrap_or_default()) {
                Ok(identified) => self.admit(peer, identified).await?,
                Err(error) => self.drop_peer(peer, &error.to_string()),
            },
            Conn::Minion { id, mut session } => {
                let opened = session.open(&parts, self.clock.now());
                self.sessions.conns.insert(peer, Conn::Minion { id: id.clone(), session });
                let decoded = opened
                    .map_err(|e| e.to_string())
                    .and_then(|b| message::decode(&b).map(|msg| (msg, b.len())).map_err(|e| e.to_string()));
                match decoded {
                    Ok((msg, size)) => self.on_minion_message(peer, &id, msg, size).await?,
                    Err(error) => {
                        warn!(minion = %id, %error, "undecodable message");
                        self.send_error(peer, ErrorKind::BadRequest, error, None);
                    }
                }
            }
            Conn::Client { principal, acl, mut session } => {
                let opened = session.open(&parts, self.clock.now());
                self.sessions.conns.insert(peer, Conn::Client { principal: principal.clone(), acl: acl.clone(), session });
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
        if let Some(peer) = self.sessions.peer_of(id) {
            info!(minion = id, "key no longer accepted; disconnecting");
            self.forget(peer, Some("key no longer accepted"));
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
        for slot in job.slots().values() {
            *summary.states.entry(slot.state).or_default() += 1;
        }
        for minion in minions.into_iter().flatten() {
            if let Some(slot) = job.slots().get(&minion.minion) {
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
                        .registry
                        .principals
                        .get(name)
                        .map(|p| Some(Arc::new(p.acl.clone())))
                        .ok_or_else(|| format!("the token's principal {name} no longer exists")),
                };
                let answer = acl.map(|acl| {
                    let peer = self.sessions.next_local();
                    let principal = principal.unwrap_or_default();
                    self.sessions.conns.insert(peer, Conn::Local { principal, acl, tx: to_client });
                    peer
                });
                let _ = reply.send(answer);
            }
            LocalCommand::Message { peer, msg } => {
                if let Some(Conn::Local { principal, acl, .. }) = self.sessions.conns.get(&peer) {
                    let (principal, acl) = (principal.clone(), acl.clone());
                    self.on_client_message(peer, &principal, acl, *msg).await?;
                }
            }
            LocalCommand::Disconnect { peer } => {
                if matches!(self.sessions.conns.get(&peer), Some(Conn::Local { .. })) {
                    self.forget(peer, None);
                }
            }
        }
        Ok(())
    }

    /// Ends every session of a principal that was removed.
    pub(crate) fn cut_clients(&mut self, principal: &str) {
        let peers = self.sessions.clients_of(principal);
        for peer in peers {
            self.forget(peer, Some("principal removed"));
        }
    }

    fn drop_peer(&mut self, peer: PeerId, reason: &str) {
        debug!(peer = peer.0, reason, "handshake failed");
        self.forget(peer, Some(reason));
    }

    /// Sends a refusal verdict, then closes.
    fn refuse(&mut self, peer: PeerId, verdict: Result<Vec<Vec<u8>>, halite_protocol::noise::HandshakeError>) {
        if let Ok(parts) = verdict {
            let _ = self.net.send(peer, parts);
        }
        self.net.disconnect(peer, "not accepted");
    }

    async fn admit(&mut self, peer: PeerId, identified: IdentifiedPeer) -> Result<(), StoreError> {
        let now = self.clock.now();
        let who = identified.peer().clone();
        match who.role {
            Role::Client => {
                let acl = if who.identity == self.root && who.name == "root" {
                    Some(None)
                } else {
                    self.registry.principals
                        .get(&who.name)
                        .filter(|p| p.public_key == *who.identity.as_bytes())
                        .map(|p| Some(Arc::new(p.acl.clone())))
                };
                if let Some(acl) = acl {
                    if let Ok((session, verdict)) = identified.accept(now) {
                        let _ = self.net.send(peer, verdict);
                        self.net.mark_authenticated(peer);
                        self.sessions.conns.insert(peer, Conn::Client { principal: who.name, acl, session });
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
                let decision = if self.registry.is_accepted(&id, who.identity.as_bytes()) {
                    Decision::Accept
                } else {
                    let token = identified.enrollment_token();
                    let at = (self.clock.wall_ms(), now);
                    decide(&self.store, &id, who.identity.as_bytes(), token, at, &mut self.pending_limits).await?
                };
                match decision {
                    Decision::Accept => {
                        if !self.registry.is_accepted(&id, who.identity.as_bytes()) {
                            info!(minion = %id, "minion enrolled with a token");
                            self.registry.accept(&id, *who.identity.as_bytes());
                            self.emit(
                                format!("halite/key/{id}/accepted"),
                                json!({ "fingerprint": who.identity.fingerprint(), "by": "token" }),
                            );
                        }
                        let Ok((session, verdict)) = identified.accept(now) else { return Ok(()) };
                        let _ = self.net.send(peer, verdict);
                        self.net.mark_authenticated(peer);
                        if let Some(old) = self.sessions.peer_of(&id) {
                            if old != peer {
                                self.forget(old, Some("replaced by a newer connection"));
                            }
                        }
                        self.sessions.online.insert(id.clone(), peer);
                        info!(minion = %id, "minion authenticated");
                        self.sessions.conns.insert(peer, Conn::Minion { id, session });
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
                    Decision::Busy(reason) => {
                        self.keys_refused += 1;
                        warn!(minion = %id, "{reason}");
                        if self.notices.ready("halite/key/refused", Duration::from_secs(1), now) {
                            self.emit(
                                "halite/key/refused".into(),
                                json!({ "id": id, "reason": reason, "refused_total": self.keys_refused }),
                            );
                        }
                        self.refuse(peer, identified.defer(&reason, now));
                    }
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

    /// Handles a decoded message from an authenticated minion; `size` is its encoded length,
    /// which bounds what the caps below must measure.
    async fn on_minion_message(&mut self, peer: PeerId, id: &str, msg: Message, size: usize) -> Result<(), StoreError> {
        match msg {
            Message::Hello(hello) => {
                if hello.id != id {
                    warn!(minion = id, claimed = %hello.id, "hello names another id; using the authenticated one");
                }
                let grains_size =
                    if size > self.config.max_grains_bytes { limits::json_size(&hello.grains) } else { 0 };
                let entry = self.registry.minions.entry(id.to_owned()).or_default();
                if grains_size > self.config.max_grains_bytes {
                    // Grains live in memory for every minion and are reloaded at each start:
                    // over the cap they are refused, and the minion keeps the ones stored.
                    let reason = format!(
                        "grains are {grains_size} bytes, more than the master's max_grains_bytes ({})",
                        self.config.max_grains_bytes
                    );
                    warn!(minion = id, "{reason}; keeping the grains stored before");
                    self.emit(format!("halite/minion/{id}/grains_refused"), json!({ "reason": reason }));
                    self.send_error(peer, ErrorKind::BadRequest, reason, None);
                } else {
                    entry.grains = hello.grains;
                }
                let entry = self.registry.minions.entry(id.to_owned()).or_default();
                entry.functions = hello.functions;
                self.touch(id);
                let welcome = Welcome { master_id: self.config.id.clone(), version: env!("CARGO_PKG_VERSION").into() };
                self.send(peer, &Message::Welcome(welcome));
                self.emit(format!("halite/minion/{id}/connected"), json!({}));
                for jid in self.jobs.deliverable_to(id) {
                    self.deliver(&jid, id, peer).await?;
                }
            }
            Message::JobAck(ack) if ack.accepted => {
                self.set_slot(&ack.jid, id, MinionJobState::Running, None).await?;
            }
            Message::JobAck(ack) => {
                let reason = if ack.reason.is_empty() { "the minion refused the job".to_owned() } else { ack.reason };
                self.minion_refused(id, &ack.jid, ErrorKind::Forbidden, reason).await?;
            }
            Message::Error(error) => match error.request {
                // A refusal of a job names its jid; nothing else a minion reports needs an answer.
                Some(jid) => self.minion_refused(id, &jid, error.kind, error.message).await?,
                None => {
                    warn!(minion = id, kind = ?error.kind, message = %error.message, "the minion reported an error")
                }
            },
            Message::JobReturn(mut ret) => {
                ret.minion = id.to_owned();
                if size > self.config.max_return_bytes {
                    limits::replace_oversized_return(&mut ret, size, self.config.max_return_bytes);
                }
                let state = match ret.outcome {
                    Outcome::Completed if ret.success => MinionJobState::Returned,
                    Outcome::Completed | Outcome::Interrupted | Outcome::Refused => MinionJobState::Failed,
                    Outcome::TimedOut => MinionJobState::TimedOut,
                    Outcome::Cancelled => MinionJobState::Cancelled,
                    Outcome::Denied => MinionJobState::Denied,
                };
                let jid = ret.jid.clone();
                match self.jobs.state(&jid, id) {
                    Some(current) if !current.is_final() => self.set_slot(&jid, id, state, Some(ret)).await?,
                    // After the slot ended (timed out, cancelled) or the job finished: kept as a
                    // late return beside the final state, never thrown away.
                    _ => self.late_return(&jid, id, state, ret),
                }
                // Acknowledged only once stored (at the end of this step): the minion keeps it
                // in its outbox until then.
                self.pending.acks.push((peer, jid));
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
        let now = self.clock.now();
        let Some(job) = self.jobs.get(jid) else { return Ok(()) };
        let deadline = job.run_deadline(now, grace);
        let signed = job.record.signed.clone();
        let was = self.jobs.state(jid, minion);
        if was.is_none_or(MinionJobState::is_final) {
            return Ok(());
        }
        self.jobs.set_deadline(jid, minion, deadline);
        self.send(peer, &Message::Job(signed));
        if was == Some(MinionJobState::Waiting) {
            self.set_slot(jid, minion, MinionJobState::Sent, None).await?;
        }
        Ok(())
    }

    fn record_state(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>, late: bool) {
        let at_ms = self.clock.wall_ms();
        let change = StateChange { jid: jid.to_owned(), minion: minion.to_owned(), state, ret, at_ms, late };
        self.pending.states.push(change);
    }

    /// A minion refused a job (`job_ack` with `accepted: false`, or an `error` naming the jid):
    /// its slot ends at once, `denied` when the refusal is about permission, else `failed`,
    /// with the minion's reason as the result.
    async fn minion_refused(
        &mut self,
        minion: &str,
        jid: &str,
        kind: ErrorKind,
        reason: String,
    ) -> Result<(), StoreError> {
        if self.jobs.state(jid, minion).is_none_or(MinionJobState::is_final) {
            debug!(minion, jid, %reason, "refusal of a job that is not in flight there");
            return Ok(());
        }
        warn!(minion, jid, ?kind, %reason, "the minion refused a job");
        let (state, outcome) = match kind {
            ErrorKind::Forbidden | ErrorKind::BadSignature => (MinionJobState::Denied, Outcome::Denied),
            _ => (MinionJobState::Failed, Outcome::Refused),
        };
        let ret = JobReturn {
            jid: jid.to_owned(),
            minion: minion.to_owned(),
            success: false,
            retcode: 1,
            outputs: json!({ "error": reason }),
            truncated: false,
            duration_ms: 0,
            outcome,
        };
        self.set_slot(jid, minion, state, Some(ret)).await
    }

    /// A return for a slot that is already final: stored beside that state (which does not
    /// change), shown by `jobs show` and announced on the bus.
    fn late_return(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: JobReturn) {
        info!(jid, minion, state = state.as_str(), "late return stored");
        self.emit(
            format!("halite/job/{jid}/ret/{minion}"),
            json!({ "state": state.as_str(), "late": true, "ret": ret }),
        );
        self.record_state(jid, minion, state, Some(ret), true);
    }

    /// Moves a minion's slot to `state` if the transition table allows it, stores it, streams
    /// it to watchers, and finishes the job when every slot is final.
    async fn set_slot(
        &mut self,
        jid: &str,
        minion: &str,
        state: MinionJobState,
        ret: Option<JobReturn>,
    ) -> Result<(), StoreError> {
        if !self.jobs.set_state(jid, minion, state) {
            debug!(jid, minion, state = state.as_str(), "no change: the slot is gone, final, or already there");
            return Ok(());
        }
        // `running` lives in memory only: a restarted master treats sent and running jobs alike,
        // and job listings show the live state. One write less per job.
        if state != MinionJobState::Running {
            self.record_state(jid, minion, state, ret.clone(), false);
        }
        if state.is_final() {
            self.emit(format!("halite/job/{jid}/ret/{minion}"), json!({ "state": state.as_str(), "ret": ret }));
            if self.deploy_jobs.contains_key(jid) {
                self.pending.finished_slots.push((jid.to_owned(), state, ret.clone()));
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
        self.watchers.update(&job.watchers, update);
    }

    fn finish_if_done(&mut self, jid: &str) {
        if self.jobs.get(jid).is_some_and(|j| j.is_done()) {
            // Announced while still live, so the bus can tell who may see it.
            self.emit(format!("halite/job/{jid}/done"), json!({}));
            if let Some(job) = self.jobs.remove(jid) {
                self.watchers.done(job.watchers, jid);
            }
        }
    }

    /// Sends each watcher its batched updates, then its finished jobs. Updates a client is too
    /// slow to take are counted and reported in `job_done.missed` (the client then reads the
    /// job); a client that cannot even take `job_done` is disconnected, so it never believes a
    /// partial result complete.
    fn send_watcher_batches(&mut self) {
        for (peer, batch) in self.watchers.take() {
            // Several messages when the returns are large: each within the message cap.
            let mut gone = false;
            for updates in message::split_by_size(batch.updates, limits::MESSAGE_BUDGET) {
                let message = Message::JobUpdates(message::JobUpdates { updates });
                match self.try_send(peer, &message) {
                    Ok(()) => {}
                    Err(SendError::Full) => {
                        if let Message::JobUpdates(lost) = message {
                            self.watchers.missed(peer, lost.updates);
                        }
                    }
                    // Gone: nothing to report to anyone.
                    Err(_) => gone = true,
                }
            }
            if gone {
                continue;
            }
            for jid in batch.done {
                let missed = self.watchers.take_missed(peer, &jid);
                if missed > 0 {
                    warn!(peer = peer.0, %jid, missed, "a client missed job updates; told so in job_done");
                }
                if let Err(SendError::Full) = self.try_send(peer, &Message::JobDone(JobDone { jid, missed })) {
                    warn!(peer = peer.0, "client too slow to take job_done; disconnecting it");
                    self.forget(peer, Some("too slow to read job results"));
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
                match crate::authz::check_subscription(acl.as_deref(), &subscribe.patterns) {
                    Ok(()) => self.bus.subscribe(peer, subscribe.patterns, acl.map(|a| a.events.clone())),
                    Err(why) => {
                        warn!(%principal, %why, "subscription refused");
                        self.send_error(peer, ErrorKind::Forbidden, why, Some(SUBSCRIBE_REQUEST.into()));
                    }
                }
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
            Message::Cancel(cancel) => {
                let who = Who { name: principal, acl: acl.as_deref() };
                let visible = self.may_see_live_job(who, &cancel.jid);
                self.cancel(peer, &cancel.jid, visible).await?
            }
            Message::Request(request) => {
                // Requests read the store: they see every state change made before them.
                self.flush().await;
                let id = request.request_id;
                match self.handle_request(request.body, principal, acl.as_deref()).await {
                    Ok(body) => self.respond(peer, id, body),
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
        if message::encoded_len(&request.args) + message::encoded_len(&request.kwargs) > limits::MESSAGE_BUDGET {
            let why =
                format!("the arguments take more than {} bytes; pass large data as files", limits::MESSAGE_BUDGET);
            self.send_error(peer, ErrorKind::BadRequest, why, request_id);
            return Ok(());
        }
        if !publish::valid_function(&request.function) {
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
        // Resolved within what the publisher can see: a minion outside its view is never
        // matched, so neither the answer nor an error reveals it or its grains.
        let view = match &publisher {
            Publisher::Root => TargetView::all(),
            Publisher::Principal(acl) => TargetView::of_principal(Some(acl), &self.config.nodegroups),
            Publisher::Peer(source) => TargetView::of(
                self.config.peers.iter().filter(|r| acl::any_glob(&r.minions, source)).map(|r| r.target.as_str()),
                &self.config.nodegroups,
            ),
        };
        let targets: Vec<String> = self
            .registry
            .accepted
            .iter()
            .filter(|id| {
                let grains = self.registry.grains(*id);
                view.contains(id, grains) && expr.matches(id, grains)
            })
            .cloned()
            .collect();
        if targets.is_empty() {
            let why = match publisher {
                Publisher::Root => "no minions matched the target",
                Publisher::Principal(_) => "no minions matched the target among those this principal may target",
                Publisher::Peer(_) => "no minions matched the target among those a peer rule lets this minion target",
            };
            self.send_error(peer, ErrorKind::NotFound, why.into(), request_id);
            return Ok(());
        }
        // A minion that publishes gets its answer, not a stream of updates.
        let watchers = if matches!(publisher, Publisher::Peer(_)) { Vec::new() } else { vec![peer] };
        let reach = match self.authorize(&publisher, &request, &targets) {
            Ok(reach) => reach,
            Err(why) => {
                warn!(%caller, function = %request.function, %why, "publish refused");
                self.send_error(peer, ErrorKind::Forbidden, why, request_id);
                return Ok(());
            }
        };

        let job = NewJob {
            function: request.function,
            args: request.args,
            kwargs: request.kwargs,
            target: request.target,
            timeout_ms: request.timeout_ms,
            ttl_ms: request.ttl_ms,
            reach,
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
        let NewJob { function, args, kwargs, target, timeout_ms, ttl_ms, reach } = new;
        let jid = self.jids.next(self.clock.wall_micros());
        let created_at_ms = self.clock.wall_ms();
        let job = Job {
            jid: jid.clone(),
            function: function.clone(),
            args: args.clone(),
            kwargs: kwargs.clone(),
            timeout_ms,
            issued_at_ms: created_at_ms,
            ttl_ms,
            caller: caller.to_owned(),
            reach,
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
        let now = self.clock.now();
        let run_deadline =
            now + Duration::from_millis(record.timeout_ms) + Duration::from_secs(self.config.timeout_grace_secs);
        let mut slots = BTreeMap::new();
        let mut states = Vec::with_capacity(targets.len());
        for id in &targets {
            let (state, deadline) = if self.sessions.online.contains_key(id) {
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
        // A publisher whose job could not be stored is told so: it must never wait for a reply.
        if let Err(error) = self.store.insert_job(&record, &states).await {
            warn!(%jid, %error, "storing a new job failed");
            if let Some((peer, request_id, _)) = &publisher {
                let why = format!("the job could not be stored ({}); nothing was sent", error.class());
                self.send_error(*peer, ErrorKind::Internal, why, Some(request_id.to_string()));
            }
            return Err(error);
        }
        info!(%jid, function = %record.function, minions = targets.len(), %caller, "job published");
        let new_event =
            json!({ "function": record.function, "target": record.target, "caller": caller, "minions": targets });
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
        // Announced once live, so the bus can tell who may see it.
        self.emit(format!("halite/job/{jid}/new"), new_event);
        for (id, state) in states {
            if let (MinionJobState::Sent, Some(minion_peer)) = (state, self.sessions.peer_of(&id)) {
                self.send(minion_peer, &job_message);
            }
            self.notify(&jid, &id, state, None);
        }
        self.finish_if_done(&jid);
        Ok(jid)
    }

    /// A client's cancel: only of a job it may see (`visible`); another principal's job is
    /// answered exactly like a job that does not exist, so its jid reveals nothing.
    async fn cancel(&mut self, peer: PeerId, jid: &str, visible: bool) -> Result<(), StoreError> {
        let Some(job) = self.jobs.get_mut(jid).filter(|_| visible) else {
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
        let slots: Vec<(String, MinionJobState)> = job.slots().iter().map(|(m, s)| (m.clone(), s.state)).collect();
        for (minion, state) in slots {
            match (state, self.sessions.peer_of(&minion)) {
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

    /// Whether `publisher` may run `request` on `targets` (already resolved, never empty):
    /// what the job may reach if so (see [`publish::authorize`]). A minion publishing on behalf
    /// of its job's caller needs that caller's permission too.
    fn authorize(
        &self,
        publisher: &Publisher,
        request: &PublishRequest,
        targets: &[String],
    ) -> Result<Option<Vec<String>>, String> {
        let resolved: Vec<(&str, &BTreeMap<String, Value>)> =
            targets.iter().map(|id| (id.as_str(), self.registry.grains(id))).collect();
        let rules = publish::Rules { nodegroups: &self.config.nodegroups, peers: &self.config.peers };
        let check = publish::Publish { function: &request.function, kwargs: &request.kwargs, targets: &resolved };
        let reach = publish::authorize(publisher, &rules, &check)?;
        let (Publisher::Peer(_), Some(caller)) = (publisher, &request.on_behalf_of) else { return Ok(reach) };
        let on_behalf = match caller.as_str() {
            "root" => Publisher::Root,
            // A local call on the minion (`halite-minion call`): its own administrator.
            "local" => return Ok(reach),
            name => match name.strip_prefix("minion:") {
                Some(minion) => Publisher::Peer(minion.to_owned()),
                None => match self.registry.principals.get(name) {
                    Some(principal) => Publisher::Principal(Arc::new(principal.acl.clone())),
                    None => return Err(format!("{caller}, on whose behalf this is published, is not a principal")),
                },
            },
        };
        let theirs =
            publish::authorize(&on_behalf, &rules, &check).map_err(|why| format!("on behalf of {caller}: {why}"))?;
        Ok(publish::both(reach, theirs))
    }

    /// A minion's `event.send`: checked against the `[[events]]` ACL, size and rate, then
    /// published under the minion's authenticated namespace. The tag and body are the minion's;
    /// the id is never taken from them.
    fn on_minion_event(&mut self, id: &str, event: Event) {
        let now = self.clock.now();
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
        let now = self.clock.now();
        // A tick far later than scheduled means the master was not running: minions' returns
        // may be waiting unread in socket buffers. The lost time is added to every deadline, so
        // a pause of the master never turns a minion's result into `timed_out`.
        if let Some(last) = self.last_tick {
            let gap = now.saturating_duration_since(last);
            if gap > PAUSE_THRESHOLD {
                let lost = gap - TICK;
                warn!(paused_ms = lost.as_millis() as u64, "the master was not running; deadlines moved by that long");
                self.jobs.postpone_deadlines(lost);
            }
        }
        self.last_tick = Some(now);
        let handshake_timeout = Duration::from_secs(self.config.handshake_timeout_secs);
        let stale = self.sessions.stale_handshakes(now, handshake_timeout);
        for peer in stale {
            self.drop_peer(peer, "handshake timed out");
        }
        for (jid, minion, state) in self.jobs.expired(now) {
            let new = if state == MinionJobState::Waiting { MinionJobState::Expired } else { MinionJobState::TimedOut };
            if let Err(error) = self.set_slot(&jid, &minion, new, None).await {
                warn!(%error, "recording a deadline failed");
            }
        }
        if self.last_wall_mark.is_none_or(|t| now.saturating_duration_since(t) >= WALL_MARK_EVERY) {
            self.last_wall_mark = Some(now);
            if let Err(error) = self.store.set_wall_mark(self.clock.wall_ms()).await {
                warn!(%error, "recording the wall clock failed");
            }
        }
        if self.last_purge.is_none_or(|t| now.saturating_duration_since(t) >= PURGE_EVERY) {
            self.last_purge = Some(now);
            self.purge().await;
        }
    }

    /// Retention: deletes finished jobs older than `keep_jobs_hours` by the wall clock. A job
    /// with any minion not yet in a final state is never deleted, whatever the clock says.
    pub(crate) async fn purge(&mut self) {
        let before = self.clock.wall_ms().saturating_sub(self.config.keep_jobs_hours * 3_600_000);
        match self.store.purge_jobs(before).await {
            Ok(0) => {}
            Ok(n) => info!(jobs = n, "purged jobs past retention"),
            Err(error) => warn!(%error, "purging old jobs failed"),
        }
    }
}

fn single(parts: &[Vec<u8>]) -> Result<&[u8], halite_protocol::noise::HandshakeError> {
    match parts {
        [one] => Ok(one),
        _ => Err(halite_protocol::noise::HandshakeError::Malformed("handshake messages have one part")),
    }
}
