//! Noise sessions: `Noise_XX_25519_ChaChaPoly_BLAKE2s` with identities bound to ed25519 keys.
//!
//! The handshake is a chain of consuming states, so a state can never be used twice:
//!
//! ```text
//! initiator (minion, client)                    responder (master)
//! Initiator::start ── msg1 ─────────────────▶  Responder::read_hello
//! Initiator::read_response ◀──────── msg2 ──  (master identity)
//! AwaitingVerdict ── msg3 (identity, role) ─▶  AwaitingIdentity::read_identity
//!                                              IdentifiedPeer: accept | defer | reject
//! AwaitingVerdict::read_verdict ◀─ verdict ──  (first transport message)
//! Session                                      Session (on accept)
//! ```
//!
//! After the handshake, [`Session`] seals application messages into ZMTP multipart messages of
//! Noise transport messages with explicit nonces, and opens them through a replay window
//! (`docs/protocol.md` §5).

mod certificate;
mod handshake;
mod local;
mod replay;
mod session;

use std::time::Duration;

pub use certificate::{MasterCertificate, Revocation, CERTIFICATE_LEN};
pub use handshake::{AwaitingIdentity, AwaitingVerdict, IdentifiedPeer, Initiator, Responder};

pub use local::LocalIdentity;
pub use session::Session;

use crate::identity::{IdentityError, PublicIdentity};

/// The Noise protocol name. Changing it is a protocol version change.
pub const NOISE_PARAMS: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
/// The first byte of every handshake message: the halite wire protocol version.
pub const WIRE_VERSION: u8 = 1;
/// Noise prologue: binds the protocol version into the handshake hash.
pub(crate) const PROLOGUE: &[u8] = b"halite/1";
/// Domain for the signature binding a node's X25519 static key to its ed25519 identity.
pub(crate) const STATIC_KEY_DOMAIN: &[u8] = b"halite-noise-static-key-v1\0";
/// Largest Noise message (Noise spec §3).
pub const MAX_NOISE_MESSAGE: usize = 65_535;
/// ChaChaPoly authentication tag length.
pub(crate) const TAG_LEN: usize = 16;

/// Which kind of node is on the other end. The responder is always the master; the initiator
/// says what it is, signed into the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The master (always the responder).
    Master,
    /// A minion.
    Minion,
    /// An admin CLI or an engine.
    Client,
}

impl Role {
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            Role::Master => 1,
            Role::Minion => 2,
            Role::Client => 3,
        }
    }

    pub(crate) fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Role::Master),
            2 => Some(Role::Minion),
            3 => Some(Role::Client),
            _ => None,
        }
    }
}

/// An authenticated peer: its identity and the role it claimed, both signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The peer's ed25519 identity.
    pub identity: PublicIdentity,
    /// The role the peer claimed in its handshake payload.
    pub role: Role,
    /// The name the peer claimed (a minion id, a principal, the master's id). Signed into the
    /// handshake but not verified by it: the master checks it against its key registry.
    pub name: String,
    /// A master's certificate from its cluster key, when it presented one.
    pub certificate: Option<MasterCertificate>,
}

/// What a node claims about itself in the handshake, besides its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    name: String,
    token: Option<String>,
}

impl Claim {
    /// A claim of `name`, optionally with a one-time enrollment token. Both are at most 255
    /// bytes (§4.3); a token must not be empty.
    pub fn new(name: &str, token: Option<&str>) -> Result<Self, HandshakeError> {
        if name.len() > 255 || token.is_some_and(|t| t.is_empty() || t.len() > 255) {
            return Err(HandshakeError::Malformed("name and token must be 1 to 255 bytes"));
        }
        Ok(Claim { name: name.to_owned(), token: token.map(str::to_owned) })
    }

    /// The claimed name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What the initiator requires of the responder's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterPin {
    /// This master key, or a master holding a certificate from this key (a cluster key) for
    /// its key and name, unless the initiator was told it is revoked.
    Key(PublicIdentity),
    /// Trust on first use: any master key is accepted and returned for the caller to pin.
    /// Only for explicit opt-in.
    TrustOnFirstUse,
}

/// The reason (ZMTP ERROR) a master closes a minion's session with when a newer session for the
/// same id replaces it: a minion that receives it backs off instead of taking the session back.
pub const REPLACED_REASON: &str = "replaced by a newer connection";

