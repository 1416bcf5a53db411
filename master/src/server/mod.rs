//! The master's loop, in two parts. [`Core`] (`halite-master-core`'s `machine/`) holds every connection's session,
//! the registry and the live jobs, and never awaits, reads a clock or touches a store or a
//! socket. [`Master`] holds the core with what it does not do (the network, the store, the
//! clock, the queues inputs arrive on) and is the only code that awaits. Everything that wakes
//! it is an [`Input`]; [`Master::step`] hands one to the core, then runs the step's [`Stage`]s
//! in order (what the step decided heard by the concerns that listen, rollouts and groups let
//! act on it), then writes what it changed ([`Master::flush`]).
//!
//! A single owner keeps the invariants simple (a minion has at most one live session; a job
//! slot changes state in one place) and needs no locks. Job state changes are group-committed,
//! one transaction per step (every store call is a round trip to SQLite's thread, and a fan-out
//! brings thousands of returns at once). A handler that needs another store call asks for it
//! (`outputs/asks.rs`) and the loop answers it right after the handler or stage
//! ([`Master::answer_asks`]), handing the answer to the core before anything else happens: no
//! handler awaits (checked by `scripts/check-architecture.sh`). A return is acknowledged to
//! the minion only after its step is stored, and requests see every change made before them.
//!
//! The loop reads the clock and hands the time to the core before each piece of work and after
//! each store call ([`Master::observe`]); the core sends through its [`crate::net::Outlet`],
//! which never waits. So the tests in `sim/` run it in-process, in simulated time.
//!
//! The driver's files, one duty each: this one (start-up, `serve`, the step, its network input
//! and its stages), `answers.rs` (asks answered by their store calls, the gateway's commands),
//! `writes.rs` (the group commit, then acknowledgements and announcements), `timers.rs`',
//! `audit.rs`' and `resync.rs`' store calls. The core's are listed in `machine/mod.rs` of
//! `halite-master-core`.

mod answers;
mod audit;
mod resync;
// The simulation drives the loop from inside: the master's fields are the loop's alone, and
// the tests look at them.
#[cfg(test)]
#[path = "../sim/mod.rs"]
pub(crate) mod sim;
mod timers;
mod writes;

use std::sync::Arc;
use std::time::Instant;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::noise::LocalIdentity;
use halite_transport::{Router, RouterEvent};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::config::MasterConfig;
use crate::gateway::local::LocalCommand;
use crate::metrics::Kind;
use crate::net::Net;
use crate::relay_requests::RelayDone;
use crate::store::trust::Trust;
use crate::store::{Store, StoreError};
use crate::store_calls::reads;

pub(crate) use halite_master_core::machine::{Answer, Core, Output, Stage};

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

/// The master's loop: its `Core` (every owner, no I/O) and what the core does not do: the
/// network, the store, the clock, the queues inputs arrive on. The only code that awaits.
pub struct Master<S: Store, N: Net = Router> {
    core: Core,
    net: N,
    store: S,
    /// The only time source: read by the loop and handed to the core ([`Master::observe`]).
    clock: Arc<dyn Clock>,
    /// Where finished deployment signal relays come back.
    relay_tx: mpsc::UnboundedSender<RelayDone>,
    relay_rx: Option<mpsc::UnboundedReceiver<RelayDone>>,
    /// Where finished file reads come back.
    file_tx: mpsc::UnboundedSender<crate::files::FileServed>,
    file_rx: Option<mpsc::UnboundedReceiver<crate::files::FileServed>>,
    /// Where in-process clients (the gateway) send their commands.
    local_tx: mpsc::Sender<LocalCommand>,
    local_rx: Option<mpsc::Receiver<LocalCommand>>,
    /// When the loop planned to wake next (waking much later means the master was paused).
    wake_at: Option<Instant>,
}

