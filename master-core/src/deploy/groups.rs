//! Deployment groups: one config to several servers (Heat's `SoftwareDeploymentGroup`), each
//! server getting a deployment of its own, started as the group's rollout allows. The same
//! decision as a job's rollout ([`RolloutRun::decide`]) runs over the group's members: a server
//! not started yet is `queued`, an `IN_PROGRESS` deployment holds a place in the window, a
//! `COMPLETE` one counts as returned and a `FAILED` one as failed.
//!
//! The group is stored as one document and driven by the master that created it (its `owner`),
//! after every step in which one of its deployments ended and when its wait ends; a
//! restarted master resumes the groups it owns. Groups listen to events: the loop hands them
//! each one (`Master::hear_events`) before it advances them.
//!
//! Nothing here awaits the store or acts on the master: the loop lends a [`GroupDesk`] (the
//! groups this master drives, and what their work decides with, read-only) and carries out the
//! [`Effect`](crate::outputs::effects::Effect)s it returns (`Core::with_groups`). Work on groups (an advance, a stop) is done
//! one piece at a time (`deploy/group_runs.rs`), each a chain of asks (`group_calls.rs`): the
//! group read, its members started as deployments are pushed (`deploy/calls.rs`, told back
//! through [`GroupDesk::member_pushed`]), the group stored.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use halite_protocol::message::{
    status, DeploymentGroup, DeploymentGroupUpdate, GroupMember, MinionJobState, NewDeployment, NewDeploymentGroup,
    RequestBody, ResponseBody, RolloutState, SoftwareDeployment,
};
use tracing::{info, warn};

use crate::authz::Access;
use crate::calls::admin::RequestFrom;
use crate::calls::deploy::{DeployAsk, DeployCall, DeploymentRead, Member, Push, Requester};
use crate::calls::group::GroupAdvance;
use crate::calls::group::{ConfigFor, GroupAdvancing, GroupAsk, GroupCall, GroupDone, GroupPut, GroupRequest};
use crate::clock::new_uuid;
use crate::clock::Now;
use crate::config::MasterConfig;
use crate::core::jobs::Slot;
use crate::core::rollout::{Decision, RolloutRun};
use crate::deploy::group_runs::{GroupRuns, GroupWork};
use crate::deploy::lifecycle::{self, MemberStatus, Status};
use crate::outputs::asks::Ask;
use crate::outputs::effects::Effects;
use crate::request_error::RequestError;
use crate::store::{GroupRecord, MemberStart, StoreError};

/// Most servers one group deploys to.
const MAX_GROUP_SERVERS: usize = 10_000;

/// A member's status as a slot state, for the rollout's decision.
fn as_slot_state(member_status: &str) -> MinionJobState {
    match member_status {
        status::QUEUED => MinionJobState::Queued,
        status::IN_PROGRESS => MinionJobState::Sent,
        status::COMPLETE => MinionJobState::Returned,
        status::SKIPPED => MinionJobState::Skipped,
        _ => MinionJobState::Failed,
    }
}

/// Stops a group's rollout for `reason`: the servers not started yet end `SKIPPED`.
fn stop(rollout: &mut halite_protocol::message::RolloutStatus, members: &mut [GroupMember], reason: String) {
    rollout.state = RolloutState::Stopped;
    rollout.reason = Some(reason);
    for member in members.iter_mut().filter(|m| m.status == status::QUEUED) {
        lifecycle::move_member(member, MemberStatus::Skipped);
    }
}

fn is_final(member_status: &str) -> bool {
    MemberStatus::of(member_status).is_none_or(MemberStatus::is_final)
}

/// Where deployment groups are worked on: the groups this master drives, theirs to change,
/// and what their work decides with (who may do what, the config, the time), read-only.
/// What else it decides (answers, store calls, events) it returns as effects.
pub struct GroupDesk<'a> {
    pub runs: &'a mut GroupRuns,
    pub access: Access<'a>,
    pub config: &'a MasterConfig,
    /// The time, read when a decision needs it.
    pub now: Now,
    pub out: Effects,
}

