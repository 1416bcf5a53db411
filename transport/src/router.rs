//! ROUTER: accept many peers, receive messages tagged with their peer, send to a named peer.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use halite_protocol::zmtp::{Connection, Heartbeat, Limits, SocketType};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::admission::{Admission, Slot};
use crate::budget::{message_bytes, InboundBudget};
use crate::connection::{drive, Control, DriveOptions, Lanes, Standing, Up};
use crate::outbound::Outbound;
use crate::peers::{Lane, PeerId, RouterEvent, SendError};

/// Router settings. The defaults suit a master exposed to untrusted networks.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// ZMTP limits for every connection.
    pub limits: Limits,
    /// Heartbeats, if any.
    pub heartbeat: Option<Heartbeat>,
    /// Instructions for a peer's connection task (authenticated, close) queued at most.
    pub send_queue: usize,
    /// Bytes waiting for a peer whose socket is full, at most: past it [`Router::send`] returns
    /// [`SendError::Full`] (an empty queue still takes one message of any size).
    pub send_queue_bytes: usize,
    /// Events buffered for [`Router::recv`] before connections stop reading.
    pub event_queue: usize,
    /// Bytes of received messages buffered for [`Router::recv`], over all connections, before
    /// connections stop reading: what peers can make the router hold is bounded in bytes, not
    /// only in messages.
    pub event_queue_bytes: usize,
    /// Unauthenticated connections allowed at once, in total.
    pub max_pending_total: usize,
    /// Unauthenticated connections allowed at once from one IP address.
    pub max_pending_per_ip: usize,
    /// A peer that does not read for this long is disconnected.
    pub write_timeout: Duration,
    /// Connections held at once, at most: past it a new one is closed as soon as it is
    /// accepted. An owner sets it below its descriptor limit, so that its own files (a
    /// database's) still open when every descriptor a peer may take is taken.
    pub max_connections: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            limits: Limits::default(),
            heartbeat: Some(Heartbeat::default()),
            // Bounded, but deep enough for event bursts to subscribers; tokio's channel
            // allocates slots only as they fill, so idle peers cost nothing.
            send_queue: 1024,
            send_queue_bytes: 32 * 1024 * 1024,
            event_queue: 4096,
            event_queue_bytes: 256 * 1024 * 1024,
            max_pending_total: 4096,
            max_pending_per_ip: 256,
            write_timeout: Duration::from_secs(10),
            max_connections: usize::MAX,
        }
    }
}

/// What the router keeps of one connection: its control queue and that queue's bytes.
#[derive(Debug)]
struct PeerHandle {
    control: mpsc::Sender<Control>,
    outbound: Arc<Outbound>,
    standing: Arc<Standing>,
}

type Peers = Arc<Mutex<HashMap<PeerId, PeerHandle>>>;

/// Priority events taken in a row before a waiting bulk one goes (see [`Lane`]).
const PRIORITY_RUN: usize = 64;

/// A listening ROUTER socket. Dropping it stops accepting and closes every connection.
#[derive(Debug)]
pub struct Router {
    local_addr: SocketAddr,
    /// What peers on the priority lane sent (see [`Lane`]): read before `events`.
    priority: mpsc::Receiver<RouterEvent>,
    /// What peers moved to the bulk lane sent, and every disconnection.
    events: mpsc::Receiver<RouterEvent>,
    /// Priority events taken in a row while bulk ones waited (see [`PRIORITY_RUN`]).
    priority_run: usize,
    /// The byte budgets of received messages: the bulk lane's, then the priority lane's.
    inbound: (InboundBudget, InboundBudget),
    sender: RouterSender,
    accept_task: JoinHandle<()>,
}

/// The sending side of a [`Router`]: what its owner may do to its connections without waiting
/// (send, hold and release, authenticate, close). Cloned, it reaches the same connections, so a
/// core that decides can hold one while the router's owner reads events.
#[derive(Debug, Clone)]
pub struct RouterSender {
    peers: Peers,
    send_queue_bytes: usize,
    /// Buffers holding messages until [`RouterSender::release_held`], in the order they were held.
    held: Arc<Mutex<Vec<Arc<Outbound>>>>,
}

