//! Where the loop lets the rollouts act (`rollouts.rs` decides): at the end of a step it
//! stops those an event aborted, then decides those due, carrying out each decision and letting
//! the targets that ended at once be heard before deciding again.

use halite_protocol::message::RolloutStatus;

use crate::outputs::asks::RolloutChange;
use crate::outputs::effects::Effect;
use crate::rollouts::Rollouts;
use crate::store::StoreError;

use super::Core;

impl Core {
    /// The live rollouts, now.
    pub fn rollouts(&mut self) -> Rollouts<'_> {
        let now = self.now.at;
        Rollouts::new(&mut self.jobs, &mut self.rollout_queue, now)
    }

    /// Stops the rollouts an event aborted in this step. Each stop is stored before it acts
    /// ([`Rollouts::stored`]): the loop answers it before any rollout is decided.
    pub fn stop_aborted_rollouts(&mut self) {
        let stops = self.rollouts().aborted();
        self.apply(stops);
    }

    /// Decides every rollout whose job changed in this step and, when woken by time, those
    /// whose wait has passed; each again until it decides nothing: a target that started
    /// offline (waiting for its TTL, or ended `offline`) leaves its place to the next.
    pub fn advance_rollouts(&mut self, woken_by_time: bool) {
        for jid in self.rollouts().due(woken_by_time) {
            loop {
                let now = self.now.at;
                // Those served by another live master are started there.
                let (cluster, sessions) = (&self.cluster, &self.sessions);
                let serves = |id: &str| !cluster.serves_elsewhere(id, sessions, now);
                let effects = Rollouts::new(&mut self.jobs, &mut self.rollout_queue, now).decide(&jid, serves);
                let (starts, rest): (Vec<Effect>, Vec<Effect>) =
                    effects.into_iter().partition(|effect| matches!(effect, Effect::StartTarget { .. }));
                let started = !starts.is_empty();
                self.apply(starts);
                if started {
                    // A target that ended at once (offline) is heard before the start is
                    // announced and the rollout decided again: the rollout's wait counts from
                    // its end. (A rollout's job is never a deployment's: the loop records
                    // deployments after the rollouts.)
                    self.hear_moves();
                }
                self.apply(rest);
                if !started {
                    break;
                }
            }
        }
    }

    /// A rollout's move, as stored (or not): what follows is carried out.
    pub fn rollout_stored(&mut self, change: RolloutChange, stored: Result<(), StoreError>) {
        let effects = self.rollouts().stored(change, stored);
        self.apply(effects);
    }

    /// Where a rollout another master changed is, as reread. A store that did not answer means
    /// the other masters' changes may be missed: everything is reread.
    pub fn rollout_reread(&mut self, jid: &str, stored: Result<Option<RolloutStatus>, StoreError>) {
        match stored {
            Ok(status) => {
                let effects = self.rollouts().reread(jid, status);
                self.apply(effects);
            }
            Err(error) => self.cluster_read_failed(&error),
        }
    }
}
