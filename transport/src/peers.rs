//! What a router's owner sees of its connections, free of I/O: a connection's handle, what
//! happened on it, why a send was refused, its lane and why it closed. A core that decides
//! (the master's) names these and never the sockets.

use std::net::SocketAddr;

use halite_protocol::zmtp::{PeerInfo, TimeoutKind, ZmtpError};

/// A connection's handle on this router. Never reused within one router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u64);

/// Something that happened on the router.
#[derive(Debug)]
pub enum RouterEvent {
    /// A peer completed the ZMTP handshake.
    Connected {
        /// Its handle.
        peer: PeerId,
        /// Its address.
        addr: SocketAddr,
        /// What it announced.
        info: PeerInfo,
    },
    /// A message from a peer.
    Message {
        /// Who sent it.
        peer: PeerId,
        /// Its parts.
        parts: Vec<Vec<u8>>,
    },
    /// A peer that had connected is gone.
    Disconnected {
        /// Its handle.
        peer: PeerId,
        /// Why.
        reason: CloseReason,
    },
}

/// Why a message could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The peer's send queue is full: it is not reading fast enough. Explicit backpressure:
    /// the caller decides whether to retry, drop or disconnect.
    #[error("send queue full")]
    Full,
    /// No such peer (never connected, or gone).
    #[error("peer not connected")]
    NotConnected,
}

/// Which of its owner's queues a connection reports to. The owner reads the priority lane
/// first: a connection starts there (its handshake, then an administrator's requests), and the
/// owner moves the peers whose traffic is bulk (minions' returns) to the bulk lane as it admits
/// them, before it tells them so, so a burst of bulk never queues an administrator's request
/// behind it. A connection moves only from priority to bulk, never back; one still not admitted
/// after eight messages moves by itself (a peer that is refused or parked, or
/// floods before its verdict, gets no more priority than a handshake needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Read first.
    Priority,
    /// Read when the priority lane is empty.
    Bulk,
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CloseReason {
    /// The peer closed the TCP connection.
    #[error("peer closed the connection")]
    Eof,
    /// A socket error.
    #[error("i/o error: {0}")]
    Io(String),
    /// The peer broke the protocol or a limit (it was sent an ERROR), or sent ERROR itself.
    #[error(transparent)]
    Protocol(#[from] ZmtpError),
    /// A handshake or heartbeat deadline expired.
    #[error("timed out: {0:?}")]
    TimedOut(TimeoutKind),
    /// Writing to the peer stalled for longer than the write timeout.
    #[error("peer stopped reading")]
    WriteStalled,
    /// This side closed the connection.
    #[error("closed locally: {0}")]
    Local(String),
}
