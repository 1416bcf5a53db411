//! The minion's connection loop: the one place its inputs are waited for and its effects
//! carried out. Every decision (handshake, freshness, run-once, queueing, returns, back-off)
//! is [`MinionCore`]'s; this loop owns the I/O around it: the transport's `Dealer`, the
//! executor's tasks, the functions' channels, reloads, the system clock, and the writer task
//! that keeps a slow connection from stalling the loop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_modules::{Context, Dispatcher, FileRequest, OutgoingEvent, PeerRequest};
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::JobReturn;
use halite_protocol::noise::LocalIdentity;
use halite_transport::{Dealer, DealerConfig, DealerEvent, DealerSender};
use tokio::sync::{mpsc, oneshot};
use tracing::info;

use crate::core::{Effect, Input, MinionCore, Settings};
use crate::executor::execute;
use crate::outbox::Outbox;

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

/// What the loop drives: the core, and the I/O its effects reach.
struct Daemon {
    core: MinionCore,
    masters: Vec<String>,
    context: Context,
    dealer: Option<Dealer>,
    /// Connection number, for [`Dealer::send_on`].
    epoch: u64,
    /// How to stop each running job.
    running: HashMap<String, oneshot::Sender<()>>,
    done_tx: mpsc::Sender<JobReturn>,
    /// Messages for the master, written by their own task ([`write_out`]): this loop, the
    /// only reader of the connection's events, never waits on a full send queue.
    outgoing: mpsc::UnboundedSender<Outgoing>,
    /// Bytes waiting in `outgoing`; past [`OUTGOING_LIMIT`] the loop stops taking new messages
    /// from the master until the writer catches up (explicit backpressure, never a deadlock).
    outgoing_bytes: Arc<AtomicUsize>,
}

/// The daemon's clock: tokio's, so that timers and the core's deadlines agree.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Runs the connection loop until `shutdown` completes.
pub(crate) async fn serve(mut setup: Setup, shutdown: impl std::future::Future<Output = ()>) {
    // Functions that choose by the minion's id (`plan.apply`'s top file) learn it here, once.
    setup.context.minion = setup.id.clone();
    let (done_tx, mut done_rx) = mpsc::channel(1024);
    let (outgoing, outgoing_rx) = mpsc::unbounded_channel();
    let outgoing_bytes = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn(write_out(outgoing_rx, outgoing_bytes.clone()));
    let settings = Settings {
        id: setup.id,
        masters: setup.masters.len(),
        identity: setup.identity,
        master_key: setup.master_key,
        pin_path: setup.pin_path,
        token: setup.token,
        dispatcher: setup.dispatcher,
        grains: setup.context.grains.clone(),
        outbox: setup.outbox,
        max_concurrent_jobs: setup.max_concurrent_jobs,
        verified: setup.verified,
        metrics: setup.metrics,
    };
    let (mut events, mut peer_requests, mut file_requests, mut reloads) =
        (setup.events, setup.peer_requests, setup.file_requests, setup.reloads);
    let _state_lock = setup._state_lock;
    let mut daemon = Daemon {
        core: MinionCore::new(settings, now()),
        masters: setup.masters,
        context: setup.context,
        dealer: None,
        epoch: 0,
        running: HashMap::new(),
        done_tx,
        outgoing,
        outgoing_bytes,
    };
    let effects = daemon.core.start();
    daemon.apply(effects).await;
    tokio::pin!(shutdown);
    loop {
        let timeout = daemon.core.next_timeout();
        let reading = daemon.outgoing_bytes.load(Ordering::Acquire) < OUTGOING_LIMIT;
        let input = tokio::select! {
            event = next_event(&mut daemon.dealer), if reading => daemon.link_input(event),
            () = tokio::time::sleep(Duration::from_millis(10)), if !reading => continue,
            Some(ret) = done_rx.recv() => {
                daemon.running.remove(&ret.jid);
                Input::JobFinished(ret)
            }
            Some(event) = events.recv() => Input::Event(event),
            Some(request) = peer_requests.recv() => Input::Publish(request),
            Some(request) = file_requests.recv() => Input::File(request),
            Some(dispatcher) = next_reload(&mut reloads) => Input::Reloaded(dispatcher),
            () = sleep_until(timeout), if timeout.is_some() => Input::Timer,
            () = &mut shutdown => break,
        };
        let effects = daemon.core.handle(input, now());
        daemon.apply(effects).await;
    }
    let effects = daemon.core.handle(Input::Shutdown, now());
    daemon.apply(effects).await;
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

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at.into()).await;
    }
}

impl Daemon {
    /// The core's input for what the link reports; a new connection gets a new number.
    fn link_input(&mut self, event: Option<DealerEvent>) -> Input {
        match event {
            None => Input::LinkGone,
            Some(DealerEvent::Connected(_)) => {
                self.epoch += 1;
                Input::Connected
            }
            Some(DealerEvent::Message(parts)) => Input::Message(parts),
            Some(DealerEvent::Disconnected(reason)) => Input::Disconnected(reason),
        }
    }

    /// Carries out the core's effects, in order.
    async fn apply(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Connect => {
                    info!(masters = %self.masters.join(", "), id = %self.context.minion, "connecting");
                    let config = DealerConfig { reconnect_max: Duration::from_secs(10), ..DealerConfig::default() };
                    self.dealer = Some(Dealer::connect_any(self.masters.clone(), config));
                    self.epoch = 0;
                }
                Effect::DropLink => self.dealer = None,
                Effect::MoveOn(reason) => {
                    if let Some(dealer) = &self.dealer {
                        let _ = dealer.move_on(&reason).await;
                    }
                }
                Effect::MarkAuthenticated => {
                    if let Some(dealer) = &self.dealer {
                        let _ = dealer.mark_authenticated().await;
                    }
                }
                Effect::Send(parts) => self.send(parts),
                Effect::Run(job) => {
                    let (stop_tx, stop_rx) = oneshot::channel();
                    self.running.insert(job.jid.clone(), stop_tx);
                    let (dispatcher, context, done) =
                        (self.core.dispatcher().clone(), self.context.clone(), self.done_tx.clone());
                    tokio::spawn(async move {
                        let ret = execute(dispatcher, context, job, stop_rx).await;
                        let _ = done.send(ret).await;
                    });
                }
                Effect::Cancel(jid) => {
                    if let Some(stop) = self.running.remove(&jid) {
                        let _ = stop.send(());
                    }
                }
            }
        }
    }

    /// Queues a message for the writer task; never waits.
    fn send(&self, parts: Vec<Vec<u8>>) {
        if let Some(dealer) = &self.dealer {
            let size = parts.iter().map(Vec::len).sum::<usize>();
            self.outgoing_bytes.fetch_add(size, Ordering::AcqRel);
            let message = Outgoing { to: dealer.sender(), epoch: self.epoch, parts };
            if self.outgoing.send(message).is_err() {
                self.outgoing_bytes.fetch_sub(size, Ordering::AcqRel);
            }
        }
    }
}
