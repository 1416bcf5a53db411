//! The session with a master: the Noise handshake's stages, who to try next when one will not
//! do, refusal back-off, `hello` and `welcome` (the master's time), and the messages a session
//! carries, handed to `jobs.rs` and `requests.rs`.

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{self, Hello, JobReturn, Message, ModuleInfo, Outcome};
use halite_protocol::noise::{
    AwaitingVerdict, Claim as HandshakeClaim, HandshakeError, Initiator, MasterPin, Role, Session, SessionConfig,
    KEY_ACCEPTED_REASON, REPLACED_REASON,
};
use halite_protocol::zmtp::ZmtpError;
use halite_transport::CloseReason;
use tracing::{debug, error, info, warn};

use super::{Effect, MinionCore};

/// Where the handshake is.
pub(super) enum Stage {
    /// No ZMTP connection.
    Down,
    /// Message 1 sent.
    AwaitResponse(Box<Initiator>),
    /// Message 3 sent.
    AwaitVerdict(Box<AwaitingVerdict>),
    /// Authenticated.
    Up(Box<Session>),
    /// Told pending or rejected; the connection is kept until the master closes it (see
    /// [`MinionCore::park`]).
    Parked,
}

impl MinionCore {
    /// A new link, tried from the first master of the list.
    pub(super) fn connect(&mut self) {
        self.effects.push(Effect::Connect);
        self.linked = true;
        self.stage = Stage::Down;
    }

    /// This master will not do: the next one of the list is tried at once, and once every
    /// one has failed in a row the minion backs off.
    fn next_master(&mut self, reason: &str) {
        self.handshake_failures += 1;
        self.stage = Stage::Down;
        if self.linked && self.handshake_failures < self.masters {
            self.effects.push(Effect::MoveOn(reason.to_owned()));
        } else {
            self.handshake_failures = 0;
            self.back_off();
        }
    }

    /// Drops the connection and knocks again later (the master said pending or rejected).
    fn back_off(&mut self) {
        self.drop_link();
        self.retry_at = Some(self.now + self.refusals.next_delay());
    }

    fn drop_link(&mut self) {
        self.effects.push(Effect::DropLink);
        self.linked = false;
        self.stage = Stage::Down;
    }

    /// The master said pending or rejected: the connection stays open, and the master closes
    /// it once the key is accepted (the link then connects again at once); the minion knocks
    /// again after its backoff anyway.
    fn park(&mut self) {
        self.stage = Stage::Parked;
        self.retry_at = Some(self.now + self.refusals.next_delay());
    }

    /// A connection is up: message 1 of the handshake.
    pub(super) fn connected(&mut self) {
        let pin = match self.master_key {
            Some(key) => MasterPin::Key(key),
            None => MasterPin::TrustOnFirstUse,
        };
        let claim = match HandshakeClaim::new(&self.id, self.token.as_deref()) {
            Ok(claim) => claim,
            Err(error) => return error!(%error, "cannot claim this id"),
        };
        match Initiator::start(&self.identity, Role::Minion, claim, pin, SessionConfig::default()) {
            Ok((initiator, msg1)) => {
                let initiator = initiator.refusing(self.revocations.keys());
                self.stage = Stage::AwaitResponse(Box::new(initiator));
                self.send_raw(vec![msg1]);
            }
            Err(error) => error!(%error, "cannot start a handshake"),
        }
    }

    pub(super) fn disconnected(&mut self, reason: CloseReason) {
        let replaced = matches!(&reason, CloseReason::Protocol(ZmtpError::PeerError(why)) if why == REPLACED_REASON);
        if replaced {
            // Another process with this minion's key and id took the session: reconnecting
            // at once would only take it back, forever. Back off, and say so.
            warn!("another process with this minion's key and id connected to the master; backing off");
            return self.back_off();
        }
        let accepted =
            matches!(&reason, CloseReason::Protocol(ZmtpError::PeerError(why)) if why == KEY_ACCEPTED_REASON);
        if accepted {
            // Parked, and let in now: the link connects again at once.
            info!("the master accepted this minion's key; connecting again");
            self.retry_at = None;
            self.refusals.reset();
        } else if matches!(self.stage, Stage::Parked) {
            // Closed without a word of acceptance (a master that does not park, or the
            // wait is over): knocked again after the backoff, not at once.
            return self.drop_link();
        } else if self.is_up() {
            warn!(%reason, "disconnected from the master; reconnecting");
        }
        // Parts asked of that session will not come: their fetches fail now.
        self.requests.session_lost();
        if let Some(metrics) = &self.metrics {
            metrics.session(false);
        }
        self.stage = Stage::Down;
    }