impl Drop for Router {
    fn drop(&mut self) {
        self.accept_task.abort();
        // Dropping the control senders makes every connection task close.
        self.sender.peers.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

impl Router {
    /// Binds and starts accepting.
    pub async fn bind(addr: impl ToSocketAddrs, config: RouterConfig) -> io::Result<Router> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (events_tx, events) = mpsc::channel(config.event_queue);
        let (priority_tx, priority) = mpsc::channel(config.event_queue);
        let lanes = Arc::new(Lanes { bulk: events_tx, priority: Some(priority_tx) });
        let peers: Peers = Arc::default();
        // The priority lane has a budget of its own (a quarter more), so a bulk backlog that
        // fills the bulk one never keeps a priority message waiting at the door.
        let inbound =
            (InboundBudget::new(config.event_queue_bytes), InboundBudget::new((config.event_queue_bytes / 4).max(1)));
        let send_queue_bytes = config.send_queue_bytes;
        let accept_task = tokio::spawn(accept_loop(listener, config, lanes, peers.clone(), inbound.clone()));
        Ok(Router {
            local_addr,
            priority,
            events,
            priority_run: 0,
            inbound,
            sender: RouterSender { peers, send_queue_bytes, held: Arc::default() },
            accept_task,
        })
    }

    /// The address actually bound (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The next event, the priority lane's first (but see [`PRIORITY_RUN`]); `None` only if the
    /// accept loop died.
    pub async fn recv(&mut self) -> Option<RouterEvent> {
        if let Some(event) = self.try_recv() {
            return Some(event);
        }
        let (event, lane) = tokio::select! {
            biased;
            Some(event) = self.priority.recv() => (Some(event), Lane::Priority),
            event = self.events.recv() => (event, Lane::Bulk),
        };
        self.taken(event, lane)
    }

    /// The next event if one is ready, without waiting (to handle bursts in one batch), the
    /// priority lane's first, except that after [`PRIORITY_RUN`] of them in a row a waiting bulk
    /// event goes: a peer that keeps the priority lane full never starves the others.
    pub fn try_recv(&mut self) -> Option<RouterEvent> {
        if self.priority_run >= PRIORITY_RUN {
            if let Ok(event) = self.events.try_recv() {
                return self.taken(Some(event), Lane::Bulk);
            }
        }
        match self.priority.try_recv() {
            Ok(event) => self.taken(Some(event), Lane::Priority),
            Err(_) => {
                let event = self.events.try_recv().ok();
                self.taken(event, Lane::Bulk)
            }
        }
    }

    /// A message leaving the queue gives its bytes back to the inbound budget; the run of
    /// priority events is counted.
    fn taken(&mut self, event: Option<RouterEvent>, lane: Lane) -> Option<RouterEvent> {
        match (&event, lane) {
            (None, _) => return None,
            (Some(_), Lane::Priority) => self.priority_run += 1,
            (Some(_), Lane::Bulk) => self.priority_run = 0,
        }
        if let Some(RouterEvent::Message { parts, .. }) = &event {
            let inbound = if lane == Lane::Priority { &self.inbound.1 } else { &self.inbound.0 };
            inbound.give_back(inbound.charge(message_bytes(parts)));
        }
        event
    }

    /// Its sending side (see [`RouterSender`]).
    pub fn sender(&self) -> RouterSender {
        self.sender.clone()
    }

    /// [`RouterSender::send`].
    pub fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.sender.send(peer, parts)
    }

    /// [`RouterSender::send_held`].
    pub fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.sender.send_held(peer, parts)
    }

    /// [`RouterSender::release_held`].
    pub fn release_held(&self) {
        self.sender.release_held();
    }

    /// [`RouterSender::mark_authenticated`].
    pub fn mark_authenticated(&self, peer: PeerId, lane: Lane) -> Result<(), SendError> {
        self.sender.mark_authenticated(peer, lane)
    }

    /// [`RouterSender::disconnect`].
    pub fn disconnect(&self, peer: PeerId, reason: &str) {
        self.sender.disconnect(peer, reason);
    }

    /// Number of connections (authenticated or not).
    pub fn connection_count(&self) -> usize {
        self.sender.connection_count()
    }
}

impl RouterSender {
    /// Sends a message to a peer without waiting: written to its socket at once, on this
    /// thread, as far as the socket takes it; the rest is finished by the connection's task.
    /// [`SendError::Full`] when more than `send_queue_bytes` already wait for a peer that does
    /// not read.
    pub fn send(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.outbound(peer)?.send(&parts, self.send_queue_bytes)
    }

