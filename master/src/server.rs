//! The master's core: one task that owns every connection's session, the registry and the
//! live jobs. Everything that wakes it is an [`Input`]; [`Master::step`] handles one, hands
//! what it decided (slots that ended, events published) to the concerns that listen
//! (`listeners.rs`: metrics, rollouts, deployments, deployment groups), lets rollouts and
//! groups act on it, then writes what it changed ([`Master::flush`]).
//!
//! A single owner keeps the invariants simple (a minion has at most one live session; a job
//! slot changes state in one place) and needs no locks. Job state changes are group-committed,
//! one transaction per step (every store call is a round trip to SQLite's thread, and a fan-out
//! brings thousands of returns at once). A handler that needs another store call asks for it
//! (`core/asks.rs`) and the loop answers it right after the handler ([`Master::answer_asks`]);
//! the handlers not split yet still await inline (the files are listed, and checked, in
//! `scripts/check-architecture.sh`). A return is acknowledged to the minion only after its step
//! is stored, and requests see every change made before them.
//!
//! The core reads time only from its [`Clock`] and talks to connections only through its
//! [`Net`], so the tests in `sim/` run it in-process, in simulated time.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{
    self, ErrorKind, ErrorMessage, Event, Message, MinionJobState, ReturnAck, Value, Welcome,
};
use halite_protocol::noise::LocalIdentity;
use halite_transport::{PeerId, Router, RouterEvent, SendError};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::acl::NoticeThrottle;
use crate::authz::{Access, Who};
use crate::clock::{Clock, JidGenerator};
use crate::config::MasterConfig;
use crate::core::asks::{Ask, Asks, PreparedJob};
use crate::core::bus::Bus;
use crate::core::event_gate::EventGate;
use crate::core::jobs::{JobTable, LiveJob, Slot};
use crate::core::registry::{MinionEntry, Registry};
use crate::core::sessions::{Conn, Sessions};
use crate::core::slot_moves::SlotMoves;
use crate::core::timers::Timer;
use crate::core::watchers::Watchers;
use crate::core::writes::PendingWrites;
use crate::deploy::relay::RelayDone;
use crate::gateway::local::LocalCommand;
use crate::keys::PendingLimits;
use crate::limits;
use crate::net::Net;
use crate::store::reads::{self, AcceptedKeys};
use crate::store::{ClusterChange, Heard, Store, StoreError};

/// The `request` an `error` refusing a subscription names.
pub(crate) const SUBSCRIBE_REQUEST: &str = "subscribe";
/// How soon what failed, or could not be done yet, is tried again (a write the store refused, a
/// job that did not fit a send queue, a store to reread).
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(100);
/// How often the figures that are counted rather than kept are counted.
const GAUGES_EVERY: Duration = Duration::from_secs(1);
/// Router events handled in one step before state changes are written (group commit).
const BATCH: usize = 512;
/// How often the wall clock reached is recorded (TTLs resume from it after a restart).
const WALL_MARK_EVERY: Duration = Duration::from_secs(5);
/// How often old jobs are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// Waking this much later than planned means the master itself was not running (SIGSTOP, a VM
/// migration, a long swap storm): the time it lost is not charged to the minions' jobs.
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
    /// Time passed: something is due ([`Master::next_timeout`]), or the store's reachability
    /// changed.
    Tick,
    /// A file read for a minion finished.
    File(crate::files::FileServed),
    /// Another master sharing the store announced a change (who, what).
    Cluster(crate::store::Heard),
    /// SIGHUP: reread the rules in the config file.
    Reload,
}

/// The master's state; see the module docs.
pub struct Master<S: Store, N: Net = Router> {
    pub(crate) config: MasterConfig,
    pub(crate) identity: LocalIdentity,
    pub(crate) root: PublicIdentity,
    pub(crate) net: N,
    pub(crate) store: S,
    /// The only time source.
    pub(crate) clock: Arc<dyn Clock>,
    /// Every connection and its session; which minions are online.
    pub(crate) sessions: Sessions,
    /// Accepted keys, minions, principals.
    pub(crate) registry: Registry,
    pub(crate) jobs: JobTable,
    pub(crate) jids: JidGenerator,
    pub(crate) bus: Bus,
    /// The bus's recent past, for subscribers resuming after an event id.
    pub(crate) event_log: crate::core::event_log::EventLog,
    /// Which minion and engine events reach the bus (rules, rates, refusals counted).
    pub(crate) event_gate: EventGate,
    pub(crate) notices: NoticeThrottle,
    /// The pending-key cap and arrival rate.
    pub(crate) pending_limits: PendingLimits,
    /// Unknown keys turned away by those limits since start.
    pub(crate) keys_refused: u64,
    /// Jobs whose message did not fit a minion's send queue, by minion, in jid order: sent
    /// again as the queue drains ([`Master::send_backlogs`]).
    pub(crate) undelivered: HashMap<String, BTreeSet<String>>,
    /// The other masters sharing the store, and the minions connected to them.
    pub(crate) cluster: crate::core::cluster_view::ClusterView,
    /// Decided, not yet stored: written together at the end of each step ([`Master::flush`]).
    pub(crate) pending: PendingWrites,
    /// Store calls handlers asked for, answered by the loop ([`Master::answer_asks`]).
    pub(crate) asks: Asks,
    /// Slot ends and events the step's listeners have not heard yet (`listeners.rs`).
    pub(crate) hearing: crate::core::hearing::Hearing,
    /// Rollouts the end of the step decides or stops.
    pub(crate) rollout_queue: crate::core::rollout_queue::RolloutQueue,
    /// What each watching client is told at the end of the step.
    pub(crate) watchers: Watchers,
    /// Deployment groups this master drives.
    pub(crate) groups: crate::core::group_runs::GroupRuns,
    /// `deploy.apply` jobs in flight: jid → deployment id.
    pub(crate) deploy_jobs: HashMap<String, String>,
    /// Sends deployment signals to engines.
    pub(crate) relay_tx: mpsc::UnboundedSender<RelayDone>,
    pub(crate) relay_rx: Option<mpsc::UnboundedReceiver<RelayDone>>,
    /// Files served to minions (`[files]`), and where finished reads come back.
    pub(crate) files: crate::files::FileServer,
    pub(crate) file_tx: mpsc::UnboundedSender<crate::files::FileServed>,
    pub(crate) file_rx: Option<mpsc::UnboundedReceiver<crate::files::FileServed>>,
    /// What the master counts, for operators (`/metrics`).
    pub(crate) metrics: crate::metrics::Metrics,
    /// Where in-process clients (the gateway) send their commands.
    pub(crate) local_tx: mpsc::Sender<LocalCommand>,
    pub(crate) local_rx: Option<mpsc::Receiver<LocalCommand>>,
    /// The master's own periodic duties and retries.
    pub(crate) timers: crate::core::timers::TimerTable,
    /// When the loop planned to wake next (waking much later means the master was paused).
    pub(crate) wake_at: Option<Instant>,
}

