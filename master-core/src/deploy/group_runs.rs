//! The deployment groups this master drives (`deploy/groups.rs` carries them out): which are
//! open and when the next member may start, which deployment belongs to which group, what
//! each listens for, and which the end of the step advances or stops.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use halite_protocol::message::{status, Value};

use crate::calls::admin::RequestFrom;
use crate::calls::group::GroupAdvance;
use crate::core::rollout::abort_reason;

/// Groups this master drives.
#[derive(Debug, Default)]
pub struct GroupRuns {
    /// Open groups → not before when a member may start.
    open: BTreeMap<String, Option<Instant>>,
    /// Their members' deployments → the group.
    of_deployment: BTreeMap<String, String>,
    /// Groups to advance at the end of the step.
    due: BTreeSet<String>,
    /// Open groups' creators and `abort_on` patterns.
    abort_on: BTreeMap<String, (String, Vec<String>)>,
    /// Groups an event aborted (group, why), stopped at the end of the step.
    aborts: Vec<(String, String)>,
    /// Work waiting, in order; one piece is under way at a time (`busy`): each is a chain of
    /// asks, and the next reads what the one before stored.
    work: VecDeque<GroupWork>,
    busy: bool,
    /// The advance under way while its members start.
    advancing: Option<GroupAdvance>,
}

/// A piece of work on one group.
#[derive(Debug)]
pub enum GroupWork {
    /// Advance it; answer `reply` with it once advanced (a client's create or update).
    Advance { id: String, reply: Option<RequestFrom> },
    /// Stop its rollout (an abort event), then advance it.
    Stop { id: String, reason: String },
}

impl GroupRuns {
    /// `group` is open; its next member may start `not_before` (at once without one).
    pub fn open(&mut self, group: &str, not_before: Option<Instant>) {
        self.open.insert(group.to_owned(), not_before);
    }

    /// When `group`'s next member may start, if it waits.
    pub fn not_before(&self, group: &str) -> Option<Instant> {
        self.open.get(group).copied().flatten()
    }

    /// `group` is advanced at the end of the step.
    pub fn due(&mut self, group: &str) {
        self.due.insert(group.to_owned());
    }

    /// `deployment` is a member of `group`: its end moves the group on.
    pub fn follow(&mut self, deployment: &str, group: &str) {
        self.of_deployment.insert(deployment.to_owned(), group.to_owned());
    }

    /// `group`'s creator, and the patterns of events that abort it.
    pub fn listen(&mut self, group: &str, creator: String, patterns: Vec<String>) {
        self.abort_on.insert(group.to_owned(), (creator, patterns));
    }

    /// An event, as the loop hands it (`Master::hear_events`): the groups it aborts, whose
    /// creator may receive it (`creator_receives`, as for a job's rollout; a group's own events
    /// never abort it), stop at the end of the step. A deployment that changed status
    /// (`halite/deployment/<id>/<status>`, from this master or another) moves its group on,
    /// if this master drives it.
    pub fn hear(&mut self, tag: &str, data: &Value, creator_receives: impl Fn(&str, &str, &Value) -> bool) {
        for (group, (creator, patterns)) in &self.abort_on {
            if tag.starts_with("halite/deployment_group/") && tag.contains(group.as_str()) {
                continue;
            }
            let Some(pattern) = patterns.iter().find(|p| halite_protocol::glob::matches(p, tag)) else { continue };
            if creator_receives(creator, tag, data) {
                self.aborts.push((group.clone(), abort_reason(pattern, tag)));
            }
        }
        let Some(rest) = tag.strip_prefix("halite/deployment/") else { return };
        let Some((deployment, state)) = rest.split_once('/') else { return };
        if state != status::IN_PROGRESS {
            self.deployment_ended(deployment);
        }
    }

    /// Whether any group listens for events (its abort patterns, its members' deployments).
    pub fn listening(&self) -> bool {
        !self.abort_on.is_empty() || !self.of_deployment.is_empty()
    }

    /// `deployment` ended: its group, if open here, is advanced at the end of the step.
    fn deployment_ended(&mut self, deployment: &str) {
        if let Some(group) = self.of_deployment.get(deployment) {
            if self.open.contains_key(group) {
                self.due.insert(group.clone());
            }
        }
    }