    /// Like [`RouterSender::send`], but the message waits for [`RouterSender::release_held`], so a peer
    /// sent several small messages gets them in one write, woken once. Past a few KiB held for
    /// one peer, its messages are written at once.
    pub fn send_held(&self, peer: PeerId, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        let outbound = self.outbound(peer)?;
        if outbound.send_held(&parts, self.send_queue_bytes)? {
            self.held.lock().unwrap_or_else(PoisonError::into_inner).push(outbound);
        }
        Ok(())
    }

    /// Writes every message [`Router::send_held`] holds, peer by peer in the order they were
    /// first held.
    pub fn release_held(&self) {
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(PoisonError::into_inner));
        for outbound in held {
            outbound.release();
        }
    }

    fn outbound(&self, peer: PeerId) -> Result<Arc<Outbound>, SendError> {
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(peers.get(&peer).ok_or(SendError::NotConnected)?.outbound.clone())
    }

    /// Tells the connection its peer is authenticated (see [`Limits`]), and which lane its
    /// messages take from now on (see [`Lane`]: a bulk peer never comes back to priority).
    pub fn mark_authenticated(&self, peer: PeerId, lane: Lane) -> Result<(), SendError> {
        self.set_standing(peer, lane);
        // Also through the queue: the connection frees its admission slot without waiting
        // for the peer's next bytes.
        self.control(peer, Control::Authenticated)
    }

    /// The peer's lane and authentication, at once: whatever it sends once it has a verdict
    /// sent next goes on this lane and is held to the post-authentication limits, even if its
    /// connection's task reads those bytes before it reads the control queue.
    fn set_standing(&self, peer: PeerId, lane: Lane) {
        if let Some(handle) = self.peers.lock().unwrap_or_else(PoisonError::into_inner).get(&peer) {
            handle.standing.move_to(lane);
            handle.standing.authenticate();
        }
    }

    /// Closes a peer's connection, sending it a ZMTP ERROR with `reason`.
    pub fn disconnect(&self, peer: PeerId, reason: &str) {
        let handle = self.peers.lock().unwrap_or_else(PoisonError::into_inner).remove(&peer);
        if let Some(handle) = handle {
            // If the queue is full the sender is dropped instead, which closes the connection too.
            let _ = handle.control.try_send(Control::Close(reason.to_owned()));
        }
    }

    /// Number of connections (authenticated or not).
    pub fn connection_count(&self) -> usize {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn control(&self, peer: PeerId, control: Control) -> Result<(), SendError> {
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let handle = peers.get(&peer).ok_or(SendError::NotConnected)?;
        handle.control.try_send(control).map_err(map_send_error)
    }
}

fn map_send_error(error: mpsc::error::TrySendError<Control>) -> SendError {
    match error {
        mpsc::error::TrySendError::Full(_) => SendError::Full,
        mpsc::error::TrySendError::Closed(_) => SendError::NotConnected,
    }
}

/// Connections refused for one reason, logged at most once a second with how many the line
/// stands for: a storm of refusals (a fleet reconnecting at once) is not a storm of log lines.
struct Refusals {
    why: &'static str,
    said_at: Option<std::time::Instant>,
    unsaid: u64,
}

impl Refusals {
    fn new(why: &'static str) -> Refusals {
        Refusals { why, said_at: None, unsaid: 0 }
    }

    fn refused(&mut self, addr: SocketAddr, limit: usize) {
        self.unsaid += 1;
        let now = std::time::Instant::now();
        if self.said_at.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            tracing::warn!(%addr, limit, refused = self.unsaid, "{}", self.why);
            self.said_at = Some(now);
            self.unsaid = 0;
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    config: RouterConfig,
    lanes: Arc<Lanes<RouterEvent>>,
    peers: Peers,
    inbound: (InboundBudget, InboundBudget),
) {
    let admission = Admission::new(config.max_pending_total, config.max_pending_per_ip);
    let mut full = Refusals::new("as many connections as allowed (max_connections) are open; refusing");
    let mut unauthenticated = Refusals::new("too many unauthenticated connections; refusing");
    let next_id = AtomicU64::new(1);
    let live = Arc::new(AtomicUsize::new(0));
    let config = Arc::new(config);
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Typically EMFILE: back off instead of spinning.
                tracing::warn!(%error, "accept failed; pausing for 100 ms");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Counted until each connection's socket is closed, not until the owner forgets it: a
        // connection told to close may take its write timeout to go, holding its descriptor.
        if live.load(Ordering::Relaxed) >= config.max_connections {
            full.refused(addr, config.max_connections);
            drop(stream);
            continue;
        }
        let Some(slot) = admission.admit(addr.ip()) else {
            unauthenticated.refused(addr, config.max_pending_total);
            drop(stream);
            continue;
        };
        let peer = PeerId(next_id.fetch_add(1, Ordering::Relaxed));
        let (control_tx, control_rx) = mpsc::channel(config.send_queue);
        let outbound = Arc::new(Outbound::default());
        let standing = Arc::new(Standing::new(Lane::Priority));
        let options = DriveOptions {
            write_timeout: config.write_timeout,
            epoch: 1,
            inbound: Some(inbound.clone()),
            outbound: Some(outbound.clone()),
            standing: standing.clone(),
        };
        let handle = PeerHandle { control: control_tx, outbound, standing };
        peers.lock().unwrap_or_else(PoisonError::into_inner).insert(peer, handle);
        let open = Open::counted(&live);
        tokio::spawn(serve(
            open,
            stream,
            addr,
            peer,
            slot,
            control_rx,
            lanes.clone(),
            peers.clone(),
            config.clone(),
            options,
        ));
    }
}

