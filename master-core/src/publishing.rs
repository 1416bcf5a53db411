//! Jobs coming to be: a publish resolved within what the publisher can see, authorised (with
//! the reach its job carries), signed and asked to be stored (it goes live once stored:
//! `machine/going_live.rs`); and cancelled.
//!
//! Nothing here awaits or acts on the master: the loop lends a [`PublishDesk`] (the live jobs
//! and what listens to them, the jid generator; the registry, sessions, config and the master's
//! identity, read-only) and carries out the [`Effect`](crate::outputs::effects::Effect)s it returns: the job's store call, the
//! messages to minions and publishers, events and announcements (`Core::with_publish_desk`).

use std::collections::BTreeMap;
use std::time::Duration;

use halite_protocol::message::{self, ErrorKind, Job, Message, MinionJobState, PublishRequest, SignedJob};
use halite_protocol::noise::LocalIdentity;
use halite_transport::PeerId;
use tracing::warn;

use crate::authz::grant::PublishGrant;
use crate::authz::publish::{self, Publisher};
use crate::authz::{Access, JobAccess};
use crate::clock::JidGenerator;
use crate::clock::Now;
use crate::config::MasterConfig;
use crate::core::cluster_view::ClusterView;
use crate::core::jobs::{JobTable, Slot};
use crate::core::registry::Registry;
use crate::core::rollout_queue::RolloutQueue;
use crate::core::sessions::Sessions;
use crate::limits;
use crate::metrics::Metrics;
use crate::outputs::asks::NewJob;
use crate::outputs::asks::{Ask, JobPublisher, PreparedJob, RolloutCause};
use crate::outputs::effects::{Effects, SlotOp};
use crate::rollouts::Rollouts;
use crate::store::JobRecord;

/// What a new job is issued with: the jid generator, the master's identity, who is online
/// here and elsewhere.
pub struct JobIssuer<'a> {
    pub jids: &'a mut JidGenerator,
    pub identity: &'a LocalIdentity,
    pub config: &'a MasterConfig,
    pub sessions: &'a Sessions,
    pub cluster: &'a ClusterView,
    /// The time, read when a decision needs it.
    pub now: Now,
}

impl JobIssuer<'_> {
    /// Creates and signs a job to already resolved and authorised `targets`, and lays out its
    /// slots: what is stored before anything of it is sent.
    pub fn prepare(&mut self, caller: &str, new: NewJob, targets: Vec<String>) -> PreparedJob {
        let NewJob { spec, reach, unknown } = new;
        let jid = self.jids.next(self.now.wall_micros);
        let created_at_ms = self.now.wall_ms;
        let job = Job::issue(jid.clone(), &spec, created_at_ms, caller.to_owned(), reach);
        // A master of a cluster names itself and its certificate: any master may deliver it.
        let signed = match self.identity.certificate() {
            Some(certificate) => SignedJob::sign_certified(&job, self.identity.key(), certificate, &self.config.id),
            None => SignedJob::sign(&job, self.identity.key()),
        };
        let record = JobRecord::new(jid, spec, caller.to_owned(), created_at_ms, signed);
        let now = self.now.at;
        let run_deadline = crate::core::jobs::run_deadline(
            record.timeout_ms,
            now,
            Duration::from_secs(self.config.timeout_grace_secs),
        );
        let mut slots = BTreeMap::new();
        let mut states = Vec::with_capacity(targets.len());
        let rolled_out = record.rollout.is_some();
        // After a gap in what this master heard, a minion not placed yet may be on another
        // master: its slot waits for the placement to settle, never `offline` before.
        let settles = self.cluster.placement_settles_at(now);
        for id in &targets {
            // A minion another master serves gets the job from it (announced below); a rollout
            // starts its targets itself, at the end of this step.
            let (state, deadline) = if rolled_out {
                (MinionJobState::Queued, None)
            } else if self.sessions.is_online(id) || self.cluster.serves_elsewhere(id, self.sessions, now) {
                (MinionJobState::Sent, run_deadline)
            } else if record.ttl_ms > 0 || settles.is_some() {
                let ttl = (record.ttl_ms > 0).then(|| now + Duration::from_millis(record.ttl_ms));
                (MinionJobState::Waiting, ttl.max(settles))
            } else {
                (MinionJobState::Offline, None)
            };
            slots.insert(id.clone(), Slot { state, deadline });
            states.push((id.clone(), state));
        }
        for id in &unknown {
            slots.insert(id.clone(), Slot { state: MinionJobState::Unknown, deadline: None });
            states.push((id.clone(), MinionJobState::Unknown));
        }
        PreparedJob { record, states, slots, run_deadline, targets, unknown, publisher: None }
    }
}

/// What jobs are published and cancelled with: what that changes, and what it reads.
pub struct PublishDesk<'a> {
    pub config: &'a MasterConfig,
    pub registry: &'a Registry,
    pub sessions: &'a Sessions,
    pub cluster: &'a ClusterView,
    pub jobs: &'a mut JobTable,
    pub rollout_queue: &'a mut RolloutQueue,
    pub metrics: &'a Metrics,
    pub issuer: JobIssuer<'a>,
    /// The time, read when a decision needs it.
    pub now: Now,
    pub out: Effects,
}

