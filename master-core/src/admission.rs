//! Connections through the handshake to a session: each stage of the Noise handshake, the
//! key registry's decision for a minion (accepted, pending, refused, busy), principals for
//! clients. A session's messages are opened by the session itself (`Sessions::open`).
//!
//! Nothing here acts on the master: the loop lends an [`AdmissionDesk`] (the sessions, the
//! registry's accepted keys, the refusal counters; the config and identities, read-only) and
//! carries out the [`Effect`]s it returns: handshake messages and verdicts out, connections
//! closed or forgotten, sessions opened, messages handed on (`Core::with_admission_desk`).

use std::sync::Arc;
use std::time::Duration;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::noise::{Claim, IdentifiedPeer, LocalIdentity, Responder, Role, SessionConfig};
use halite_transport::{Lane, PeerId};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::acl::NoticeThrottle;
use crate::clock::Now;
use crate::config::MasterConfig;
use crate::core::registry::Registry;
use crate::core::sessions::{Conn, Sessions};
use crate::keys::Decision;
use crate::metrics::Metrics;
use crate::outputs::asks::{Admitting, Ask};
use crate::outputs::effects::{Effect, Effects};
use crate::store::{ClusterChange, StoreError};

/// Handshake outcomes as counted (`refused` includes keys told to wait for acceptance).
const ACCEPTED: crate::metrics::Outcome = crate::metrics::Outcome { outcome: "accepted" };
const REFUSED: crate::metrics::Outcome = crate::metrics::Outcome { outcome: "refused" };

/// What connections are admitted with: what that changes, and what it reads.
pub struct AdmissionDesk<'a> {
    pub config: &'a MasterConfig,
    pub identity: &'a LocalIdentity,
    /// Root's key.
    pub root: &'a PublicIdentity,
    pub sessions: &'a mut Sessions,
    pub registry: &'a mut Registry,
    pub notices: &'a mut NoticeThrottle,
    /// Unknown keys turned away by the pending-key limits since start.
    pub keys_refused: &'a mut u64,
    pub metrics: &'a Metrics,
    /// The time, read when a decision needs it.
    pub now: Now,
    pub out: Effects,
}

