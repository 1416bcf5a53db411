//! The connections the core talks to: each one's stage (handshake, minion, client, in-process
//! client) with its session, and which minion is online on which connection. The core's
//! `forget` is the one way a connection leaves.
//!
//! The connections whose stage has a deadline (a handshake not finished, a refusal lingering)
//! and the in-process sessions whose token expires are indexed by when they come due, so the
//! loop sleeps until the first of them ([`Sessions::next_timeout`]) and never scans every
//! connection to find them.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_protocol::message::{self, Message, PrincipalAcl, UnreadableMessage};
use halite_protocol::noise::{AwaitingIdentity, Session};
use halite_transport::PeerId;

use crate::local_sessions::LocalSender;

/// One connection's stage.
pub enum Conn {
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
pub struct LocalToken {
    /// Its SHA-256, to look it up again in the store.
    pub hash: [u8; 32],
    /// Its id, as revoked.
    pub id: String,
    /// When it expires (wall clock, ms); `None`: never.
    pub expires_at_ms: Option<u64>,
}

impl Conn {
    pub fn session_mut(&mut self) -> Option<&mut Session> {
        match self {
            Conn::Minion { session, .. } | Conn::Client { session, .. } => Some(session),
            _ => None,
        }
    }
}

/// A message on a connection, as its stage reads it ([`Sessions::open`]).
pub enum Opened {
    /// A minion's message, decoded; `size`: its encoded length, which bounds what its caps
    /// must measure.
    Minion { id: String, msg: Message, size: usize },
    /// A client's message, once it sent its `client_hello`.
    Client { principal: String, acl: Option<Arc<PrincipalAcl>>, msg: Message },
    /// The connection is in its handshake: these parts are its next stage.
    Handshake(Vec<Vec<u8>>),
    /// A message its session could not open or decode, or a client's before its hello: the
    /// peer is told why, and the connection stays.
    Unreadable(String),
    /// Nothing to read: no such connection, a refused one, or an in-process session (which
    /// never arrives from the network).
    Ignored,
}

/// How long a refused connection stays open after its verdict.
pub const VERDICT_LINGER: Duration = Duration::from_secs(2);

/// How long a parked minion's connection stays open waiting for its key to be accepted (it
/// then knocks again, as it does when the key is accepted meanwhile).
pub const PARK_FOR: Duration = Duration::from_secs(30);

/// Every connection, and the minions online.
pub struct Sessions {
    conns: HashMap<PeerId, Conn>,
    /// Minions with a live session, and on which connection.
    online: HashMap<String, PeerId>,
    /// Minions waiting for their key to be accepted, and the connection each is parked on
    /// (one per id: a newer knock replaces the older).
    parked: HashMap<String, PeerId>,
    /// Peer ids for local sessions count down from the top, far from the router's.
    next_local_peer: u64,
    /// When a connection's stage comes due ([`Sessions::watch`]); an entry whose connection
    /// moved on meanwhile is passed over when it comes due.
    timeouts: BTreeSet<(Instant, PeerId)>,
    /// In-process sessions whose token expires, by when (wall clock, ms).
    token_expiry: BTreeSet<(u64, PeerId)>,
    /// Authenticated network clients (`Conn::Client`), for the figures.
    clients: usize,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            conns: HashMap::new(),
            online: HashMap::new(),
            parked: HashMap::new(),
            next_local_peer: u64::MAX,
            timeouts: BTreeSet::new(),
            token_expiry: BTreeSet::new(),
            clients: 0,
        }
    }
}

/// Connections whose deadline has come ([`Sessions::due`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// Still in the handshake after the handshake timeout.
    pub stale_handshakes: Vec<PeerId>,
    /// Refused, their verdict has had time to arrive.
    pub lingered: Vec<PeerId>,
}

impl Sessions {
    /// A connection's stage.
    pub fn get(&self, peer: &PeerId) -> Option<&Conn> {
        self.conns.get(peer)
    }