/// One connection counted as open; dropped (uncounted) once its socket is closed.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn counted(live: &Arc<AtomicUsize>) -> Open {
        live.fetch_add(1, Ordering::Relaxed);
        Open(live.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    open: Open,
    stream: TcpStream,
    addr: SocketAddr,
    peer: PeerId,
    slot: Slot,
    mut control: mpsc::Receiver<Control>,
    lanes: Arc<Lanes<RouterEvent>>,
    peers: Peers,
    config: Arc<RouterConfig>,
    options: DriveOptions,
) {
    let _ = stream.set_nodelay(true);
    let conn = Connection::new(
        SocketType::Router,
        Vec::new(),
        config.limits.clone(),
        config.heartbeat.clone(),
        std::time::Instant::now(),
    );
    let wrap = |up| match up {
        Up::Ready(info) => RouterEvent::Connected { peer, addr, info },
        Up::Message(parts) => RouterEvent::Message { peer, parts },
    };
    let (reason, was_ready) = drive(stream, conn, &mut control, &lanes, wrap, Some(slot), &options).await;
    let lane = options.standing.lane();
    // The socket is closed (`drive` owned it): its descriptor is free again.
    drop(open);
    peers.lock().unwrap_or_else(PoisonError::into_inner).remove(&peer);
    tracing::debug!(%addr, peer = peer.0, %reason, "connection closed");
    if was_ready {
        // On the lane the peer's last messages took, so it is read after them.
        let _ = lanes.sender(lane).send(RouterEvent::Disconnected { peer, reason }).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;
    use crate::{Dealer, DealerConfig, DealerEvent};

    async fn next(router: &mut Router) -> RouterEvent {
        timeout(Duration::from_secs(5), router.recv()).await.expect("an event in time").expect("the router runs")
    }

    /// The master admits a client and sends its verdict; the client sends a request larger
    /// than the pre-authentication limit as soon as the verdict arrives. The connection's task
    /// may read that request before it reads the admission from its control queue (both are
    /// ready when it wakes): the request must still be taken. Here the control queue is never
    /// told, which is the case where the task reads the request first, made certain.
    #[tokio::test]
    async fn a_request_read_before_the_admission_in_the_queue_is_held_to_the_admitted_limits() {
        let mut router = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
        let mut client = Dealer::connect(router.local_addr().to_string(), DealerConfig::default());
        let peer = match next(&mut router).await {
            RouterEvent::Connected { peer, .. } => peer,
            other => panic!("{other:?}"),
        };
        router.sender.set_standing(peer, Lane::Priority);
        router.send(peer, vec![b"welcome".to_vec()]).unwrap();
        loop {
            match timeout(Duration::from_secs(5), client.recv()).await.expect("the verdict in time").unwrap() {
                DealerEvent::Message(_) => break,
                DealerEvent::Connected(_) => continue,
                other => panic!("{other:?}"),
            }
        }
        let request = vec![7u8; 64 * 1024];
        assert!(request.len() as u64 > halite_protocol::zmtp::Limits::default().max_message_size_pre_auth);
        client.send(vec![request.clone()]).await.unwrap();
        match next(&mut router).await {
            RouterEvent::Message { parts, .. } => assert_eq!(parts, vec![request]),
            other => panic!("the request was refused: {other:?}"),
        }
    }
}
