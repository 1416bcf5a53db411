//! The connections the core talks to: each one's stage (handshake, minion, client, in-process
//! client) with its session, and which minion is online on which connection. The core's
//! `forget` is the one way a connection leaves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_protocol::message::PrincipalAcl;
use halite_protocol::noise::{AwaitingIdentity, Session};
use halite_transport::PeerId;

use crate::gateway::local_queue::LocalSender;

/// One connection's stage.
pub(crate) enum Conn {
    /// ZMTP is up; waiting for Noise message 1.
    AwaitHello { since: Instant },
    /// Message 2 sent; waiting for message 3.
    AwaitIdentity { state: Box<AwaitingIdentity>, since: Instant },
    /// An accepted minion.
    Minion { id: String, session: Session },
    /// An authenticated client; `acl` is `None` for root. `greeted` once it sent its
    /// `client_hello`, the only message served before.
    Client { principal: String, acl: Option<Arc<PrincipalAcl>>, session: Session, greeted: bool },
    /// Refused or told to wait: its verdict is on the way, and the connection stays open a
    /// moment ([`VERDICT_LINGER`]) so the peer reads it before the close (a libzmq peer drops a
    /// message that arrives together with the close). Nothing it sends is read. A minion whose
    /// key is pending or rejected is `parked`: its connection stays open longer ([`PARK_FOR`])
    /// and is closed as soon as its key is accepted, so it knocks again at once.
    Refused { since: Instant, parked: bool },
    /// An in-process client (the HTTP gateway), authenticated by a gateway token and bound to
    /// it (see `token_sessions.rs`).
    Local { principal: String, acl: Option<Arc<PrincipalAcl>>, tx: LocalSender, token: LocalToken },
}

/// The gateway token an in-process session was opened with: revoking it, or its expiry, ends
/// the session.
pub(crate) struct LocalToken {
    /// Its SHA-256, to look it up again in the store.
    pub(crate) hash: [u8; 32],
    /// Its id, as revoked.
    pub(crate) id: String,
    /// When it expires (wall clock, ms); `None`: never.
    pub(crate) expires_at_ms: Option<u64>,
}

impl Conn {
    pub(crate) fn session_mut(&mut self) -> Option<&mut Session> {
        match self {
            Conn::Minion { session, .. } | Conn::Client { session, .. } => Some(session),
            _ => None,
        }
    }
}

/// How long a refused connection stays open after its verdict.
pub(crate) const VERDICT_LINGER: Duration = Duration::from_secs(2);

/// How long a parked minion's connection stays open waiting for its key to be accepted (it
/// then knocks again, as it does when the key is accepted meanwhile).
pub(crate) const PARK_FOR: Duration = Duration::from_secs(30);

/// Every connection, and the minions online.
pub(crate) struct Sessions {
    pub(crate) conns: HashMap<PeerId, Conn>,
    /// Minions with a live session, and on which connection.
    pub(crate) online: HashMap<String, PeerId>,
    /// Minions waiting for their key to be accepted, and the connection each is parked on
    /// (one per id: a newer knock replaces the older).
    pub(crate) parked: HashMap<String, PeerId>,
    /// Peer ids for local sessions count down from the top, far from the router's.
    pub(crate) next_local_peer: u64,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions { conns: HashMap::new(), online: HashMap::new(), parked: HashMap::new(), next_local_peer: u64::MAX }
    }
}

impl Sessions {
    /// The connection a minion is online on.
    pub(crate) fn peer_of(&self, minion: &str) -> Option<PeerId> {
        self.online.get(minion).copied()
    }

    /// A new id for an in-process session.
    pub(crate) fn next_local(&mut self) -> PeerId {
        let peer = PeerId(self.next_local_peer);
        self.next_local_peer -= 1;
        peer
    }

    /// Every session of a principal (over the network or in-process).
    pub(crate) fn clients_of(&self, principal: &str) -> Vec<PeerId> {
        self.conns
            .iter()
            .filter(|(_, c)| {
                matches!(c, Conn::Client { principal: p, .. } | Conn::Local { principal: p, .. } if p == principal)
            })
            .map(|(peer, _)| *peer)
            .collect()
    }

    /// Connections still in the handshake after `timeout`.
    pub(crate) fn stale_handshakes(&self, now: Instant, timeout: Duration) -> Vec<PeerId> {
        self.conns
            .iter()
            .filter(|(_, c)| match c {
                Conn::AwaitHello { since } | Conn::AwaitIdentity { since, .. } => {
                    now.saturating_duration_since(*since) > timeout
                }
                _ => false,
            })
            .map(|(peer, _)| *peer)
            .collect()
    }

    /// Refused connections whose verdict has had time to arrive.
    pub(crate) fn lingered(&self, now: Instant) -> Vec<PeerId> {
        self.conns
            .iter()
            .filter(|(_, c)| match c {
                Conn::Refused { since, parked } => {
                    let linger = if *parked { PARK_FOR } else { VERDICT_LINGER };
                    now.saturating_duration_since(*since) >= linger
                }
                _ => false,
            })
            .map(|(peer, _)| *peer)
            .collect()
    }
}
