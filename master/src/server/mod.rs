//! The master's loop: one task that owns every connection's session, the registry and the
//! live jobs. Everything that wakes it is an [`Input`]; [`Master::step`] handles one, hands
//! what it decided (slots that ended, events published) to the concerns that listen
//! (`hearing.rs`: metrics, rollouts, deployments, deployment groups), lets rollouts and
//! groups act on it, then writes what it changed ([`Master::flush`]).
//!
//! A single owner keeps the invariants simple (a minion has at most one live session; a job
//! slot changes state in one place) and needs no locks. Job state changes are group-committed,
//! one transaction per step (every store call is a round trip to SQLite's thread, and a fan-out
//! brings thousands of returns at once). A handler that needs another store call asks for it
//! (`outputs/asks.rs`) and the loop answers it right after the handler ([`Master::answer_asks`]):
//! no handler awaits (checked by `scripts/check-architecture.sh`). A return is acknowledged to
//! the minion only after its step is stored, and requests see every change made before them.
//!
//! The loop's files, one duty each: this one (start-up, `serve`, the step's order),
//! `answers.rs` (inputs, clients' messages included, handed to their handlers; asks answered),
//! `hearing.rs` (what the step decided, handed to its listeners), `sending.rs` (events and
//! sealed messages out), `writes.rs` (the group commit, then acknowledgements and
//! announcements), `effects.rs` (what owners decided, carried out), `rollouts.rs` (the rollouts
//! let act at the end of the step), `timers.rs` (`next_timeout` and what comes due),
//! `resync.rs` (the reread after a gap in what the other masters announced).
//!
//! The core reads time only from its [`Clock`] and talks to connections only through its
//! [`Net`], so the tests in `sim/` run it in-process, in simulated time.

mod answers;
mod audit;
mod connections;
mod desks;
mod effects;
pub(crate) mod hearing;
mod resync;
mod rollouts;
mod sending;
// The simulation drives the loop from inside: the master's fields are the loop's alone, and
// the tests look at them.
#[cfg(test)]
#[path = "../sim/mod.rs"]
pub(crate) mod sim;
mod timers;
mod writes;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{Message, Welcome};
use halite_protocol::noise::LocalIdentity;
use halite_transport::{PeerId, Router, RouterEvent};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::acl::NoticeThrottle;
use crate::authz::Access;
use crate::clock::{Clock, JidGenerator};
use crate::config::MasterConfig;
use crate::core::bus::Bus;
use crate::core::event_gate::EventGate;
use crate::core::jobs::{loaded_slots, JobTable, LiveJob};
use crate::core::registry::AcceptedKeys;
use crate::core::registry::{MinionEntry, Registry};
use crate::core::sessions::Sessions;
use crate::core::slot_moves::SlotMoves;
use crate::core::timers::Timer;
use crate::core::watchers::Watchers;
use crate::core::writes::PendingWrites;
use crate::gateway::local::LocalCommand;
use crate::keys::PendingLimits;
use crate::limits;
use crate::metrics::Kind;
use crate::net::Net;
use crate::outputs::asks::Asks;
use crate::relay::RelayDone;
use crate::store::trust::Trust;
use crate::store::{Heard, Store, StoreError};
use crate::store_calls::reads;

/// How soon what failed, or could not be done yet, is tried again (a write the store refused, a
/// job that did not fit a send queue, a store to reread).
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(100);
/// Router events handled in one step before state changes are written (group commit).
const BATCH: usize = 512;

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
    /// The store has been unreachable here while another master is ready: hand a batch of
    /// minions over (`crate::handover`).
    HandOver,
}