    /// Opens a message that arrived on `peer` with its session, at `now`: the one place a
    /// sealed message is read.
    pub fn open(&mut self, peer: PeerId, parts: Vec<Vec<u8>>, now: Instant) -> Opened {
        match self.conns.get_mut(&peer) {
            None | Some(Conn::Local { .. } | Conn::Refused { .. }) => Opened::Ignored,
            Some(Conn::AwaitHello { .. } | Conn::AwaitIdentity { .. }) => Opened::Handshake(parts),
            Some(Conn::Minion { id, session }) => {
                let decoded = session
                    .open(&parts, now)
                    .map_err(UnreadableMessage::from)
                    .and_then(|b| message::decode(&b).map(|msg| (msg, b.len())).map_err(UnreadableMessage::from));
                match decoded {
                    Ok((msg, size)) => Opened::Minion { id: id.clone(), msg, size },
                    Err(error) => {
                        tracing::warn!(minion = %id, %error, "undecodable message");
                        Opened::Unreadable(error.to_string())
                    }
                }
            }
            Some(Conn::Client { principal, acl, session, greeted }) => {
                let decoded = session
                    .open(&parts, now)
                    .map_err(UnreadableMessage::from)
                    .and_then(|b| message::decode(&b).map_err(UnreadableMessage::from));
                // The protocol's first client message is `client_hello` (docs/protocol.md):
                // nothing else is served before it, so a client always learns the master's
                // version and revocations before acting.
                *greeted |= matches!(decoded, Ok(Message::ClientHello(_)));
                match decoded {
                    Ok(msg) if *greeted => Opened::Client { principal: principal.clone(), acl: acl.clone(), msg },
                    Ok(_) => Opened::Unreadable("send client_hello first: nothing is served before it".to_owned()),
                    Err(error) => Opened::Unreadable(error.to_string()),
                }
            }
        }
    }

    /// The principal on a client connection and its ACL (`None` for root), for
    /// `crate::authz`.
    pub fn principal_on(&self, peer: PeerId) -> Option<(String, Option<Arc<PrincipalAcl>>)> {
        match self.get(&peer)? {
            Conn::Client { principal, acl, .. } | Conn::Local { principal, acl, .. } => {
                Some((principal.clone(), acl.clone()))
            }
            _ => None,
        }
    }

    /// A connection's stage, to use its session (a stage is changed with [`Sessions::insert`]).
    pub fn get_mut(&mut self, peer: &PeerId) -> Option<&mut Conn> {
        self.conns.get_mut(peer)
    }

    /// Whether the connection is known.
    pub fn contains(&self, peer: &PeerId) -> bool {
        self.conns.contains_key(peer)
    }

    /// Every connection and its stage.
    pub fn iter(&self) -> impl Iterator<Item = (&PeerId, &Conn)> {
        self.conns.iter()
    }

    /// Sets a connection's stage (a stage with a deadline is also [`Sessions::watch`]ed).
    pub fn insert(&mut self, peer: PeerId, conn: Conn) {
        self.count(&conn, peer, true);
        if let Some(old) = self.conns.insert(peer, conn) {
            self.count(&old, peer, false);
        }
    }

    /// Takes a connection out, with its stage.
    pub fn remove(&mut self, peer: &PeerId) -> Option<Conn> {
        let conn = self.conns.remove(peer)?;
        self.count(&conn, *peer, false);
        Some(conn)
    }

    /// Keeps the figures and the token index in step with a stage coming or going.
    fn count(&mut self, conn: &Conn, peer: PeerId, added: bool) {
        match conn {
            Conn::Client { .. } if added => self.clients += 1,
            Conn::Client { .. } => self.clients -= 1,
            Conn::Local { token: LocalToken { expires_at_ms: Some(at), .. }, .. } => {
                if added {
                    self.token_expiry.insert((*at, peer));
                } else {
                    self.token_expiry.remove(&(*at, peer));
                }
            }
            _ => {}
        }
    }

    /// Looks at `peer` again at `at`: its stage has a deadline then.
    pub fn watch(&mut self, peer: PeerId, at: Instant) {
        self.timeouts.insert((at, peer));
    }

