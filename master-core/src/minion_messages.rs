//! What minions send once in session: hello (grains, within their cap), acknowledgements and
//! refusals of jobs, returns (stored before they are acknowledged, late ones kept), events
//! (checked against the `[[events]]` ACL, size and rate) and peer publishes.
//!
//! Nothing here acts on the master but through its desk: the loop lends a [`MinionDesk`] (what
//! a minion's messages change: its registry entry, its jobs' slots through [`SlotMoves`] with
//! what the next commit writes, the event gate, the files served; the config, read-only) and
//! carries out the [`Effect`]s it returns: sends, events, deliveries and publishes
//! (`Core::with_minion_desk`).

use std::time::Duration;

use halite_protocol::message::{ErrorKind, Event, JobReturn, Message, MinionJobState, Outcome, Welcome};
use halite_transport::PeerId;
use serde_json::json;
use tracing::{debug, info, warn};

use crate::acl::NoticeThrottle;
use crate::authz::publish::Publisher;
use crate::clock::Now;
use crate::config::MasterConfig;
use crate::core::event_gate::EventGate;
use crate::core::registry::Registry;
use crate::core::slot_moves::SlotMoves;
use crate::file_reads::FileServer;
use crate::file_scope::FileScope;
use crate::limits;
use crate::metrics::Metrics;
use crate::outputs::effects::{Effect, Effects};

/// What a minion's messages are handled with: what they change, and what they read.
pub struct MinionDesk<'a> {
    pub config: &'a MasterConfig,
    pub registry: &'a mut Registry,
    /// The live jobs' slots, moved only through it, with what the next commit writes.
    pub slots: SlotMoves<'a>,
    pub event_gate: &'a mut EventGate,
    pub notices: &'a mut NoticeThrottle,
    pub files: &'a mut FileServer,
    pub metrics: &'a Metrics,
    /// Whether the store may not hold what this master believes written: returns then stay
    /// on the minions.
    pub store_in_doubt: bool,
    /// The time, read when a decision needs it.
    pub now: Now,
    pub out: Effects,
}

/// What a minion (or client) is told when its session opens: this master, its version and
/// time, and the masters the cluster key revoked.
pub fn welcome(config: &MasterConfig, wall_ms: u64) -> Welcome {
    Welcome {
        master_id: config.id.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        now_ms: wall_ms,
        revoked: config.revoked_masters.clone(),
        revocations_only: false,
    }
}

