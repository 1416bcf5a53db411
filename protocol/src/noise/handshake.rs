//! The XX handshake as consuming states (see the diagram in the module docs).

use std::time::Instant;

use snow::HandshakeState;

use super::local::{params, LocalIdentity};
use super::session::{Kind, Session};
use super::{
    Claim, HandshakeError, MasterCertificate, MasterPin, Peer, Role, SessionConfig, CERTIFICATE_LEN, MAX_NOISE_MESSAGE,
    PROLOGUE, STATIC_KEY_DOMAIN, WIRE_VERSION,
};
use crate::identity::PublicIdentity;

/// Fixed part of the identity payload: role (1) || ed25519 public key (32) || signature over the
/// static key (64). The claimed name and an optional enrollment token follow (§4.3).
const IDENTITY_FIXED_LEN: usize = 97;

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

fn identity_payload(local: &LocalIdentity, role: Role, claim: &Claim) -> Vec<u8> {
    let token = claim.token.as_deref().unwrap_or("");
    let mut payload = Vec::with_capacity(IDENTITY_FIXED_LEN + 2 + claim.name.len() + token.len());
    payload.push(role.to_byte());
    payload.extend_from_slice(local.binding());
    // `Claim::new` bounds both strings to 255 bytes.
    payload.push(claim.name.len() as u8);
    payload.extend_from_slice(claim.name.as_bytes());
    payload.push(token.len() as u8);
    payload.extend_from_slice(token.as_bytes());
    // A master of a cluster ends its payload with its certificate (a fixed length, so an older
    // initiator's "nothing may follow" check is the only thing it would trip).
    if role == Role::Master {
        if let Some(certificate) = local.certificate() {
            payload.extend_from_slice(&certificate.to_bytes());
        }
    }
    payload
}

/// Checks a peer's identity payload against the static key Noise authenticated.
fn verify_identity(hs: &HandshakeState, payload: &[u8]) -> Result<(Peer, Option<String>), HandshakeError> {
    if payload.len() < IDENTITY_FIXED_LEN + 2 {
        return Err(HandshakeError::Malformed("identity payload too short"));
    }
    let (fixed, rest) = payload.split_at(IDENTITY_FIXED_LEN);
    let role = Role::from_byte(fixed[0]).ok_or(HandshakeError::Malformed("unknown role"))?;
    let identity = PublicIdentity::from_bytes(&fixed[1..33])?;
    let remote_static = hs.get_remote_static().ok_or(HandshakeError::Malformed("no remote static key"))?;
    identity.verify(STATIC_KEY_DOMAIN, remote_static, &fixed[33..])?;
    let (name, rest) = short_string(rest)?;
    let (token, rest) = short_string(rest)?;
    let certificate = match rest.len() {
        0 => None,
        CERTIFICATE_LEN if role == Role::Master => Some(MasterCertificate::from_bytes(rest)?),
        _ => return Err(HandshakeError::Malformed("trailing bytes after the identity payload")),
    };
    let token = (!token.is_empty()).then(|| token.to_owned());
    Ok((Peer { identity, role, name: name.to_owned(), certificate }, token))
}

fn short_string(bytes: &[u8]) -> Result<(&str, &[u8]), HandshakeError> {
    let (&len, rest) = bytes.split_first().ok_or(HandshakeError::Malformed("identity payload truncated"))?;
    if rest.len() < usize::from(len) {
        return Err(HandshakeError::Malformed("identity payload truncated"));
    }
    let (text, rest) = rest.split_at(usize::from(len));
    let text = std::str::from_utf8(text).map_err(|_| HandshakeError::Malformed("name or token is not UTF-8"))?;
    Ok((text, rest))
}

/// The initiator (minion or client) before it has heard from the master.
pub struct Initiator {
    hs: HandshakeState,
    local: LocalIdentity,
    role: Role,
    claim: Claim,
    pin: MasterPin,
    config: SessionConfig,
    /// Master keys the cluster key revoked: refused even with a certificate.
    revoked: Vec<PublicIdentity>,
}