    pub(super) fn on_message(&mut self, parts: Vec<Vec<u8>>) {
        match std::mem::replace(&mut self.stage, Stage::Down) {
            Stage::Down | Stage::Parked => {}
            Stage::AwaitResponse(initiator) => {
                let Some(msg2) = parts.first() else { return };
                match initiator.read_response(msg2) {
                    Ok((awaiting, msg3)) => {
                        self.master_now = Some(awaiting.master().identity);
                        self.pin_master(awaiting.master().identity);
                        self.stage = Stage::AwaitVerdict(Box::new(awaiting));
                        self.send_raw(vec![msg3]);
                    }
                    Err(error) => {
                        error!(%error, "master handshake failed");
                        self.next_master("master handshake failed");
                    }
                }
            }
            Stage::AwaitVerdict(awaiting) => match awaiting.read_verdict(&parts, self.now) {
                Ok(session) => {
                    info!(id = %self.id, "authenticated to the master");
                    if let Some(metrics) = &self.metrics {
                        metrics.session(true);
                    }
                    self.refusals.reset();
                    self.retry_at = None;
                    self.handshake_failures = 0;
                    self.stage = Stage::Up(Box::new(session));
                    if self.linked {
                        self.effects.push(Effect::MarkAuthenticated);
                    }
                    self.hello();
                }
                Err(HandshakeError::Pending(reason)) => {
                    info!(%reason, "waiting for the master to accept this minion's key");
                    self.park();
                }
                Err(error @ HandshakeError::Rejected(_)) => {
                    error!(%error, "the master refused this minion");
                    self.park();
                }
                Err(error) => {
                    error!(%error, "the master refused this minion");
                    self.back_off();
                }
            },
            Stage::Up(mut session) => {
                let opened = session.open(&parts, self.now);
                self.stage = Stage::Up(session);
                match opened.map_err(message::UnreadableMessage::from).and_then(|b| Ok(message::decode_for_minion(&b)?))
                {
                    Ok(msg) => self.on_session_message(msg),
                    Err(error) => warn!(%error, "undecodable message from the master"),
                }
            }
        }
    }

    fn pin_master(&mut self, key: PublicIdentity) {
        if self.master_key.is_none() {
            warn!(fingerprint = %key.fingerprint(), "trusting the master key on first use and pinning it");
            if let Err(error) = halite_transport::keyfile::write_public(&self.pin_path, &key) {
                error!(%error, "could not pin the master key");
            }
            self.master_key = Some(key);
        }
    }

    /// Announces this minion, then sends again every return the master has not acknowledged.
    pub(super) fn hello(&mut self) {
        let dispatcher = &self.dispatcher;
        let functions: Vec<String> = dispatcher
            .registry
            .iter()
            .map(|f| f.name().to_owned())
            .filter(|name| dispatcher.policy.check(name, "*", dispatcher.registry.is_action(name)).is_ok())
            .collect();
        let mut modules: Vec<String> =
            functions.iter().filter_map(|f| f.split_once('.')).map(|(m, _)| m.to_owned()).collect();
        modules.dedup();
        let hello = Hello {
            id: self.id.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            grains: self.grains.as_ref().clone(),
            modules: modules
                .into_iter()
                .map(|name| ModuleInfo { name, version: env!("CARGO_PKG_VERSION").into() })
                .collect(),
            functions,
            installed: dispatcher.registry.iter().map(|f| f.name().to_owned()).collect(),
        };
        self.hello_sent_at = Some(self.now);
        self.send(&Message::Hello(hello));
        // Returns the master has not acknowledged yet, from before a restart or a disconnect.
        self.send_unacknowledged();
    }