    /// The groups to stop.
    pub fn take_aborts(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.aborts)
    }

    /// The groups to advance, in id order: those due and, `woken_by_time`, those whose wait
    /// has passed at `now`.
    pub fn take_due(&mut self, woken_by_time: bool, now: Instant) -> BTreeSet<String> {
        let mut due = std::mem::take(&mut self.due);
        if woken_by_time {
            let waited = self.open.iter().filter(|(_, at)| at.is_some_and(|at| at <= now));
            due.extend(waited.map(|(group, _)| group.clone()));
        }
        due
    }

    /// `group` is finished or forgotten here (an update starts it over): what it heard and has
    /// not acted upon yet goes too, so an event from before an update never stops the group
    /// updated.
    pub fn close(&mut self, group: &str) {
        self.open.remove(group);
        self.abort_on.remove(group);
        self.aborts.retain(|(aborted, _)| aborted != group);
        self.of_deployment.retain(|_, of| of != group);
    }

    /// The earliest wait of an open group.
    pub fn next_wait(&self) -> Option<Instant> {
        self.open.values().flatten().min().copied()
    }

    /// Queues a piece of work, done after those before it.
    pub fn queue(&mut self, work: GroupWork) {
        self.work.push_back(work);
    }

    /// The next piece of work to start, unless one is under way: it is under way until
    /// [`GroupRuns::work_done`].
    pub fn next_work(&mut self) -> Option<GroupWork> {
        if self.busy {
            return None;
        }
        let work = self.work.pop_front()?;
        self.busy = true;
        Some(work)
    }

    /// The piece of work under way is done.
    pub fn work_done(&mut self) {
        self.busy = false;
    }

    /// Keeps the advance under way while its members start.
    pub fn wait_on_members(&mut self, advance: GroupAdvance) {
        self.advancing = Some(advance);
    }

    /// The advance whose members were starting.
    pub fn take_advancing(&mut self) -> Option<GroupAdvance> {
        self.advancing.take()
    }

    /// Whether groups wait to be advanced or stopped.
    pub fn has_work(&self) -> bool {
        !self.due.is_empty() || !self.aborts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_members_end_moves_its_open_group_only() {
        let mut groups = GroupRuns::default();
        groups.open("g1", None);
        groups.follow("d1", "g1");
        groups.follow("d2", "g2");
        groups.deployment_ended("d2");
        groups.deployment_ended("d1");
        let now = Instant::now();
        assert_eq!(groups.take_due(false, now).into_iter().collect::<Vec<_>>(), ["g1"]);
        groups.close("g1");
        groups.deployment_ended("d1");
        assert!(groups.take_due(false, now).is_empty(), "closed: its deployments are forgotten");
        assert!(groups.listening(), "g2's deployment is still followed");
    }

    #[test]
    fn an_abort_heard_before_a_group_closes_is_forgotten_with_it() {
        let mut groups = GroupRuns::default();
        groups.open("g1", None);
        groups.open("g2", None);
        for group in ["g1", "g2"] {
            groups.listen(group, "tenant".into(), vec!["minion/*/alarm".into()]);
        }
        groups.hear("minion/web1/alarm", &Value::Null, |_, _, _| true);
        groups.close("g1");
        let aborted: Vec<String> = groups.take_aborts().into_iter().map(|(group, _)| group).collect();
        assert_eq!(aborted, ["g2"], "g1 starts over without the abort it heard before");
    }

    #[test]
    fn work_is_handed_out_one_piece_at_a_time_in_order() {
        let mut groups = GroupRuns::default();
        groups.queue(GroupWork::Stop { id: "g1".into(), reason: "alarm".into() });
        groups.queue(GroupWork::Advance { id: "g2".into(), reply: None });
        assert!(matches!(groups.next_work(), Some(GroupWork::Stop { id, .. }) if id == "g1"));
        assert!(groups.next_work().is_none(), "g1's stop is under way");
        groups.work_done();
        assert!(matches!(groups.next_work(), Some(GroupWork::Advance { id, .. }) if id == "g2"));
        groups.work_done();
        assert!(groups.next_work().is_none());
    }

    #[test]
    fn a_wait_is_due_when_woken_by_time_after_it() {
        let now = Instant::now();
        let mut groups = GroupRuns::default();
        groups.open("g1", Some(now + Duration::from_secs(1)));
        assert_eq!(groups.next_wait(), Some(now + Duration::from_secs(1)));
        assert!(groups.take_due(true, now).is_empty());
        assert!(groups.take_due(false, now + Duration::from_secs(2)).is_empty(), "not woken by time");
        assert_eq!(groups.take_due(true, now + Duration::from_secs(2)).len(), 1);
    }

    /// An event aborts the groups listening for it whose creator may receive it, never a
    /// group by its own events; a deployment's end (not its start) moves its group on.
    #[test]
    fn an_event_aborts_the_groups_whose_creator_receives_it_and_a_deployments_end_moves_its_group() {
        let mut groups = GroupRuns::default();
        for group in ["g1", "g2", "g3"] {
            groups.open(group, None);
        }
        groups.listen("g1", "heat".into(), vec!["minion/*/alarm".into(), "halite/deployment_group/*".into()]);
        groups.listen("g2", "blind".into(), vec!["minion/*/alarm".into()]);
        groups.follow("d3", "g3");
        let receives = |creator: &str, _: &str, _: &Value| creator == "heat";
        let data = Value::Null;
        groups.hear("minion/web1/alarm", &data, receives);
        groups.hear("halite/deployment_group/g1/IN_PROGRESS", &data, receives);
        let aborts = groups.take_aborts();
        assert_eq!(aborts.len(), 1, "{aborts:?}");
        assert_eq!(aborts[0].0, "g1");
        assert!(aborts[0].1.contains("minion/*/alarm") && aborts[0].1.contains("minion/web1/alarm"), "{aborts:?}");

        let now = Instant::now();
        groups.hear(&format!("halite/deployment/d3/{}", status::IN_PROGRESS), &data, receives);
        assert!(groups.take_due(false, now).is_empty(), "a deployment in progress moves nothing");
        groups.hear(&format!("halite/deployment/d3/{}", status::COMPLETE), &data, receives);
        assert_eq!(groups.take_due(false, now).into_iter().collect::<Vec<_>>(), ["g3"]);
    }
}
