//! Rollouts: which of a job's targets start when. [`RolloutRun`] holds a job's rollout and,
//! from the job's slots, decides what happens next ([`RolloutRun::decide`]); it changes
//! nothing itself. [`Rollouts`](crate::rollouts::Rollouts) turns it into effects, which
//! the loop carries out (`server/rollouts.rs`).
//!
//! Targets are taken in id order, the first `canary` of them being the canaries. A target is
//! `queued` until it is started; started, it is `sent` (or `waiting` while offline with a TTL,
//! which does not hold a place in the window). The window counts `sent` and `running` targets.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use halite_protocol::message::{MinionJobState, Rollout, RolloutState, RolloutStatus, Value};

use crate::core::jobs::{JobTable, Slot};

/// The rollouts an event on the bus aborts, each with why: those whose `abort_on` matches
/// it, whose publisher may receive it (`caller_receives`: abort_on must not listen to what its
/// publisher could not subscribe to, nor tell it, in the reason, a tag it may not see), and
/// never by one of the job's own events. Stopped at the end of the step.
pub fn aborted_by(
    jobs: &JobTable,
    tag: &str,
    data: &Value,
    caller_receives: impl Fn(&str, &str, &Value) -> bool,
) -> Vec<(String, String)> {
    let mut aborts = Vec::new();
    for job in jobs.rollout_jobs() {
        let Some(run) = &job.rollout else { continue };
        let jid = job.record.jid.as_str();
        if run.status.state == RolloutState::Stopped
            || run.status.spec.abort_on.is_empty()
            || tag.strip_prefix("halite/job/").and_then(|rest| rest.strip_prefix(jid)).is_some()
        {
            continue;
        }
        let Some(pattern) = run.status.spec.abort_on.iter().find(|p| halite_protocol::glob::matches(p, tag)) else {
            continue;
        };
        if caller_receives(&job.record.caller, tag, data) {
            aborts.push((jid.to_owned(), abort_reason(pattern, tag)));
        }
    }
    aborts
}

/// Why an event stopped a rollout (or a deployment group); only ever for an event the
/// publisher may receive, so the tag may be shown.
pub fn abort_reason(pattern: &str, tag: &str) -> String {
    format!("an event matching abort_on {pattern}: {tag}")
}

/// Whether a final state counts against the error budget: the target did not do the job.
/// `cancelled` and `skipped` were decided by someone, not failures of the target.
pub fn counts_as_failure(state: MinionJobState) -> bool {
    use MinionJobState::*;
    matches!(state, Failed | TimedOut | Denied | Expired | Offline | Unknown)
}

/// Most `abort_on` patterns a rollout takes, and their longest.
const MAX_ABORT_PATTERNS: usize = 32;
const MAX_PATTERN_LEN: usize = 255;

/// Why a requested rollout cannot be done, if it cannot.
pub fn invalid(spec: &Rollout) -> Option<String> {
    use halite_protocol::message::Amount;
    for amount in [spec.batch, spec.max_errors].into_iter().flatten() {
        if let Amount::Percent(p) = amount {
            if !(1..=100).contains(&p) {
                return Some(format!("a rollout percentage must be from 1 to 100, not {p}"));
            }
        }
    }
    if spec.batch == Some(Amount::Count(0)) {
        return Some("a rollout batch must be at least one target".into());
    }
    if spec.abort_on.len() > MAX_ABORT_PATTERNS {
        return Some(format!("at most {MAX_ABORT_PATTERNS} abort_on patterns"));
    }
    if let Some(long) = spec.abort_on.iter().find(|p| p.is_empty() || p.len() > MAX_PATTERN_LEN) {
        return Some(format!("abort_on pattern {long:?} is empty or longer than {MAX_PATTERN_LEN} bytes"));
    }
    None
}

/// What a rollout does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start these queued targets, in this order.
    Start(Vec<String>),
    /// Stop for good: the queued targets end `skipped`, for this reason.
    Stop(String),
    /// Nothing now: the window is full, the wait has not passed, it is paused or stopped, or
    /// nothing is left to start.
    Nothing,
}

/// A live job's rollout.
#[derive(Debug, Clone)]
pub struct RolloutRun {
    /// What was asked and where it is (stored with the job).
    pub status: RolloutStatus,
    /// No target starts before this (the wait after the last target finished).
    pub not_before: Option<Instant>,
}

impl RolloutRun {
    /// A rollout as stored (a new one is `running`).
    pub fn new(status: RolloutStatus) -> Self {
        RolloutRun { status, not_before: None }
    }

    /// A new rollout of `spec`.
    pub fn status_of(spec: Rollout) -> RolloutStatus {
        RolloutStatus::new(spec)
    }

    /// One of the job's targets reached a final state at `now`: the next starts after the wait.
    pub fn target_finished(&mut self, now: Instant) {
        let wait = self.status.spec.batch_wait_ms;
        if wait > 0 {
            self.not_before = Some(now + Duration::from_millis(wait));
        }
    }

