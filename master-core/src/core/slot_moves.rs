//! The one place a job's slot changes state. A move the transition table allows
//! (`core/jobs.rs`) is recorded for the group commit (`core/writes.rs`) and, as values, for
//! those that listen (`core/hearing.rs`): the move ([`SlotChange`]: the bus, the job's
//! watchers, the job's end) and, for a final state, the end ([`SlotMoved`]: metrics, rollouts,
//! deployments). The loop hands them to their listeners (`machine/hearing.rs`); nothing here calls
//! them, waits, or fails.

use std::time::Instant;

use halite_protocol::message::{ErrorKind, JobReturn, MinionJobState, Outcome};
use serde_json::json;
use tracing::debug;

use crate::core::hearing::{Hearing, SlotChange};
use crate::core::jobs::{JobTable, SlotMoved};
use crate::core::writes::{PendingWrites, Unreported};
use crate::store::StateChange;

/// The job table with what records its moves, for the time of one change (`Master::slots`).
pub struct SlotMoves<'a> {
    jobs: &'a mut JobTable,
    pending: &'a mut PendingWrites,
    hearing: &'a mut Hearing,
    /// Other masters may share the store: a final state decided here is told once stored, as
    /// the store keeps it (another master may store one for the same slot first).
    shared: bool,
    /// When the change is made, by the monotonic and the wall clock (ms).
    now: Instant,
    wall_ms: u64,
}

impl<'a> SlotMoves<'a> {
    /// The table and its recorders, for a change made at `now` (`wall_ms` by the wall clock),
    /// `shared` when other masters may share the store.
    pub fn new(
        jobs: &'a mut JobTable,
        pending: &'a mut PendingWrites,
        hearing: &'a mut Hearing,
        shared: bool,
        now: Instant,
        wall_ms: u64,
    ) -> Self {
        SlotMoves { jobs, pending, hearing, shared, now, wall_ms }
    }

    /// `minion`'s slot of `jid`, if the job is live here.
    pub fn state(&self, jid: &str, minion: &str) -> Option<MinionJobState> {
        self.jobs.state(jid, minion)
    }

    /// What the next commit writes besides the moves (a minion's presence, returns held
    /// until stored), for the desk that moves slots.
    pub fn writes(&mut self) -> &mut PendingWrites {
        self.pending
    }

    /// A return for a slot already final: stored beside that state, which does not change;
    /// whether it is the slot's first late return (announced once).
    pub fn late_return(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: JobReturn) -> bool {
        let first = self.jobs.first_late_return(jid, minion);
        self.record(jid, minion, state, Some(ret), true);
        first
    }

    /// Moves `minion`'s slot of `jid` to `state` if the transition table allows it, queues it
    /// for the group commit and records the move for its listeners.
    pub fn set(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if !self.jobs.set_state(jid, minion, state) {
            debug!(jid, minion, state = state.as_str(), "no change: the slot is gone, final, or already there");
            return;
        }
        // `running` lives in memory only: a restarted master treats sent and running jobs alike,
        // and job listings show the live state. One write less per job.
        if state != MinionJobState::Running {
            self.record(jid, minion, state, ret.clone(), false);
        }
        if state.is_final() && self.shared {
            self.ended(jid, minion, state, &ret);
            self.pending.hold_final(jid, Unreported { minion: minion.to_owned(), state, ret });
            return;
        }
        self.moved(jid, minion, state, ret);
    }

    /// A minion refused a job (`job_ack` with `accepted: false`, or an `error` naming the jid):
    /// its slot ends at once, `denied` when the refusal is about permission, else `failed`,
    /// with the minion's reason as the result.
    pub fn refused(&mut self, jid: &str, minion: &str, kind: ErrorKind, reason: String) {
        if self.jobs.state(jid, minion).is_none_or(MinionJobState::is_final) {
            debug!(minion, jid, %reason, "refusal of a job that is not in flight there");
            return;
        }
        tracing::warn!(minion, jid, ?kind, %reason, "the minion refused a job");
        let (state, outcome) = match kind {
            ErrorKind::Forbidden | ErrorKind::BadSignature => (MinionJobState::Denied, Outcome::Denied),
            _ => (MinionJobState::Failed, Outcome::Refused),
        };
        let ret = JobReturn {
            jid: jid.to_owned(),
            minion: minion.to_owned(),
            success: false,
            retcode: 1,
            outputs: json!({ "error": reason }),
            truncated: false,
            duration_ms: 0,
            outcome,
        };
        self.set(jid, minion, state, Some(ret));
    }

