//! The ZMTP connection state machine.
//!
//! Call order contract: after any `handle_*` or `send` call, drain [`Connection::poll_transmit`]
//! and [`Connection::poll_event`] until they return `None`, then sleep until
//! [`Connection::poll_timeout`] (or until input arrives) and call [`Connection::handle_timeout`].
//! Once an [`Event::Closed`] has been returned, flush the remaining transmit bytes (they may hold
//! an ERROR command for the peer) and drop the connection.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::command::{self, Command};
use super::frame::{self, Header, FLAG_MORE, MAX_HEADER_LEN};
use super::greeting::{self, GREETING_LEN};
use super::{Heartbeat, Limits, SocketType, ZmtpError};

/// Bytes of a frame body buffered up front; larger bodies grow as their bytes actually arrive,
/// so a header alone never reserves memory.
const INITIAL_BODY_CAPACITY: usize = 16 * 1024;

/// What the peer told us in its greeting and READY command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's socket type.
    pub socket_type: SocketType,
    /// The `Identity` property (a routing id requested by a DEALER), empty if absent.
    pub identity: Vec<u8>,
    /// ZMTP minor version in use: 0 (3.0) or 1 (3.1).
    pub minor_version: u8,
    /// Every READY property, in the order received.
    pub metadata: Vec<(String, Vec<u8>)>,
}

/// Which deadline expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    /// The greeting and READY did not arrive within `handshake_timeout`.
    Handshake,
    /// Nothing arrived within the heartbeat timeout after our PING.
    Heartbeat,
    /// Nothing arrived within the TTL the peer announced in its PING.
    PeerTtl,
}

/// Something the application must know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed; messages may flow.
    Ready(PeerInfo),
    /// A complete multipart message.
    Message(Vec<Vec<u8>>),
    /// A heartbeat was due and a PING has been queued for transmission.
    HeartbeatDue,
    /// A deadline expired; the connection is closed.
    TimedOut(TimeoutKind),
    /// The connection is closed because of this error.
    Closed(ZmtpError),
}

#[derive(Debug)]
enum Phase {
    Greeting,
    AwaitingReady,
    Ready,
    Closed,
}

#[derive(Debug)]
enum Decode {
    Greeting { buf: [u8; GREETING_LEN], have: usize },
    Header { buf: [u8; MAX_HEADER_LEN], have: usize },
    Body { header: Header, buf: Vec<u8> },
}

/// One ZMTP connection, either side. See the module docs for the call order.
#[derive(Debug)]
pub struct Connection {
    socket_type: SocketType,
    identity: Vec<u8>,
    limits: Limits,
    heartbeat: Option<Heartbeat>,
    authenticated: bool,
    phase: Phase,
    decode: Decode,
    minor_version: u8,
    /// Parts of the message being received and their total size.
    parts: Vec<Vec<u8>>,
    message_bytes: u64,
    transmit: Vec<u8>,
    events: VecDeque<Event>,
    handshake_deadline: Instant,
    next_ping: Option<Instant>,
    ping_deadline: Option<Instant>,
    peer_ttl: Option<Duration>,
    last_received: Instant,
}

impl Connection {
    /// Starts a connection; our greeting is queued for transmission immediately. ZMTP is
    /// symmetric, so the same constructor serves the connecting and the accepting side.
    pub fn new(
        socket_type: SocketType,
        identity: Vec<u8>,
        limits: Limits,
        heartbeat: Option<Heartbeat>,
        now: Instant,
    ) -> Self {
        let as_server = socket_type == SocketType::Router;
        let mut transmit = Vec::with_capacity(256);
        transmit.extend_from_slice(&greeting::encode(as_server));
        Connection {
            socket_type,
            identity,
            handshake_deadline: now + limits.handshake_timeout,
            limits,
            heartbeat,
            authenticated: false,
            phase: Phase::Greeting,
            decode: Decode::Greeting { buf: [0; GREETING_LEN], have: 0 },
            minor_version: 1,
            parts: Vec::new(),
            message_bytes: 0,
            transmit,
            events: VecDeque::new(),
            next_ping: None,
            ping_deadline: None,
            peer_ttl: None,
            last_received: now,
        }
    }