impl<S: Store, N: Net> Master<S, N> {
    /// The key minions pin, in hex: the cluster key when this master is certified by one, else
    /// its own.
    pub fn pinned_key_hex(&self) -> String {
        let key = match self.core.identity().certificate() {
            Some(certificate) => certificate.cluster,
            None => self.core.identity().public(),
        };
        halite_protocol::hex::encode(key.as_bytes())
    }

    /// The figures this master keeps (shared: the metrics endpoints read them).
    pub fn metrics(&self) -> crate::metrics::Metrics {
        self.core.metrics().clone()
    }

    /// Where in-process clients send commands (see [`crate::gateway`]).
    pub(crate) fn local_commands(&self) -> mpsc::Sender<LocalCommand> {
        self.local_tx.clone()
    }

    /// Reads the clock and the store's interruptions and hands them to the core: called before
    /// each piece of work and after each store call, so the core decides as of the time it
    /// works at and never reads a clock itself.
    pub(crate) fn observe(&mut self) {
        let now = self.clock.read();
        self.core.observe(now, self.store.interruptions());
    }

    /// Counts a store call on the core's path that began at `started` (`/metrics`).
    pub(crate) fn count_call(&self, operation: &'static str, started: Instant, ok: bool) {
        let took = self.clock.now().saturating_duration_since(started);
        self.core.metrics().store_call(operation, took, ok);
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
        let outlet = Box::new(net.outlet());
        let metrics = crate::metrics::Metrics::new(Clock::now(&crate::clock::SystemClock));
        let core = Core::new(config, identity, root, outlet, clock.read(), metrics);
        let mut master = Master {
            core,
            net,
            store,
            clock,
            relay_tx,
            relay_rx: Some(relay_rx),
            file_tx,
            file_rx: Some(file_rx),
            local_tx,
            local_rx: Some(local_rx),
            wake_at: None,
        };
        master.observe();
        master.wake_at = master.core.next_timeout();
        master.trust_store().await?;
        let head = master.store.audit_head(&master.core.config().id).await?;
        master.observe();
        master.core.audit_starts_after(head);
        master.core.audit_policy("master_started");
        master.reload_principals().await?;
        master.reload_accepted().await?;
        let minions = master.store.minions().await?;
        master.core.load_minions(minions);
        if let Some(jid) = master.store.last_jid().await? {
            master.core.jids_resume_after(&jid);
        }
        let mark = master.store.wall_mark().await?.unwrap_or(0);
        let unfinished = master.store.unfinished_jobs().await?;
        master.observe();
        master.core.load_jobs(unfinished, mark);
        let open = master.store.open_deployments().await?;
        master.observe();
        master.core.with_deploy_desk(|desk| desk.resume_deployments(open));
        // What the deployments announced is heard before the groups listen again.
        master.core.hear_events();
        let open = master.store.open_groups().await?;
        master.observe();
        master.core.with_groups(|groups| groups.resume_groups(open));
        Ok(master)
    }

    /// Refuses a store whose tenants overlap (see [`crate::tenants`]).
    pub(crate) fn check_tenants(&self) -> Result<(), crate::tenants::StoredTenantsError> {
        crate::tenants::check(self.core.registry().principals())
    }

    pub(crate) async fn reload_principals(&mut self) -> Result<(), StoreError> {
        let principals = self.store.principals().await?;
        self.core.set_principals(principals);
        Ok(())
    }

    /// Rereads every accepted key.
    pub(crate) async fn reload_accepted(&mut self) -> Result<(), StoreError> {
        let keys = reads::accepted_keys(&self.store, None).await?;
        self.observe();
        self.core.take_accepted(keys);
        Ok(())
    }

