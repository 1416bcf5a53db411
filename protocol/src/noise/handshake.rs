//! The XX handshake as consuming states (see the diagram in the module docs).

use std::time::Instant;

use snow::HandshakeState;

use super::local::{params, LocalIdentity};
use super::session::{Kind, Session};
use super::{
    HandshakeError, MasterPin, Peer, Role, SessionConfig, MAX_NOISE_MESSAGE, PROLOGUE, STATIC_KEY_DOMAIN, WIRE_VERSION,
};
use crate::identity::PublicIdentity;

/// Identity payload: role (1) || ed25519 public key (32) || signature over the static key (64).
const IDENTITY_PAYLOAD_LEN: usize = 97;

/// Verdict codes carried in the first transport message from the responder.
const VERDICT_ACCEPTED: u8 = 0;
const VERDICT_PENDING: u8 = 1;
const VERDICT_REJECTED: u8 = 2;

fn builder(local: &LocalIdentity) -> Result<snow::Builder<'_>, HandshakeError> {
    Ok(snow::Builder::new(params()).local_private_key(local.static_private())?.prologue(PROLOGUE)?)
}

fn write(hs: &mut HandshakeState, payload: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let mut buf = vec![0u8; 1 + MAX_NOISE_MESSAGE];
    buf[0] = WIRE_VERSION;
    let n = hs.write_message(payload, &mut buf[1..])?;
    buf.truncate(1 + n);
    Ok(buf)
}

fn read(hs: &mut HandshakeState, message: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let (&version, body) = message.split_first().ok_or(HandshakeError::Malformed("empty handshake message"))?;
    if version != WIRE_VERSION {
        return Err(HandshakeError::UnsupportedVersion(version));
    }
    if body.len() > MAX_NOISE_MESSAGE {
        return Err(HandshakeError::Malformed("handshake message longer than a Noise message"));
    }
    let mut payload = vec![0u8; body.len()];
    let n = hs.read_message(body, &mut payload)?;
    payload.truncate(n);
    Ok(payload)
}

fn identity_payload(local: &LocalIdentity, role: Role) -> Vec<u8> {
    let mut payload = Vec::with_capacity(IDENTITY_PAYLOAD_LEN);
    payload.push(role.to_byte());
    payload.extend_from_slice(local.binding());
    payload
}

/// Checks a peer's identity payload against the static key Noise authenticated.
fn verify_identity(hs: &HandshakeState, payload: &[u8]) -> Result<Peer, HandshakeError> {
    if payload.len() != IDENTITY_PAYLOAD_LEN {
        return Err(HandshakeError::Malformed("identity payload must be 97 bytes"));
    }
    let role = Role::from_byte(payload[0]).ok_or(HandshakeError::Malformed("unknown role"))?;
    let identity = PublicIdentity::from_bytes(&payload[1..33])?;
    let remote_static = hs.get_remote_static().ok_or(HandshakeError::Malformed("no remote static key"))?;
    identity.verify(STATIC_KEY_DOMAIN, remote_static, &payload[33..])?;
    Ok(Peer { identity, role })
}

/// The initiator (minion or client) before it has heard from the master.
pub struct Initiator {
    hs: HandshakeState,
    local: LocalIdentity,
    role: Role,
    pin: MasterPin,
    config: SessionConfig,
}

impl Initiator {
    /// Starts a handshake; returns the state and message 1 to send.
    pub fn start(
        local: &LocalIdentity,
        role: Role,
        pin: MasterPin,
        config: SessionConfig,
    ) -> Result<(Self, Vec<u8>), HandshakeError> {
        if role == Role::Master {
            return Err(HandshakeError::WrongRole(role));
        }
        let mut hs = builder(local)?.build_initiator()?;
        // Message 1 is sent in the clear: its payload stays empty.
        let msg1 = write(&mut hs, &[])?;
        Ok((Initiator { hs, local: local.clone(), role, pin, config }, msg1))
    }

    /// Reads message 2, checks the master's identity against the pin, and returns message 3
    /// (our identity, now encrypted to the authenticated master).
    pub fn read_response(mut self, msg2: &[u8]) -> Result<(AwaitingVerdict, Vec<u8>), HandshakeError> {
        let payload = read(&mut self.hs, msg2)?;
        let master = verify_identity(&self.hs, &payload)?;
        if master.role != Role::Master {
            return Err(HandshakeError::WrongRole(master.role));
        }
        if let MasterPin::Key(pinned) = &self.pin {
            if *pinned != master.identity {
                return Err(HandshakeError::UnexpectedPeer {
                    expected: pinned.fingerprint(),
                    got: master.identity.fingerprint(),
                });
            }
        }
        let msg3 = write(&mut self.hs, &identity_payload(&self.local, self.role))?;
        let transport = self.hs.into_stateless_transport_mode()?;
        Ok((AwaitingVerdict { transport, master, config: self.config }, msg3))
    }
}