impl GroupDesk<'_> {
    fn respond(&mut self, peer: halite_transport::PeerId, request_id: u64, body: ResponseBody) {
        self.out.reply(peer, request_id, Ok(body));
    }

    fn may_deploy(
        &self,
        acl: Option<&halite_protocol::message::PrincipalAcl>,
        server: Option<&str>,
    ) -> Result<(), RequestError> {
        super::may_deploy(&self.access, acl, server)
    }

    fn check_signal_url(&self, spec: &NewDeployment) -> Result<(), RequestError> {
        super::check_signal_url(self.config, spec)
    }

    /// Answers a request about deployment groups, or asks the store what it needs.
    pub fn answer_group_request(&mut self, from: RequestFrom, body: RequestBody) {
        let (id, call) = match body {
            RequestBody::DeploymentGroupCreate(spec) => {
                let record = match self.new_group(spec, &from) {
                    Ok(record) => record,
                    Err(error) => return self.out.reply(from.peer, from.request_id, Err(error)),
                };
                let (id, config_id) = (record.group.id.clone(), record.spec.config_id.clone());
                (id, GroupCall::ReadConfig { config_id, then: ConfigFor::Create(Box::new(record), from) })
            }
            RequestBody::DeploymentGroupShow { id } => (id, GroupCall::ReadForRequest(GroupRequest::Show(from))),
            RequestBody::DeploymentGroupUpdate { id, update } => {
                (id, GroupCall::ReadForRequest(GroupRequest::Update(Box::new(update), from)))
            }
            _ => {
                let why = RequestError::bad_request("not a deployment group request");
                return self.out.reply(from.peer, from.request_id, Err(why));
            }
        };
        self.ask_group(id, call);
    }

    /// A new group as asked for, if valid and allowed, not stored yet (its config is checked
    /// next).
    fn new_group(&mut self, spec: NewDeploymentGroup, from: &RequestFrom) -> Result<GroupRecord, RequestError> {
        let servers = valid_servers(spec.servers.clone())?;
        for server in &servers {
            self.may_deploy(from.acl.as_deref(), Some(server))?;
        }
        if let Some(why) = spec.rollout.as_ref().and_then(crate::core::rollout::invalid) {
            return Err(RequestError::bad_request(why));
        }
        // What each member's deployment will be is checked once, before anything starts.
        super::validate::deployment(&member_spec(&spec, &servers[0]))?;
        self.check_signal_url(&member_spec(&spec, &servers[0]))?;
        let now = self.now.wall_ms;
        let group = DeploymentGroup {
            id: new_uuid(),
            config_id: spec.config_id.clone(),
            action: spec.action.clone().unwrap_or_else(|| "CREATE".into()).to_ascii_uppercase(),
            status: Status::InProgress.as_str().into(),
            status_reason: "Deploy data available".into(),
            rollout: RolloutRun::status_of(spec.rollout.clone().unwrap_or_default()),
            members: servers
                .iter()
                .map(|s| GroupMember {
                    server_id: s.clone(),
                    deployment_id: None,
                    status: MemberStatus::Queued.as_str().into(),
                })
                .collect(),
            creation_time: halite_protocol::time::iso8601_utc(now),
        };
        Ok(GroupRecord {
            group,
            spec,
            principal: from.principal.clone(),
            owner: self.config.id.clone(),
            starting: BTreeMap::new(),
            revision: 0,
        })
    }

    /// A group changed in place (Heat's group update): the servers it keeps run the action
    /// (`UPDATE` by default) with the new config and inputs, the servers it gains `CREATE`, as
    /// the rollout allows; the servers it loses leave it. Not stored yet.
    fn updated_group(
        &mut self,
        mut record: GroupRecord,
        update: DeploymentGroupUpdate,
        from: &RequestFrom,
    ) -> Result<GroupRecord, RequestError> {
        let listed = update
            .servers
            .clone()
            .unwrap_or_else(|| record.group.members.iter().map(|m| m.server_id.clone()).collect());
        let servers = valid_servers(listed)?;
        for server in &servers {
            self.may_deploy(from.acl.as_deref(), Some(server))?;
        }
        if let Some(why) = update.rollout.as_ref().and_then(crate::core::rollout::invalid) {
            return Err(RequestError::bad_request(why));
        }
        let action = update.action.clone().unwrap_or_else(|| "UPDATE".into()).to_ascii_uppercase();
        if !matches!(action.as_str(), "UPDATE" | "SUSPEND" | "RESUME") {
            return Err(RequestError::bad_request(format!(
                "a group update runs UPDATE, SUSPEND or RESUME, not {action} (delete members by leaving them out)"
            )));
        }
        if let Some(config_id) = &update.config_id {
            record.spec.config_id = config_id.clone();
        }
        if let Some(values) = update.input_values {
            record.spec.input_values = values;
        }
        if let Some(rollout) = update.rollout {
            record.spec.rollout = Some(rollout);
        }
        super::validate::deployment(&member_spec(&record.spec, &servers[0]))?;
        // Members in flight are left to finish on their own: the new action supersedes them.
        let kept: BTreeMap<String, Option<String>> =
            record.group.members.iter().map(|m| (m.server_id.clone(), m.deployment_id.clone())).collect();
        record.group.members = servers
            .iter()
            .map(|server| GroupMember {
                server_id: server.clone(),
                deployment_id: kept.get(server).cloned().flatten(),
                status: MemberStatus::Queued.as_str().into(),
            })
            .collect();
        record.group.config_id = record.spec.config_id.clone();
        // The servers it keeps run the update's action; those it gains, the group's own (CREATE).
        record.group.action = action;
        lifecycle::move_group(&mut record.group, Status::InProgress);
        record.group.status_reason = "Deploy data available".into();
        record.group.rollout = RolloutRun::status_of(record.spec.rollout.clone().unwrap_or_default());
        record.owner = self.config.id.clone();
        // Starts recorded and not yet confirmed are superseded with the rest.
        record.starting.clear();
        Ok(record)
    }

    /// Whether `from` may see a group: its creator (or root, or an administrator) while it
    /// may deploy to every one of its servers. Another's is answered like a group that does
    /// not exist: its id reveals nothing.
    fn may_see_group(&self, record: &GroupRecord, from: &RequestFrom) -> bool {
        self.access.may_own(from.who(), &record.principal)
            && record.group.members.iter().all(|m| self.may_deploy(from.acl.as_deref(), Some(&m.server_id)).is_ok())
    }

    /// What the store answered a group's work or request: it goes on, or is answered.
    pub fn group_answered(&mut self, id: String, done: GroupDone) {
        match done {
            GroupDone::ReadForAdvance { reply, read } => self.group_read(id, reply, read),
            GroupDone::ReadForStop { reason, read } => self.group_read_for_stop(id, reason, read),
            GroupDone::ReadForRequest { then, read } => self.group_request_read(id, then, read),
            GroupDone::Config { then, read } => {
                let (record, from, put) = match then {
                    ConfigFor::Create(record, from) => (record, from, true),
                    ConfigFor::Update(record, from) => (record, from, false),
                };
                // Its members may reference only a config the group's creator may read.
                let readable = match read {
                    Err(error) => Err(error.into()),
                    Ok(Some(config)) if self.access.may_own(from.who(), &config.owner) => Ok(()),
                    Ok(_) => Err(super::no_config(&record.spec.config_id)),
                };
                match readable {
                    Ok(()) => {
                        let then = if put { GroupPut::Created(from) } else { GroupPut::Updated(from) };
                        self.ask_group(id, GroupCall::Put { record, then });
                    }
                    Err(error) => self.out.reply(from.peer, from.request_id, Err(error)),
                }
            }
            GroupDone::Put { record, then, stored } => self.group_stored(id, *record, then, stored),
        }
    }

    /// A group read for a client's show or update: shown, or changed as asked (its new
    /// config checked first, if it names one) and stored.
    fn group_request_read(&mut self, id: String, then: GroupRequest, read: Result<Option<GroupRecord>, StoreError>) {
        let (from, update) = match then {
            GroupRequest::Show(from) => (from, None),
            GroupRequest::Update(update, from) => (from, Some(*update)),
        };
        let record = match read {
            Ok(Some(record)) if self.may_see_group(&record, &from) => record,
            Ok(_) => return self.out.reply(from.peer, from.request_id, Err(no_group(&id))),
            Err(error) => return self.out.reply(from.peer, from.request_id, Err(error.into())),
        };
        let Some(update) = update else {
            return self.respond(from.peer, from.request_id, ResponseBody::DeploymentGroup(record.group));
        };
        let named = update.config_id.clone();
        let record = match self.updated_group(record, update, &from) {
            Ok(record) => Box::new(record),
            Err(error) => return self.out.reply(from.peer, from.request_id, Err(error)),
        };
        match named {
            Some(config_id) => {
                self.ask_group(id, GroupCall::ReadConfig { config_id, then: ConfigFor::Update(record, from) })
            }
            None => self.ask_group(id, GroupCall::Put { record, then: GroupPut::Updated(from) }),
        }
    }

    fn ask_group(&mut self, id: String, call: GroupCall) {
        self.out.ask(Ask::Group(Box::new(GroupAsk { id, call })));
    }

    /// A group stored (or not), and what follows.
    /// Every write is guarded by the revision it read (`DeployStore::put_group`): one refused
    /// because the group was written since (another master's update, a write of this master's
    /// that landed though it was reported failed) is never retried blindly; the group is read
    /// again and decided anew.
    fn group_stored(&mut self, id: String, record: GroupRecord, then: GroupPut, stored: Result<bool, StoreError>) {
        match then {
            GroupPut::Created(from) => self.group_request_stored(id, &record, from, true, stored),
            GroupPut::Updated(from) => self.group_request_stored(id, &record, from, false, stored),
            GroupPut::Stopped => match stored {
                Ok(true) => {
                    self.announce_group(&record);
                    self.ask_group(id, GroupCall::ReadForAdvance { reply: None });
                }
                Ok(false) => {
                    let reason = record.group.rollout.reason.clone().unwrap_or_default();
                    info!(group = %id, "the group changed while its rollout was being stopped; stopping it again as read");
                    self.runs.queue(GroupWork::Stop { id, reason });
                    self.group_work_done();
                }
                Err(error) => {
                    warn!(%error, group = %id, "stopping a deployment group failed");
                    self.group_work_done();
                }
            },
            GroupPut::Recorded(mut advance) => match stored {
                Ok(true) => {
                    advance.record.revision += 1;
                    self.send_starts(*advance);
                }
                Ok(false) => self.advance_again(&id, advance.reply),
                // It may have been written: the next read says which starts were recorded,
                // and sends those that did not land (`group_read`).
                Err(error) => self.advance_failed(&id, error.into(), advance.reply),
            },
            GroupPut::Advanced { announce, not_before, reply } => match stored {
                Ok(true) => {
                    if announce {
                        self.announce_group(&record);
                    }
                    self.group_advanced(&id, record, not_before, reply);
                }
                Ok(false) => self.advance_again(&id, reply),
                Err(error) => self.advance_failed(&id, error.into(), reply),
            },
        }
    }

    /// A write of the group was refused (it was written since it was read): read and
    /// advanced again at once.
    fn advance_again(&mut self, id: &str, reply: Option<RequestFrom>) {
        info!(group = %id, "the group was written since it was read; advancing it again as stored");
        self.runs.open(id, None);
        self.runs.queue(GroupWork::Advance { id: id.to_owned(), reply });
        self.group_work_done();
    }

    /// A group a client created or updated, stored (or not): advanced, then the client is
    /// answered with it.
    fn group_request_stored(
        &mut self,
        id: String,
        record: &GroupRecord,
        from: RequestFrom,
        created: bool,
        stored: Result<bool, StoreError>,
    ) {
        match stored {
            Ok(true) => {}
            Ok(false) => {
                let error = RequestError::conflict(format!(
                    "deployment group {id} was changed meanwhile (by another request or master); read it and try again"
                ));
                return self.out.reply(from.peer, from.request_id, Err(error));
            }
            Err(error) => return self.out.reply(from.peer, from.request_id, Err(error.into())),
        }
        let servers = record.group.members.len();
        if created {
            info!(group = %id, servers, "deployment group created");
        } else {
            info!(group = %id, servers, action = %record.group.action, "deployment group updated in place");
            // It starts over under its new action: members heard so far are forgotten, and
            // what it listens for is set again as it advances.
            self.forget_group(&id);
        }
        self.runs.open(&id, None);
        self.runs.queue(GroupWork::Advance { id, reply: Some(from) });
        self.start_group_work();
    }

    /// A group's new status or rollout, on the bus for its creator.
    fn announce_group(&mut self, record: &GroupRecord) {
        self.out.emit_shared(
            format!("halite/deployment_group/{}/{}", record.group.id, record.group.status),
            super::owned_event(serde_json::to_value(&record.group).unwrap_or_default(), &record.principal),
        );
    }

    /// Queues the groups an event aborted and those due (woken by time, also those whose wait
    /// has passed), and starts the first piece of work.
    pub fn advance_groups(&mut self, tick: bool) {
        for (id, reason) in self.runs.take_aborts() {
            self.runs.queue(GroupWork::Stop { id, reason });
        }
        for id in self.runs.take_due(tick, self.now.at) {
            self.runs.queue(GroupWork::Advance { id, reply: None });
        }
        self.start_group_work();
    }

    /// Starts the next piece of work on a group, unless one is under way.
    fn start_group_work(&mut self) {
        let Some(work) = self.runs.next_work() else { return };
        match work {
            GroupWork::Advance { id, reply } => self.ask_group(id, GroupCall::ReadForAdvance { reply }),
            GroupWork::Stop { id, reason } => self.ask_group(id, GroupCall::ReadForStop { reason }),
        }
    }

    /// The piece of work under way is done: the next starts.
    fn group_work_done(&mut self) {
        self.runs.work_done();
        self.start_group_work();
    }

    /// An abort event stops a group's rollout, as read: its queued servers end `SKIPPED`, then
    /// it is advanced.
    fn group_read_for_stop(&mut self, id: String, reason: String, read: Result<Option<GroupRecord>, StoreError>) {
        let mut record = match read {
            Ok(Some(record)) => record,
            Ok(None) => return self.group_work_done(),
            Err(error) => {
                warn!(%error, group = %id, "stopping a deployment group failed");
                return self.group_work_done();
            }
        };
        if record.group.status != status::IN_PROGRESS || record.group.rollout.state == RolloutState::Stopped {
            return self.group_work_done();
        }
        info!(group = %id, %reason, "deployment group's rollout stopped");
        stop(&mut record.group.rollout, &mut record.group.members, reason);
        self.ask_group(id, GroupCall::Put { record: Box::new(record), then: GroupPut::Stopped });
    }

    /// A group to advance, as read with its members' deployments: their statuses are taken,
    /// then its rollout decides.
    fn group_read(&mut self, id: String, reply: Option<RequestFrom>, read: Result<Option<GroupAdvancing>, StoreError>) {
        let GroupAdvancing { mut record, statuses, starts, jids } = match read {
            Ok(Some(advancing)) => advancing,
            Ok(None) => {
                if let Some(from) = reply {
                    self.out.reply(from.peer, from.request_id, Err(no_group(&id)));
                }
                return self.group_work_done();
            }
            Err(error) => return self.advance_failed(&id, error.into(), reply),
        };
        if !record.group.rollout.spec.abort_on.is_empty() {
            // A group hears only the events published after it listens: the loop hands out
            // those before (`GroupDone::starts_listening`).
            self.runs.listen(&id, record.principal.clone(), record.group.rollout.spec.abort_on.clone());
        }
        if record.group.status != status::IN_PROGRESS {
            self.forget_group(&id);
            return self.group_advanced(&id, record, None, reply);
        }
        // Updated through another master since: that master drives it now (two drivers would
        // only refuse each other's writes).
        if record.owner != self.config.id {
            info!(group = %id, owner = %record.owner, "the group was updated through another master, which drives it now");
            self.forget_group(&id);
            if let Some(from) = reply {
                self.respond(from.peer, from.request_id, ResponseBody::DeploymentGroup(record.group));
            }
            return self.group_work_done();
        }
        let before = record.group.clone();
        let now = self.now.at;
        let mut finished_now = false;
        for member in &mut record.group.members {
            let Some(deployment) = &member.deployment_id else { continue };
            let Some(read) = statuses.get(deployment) else { continue };
            self.runs.follow(deployment, &id);
            lifecycle::move_member(member, MemberStatus::of_deployment(read.as_deref()));
            finished_now |= is_final(&member.status);
        }
        // Starts recorded before an advance that did not finish: each landed (its deployment
        // shows it) is followed, each that did not is sent again, never a second time.
        let mut to_start = Vec::new();
        for (server, start) in std::mem::take(&mut record.starting) {
            let Some(member) = record.group.members.iter_mut().find(|m| m.server_id == server) else { continue };
            match (starts.get(&server).cloned().flatten(), &member.deployment_id) {
                // Landed: its deployment exists and is on another job than before (a new
                // member's had none).
                (Some((status, jid)), Some(deployment)) if start.jid_before.as_ref() != Some(&jid) => {
                    self.runs.follow(deployment, &id);
                    finished_now |= is_final(&status);
                    lifecycle::move_member(member, MemberStatus::of_deployment(Some(&status)));
                }
                // A server's deployment deleted before it could run again.
                (None, _) if start.jid_before.is_some() => {
                    lifecycle::move_member(member, MemberStatus::Failed);
                }
                _ => {
                    record.starting.insert(server.clone(), start);
                    to_start.push(server);
                }
            }
        }
        let mut run = RolloutRun::new(record.group.rollout.clone());
        run.not_before = self.runs.not_before(&id);
        if finished_now {
            run.target_finished(now);
        }
        let advance = GroupAdvance { id, record, before, run, now, starting: 0, to_start, jids, reply };
        if advance.to_start.is_empty() {
            self.group_decide(advance)
        } else {
            self.send_starts(advance)
        }
    }

    /// The group's rollout decides until it starts nothing more: the members it starts are
    /// waited on (`member_pushed`), then it decides again.
    fn group_decide(&mut self, mut advance: GroupAdvance) {
        let now = advance.now;
        loop {
            let slots: BTreeMap<String, Slot> = advance
                .record
                .group
                .members
                .iter()
                .map(|m| (m.server_id.clone(), Slot { state: as_slot_state(&m.status), deadline: None }))
                .collect();
            match advance.run.decide(&slots, now) {
                Decision::Nothing => break,
                Decision::Stop(reason) => {
                    info!(group = %advance.id, %reason, "deployment group's rollout stopped");
                    stop(&mut advance.run.status, &mut advance.record.group.members, reason);
                    break;
                }
                Decision::Start(servers) => {
                    for server in servers {
                        self.record_start(&mut advance, server);
                    }
                }
            }
        }
        if advance.to_start.is_empty() {
            return self.group_decided(advance);
        }
        // The members to start are stored as starting first: a retry after any failure finds
        // them, and starts none twice.
        let (id, record) = (advance.id.clone(), Box::new(advance.record.clone()));
        self.ask_group(id, GroupCall::Put { record, then: GroupPut::Recorded(Box::new(advance)) });
    }

    /// Records a member as starting: its deployment id (a new one for a server without), the
    /// mark that tells whether its start landed, `IN_PROGRESS`. A new member whose deployment
    /// would be refused fails at once instead.
    fn record_start(&mut self, advance: &mut GroupAdvance, server: String) {
        let record = &mut advance.record;
        let Some(member) = record.group.members.iter_mut().find(|m| m.server_id == server) else { return };
        let jid_before = match &member.deployment_id {
            Some(deployment) => Some(advance.jids.get(deployment).cloned().unwrap_or_default()),
            None => {
                if let Err(error) = self.valid_member_spec(&record.spec, &server) {
                    return member_failed(advance, &server, &error);
                }
                member.deployment_id = Some(new_uuid());
                None
            }
        };
        lifecycle::move_member(member, MemberStatus::InProgress);
        record.starting.insert(server.clone(), MemberStart { jid_before });
        advance.to_start.push(server);
    }

    /// A new member's deployment as the group asks for it, if it would be accepted.
    fn valid_member_spec(&self, spec: &NewDeploymentGroup, server: &str) -> Result<NewDeployment, RequestError> {
        let spec = member_spec(spec, server);
        super::validate::deployment(&spec).map_err(RequestError::from)?;
        self.check_signal_url(&spec)?;
        Ok(spec)
    }

    /// Sends the starts recorded (`to_start`), then waits on them (`member_pushed`).
    fn send_starts(&mut self, mut advance: GroupAdvance) {
        for server in std::mem::take(&mut advance.to_start) {
            self.start_member(&mut advance, server);
        }
        if advance.starting > 0 {
            return self.runs.wait_on_members(advance);
        }
        self.group_decide(advance);
    }

    /// Starts one member's deployment, recorded as starting: a new one (with the id recorded),
    /// or a kept member's run again with the group's config, inputs and action. One that
    /// cannot start fails at once.
    fn start_member(&mut self, advance: &mut GroupAdvance, server: String) {
        let record = &advance.record;
        let Some(member) = record.group.members.iter().find(|m| m.server_id == server) else { return };
        let Some(start) = record.starting.get(&server) else { return };
        let (existing, principal) = (member.deployment_id.clone(), record.principal.clone());
        let call = match (start.jid_before.is_some(), existing) {
            (_, None) => return,
            (true, Some(deployment)) => {
                let update = halite_protocol::message::DeploymentUpdate {
                    config_id: Some(record.spec.config_id.clone()),
                    input_values: Some(record.spec.input_values.clone()),
                    action: Some(record.group.action.clone()),
                };
                DeployCall::ReadDeployment { id: deployment, then: DeploymentRead::Restart(update) }
            }
            (false, Some(id)) => {
                let spec = match self.valid_member_spec(&record.spec, &server) {
                    Ok(spec) => spec,
                    Err(error) => return member_failed(advance, &server, &error),
                };
                let mut deployment = super::records::new_deployment(spec, &principal, self.now.wall_ms);
                deployment.deployment.id = id;
                DeployCall::ReadPush(Box::new(Push { record: deployment, update: false, config_checked: false }))
            }
        };
        let from = Requester::Member(Member { group: advance.id.clone(), server, principal });
        self.out.ask(Ask::Deploy(Box::new(DeployAsk { from, call })));
        advance.starting += 1;
    }

    /// A member's deployment pushed (or not): the group it starts follows it, and decides
    /// again once every member it started is heard of.
    pub fn member_pushed(&mut self, member: Member, pushed: Result<SoftwareDeployment, RequestError>) {
        let Some(mut advance) = self.runs.take_advancing() else {
            return warn!(group = %member.group, server = %member.server, "a member started for no group under way");
        };
        if advance.id != member.group {
            warn!(group = %member.group, server = %member.server, "a member started for a group not under way");
            return self.runs.wait_on_members(advance);
        }
        match pushed {
            Ok(deployment) => {
                advance.record.starting.remove(&member.server);
                self.runs.follow(&deployment.id, &advance.id);
                if let Some(slot) = advance.record.group.members.iter_mut().find(|m| m.server_id == member.server) {
                    slot.deployment_id = Some(deployment.id);
                    lifecycle::move_member(slot, MemberStatus::of_deployment(Some(&deployment.status)));
                }
            }
            // The store failed under it: the start may have landed. It stays recorded as
            // starting, and the next read of the group tells (`group_read`).
            Err(error) if error.kind == halite_protocol::message::ErrorKind::Internal => {
                warn!(group = %advance.id, server = %member.server, error = %error.message, "a group member's start may not have landed; looked at again shortly");
            }
            Err(error) => member_failed(&mut advance, &member.server, &error),
        }
        advance.starting = advance.starting.saturating_sub(1);
        if advance.starting > 0 {
            return self.runs.wait_on_members(advance);
        }
        self.group_decide(advance);
    }

    /// The rollout decided all it could: the group finishes when every member is final, and
    /// is stored if anything changed.
    fn group_decided(&mut self, advance: GroupAdvance) {
        let GroupAdvance { id, mut record, before, run, now, reply, .. } = advance;
        // A wait still ahead wakes the loop when it ends; one passed is done with.
        let not_before = run.not_before.filter(|at| *at > now);
        record.group.rollout = run.status.clone();
        if record.group.members.iter().all(|m| is_final(&m.status)) {
            let failed = record.group.members.iter().filter(|m| m.status != status::COMPLETE).count();
            let total = record.group.members.len();
            if failed == 0 {
                lifecycle::move_group(&mut record.group, Status::Complete);
                record.group.status_reason = format!("all {total} deployments completed");
            } else {
                lifecycle::move_group(&mut record.group, Status::Failed);
                let why = run.status.reason.clone().map(|r| format!(" (rollout stopped: {r})")).unwrap_or_default();
                record.group.status_reason = format!("{failed} of {total} deployments did not complete{why}");
            }
        }
        if record.group == before {
            return self.group_advanced(&id, record, not_before, reply);
        }
        let announce = record.group.status != before.status || record.group.rollout != before.rollout;
        let then = GroupPut::Advanced { announce, not_before, reply };
        self.ask_group(id, GroupCall::Put { record: Box::new(record), then });
    }

    /// A group advanced (and stored, if it changed): finished, or open until its wait (one
    /// still ahead when it was read); the client that created or updated it is answered with
    /// it.
    fn group_advanced(
        &mut self,
        id: &str,
        record: GroupRecord,
        not_before: Option<Instant>,
        reply: Option<RequestFrom>,
    ) {
        if record.group.status != status::IN_PROGRESS {
            info!(group = %id, status = %record.group.status, reason = %record.group.status_reason, "deployment group finished");
            self.forget_group(id);
        } else if !record.starting.is_empty() {
            // Starts whose outcome is unknown: looked at again a second later.
            self.runs.open(id, Some(self.now.at + Duration::from_secs(1)));
        } else {
            self.runs.open(id, not_before);
        }
        if let Some(from) = reply {
            self.respond(from.peer, from.request_id, ResponseBody::DeploymentGroup(record.group));
        }
        self.group_work_done();
    }

    /// An advance the store failed: tried again a second later; a client waiting on it is told.
    fn advance_failed(&mut self, id: &str, error: RequestError, reply: Option<RequestFrom>) {
        warn!(error = %error.message, group = %id, "advancing a deployment group failed; tried again in a second");
        self.runs.open(id, Some(self.now.at + Duration::from_secs(1)));
        if let Some(from) = reply {
            self.out.reply(from.peer, from.request_id, Err(error));
        }
        self.group_work_done();
    }

    fn forget_group(&mut self, id: &str) {
        self.runs.close(id);
    }

    /// After a restart: the groups this master owns, as read (`Store::open_groups`), go on.
    pub fn resume_groups(&mut self, open: Vec<GroupRecord>) {
        for record in open {
            if record.owner != self.config.id {
                continue;
            }
            let id = record.group.id.clone();
            for member in &record.group.members {
                if let Some(deployment) = &member.deployment_id {
                    self.runs.follow(deployment, &id);
                }
            }
            self.runs.open(&id, None);
            self.runs.due(&id);
        }
    }
}