    /// What to do now, given every target's slot.
    pub fn decide(&self, slots: &BTreeMap<String, Slot>, now: Instant) -> Decision {
        if self.status.state != RolloutState::Running {
            return Decision::Nothing;
        }
        let spec = &self.status.spec;
        let total = slots.len();
        let mut queued = Vec::new();
        let (mut active, mut failed) = (0usize, 0usize);
        for (id, slot) in slots {
            match slot.state {
                MinionJobState::Queued => queued.push(id),
                MinionJobState::Sent | MinionJobState::Running => active += 1,
                state if counts_as_failure(state) => failed += 1,
                _ => {}
            }
        }
        if queued.is_empty() {
            return Decision::Nothing;
        }
        if let Some(max) = spec.max_errors {
            let allowed = max.of(total);
            if failed > allowed {
                return Decision::Stop(format!(
                    "{failed} of {total} targets failed, more than max_errors {max} allows ({allowed})"
                ));
            }
        }
        let window = spec.batch.map_or(usize::MAX, |batch| batch.at_least_one_of(total));
        let room = window.saturating_sub(active);
        let canaries = (spec.canary as usize).min(total);
        if canaries > 0 {
            let mut unfinished = false;
            for (id, slot) in slots.iter().take(canaries) {
                if !slot.state.is_final() {
                    unfinished = true;
                } else if slot.state != MinionJobState::Returned {
                    return Decision::Stop(format!("canary {id} ended {}", slot.state.as_str()));
                }
            }
            if unfinished {
                // Only canaries start until every one of them has returned.
                let ids = slots
                    .iter()
                    .take(canaries)
                    .filter(|(_, slot)| slot.state == MinionJobState::Queued)
                    .map(|(id, _)| id.clone())
                    .take(room)
                    .collect::<Vec<_>>();
                return if ids.is_empty() { Decision::Nothing } else { Decision::Start(ids) };
            }
        }
        if self.not_before.is_some_and(|at| now < at) || room == 0 {
            return Decision::Nothing;
        }
        Decision::Start(queued.into_iter().take(room).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    /// An event aborts the rollouts whose `abort_on` matches it and whose publisher may
    /// receive it; never one by its own job's events, nor one already stopped.
    #[test]
    fn an_event_aborts_the_rollouts_whose_publisher_receives_it_but_never_by_its_own_events() {
        use crate::core::jobs::LiveJob;
        use crate::store::JobRecord;
        use halite_protocol::message::{JobSpec, SignedJob, Target, TargetKind};

        let mut jobs = JobTable::default();
        let job = |jid: &str, caller: &str, state| {
            let spec = JobSpec::new(Target { kind: TargetKind::Glob, expr: "*".into() }, "test.ping");
            let signed = SignedJob { body: Vec::new(), signature: Vec::new(), start_by_ms: None };
            let mut record = JobRecord::new(jid.into(), spec, caller.into(), 0, signed);
            let spec = Rollout { abort_on: vec!["minion/*/alarm".into(), "halite/job/*".into()], ..Rollout::default() };
            record.rollout = Some(RolloutStatus { state, ..RolloutRun::status_of(spec) });
            LiveJob::new(record, BTreeMap::new(), Vec::new())
        };
        jobs.insert(job("1", "heat", RolloutState::Running));
        jobs.insert(job("2", "blind", RolloutState::Running));
        jobs.insert(job("3", "heat", RolloutState::Stopped));
        let receives = |caller: &str, _: &str, _: &Value| caller == "heat";
        let aborts = aborted_by(&jobs, "minion/web1/alarm", &Value::Null, receives);
        assert_eq!(aborts, vec![("1".to_owned(), abort_reason("minion/*/alarm", "minion/web1/alarm"))]);
        let own = aborted_by(&jobs, "halite/job/1/ret/web1", &Value::Null, receives);
        assert!(own.is_empty(), "a job's own events never abort its rollout: {own:?}");
        let other = aborted_by(&jobs, "halite/job/9/done", &Value::Null, receives);
        assert_eq!(other.len(), 1, "another job's event does: {other:?}");
    }

    use super::*;
    use halite_protocol::message::Amount;
    use MinionJobState::*;

    fn slots(states: &[MinionJobState]) -> BTreeMap<String, Slot> {
        states
            .iter()
            .enumerate()
            .map(|(i, state)| (format!("m{i:02}"), Slot { state: *state, deadline: None }))
            .collect()
    }

    fn run(spec: Rollout) -> RolloutRun {
        RolloutRun::new(RolloutRun::status_of(spec))
    }

    fn started(decision: Decision) -> Vec<String> {
        match decision {
            Decision::Start(ids) => ids,
            other => panic!("expected targets to start, got {other:?}"),
        }
    }

    #[test]
    fn the_window_is_a_count_or_a_percentage_rounded_up_and_at_least_one() {
        assert_eq!(Amount::Percent(10).at_least_one_of(25), 3);
        assert_eq!(Amount::Percent(10).at_least_one_of(5), 1);
        assert_eq!(Amount::Percent(100).at_least_one_of(7), 7);
        assert_eq!(Amount::Count(0).at_least_one_of(7), 1);
        assert_eq!(Amount::Percent(10).of(25), 2, "an error budget rounds down");
        let now = Instant::now();
        let rollout = run(Rollout { batch: Some(Amount::Percent(10)), ..Rollout::default() });
        assert_eq!(started(rollout.decide(&slots(&[Queued; 25]), now)), ["m00", "m01", "m02"]);
        let rollout = run(Rollout { batch: Some(Amount::Count(2)), ..Rollout::default() });
        let mut states = vec![Queued; 5];
        assert_eq!(started(rollout.decide(&slots(&states), now)), ["m00", "m01"]);
        states[0] = Running;
        states[1] = Sent;
        assert_eq!(rollout.decide(&slots(&states), now), Decision::Nothing, "the window is full");
        states[0] = Returned;
        assert_eq!(started(rollout.decide(&slots(&states), now)), ["m02"], "one finished, the next starts");
    }

    #[test]
    fn targets_waiting_offline_do_not_hold_a_place_in_the_window() {
        let rollout = run(Rollout { batch: Some(Amount::Count(2)), ..Rollout::default() });
        let states = [Waiting, Waiting, Sent, Queued, Queued];
        assert_eq!(started(rollout.decide(&slots(&states), Instant::now())), ["m03"]);
    }

    #[test]
    fn after_a_target_finishes_the_next_starts_once_the_wait_has_passed() {
        let now = Instant::now();
        let mut rollout = run(Rollout { batch: Some(Amount::Count(1)), batch_wait_ms: 5_000, ..Rollout::default() });
        let states = [Returned, Queued];
        rollout.target_finished(now);
        assert_eq!(rollout.decide(&slots(&states), now + Duration::from_millis(4_999)), Decision::Nothing);
        assert_eq!(started(rollout.decide(&slots(&states), now + Duration::from_secs(5))), ["m01"]);
    }

    #[test]
    fn the_error_budget_stops_dispatching_only_when_exceeded() {
        let now = Instant::now();
        let rollout =
            run(Rollout { batch: Some(Amount::Count(1)), max_errors: Some(Amount::Count(1)), ..Rollout::default() });
        assert_eq!(started(rollout.decide(&slots(&[Failed, Queued, Queued]), now)), ["m01"], "one failure is allowed");
        let Decision::Stop(why) = rollout.decide(&slots(&[Failed, TimedOut, Queued]), now) else { panic!() };
        assert!(why.contains("2 of 3 targets failed"), "{why}");
        // Cancelled and skipped targets are not failures; expired, offline and denied are.
        assert!(matches!(rollout.decide(&slots(&[Cancelled, Skipped, Queued]), now), Decision::Start(_)));
        for failure in [Expired, Offline, Denied] {
            assert!(matches!(rollout.decide(&slots(&[failure, Failed, Queued]), now), Decision::Stop(_)));
        }
        let failhard = run(Rollout { max_errors: Some(Amount::Count(0)), ..Rollout::default() });
        assert!(matches!(failhard.decide(&slots(&[Failed, Queued]), now), Decision::Stop(_)));
        let percent =
            run(Rollout { batch: Some(Amount::Count(1)), max_errors: Some(Amount::Percent(20)), ..Rollout::default() });
        // 20% of 10 is 2: a third failure stops it.
        let mut states = vec![Failed, Failed, Queued, Queued, Queued, Queued, Queued, Queued, Queued, Queued];
        assert!(matches!(percent.decide(&slots(&states), now), Decision::Start(_)));
        states[2] = Failed;
        assert!(matches!(percent.decide(&slots(&states), now), Decision::Stop(_)));
    }

    #[test]
    fn canaries_run_alone_and_the_rest_start_only_if_all_returned() {
        let now = Instant::now();
        let rollout = run(Rollout { canary: 2, ..Rollout::default() });
        assert_eq!(started(rollout.decide(&slots(&[Queued; 5]), now)), ["m00", "m01"]);
        assert_eq!(rollout.decide(&slots(&[Returned, Running, Queued, Queued]), now), Decision::Nothing);
        assert_eq!(started(rollout.decide(&slots(&[Returned, Returned, Queued, Queued]), now)), ["m02", "m03"]);
        let Decision::Stop(why) = rollout.decide(&slots(&[Returned, Failed, Queued]), now) else { panic!() };
        assert_eq!(why, "canary m01 ended failed");
        let windowed = run(Rollout { canary: 3, batch: Some(Amount::Count(1)), ..Rollout::default() });
        assert_eq!(started(windowed.decide(&slots(&[Queued; 5]), now)), ["m00"], "canaries keep to the window");
    }

    #[test]
    fn a_paused_or_stopped_rollout_starts_nothing() {
        let mut rollout = run(Rollout::default());
        rollout.status.state = RolloutState::Paused;
        assert_eq!(rollout.decide(&slots(&[Queued]), Instant::now()), Decision::Nothing);
        rollout.status.state = RolloutState::Stopped;
        assert_eq!(rollout.decide(&slots(&[Queued]), Instant::now()), Decision::Nothing);
    }
}
