//! Where the loop carries out what owners decided ([`Effect`]), in the order given.

use std::time::Duration;

use halite_protocol::message::{JobReturn, MinionJobState};

use crate::core::sessions::Conn;
use crate::outputs::effects::{Effect, SlotOp};

use super::Core;

impl Core {
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
                Effect::LateReturn { jid, minion, state, ret } => self.late_return(&jid, &minion, state, *ret),
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
                Effect::SendJob { peer, minion, jid, message } => self.send_job(peer, &minion, &jid, &message),
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
            SlotOp::Refused { jid, minion, kind, reason } => self.slots().refused(&jid, &minion, kind, reason),
            SlotOp::Moved { jid, minion, state, ret } => self.slots().elsewhere(&jid, &minion, state, ret),
            SlotOp::Record { jid, minion, state, ret, late } => self.slots().record(&jid, &minion, state, ret, late),
        }
    }

    /// A return for a slot that is already final: stored beside that state (which does not
    /// change), shown by `jobs show`, and announced on the bus once, as `late` (not `ret`:
    /// the slot's final state was told, and stays what it is).
    fn late_return(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: JobReturn) {
        if self.jobs.first_late_return(jid, minion) {
            let data = serde_json::json!({ "state": state.as_str(), "ret": ret });
            self.emit_shared(format!("halite/job/{jid}/late/{minion}"), data);
        }
        self.slots().record(jid, minion, state, Some(ret), true);
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
