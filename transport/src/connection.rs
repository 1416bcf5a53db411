//! Drives one ZMTP [`Connection`] over one TCP stream until it closes.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use halite_protocol::zmtp::{Connection, Event, PeerInfo};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::admission::Slot;
use crate::budget::{message_bytes, InboundBudget};
use crate::outbound::{write_until_full, Outbound};
use crate::peers::{CloseReason, Lane};

/// Size of the per-thread read buffer. Shared by every connection a runtime thread drives, so
/// 10,000 idle peers cost no read buffers at all.
const READ_BUFFER: usize = 64 * 1024;

/// Bytes of queued messages gathered into one write at most.
const WRITE_BATCH: usize = 64 * 1024;

thread_local! {
    static READ_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_BUFFER]);
}

/// Instructions from the socket owner to one connection task.
#[derive(Debug)]
pub(crate) enum Control {
    /// Send one multipart message; with an epoch, only on that connection (see
    /// `Dealer::send_on`), otherwise on whichever connection is up.
    Send(Vec<Vec<u8>>, Option<u64>),
    /// The layer above authenticated the peer: switch to post-authentication limits and free
    /// the pre-authentication admission slot.
    Authenticated,
    /// Close, telling the peer why.
    Close(String),
}

/// Messages a connection not yet admitted sends on the priority lane: its handshake's.
const PRE_AUTH_PRIORITY: u32 = 8;

/// A connection's standing, set by the socket's owner at once (not through the control queue,
/// which the connection task may read after the peer's next bytes) and read by the connection's
/// task before it reads: its lane, for every message it reports, and whether the peer is
/// authenticated, so a request the peer sends as soon as it has its verdict is held to the
/// post-authentication limits even if the task has not yet seen the control queue.
#[derive(Debug)]
pub(crate) struct Standing(std::sync::atomic::AtomicU8);

const BULK: u8 = 1;
const AUTHENTICATED: u8 = 2;

impl Standing {
    /// A cell starting on `lane`, not authenticated.
    pub(crate) fn new(lane: Lane) -> Standing {
        Standing(std::sync::atomic::AtomicU8::new(if lane == Lane::Bulk { BULK } else { 0 }))
    }

    /// The lane now.
    pub(crate) fn lane(&self) -> Lane {
        match self.0.load(std::sync::atomic::Ordering::Acquire) & BULK {
            0 => Lane::Priority,
            _ => Lane::Bulk,
        }
    }

    /// Moves to `lane` if that is bulk; nothing goes back from bulk to priority.
    pub(crate) fn move_to(&self, lane: Lane) {
        if lane == Lane::Bulk {
            self.0.fetch_or(BULK, std::sync::atomic::Ordering::AcqRel);
        }
    }

    /// The owner authenticated the peer: from now on the post-authentication limits apply.
    pub(crate) fn authenticate(&self) {
        self.0.fetch_or(AUTHENTICATED, std::sync::atomic::Ordering::AcqRel);
    }

    /// Whether the owner authenticated the peer.
    pub(crate) fn is_authenticated(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) & AUTHENTICATED != 0
    }
}

/// The queues a connection task reports to: the bulk lane, and the priority lane where its
/// owner has one (a [`crate::Router`]; a dealer has one peer and no lanes).
#[derive(Debug)]
pub(crate) struct Lanes<T> {
    pub(crate) bulk: mpsc::Sender<T>,
    pub(crate) priority: Option<mpsc::Sender<T>>,
}

impl<T> Lanes<T> {
    /// The sender of `lane` (the bulk one where there is no priority lane).
    pub(crate) fn sender(&self, lane: Lane) -> &mpsc::Sender<T> {
        match (lane, &self.priority) {
            (Lane::Priority, Some(priority)) => priority,
            _ => &self.bulk,
        }
    }
}

/// What a connection task reports upward.
#[derive(Debug)]
pub(crate) enum Up {
    Ready(PeerInfo),
    Message(Vec<Vec<u8>>),
}

