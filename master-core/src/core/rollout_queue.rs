//! Which rollouts the end of the step decides: those whose job changed (a target ended, a
//! rollout paused or resumed, a job adopted) and those an event aborted. Filled during the
//! step, emptied by `Master::advance_rollouts`, so what starts the next targets is decided once,
//! after everything the step changed.

use std::collections::BTreeSet;

/// Rollouts due a decision, and rollouts to stop.
#[derive(Default)]
pub struct RolloutQueue {
    due: BTreeSet<String>,
    aborts: Vec<(String, String)>,
}

impl RolloutQueue {
    /// `jid`'s rollout is decided at the end of the step.
    pub fn due(&mut self, jid: &str) {
        self.due.insert(jid.to_owned());
    }

    /// These rollouts (jid, why) are stopped at the end of the step.
    pub fn abort(&mut self, aborts: impl IntoIterator<Item = (String, String)>) {
        self.aborts.extend(aborts);
    }

    /// The rollouts to decide, in jid order.
    pub fn take_due(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.due)
    }

    /// The rollouts to stop, in the order they were aborted.
    pub fn take_aborts(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.aborts)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty() && self.aborts.is_empty()
    }
}