impl AdmissionDesk<'_> {
    /// Handshake bytes (unsealed) for a connection.
    fn send_parts(&mut self, peer: PeerId, parts: Vec<Vec<u8>>) {
        self.out.push(Effect::SendParts { peer, parts });
    }

    fn drop_peer(&mut self, peer: PeerId, reason: &str) {
        debug!(peer = peer.0, reason, "handshake failed");
        self.out.forget(peer, reason);
    }

    /// A message on a connection still in its handshake: the handshake's next stage.
    pub fn on_handshake(&mut self, peer: PeerId, parts: Vec<Vec<u8>>) {
        match self.sessions.remove(&peer) {
            Some(Conn::AwaitHello { .. }) => {
                let result = Claim::new(&self.config.id, None)
                    .and_then(|claim| Responder::new(self.identity, claim, SessionConfig::default()))
                    .and_then(|r| r.read_hello(single(&parts)?));
                match result {
                    Ok((state, msg2)) => {
                        self.send_parts(peer, vec![msg2]);
                        let now = self.now.at;
                        self.sessions.insert(peer, Conn::AwaitIdentity { state: Box::new(state), since: now });
                        self.sessions.watch(peer, now + self.config.handshake_timeout());
                    }
                    Err(error) => self.drop_peer(peer, &error.to_string()),
                }
            }
            Some(Conn::AwaitIdentity { state, .. }) => match state.read_identity(single(&parts).unwrap_or_default()) {
                Ok(identified) => self.admit(peer, identified),
                Err(error) => self.drop_peer(peer, &error.to_string()),
            },
            // Only a connection in its handshake is handed here (`Sessions::open`).
            Some(other) => self.sessions.insert(peer, other),
            None => {}
        }
    }

    /// A peer that proved its identity: a client is admitted (or refused) on the principals
    /// known here; a minion whose key is not accepted here waits on the key registry's verdict
    /// ([`AdmissionDesk::key_decided`]).
    pub fn admit(&mut self, peer: PeerId, identified: IdentifiedPeer) {
        let now = self.now.at;
        let who = identified.peer().clone();
        match who.role {
            Role::Client => {
                let acl = if who.identity == *self.root && who.name == "root" {
                    Some(None)
                } else {
                    self.registry
                        .principal(&who.name)
                        .filter(|p| p.public_key == *who.identity.as_bytes())
                        .map(|p| Some(Arc::new(p.acl.clone())))
                };
                if let Some(acl) = acl {
                    if let Ok((session, verdict)) = identified.accept(now) {
                        // People and engines wait on their answers: read before minions' bulk.
                        self.out.push(Effect::MarkAuthenticated { peer, lane: Lane::Priority });
                        self.send_parts(peer, verdict);
                        self.sessions.insert(peer, Conn::Client { principal: who.name, acl, session, greeted: false });
                        self.metrics.get().handshakes.get_or_create(&ACCEPTED).inc();
                    }
                } else {
                    warn!(principal = %who.name, fingerprint = %who.identity.fingerprint(), "unknown client refused");
                    self.refuse(peer, identified.reject("unknown principal", now));
                }
            }
            Role::Minion => {
                let id = who.name.clone();
                if let Err(error) = halite_protocol::id::validate(&id) {
                    warn!(%error, "minion with an invalid id refused");
                    self.refuse(peer, identified.reject(&format!("invalid minion id: {error}"), now));
                    return;
                }
                let admitting = Admitting { peer, identified, id };
                if self.registry.is_accepted(&admitting.id, who.identity.as_bytes()) {
                    self.key_decided(admitting, Ok(Decision::Accept));
                } else {
                    self.out.ask(Ask::KeyDecision(Box::new(admitting)));
                }
            }
            Role::Master => self.refuse(peer, identified.reject("a master cannot connect as a peer", now)),
        }
    }

    /// The key registry's verdict on a minion's key: it gets a session, waits for acceptance,
    /// or is refused. No verdict (the store failed) closes the connection: the minion knocks
    /// again later rather than wait on a connection nobody holds.
    pub fn key_decided(&mut self, admitting: Admitting, decided: Result<Decision, StoreError>) {
        let decision = match decided {
            Ok(decision) => decision,
            Err(error) => return self.no_verdict(admitting.peer, &error),
        };
        let Admitting { peer, identified, id } = admitting;
        let now = self.now.at;
        let who = identified.peer().clone();
        // The old key's session, when the new key replaced it.
        let mut old_cut = false;
        match decision {
            Decision::Accept | Decision::Replaced => {
                if !self.registry.is_accepted(&id, who.identity.as_bytes()) {
                    let fingerprint = who.identity.fingerprint();
                    if decision == Decision::Replaced {
                        // Only a token an administrator made with --replace does this.
                        // The old key's session here ends now, as on the other masters.
                        self.out.push(Effect::CutMinion { id: id.clone() });
                        old_cut = true;
                        warn!(minion = %id, %fingerprint, "an enrollment token replaced the minion's accepted key");
                        self.out.emit_shared(
                            format!("halite/key/{id}/replaced"),
                            json!({ "fingerprint": fingerprint, "by": "token" }),
                        );
                    } else {
                        info!(minion = %id, "minion enrolled with a token");
                    }
                    self.registry.accept(&id, *who.identity.as_bytes());
                    // Enrolling denied any other key of the id: a session with it on
                    // another master ends there.
                    self.out.tell(ClusterChange::Keys { ids: Some(vec![id.clone()]) });
                    self.out.emit_shared(
                        format!("halite/key/{id}/accepted"),
                        json!({ "fingerprint": fingerprint, "by": "token" }),
                    );
                }
                let Ok((session, verdict)) = identified.accept(now) else { return };
                // A minion's returns are bulk: a fan-out's burst of them must not queue
                // an administrator's request behind it. Moved before the verdict leaves,
                // so that all the minion sends once it has the verdict is on bulk.
                self.out.push(Effect::MarkAuthenticated { peer, lane: Lane::Bulk });
                self.send_parts(peer, verdict);
                if let Some(old) = self.sessions.peer_of(&id).filter(|_| !old_cut) {
                    if old != peer {
                        // A minion that lost its connection reconnects, and the new
                        // session wins; two live processes with one key (a cloned
                        // image) would replace each other forever: say so, loudly.
                        if self.notices.ready(&format!("duplicate:{id}"), Duration::from_secs(10), now) {
                            warn!(minion = %id, "a second session for this minion replaces the first; \
                                   two processes sharing one key and id will replace each other");
                            self.out.emit_shared(format!("halite/minion/{id}/replaced"), json!({}));
                        }
                        self.out.forget(old, halite_protocol::noise::REPLACED_REASON);
                    }
                }
                // Online once the session it replaces is forgotten.
                info!(minion = %id, "minion authenticated");
                self.metrics.get().handshakes.get_or_create(&ACCEPTED).inc();
                self.out.push(Effect::MinionOnline { peer, id, session: Box::new(session) });
            }
            Decision::Pending => {
                let admitting = Admitting { peer, identified, id };
                if admitting.identified.enrollment_token().is_some() {
                    // A token that did not enroll the minion is why it waits: both sides say so.
                    self.out.ask(Ask::TokenProblem(Box::new(admitting)));
                } else {
                    self.pending_explained(admitting, Ok(None));
                }
            }
            Decision::Reject(reason) => {
                let verdict = identified.reject(&reason, now);
                self.refuse_and_park(peer, &id, verdict);
            }
            Decision::Busy(reason) => {
                *self.keys_refused += 1;
                warn!(minion = %id, "{reason}");
                if self.notices.ready("halite/key/refused", Duration::from_secs(1), now) {
                    self.out.emit_shared(
                        "halite/key/refused".into(),
                        json!({ "id": id, "reason": reason, "refused_total": *self.keys_refused }),
                    );
                }
                self.refuse(peer, identified.defer(&reason, now));
            }
            Decision::Denied => {
                warn!(minion = %id, fingerprint = %who.identity.fingerprint(),
                      "a different key for a known minion id was denied");
                self.out.emit_shared(
                    format!("halite/key/{id}/denied"),
                    json!({ "fingerprint": who.identity.fingerprint() }),
                );
                self.refuse(peer, identified.reject("denied: another key is registered for this id", now));
            }
        }
    }

    /// A minion's key waits for acceptance, with the `problem` of the enrollment token it
    /// presented, if any: told to it and on the bus, then its connection is parked.
    pub fn pending_explained(&mut self, admitting: Admitting, problem: Result<Option<String>, StoreError>) {
        let problem = match problem {
            Ok(problem) => problem,
            Err(error) => return self.no_verdict(admitting.peer, &error),
        };
        let Admitting { peer, identified, id } = admitting;
        let fingerprint = identified.peer().identity.fingerprint();
        let reason = match &problem {
            Some(problem) => format!("key pending acceptance: {problem}"),
            None => "key pending acceptance".to_owned(),
        };
        info!(minion = %id, %fingerprint, %reason, "minion key pending");
        self.out
            .emit_shared(format!("halite/key/{id}/pending"), json!({ "fingerprint": fingerprint, "reason": reason }));
        let verdict = identified.defer(&reason, self.now.at);
        self.refuse_and_park(peer, &id, verdict);
    }

    /// No verdict could be reached on a handshake (the store failed): the peer knocks again
    /// later, rather than wait on a connection nobody holds any more.
    fn no_verdict(&mut self, peer: PeerId, error: &StoreError) {
        warn!(%error, "store failure while handling a message");
        if !self.sessions.contains(&peer) {
            let why = "the master's store is unavailable; try again".to_owned();
            self.out.push(Effect::Disconnect { peer, why });
        }
    }

    /// Sends a refusal verdict, then closes.
    fn refuse(&mut self, peer: PeerId, verdict: Result<Vec<Vec<u8>>, halite_protocol::noise::HandshakeError>) {
        self.send_refusal(peer, verdict, false);
    }

    /// Sends minion `id` a pending or rejected verdict and parks its connection: closed once
    /// its key is accepted (`Master::release_parked`), so the minion knocks again at once
    /// instead of after its backoff. One parked connection per id.
    fn refuse_and_park(
        &mut self,
        peer: PeerId,
        id: &str,
        verdict: Result<Vec<Vec<u8>>, halite_protocol::noise::HandshakeError>,
    ) {
        if verdict.is_ok() {
            if let Some(older) = self.sessions.park(id, peer) {
                self.out.forget(older, "not accepted");
            }
        }
        self.send_refusal(peer, verdict, true);
    }

    fn send_refusal(
        &mut self,
        peer: PeerId,
        verdict: Result<Vec<Vec<u8>>, halite_protocol::noise::HandshakeError>,
        parked: bool,
    ) {
        self.metrics.get().handshakes.get_or_create(&REFUSED).inc();
        match verdict {
            Ok(parts) => {
                self.send_parts(peer, parts);
                // Closed once the verdict has had time to arrive (see `Conn::Refused`).
                let now = self.now.at;
                self.sessions.insert(peer, Conn::Refused { since: now, parked });
                self.sessions.watch(peer, now + crate::core::sessions::linger(parked));
            }
            Err(_) => self.out.push(Effect::Disconnect { peer, why: "not accepted".to_owned() }),
        }
    }
}

/// The one part of a handshake message.
fn single(parts: &[Vec<u8>]) -> Result<&[u8], halite_protocol::noise::HandshakeError> {
    match parts {
        [one] => Ok(one),
        _ => Err(halite_protocol::noise::HandshakeError::Malformed("handshake messages have one part")),
    }
}