    /// The first moment a watched connection comes due.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.timeouts.first().map(|(at, _)| *at)
    }

    /// The watched connections whose deadline has come, by what it was. Those that moved on to
    /// a stage without one (or a later one, watched on its own) are passed over.
    pub fn due(&mut self, now: Instant, handshake_timeout: Duration) -> Due {
        let mut due = Due::default();
        let mut later = Vec::new();
        while let Some(&(at, peer)) = self.timeouts.first() {
            if at > now {
                break;
            }
            self.timeouts.pop_first();
            let (since, limit, list) = match self.conns.get(&peer) {
                Some(Conn::AwaitHello { since } | Conn::AwaitIdentity { since, .. }) => {
                    (*since, handshake_timeout, &mut due.stale_handshakes)
                }
                Some(Conn::Refused { since, parked }) => (*since, linger(*parked), &mut due.lingered),
                _ => continue,
            };
            if now.saturating_duration_since(since) >= limit {
                list.push(peer);
            } else {
                // Watched under a shorter limit than today's (the config was reloaded).
                later.push((since + limit, peer));
            }
        }
        self.timeouts.extend(later);
        due
    }

    /// When the first in-process session's token expires (wall clock, ms).
    pub fn next_token_expiry_ms(&self) -> Option<u64> {
        self.token_expiry.first().map(|(at, _)| *at)
    }

    /// The in-process sessions whose token has expired by `wall_ms`.
    pub fn expired_tokens(&self, wall_ms: u64) -> Vec<PeerId> {
        self.token_expiry.iter().take_while(|(at, _)| *at <= wall_ms).map(|(_, peer)| *peer).collect()
    }

    /// Authenticated network clients.
    pub fn client_count(&self) -> usize {
        self.clients
    }

    /// Whether a minion has a live session here.
    pub fn is_online(&self, minion: &str) -> bool {
        self.online.contains_key(minion)
    }

    /// The minions with a live session here.
    pub fn online_ids(&self) -> impl Iterator<Item = &String> {
        self.online.keys()
    }

    /// How many minions have a live session here.
    pub fn online_count(&self) -> usize {
        self.online.len()
    }

    /// `minion` is online on `peer` (an earlier session of it was forgotten first).
    pub fn went_online(&mut self, minion: &str, peer: PeerId) {
        self.online.insert(minion.to_owned(), peer);
    }

    /// `minion` leaves if it is online on `peer` (not if a newer session replaced it); whether
    /// it left.
    pub fn went_offline(&mut self, minion: &str, peer: PeerId) -> bool {
        if self.online.get(minion) == Some(&peer) {
            self.online.remove(minion);
            return true;
        }
        false
    }

    /// `minion` waits on `peer` for its key to be accepted; the connection it waited on
    /// before, if another.
    pub fn park(&mut self, minion: &str, peer: PeerId) -> Option<PeerId> {
        self.parked.insert(minion.to_owned(), peer).filter(|older| *older != peer)
    }

    /// The parked connection `peer` is gone.
    pub fn unpark(&mut self, peer: PeerId) {
        self.parked.retain(|_, parked| *parked != peer);
    }

    /// The minions waiting for their key, and their connections.
    pub fn parked(&self) -> impl Iterator<Item = (&String, &PeerId)> {
        self.parked.iter()
    }

    /// The connection a minion is online on.
    pub fn peer_of(&self, minion: &str) -> Option<PeerId> {
        self.online.get(minion).copied()
    }

    /// Opens an in-process session, bound to the token it was opened with; its id.
    pub fn open_local(
        &mut self,
        principal: String,
        acl: Option<Arc<PrincipalAcl>>,
        tx: LocalSender,
        token: LocalToken,
    ) -> PeerId {
        let peer = PeerId(self.next_local_peer);
        self.next_local_peer -= 1;
        self.insert(peer, Conn::Local { principal, acl, tx, token });
        peer
    }

    /// The in-process sessions opened with the token `id`.
    pub fn opened_with_token(&self, id: &str) -> Vec<PeerId> {
        self.local_tokens().filter(|(_, token)| token.id == id).map(|(peer, _)| peer).collect()
    }

    /// The in-process sessions of `principal`, with the hash of the token each was opened with
    /// (to look each up again).
    pub fn tokens_of(&self, principal: &str) -> Vec<(PeerId, [u8; 32])> {
        let of =
            |peer: &PeerId| matches!(self.conns.get(peer), Some(Conn::Local { principal: p, .. }) if p == principal);
        self.local_tokens().filter(|(peer, _)| of(peer)).map(|(peer, token)| (peer, token.hash)).collect()
    }

    fn local_tokens(&self) -> impl Iterator<Item = (PeerId, &LocalToken)> {
        self.conns.iter().filter_map(|(peer, conn)| match conn {
            Conn::Local { token, .. } => Some((*peer, token)),
            _ => None,
        })
    }

    /// Every session of a principal (over the network or in-process).
    pub fn clients_of(&self, principal: &str) -> Vec<PeerId> {
        self.conns
            .iter()
            .filter(|(_, c)| {
                matches!(c, Conn::Client { principal: p, .. } | Conn::Local { principal: p, .. } if p == principal)
            })
            .map(|(peer, _)| *peer)
            .collect()
    }
}

/// How long a refused connection stays open after its verdict.
pub fn linger(parked: bool) -> Duration {
    if parked {
        PARK_FOR
    } else {
        VERDICT_LINGER
    }
}
