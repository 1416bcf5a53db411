//! A sans-IO ZMTP 3.1 peer (RFC 23 and RFC 37, NULL mechanism), hardened for untrusted networks.
//!
//! [`Connection`] is a state machine: feed it received bytes with [`Connection::handle_input`],
//! the passage of time with [`Connection::handle_timeout`], and messages to send with
//! [`Connection::send`]; drain what it produced with [`Connection::poll_transmit`] and
//! [`Connection::poll_event`], and ask [`Connection::poll_timeout`] when to wake it next.
//! It reads no clock and does no I/O; `now` is always an argument.
//!
//! Every limit in [`Limits`] is checked against a frame header before a byte of its body is
//! buffered, so a peer can make a connection hold at most `max_message_size` bytes
//! (`docs/protocol.md` §3).

mod command;
mod connection;
mod frame;
mod greeting;
mod limits;
mod socket_type;

pub use connection::{encode_message, Connection, Event, PeerInfo, TimeoutKind};
pub use greeting::GREETING_LEN;
pub use limits::{Heartbeat, Limits};
pub use socket_type::SocketType;

/// Everything that makes a ZMTP connection fail. Every variant closes the connection; all but
/// [`ZmtpError::PeerError`] and [`ZmtpError::Closed`] first send the peer an ERROR command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZmtpError {
    /// The greeting is not a ZMTP 3.x signature.
    #[error("bad ZMTP greeting: {0}")]
    BadGreeting(&'static str),
    /// The peer speaks ZMTP older than 3.0.
    #[error("unsupported ZMTP major version {0} (3.0 or later required)")]
    UnsupportedVersion(u8),
    /// The peer wants a security mechanism other than NULL.
    #[error("unsupported ZMTP mechanism {0:?} (only NULL is spoken; encryption is Noise)")]
    UnsupportedMechanism(String),
    /// A frame header has reserved flag bits set.
    #[error("frame flags {0:#04x} set reserved bits")]
    ReservedFlags(u8),
    /// A command frame has the MORE flag.
    #[error("command frame with the MORE flag")]
    MultipartCommand,
    /// A command body could not be parsed.
    #[error("malformed command: {0}")]
    MalformedCommand(&'static str),
    /// The first command was not READY, or a property was missing or invalid.
    #[error("bad handshake: {0}")]
    BadHandshake(String),
    /// The peer's socket type cannot talk to ours.
    #[error("socket type {peer} cannot connect to {ours}")]
    IncompatibleSocketType {
        /// Our socket type.
        ours: SocketType,
        /// What the peer announced.
        peer: String,
    },
    /// A message frame arrived before the handshake completed.
    #[error("message frame before the handshake completed")]
    MessageBeforeReady,
    /// A frame claims more bytes than `max_frame_size` (or a command more than the command cap).
    #[error("frame of {size} bytes exceeds the limit of {limit}")]
    FrameTooLarge {
        /// Size claimed by the header.
        size: u64,
        /// The limit in force.
        limit: u64,
    },
    /// A message has more parts than allowed.
    #[error("message has more than {limit} parts")]
    TooManyParts {
        /// The limit in force.
        limit: usize,
    },
    /// A message's parts add up to more bytes than allowed.
    #[error("message exceeds {limit} bytes")]
    MessageTooLarge {
        /// The limit in force.
        limit: u64,
    },
    /// The peer sent an ERROR command.
    #[error("peer closed the connection: {0}")]
    PeerError(String),
    /// The connection is closed; nothing more can be sent.
    #[error("connection is closed")]
    Closed,
    /// `send` was called before the handshake completed.
    #[error("connection is not ready")]
    NotReady,
    /// `send` was called with no parts.
    #[error("a message needs at least one part")]
    EmptyMessage,
}