    /// Gives the store this master's keys: the rows it writes are signed with its key, and the
    /// rows and announcements it reads are taken only from masters it trusts (`halite_store::trust`);
    /// refusals are counted in `halite_denials_total` (`cluster_announcement`, `store_row`).
    /// The revocations were checked against the cluster key when the master started, or when
    /// SIGHUP reread them.
    pub(crate) async fn trust_store(&self) -> Result<(), StoreError> {
        let config = &self.core.config();
        let revoked = config.revoked_keys().collect();
        // One counter at a time: the family's guard must be gone before the next is made.
        let denials = &self.core.metrics().get().denials;
        let announcements = denials.get_or_create(&Kind { kind: "cluster_announcement" }).clone();
        let rows = denials.get_or_create(&Kind { kind: "store_row" }).clone();
        let key = halite_protocol::identity::IdentityKey::from_seed(self.core.identity().key().seed());
        let certificate = self.core.identity().certificate().cloned();
        let trust = Trust::new(key, certificate, &config.id, revoked)
            .counting(announcements, rows)
            .ready_at(config.cluster.advertise_ready.clone());
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
            self.observe();
            self.core.share_the_store();
            self.send_announcements().await;
        }
        // A store that stops or starts answering wakes the loop (what it holds may be in doubt).
        let mut reachability = self.store.reachability();
        let mut hangups = match &self.core.config().path {
            Some(_) => tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok(),
            None => None,
        };
        let mut handovers =
            crate::handover::spawn(&self.core.config().cluster, self.store.reachability(), self.store.peers_ready());
        self.observe();
        self.wake_at = self.core.plan_wake(false);
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
        self.core.audit_now();
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
        self.observe();
        let tick = matches!(input, Input::Tick);
        match input {
            Input::Net(event) => {
                self.on_router_event(event).await;
                // Whatever else has arrived is handled in the same step, so one transaction
                // records a burst of returns.
                self.drain_net(BATCH - 1).await;
            }
            Input::Local(command) => self.answer_local(command).await,
            Input::Relay(done) => self.core.with_deploy_desk(|desk| desk.relay_finished(done)),
            Input::Reload => {
                // Rows and announcements a master revoked now signs are refused from now on, not
                // only after a restart (the store takes the new trust even if it does not answer).
                if let Some(before) = self.core.reread_rules(crate::cluster_identity::check_revocations_of) {
                    self.revocations_changed(&before).await;
                }
            }
            Input::File(served) => self.core.file_served(served),
            Input::Cluster(heard) => {
                if self.core.on_cluster_input(heard) {
                    if let Err(error) = self.resync().await {
                        // Not lost: everything is reread once the store answers (`on_tick`).
                        self.core.cluster_read_failed(&error);
                    }
                }
            }
            Input::HandOver => self.core.hand_over(),
            Input::Tick => {
                // How late the wake came is measured before anything is done: the time spent
                // below is the master running, not paused.
                let reachable = self.store.reachability().map(|reachable| *reachable.borrow());
                self.core.woken(self.wake_at, reachable);
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
        // The listeners hear what the step decided, stage by stage (`Stage`); what each stage
        // asked of the store is answered before the next begins.
        self.answer_asks().await;
        for stage in Stage::ALL {
            self.core.run_stage(stage, tick);
            if stage.answered_after() {
                self.answer_asks().await;
            }
        }
        self.core.metrics().alive(Clock::now(&crate::clock::SystemClock));
        // Every stage had its asks answered; none is ever left for a later input.
        self.answer_asks().await;
        self.flush().await;
        self.observe();
        self.wake_at = self.core.plan_wake(tick);
        self.start_outputs();
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
        self.observe();
        self.core.on_network(event);
        self.answer_asks().await;
        self.core.tell_moves();
    }

    /// Starts what the core asked to be done outside it: signal relays and file reads, whose
    /// ends come back as inputs.
    pub(crate) fn start_outputs(&mut self) {
        for output in self.core.take_outputs() {
            match output {
                Output::StartRelay { hosts, request } => crate::relay::spawn(hosts, *request, self.relay_tx.clone()),
                Output::ReadFile(read) => crate::files::start(read, self.file_tx.clone()),
            }
        }
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
        self.observe();
        self.core.revocations_changed(before);
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
