//! What minions send once in session: hello (grains, within their cap), acknowledgements and
//! refusals of jobs, returns (stored before they are acknowledged, late ones kept), events
//! (checked against the `[[events]]` ACL, size and rate) and peer publishes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use halite_protocol::message::{ErrorKind, Event, JobReturn, Message, MinionJobState, Outcome, SignedJob, Welcome};
use halite_transport::{PeerId, SendError};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::authz::publish::Publisher;
use crate::limits;
use crate::net::Net;
use crate::server::Master;
use crate::store::Store;

impl<S: Store, N: Net> Master<S, N> {
    /// Handles a decoded message from an authenticated minion; `size` is its encoded length,
    /// which bounds what the caps below must measure.
    pub(crate) fn on_minion_message(&mut self, peer: PeerId, id: &str, msg: Message, size: usize) {
        match msg {
            Message::Hello(hello) => {
                if hello.id != id {
                    warn!(minion = id, claimed = %hello.id, "hello names another id; using the authenticated one");
                }
                let grains_size =
                    if size > self.config.max_grains_bytes { limits::json_size(&hello.grains) } else { 0 };
                let entry = self.registry.minion_mut(id);
                if grains_size > self.config.max_grains_bytes {
                    // Grains live in memory for every minion and are reloaded at each start:
                    // over the cap they are refused, and the minion keeps the ones stored.
                    let reason = format!(
                        "grains are {grains_size} bytes, more than the master's max_grains_bytes ({})",
                        self.config.max_grains_bytes
                    );
                    warn!(minion = id, "{reason}; keeping the grains stored before");
                    self.emit_shared(format!("halite/minion/{id}/grains_refused"), json!({ "reason": reason }));
                    self.send_error(peer, ErrorKind::BadRequest, reason, None);
                } else {
                    entry.grains = hello.grains;
                }
                let installed = self.registry.intern_installed(hello.installed);
                let entry = self.registry.minion_mut(id);
                entry.functions = hello.functions;
                entry.installed = installed;
                self.pending.put_minion(self.registry.seen(id, self.clock.wall_ms()));
                self.send(peer, &Message::Welcome(self.welcome()));
                self.emit_shared(format!("halite/minion/{id}/connected"), json!({}));
                // Everything unfinished goes again, in jid order: the backlog is part of it.
                self.undelivered.remove(id);
                for jid in self.jobs.deliverable_to(id) {
                    self.deliver(&jid, id, peer);
                }
            }
            Message::JobAck(ack) if ack.accepted => {
                self.slots().set(&ack.jid, id, MinionJobState::Running, None);
            }
            Message::JobAck(ack) => {
                let reason = if ack.reason.is_empty() { "the minion refused the job".to_owned() } else { ack.reason };
                self.slots().refused(&ack.jid, id, ErrorKind::Forbidden, reason);
            }
            Message::Error(error) => match error.request {
                // A refusal of a job names its jid; nothing else a minion reports needs an answer.
                Some(jid) => self.slots().refused(&jid, id, error.kind, error.message),
                None => {
                    warn!(minion = id, kind = ?error.kind, message = %error.message, "the minion reported an error")
                }
            },
            Message::JobReturn(mut ret) => {
                if self.store_in_doubt() || !self.pending.hold_return(size) {
                    // The store does not answer (or the bound is reached): this return stays in
                    // the minion's outbox, and the minion is asked for it again once the store
                    // answers and this master has reread it. Nothing is told meanwhile that the
                    // store might contradict.
                    if self.notices.ready("store:held_returns", std::time::Duration::from_secs(10), self.clock.now()) {
                        warn!(minion = id, jid = %ret.jid, "the store does not answer (or returns waiting for it reached their bound); returns left on the minions for now");
                    }
                    self.pending.owe(id);
                    return;
                }
                ret.minion = id.to_owned();
                if let Some(why) = limits::oversized_return(&ret, size, self.config.max_return_bytes) {
                    warn!(minion = id, jid = %ret.jid, "{why}");
                    limits::replace_oversized_return(&mut ret, &why);
                }
                let state = match ret.outcome {
                    Outcome::Completed if ret.success => MinionJobState::Returned,
                    Outcome::Completed | Outcome::Interrupted | Outcome::Refused => MinionJobState::Failed,
                    Outcome::TimedOut => MinionJobState::TimedOut,
                    Outcome::Cancelled => MinionJobState::Cancelled,
                    Outcome::Denied => MinionJobState::Denied,
                };
                let jid = ret.jid.clone();
                match self.jobs.state(&jid, id) {
                    Some(current) if !current.is_final() => self.slots().set(&jid, id, state, Some(ret)),
                    // The same end again (a minion that moved re-sends what was already stored):
                    // acknowledged, nothing more to tell.
                    Some(current) if current == state => {}
                    // After the slot ended (timed out, cancelled): kept as a late return beside
                    // the final state, never thrown away, and announced.
                    Some(_) => self.late_return(&jid, id, state, ret),
                    // The job is not live here: finished, or never sent to this minion. The
                    // store keeps it only where a slot of this minion exists (the write is an
                    // update of that row); nothing is announced, so a minion cannot put returns
                    // of jobs it never ran on anyone's bus.
                    None => {
                        info!(jid, minion = id, "return for a job not live here: acknowledged, not announced");
                        self.slots().record(&jid, id, state, Some(ret), true);
                    }
                }
                // Acknowledged only once stored (at the end of this step): the minion keeps it
                // in its outbox until then.
                self.pending.ack_once_stored(peer, jid);
            }
            Message::JobProgress(progress) => debug!(minion = id, jid = %progress.jid, "progress"),
            Message::Event(event) => self.on_minion_event(id, event),
            Message::FileGet(request) => match self.files.request(&self.config, peer, id, request) {
                Ok(read) => read.start(self.file_tx.clone()),
                Err(refused) => self.send(peer, &Message::Error(refused)),
            },
            Message::Publish(request) => {
                let caller = format!("minion:{id}");
                self.publish(peer, &caller, Publisher::Peer(id.to_owned()), request);
            }
            other => {
                let what = format!("{other:?}");
                let what = what.split('(').next().unwrap_or_default().to_owned();
                self.send_error(peer, ErrorKind::BadRequest, format!("{what} is not a minion message"), None);
            }
        }
    }

