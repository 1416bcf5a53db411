//! What the loop sends: events published on the bus (and shared with the other masters), and
//! messages sealed for a connection. Handlers call these; nothing here awaits: a message that
//! does not fit a peer's send queue is reported, never waited for.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use halite_protocol::message::{
    self, ErrorKind, ErrorMessage, Event, Message, MinionJobState, SignedJob, Value, Welcome,
};
use halite_transport::{PeerId, SendError};
use serde_json::json;
use tracing::warn;

use crate::authz::Who;
use crate::core::sessions::Conn;
use crate::limits;

use super::Core;

impl Core {
    /// Publishes an event on the bus here and, after this step's writes, on every master
    /// sharing the store: for events no other master derives itself (minion events, keys,
    /// deployments; a job's returns and end are derived by each master from its slots).
    pub fn emit_shared(&mut self, tag: String, data: Value) {
        self.cluster.share_event(&tag, &data);
        self.emit(tag, data);
    }

    /// Publishes an event on the bus. Each subscriber's queue is bounded: what does not fit is
    /// dropped and counted, and reported with a `halite/bus/dropped` notice once there is room.
    /// The concerns that listen to events (rollouts' and groups' `abort_on`, groups following
    /// their deployments) hear it later in the step, from the loop (`Master::hear_events`).
    pub fn emit(&mut self, tag: String, data: Value) {
        self.audit.event(&tag, &data, self.now.wall_ms);
        // Kept for the listeners only while one exists: a fan-out's returns are not copied for
        // nobody (a listener that starts later hears only what comes after it).
        if self.jobs.has_rollouts() || self.groups.listening() {
            self.hearing.event(tag.clone(), data.clone());
        }
        let seq = self.event_log.record(&tag, &data);
        if self.bus.is_empty() {
            return;
        }
        let mut recipients = self.bus.recipients(&tag);
        recipients.retain(|peer| self.peer_may_receive(*peer, &tag, &data));
        if recipients.is_empty() {
            return;
        }
        let event = Message::Event(Event { tag, data, id: Some(self.event_log.id(seq)) });
        for peer in recipients {
            let missed = self.bus.take_dropped(peer);
            if missed > 0 {
                let notice = Message::Event(Event {
                    tag: "halite/bus/dropped".into(),
                    data: json!({ "dropped": missed }),
                    id: None,
                });
                if self.try_send(peer, &notice).is_err() {
                    self.bus.restore_dropped(peer, missed);
                    self.bus.dropped(peer);
                    self.metrics.get().bus_dropped.inc();
                    continue;
                }
            }
            if self.try_send(peer, &event).is_err() {
                self.bus.dropped(peer);
                self.metrics.get().bus_dropped.inc();
            }
        }
    }

    /// Whether the client on `peer` may receive an event (its subscription patterns aside);
    /// whether it sees the event's job is remembered for as long as the job lives.
    pub fn peer_may_receive(&mut self, peer: PeerId, tag: &str, data: &Value) -> bool {
        let Some((name, acl)) = self.sessions.principal_on(peer) else { return false };
        let receipt = self.access().peer_receives(peer, Who { name: &name, acl: acl.as_deref() }, tag, data);
        if let Some((jid, visible)) = receipt.learned {
            self.jobs.remember_visibility(&jid, peer, visible);
        }
        receipt.allowed
    }

    /// Seals and queues a message for an authenticated peer, reporting a full queue. A session
    /// that can no longer seal (expired, nonces exhausted) ends the connection.
    pub fn try_send(&mut self, peer: PeerId, msg: &Message) -> Result<(), SendError> {
        self.audit.answered(peer, msg, self.now.wall_ms);
        if let Some(Conn::Local { tx, .. }) = self.sessions.get(&peer) {
            return tx.try_send(msg.clone());
        }
        let Some(conn) = self.sessions.get_mut(&peer) else { return Err(SendError::NotConnected) };
        // A client's messages of one step leave together at its end, in one write that wakes
        // it once (a publish's answer and first updates; a return's update and the job's end).
        // A minion's leave at once: its job is on the way of every fan-out.
        let held = matches!(conn, Conn::Client { .. });
        let Some(session) = conn.session_mut() else { return Err(SendError::NotConnected) };
        match session.seal(&message::encode(msg), self.now.at) {
            Ok(parts) if held => self.outlet.send_held(peer, parts),
            Ok(parts) => self.outlet.send(peer, parts),
            Err(error) => {
                warn!(peer = peer.0, %error, "session cannot seal; disconnecting");
                self.outlet.disconnect(peer, "session ended");
                Err(SendError::NotConnected)
            }
        }
    }

    /// [`Core::try_send`] for messages whose loss the peer recovers from (it retries, or its
    /// job times out): a full queue is logged, a vanished peer ignored.
    pub fn send(&mut self, peer: PeerId, msg: &Message) {
        if let Err(SendError::Full) = self.try_send(peer, msg) {
            warn!(peer = peer.0, "send queue full; message dropped");
        }
    }

    pub fn send_error(&mut self, peer: PeerId, kind: ErrorKind, message: String, request: Option<String>) {
        self.send(peer, &Message::Error(ErrorMessage { kind, message, request }));
    }