/// A member that could not be started fails.
fn member_failed(advance: &mut GroupAdvance, server: &str, error: &RequestError) {
    warn!(group = %advance.id, %server, error = %error.message, "a group member could not be deployed");
    let start = advance.record.starting.remove(server);
    if let Some(member) = advance.record.group.members.iter_mut().find(|m| m.server_id == server) {
        lifecycle::move_member(member, MemberStatus::Failed);
        // A new deployment that was never made leaves no id behind (an update creates it).
        if start.is_some_and(|s| s.jid_before.is_none()) {
            member.deployment_id = None;
        }
    }
}

/// A group's servers, sorted, if there are from 1 to [`MAX_GROUP_SERVERS`] and none twice.
fn valid_servers(mut servers: Vec<String>) -> Result<Vec<String>, RequestError> {
    let listed = servers.len();
    servers.sort();
    servers.dedup();
    if servers.is_empty() || servers.len() > MAX_GROUP_SERVERS {
        return Err(RequestError::bad_request(format!(
            "a deployment group needs from 1 to {MAX_GROUP_SERVERS} servers"
        )));
    }
    if servers.len() != listed {
        return Err(RequestError::bad_request("a server is listed twice in the group"));
    }
    Ok(servers)
}

/// The deployment a group makes for one of its servers.
fn member_spec(spec: &NewDeploymentGroup, server: &str) -> NewDeployment {
    NewDeployment {
        config_id: spec.config_id.clone(),
        server_id: server.to_owned(),
        input_values: spec.input_values.clone(),
        action: spec.action.clone(),
        stack_id: spec.stack_id.clone(),
        resource_name: spec.resource_name.clone(),
        timeout_secs: spec.timeout_secs,
        ..NewDeployment::default()
    }
}

fn no_group(id: &str) -> RequestError {
    RequestError::not_found(format!("no deployment group {id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_statuses_read_as_slot_states() {
        assert_eq!(as_slot_state(status::QUEUED), MinionJobState::Queued);
        assert_eq!(as_slot_state(status::IN_PROGRESS), MinionJobState::Sent);
        assert_eq!(as_slot_state(status::COMPLETE), MinionJobState::Returned);
        assert_eq!(as_slot_state(status::FAILED), MinionJobState::Failed);
        assert_eq!(as_slot_state(status::SKIPPED), MinionJobState::Skipped);
        assert!(is_final(status::SKIPPED) && !is_final(status::QUEUED));
    }
}