/// The master's state; see the module docs. Its fields are the loop's (private to `server/`):
/// a handler reaches them only through the desk the loop lends it (`desks.rs`).
pub struct Master<S: Store, N: Net = Router> {
    config: MasterConfig,
    identity: LocalIdentity,
    root: PublicIdentity,
    net: N,
    store: S,
    /// The only time source.
    clock: Arc<dyn Clock>,
    /// Every connection and its session; which minions are online.
    sessions: Sessions,
    /// Accepted keys, minions, principals.
    registry: Registry,
    jobs: JobTable,
    jids: JidGenerator,
    bus: Bus,
    /// The bus's recent past, for subscribers resuming after an event id.
    event_log: crate::core::event_log::EventLog,
    /// Which minion and engine events reach the bus (rules, rates, refusals counted).
    event_gate: EventGate,
    notices: NoticeThrottle,
    /// The pending-key cap and arrival rate.
    pending_limits: PendingLimits,
    /// Unknown keys turned away by those limits since start.
    keys_refused: u64,
    /// Jobs whose message did not fit a minion's send queue, by minion, in jid order: sent
    /// again as the queue drains ([`Master::send_backlogs`]).
    undelivered: HashMap<String, BTreeSet<String>>,
    /// Minions handed over to the other masters while the store is unreachable here
    /// ([`Master::hand_over`]): one that comes back has nowhere else to go, and stays.
    handed_over: std::collections::HashSet<String>,
    /// The other masters sharing the store, and the minions connected to them.
    cluster: crate::core::cluster_view::ClusterView,
    /// Decided, not yet stored: written together at the end of each step ([`Master::flush`]).
    pending: PendingWrites,
    /// Store calls handlers asked for, answered by the loop ([`Master::answer_asks`]).
    asks: Asks,
    /// Slot ends and events the step's listeners have not heard yet (`hearing.rs`).
    hearing: crate::core::hearing::Hearing,
    /// Rollouts the end of the step decides or stops.
    rollout_queue: crate::core::rollout_queue::RolloutQueue,
    /// What each watching client is told at the end of the step.
    watchers: Watchers,
    /// Deployment groups this master drives.
    groups: crate::deploy::group_runs::GroupRuns,
    /// `deploy.apply` jobs in flight and the deployment each carries; job ends whose deployment
    /// is to be recorded again.
    deploy_jobs: crate::deploy::jobs::DeployJobs,
    /// Sends deployment signals to engines.
    relay_tx: mpsc::UnboundedSender<RelayDone>,
    relay_rx: Option<mpsc::UnboundedReceiver<RelayDone>>,
    /// Files served to minions (`[files]`), and where finished reads come back.
    files: crate::files::FileServer,
    file_tx: mpsc::UnboundedSender<crate::files::FileServed>,
    file_rx: Option<mpsc::UnboundedReceiver<crate::files::FileServed>>,
    /// What the master counts, for operators (`/metrics`).
    metrics: crate::metrics::Metrics,
    /// Where in-process clients (the gateway) send their commands.
    local_tx: mpsc::Sender<LocalCommand>,
    local_rx: Option<mpsc::Receiver<LocalCommand>>,
    /// The master's own periodic duties and retries.
    timers: crate::core::timers::TimerTable,
    /// When the loop planned to wake next (waking much later means the master was paused).
    wake_at: Option<Instant>,
    /// What the audit trail will hold, until the next commit appends it.
    audit: crate::core::audit_log::AuditLog,
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