    /// What a minion (or client) is told when its session opens: this master, its version and
    /// time, and the masters the cluster key revoked.
    pub(crate) fn welcome(&self) -> Welcome {
        Welcome {
            master_id: self.config.id.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            now_ms: self.clock.wall_ms(),
            revoked: self.config.revoked_masters.clone(),
            revocations_only: false,
        }
    }

    /// Sends a live job to a connected minion and marks it sent.
    pub(crate) fn deliver(&mut self, jid: &str, minion: &str, peer: PeerId) {
        let grace = Duration::from_secs(self.config.timeout_grace_secs);
        let now = self.clock.now();
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
    pub(crate) fn job_message(&self, signed: &SignedJob, deadline: Option<Instant>) -> Message {
        let grace = Duration::from_secs(self.config.timeout_grace_secs);
        let start_by_ms = deadline.map(|deadline| {
            let left = deadline.saturating_duration_since(self.clock.now()).saturating_sub(grace);
            self.clock.wall_ms().saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
        });
        Message::Job(SignedJob { start_by_ms, ..signed.clone() })
    }

    /// Sends a job to a minion's connection; if its queue is full, the job waits in the
    /// minion's backlog and is sent again, in jid order, as the queue drains (a burst never
    /// loses a job message).
    pub(crate) fn send_job(&mut self, peer: PeerId, minion: &str, jid: &str, job: &Message) {
        let backlog = self.undelivered.get(minion).is_some_and(|b| !b.is_empty());
        if backlog || matches!(self.try_send(peer, job), Err(SendError::Full)) {
            self.undelivered.entry(minion.to_owned()).or_default().insert(jid.to_owned());
        }
    }

    /// Sends what waits in the minions' backlogs, each until its queue is full again.
    pub(crate) fn send_backlogs(&mut self) {
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

    /// A return for a slot that is already final: stored beside that state (which does not
    /// change), shown by `jobs show`, and announced on the bus once, as `late` (not `ret`:
    /// the slot's final state was told, and stays what it is).
    pub(crate) fn late_return(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: JobReturn) {
        info!(jid, minion, state = state.as_str(), "late return stored");
        if self.jobs.first_late_return(jid, minion) {
            self.emit_shared(format!("halite/job/{jid}/late/{minion}"), json!({ "state": state.as_str(), "ret": ret }));
        }
        self.slots().record(jid, minion, state, Some(ret), true);
    }

    /// A minion's `event.send`: checked against the `[[events]]` ACL, size and rate, then
    /// published under the minion's authenticated namespace. The tag and body are the minion's;
    /// the id is never taken from them.
    pub(crate) fn on_minion_event(&mut self, id: &str, event: Event) {
        let now = self.clock.now();
        match self.event_gate.minion_event(&self.config.events, id, &event.tag, &event.data, now) {
            Ok(()) => {
                self.emit_shared(format!("minion/{id}/{}", event.tag), json!({ "minion": id, "data": event.data }))
            }
            Err(reason) => {
                self.metrics.get().denied("event");
                debug!(minion = id, tag = %event.tag, reason, "minion event refused");
                if self.notices.ready(id, Duration::from_secs(1), now) {
                    let tag: String = event.tag.chars().take(255).collect();
                    let denied_total = self.event_gate.denied_total();
                    self.emit_shared(
                        "halite/acl/denied".into(),
                        json!({ "minion": id, "tag": tag, "reason": reason, "denied_total": denied_total }),
                    );
                }
            }
        }
    }
}