/// The reason (ZMTP ERROR) a master closes a waiting minion's connection with once its key is
/// accepted: the minion connects again at once, and is let in.
pub const KEY_ACCEPTED_REASON: &str = "key accepted; connect again";

/// The reason (ZMTP ERROR) a master closes a minion's session with to hand it to another
/// master (it cannot reach its database, another master can): a minion given several masters
/// connects to the next, not to this one again.
pub const GO_ELSEWHERE_REASON: &str = "this master cannot reach its database; connect to another";

/// Default largest application message, in bytes ([`SessionConfig::max_message_size`]).
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// Session tunables (`docs/protocol.md` §7 lists the defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Largest application message sealed or accepted, after reassembly.
    pub max_message_size: usize,
    /// Rekey the sending direction after this many Noise messages.
    pub rekey_after_messages: u64,
    /// Rekey the sending direction after this long.
    pub rekey_after: Duration,
    /// The session refuses to seal or open anything this long after it was established; the
    /// owner then reconnects and handshakes again. `None` means no limit.
    pub max_age: Option<Duration>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_message_size: MAX_MESSAGE_SIZE,
            rekey_after_messages: 1 << 20,
            rekey_after: Duration::from_secs(3600),
            max_age: Some(Duration::from_secs(24 * 3600)),
        }
    }
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// A handshake message was not shaped as `docs/protocol.md` §4 says.
    #[error("malformed handshake message: {0}")]
    Malformed(&'static str),
    /// The peer speaks another wire version.
    #[error("unsupported wire protocol version {0} (this node speaks {WIRE_VERSION})")]
    UnsupportedVersion(u8),
    /// Noise processing failed: tampering, a wrong key, or a message out of order.
    #[error("noise handshake failed: {0}")]
    Noise(String),
    /// The identity payload carried an invalid key or a bad binding signature.
    #[error("peer identity refused: {0}")]
    Identity(#[from] IdentityError),
    /// The peer claimed a role it cannot have in this position.
    #[error("peer claimed role {0:?}, which is not allowed here")]
    WrongRole(Role),
    /// The master holds a certificate from the pinned cluster key, but its key was revoked.
    #[error("master key {0} was revoked by the cluster key")]
    Revoked(String),
    /// The master's key is not the pinned one.
    #[error("master key {got} does not match the pinned key {expected}")]
    UnexpectedPeer {
        /// Fingerprint of the pinned key.
        expected: String,
        /// Fingerprint of the key presented.
        got: String,
    },
    /// The master knows our key but has not accepted it yet.
    #[error("the master has our key pending acceptance: {0}")]
    Pending(String),
    /// The master refused our key.
    #[error("the master rejected our key: {0}")]
    Rejected(String),
    /// The verdict message could not be opened.
    #[error("bad verdict: {0}")]
    Session(#[from] SessionError),
}

impl From<snow::Error> for HandshakeError {
    fn from(e: snow::Error) -> Self {
        HandshakeError::Noise(e.to_string())
    }
}

/// Why sealing or opening a transport message failed. The session stays usable after any of
/// these except [`SessionError::Expired`] and [`SessionError::NoncesExhausted`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The parts are not shaped as `docs/protocol.md` §5 says.
    #[error("malformed transport message: {0}")]
    Malformed(&'static str),
    /// This nonce was already accepted.
    #[error("replayed message (nonce {0})")]
    Replayed(u64),
    /// The nonce is older than the replay window.
    #[error("message too old for the replay window (nonce {0})")]
    TooOld(u64),
    /// Authentication failed: tampered, or sealed under another key.
    #[error("message failed authentication")]
    Decrypt,
    /// The message is larger than `max_message_size`.
    #[error("message of {size} bytes exceeds the cap of {limit}")]
    MessageTooLarge {
        /// Size of the message (or a lower bound of it).
        size: usize,
        /// The cap in force.
        limit: usize,
    },
    /// The session outlived `max_age`; handshake again.
    #[error("session expired; reconnect")]
    Expired,
    /// The nonce space is used up; handshake again.
    #[error("nonces exhausted; reconnect")]
    NoncesExhausted,
    /// A verdict arrived where data was expected, or the reverse.
    #[error("unexpected transport message kind {0}")]
    UnexpectedKind(u8),
}