    /// Ends the queued targets of a stopped rollout `skipped`.
    pub fn skip_queued(&mut self, jid: &str) {
        let Some(job) = self.jobs.get(jid) else { return };
        let queued: Vec<String> =
            job.slots().iter().filter(|(_, s)| s.state == MinionJobState::Queued).map(|(m, _)| m.clone()).collect();
        for minion in queued {
            self.set(jid, &minion, MinionJobState::Skipped, None);
        }
    }

    /// Queues a slot's new state (and return) for the group commit, without moving it: `late`
    /// for a return that came after the slot ended, or for a job not live here.
    pub fn record(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>, late: bool) {
        let (jid, minion) = (jid.to_owned(), minion.to_owned());
        self.pending.record(StateChange { jid, minion, state, ret, at_ms: self.wall_ms, late });
    }

    /// A move another master decided and stored: made here if the transition table allows it,
    /// and recorded for its listeners, never written again.
    pub fn elsewhere(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if !self.jobs.set_state(jid, minion, state) {
            debug!(jid, minion, state = state.as_str(), "no change: the slot is gone, final, or already there");
            return;
        }
        self.moved(jid, minion, state, ret);
    }

    /// The final state the store kept for a slot that ended here too (another master recorded
    /// it first, while this one could not write): the one change of a final state there is,
    /// followed by what the group commit still has to tell of it.
    pub fn follow_stored(&mut self, jid: &str, minion: &str, kept: MinionJobState, ret: Option<JobReturn>) {
        self.jobs.correct_final(jid, minion, kept);
        self.pending.follow_stored(jid, minion, kept, ret);
    }

    /// Records a move already made for the bus, the job's watchers and the job's end, and its
    /// end for the listeners of slot ends.
    fn moved(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: Option<JobReturn>) {
        if state.is_final() {
            self.ended(jid, minion, state, &ret);
        }
        self.hearing.slot_changed(SlotChange { jid: jid.to_owned(), minion: minion.to_owned(), state, ret });
    }

    /// Records a slot's end for its listeners, which hear it at the end of the step; the job
    /// may have left the table by then.
    fn ended(&mut self, jid: &str, minion: &str, state: MinionJobState, ret: &Option<JobReturn>) {
        let Some(job) = self.jobs.get(jid) else { return };
        let deploy = job.record.function == halite_protocol::message::DEPLOY_FUNCTION;
        self.hearing.slot_ended(SlotMoved {
            jid: jid.to_owned(),
            minion: minion.to_owned(),
            state,
            // A deployment reads its job's return; a fan-out's returns are not copied.
            ret: if deploy { ret.clone() } else { None },
            returned: ret.is_some(),
            at: self.now,
            at_ms: self.wall_ms,
            created_at_ms: job.record.created_at_ms,
            deploy,
        });
    }