    /// Where in-process clients send commands (see [`crate::gateway`]).
    pub(crate) fn local_commands(&self) -> mpsc::Sender<LocalCommand> {
        self.local_tx.clone()
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
            handed_over: Default::default(),
            cluster: crate::core::cluster_view::ClusterView::default(),
            watchers: Watchers::default(),
            deploy_jobs: Default::default(),
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
            audit: Default::default(),
        };
        // The first wake does every periodic duty once.
        let start = master.clock.now();
        for timer in [Timer::Gauges, Timer::WallMark, Timer::Purge] {
            master.timers.set(timer, start);
        }
        master.wake_at = master.next_timeout();
        master.trust_store().await?;
        let head = master.store.audit_head(&master.config.id).await?;
        master.audit.started_at(head);
        master.audit_policy("master_started");
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
        let open = master.store.open_deployments().await?;
        master.with_deploy_desk(|desk| desk.resume_deployments(open));
        // What the deployments announced is heard before the groups listen again.
        master.hear_events();
        let open = master.store.open_groups().await?;
        master.with_groups(|groups| groups.resume_groups(open));
        Ok(master)
    }

    /// Refuses a store whose tenants overlap (see [`crate::tenants`]).
    pub(crate) fn check_tenants(&self) -> Result<(), crate::tenants::StoredTenantsError> {
        crate::tenants::check(self.registry.principals())
    }

    pub(crate) async fn reload_principals(&mut self) -> Result<(), StoreError> {
        let principals = self.store.principals().await?;
        self.registry.set_principals(principals);
        Ok(())
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
        self.registry.take_accepted(keys);
        self.release_parked();
    }

    /// Gives the store this master's keys: the rows it writes are signed with its key, and the
    /// rows and announcements it reads are taken only from masters it trusts (`halite_store::trust`);
    /// refusals are counted in `halite_denials_total` (`cluster_announcement`, `store_row`).
    /// The revocations were checked against the cluster key when the master started, or when
    /// SIGHUP reread them.
    pub(crate) async fn trust_store(&self) -> Result<(), StoreError> {
        let revoked = self.config.revoked_keys().collect();
        // One counter at a time: the family's guard must be gone before the next is made.
        let denials = &self.metrics.get().denials;
        let announcements = denials.get_or_create(&Kind { kind: "cluster_announcement" }).clone();
        let rows = denials.get_or_create(&Kind { kind: "store_row" }).clone();
        let key = halite_protocol::identity::IdentityKey::from_seed(self.identity.key().seed());
        let certificate = self.identity.certificate().cloned();
        let trust = Trust::new(key, certificate, &self.config.id, revoked)
            .counting(announcements, rows)
            .ready_at(self.config.cluster.advertise_ready.clone());
        self.store.set_trust(trust, self.clock.wall_ms()).await?;
        Ok(())
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
        let mut handovers =
            crate::handover::spawn(&self.config.cluster, self.store.reachability(), self.store.peers_ready());
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
                Some(()) = next_handover(&mut handovers) => Input::HandOver,
                () = &mut shutdown => break,
            };
            self.step(input).await;
        }
        self.audit.force();
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
            Input::Relay(done) => self.with_deploy_desk(|desk| desk.relay_finished(done)),
            Input::Reload => {
                // Rows and announcements a master revoked now signs are refused from now on, not
                // only after a restart (the store takes the new trust even if it does not answer).
                let identity = &self.identity;
                let before = self
                    .config
                    .reread_rules(|revoked| crate::cluster_identity::check_revocations_of(revoked, identity));
                self.audit_policy("policy_reread");
                if let Some(before) = before {
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
                if self.with_cluster_desk(|desk| desk.on_cluster_change(&from, change)) {
                    if let Err(error) = self.resync().await {
                        // Not lost: everything is reread once the store answers (`on_tick`).
                        self.cluster_read_failed(&error);
                    }
                }
            }
            Input::HandOver => self.hand_over(),
            Input::Tick => {
                // How late the wake came is measured before anything is done: the time spent
                // below is the master running, not paused.
                self.notice_pause();
                if let Some(reachable) = self.store.reachability() {
                    self.metrics.store_reachable(*reachable.borrow());
                }
                if !self.handed_over.is_empty() && !self.store_in_doubt() {
                    self.handed_over.clear();
                }
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
        self.with_deploy_desk(|desk| desk.record_deployment_ends());
        self.answer_asks().await;
        self.hear_events();
        // The rollouts an event aborted stop (each stop stored first), and the targets they
        // skipped are heard, before any rollout is decided.
        self.stop_aborted_rollouts();
        self.answer_asks().await;
        self.hear_moves();
        self.with_deploy_desk(|desk| desk.record_deployment_ends());
        self.answer_asks().await;
        // Rollouts go on from what the step changed (and, woken by time, those whose wait ended).
        self.advance_rollouts(tick);
        self.answer_asks().await;
        // What the rollouts ended (skipped, offline targets) and announced: groups hear it before
        // they act; an abort it carries stops a rollout at the next step. The deployment jobs
        // the groups start are heard at the next step's end, as the deployments always heard them.
        self.hear_moves();
        self.with_deploy_desk(|desk| desk.record_deployment_ends());
        self.answer_asks().await;
        self.hear_events();
        self.with_groups(|groups| groups.advance_groups(tick));
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

/// The handover task's next word (none without one).
async fn next_handover(handovers: &mut Option<mpsc::Receiver<()>>) -> Option<()> {
    match handovers {
        Some(handovers) => handovers.recv().await,
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
