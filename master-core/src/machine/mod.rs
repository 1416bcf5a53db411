//! The master's state, apart from what does I/O: every owner, the queues the handlers fill,
//! and the time the driver last gave it. Nothing in [`Core`] awaits, reads a clock, or touches a
//! store or a socket: the driver (`halite-master`'s `server/`) holds those, runs the store calls
//! the core asks for and hands back their answers, and drains what it asked to be done outside
//! (relays, file reads). The core sends through its [`Outlet`], which never waits.
//!
//! Its files, one duty each: this one (the state), `state.rs` (what the driver may read of it),
//! `inputs.rs` (what is loaded, wakes, SIGHUP, other masters), `network.rs` (what connections
//! bring, handed to their handlers), `local.rs` (the gateway's sessions), `answered.rs` (store
//! answers handed to the handlers that asked), `going_live.rs` (a stored job joins the table and
//! is sent), `stages.rs` (the step's stages after its input), `hearing.rs` (what the step
//! decided, handed to its listeners), `sending.rs` (events and sealed messages out), `desks.rs`
//! (each handler's desk lent, and what it decided carried out), `rollouts.rs` (the rollouts let
//! act), `timers.rs` (`next_timeout` and what comes due), `writes.rs`, `audit.rs` and
//! `cluster_reads.rs` (what the driver's writes and reads hand back), `connections.rs` (the one
//! clean-up path of a peer).

mod answered;
mod audit;
pub mod cluster_reads;
mod connections;
mod desks;
mod going_live;
mod hearing;
mod inputs;
mod local;
mod network;
mod rollouts;
mod sending;
mod stages;
mod state;
mod timers;
pub mod writes;

pub use answered::Answer;
pub use stages::Stage;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::noise::LocalIdentity;

use crate::acl::NoticeThrottle;
use crate::clock::{JidGenerator, Now};
use crate::config::MasterConfig;
use crate::core::bus::Bus;
use crate::core::event_gate::EventGate;
use crate::core::jobs::JobTable;
use crate::core::registry::Registry;
use crate::core::sessions::Sessions;
use crate::core::timers::Timer;
use crate::core::watchers::Watchers;
use crate::core::writes::PendingWrites;
use crate::file_reads::FileRead;
use crate::keys::PendingLimits;
use crate::outlet::Outlet;
use crate::outputs::asks::Asks;
use crate::relay_requests::RelayRequest;

/// How soon what failed, or could not be done yet, is tried again (a write the store refused, a
/// job that did not fit a send queue, a store to reread).
pub const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// What the core asks the loop to do outside it, drained after each piece of work.
pub enum Output {
    /// Relay a deployment's signal to its engine (`crate::relay`); the end comes back as an
    /// input.
    StartRelay { hosts: crate::config::signal_hosts::SignalHosts, request: Box<RelayRequest> },
    /// Read a file for a minion (`crate::files`); the read comes back as an input.
    ReadFile(FileRead),
}

/// The master's state; see the module docs. Its fields are private to the core: a handler
/// reaches them only through the desk the core lends it (`desks.rs`), the driver through the
/// core's methods (what it may read of them: `state.rs`).
pub struct Core {
    config: MasterConfig,
    identity: LocalIdentity,
    root: PublicIdentity,
    /// The time as the loop last read it: the core's only time.
    now: Now,
    /// Where messages to connections go.
    outlet: Box<dyn Outlet>,
    /// How many times the store has said it was interrupted, as the loop last read it.
    store_interruptions: u64,
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
    /// again as the queue drains ([`Core::send_backlogs`]).
    undelivered: HashMap<String, BTreeSet<String>>,
    /// Minions handed over to the other masters while the store is unreachable here
    /// ([`Core::hand_over`]): one that comes back has nowhere else to go, and stays.
    handed_over: HashSet<String>,
    /// The other masters sharing the store, and the minions connected to them.
    cluster: crate::core::cluster_view::ClusterView,
    /// Decided, not yet stored: written together at the end of each step (`Master::flush`).
    pending: PendingWrites,
    /// Store calls handlers asked for, answered by the loop (`Master::answer_asks`).
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
    /// Files served to minions (`[files]`).
    files: crate::file_reads::FileServer,
    /// What the master counts, for operators (`/metrics`).
    metrics: crate::metrics::Metrics,
    /// The master's own periodic duties and retries.
    timers: crate::core::timers::TimerTable,
    /// What the audit trail will hold, until the next commit appends it.
    audit: crate::core::audit_log::AuditLog,
    /// What the loop is to do outside the core, oldest first.
    outputs: Vec<Output>,
}

impl Core {
    /// A master's state before anything is loaded, as of `now`.
    pub fn new(
        config: MasterConfig,
        identity: LocalIdentity,
        root: PublicIdentity,
        outlet: Box<dyn Outlet>,
        now: Now,
        metrics: crate::metrics::Metrics,
    ) -> Core {
        let event_log = crate::core::event_log::EventLog::new(now.wall_ms);
        let pending_limits =
            PendingLimits::new(config.max_pending_keys, config.pending_keys_per_sec, config.pending_keys_burst, now.at);
        let mut core = Core {
            config,
            identity,
            root,
            now,
            outlet,
            store_interruptions: 0,
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
            undelivered: HashMap::new(),
            handed_over: HashSet::new(),
            cluster: crate::core::cluster_view::ClusterView::default(),
            pending: PendingWrites::default(),
            asks: Asks::default(),
            hearing: Default::default(),
            rollout_queue: Default::default(),
            watchers: Watchers::default(),
            groups: Default::default(),
            deploy_jobs: Default::default(),
            files: Default::default(),
            metrics,
            timers: crate::core::timers::TimerTable::default(),
            audit: Default::default(),
            outputs: Vec::new(),
        };
        // The first wake does every periodic duty once.
        for timer in [Timer::Gauges, Timer::WallMark, Timer::Purge] {
            core.timers.set(timer, now.at);
        }
        core
    }

    /// The loop read the time and the store's interruptions: the core goes on as of them.
    pub fn observe(&mut self, now: Now, store_interruptions: u64) {
        self.now = now;
        self.store_interruptions = store_interruptions;
    }

    /// What the loop is to do outside the core, oldest first.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.outputs)
    }

    /// When the core must next wake, and after a wake for time, whatever is still due could
    /// not be done (a store that does not answer): it is tried again after
    /// [`RETRY_EVERY`], never in a busy loop.
    pub fn plan_wake(&self, woken_by_time: bool) -> Option<Instant> {
        let now = self.now.at;
        self.next_timeout().map(|at| if woken_by_time && at <= now { now + RETRY_EVERY } else { at })
    }
}
