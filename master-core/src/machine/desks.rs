//! Where the core lends each handler its desk, and carries out what the handler decided. A desk
//! is a struct of borrows of the core's fields: the state the handler owns, to change, and what
//! it decides with, read-only, so what a handler may touch is written in one place. What else
//! it decides comes back as [`Effect`]s, carried out here as soon as the desk returns, in
//! order, before anything else happens.

use std::time::Duration;

use halite_protocol::message::MinionJobState;

use crate::admin::AdminDesk;
use crate::admission::AdmissionDesk;
use crate::authz::Access;
use crate::cluster::ClusterDesk;
use crate::cluster_jobs::ClusterJobsDesk;
use crate::core::sessions::Conn;
use crate::core::slot_moves::SlotMoves;
use crate::deploy::groups::GroupDesk;
use crate::deploy::DeployDesk;
use crate::minion_messages::MinionDesk;
use crate::outputs::effects::{Effect, Effects, SlotOp};
use crate::publishing::{JobIssuer, PublishDesk};

use super::Core;

/// The master's job issuer, borrowed field by field (a macro, so its borrows stay apart from
/// those of the desk that holds it).
macro_rules! job_issuer {
    ($master:expr) => {
        JobIssuer {
            jids: &mut $master.jids,
            identity: &$master.identity,
            config: &$master.config,
            sessions: &$master.sessions,
            cluster: &$master.cluster,
            now: $master.now,
        }
    };
}

