//! Limits a ZMTP connection enforces before allocating, and heartbeat settings.

use std::time::Duration;

/// Bounds on what a peer may make a connection buffer. Defaults are safe for a master exposed
/// to untrusted networks (`docs/protocol.md` §7 lists them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame body accepted, in bytes. Noise messages are at most 65,535 bytes plus an
    /// 8-byte nonce, so the default leaves a little room above that.
    pub max_frame_size: u64,
    /// Most parts in one message before the connection is authenticated.
    pub max_parts_pre_auth: usize,
    /// Most bytes in one message before the connection is authenticated. Also bounds every
    /// command frame, before and after authentication.
    pub max_message_size_pre_auth: u64,
    /// Most parts in one message once authenticated.
    pub max_parts: usize,
    /// Most bytes in one message once authenticated.
    pub max_message_size: u64,
    /// Time allowed from connection start until the peer's READY has been received.
    pub handshake_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_size: 65_536 + 64,
            max_parts_pre_auth: 4,
            max_message_size_pre_auth: 8 * 1024,
            max_parts: 1024,
            max_message_size: 16 * 1024 * 1024 + 64 * 1024,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// ZMTP 3.1 heartbeats (RFC 37 "PING and PONG"). Heartbeats are never sent to a 3.0 peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// Send a PING after this long without sending one.
    pub interval: Duration,
    /// Declare the peer dead when nothing arrives this long after a PING.
    pub timeout: Duration,
    /// TTL announced in our PINGs: the peer may close if it hears nothing from us this long.
    /// Sent in deciseconds, capped at 6,553.5 s.
    pub ttl: Duration,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat { interval: Duration::from_secs(10), timeout: Duration::from_secs(30), ttl: Duration::from_secs(60) }
    }
}