impl MinionDesk<'_> {
    /// A minion's `file_get` within its scope: the read to start, or the refusal to answer.
    fn file_get(&mut self, peer: PeerId, id: &str, scope: FileScope, request: halite_protocol::message::FileGet) {
        match self.files.request(self.config, peer, id, scope, request) {
            Ok(read) => self.out.push(Effect::ReadFile(Box::new(read))),
            Err(refused) => self.out.send(peer, Message::Error(refused)),
        }
    }

    /// Handles a decoded message from an authenticated minion; `size` is its encoded length,
    /// which bounds what the caps below must measure.
    pub fn on_minion_message(&mut self, peer: PeerId, id: &str, msg: Message, size: usize) {
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
                    self.out.emit_shared(format!("halite/minion/{id}/grains_refused"), json!({ "reason": reason }));
                    self.out.send_error(peer, ErrorKind::BadRequest, reason, None);
                } else {
                    entry.grains = hello.grains;
                }
                let installed = self.registry.intern_installed(hello.installed);
                let entry = self.registry.minion_mut(id);
                entry.functions = hello.functions;
                entry.installed = installed;
                self.slots.writes().put_minion(self.registry.seen(id, self.now.wall_ms));
                self.out.send(peer, Message::Welcome(welcome(self.config, self.now.wall_ms)));
                self.out.emit_shared(format!("halite/minion/{id}/connected"), json!({}));
                // Everything unfinished goes again, in jid order: the backlog is part of it.
                self.out.push(Effect::DeliverAll { minion: id.to_owned(), peer });
            }
            Message::JobAck(ack) if ack.accepted => self.slots.set(&ack.jid, id, MinionJobState::Running, None),
            Message::JobAck(ack) => {
                let reason = if ack.reason.is_empty() { "the minion refused the job".to_owned() } else { ack.reason };
                self.slots.refused(&ack.jid, id, ErrorKind::Forbidden, reason);
            }
            Message::Error(error) => match error.request {
                // A refusal of a job names its jid; nothing else a minion reports needs an answer.
                Some(jid) => self.slots.refused(&jid, id, error.kind, error.message),
                None => {
                    warn!(minion = id, kind = ?error.kind, message = %error.message, "the minion reported an error")
                }
            },
            Message::JobReturn(ret) => self.on_return(peer, id, ret, size),
            Message::JobProgress(progress) => debug!(minion = id, jid = %progress.jid, "progress"),
            Message::Event(event) => self.on_minion_event(id, event),
            Message::FileGet(request) => {
                let scope = FileScope::of(id, self.registry.tenants(), &self.config.files.shared);
                self.file_get(peer, id, scope, request);
            }
            Message::Publish(request) => {
                let caller = format!("minion:{id}");
                let (publisher, request) = (Publisher::Peer(id.to_owned()), Box::new(request));
                self.out.push(Effect::Publish { peer, caller, publisher, request });
            }
            other => {
                let what = format!("{other:?}");
                let what = what.split('(').next().unwrap_or_default().to_owned();
                self.out.send_error(peer, ErrorKind::BadRequest, format!("{what} is not a minion message"), None);
            }
        }
    }

    /// A minion's return: bounded, its slot moved to the state its outcome names, and its
    /// acknowledgement held until the step's commit stores it. A return the store cannot take
    /// yet stays on the minion.
    fn on_return(&mut self, peer: PeerId, id: &str, mut ret: JobReturn, size: usize) {
        if self.store_in_doubt || !self.slots.writes().hold_return(size) {
            // The store does not answer (or the bound is reached): this return stays in the
            // minion's outbox, and the minion is asked for it again once the store answers and
            // this master has reread it. Nothing is told meanwhile that the store might
            // contradict.
            if self.notices.ready("store:held_returns", Duration::from_secs(10), self.now.at) {
                warn!(minion = id, jid = %ret.jid, "the store does not answer (or returns waiting for it reached their bound); returns left on the minions for now");
            }
            self.slots.writes().owe(id);
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
        match self.slots.state(&jid, id) {
            Some(current) if !current.is_final() => self.slots.set(&jid, id, state, Some(ret)),
            // The same end again (a minion that moved re-sends what was already stored):
            // acknowledged, nothing more to tell.
            Some(current) if current == state => {}
            // After the slot ended (timed out, cancelled): kept as a late return beside the
            // final state, never thrown away, and announced once, as `late` (not `ret`: the
            // slot's final state was told, and stays what it is).
            Some(_) => {
                info!(jid, minion = id, state = state.as_str(), "late return stored");
                let data = json!({ "state": state.as_str(), "ret": ret });
                if self.slots.late_return(&jid, id, state, ret) {
                    self.out.emit_shared(format!("halite/job/{jid}/late/{id}"), data);
                }
            }
            // The job is not live here: finished, or never sent to this minion. The store keeps
            // it only where a slot of this minion exists (the write is an update of that row);
            // nothing is announced, so a minion cannot put returns of jobs it never ran on
            // anyone's bus.
            None => {
                info!(jid, minion = id, "return for a job not live here: acknowledged, not announced");
                self.slots.record(&jid, id, state, Some(ret), true);
            }
        }
        // Acknowledged only once stored (at the end of this step): the minion keeps it in its
        // outbox until then.
        self.slots.writes().ack_once_stored(peer, jid);
    }

    /// A minion's `event.send`: checked against the `[[events]]` ACL, size and rate, then
    /// published under the minion's authenticated namespace. The tag and body are the minion's;
    /// the id is never taken from them.
    pub fn on_minion_event(&mut self, id: &str, event: Event) {
        let now = self.now.at;
        match self.event_gate.minion_event(&self.config.events, id, &event.tag, &event.data, now) {
            Ok(()) => {
                self.out.emit_shared(format!("minion/{id}/{}", event.tag), json!({ "minion": id, "data": event.data }))
            }
            Err(reason) => {
                self.metrics.get().denied("event");
                debug!(minion = id, tag = %event.tag, reason, "minion event refused");
                if self.notices.ready(id, Duration::from_secs(1), now) {
                    let tag: String = event.tag.chars().take(255).collect();
                    let denied_total = self.event_gate.denied_total();
                    self.out.emit_shared(
                        "halite/acl/denied".into(),
                        json!({ "minion": id, "tag": tag, "reason": reason, "denied_total": denied_total }),
                    );
                }
            }
        }
    }
}