/// A job about to be created.
pub(crate) struct NewJob {
    /// What was asked.
    pub(crate) spec: message::JobSpec,
    /// What the job may reach through functions that call functions (see `authz::publish`).
    pub(crate) reach: Option<Vec<String>>,
    /// Ids the target named that no minion has (sorted): final at once, as `unknown`.
    pub(crate) unknown: Vec<String>,
}

impl<S: Store, N: Net> Master<S, N> {
    /// The key minions pin, in hex: the cluster key when this master is certified by one, else
    /// its own.
    pub fn pinned_key_hex(&self) -> String {
        let key = match self.identity.certificate() {
            Some(certificate) => certificate.cluster,
            None => self.identity.public(),
        };
        halite_protocol::hex::encode(key.as_bytes())
    }

    /// The figures this master keeps (shared: the metrics endpoints read them).
    pub fn metrics(&self) -> crate::metrics::Metrics {
        self.metrics.clone()
    }

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
        let (file_tx, file_rx) = mpsc::unbounded_channel();
        let (local_tx, local_rx) = mpsc::channel(1024);
        let event_log = crate::core::event_log::EventLog::new(clock.wall_ms());
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
            event_log,
            event_gate: EventGate::default(),
            notices: NoticeThrottle::default(),
            pending_limits,
            keys_refused: 0,
            pending: PendingWrites::default(),
            asks: Asks::default(),
            hearing: Default::default(),
            rollout_queue: Default::default(),
            undelivered: HashMap::new(),
            cluster: crate::core::cluster_view::ClusterView::default(),
            watchers: Watchers::default(),
            deploy_jobs: HashMap::new(),
            groups: Default::default(),
            metrics: crate::metrics::Metrics::new(),
            relay_tx,
            relay_rx: Some(relay_rx),
            files: Default::default(),
            file_tx,
            file_rx: Some(file_rx),
            local_tx,
            local_rx: Some(local_rx),
            timers: crate::core::timers::TimerTable::default(),
            wake_at: None,
        };
        // The first wake does every periodic duty once.
        let start = master.clock.now();
        for timer in [Timer::Gauges, Timer::WallMark, Timer::Purge] {
            master.timers.set(timer, start);
        }
        master.wake_at = master.next_timeout();
        master.trust_store().await?;
        master.reload_principals().await?;
        master.reload_accepted().await?;
        for mut m in master.store.minions().await? {
            // Grains stored before the cap existed (or under a larger one) are not carried into
            // memory; the minion announces them again when it connects.
            if limits::json_size(&m.grains) > master.config.max_grains_bytes {
                warn!(minion = %m.id, "stored grains exceed max_grains_bytes; not loaded");
                m.grains.clear();
            }
            master.registry.set_minion(
                m.id,
                MinionEntry { grains: m.grains, functions: m.functions, last_seen_ms: m.last_seen_ms, installed: None },
            );
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
            let minions = loaded_slots(&record, states, now, wall, grace);
            let job = LiveJob::new(record, minions, Vec::new());
            if job.rollout.is_some() {
                // A rollout goes on from where it was, at the first step.
                master.rollout_queue.due(&job.record.jid);
            }
            master.jobs.insert(job);
        }
        master.resume_deployments().await?;
        // What the deployments announced is heard before the groups listen again.
        master.hear_events();
        master.resume_groups().await?;
        Ok(master)
    }

    pub(crate) async fn reload_principals(&mut self) -> Result<(), StoreError> {
        let principals = self.store.principals().await?;
        self.registry.set_principals(principals);
        Ok(())
    }

    /// Publishes an event on the bus here and, after this step's writes, on every master
    /// sharing the store: for events no other master derives itself (minion events, keys,
    /// deployments; a job's returns and end are derived by each master from its slots).
    pub(crate) fn emit_shared(&mut self, tag: String, data: Value) {
        self.cluster.share_event(&tag, &data);
        self.emit(tag, data);
    }

    /// Publishes an event on the bus. Each subscriber's queue is bounded: what does not fit is
    /// dropped and counted, and reported with a `halite/bus/dropped` notice once there is room.
    /// The concerns that listen to events (rollouts' and groups' `abort_on`, groups following
    /// their deployments) hear it later in the step, from the loop (`Master::hear_events`).
    pub(crate) fn emit(&mut self, tag: String, data: Value) {
        // Kept for the listeners only while one exists: a fan-out's returns are not copied for
        // nobody (a listener that starts later hears only what comes after it).
        if self.jobs.has_rollouts() || self.groups.listening() {
            self.hearing.event(tag.clone(), data.clone());
        }
        let seq = self.event_log.record(&tag, &data);
        if self.bus.is_empty() {
            return;
        }
        let mut recipients = self.bus.recipients(&tag);
        recipients.retain(|peer| self.peer_may_receive(*peer, &tag, &data));
        if recipients.is_empty() {
            return;
        }
        let event = Message::Event(Event { tag, data, id: Some(self.event_log.id(seq)) });
        for peer in recipients {
            let missed = self.bus.take_dropped(peer);
            if missed > 0 {
                let notice = Message::Event(Event {
                    tag: "halite/bus/dropped".into(),
                    data: json!({ "dropped": missed }),
                    id: None,
                });
                if self.try_send(peer, &notice).is_err() {
                    self.bus.restore_dropped(peer, missed);
                    self.bus.dropped(peer);
                    self.metrics.get().bus_dropped.inc();
                    continue;
                }
            }
            if self.try_send(peer, &event).is_err() {
                self.bus.dropped(peer);
                self.metrics.get().bus_dropped.inc();
            }
        }
    }

    /// Rereads every accepted key.
    pub(crate) async fn reload_accepted(&mut self) -> Result<(), StoreError> {
        let keys = reads::accepted_keys(&self.store, None).await?;
        self.take_accepted(keys);
        Ok(())
    }

    /// Accepted keys as read: the registry takes them, and minions parked while their key was
    /// pending knock again if theirs is now accepted.
    pub(crate) fn take_accepted(&mut self, keys: AcceptedKeys) {
        match keys {
            AcceptedKeys::All(keys) => self.registry.set_accepted(keys),
            AcceptedKeys::Of(of) => {
                for (id, key) in of {
                    self.registry.set_accepted_of(&id, key);
                }
            }
        }
        self.release_parked();
    }

    /// Serves until `shutdown` completes, then writes what is pending.
    pub async fn serve(mut self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), StoreError> {
        tokio::pin!(shutdown);
        let (_, mut relays) = mpsc::unbounded_channel();
        if let Some(rx) = self.relay_rx.take() {
            relays = rx;
        }
        let (_, mut files) = mpsc::unbounded_channel();
        if let Some(rx) = self.file_rx.take() {
            files = rx;
        }
        // A store shared with other masters carries their changes; otherwise nothing comes.
        let (_cluster_tx, mut cluster) = mpsc::channel(1);
        if let Some(rx) = self.store.changes() {
            cluster = rx;
            self.cluster = crate::core::cluster_view::ClusterView::shared(self.clock.wall_ms());
            // Who is connected where: every running master answers.
            self.tell_masters(crate::store::ClusterChange::RollCall);
            self.send_announcements().await;
        }
        // A store that stops or starts answering wakes the loop (what it holds may be in doubt).
        let mut reachability = self.store.reachability();
        let mut hangups = match &self.config.path {
            Some(_) => tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok(),
            None => None,
        };
        self.wake_at = self.plan_wake(false);
        loop {
            let input = tokio::select! {
                event = self.net.recv() => match event {
                    Some(event) => Input::Net(event),
                    None => break,
                },
                Some(command) = next_local(&mut self.local_rx) => Input::Local(command),
                Some(done) = relays.recv() => Input::Relay(done),
                Some(served) = files.recv() => Input::File(served),
                Some(change) = cluster.recv() => Input::Cluster(change),
                Some(()) = next_hangup(&mut hangups) => Input::Reload,
                () = sleep_until(self.wake_at) => Input::Tick,
                Some(()) = reachability_changed(&mut reachability) => Input::Tick,
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
        let tick = matches!(input, Input::Tick);
        match input {
            Input::Net(event) => {
                self.on_router_event(event).await;
                // Whatever else has arrived is handled in the same step, so one transaction
                // records a burst of returns.
                self.drain_net(BATCH - 1).await;
            }
            Input::Local(command) => self.answer_local(command).await,
            Input::Relay(done) => {
                if let Err(error) = self.relay_finished(done).await {
                    warn!(%error, "recording a relay failed");
                }
            }
            Input::Reload => {
                // Rows and announcements a master revoked now signs are refused from now on, not
                // only after a restart (the store takes the new trust even if it does not answer).
                if let Some(before) = self.config.reread_rules(&self.identity) {
                    self.revocations_changed(&before).await;
                }
            }
            Input::File(served) => {
                // Sent only if the minion is still connected on the session that asked.
                let (peer, answer) = self.files.finished(served);
                if self.sessions.contains(&peer) {
                    self.send(peer, &answer);
                }
            }
            // The listener checked the signer when the announcement arrived, but a SIGHUP may
            // have revoked that master while it waited here (`None`: the store's own notice).
            Input::Cluster(heard) if heard.signer.is_some_and(|key| self.config.revokes(&key)) => {
                // Counted as the listener counts the announcements it refuses; logged once a
                // second at most (up to a queue of them may be waiting).
                self.metrics.get().denied("cluster_announcement");
                if self.notices.ready("cluster:revoked", Duration::from_secs(1), self.clock.now()) {
                    warn!(from = %heard.from, "announcements of a master revoked while they waited are dropped");
                }
            }
            Input::Cluster(Heard { from, change, .. }) => {
                if self.on_cluster_change(&from, change) {
                    if let Err(error) = self.resync().await {
                        // Not lost: everything is reread once the store answers (`on_tick`).
                        self.cluster_read_failed(&error);
                    }
                }
            }
            Input::Tick => {
                // How late the wake came is measured before anything is done: the time spent
                // below is the master running, not paused.
                self.notice_pause();
                // Inputs already received are processed before deadlines fire, a batch (and
                // its commit) at a time, so a burst never builds one unbounded write.
                while self.drain_net(BATCH).await == BATCH {
                    self.flush().await;
                    // However long the burst, the gateway is answered between its batches (the
                    // CLI's requests come first within them: see `Lane`).
                    self.answer_waiting_locals().await;
                }
                self.on_tick().await;
            }
        }
        // The listeners hear what the step decided, in this order: each slot move (the bus and
        // the watchers, first thing in `hear_moves`), each slot that ended (the metrics, its
        // rollout, the deployment riding on it; see `hear_moves`), the deployments then
        // recorded by the loop, then each event published (rollouts, then deployment groups;
        // see `hear_events`), the deployments' announcements included. Only then do rollouts
        // and groups act, so an abort event stops them in the step that published it, and a
        // target's end starts the next in the step that ended it. The listeners await nothing.
        // What the input's handling asked of the store is answered before anything hears of it.
        self.answer_asks().await;
        self.hear_moves();
        self.record_deployment_ends().await;
        self.hear_events();
        // The rollouts an event aborted stop (each stop stored first), and the targets they
        // skipped are heard, before any rollout is decided.
        self.stop_aborted_rollouts();
        self.answer_asks().await;
        self.hear_moves();
        self.record_deployment_ends().await;
        // Rollouts go on from what the step changed (and, woken by time, those whose wait ended).
        self.advance_rollouts(tick);
        self.answer_asks().await;
        // What the rollouts ended (skipped, offline targets) and announced: groups hear it before
        // they act; an abort it carries stops a rollout at the next step. The deployment jobs
        // the groups start are heard at the next step's end, as the deployments always heard them.
        self.hear_moves();
        self.record_deployment_ends().await;
        self.hear_events();
        self.advance_groups(tick).await;
        self.answer_asks().await;
        // What the groups announced: heard now, acted upon at the next step.
        self.hear_events();
        self.metrics.alive();
        // Every stage above had its asks answered; none is ever left for a later input.
        self.answer_asks().await;
        self.flush().await;
        self.wake_at = self.plan_wake(tick);
    }

    /// The revocations changed (from `before`): in force at once, as at a restart. The store
    /// refuses what a newly revoked master signs (the new trust holds even while the database
    /// does not answer); with other masters on it, keys and principals are reread under it, so
    /// what a revoked master accepted or registered no longer counts and the sessions that stood
    /// on it end; and every minion connected here is told them in a `welcome` (it refuses that
    /// master, and every new job it signed, from then on). Told, not reconnected: a minion
    /// given several masters would move to the next on its list, maybe the revoked one.
    async fn revocations_changed(&mut self, before: &[String]) {
        if let Err(error) = self.trust_store().await {
            warn!(%error, "registering this master's key again after new revocations failed");
        }
        if self.cluster.is_shared() {
            self.cluster.lost_track();
        }
        if self.config.revoked_masters.iter().any(|revocation| !before.contains(revocation)) {
            let minions: Vec<PeerId> = self.sessions.online_ids().filter_map(|id| self.sessions.peer_of(id)).collect();
            info!(minions = minions.len(), "a master was revoked: telling the minions connected here");
            let welcome = Message::Welcome(Welcome { revocations_only: true, ..self.welcome() });
            for peer in minions {
                self.send(peer, &welcome);
            }
        }
    }

    /// When the loop wakes next ([`Master::next_timeout`]). After a wake for time, whatever is
    /// still due could not be done (a store that does not answer): it is tried again after
    /// [`RETRY_EVERY`], never in a busy loop.
    fn plan_wake(&self, woken_by_time: bool) -> Option<Instant> {
        let now = self.clock.now();
        self.next_timeout().map(|at| if woken_by_time && at <= now { now + RETRY_EVERY } else { at })
    }

    /// The job table with what records its moves: the one way a slot changes state.
    pub(crate) fn slots(&mut self) -> SlotMoves<'_> {
        let (now, wall_ms, shared) = (self.clock.now(), self.clock.wall_ms(), self.cluster.is_shared());
        SlotMoves::new(&mut self.jobs, &mut self.pending, &mut self.hearing, shared, now, wall_ms)
    }

    /// Who may see, control and receive what: the rules read with the registry and the live
    /// jobs (`crate::authz`).
    pub(crate) fn access(&self) -> Access<'_> {
        Access::of(&self.config, &self.registry, &self.jobs)
    }

    /// Whether the client on `peer` may receive an event (its subscription patterns aside);
    /// whether it sees the event's job is remembered for as long as the job lives.
    pub(crate) fn peer_may_receive(&mut self, peer: PeerId, tag: &str, data: &Value) -> bool {
        let Some((name, acl)) = self.sessions.principal_on(peer) else { return false };
        let receipt = self.access().peer_receives(peer, Who { name: &name, acl: acl.as_deref() }, tag, data);
        if let Some((jid, visible)) = receipt.learned {
            self.jobs.remember_visibility(&jid, peer, visible);
        }
        receipt.allowed
    }

    /// Answers one gateway request.
    async fn answer_local(&mut self, command: LocalCommand) {
        self.on_local(command);
        self.answer_asks().await;
        self.tell_moves();
    }

    /// Answers what the handlers asked of the store, oldest first, handing each answer to its
    /// continuation before the next (which may ask again): the one place a handler's store call
    /// is awaited (a client's request is answered by `admin.rs` and `deploy/`, which still await
    /// inline). Called right after each input's handler and each stage of the step, so nothing
    /// else happens in between.
    pub(crate) async fn answer_asks(&mut self) {
        while let Some(ask) = self.asks.next() {
            match ask {
                Ask::InsertJob(job) => {
                    let stored = self.insert_job(&job).await;
                    // A failure is logged and told to the publisher by the continuation.
                    let _ = self.job_stored(*job, stored);
                }
                Ask::KeyDecision(admitting) => {
                    let who = admitting.identified.peer();
                    let (key, token) = (*who.identity.as_bytes(), admitting.identified.enrollment_token());
                    let at = (self.clock.wall_ms(), self.clock.now());
                    let decided =
                        crate::keys::decide(&self.store, &admitting.id, &key, token, at, &mut self.pending_limits)
                            .await;
                    self.key_decided(*admitting, decided);
                }
                Ask::TokenProblem(admitting) => {
                    let token = admitting.identified.enrollment_token().unwrap_or_default();
                    let problem =
                        crate::keys::token_problem(&self.store, token, &admitting.id, self.clock.wall_ms()).await;
                    self.pending_explained(*admitting, problem);
                }
                Ask::TokenGrant(grant) => {
                    let granted = self.store.api_token_grant(&grant.token_hash, self.clock.wall_ms()).await;
                    self.token_granted(*grant, granted);
                }
                Ask::SetRollout(change) => {
                    let stored = self.store.set_rollout(&change.jid, &change.status).await;
                    self.rollout_stored(*change, stored);
                }
                Ask::ReadKeys { ids } => {
                    let read = reads::accepted_keys(&self.store, Self::keys_to_read(ids.as_deref())).await;
                    self.keys_reread(ids, read);
                }
                Ask::ReadPrincipals { name } => {
                    let read = self.store.principals().await;
                    self.principals_reread(&name, read);
                }
                Ask::RecheckTokens { tokens } => {
                    let gone = reads::tokens_gone(&self.store, &tokens, self.clock.wall_ms()).await;
                    self.tokens_rechecked(gone);
                }
                Ask::LoadJob { jid } => {
                    // A revoked master's job is refused before anything more of it is read.
                    let revoked = |record: &crate::store::JobRecord| {
                        record.signed.signer_key().is_some_and(|key| self.config.revokes(&key))
                    };
                    let loaded = reads::job_with_returns(&self.store, &jid, revoked).await;
                    self.job_loaded(&jid, loaded);
                }
                Ask::ReadReturns { jid, states } => {
                    let ended: Vec<String> =
                        states.iter().filter(|(_, s)| s.is_final()).map(|(m, _)| m.clone()).collect();
                    let returns = reads::returns_of(&self.store, &jid, &ended).await;
                    self.remote_slots_read(&jid, states, returns);
                }
                Ask::ReadSharedEvent { id, digest } => {
                    let read = self.store.shared_event(id, &digest).await;
                    self.shared_event_read(read);
                }
                Ask::ReadMinions { ids } => {
                    let read = self.store.minions_named(&ids).await;
                    self.minions_read(read);
                }
                Ask::ReadLiveJobs => {
                    let read = self.store.unfinished_jids().await;
                    self.live_jobs_read(read);
                }
                Ask::RereadJob { jid } => {
                    let read = self.store.live_job(&jid).await;
                    self.job_reread(&jid, read);
                }
                Ask::ReadMissedJobs { since_ms } => {
                    let jobs = &self.jobs;
                    let missed = |jid: &str| jobs.get(jid).is_none() && !jobs.finished_lately(jid);
                    let max = crate::core::cluster_view::GAP_JOBS_MAX;
                    let read = reads::jobs_missed(&self.store, since_ms, max, missed).await;
                    self.missed_jobs_read(read);
                }
                Ask::Request(asked) => {
                    // Requests read the store: they see every state change made before them.
                    self.flush().await;
                    self.answer_request(*asked).await;
                }
                Ask::ReadRollout { jid } => {
                    let stored = self.store.job(&jid).await.map(|job| job.and_then(|job| job.summary.rollout));
                    self.rollout_reread(&jid, stored);
                }
            }
        }
    }

    /// Stores a new job's row, counting the call.
    pub(crate) async fn insert_job(&mut self, job: &PreparedJob) -> Result<(), StoreError> {
        let started = self.clock.now();
        let stored = self.store.insert_job(&job.record, &job.states).await;
        self.metrics.store_call("insert_job", self.clock.now().saturating_duration_since(started), stored.is_ok());
        stored
    }

    /// Answers the gateway's requests already waiting, a batch at most.
    async fn answer_waiting_locals(&mut self) {
        for _ in 0..BATCH {
            let Some(command) = self.local_rx.as_mut().and_then(|rx| rx.try_recv().ok()) else { return };
            self.answer_local(command).await;
        }
    }

    /// Handles up to `limit` network events that are already waiting; how many it handled.
    pub(crate) async fn drain_net(&mut self, limit: usize) -> usize {
        for handled in 0..limit {
            let Some(event) = self.net.try_recv() else { return handled };
            self.on_router_event(event).await;
        }
        limit
    }

    /// Handles one network event, then tells the slot moves it made (`Master::tell_moves`):
    /// the bus and the watchers hear of each input's moves before the next input.
    pub(crate) async fn on_router_event(&mut self, event: RouterEvent) {
        self.on_network(event).await;
        self.answer_asks().await;
        self.tell_moves();
    }

    /// Carries out what the step decided: writes it ([`Master::write_pending`]), then tells
    /// the other masters what it queued for them, each already stored. The one place the loop
    /// announces.
    pub(crate) async fn flush(&mut self) {
        self.tell_moves();
        self.write_pending().await;
        self.send_announcements().await;
    }

    /// Writes the batched state changes in one transaction, then acknowledges the returns they
    /// include: a minion drops a return from its outbox only once it is stored.
    async fn write_pending(&mut self) {
        let records = self.pending.take_minions();
        if !records.is_empty() {
            let started = self.clock.now();
            let stored = self.store.put_minions(&records).await;
            self.metrics.store_call("put_minions", self.clock.now().saturating_duration_since(started), stored.is_ok());
            match stored {
                Err(error) => {
                    if self.notices.ready("store:presence", Duration::from_secs(10), self.clock.now()) {
                        warn!(%error, minions = records.len(), "recording presence failed; retrying every 100 ms");
                    }
                    self.pending.keep_minions(records);
                }
                Ok(()) if self.cluster.is_shared() => {
                    // Stored first, so the other masters read the entries they are told of.
                    let ids = records.into_iter().map(|r| r.id).filter(|id| self.sessions.is_online(id)).collect();
                    self.tell_masters(ClusterChange::Here { ids });
                }
                Ok(()) => {}
            }
        }
        let ids = self.cluster.take_left_here();
        if !ids.is_empty() {
            self.tell_masters(ClusterChange::Left { ids });
        }
        for (tag, data) in self.cluster.take_shared_events() {
            self.share_event(tag, data).await;
        }
        // Watchers first (sent means written to their sockets): what they are told is already
        // decided, and their latency should not include the write. Minions are acknowledged
        // only after it.
        self.send_watcher_batches();
        self.net.release_held();
        if !self.pending.has_states() {
            self.tell_stored_finals().await;
            self.ask_owed_returns();
            return;
        }
        let (changes, acks) = self.pending.take_states();
        let started = self.clock.now();
        let stored = if changes.is_empty() { Ok(()) } else { self.store.set_states(&changes).await };
        if !changes.is_empty() {
            let took = self.clock.now().saturating_duration_since(started);
            self.metrics.store_call("set_states", took, stored.is_ok());
        }
        if let Err(error) = stored {
            // Kept for the next flush (retried every 100 ms): nothing is acknowledged until it is stored,
            // so the minions keep their returns meanwhile.
            if self.notices.ready("store:states", Duration::from_secs(10), self.clock.now()) {
                warn!(%error, changes = changes.len(), "recording job states failed; retrying every 100 ms");
            }
            self.pending.write_failed_for(changes, acks);
            return;
        }
        self.pending.written();
        for (peer, jid) in acks {
            self.send(peer, &Message::ReturnAck(ReturnAck { jid }));
        }
        self.tell_stored_finals().await;
        self.ask_owed_returns();
        if self.cluster.is_shared() {
            self.cluster.tell_slots(&changes);
        }
    }

    async fn on_network(&mut self, event: RouterEvent) {
        match event {
            RouterEvent::Connected { peer, addr, .. } => {
                debug!(peer = peer.0, %addr, "connection");
                let now = self.clock.now();
                self.sessions.insert(peer, Conn::AwaitHello { since: now });
                self.sessions.watch(peer, now + self.handshake_timeout());
            }
            RouterEvent::Message { peer, parts } => {
                self.on_message(peer, parts);
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

    /// Seals and queues a message for an authenticated peer, reporting a full queue. A session
    /// that can no longer seal (expired, nonces exhausted) ends the connection.
    pub(crate) fn try_send(&mut self, peer: PeerId, msg: &Message) -> Result<(), SendError> {
        if let Some(Conn::Local { tx, .. }) = self.sessions.get(&peer) {
            return tx.try_send(msg.clone());
        }
        let Some(conn) = self.sessions.get_mut(&peer) else { return Err(SendError::NotConnected) };
        // A client's messages of one step leave together at its end, in one write that wakes
        // it once (a publish's answer and first updates; a return's update and the job's end).
        // A minion's leave at once: its job is on the way of every fan-out.
        let held = matches!(conn, Conn::Client { .. });
        let Some(session) = conn.session_mut() else { return Err(SendError::NotConnected) };
        match session.seal(&message::encode(msg), self.clock.now()) {
            Ok(parts) if held => self.net.send_held(peer, parts),
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

    pub(crate) fn send_error(&mut self, peer: PeerId, kind: ErrorKind, message: String, request: Option<String>) {
        self.send(peer, &Message::Error(ErrorMessage { kind, message, request }));
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

    /// Sessions by role, live jobs and the clock's offset, for `/metrics` (counted every
    /// [`GAUGES_EVERY`]); an offset past `max_clock_offset_secs` is logged.
    fn count_sessions(&mut self) {
        let clients = self.sessions.client_count();
        let metrics = self.metrics.get();
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        metrics
            .sessions
            .get_or_create(&crate::metrics::Role { role: "minion" })
            .set(gauge(self.sessions.online_count()));
        metrics.sessions.get_or_create(&crate::metrics::Role { role: "client" }).set(gauge(clients));
        metrics.jobs_live.set(gauge(self.jobs.len()));
        let offset = self.clock.offset_ms();
        metrics.clock_offset_seconds.set(offset as f64 / 1000.0);
        let bound = self.config.max_clock_offset_secs.saturating_mul(1000);
        if offset.unsigned_abs() > bound
            && self.notices.ready("clock:offset", Duration::from_secs(60), self.clock.now())
        {
            warn!(
                offset_ms = offset,
                max_clock_offset_secs = self.config.max_clock_offset_secs,
                "this host's clock differs from the database's; the master uses the database's time (fix NTP here)"
            );
        }
    }

    /// Waking far later than planned means the master was not running: minions' returns may be
    /// waiting unread in socket buffers. The lost time is added to every deadline, so a pause of
    /// the master never turns a minion's result into `timed_out`. Measured as the wake begins: a
    /// step that then works through a burst of inputs for seconds is the master running.
    fn notice_pause(&mut self) {
        if let Some(planned) = self.wake_at {
            let late = self.clock.now().saturating_duration_since(planned);
            if late > PAUSE_THRESHOLD {
                warn!(paused_ms = late.as_millis() as u64, "the master was not running; deadlines moved by that long");
                self.jobs.postpone_deadlines(late);
            }
        }
    }

    /// Does what has come due: closes handshakes and refusals past their time, ends sessions
    /// whose token expired, decides job slots past their deadline, and the periodic duties.
    pub(crate) async fn on_tick(&mut self) {
        let now = self.clock.now();
        if self.timers.expired(Timer::Gauges, now) {
            self.count_sessions();
            self.timers.set(Timer::Gauges, now + GAUGES_EVERY);
        }
        let due = self.sessions.due(now, self.handshake_timeout());
        for peer in due.stale_handshakes {
            self.drop_peer(peer, "handshake timed out");
        }
        for peer in due.lingered {
            self.forget(peer, Some("not accepted"));
        }
        // A live event stream has a deadline, not only a check when it opens: the loop wakes
        // when the first token expires.
        self.end_gateway_sessions(self.sessions.expired_tokens(self.clock.wall_ms()), "token expired");
        self.send_backlogs();
        if self.cluster.alive_due(now) {
            self.tell_masters(ClusterChange::Alive);
        }
        self.follow_the_store(now).await;
        let deadlines_wait = self.pending.deadlines_wait(self.store_in_doubt(), now);
        for (jid, minion, state) in self.jobs.expired(now) {
            // A master that cannot write decides nothing: another master may be storing this
            // slot's return meanwhile, and the store keeps the first final state. Once it can,
            // the returns minions kept meanwhile come first.
            if deadlines_wait {
                self.jobs.set_deadline(&jid, &minion, Some(now + RETRY_EVERY));
                continue;
            }
            if self.served_elsewhere(&minion) {
                // Its master decides the slot; looked at again once it may have gone.
                self.jobs.set_deadline(&jid, &minion, Some(now + crate::core::cluster_view::ALIVE_EVERY));
                continue;
            }
            let new = if state == MinionJobState::Waiting { MinionJobState::Expired } else { MinionJobState::TimedOut };
            self.slots().set(&jid, &minion, new, None);
        }
        if self.timers.expired(Timer::WallMark, now) {
            self.timers.set(Timer::WallMark, now + WALL_MARK_EVERY);
            if let Err(error) = self.store.set_wall_mark(self.clock.wall_ms()).await {
                warn!(%error, "recording the wall clock failed");
            }
        }
        if self.timers.expired(Timer::Purge, now) {
            self.timers.set(Timer::Purge, now + PURGE_EVERY);
            self.purge().await;
        }
    }

    /// When the loop must next wake, whatever arrives meanwhile: the earliest of the master's
    /// own timers, the owners' deadlines (job slots, handshakes and refusals, tokens, rollout
    /// and group waits, the other masters), now when the last step left work for the next, and,
    /// while something is being retried, the retry.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        let now = self.clock.now();
        let token_expiry = self.sessions.next_token_expiry_ms().map(|at_ms| {
            // Tokens expire by the wall clock; the loop sleeps on the monotonic one. Recomputed
            // at every wake, so a step of the wall clock is followed.
            now + Duration::from_millis(at_ms.saturating_sub(self.clock.wall_ms()))
        });
        let rollout_wait = self.jobs.rollout_jobs().filter_map(|job| job.rollout.as_ref()?.not_before).min();
        let group_wait = self.groups.next_wait();
        let retry = self.retrying().then_some(now + RETRY_EVERY);
        let left_for_next_step = self.left_for_next_step().then_some(now);
        [
            self.timers.next_timeout(),
            self.jobs.next_deadline(),
            self.sessions.next_timeout(),
            token_expiry,
            rollout_wait,
            group_wait,
            self.cluster.next_due(now),
            self.pending.deadlines_resume_at(),
            retry,
            left_for_next_step,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether something failed or could not be done yet, and is tried again at each wake: the
    /// store's writes, jobs waiting for room in a send queue, a store to reread, minions owed
    /// a request to send their returns again, final states to tell once stored.
    fn retrying(&self) -> bool {
        self.pending.retrying() || !self.undelivered.is_empty() || self.store_in_doubt()
    }

    /// Whether the step left work for the next one: slot ends and events its last part made,
    /// not heard yet, and rollouts or groups that hearing made due (see [`Master::step`]).
    fn left_for_next_step(&self) -> bool {
        !self.hearing.is_empty() || !self.rollout_queue.is_empty() || self.groups.has_work()
    }

    /// How long a connection may take to finish its handshake.
    pub(crate) fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.config.handshake_timeout_secs)
    }

    /// Tells the final states decided here that are now stored (see `SlotMoves::set`):
    /// those written late are first compared with what the store kept, and told as it kept
    /// them. Nothing is told while they are not stored, or cannot be compared.
    async fn tell_stored_finals(&mut self) {
        if !self.pending.finals_to_tell() {
            return;
        }
        if self.pending.finals_in_doubt() {
            if !self.follow_stored_finals().await {
                return;
            }
            self.pending.finals_checked();
        }
        self.slots().report_stored_finals();
        self.tell_moves();
        self.send_watcher_batches();
        self.net.release_held();
    }

    /// Compares the final states waiting to be told with what the store kept: where another
    /// master's came first, this master's view, and what it will tell, follow the store's.
    /// False if the store could not be read (a reread is then due).
    async fn follow_stored_finals(&mut self) -> bool {
        let jids = self.pending.unreported_jids();
        for jid in jids {
            let stored = match self.store.live_job(&jid).await {
                Ok(Some((_, states))) => states,
                Ok(None) => continue,
                Err(error) => {
                    warn!(%error, %jid, "could not compare a job's final states with the store");
                    self.cluster.lost_track();
                    return false;
                }
            };
            // The slots the store kept otherwise, with what it kept.
            let differing: Vec<(String, MinionJobState)> = self
                .pending
                .unreported_of(&jid)
                .iter()
                .filter_map(|slot| {
                    let (_, kept) = stored.iter().find(|(minion, _)| *minion == slot.minion)?;
                    (*kept != slot.state && kept.is_final()).then(|| (slot.minion.clone(), *kept))
                })
                .collect();
            for (minion, kept) in differing {
                let ret = match self.store.returns_of(&jid, std::slice::from_ref(&minion)).await {
                    Ok(mut returns) => returns.pop().map(|(_, ret)| ret),
                    Err(error) => {
                        warn!(%error, %jid, "could not read a return another master stored");
                        self.cluster.lost_track();
                        return false;
                    }
                };
                info!(%jid, %minion, kept = kept.as_str(), "another master recorded this slot first; following the store");
                self.jobs.correct_final(&jid, &minion, kept);
                self.pending.follow_stored(&jid, &minion, kept, ret);
            }
        }
        true
    }

    /// Minions whose returns were turned away while the store was in doubt send them again
    /// from their outbox when they reconnect: asked (their session closed) once it is not.
    fn ask_owed_returns(&mut self) {
        if self.store_in_doubt() {
            return;
        }
        for id in self.pending.take_owed_once_written() {
            if let Some(peer) = self.sessions.peer_of(&id) {
                info!(minion = %id, "the store answers again; asking the minion to send its returns again");
                self.forget(peer, Some("returns could not be stored; send them again"));
            }
        }
    }

    /// Whether the store may not hold what this master would decide now: its last write of job
    /// states failed, or the store was found not answering and has not been reread since.
    pub(crate) fn store_in_doubt(&self) -> bool {
        self.pending.write_failed()
            || self.cluster.needs_resync()
            || self.cluster.missed_interruptions(self.store.interruptions())
    }

    /// With other masters on the store: after any gap in what this master heard, it rereads the
    /// store every 100 ms until that succeeds (so its views converge within 100 ms of the
    /// store answering again); and every few seconds it compares the jobs it holds with the
    /// store's live ones.
    async fn follow_the_store(&mut self, now: Instant) {
        if !self.cluster.is_shared() {
            return;
        }
        self.cluster.note_interruptions(self.store.interruptions());
        if self.cluster.needs_resync() {
            if let Err(error) = self.resync().await {
                if self.notices.ready("store:resync", Duration::from_secs(10), now) {
                    warn!(%error, "rereading the store failed; trying again every 100 ms");
                }
            }
            return;
        }
        if self.cluster.sweep_due(now) {
            // Slots this master ended are written first: a job it finished must not look live.
            self.flush().await;
            self.sweep_jobs();
            // What the sweep finds is taken before any deadline here is judged.
            self.answer_asks().await;
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

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// Waits for the store's reachability to change; never, for a store that does not report it.
async fn reachability_changed(watch: &mut Option<tokio::sync::watch::Receiver<bool>>) -> Option<()> {
    match watch {
        Some(watch) => match watch.changed().await {
            Ok(()) => Some(()),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// The gateway's next request (none while its queue is not held: a master under test).
async fn next_local(locals: &mut Option<mpsc::Receiver<LocalCommand>>) -> Option<LocalCommand> {
    match locals {
        Some(locals) => locals.recv().await,
        None => std::future::pending().await,
    }
}

async fn next_hangup(hangups: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match hangups {
        Some(hangups) => hangups.recv().await,
        None => std::future::pending().await,
    }
}

/// The slots of a job loaded from the store (at start, or published by another master): a
/// waiting slot gets what is left of its TTL (counted from `wall`, never more than the TTL), a
/// sent or running one a full timeout from now, so its minion has time to reconnect and
/// deliver its outbox.
pub(crate) fn loaded_slots(
    record: &crate::store::JobRecord,
    states: Vec<(String, MinionJobState)>,
    now: Instant,
    wall: u64,
    grace: Duration,
) -> std::collections::BTreeMap<String, Slot> {
    let ttl_left = (record.created_at_ms + record.ttl_ms).saturating_sub(wall).min(record.ttl_ms);
    let ttl_left = Duration::from_millis(ttl_left);
    let run_deadline = crate::core::jobs::run_deadline(record.timeout_ms, now, grace);
    states
        .into_iter()
        .map(|(minion, state)| {
            let deadline = match state {
                MinionJobState::Waiting => Some(now + ttl_left),
                MinionJobState::Sent | MinionJobState::Running => run_deadline,
                _ => None,
            };
            (minion, Slot { state, deadline })
        })
        .collect()
}