    /// Sends a resuming subscriber what it missed after event `after`: the logged events its
    /// patterns match and it may see, oldest first, after a `halite/bus/gap` notice if some
    /// may be missing. Each goes through the subscriber's bounded queue like a live event.
    pub fn replay_events(&mut self, peer: PeerId, patterns: &[String], after: &str) {
        let since = self.event_log.since(after);
        let gap = since.gap.clone();
        let events: Vec<(String, halite_protocol::message::Value, String)> = since
            .events
            .into_iter()
            .filter(|e| patterns.iter().any(|p| halite_protocol::glob::matches(p, &e.tag)))
            .map(|e| (e.tag.clone(), e.data(), self.event_log.id(e.seq)))
            .collect();
        if let Some(why) = gap {
            let notice = halite_protocol::message::Event {
                tag: "halite/bus/gap".into(),
                data: serde_json::json!({ "after": after, "reason": why }),
                id: None,
            };
            self.send(peer, &Message::Event(notice));
        }
        for (tag, data, id) in events {
            if !self.peer_may_receive(peer, &tag, &data) {
                continue;
            }
            if self
                .try_send(peer, &Message::Event(halite_protocol::message::Event { tag, data, id: Some(id) }))
                .is_err()
            {
                self.bus.dropped(peer);
                self.metrics.get().bus_dropped.inc();
            }
        }
    }

    /// Answers a client's request: with the response (in parts when large), or the error.
    pub fn reply(&mut self, peer: PeerId, request_id: u64, answer: crate::request_error::Reply) {
        match answer {
            Ok(body) => self.respond(peer, request_id, body),
            Err(error) => self.send_error(peer, error.kind, error.message, Some(request_id.to_string())),
        }
    }

    /// Answers a request; over a connection, a listing too large for one message goes in
    /// parts (`more`), each within the message cap, so no answer ever drops its client.
    pub fn respond(&mut self, peer: PeerId, request_id: u64, body: message::ResponseBody) {
        let parts = match self.sessions.get(&peer) {
            Some(Conn::Local { .. }) => vec![body],
            _ => body.into_parts(limits::MESSAGE_BUDGET),
        };
        let last = parts.len().saturating_sub(1);
        for (index, body) in parts.into_iter().enumerate() {
            self.send(peer, &Message::Response(message::Response { request_id, body, more: index < last }));
        }
    }

    /// What a minion (or client) is told when its session opens.
    pub fn welcome(&self) -> Welcome {
        crate::minion_messages::welcome(&self.config, self.now.wall_ms)
    }

    /// Sends a minion that said hello everything unfinished for it, in jid order: its backlog
    /// is part of it.
    pub fn deliver_all(&mut self, minion: &str, peer: PeerId) {
        self.undelivered.remove(minion);
        for jid in self.jobs.deliverable_to(minion) {
            self.deliver(&jid, minion, peer);
        }
    }

    /// Sends a live job to a connected minion and marks it sent.
    pub fn deliver(&mut self, jid: &str, minion: &str, peer: PeerId) {
        let grace = Duration::from_secs(self.config.timeout_grace_secs);
        let now = self.now.at;
        let Some(job) = self.jobs.get(jid) else { return };
        let deadline = job.run_deadline(now, grace);
        let signed = job.record.signed.clone();
        let was = self.jobs.state(jid, minion);
        if was.is_none_or(MinionJobState::is_final) {
            return;
        }
        self.jobs.set_deadline(jid, minion, deadline);
        let message = self.job_message(&signed, deadline);
        self.send_job(peer, minion, jid, &message);
        if was == Some(MinionJobState::Waiting) {
            self.slots().set(jid, minion, MinionJobState::Sent, None);
        }
    }

    /// A job as sent to a minion: signed as published, with the master's time by which the
    /// minion must start it (the slot's deadline less the grace the master waits for a late
    /// report), so a minion that gets it after the master may have given it up never runs it.
    pub fn job_message(&self, signed: &SignedJob, deadline: Option<Instant>) -> Message {
        let grace = Duration::from_secs(self.config.timeout_grace_secs);
        crate::core::jobs::job_message(signed, deadline, grace, self.now.at, self.now.wall_ms)
    }

    /// Sends a job to a minion's connection; if its queue is full, the job waits in the
    /// minion's backlog and is sent again, in jid order, as the queue drains (a burst never
    /// loses a job message).
    pub fn send_job(&mut self, peer: PeerId, minion: &str, jid: &str, job: &Message) {
        let backlog = self.undelivered.get(minion).is_some_and(|b| !b.is_empty());
        if backlog || matches!(self.try_send(peer, job), Err(SendError::Full)) {
            self.undelivered.entry(minion.to_owned()).or_default().insert(jid.to_owned());
        }
    }

    /// Sends what waits in the minions' backlogs, each until its queue is full again.
    pub fn send_backlogs(&mut self) {
        let minions: Vec<String> = self.undelivered.keys().cloned().collect();
        for minion in minions {
            let Some(peer) = self.sessions.peer_of(&minion) else {
                // Gone: everything unfinished is delivered again at its next hello.
                self.undelivered.remove(&minion);
                continue;
            };
            let jids: Vec<String> =
                self.undelivered.get(&minion).map(|b| b.iter().cloned().collect()).unwrap_or_default();
            for jid in jids {
                let live = self.jobs.state(&jid, &minion).is_some_and(|s| !s.is_final());
                let message = self.jobs.get(&jid).filter(|_| live).map(|job| {
                    let deadline = job.slots().get(&minion).and_then(|slot| slot.deadline);
                    self.job_message(&job.record.signed, deadline)
                });
                if let Some(message) = message {
                    if matches!(self.try_send(peer, &message), Err(SendError::Full)) {
                        break;
                    }
                }
                if let Some(backlog) = self.undelivered.get_mut(&minion) {
                    backlog.remove(&jid);
                }
            }
            if self.undelivered.get(&minion).is_some_and(BTreeSet::is_empty) {
                self.undelivered.remove(&minion);
            }
        }
    }
}
