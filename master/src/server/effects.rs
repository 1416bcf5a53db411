//! Where the loop carries out what owners decided ([`Effect`]), in the order given.

use std::time::Duration;

use halite_protocol::message::MinionJobState;

use crate::authz::Access;
use crate::core::effects::Effect;
use crate::deploy::groups::GroupDesk;
use crate::net::Net;
use crate::store::Store;

use super::Master;

impl<S: Store, N: Net> Master<S, N> {
    /// Carries out `effects`, in order.
    pub(crate) fn apply(&mut self, effects: impl IntoIterator<Item = Effect>) {
        for effect in effects {
            match effect {
                Effect::Ask(ask) => self.asks.push(ask),
                Effect::Emit { tag, data } => self.emit(tag, data),
                Effect::EmitShared { tag, data } => self.emit_shared(tag, data),
                Effect::Tell(change) => self.tell_masters(change),
                Effect::StartTarget { jid, minion } => self.start_target(&jid, &minion),
                Effect::SkipQueued { jid } => self.slots().skip_queued(&jid),
                Effect::Cancel { jid } => self.cancel_after_rollout(&jid),
                Effect::Reply { peer, request_id, answer } => self.reply(peer, request_id, *answer),
            }
        }
    }

    /// Lends the deployment groups their desk for `work`, then carries out what it decided.
    /// The events published so far are handed out first: a group that starts listening
    /// hears only those published after.
    pub(crate) fn with_groups<R>(&mut self, work: impl FnOnce(&mut GroupDesk<'_>) -> R) -> R {
        self.hear_events();
        let (now, wall_ms) = (self.clock.now(), self.clock.wall_ms());
        let access = Access::of(&self.config, &self.registry, &self.jobs);
        let mut desk = GroupDesk::new(&mut self.groups, access, &self.config, now, wall_ms);
        let done = work(&mut desk);
        let effects = desk.into_effects();
        self.apply(effects);
        done
    }

    /// Starts one queued target: sent if it is connected, waiting for its TTL if not (offline
    /// without a TTL ends it `offline`).
    fn start_target(&mut self, jid: &str, minion: &str) {
        let now = self.clock.now();
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