/// Connection task settings.
pub(crate) struct DriveOptions {
    pub(crate) write_timeout: Duration,
    /// Which connection of its socket this is (1 for the first that completes the handshake).
    pub(crate) epoch: u64,
    /// Bytes of received messages not yet taken by the socket's owner, shared by its
    /// connections (the router's), one budget per lane (bulk, priority), so a bulk backlog never
    /// holds a priority message at the door; `None` bounds by message count only.
    pub(crate) inbound: Option<(InboundBudget, InboundBudget)>,
    /// The lane this connection reports on (see [`Lane`]).
    pub(crate) standing: Arc<Standing>,
    /// A router connection's outgoing bytes, written by the socket's owner as it sends (see
    /// [`Outbound`]); `None` for a dealer's, whose messages come through `control`.
    pub(crate) outbound: Option<Arc<Outbound>>,
}

/// Runs `conn` over `stream` until it closes. Returns why, and whether the handshake completed.
///
/// Backpressure: a dealer's messages are taken from `control` only once the previous ones have
/// been written (those already queued together, up to [`WRITE_BATCH`] bytes, go in one write);
/// a router's are written by its owner as it sends them, and what the socket did not take is
/// bounded by [`Outbound`]. Reading stops while `up` is full or the inbound byte budget is
/// spent, so neither direction buffers more than a bounded batch.
pub(crate) async fn drive<T>(
    stream: TcpStream,
    conn: Connection,
    control: &mut mpsc::Receiver<Control>,
    up: &Lanes<T>,
    wrap: impl Fn(Up) -> T,
    slot: Option<Slot>,
    options: &DriveOptions,
) -> (CloseReason, bool) {
    let ended = drive_stream(Arc::new(stream), conn, control, up, wrap, slot, options).await;
    if let Some(outbound) = &options.outbound {
        outbound.end();
    }
    ended
}

async fn drive_stream<T>(
    stream: Arc<TcpStream>,
    mut conn: Connection,
    control: &mut mpsc::Receiver<Control>,
    up: &Lanes<T>,
    wrap: impl Fn(Up) -> T,
    mut slot: Option<Slot>,
    options: &DriveOptions,
) -> (CloseReason, bool) {
    let mut was_ready = false;
    // Messages reported on the priority lane before the owner admitted the peer.
    let mut unadmitted_on_priority = 0u32;
    let mut ending: Option<CloseReason> = None;
    // The shared outgoing buffer, once the connection is ready and the owner writes through it.
    let mut opened: Option<&Outbound> = None;
    loop {
        while let Some(bytes) = conn.poll_transmit() {
            match opened {
                // Behind whatever the owner's messages left.
                Some(outbound) => outbound.send_raw(&bytes),
                None => {
                    if let Err(reason) = within(options.write_timeout, write_all(&stream, &bytes)).await {
                        return (ending.unwrap_or(reason), was_ready);
                    }
                }
            }
        }
        if let Some(outbound) = opened.filter(|o| o.has_leftover()) {
            if let Err(reason) = within(options.write_timeout, outbound.finish(&stream)).await {
                return (ending.unwrap_or(reason), was_ready);
            }
        }
        if let Some(reason) = ending {
            return (reason, was_ready);
        }
        while let Some(event) = conn.poll_event() {
            // Read once: the message is charged to and sent on the same lane (the router gives
            // its bytes back to the budget of the lane it came from).
            let mut lane = options.standing.lane();
            let message = match event {
                Event::Ready(info) => {
                    was_ready = true;
                    if let Some(outbound) = &options.outbound {
                        // The handshake's last bytes first; then the owner's messages go
                        // straight to the socket.
                        while let Some(bytes) = conn.poll_transmit() {
                            outbound.send_raw(&bytes);
                        }
                        outbound.open(stream.clone());
                        opened = Some(outbound);
                    }
                    Up::Ready(info)
                }
                Event::Message(parts) => {
                    if slot.is_some() && lane == Lane::Priority {
                        unadmitted_on_priority += 1;
                        if unadmitted_on_priority > PRE_AUTH_PRIORITY {
                            options.standing.move_to(Lane::Bulk);
                            lane = Lane::Bulk;
                        }
                    }
                    if let Some((bulk, priority)) = &options.inbound {
                        let inbound = if lane == Lane::Priority { priority } else { bulk };
                        inbound.take(inbound.charge(message_bytes(&parts))).await;
                    }
                    Up::Message(parts)
                }
                Event::HeartbeatDue => continue,
                Event::TimedOut(kind) => {
                    ending = Some(CloseReason::TimedOut(kind));
                    break;
                }
                Event::Closed(error) => {
                    ending = Some(CloseReason::Protocol(error));
                    break;
                }
            };
            if up.sender(lane).send(wrap(message)).await.is_err() {
                conn.close("socket closed");
                ending = Some(CloseReason::Local("socket closed".into()));
                break;
            }
        }
        if ending.is_some() {
            continue;
        }
        let deadline = conn.poll_timeout();
        let ready = conn.is_ready();
        tokio::select! {
            readable = stream.readable() => {
                if let Err(e) = readable {
                    return (CloseReason::Io(e.to_string()), was_ready);
                }
                let read = READ_BUF.with(|buf| {
                    let mut buf = buf.borrow_mut();
                    let n = stream.try_read(&mut buf)?;
                    if options.standing.is_authenticated() {
                        authenticate(&mut conn, &mut slot);
                    }
                    conn.handle_input(&buf[..n], std::time::Instant::now());
                    Ok::<usize, io::Error>(n)
                });
                match read {
                    Ok(0) => return (CloseReason::Eof, was_ready),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return (CloseReason::Io(e.to_string()), was_ready),
                }
            }
            () = wait_leftover(opened) => {}
            command = control.recv(), if ready => {
                // Messages queued together leave in one write: the peer reads them with one
                // wake-up instead of one each (a minion's job acknowledgement and its return).
                // Bounded, so one write holds one batch.
                let mut command = command;
                let mut batch = 0;
                loop {
                    match apply(&mut conn, &mut slot, options, command) {
                        Ok(bytes) => batch += bytes,
                        Err(reason) => {
                            ending = Some(reason);
                            break;
                        }
                    }
                    if batch >= WRITE_BATCH {
                        break;
                    }
                    match control.try_recv() {
                        Ok(next) => command = Some(next),
                        Err(_) => break,
                    }
                }
            }
            () = sleep_until(deadline), if deadline.is_some() => conn.handle_timeout(std::time::Instant::now()),
        }
    }
}