impl Initiator {
    /// Starts a handshake; returns the state and message 1 to send. `claim` (our name and an
    /// optional enrollment token) travels in message 3, encrypted to the authenticated master.
    pub fn start(
        local: &LocalIdentity,
        role: Role,
        claim: Claim,
        pin: MasterPin,
        config: SessionConfig,
    ) -> Result<(Self, Vec<u8>), HandshakeError> {
        if role == Role::Master {
            return Err(HandshakeError::WrongRole(role));
        }
        let mut hs = builder(local)?.build_initiator()?;
        // Message 1 is sent in the clear: its payload stays empty.
        let msg1 = write(&mut hs, &[])?;
        Ok((Initiator { hs, local: local.clone(), role, claim, pin, config, revoked: Vec::new() }, msg1))
    }

    /// Refuses these master keys even when a certificate from the pinned key vouches for
    /// them (revocations the initiator has received).
    pub fn refusing(mut self, revoked: Vec<PublicIdentity>) -> Self {
        self.revoked = revoked;
        self
    }

    /// Reads message 2, checks the master's identity against the pin, and returns message 3
    /// (our identity, now encrypted to the authenticated master).
    pub fn read_response(mut self, msg2: &[u8]) -> Result<(AwaitingVerdict, Vec<u8>), HandshakeError> {
        let payload = read(&mut self.hs, msg2)?;
        let (master, _) = verify_identity(&self.hs, &payload)?;
        if master.role != Role::Master {
            return Err(HandshakeError::WrongRole(master.role));
        }
        if let MasterPin::Key(pinned) = &self.pin {
            if *pinned != master.identity {
                let unexpected = || HandshakeError::UnexpectedPeer {
                    expected: pinned.fingerprint(),
                    got: master.identity.fingerprint(),
                };
                let certificate =
                    master.certificate.as_ref().filter(|c| c.cluster == *pinned).ok_or_else(unexpected)?;
                certificate.verify(&master.identity, &master.name).map_err(|_| unexpected())?;
                if self.revoked.contains(&master.identity) {
                    return Err(HandshakeError::Revoked(master.identity.fingerprint()));
                }
            }
        }
        let msg3 = write(&mut self.hs, &identity_payload(&self.local, self.role, &self.claim))?;
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
    name: Claim,
    config: SessionConfig,
}

impl Responder {
    /// Prepares to answer one connection; `name` is the master's id, sent in message 2.
    pub fn new(local: &LocalIdentity, name: Claim, config: SessionConfig) -> Result<Self, HandshakeError> {
        let hs = builder(local)?.build_responder()?;
        Ok(Responder { hs, local: local.clone(), name, config })
    }

    /// Reads message 1 and returns message 2, which carries the master's identity.
    pub fn read_hello(mut self, msg1: &[u8]) -> Result<(AwaitingIdentity, Vec<u8>), HandshakeError> {
        let payload = read(&mut self.hs, msg1)?;
        if !payload.is_empty() {
            return Err(HandshakeError::Malformed("message 1 must have an empty payload"));
        }
        let msg2 = write(&mut self.hs, &identity_payload(&self.local, Role::Master, &self.name))?;
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
        let (peer, enrollment_token) = verify_identity(&self.hs, &payload)?;
        if peer.role == Role::Master {
            return Err(HandshakeError::WrongRole(peer.role));
        }
        let transport = self.hs.into_stateless_transport_mode()?;
        Ok(IdentifiedPeer { transport, peer, enrollment_token, config: self.config })
    }
}

/// An authenticated initiator awaiting the master's decision. No application data can flow
/// until [`IdentifiedPeer::accept`] returns a session.
pub struct IdentifiedPeer {
    transport: snow::StatelessTransportState,
    peer: Peer,
    enrollment_token: Option<String>,
    config: SessionConfig,
}

impl IdentifiedPeer {
    /// Who is asking: identity, role and the name it claims (not yet checked against anything).
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The one-time enrollment token the initiator presented, if any.
    pub fn enrollment_token(&self) -> Option<&str> {
        self.enrollment_token.as_deref()
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