    /// Records the final states decided here once they are stored (see [`SlotMoves::set`]),
    /// each as the store holds it, for the bus and the jobs' watchers; each job's end is looked
    /// at after every one of its slots.
    pub fn report_stored_finals(&mut self) {
        for (jid, slots) in self.pending.take_unreported() {
            for slot in slots {
                let change = SlotChange { jid: jid.clone(), minion: slot.minion, state: slot.state, ret: slot.ret };
                self.hearing.slot_changed(change);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::jobs::testing::table;
    use MinionJobState::*;

    struct Parts {
        jobs: JobTable,
        pending: PendingWrites,
        hearing: Hearing,
    }

    impl Parts {
        fn new() -> Self {
            Parts { jobs: table(Instant::now()), pending: PendingWrites::default(), hearing: Hearing::default() }
        }

        fn slots(&mut self, shared: bool) -> SlotMoves<'_> {
            SlotMoves::new(&mut self.jobs, &mut self.pending, &mut self.hearing, shared, Instant::now(), 7)
        }
    }

    fn ret() -> JobReturn {
        JobReturn {
            jid: "1".into(),
            minion: "a".into(),
            success: true,
            retcode: 0,
            outputs: serde_json::Value::Null,
            truncated: false,
            duration_ms: 1,
            outcome: halite_protocol::message::Outcome::Completed,
        }
    }

    #[test]
    fn a_move_is_written_told_and_its_end_heard_and_running_is_not_written() {
        let mut parts = Parts::new();
        parts.slots(false).set("1", "a", Running, None);
        assert_eq!(parts.pending.states_waiting(), 0, "running lives in memory only");
        parts.slots(false).set("1", "a", Returned, None);
        parts.slots(false).set("1", "a", Failed, None);
        assert_eq!(parts.pending.states_waiting(), 1, "a final state is kept: the second move is no move");
        let (changes, may_end) = parts.hearing.take_changes();
        let told: Vec<MinionJobState> = changes.iter().map(|c| c.state).collect();
        assert_eq!(told, [Running, Returned]);
        assert_eq!(may_end, ["1"]);
        let ends = parts.hearing.take_moves();
        assert_eq!(ends.len(), 1);
        assert_eq!((ends[0].state, ends[0].at_ms), (Returned, 7));
    }

    #[test]
    fn with_other_masters_a_final_state_is_told_only_once_stored() {
        let mut parts = Parts::new();
        parts.slots(true).set("1", "a", TimedOut, None);
        assert_eq!(parts.hearing.take_moves().len(), 1, "its end is heard at once");
        assert!(parts.hearing.take_changes().0.is_empty(), "not told before it is stored");
        assert!(parts.pending.holds_final_of("1"));
        parts.slots(true).report_stored_finals();
        let (changes, may_end) = parts.hearing.take_changes();
        assert_eq!(changes.len(), 1);
        assert_eq!((changes[0].minion.as_str(), changes[0].state), ("a", TimedOut));
        assert_eq!(may_end, ["1"]);
        assert!(!parts.pending.holds_final_of("1"));
    }

    #[test]
    fn a_deployment_hears_its_return_a_fan_out_only_that_there_was_one() {
        let mut parts = Parts::new();
        parts.slots(false).set("1", "a", Returned, Some(ret()));
        let ends = parts.hearing.take_moves();
        assert!(ends[0].returned && ends[0].ret.is_none() && !ends[0].deploy, "a fan-out's returns are not copied");
        let (changes, _) = parts.hearing.take_changes();
        assert!(changes[0].ret.is_some(), "the bus and the watchers get the return");

        let mut deploy = Parts::new();
        deploy.jobs.get_mut("1").unwrap().record.function = halite_protocol::message::DEPLOY_FUNCTION.into();
        deploy.slots(false).set("1", "a", Returned, Some(ret()));
        let ends = deploy.hearing.take_moves();
        assert!(ends[0].deploy && ends[0].ret.is_some(), "the deployment reads its job's return");
    }

    #[test]
    fn a_return_recorded_without_a_move_is_written_late_and_told_to_nobody() {
        let mut parts = Parts::new();
        parts.slots(false).record("9", "a", Returned, Some(ret()), true);
        let (changes, acks) = parts.pending.take_states();
        assert!(acks.is_empty());
        assert_eq!(changes.len(), 1);
        let change = &changes[0];
        assert_eq!((change.jid.as_str(), change.late, change.at_ms), ("9", true, 7));
        assert!(change.ret.is_some());
        assert!(parts.hearing.is_empty(), "nothing is told of a job not live here");
    }

    /// A minion's refusal ends its slot at once: `denied` for a refusal about permission, else
    /// `failed`, the reason as the result; a refusal of a slot already ended, or of a job not
    /// live here, changes nothing.
    #[test]
    fn a_refusal_ends_a_slot_in_flight_denied_or_failed_and_nothing_else() {
        let mut parts = Parts::new();
        parts.slots(false).refused("1", "a", halite_protocol::message::ErrorKind::BadSignature, "bad".into());
        parts.slots(false).refused("1", "b", halite_protocol::message::ErrorKind::Internal, "broken".into());
        parts.slots(false).refused("1", "a", halite_protocol::message::ErrorKind::Internal, "again".into());
        parts.slots(false).refused("9", "a", halite_protocol::message::ErrorKind::Forbidden, "not live".into());
        let (changes, _) = parts.hearing.take_changes();
        let told: Vec<(&str, MinionJobState, Option<&serde_json::Value>)> =
            changes.iter().map(|c| (c.minion.as_str(), c.state, c.ret.as_ref().map(|r| &r.outputs))).collect();
        let (bad, broken) = (serde_json::json!({ "error": "bad" }), serde_json::json!({ "error": "broken" }));
        assert_eq!(told, [("a", Denied, Some(&bad)), ("b", Failed, Some(&broken))]);
        let outcomes: Vec<_> = changes.iter().filter_map(|c| c.ret.as_ref().map(|r| r.outcome)).collect();
        assert_eq!(outcomes, [halite_protocol::message::Outcome::Denied, halite_protocol::message::Outcome::Refused]);
    }
}