    /// Sends every return the master has not acknowledged: those in the outbox, then those
    /// only in memory (the disk refused them).
    fn send_unacknowledged(&mut self) {
        for ret in self.outbox.pending() {
            debug!(jid = %ret.jid, "re-sending an unacknowledged return");
            self.send(&Message::JobReturn(crate::fit::fit(ret)));
        }
        let unsent: Vec<JobReturn> = self.unsent.values().cloned().collect();
        for ret in unsent {
            self.send(&Message::JobReturn(ret));
        }
    }

    /// Keeps the revocations a master told (those the pinned cluster key signed), and leaves
    /// this master if it is among them.
    fn learn_revocations(&mut self, revoked: &[String]) {
        if let Some(pinned) = self.master_key {
            self.revocations.learn(revoked, &pinned);
        }
        if self.master_now.is_some_and(|m| self.revocations.contains(&m)) {
            warn!("this master's key was revoked by the cluster key; moving to another master");
            self.next_master("master key revoked");
        }
    }

    fn on_session_message(&mut self, msg: Message) {
        match msg {
            Message::Welcome(welcome) => {
                // Dated from the hello it answers, never later: the master's time can then only be
                // overestimated (by a round trip), so a job is never thought fresher than it is.
                // One that answers no hello (the master telling of revocations it has just read,
                // or a second answer) dates nothing: only its revocations are taken, and a hello
                // waiting for its answer keeps waiting.
                let Some(asked) = self.hello_sent_at.filter(|_| !welcome.revocations_only) else {
                    return self.learn_revocations(&welcome.revoked);
                };
                self.hello_sent_at = None;
                debug!(master = %welcome.master_id, "welcomed");
                let waited = self.now.saturating_duration_since(asked);
                // A welcome long after its hello says little: the minion may have stopped before
                // its hello left (the master's time is then later than the hello) or after the
                // welcome came (it is not). Asked again, jobs waiting for the answer (and sent
                // again after it); past a few tries the hello's time is kept, which only ever
                // refuses a job, never runs a late one.
                if waited > crate::freshness::WELCOME_WITHIN && self.slow_welcomes < 3 {
                    self.slow_welcomes += 1;
                    debug!(waited_ms = waited.as_millis() as u64, "a slow welcome; asking the master's time again");
                    self.hello();
                    return;
                }
                self.slow_welcomes = 0;
                self.master_time = crate::freshness::MasterTime::learned(welcome.now_ms, asked);
                self.learn_revocations(&welcome.revoked);
            }
            Message::Job(signed) => self.on_job(signed),
            Message::ReturnAck(ack) => self.acknowledged(&ack.jid),
            Message::ResendReturns(_) => {
                info!(unacknowledged = self.unacknowledged(), "the master asks for its returns again");
                self.send_unacknowledged();
            }
            Message::Cancel(cancel) => {
                // A running job keeps its place until its return comes back (`on_done`): the
                // process group takes a moment to die, and only then is its slot free.
                if self.running.contains(&cancel.jid) {
                    info!(jid = %cancel.jid, "cancelling");
                    self.effects.push(Effect::Cancel(cancel.jid));
                } else if self.queued.remove(&cancel.jid).is_some() {
                    info!(jid = %cancel.jid, "cancelled before it started");
                    let why = "cancelled before it started".to_owned();
                    self.on_done(super::jobs::not_started(&cancel.jid, Outcome::Cancelled, why));
                }
            }
            Message::Published(published) => self.requests.published(published),
            Message::FileChunk(chunk) => self.requests.file_chunk(chunk),
            Message::Error(error) => {
                if let Some(error) = self.requests.error(error) {
                    warn!(kind = ?error.kind, message = %error.message, "the master reported an error");
                }
            }
            other => debug!(?other, "ignored message"),
        }
    }
}