/// The initiator after message 3, waiting for the master's accept / pending / reject verdict.
pub struct AwaitingVerdict {
    transport: snow::StatelessTransportState,
    master: Peer,
    config: SessionConfig,
}

impl AwaitingVerdict {
    /// The authenticated master (for trust-on-first-use callers that pin it).
    pub fn master(&self) -> &Peer {
        &self.master
    }

    /// Reads the verdict: a session when accepted, [`HandshakeError::Pending`] or
    /// [`HandshakeError::Rejected`] otherwise.
    pub fn read_verdict(self, parts: &[Vec<u8>], now: Instant) -> Result<Session, HandshakeError> {
        let mut session = Session::new(self.transport, self.master, self.config, now);
        let verdict = session.open_kind(parts, Kind::Verdict, now)?;
        let (&code, reason) = verdict.split_first().ok_or(HandshakeError::Malformed("empty verdict"))?;
        let reason = String::from_utf8_lossy(reason).into_owned();
        match code {
            VERDICT_ACCEPTED => Ok(session),
            VERDICT_PENDING => Err(HandshakeError::Pending(reason)),
            VERDICT_REJECTED => Err(HandshakeError::Rejected(reason)),
            _ => Err(HandshakeError::Malformed("unknown verdict code")),
        }
    }
}

/// The responder (master) before message 1.
pub struct Responder {
    hs: HandshakeState,
    local: LocalIdentity,
    config: SessionConfig,
}

impl Responder {
    /// Prepares to answer one connection.
    pub fn new(local: &LocalIdentity, config: SessionConfig) -> Result<Self, HandshakeError> {
        let hs = builder(local)?.build_responder()?;
        Ok(Responder { hs, local: local.clone(), config })
    }

    /// Reads message 1 and returns message 2, which carries the master's identity.
    pub fn read_hello(mut self, msg1: &[u8]) -> Result<(AwaitingIdentity, Vec<u8>), HandshakeError> {
        let payload = read(&mut self.hs, msg1)?;
        if !payload.is_empty() {
            return Err(HandshakeError::Malformed("message 1 must have an empty payload"));
        }
        let msg2 = write(&mut self.hs, &identity_payload(&self.local, Role::Master))?;
        Ok((AwaitingIdentity { hs: self.hs, config: self.config }, msg2))
    }
}

/// The responder after message 2, waiting for the initiator's identity.
pub struct AwaitingIdentity {
    hs: HandshakeState,
    config: SessionConfig,
}

impl AwaitingIdentity {
    /// Reads message 3 and authenticates the initiator. Nothing has been decided yet: the
    /// caller looks the identity up and calls one of [`IdentifiedPeer`]'s verdict methods.
    pub fn read_identity(mut self, msg3: &[u8]) -> Result<IdentifiedPeer, HandshakeError> {
        let payload = read(&mut self.hs, msg3)?;
        let peer = verify_identity(&self.hs, &payload)?;
        if peer.role == Role::Master {
            return Err(HandshakeError::WrongRole(peer.role));
        }
        let transport = self.hs.into_stateless_transport_mode()?;
        Ok(IdentifiedPeer { transport, peer, config: self.config })
    }
}

/// An authenticated initiator awaiting the master's decision. No application data can flow
/// until [`IdentifiedPeer::accept`] returns a session.
pub struct IdentifiedPeer {
    transport: snow::StatelessTransportState,
    peer: Peer,
    config: SessionConfig,
}

impl IdentifiedPeer {
    /// Who is asking.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// Accepts: returns the session and the verdict message to send.
    pub fn accept(self, now: Instant) -> Result<(Session, Vec<Vec<u8>>), HandshakeError> {
        let mut session = Session::new(self.transport, self.peer, self.config, now);
        let verdict = session.seal_kind(Kind::Verdict, &[VERDICT_ACCEPTED], now)?;
        Ok((session, verdict))
    }

    /// The key is known but not accepted yet (Salt's "pending"): returns the verdict message to
    /// send before closing.
    pub fn defer(self, reason: &str, now: Instant) -> Result<Vec<Vec<u8>>, HandshakeError> {
        self.refuse(VERDICT_PENDING, reason, now)
    }

    /// The key is refused: returns the verdict message to send before closing.
    pub fn reject(self, reason: &str, now: Instant) -> Result<Vec<Vec<u8>>, HandshakeError> {
        self.refuse(VERDICT_REJECTED, reason, now)
    }

    fn refuse(self, code: u8, reason: &str, now: Instant) -> Result<Vec<Vec<u8>>, HandshakeError> {
        let mut session = Session::new(self.transport, self.peer, self.config, now);
        let mut body = Vec::with_capacity(1 + reason.len());
        body.push(code);
        body.extend_from_slice(reason.as_bytes());
        Ok(session.seal_kind(Kind::Verdict, &body, now)?)
    }
}