    /// Switches to the post-authentication message limits. Call once the session above this
    /// connection has authenticated the peer.
    pub fn set_authenticated(&mut self) {
        self.authenticated = true;
    }

    /// Whether the handshake completed and the connection is open.
    pub fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Ready)
    }

    /// Whether the connection is closed (after an error, a timeout or [`Connection::close`]).
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Bytes queued for transmission and not yet taken; lets the I/O loop apply backpressure.
    pub fn pending_transmit(&self) -> usize {
        self.transmit.len()
    }

    /// Takes every byte queued for transmission.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.transmit.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.transmit))
        }
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest instant at which [`Connection::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Closed => None,
            Phase::Greeting | Phase::AwaitingReady => Some(self.handshake_deadline),
            Phase::Ready => [self.next_ping, self.ping_deadline, self.peer_ttl.map(|ttl| self.last_received + ttl)]
                .into_iter()
                .flatten()
                .min(),
        }
    }

    /// Queues one multipart message. Only valid once [`Event::Ready`] has been returned.
    pub fn send<P: AsRef<[u8]>>(&mut self, parts: &[P]) -> Result<(), ZmtpError> {
        match self.phase {
            Phase::Ready => {}
            Phase::Closed => return Err(ZmtpError::Closed),
            Phase::Greeting | Phase::AwaitingReady => return Err(ZmtpError::NotReady),
        }
        if parts.is_empty() {
            return Err(ZmtpError::EmptyMessage);
        }
        encode_message(&mut self.transmit, parts);
        Ok(())
    }

    /// Closes the connection, telling the peer why with an ERROR command.
    pub fn close(&mut self, reason: &str) {
        if !self.is_closed() {
            command::encode_error(&mut self.transmit, reason);
            self.phase = Phase::Closed;
        }
    }

    /// Feeds bytes received from the peer. Bytes after a fatal error are ignored.
    pub fn handle_input(&mut self, mut data: &[u8], now: Instant) {
        if !data.is_empty() {
            self.last_received = now;
            // RFC 37: any traffic proves the peer alive, not only PONG.
            self.ping_deadline = None;
        }
        while !data.is_empty() && !self.is_closed() {
            match self.step(data, now) {
                Ok(used) => data = &data[used..],
                Err(error) => self.fail(error),
            }
        }
    }

    /// Fires expired deadlines: sends due PINGs and closes dead connections.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Closed => {}
            Phase::Greeting | Phase::AwaitingReady => {
                if now >= self.handshake_deadline {
                    self.time_out(TimeoutKind::Handshake);
                }
            }
            Phase::Ready => {
                if self.ping_deadline.is_some_and(|d| now >= d) {
                    return self.time_out(TimeoutKind::Heartbeat);
                }
                if self.peer_ttl.is_some_and(|ttl| now >= self.last_received + ttl) {
                    return self.time_out(TimeoutKind::PeerTtl);
                }
                if let (Some(due), Some(hb)) = (self.next_ping, &self.heartbeat) {
                    if now >= due {
                        let ttl_ds = u16::try_from(hb.ttl.as_millis() / 100).unwrap_or(u16::MAX);
                        command::encode_ping(&mut self.transmit, ttl_ds, &[]);
                        self.next_ping = Some(now + hb.interval);
                        self.ping_deadline.get_or_insert(now + hb.timeout);
                        self.events.push_back(Event::HeartbeatDue);
                    }
                }
            }
        }
    }

    fn time_out(&mut self, kind: TimeoutKind) {
        let reason = match kind {
            TimeoutKind::Handshake => "handshake timed out",
            TimeoutKind::Heartbeat | TimeoutKind::PeerTtl => "heartbeat timed out",
        };
        self.close(reason);
        self.events.push_back(Event::TimedOut(kind));
    }

    fn fail(&mut self, error: ZmtpError) {
        if matches!(error, ZmtpError::PeerError(_)) {
            self.phase = Phase::Closed;
        } else {
            self.close(&error.to_string());
        }
        self.parts = Vec::new();
        self.events.push_back(Event::Closed(error));
    }

    /// Consumes a prefix of `data`, returning how many bytes were used.
    fn step(&mut self, data: &[u8], now: Instant) -> Result<usize, ZmtpError> {
        match &mut self.decode {
            Decode::Greeting { buf, have } => {
                let n = (GREETING_LEN - *have).min(data.len());
                buf[*have..*have + n].copy_from_slice(&data[..n]);
                *have += n;
                greeting::check_prefix(&buf[..*have])?;
                if *have == GREETING_LEN {
                    let peer = greeting::decode(buf)?;
                    self.minor_version = peer.minor;
                    self.send_ready();
                    self.phase = Phase::AwaitingReady;
                    self.decode = Decode::Header { buf: [0; MAX_HEADER_LEN], have: 0 };
                }
                Ok(n)
            }
            Decode::Header { buf, have } => {
                if *have == 0 {
                    buf[0] = data[0];
                    *have = 1;
                    return Ok(1);
                }
                let total = frame::header_len(buf[0]);
                let n = (total - *have).min(data.len());
                buf[*have..*have + n].copy_from_slice(&data[..n]);
                *have += n;
                if *have == total {
                    let header = frame::decode_header(&buf[..total])?;
                    self.admit(&header)?;
                    let capacity = usize::try_from(header.size).unwrap_or(usize::MAX).min(INITIAL_BODY_CAPACITY);
                    self.decode = Decode::Body { header, buf: Vec::with_capacity(capacity) };
                    if header.size == 0 {
                        self.finish_frame(now)?;
                    }
                }
                Ok(n)
            }
            Decode::Body { header, buf } => {
                // `admit` bounded header.size by a usize-sized limit.
                let remaining = header.size as usize - buf.len();
                let n = remaining.min(data.len());
                buf.extend_from_slice(&data[..n]);
                if n == remaining {
                    self.finish_frame(now)?;
                }
                Ok(n)
            }
        }
    }

    /// Checks a frame header against the phase and every limit, before any body is buffered.
    fn admit(&self, header: &Header) -> Result<(), ZmtpError> {
        let limits = &self.limits;
        let (max_parts, max_message) = if self.authenticated {
            (limits.max_parts, limits.max_message_size)
        } else {
            (limits.max_parts_pre_auth, limits.max_message_size_pre_auth)
        };
        if header.command {
            let limit = limits.max_message_size_pre_auth.min(limits.max_frame_size);
            if header.size > limit {
                return Err(ZmtpError::FrameTooLarge { size: header.size, limit });
            }
            return Ok(());
        }
        if !self.is_ready() {
            return Err(ZmtpError::MessageBeforeReady);
        }
        if header.size > limits.max_frame_size || usize::try_from(header.size).is_err() {
            return Err(ZmtpError::FrameTooLarge { size: header.size, limit: limits.max_frame_size });
        }
        if self.parts.len() >= max_parts {
            return Err(ZmtpError::TooManyParts { limit: max_parts });
        }
        if self.message_bytes.saturating_add(header.size) > max_message {
            return Err(ZmtpError::MessageTooLarge { limit: max_message });
        }
        Ok(())
    }

    fn finish_frame(&mut self, now: Instant) -> Result<(), ZmtpError> {
        let decode = std::mem::replace(&mut self.decode, Decode::Header { buf: [0; MAX_HEADER_LEN], have: 0 });
        let Decode::Body { header, buf } = decode else {
            return Ok(());
        };
        if header.command {
            return self.handle_command(command::decode(&buf)?, now);
        }
        self.message_bytes += header.size;
        self.parts.push(buf);
        if !header.more {
            self.message_bytes = 0;
            let parts = std::mem::take(&mut self.parts);
            self.events.push_back(Event::Message(parts));
        }
        Ok(())
    }

    fn handle_command(&mut self, command: Command, now: Instant) -> Result<(), ZmtpError> {
        match (&self.phase, command) {
            (_, Command::Error(reason)) => Err(ZmtpError::PeerError(reason)),
            (Phase::AwaitingReady, Command::Ready(metadata)) => {
                let info = self.peer_info(metadata)?;
                self.phase = Phase::Ready;
                if let Some(hb) = &self.heartbeat {
                    if self.minor_version >= 1 {
                        self.next_ping = Some(now + hb.interval);
                    }
                }
                self.events.push_back(Event::Ready(info));
                Ok(())
            }
            (Phase::AwaitingReady, other) => {
                Err(ZmtpError::BadHandshake(format!("expected READY, got {}", name(&other))))
            }
            (Phase::Ready, Command::Ready(_)) => Err(ZmtpError::BadHandshake("READY after the handshake".into())),
            (Phase::Ready, Command::Ping { ttl_ds, context }) => {
                command::encode_pong(&mut self.transmit, &context);
                self.peer_ttl = (ttl_ds > 0).then(|| Duration::from_millis(u64::from(ttl_ds) * 100));
                Ok(())
            }
            // PONG's only job is to be traffic, which `handle_input` already counted; other
            // commands (SUBSCRIBE, CANCEL, future ones) mean nothing to ROUTER/DEALER.
            (Phase::Ready, Command::Pong(_) | Command::Other(_)) => Ok(()),
            (Phase::Greeting | Phase::Closed, _) => Ok(()),
        }
    }

    fn peer_info(&self, metadata: Vec<(String, Vec<u8>)>) -> Result<PeerInfo, ZmtpError> {
        let property =
            |name: &str| metadata.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice());
        let raw_type =
            property("Socket-Type").ok_or_else(|| ZmtpError::BadHandshake("READY without Socket-Type".into()))?;
        let socket_type =
            SocketType::from_wire(raw_type).filter(|&peer| self.socket_type.accepts(peer)).ok_or_else(|| {
                ZmtpError::IncompatibleSocketType {
                    ours: self.socket_type,
                    peer: String::from_utf8_lossy(raw_type).into_owned(),
                }
            })?;
        let identity = property("Identity").unwrap_or_default().to_vec();
        if identity.len() > 255 {
            return Err(ZmtpError::BadHandshake("Identity longer than 255 bytes".into()));
        }
        Ok(PeerInfo { socket_type, identity, minor_version: self.minor_version, metadata })
    }

    fn send_ready(&mut self) {
        let socket_type = self.socket_type.as_str().as_bytes();
        let mut properties: Vec<(&str, &[u8])> = vec![("Socket-Type", socket_type)];
        if matches!(self.socket_type, SocketType::Dealer | SocketType::Req | SocketType::Router) {
            properties.push(("Identity", &self.identity));
        }
        command::encode_ready(&mut self.transmit, &properties);
    }
}

fn name(command: &Command) -> &str {
    match command {
        Command::Ready(_) => "READY",
        Command::Error(_) => "ERROR",
        Command::Ping { .. } => "PING",
        Command::Pong(_) => "PONG",
        Command::Other(name) => name,
    }
}

/// Appends the frames of one multipart message to `out`, as [`Connection::send`] queues them: for
/// a writer that owns a ready connection's byte stream (an empty message adds nothing).
pub fn encode_message<P: AsRef<[u8]>>(out: &mut Vec<u8>, parts: &[P]) {
    if let Some((last, init)) = parts.split_last() {
        for part in init {
            frame::encode(out, FLAG_MORE, part.as_ref());
        }
        frame::encode(out, 0, last.as_ref());
    }
}
