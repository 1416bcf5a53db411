//! DEALER: one outgoing connection, re-established with backoff whenever it drops.

use std::sync::Arc;
use std::time::Duration;

use halite_protocol::zmtp::{Connection, Heartbeat, Limits, PeerInfo, SocketType, ZmtpError};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::connection::{drive, Control, DriveOptions, Lanes, Standing, Up};
use crate::peers::{CloseReason, Lane, SendError};

/// Dealer settings.
#[derive(Debug, Clone)]
pub struct DealerConfig {
    /// Routing id announced in READY (`Identity`); empty lets the router choose.
    pub identity: Vec<u8>,
    /// ZMTP limits.
    pub limits: Limits,
    /// Heartbeats, if any.
    pub heartbeat: Option<Heartbeat>,
    /// Messages queued (across reconnects) before [`Dealer::try_send`] reports `Full`.
    pub send_queue: usize,
    /// Events buffered for [`Dealer::recv`].
    pub event_queue: usize,
    /// First reconnect delay.
    pub reconnect_initial: Duration,
    /// Longest reconnect delay.
    pub reconnect_max: Duration,
    /// Give up a TCP connect attempt after this long.
    pub connect_timeout: Duration,
    /// A peer that does not read for this long is disconnected.
    pub write_timeout: Duration,
}