/// Carries out one instruction from the socket owner (`None`: the owner is gone): the bytes of
/// the message it queued for sending, or why the connection now closes.
fn apply(
    conn: &mut Connection,
    slot: &mut Option<Slot>,
    options: &DriveOptions,
    command: Option<Control>,
) -> Result<usize, CloseReason> {
    match command {
        Some(Control::Send(parts, epoch)) => {
            let size = message_bytes(&parts);
            if epoch.is_none_or(|e| e == options.epoch) {
                // Only fails once closed, which ends the drive loop first.
                let _ = conn.send(&parts);
            }
            Ok(size)
        }
        Some(Control::Authenticated) => {
            authenticate(conn, slot);
            Ok(0)
        }
        Some(Control::Close(reason)) => {
            conn.close(&reason);
            Err(CloseReason::Local(reason))
        }
        None => {
            conn.close("socket closed");
            Err(CloseReason::Local("socket closed".into()))
        }
    }
}

/// Resolves when the owner left bytes for this task to finish (never without a shared buffer).
async fn wait_leftover(outbound: Option<&Outbound>) {
    match outbound {
        Some(outbound) => outbound.leftover().await,
        None => std::future::pending().await,
    }
}

/// Writes all of `bytes`, waiting for the socket as needed.
async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    loop {
        let (written, result) = write_until_full(stream, bytes);
        result?;
        bytes = &bytes[written..];
        if bytes.is_empty() {
            return Ok(());
        }
        stream.writable().await?;
    }
}

/// A write that must end within `limit`: why the connection ends if it does not.
async fn within(limit: Duration, write: impl std::future::Future<Output = io::Result<()>>) -> Result<(), CloseReason> {
    match tokio::time::timeout(limit, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(CloseReason::Io(e.to_string())),
        Err(_) => Err(CloseReason::WriteStalled),
    }
}

async fn sleep_until(deadline: Option<std::time::Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(Instant::from_std(deadline)).await;
    }
}

/// Post-authentication limits from now on, and the pre-authentication admission slot freed.
fn authenticate(conn: &mut Connection, slot: &mut Option<Slot>) {
    conn.set_authenticated();
    drop(slot.take());
}
