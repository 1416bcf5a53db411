//! What a step decided that other concerns listen to: each slot that moved ([`SlotChange`]:
//! for the bus, the job's watchers and the job's end), each slot that ended ([`SlotMoved`]: for
//! the metrics, rollouts and deployments) and each event published. Recorded where it happens,
//! handed to the listeners by the loop (`machine/hearing.rs`), so the code that moves a slot or
//! publishes an event calls none of them.

use halite_protocol::message::{JobReturn, MinionJobState, Value};

use crate::core::jobs::SlotMoved;

/// A slot's move, as the bus (a final state) and the job's watchers are told it.
#[derive(Debug)]
pub struct SlotChange {
    pub jid: String,
    pub minion: String,
    pub state: MinionJobState,
    pub ret: Option<JobReturn>,
}

/// Slot moves, slot ends and events not yet heard by their listeners, in the order they
/// happened.
#[derive(Default)]
pub struct Hearing {
    changes: Vec<SlotChange>,
    /// Jobs that may have ended (every slot final), in the order they were touched: looked at
    /// after their changes are told, so a job's `done` follows its slots' moves.
    may_end: Vec<String>,
    moves: Vec<SlotMoved>,
    events: Vec<(String, Value)>,
    /// Ends of `deploy.apply` jobs heard, whose deployments the loop records next.
    deployment_ends: Vec<SlotMoved>,
}

impl Hearing {
    /// A slot moved: told to the bus and the job's watchers, then the job may end.
    pub fn slot_changed(&mut self, change: SlotChange) {
        self.job_may_end(&change.jid);
        self.changes.push(change);
    }

    /// `jid` may have ended (its last slot moved, it was created or adopted already over).
    pub fn job_may_end(&mut self, jid: &str) {
        if self.may_end.last().is_none_or(|last| last != jid) {
            self.may_end.push(jid.to_owned());
        }
    }

    /// The slot moves to tell, then the jobs that may have ended (each once, in order).
    pub fn take_changes(&mut self) -> (Vec<SlotChange>, Vec<String>) {
        let mut seen = std::collections::HashSet::new();
        let mut may_end = std::mem::take(&mut self.may_end);
        may_end.retain(|jid| seen.insert(jid.clone()));
        (std::mem::take(&mut self.changes), may_end)
    }

    /// A slot ended.
    pub fn slot_ended(&mut self, moved: SlotMoved) {
        self.moves.push(moved);
    }

    /// An event was published.
    pub fn event(&mut self, tag: String, data: Value) {
        self.events.push((tag, data));
    }

    /// The slot ends to hand to their listeners.
    pub fn take_moves(&mut self) -> Vec<SlotMoved> {
        std::mem::take(&mut self.moves)
    }

    /// A `deploy.apply` job's slot ended: the deployment riding on it is recorded (stored and
    /// announced) by the loop right after the slot ends are heard.
    pub fn deployment_ended(&mut self, moved: SlotMoved) {
        self.deployment_ends.push(moved);
    }

    /// The deployments' jobs that ended, for the loop to record.
    pub fn take_deployment_ends(&mut self) -> Vec<SlotMoved> {
        std::mem::take(&mut self.deployment_ends)
    }

    /// The events to hand to their listeners.
    pub fn take_events(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.events)
    }

    /// Whether nothing waits to be heard.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
            && self.may_end.is_empty()
            && self.moves.is_empty()
            && self.events.is_empty()
            && self.deployment_ends.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(jid: &str, minion: &str) -> SlotChange {
        SlotChange { jid: jid.into(), minion: minion.into(), state: MinionJobState::Returned, ret: None }
    }

    #[test]
    fn each_job_that_may_have_ended_is_looked_at_once_after_its_moves() {
        let mut hearing = Hearing::default();
        hearing.slot_changed(change("j1", "a"));
        hearing.slot_changed(change("j2", "a"));
        hearing.slot_changed(change("j1", "b"));
        hearing.job_may_end("j3");
        assert!(!hearing.is_empty());
        let (changes, may_end) = hearing.take_changes();
        assert_eq!(changes.len(), 3);
        assert_eq!(may_end, ["j1", "j2", "j3"]);
        assert!(hearing.is_empty());
    }
}