impl Default for DealerConfig {
    fn default() -> Self {
        DealerConfig {
            identity: Vec::new(),
            limits: Limits::default(),
            // A PING every 5 s, answered within 3 s: a master whose process stopped answering,
            // or a link silenced past a proxy (the kernel still answers, so keepalive sees
            // nothing), is left within 8 s. A master with 100,000 minions answers 20,000 a second.
            heartbeat: Some(Heartbeat {
                interval: Duration::from_secs(5),
                timeout: Duration::from_secs(3),
                ..Heartbeat::default()
            }),
            send_queue: 128,
            event_queue: 1024,
            reconnect_initial: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Something that happened on the dealer's connection.
#[derive(Debug)]
pub enum DealerEvent {
    /// Connected and handshaken (again, after a reconnect).
    Connected(PeerInfo),
    /// A message from the router.
    Message(Vec<Vec<u8>>),
    /// The connection dropped; a reconnect is scheduled.
    Disconnected(CloseReason),
}

/// A connecting DEALER socket. Messages sent while disconnected wait in the send queue and go
/// out after the next handshake; a message already handed to a connection that then dies is
/// lost, as in ZeroMQ, so reliability belongs to the layer above (acknowledgements).
#[derive(Debug)]
pub struct Dealer {
    control: mpsc::Sender<Control>,
    events: mpsc::Receiver<DealerEvent>,
    task: JoinHandle<()>,
}

/// A handle for queueing messages on a [`Dealer`] from another task, so the task that reads
/// its events never has to wait on a full send queue.
#[derive(Debug, Clone)]
pub struct DealerSender {
    control: mpsc::Sender<Control>,
}

impl DealerSender {
    /// [`Dealer::send_on`], from wherever the handle went.
    pub async fn send_on(&self, epoch: u64, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.control.send(Control::Send(parts, Some(epoch))).await.map_err(|_| SendError::NotConnected)
    }
}

impl Drop for Dealer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Dealer {
    /// Starts connecting to `addr` (host:port) in the background.
    pub fn connect(addr: String, config: DealerConfig) -> Dealer {
        Dealer::connect_any(vec![addr], config)
    }

    /// Like [`Dealer::connect`], with several peers that serve alike (a cluster's masters): it
    /// connects to the first, and whenever a connection fails it tries the next, going round
    /// the list; the backoff grows only when a whole round failed. A session the peer itself
    /// closed is opened again with that peer first (a live master closing a session does not
    /// send its minions elsewhere); one this side closed ([`Dealer::move_on`]) or whose link
    /// failed (silent, stalled, broken) goes on to the next.
    pub fn connect_any(addrs: Vec<String>, config: DealerConfig) -> Dealer {
        let (control, control_rx) = mpsc::channel(config.send_queue);
        let (events_tx, events) = mpsc::channel(config.event_queue);
        let task = tokio::spawn(run(addrs, config, control_rx, events_tx));
        Dealer { control, events, task }
    }

    /// A handle to queue messages from another task.
    pub fn sender(&self) -> DealerSender {
        DealerSender { control: self.control.clone() }
    }

    /// Queues a message, waiting while the queue is full. It goes out on whichever connection is
    /// up when its turn comes, as in ZeroMQ.
    pub async fn send(&self, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.control.send(Control::Send(parts, None)).await.map_err(|_| SendError::NotConnected)
    }

    /// Queues a message for connection number `epoch` only (the count of
    /// [`DealerEvent::Connected`] events seen so far): if that connection is gone by the time
    /// the message's turn comes, it is dropped. Session-bound messages (sealed with keys of one
    /// connection's handshake) must use this, or a reconnect would deliver them to a peer that
    /// expects a new handshake.
    pub async fn send_on(&self, epoch: u64, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.control.send(Control::Send(parts, Some(epoch))).await.map_err(|_| SendError::NotConnected)
    }

    /// Queues a message without waiting.
    pub fn try_send(&self, parts: Vec<Vec<u8>>) -> Result<(), SendError> {
        self.control.try_send(Control::Send(parts, None)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => SendError::Full,
            mpsc::error::TrySendError::Closed(_) => SendError::NotConnected,
        })
    }

    /// Closes the current connection and goes on to the next peer of the list (this one would
    /// not do: a refused handshake, a revoked master).
    pub async fn move_on(&self, reason: &str) -> Result<(), SendError> {
        self.control.send(Control::Close(reason.to_owned())).await.map_err(|_| SendError::NotConnected)
    }

    /// Switches the current connection to post-authentication limits.
    pub async fn mark_authenticated(&self) -> Result<(), SendError> {
        self.control.send(Control::Authenticated).await.map_err(|_| SendError::NotConnected)
    }

    /// The next event.
    pub async fn recv(&mut self) -> Option<DealerEvent> {
        self.events.recv().await
    }
}

async fn run(
    addrs: Vec<String>,
    config: DealerConfig,
    mut control: mpsc::Receiver<Control>,
    events: mpsc::Sender<DealerEvent>,
) {
    // One peer, one queue: a dealer has no lanes to choose between.
    let lanes = Lanes { bulk: events, priority: None };
    let events = &lanes.bulk;
    let mut backoff = Backoff::new(config.reconnect_initial, config.reconnect_max);
    let mut epoch = 0u64;
    let mut failure: Option<String> = None;
    let mut next = 0usize;
    // Attempts since the last connection that came up: a full round of failures backs off.
    let mut failed_in_round = 0usize;
    loop {
        let Some(addr) = addrs.get(next % addrs.len().max(1)).cloned() else { return };
        next = next.wrapping_add(1);
        match tokio::time::timeout(config.connect_timeout, TcpStream::connect(&addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                crate::link_watch::watch_link(&stream);
                let conn = Connection::new(
                    SocketType::Dealer,
                    config.identity.clone(),
                    config.limits.clone(),
                    config.heartbeat.clone(),
                    std::time::Instant::now(),
                );
                let wrap = |up| match up {
                    Up::Ready(info) => DealerEvent::Connected(info),
                    Up::Message(parts) => DealerEvent::Message(parts),
                };
                let options = DriveOptions {
                    write_timeout: config.write_timeout,
                    epoch: epoch + 1,
                    inbound: None,
                    outbound: None,
                    standing: Arc::new(Standing::new(Lane::Bulk)),
                };
                let (reason, was_ready) = drive(stream, conn, &mut control, &lanes, wrap, None, &options).await;
                tracing::debug!(%addr, %reason, "connection closed; reconnecting");
                if was_ready && stays_with_peer(&reason) {
                    next = next.wrapping_sub(1);
                }
                if was_ready {
                    epoch += 1;
                    backoff.reset();
                    failed_in_round = 0;
                    if events.send(DealerEvent::Disconnected(reason)).await.is_err() {
                        return;
                    }
                } else {
                    failed_in_round += 1;
                }
            }
            Ok(Err(error)) => {
                failure = Some(error.to_string());
                failed_in_round += 1;
            }
            Err(_) => {
                failure = Some("timed out".into());
                failed_in_round += 1;
            }
        }
        if events.is_closed() {
            return;
        }
        // Another peer is tried at once after one failed; the delay grows only once every peer
        // of the list has failed in a row.
        let delay = if failed_in_round > 0 && failed_in_round % addrs.len() != 0 {
            config.reconnect_initial
        } else {
            backoff.next_delay()
        };
        if let Some(error) = failure.take() {
            // At warn: a minion that cannot reach its master must say so, not go quiet.
            tracing::warn!(%addr, %error, retry_in = ?delay, "cannot connect; retrying");
        }
        tokio::time::sleep(delay).await;
    }
}

/// Whether a connection that was up and ended this way is opened again with the same peer
/// first: the peer closed it (it answered, so it is live), rather than this side moving on,
/// the link failing, or the peer saying to go elsewhere
/// ([`halite_protocol::noise::GO_ELSEWHERE_REASON`]).
fn stays_with_peer(reason: &CloseReason) -> bool {
    match reason {
        CloseReason::Protocol(ZmtpError::PeerError(why)) => why != halite_protocol::noise::GO_ELSEWHERE_REASON,
        CloseReason::Eof | CloseReason::Protocol(_) => true,
        _ => false,
    }
}