impl PublishDesk<'_> {
    fn access(&self) -> Access<'_> {
        Access::of(self.config, self.registry, self.jobs)
    }

    /// Decides a publish and, if it stands, asks for its job to be stored
    /// (it goes live once stored: `Core::job_stored`); whatever refuses it is answered at once.
    pub fn publish(&mut self, peer: PeerId, caller: &str, publisher: Publisher, request: PublishRequest) {
        let request_id = Some(request.request_id.to_string());
        let received = self.now.at;
        if let Some(why) = request.spec.rollout.as_ref().and_then(crate::core::rollout::invalid) {
            self.out.send_error(peer, ErrorKind::BadRequest, why, request_id);
            return;
        }
        if message::encoded_len(&request.spec.args) + message::encoded_len(&request.spec.kwargs)
            > limits::MESSAGE_BUDGET
        {
            let why =
                format!("the arguments take more than {} bytes; pass large data as files", limits::MESSAGE_BUDGET);
            self.out.send_error(peer, ErrorKind::BadRequest, why, request_id);
            return;
        }
        if !publish::valid_function(&request.spec.function) {
            self.out.send_error(
                peer,
                ErrorKind::BadRequest,
                format!("bad function name {:?}", request.spec.function),
                request_id,
            );
            return;
        }
        let PublishGrant { targets, unknown, reach } = match self.access().grant_publish(caller, &publisher, &request) {
            Ok(granted) => granted,
            Err(refused) => {
                if refused.denied {
                    warn!(%caller, function = %request.spec.function, why = %refused.why, "publish refused");
                    self.metrics.get().denied("publish");
                }
                self.out.send_error(peer, refused.kind, refused.why, request_id);
                return;
            }
        };
        // A minion that publishes gets its answer, not a stream of updates.
        let watchers = if matches!(publisher, Publisher::Peer(_)) { Vec::new() } else { vec![peer] };
        if let Some(why) = self.registry.function_missing(&request.spec.function, &targets) {
            self.out.send_error(peer, ErrorKind::NotFound, why, request_id);
            return;
        }
        // Arguments every minion would refuse alike (shell syntax without shell=true): told
        // once, in the minion's words, instead of failing on each.
        let spec = &request.spec;
        if let Some(why) = crate::argument_checks::refusal(&spec.function, &spec.args, &spec.kwargs) {
            self.out.send_error(peer, ErrorKind::BadRequest, format!("{why}; nothing was sent"), request_id);
            return;
        }

        let job = NewJob { spec: request.spec, reach, unknown };
        let mut prepared = self.prepare_job(caller, job, targets);
        prepared.publisher = Some(JobPublisher { peer, request_id: request.request_id, watchers, received });
        self.out.ask(Ask::InsertJob(Box::new(prepared)));
    }

    /// Creates and signs a job ([`JobIssuer::prepare`]).
    pub fn prepare_job(&mut self, caller: &str, new: NewJob, targets: Vec<String>) -> PreparedJob {
        self.issuer.prepare(caller, new, targets)
    }

    /// A client's cancel: only of a job it may see (`visible`); another principal's job is
    /// answered exactly like a job that does not exist, so its jid reveals nothing.
    pub fn cancel(&mut self, peer: PeerId, jid: &str, access: JobAccess) {
        let job = match access {
            JobAccess::Control => self.jobs.get_mut(jid),
            JobAccess::See => {
                let why = format!(
                    "not allowed to cancel job {jid}: only its publisher, an administrator or rules allowing its function on every target may"
                );
                self.out.send_error(peer, ErrorKind::Forbidden, why, Some(jid.to_owned()));
                return;
            }
            JobAccess::None => None,
        };
        let Some(job) = job else {
            self.out.send_error(peer, ErrorKind::NotFound, format!("no running job {jid}"), Some(jid.to_owned()));
            return;
        };
        if !job.watchers.contains(&peer) {
            job.watchers.push(peer);
        }
        self.cancel_live(jid);
    }

    /// Cancels a job if it is still live: running minions are told to stop, the others'
    /// slots end cancelled; the other masters sharing the store do the same for the minions
    /// they serve. A rollout's stop is stored first, and the cancel goes on from there
    /// (`Rollouts::stored`).
    pub fn cancel_live(&mut self, jid: &str) {
        match Rollouts::new(self.jobs, self.rollout_queue, self.now.at).stop(
            jid,
            "cancelled".to_owned(),
            RolloutCause::Cancelled,
        ) {
            Some(stop) => self.out.push(stop),
            None => self.cancel_after_rollout(jid),
        }
    }

    /// [`PublishDesk::cancel_live`] once the job's rollout, if any, is stopped.
    pub fn cancel_after_rollout(&mut self, jid: &str) {
        if self.jobs.get(jid).is_some() {
            self.out.tell(crate::store::ClusterChange::Cancel { jid: jid.to_owned() });
        }
        self.cancel_here(jid);
    }

    /// [`PublishDesk::cancel_live`] for the minions this master serves (and those nobody serves).
    pub fn cancel_here(&mut self, jid: &str) {
        let Some(job) = self.jobs.get(jid) else { return };
        let slots: Vec<(String, MinionJobState)> = job.slots().iter().map(|(m, s)| (m.clone(), s.state)).collect();
        let now = self.now.at;
        for (minion, state) in slots {
            if self.cluster.serves_elsewhere(&minion, self.sessions, now) {
                // Its master stops it and records the outcome.
                continue;
            }
            match (state, self.sessions.peer_of(&minion)) {
                (MinionJobState::Sent | MinionJobState::Running, Some(minion_peer)) => {
                    // The minion kills the job and returns it as cancelled.
                    self.out.send(minion_peer, Message::Cancel(message::Cancel { jid: jid.to_owned() }));
                }
                (s, _) if !s.is_final() => {
                    let (jid, state) = (jid.to_owned(), MinionJobState::Cancelled);
                    self.out.slot(SlotOp::Set { jid, minion, state, ret: None });
                }
                _ => {}
            }
        }
    }
}