impl Core {
    /// Lends configs and deployments their desk for `work`, then carries out what it decided.
    pub fn with_deploy_desk<R>(&mut self, work: impl FnOnce(&mut DeployDesk<'_>) -> R) -> R {
        let mut desk = DeployDesk {
            config: &self.config,
            registry: &self.registry,
            jobs: &self.jobs,
            deploy_jobs: &mut self.deploy_jobs,
            hearing: &mut self.hearing,
            notices: &mut self.notices,
            metrics: &self.metrics,
            issuer: job_issuer!(self),
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends administrative requests their desk for `work`, then carries out what it decided.
    pub fn with_admin_desk<R>(&mut self, work: impl FnOnce(&mut AdminDesk<'_>) -> R) -> R {
        let mut desk = AdminDesk {
            config: &self.config,
            registry: &mut self.registry,
            jobs: &mut self.jobs,
            rollout_queue: &mut self.rollout_queue,
            pending: &mut self.pending,
            event_gate: &mut self.event_gate,
            sessions: &self.sessions,
            cluster: &self.cluster,
            now: self.now,
            audit_head: self.audit.head(),
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends connections on their way to a session their desk for `work`, then carries out
    /// what it decided.
    pub fn with_admission_desk<R>(&mut self, work: impl FnOnce(&mut AdmissionDesk<'_>) -> R) -> R {
        let mut desk = AdmissionDesk {
            config: &self.config,
            identity: &self.identity,
            root: &self.root,
            sessions: &mut self.sessions,
            registry: &mut self.registry,
            notices: &mut self.notices,
            keys_refused: &mut self.keys_refused,
            metrics: &self.metrics,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends publishing and cancelling their desk for `work`, then carries out what it
    /// decided.
    pub fn with_publish_desk<R>(&mut self, work: impl FnOnce(&mut PublishDesk<'_>) -> R) -> R {
        let mut desk = PublishDesk {
            config: &self.config,
            registry: &self.registry,
            sessions: &self.sessions,
            cluster: &self.cluster,
            jobs: &mut self.jobs,
            rollout_queue: &mut self.rollout_queue,
            metrics: &self.metrics,
            issuer: job_issuer!(self),
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends a minion's messages their desk for `work`, then carries out what it decided.
    pub fn with_minion_desk<R>(&mut self, work: impl FnOnce(&mut MinionDesk<'_>) -> R) -> R {
        let store_in_doubt = self.store_in_doubt();
        let (now, wall_ms, shared) = (self.now.at, self.now.wall_ms, self.cluster.is_shared());
        let mut desk = MinionDesk {
            config: &self.config,
            registry: &mut self.registry,
            slots: SlotMoves::new(&mut self.jobs, &mut self.pending, &mut self.hearing, shared, now, wall_ms),
            event_gate: &mut self.event_gate,
            notices: &mut self.notices,
            files: &mut self.files,
            metrics: &self.metrics,
            store_in_doubt,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends the other masters' announcements their desk for `work`, then carries out what it
    /// decided.
    pub fn with_cluster_desk<R>(&mut self, work: impl FnOnce(&mut ClusterDesk<'_>) -> R) -> R {
        let mut desk = ClusterDesk {
            config: &self.config,
            cluster: &mut self.cluster,
            registry: &mut self.registry,
            pending: &mut self.pending,
            notices: &mut self.notices,
            sessions: &self.sessions,
            jobs: &self.jobs,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends the jobs followed across the masters their desk for `work`, then carries out what
    /// it decided.
    pub fn with_cluster_jobs<R>(&mut self, work: impl FnOnce(&mut ClusterJobsDesk<'_>) -> R) -> R {
        let mut desk = ClusterJobsDesk {
            config: &self.config,
            jobs: &mut self.jobs,
            hearing: &mut self.hearing,
            rollout_queue: &mut self.rollout_queue,
            watchers: &mut self.watchers,
            registry: &mut self.registry,
            cluster: &mut self.cluster,
            notices: &mut self.notices,
            sessions: &self.sessions,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends the deployment groups their desk for `work`, then carries out what it decided.
    pub fn with_groups<R>(&mut self, work: impl FnOnce(&mut GroupDesk<'_>) -> R) -> R {
        let mut desk = GroupDesk {
            runs: &mut self.groups,
            access: Access::of(&self.config, &self.registry, &self.jobs),
            config: &self.config,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Carries out `effects`, in order.
    pub fn apply(&mut self, effects: impl IntoIterator<Item = Effect>) {
        for effect in effects {
            match effect {
                Effect::Ask(ask) => self.asks.push(ask),
                Effect::Emit { tag, data } => self.emit(tag, data),
                Effect::EmitShared { tag, data } => self.emit_shared(tag, data),
                Effect::Tell(change) => self.tell_masters(change),
                Effect::StartTarget { jid, minion } => self.start_target(&jid, &minion),
                Effect::SkipQueued { jid } => self.slots().skip_queued(&jid),
                Effect::Cancel { jid } => self.with_publish_desk(|desk| desk.cancel_after_rollout(&jid)),
                Effect::Reply { peer, request_id, answer } => self.reply(peer, request_id, *answer),
                Effect::Send { peer, message } => self.send(peer, &message),
                Effect::Slot(op) => self.move_slot(op),
                Effect::DeliverAll { minion, peer } => self.deliver_all(&minion, peer),
                Effect::ReadFile(read) => self.outputs.push(super::Output::ReadFile(*read)),
                Effect::Forget { peer, why } => self.forget(peer, Some(&why)),
                Effect::Disconnect { peer, why } => self.outlet.disconnect(peer, &why),
                Effect::SendParts { peer, parts } => {
                    // A handshake message lost to a full queue is a handshake that times out.
                    let _ = self.outlet.send(peer, parts);
                }
                Effect::MarkAuthenticated { peer, lane } => self.outlet.mark_authenticated(peer, lane),
                Effect::MinionOnline { peer, id, session } => {
                    self.sessions.went_online(&id, peer);
                    self.sessions.insert(peer, Conn::Minion { id, session: *session });
                }
                Effect::CutMinion { id } => self.cut_minion(&id),
                Effect::ReleaseParked => self.release_parked(),
                Effect::AdoptJob { jid } => self.with_cluster_jobs(|desk| desk.adopt_job(&jid)),
                Effect::CancelHere { jid } => self.with_publish_desk(|desk| desk.cancel_here(&jid)),
                Effect::RemoteSlots { jid, states } => {
                    self.with_cluster_jobs(|desk| desk.apply_remote_slots(&jid, states))
                }
                Effect::Deliver { jid, minion, peer } => self.deliver(&jid, &minion, peer),
                Effect::RolloutChangedElsewhere { jid } => {
                    let reread = self.rollouts().changed_elsewhere(&jid);
                    self.apply(reread);
                }
                Effect::CancelLive { jid } => self.with_publish_desk(|desk| desk.cancel_live(&jid)),
                Effect::MemberPushed { member, pushed } => {
                    self.with_groups(|groups| groups.member_pushed(member, *pushed))
                }
                Effect::StartRelay(request) => {
                    let hosts = crate::deploy::signal_hosts(&self.config);
                    self.outputs.push(super::Output::StartRelay { hosts, request });
                }
                Effect::Publish { peer, caller, publisher, request } => {
                    let described = crate::audit_requests::describe_publish(&request);
                    self.audit_begin_described(peer, &caller, None, described);
                    self.with_publish_desk(|desk| desk.publish(peer, &caller, publisher, *request))
                }
            }
        }
    }

    fn move_slot(&mut self, op: SlotOp) {
        match op {
            SlotOp::Set { jid, minion, state, ret } => self.slots().set(&jid, &minion, state, ret),
            SlotOp::Moved { jid, minion, state, ret } => self.slots().elsewhere(&jid, &minion, state, ret),
        }
    }

    /// Starts one queued target: sent if it is connected, waiting for its TTL if not (offline
    /// without a TTL ends it `offline`).
    fn start_target(&mut self, jid: &str, minion: &str) {
        let now = self.now.at;
        let Some(job) = self.jobs.get(jid) else { return };
        let ttl = Duration::from_millis(job.record.ttl_ms);
        match self.sessions.peer_of(minion) {
            Some(peer) => {
                self.slots().set(jid, minion, MinionJobState::Sent, None);
                self.deliver(jid, minion, peer);
            }
            None if !ttl.is_zero() => {
                self.slots().set(jid, minion, MinionJobState::Waiting, None);
                self.jobs.set_deadline(jid, minion, Some(now + ttl));
            }
            None => self.slots().set(jid, minion, MinionJobState::Offline, None),
        }
    }
}
