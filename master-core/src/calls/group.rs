//! What a deployment group's work and requests ask of the store, and what the store answered.
//!
//! A group is worked on one piece at a time (`deploy/group_runs.rs`: an advance, a stop), each a
//! chain of asks: the group read, its members started as deployments are pushed (each a
//! request of its own, `deploy/calls.rs`), the group stored. The loop makes the calls
//! (`store_calls/requests.rs`); `GroupDesk::group_answered` goes on.

use std::collections::BTreeMap;
use std::time::Instant;

use halite_protocol::message::{DeploymentGroup, DeploymentGroupUpdate};

use crate::calls::admin::RequestFrom;
use crate::core::rollout::RolloutRun;
use crate::store::{ConfigRecord, GroupRecord, StoreError};

/// A group's store calls.
pub struct GroupAsk {
    pub id: String,
    pub call: GroupCall,
}

#[derive(Debug)]
pub enum GroupCall {
    /// The group, with the status of each member's deployment in flight, to advance it;
    /// `reply` is answered with the group once advanced (a create or update).
    ReadForAdvance { reply: Option<RequestFrom> },
    /// The group, to stop its rollout for `reason` (an abort event).
    ReadForStop { reason: String },
    /// The group, for a client's request.
    ReadForRequest(GroupRequest),
    /// The config a new or updated group names, to check its creator may read it.
    ReadConfig { config_id: String, then: ConfigFor },
    /// The group, stored.
    Put { record: Box<GroupRecord>, then: GroupPut },
}

/// A client's request that reads a group first.
#[derive(Debug)]
pub enum GroupRequest {
    Show(RequestFrom),
    Update(Box<DeploymentGroupUpdate>, RequestFrom),
}

/// A group whose config is checked before it is stored.
#[derive(Debug)]
pub enum ConfigFor {
    Create(Box<GroupRecord>, RequestFrom),
    Update(Box<GroupRecord>, RequestFrom),
}

/// Why a group is stored, which says what follows.
#[derive(Debug)]
pub enum GroupPut {
    Created(RequestFrom),
    Updated(RequestFrom),
    /// Its rollout stopped by an abort event: announced, then advanced.
    Stopped,
    /// The members it starts recorded (`GroupRecord::starting`): their starts are sent once
    /// this is stored, never before.
    Recorded(Box<crate::calls::group::GroupAdvance>),
    /// Advanced: announced when its status or rollout changed; open until `not_before` (a
    /// wait still ahead when it was read).
    Advanced {
        announce: bool,
        not_before: Option<Instant>,
        reply: Option<RequestFrom>,
    },
}

/// A group to advance, as read.
#[derive(Debug)]
pub struct GroupAdvancing {
    pub record: GroupRecord,
    /// The status of each member's deployment in flight, by deployment id (`None`: gone).
    pub statuses: BTreeMap<String, Option<String>>,
    /// For each member recorded as starting, by server: its deployment's status and job, as
    /// stored (`None`: no such deployment), to tell whether its start landed.
    pub starts: BTreeMap<String, Option<(String, String)>>,
    /// The job each queued member's existing deployment is on, by deployment id: what a start
    /// recorded for it is told from.
    pub jids: BTreeMap<String, String>,
}

/// What the store answered a [`GroupCall`].
// Made once per store call and moved at once into its continuation: boxing the larger
// variants would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum GroupDone {
    ReadForAdvance {
        reply: Option<RequestFrom>,
        read: Result<Option<GroupAdvancing>, StoreError>,
    },
    ReadForStop {
        reason: String,
        read: Result<Option<GroupRecord>, StoreError>,
    },
    ReadForRequest {
        then: GroupRequest,
        read: Result<Option<GroupRecord>, StoreError>,
    },
    Config {
        then: ConfigFor,
        read: Result<Option<ConfigRecord>, StoreError>,
    },
    /// `stored`: whether it was written (false: refused, the group was written since it was read).
    Put {
        record: Box<GroupRecord>,
        then: GroupPut,
        stored: Result<bool, StoreError>,
    },
}

impl GroupDone {
    /// Whether this answer makes its group listen to events (a group read to advance, with
    /// `abort_on`): the loop hands out the events published so far first, so the group hears
    /// only those published after.
    pub fn starts_listening(&self) -> bool {
        matches!(self, GroupDone::ReadForAdvance { read: Ok(Some(advancing)), .. }
            if !advancing.record.group.rollout.spec.abort_on.is_empty())
    }
}

/// A group being advanced: as read, with its rollout deciding, waiting on the members it
/// started (`starting`).
#[derive(Debug)]
pub struct GroupAdvance {
    pub id: String,
    pub record: GroupRecord,
    /// The group as read, to tell whether anything changed.
    pub before: DeploymentGroup,
    pub run: RolloutRun,
    /// When it was read: its rollout decides, and its wait is judged, as of then (a store that
    /// answers slowly must not make a wait look passed, and so forgotten).
    pub now: Instant,
    pub starting: usize,
    /// Members recorded as starting (in `record.starting`) whose starts are to be sent once
    /// that record is stored.
    pub to_start: Vec<String>,
    /// The job each queued member's existing deployment was on when read (by deployment id).
    pub jids: BTreeMap<String, String>,
    pub reply: Option<RequestFrom>,
}
