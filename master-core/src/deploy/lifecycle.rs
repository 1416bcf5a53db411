//! The lifecycles of a deployment, a deployment group and a group's member, as state machines:
//! the statuses each can be in (the wire spells them as `status::*`), one table each of the
//! moves allowed ([`deployment_may_move`], [`member_may_move`]), and one function each that
//! makes a move ([`move_deployment`], [`move_group`], [`move_member`]). Every change of a status
//! goes through these; a move the table refuses leaves the status as it was and is logged, so
//! a fault elsewhere cannot, say, turn a COMPLETE deployment FAILED.
//!
//! A deployment (and a group) is in progress from its creation until its job's end (its
//! members' ends) says complete or failed; pushed again (an update, another action), a finished
//! one goes back in progress; complete and failed never turn into each other. A member is
//! queued until its start is recorded, then in progress until its deployment finishes; a
//! rollout that stops skips the queued ones; a member whose start fails has failed. A member's
//! end is final: a group's update makes new members.

use halite_protocol::message::{status, DeploymentGroup, GroupMember, SoftwareDeployment};
use tracing::error;

/// Where a deployment or a group is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Its job (its members' jobs) not finished yet.
    InProgress,
    /// Finished, signalled success (every member complete).
    Complete,
    /// Finished, and failed (a member did not complete).
    Failed,
}

/// Where a group's member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberStatus {
    /// Its start not recorded yet: waiting for the rollout.
    Queued,
    /// Started: its deployment not finished.
    InProgress,
    /// Its deployment completed.
    Complete,
    /// Its deployment failed, or could not be started.
    Failed,
    /// Never started: the rollout stopped first.
    Skipped,
}

impl Status {
    const ALL: [Status; 3] = [Status::InProgress, Status::Complete, Status::Failed];

    /// As the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => status::IN_PROGRESS,
            Status::Complete => status::COMPLETE,
            Status::Failed => status::FAILED,
        }
    }

    /// The status the wire's `text` names, if it names one.
    pub fn of(text: &str) -> Option<Self> {
        Status::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl MemberStatus {
    const ALL: [MemberStatus; 5] = [
        MemberStatus::Queued,
        MemberStatus::InProgress,
        MemberStatus::Complete,
        MemberStatus::Failed,
        MemberStatus::Skipped,
    ];

    /// As the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberStatus::Queued => status::QUEUED,
            MemberStatus::InProgress => status::IN_PROGRESS,
            MemberStatus::Complete => status::COMPLETE,
            MemberStatus::Failed => status::FAILED,
            MemberStatus::Skipped => status::SKIPPED,
        }
    }

    /// The status the wire's `text` names, if it names one.
    pub fn of(text: &str) -> Option<Self> {
        MemberStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// A member's status as its deployment's says (`None`, a deployment that is gone or reads
    /// as no status: failed).
    pub fn of_deployment(deployment_status: Option<&str>) -> Self {
        match deployment_status.and_then(Status::of) {
            Some(Status::InProgress) => MemberStatus::InProgress,
            Some(Status::Complete) => MemberStatus::Complete,
            Some(Status::Failed) | None => MemberStatus::Failed,
        }
    }

    /// Whether the member is done with (complete, failed or skipped).
    pub fn is_final(self) -> bool {
        matches!(self, MemberStatus::Complete | MemberStatus::Failed | MemberStatus::Skipped)
    }
}

/// Whether a deployment (or a group) may move from `from` to `to`: anything from in progress
/// (pushed again while in progress stays in progress), and back to in progress from a finish.
pub fn deployment_may_move(from: Status, to: Status) -> bool {
    use Status::*;
    matches!((from, to), (InProgress, _) | (Complete | Failed, InProgress))
}

/// Whether a group's member may move from `from` to `to`: queued to started, skipped or failed;
/// started to finished (or started again, unchanged); nothing from a final status.
pub fn member_may_move(from: MemberStatus, to: MemberStatus) -> bool {
    use MemberStatus::*;
    matches!((from, to), (Queued, InProgress | Skipped | Failed) | (InProgress, InProgress | Complete | Failed))
}

/// Moves `deployment` to `to`, if its lifecycle allows; whether it moved.
pub fn move_deployment(deployment: &mut SoftwareDeployment, to: Status) -> bool {
    let moved = move_status(&mut deployment.status, to.as_str(), |from| {
        Status::of(from).is_some_and(|from| deployment_may_move(from, to))
    });
    if !moved {
        error!(deployment = %deployment.id, from = %deployment.status, to = to.as_str(), "a deployment's status may not move so; left as it was");
    }
    moved
}

/// Moves `group` to `to`, if its lifecycle (a deployment's) allows; whether it moved.
pub fn move_group(group: &mut DeploymentGroup, to: Status) -> bool {
    let moved = move_status(&mut group.status, to.as_str(), |from| {
        Status::of(from).is_some_and(|from| deployment_may_move(from, to))
    });
    if !moved {
        error!(group = %group.id, from = %group.status, to = to.as_str(), "a group's status may not move so; left as it was");
    }
    moved
}

/// Moves `member` to `to`, if its lifecycle allows; whether it moved.
pub fn move_member(member: &mut GroupMember, to: MemberStatus) -> bool {
    let moved = move_status(&mut member.status, to.as_str(), |from| {
        MemberStatus::of(from).is_some_and(|from| member_may_move(from, to))
    });
    if !moved {
        error!(server = %member.server_id, from = %member.status, to = to.as_str(), "a group member's status may not move so; left as it was");
    }
    moved
}

/// Sets `status` (the wire's text) to `to` if `allowed` says its table lets it move there.
fn move_status(status: &mut String, to: &str, allowed: impl FnOnce(&str) -> bool) -> bool {
    if !allowed(status) {
        return false;
    }
    to.clone_into(status);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair of deployment statuses, against the table written out.
    #[test]
    fn a_deployment_moves_as_its_table_says_for_every_pair() {
        use Status::*;
        let allowed = [
            (InProgress, InProgress),
            (InProgress, Complete),
            (InProgress, Failed),
            (Complete, InProgress),
            (Failed, InProgress),
        ];
        for from in Status::ALL {
            for to in Status::ALL {
                assert_eq!(deployment_may_move(from, to), allowed.contains(&(from, to)), "{from:?} -> {to:?}");
            }
        }
    }

    /// Every pair of member statuses, against the table written out.
    #[test]
    fn a_member_moves_as_its_table_says_for_every_pair() {
        use MemberStatus::*;
        let allowed = [
            (Queued, InProgress),
            (Queued, Skipped),
            (Queued, Failed),
            (InProgress, InProgress),
            (InProgress, Complete),
            (InProgress, Failed),
        ];
        for from in MemberStatus::ALL {
            for to in MemberStatus::ALL {
                assert_eq!(member_may_move(from, to), allowed.contains(&(from, to)), "{from:?} -> {to:?}");
                if from.is_final() {
                    assert!(!member_may_move(from, to), "a final {from:?} never moves");
                }
            }
        }
    }

    #[test]
    fn statuses_read_back_as_the_wire_spells_them() {
        for s in Status::ALL {
            assert_eq!(Status::of(s.as_str()), Some(s));
        }
        for s in MemberStatus::ALL {
            assert_eq!(MemberStatus::of(s.as_str()), Some(s));
        }
        assert_eq!(Status::of("QUEUED"), None, "a deployment is never queued");
        assert_eq!(Status::of("complete"), None, "the wire's spelling only");
        assert_eq!(MemberStatus::of_deployment(Some("COMPLETE")), MemberStatus::Complete);
        assert_eq!(MemberStatus::of_deployment(None), MemberStatus::Failed, "a deployment gone has failed");
        assert_eq!(MemberStatus::of_deployment(Some("BOGUS")), MemberStatus::Failed);
    }

    /// A refused move leaves the status as it was: a complete deployment is not failed by a
    /// late end, a skipped member is not started, a status no table knows moves nowhere.
    #[test]
    fn a_refused_move_changes_nothing() {
        let mut deployment: SoftwareDeployment = serde_json::from_value(serde_json::json!({
            "id": "d1", "config_id": "c1", "server_id": "vm-1", "input_values": {}, "output_values": {},
            "action": "CREATE", "status": "COMPLETE", "status_reason": "", "derived_config_id": "d1-a",
            "creation_time": "2026-12-03T00:00:00Z", "updated_time": null
        }))
        .unwrap();
        assert!(!move_deployment(&mut deployment, Status::Failed));
        assert_eq!(deployment.status, status::COMPLETE);
        assert!(move_deployment(&mut deployment, Status::InProgress), "pushed again");
        assert!(move_deployment(&mut deployment, Status::Failed));
        assert_eq!(deployment.status, status::FAILED);
        deployment.status = "SOMETHING_NEW".into();
        assert!(!move_deployment(&mut deployment, Status::InProgress));
        assert_eq!(deployment.status, "SOMETHING_NEW");

        let mut member = GroupMember { server_id: "vm-1".into(), deployment_id: None, status: status::SKIPPED.into() };
        assert!(!move_member(&mut member, MemberStatus::InProgress));
        assert_eq!(member.status, status::SKIPPED);
    }
}
