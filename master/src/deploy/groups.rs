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

use std::collections::BTreeMap;
use std::time::Duration;

use halite_protocol::message::{
    status, DeploymentGroup, GroupMember, MinionJobState, NewDeployment, NewDeploymentGroup, RequestBody, ResponseBody,
    RolloutState, SoftwareDeployment,
};
use tracing::{info, warn};

use super::calls::Push;
use super::Pushing;
use crate::authz::Who;
use crate::clock::new_uuid;
use crate::core::jobs::Slot;
use crate::core::rollout::{Decision, RolloutRun};
use crate::net::Net;
use crate::request_error::{Reply, RequestError};
use crate::server::Master;
use crate::store::{reads, GroupRecord, Store, StoreError};

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
        member.status = status::SKIPPED.into();
    }
}

fn is_final(member_status: &str) -> bool {
    !matches!(member_status, status::QUEUED | status::IN_PROGRESS)
}

impl<S: Store, N: Net> Master<S, N> {
    /// Answers a request about deployment groups.
    pub(crate) async fn answer_group_request(&mut self, body: RequestBody, who: Who<'_>) -> Reply {
        match body {
            RequestBody::DeploymentGroupCreate(spec) => self.create_group(spec, who).await,
            RequestBody::DeploymentGroupShow { id } => self.show_group(&id, who).await,
            RequestBody::DeploymentGroupUpdate { id, update } => self.update_group(&id, update, who).await,
            _ => Err(RequestError::bad_request("not a deployment group request")),
        }
    }

    /// A config `who` may read (and reference from a group): its own, or any for root and
    /// administrators. Another's is answered like a config that does not exist.
    async fn readable_config(&self, id: &str, who: Who<'_>) -> Result<(), RequestError> {
        let record = self.store.config(id).await.map_err(RequestError::from)?;
        record.filter(|r| self.access().may_own(who, &r.owner)).map(drop).ok_or_else(|| super::no_config(id))
    }

    /// Creates a group and starts its first members; answered with the group.
    pub(crate) async fn create_group(&mut self, spec: NewDeploymentGroup, who: Who<'_>) -> Reply {
        let mut servers = spec.servers.clone();
        servers.sort();
        servers.dedup();
        if servers.is_empty() || servers.len() > MAX_GROUP_SERVERS {
            return Err(RequestError::bad_request(format!(
                "a deployment group needs from 1 to {MAX_GROUP_SERVERS} servers"
            )));
        }
        if servers.len() != spec.servers.len() {
            return Err(RequestError::bad_request("a server is listed twice in the group"));
        }
        for server in &servers {
            self.may_deploy(who.acl, Some(server))?;
        }
        if let Some(why) = spec.rollout.as_ref().and_then(crate::core::rollout::invalid) {
            return Err(RequestError::bad_request(why));
        }
        // What each member's deployment will be is checked once, before anything starts.
        super::validate::deployment(&member_spec(&spec, &servers[0]))?;
        self.check_signal_url(&member_spec(&spec, &servers[0]))?;
        // Its members may reference only a config the group's creator may read.
        self.readable_config(&spec.config_id, who).await?;
        let now = self.clock.wall_ms();
        let group = DeploymentGroup {
            id: new_uuid(),
            config_id: spec.config_id.clone(),
            action: spec.action.clone().unwrap_or_else(|| "CREATE".into()).to_ascii_uppercase(),
            status: status::IN_PROGRESS.into(),
            status_reason: "Deploy data available".into(),
            rollout: RolloutRun::status_of(spec.rollout.clone().unwrap_or_default()),
            members: servers
                .iter()
                .map(|s| GroupMember { server_id: s.clone(), deployment_id: None, status: status::QUEUED.into() })
                .collect(),
            creation_time: halite_protocol::time::iso8601_utc(now),
        };
        let id = group.id.clone();
        let record = GroupRecord { group, spec, principal: who.name.to_owned(), owner: self.config.id.clone() };
        self.store.put_group(&record, now).await.map_err(RequestError::from)?;
        info!(group = %id, servers = servers.len(), "deployment group created");
        self.groups.open(&id, None);
        self.advance_group(&id).await.map_err(RequestError::from)?;
        let record = self.store.group(&id).await.map_err(RequestError::from)?;
        record.map(|r| ResponseBody::DeploymentGroup(r.group)).ok_or_else(|| no_group(&id))
    }

    /// Changes a group in place (Heat's group update): the servers it keeps run the action
    /// (`UPDATE` by default) with the new config and inputs, the servers it gains `CREATE`, as
    /// the rollout allows; the servers it loses leave it. Answered with the group.
    pub(crate) async fn update_group(
        &mut self,
        id: &str,
        update: halite_protocol::message::DeploymentGroupUpdate,
        who: Who<'_>,
    ) -> Reply {
        // Only what its creator (or an administrator) may see: another's is not found.
        self.show_group(id, who).await?;
        let mut record = self.store.group(id).await.map_err(RequestError::from)?.ok_or_else(|| no_group(id))?;
        let mut servers = update
            .servers
            .clone()
            .unwrap_or_else(|| record.group.members.iter().map(|m| m.server_id.clone()).collect());
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
        for server in &servers {
            self.may_deploy(who.acl, Some(server))?;
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
            self.readable_config(config_id, who).await?;
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
                status: status::QUEUED.into(),
            })
            .collect();
        record.group.config_id = record.spec.config_id.clone();
        // The servers it keeps run the update's action; those it gains, the group's own (CREATE).
        record.group.action = action;
        record.group.status = status::IN_PROGRESS.into();
        record.group.status_reason = "Deploy data available".into();
        record.group.rollout = RolloutRun::status_of(record.spec.rollout.clone().unwrap_or_default());
        record.owner = self.config.id.clone();
        let now = self.clock.wall_ms();
        self.store.put_group(&record, now).await.map_err(RequestError::from)?;
        info!(group = %id, servers = servers.len(), action = %record.group.action, "deployment group updated in place");
        self.forget_group(id);
        self.groups.open(id, None);
        self.advance_group(id).await.map_err(RequestError::from)?;
        let record = self.store.group(id).await.map_err(RequestError::from)?;
        record.map(|r| ResponseBody::DeploymentGroup(r.group)).ok_or_else(|| no_group(id))
    }

    /// One group, for its creator (or root, or an administrator) while it may deploy to every
    /// one of its servers.
    pub(crate) async fn show_group(&mut self, id: &str, who: Who<'_>) -> Reply {
        let record = self.store.group(id).await.map_err(RequestError::from)?.ok_or_else(|| no_group(id))?;
        if !self.access().may_own(who, &record.principal)
            || record.group.members.iter().any(|m| self.may_deploy(who.acl, Some(&m.server_id)).is_err())
        {
            // Answered like a group that does not exist: its id reveals nothing.
            return Err(no_group(id));
        }
        Ok(ResponseBody::DeploymentGroup(record.group))
    }

    /// Advances the groups due (when woken by time, also those whose wait has passed).
    pub(crate) async fn advance_groups(&mut self, tick: bool) {
        for (id, reason) in self.groups.take_aborts() {
            if let Err(error) = self.stop_group(&id, reason).await {
                warn!(%error, group = %id, "stopping a deployment group failed");
            }
        }
        for id in self.groups.take_due(tick, self.clock.now()) {
            if let Err(error) = self.advance_group(&id).await {
                warn!(%error, group = %id, "advancing a deployment group failed; tried again in a second");
                self.groups.open(&id, Some(self.clock.now() + Duration::from_secs(1)));
            }
        }
    }

    /// An abort event stops a group's rollout: its queued servers end `SKIPPED`.
    async fn stop_group(&mut self, id: &str, reason: String) -> Result<(), StoreError> {
        let Some(mut record) = self.store.group(id).await? else { return Ok(()) };
        if record.group.status != status::IN_PROGRESS || record.group.rollout.state == RolloutState::Stopped {
            return Ok(());
        }
        info!(group = %id, %reason, "deployment group's rollout stopped");
        stop(&mut record.group.rollout, &mut record.group.members, reason);
        self.store.put_group(&record, self.clock.wall_ms()).await?;
        self.emit_shared(
            format!("halite/deployment_group/{id}/{}", record.group.status),
            super::owned_event(serde_json::to_value(&record.group).unwrap_or_default(), &record.principal),
        );
        self.advance_group(id).await
    }

    /// Rereads a group's members, starts what its rollout allows or stops it, and finishes it
    /// when every member is final.
    async fn advance_group(&mut self, id: &str) -> Result<(), StoreError> {
        let Some(mut record) = self.store.group(id).await? else { return Ok(()) };
        if !record.group.rollout.spec.abort_on.is_empty() {
            // A group hears only the events published after it listens.
            self.hear_events();
            self.groups.listen(id, record.principal.clone(), record.group.rollout.spec.abort_on.clone());
        }
        if record.group.status != status::IN_PROGRESS {
            self.forget_group(id);
            return Ok(());
        }
        let before = record.group.clone();
        let now = self.clock.now();
        let mut finished_now = false;
        for member in &mut record.group.members {
            let Some(deployment) = &member.deployment_id else { continue };
            // Queued with a deployment: kept by an update, not started again yet.
            if is_final(&member.status) || member.status == status::QUEUED {
                continue;
            }
            self.groups.follow(deployment, id);
            member.status = match self.store.deployment(deployment).await? {
                Some(d) => d.deployment.status,
                None => status::FAILED.into(),
            };
            finished_now |= is_final(&member.status);
        }
        let mut run = RolloutRun::new(record.group.rollout.clone());
        let not_before = self.groups.not_before(id);
        run.not_before = not_before;
        if finished_now {
            run.target_finished(now);
        }
        loop {
            let slots: BTreeMap<String, Slot> = record
                .group
                .members
                .iter()
                .map(|m| (m.server_id.clone(), Slot { state: as_slot_state(&m.status), deadline: None }))
                .collect();
            match run.decide(&slots, now) {
                Decision::Nothing => break,
                Decision::Stop(reason) => {
                    info!(group = %id, %reason, "deployment group's rollout stopped");
                    stop(&mut run.status, &mut record.group.members, reason);
                    break;
                }
                Decision::Start(servers) => {
                    for server in servers {
                        let existing = record
                            .group
                            .members
                            .iter()
                            .find(|m| m.server_id == server)
                            .and_then(|m| m.deployment_id.clone());
                        let deployment = match existing {
                            Some(deployment) => self.restart_member(&record, &deployment).await,
                            None => self.start_member(&record, &server).await,
                        };
                        let Some(member) = record.group.members.iter_mut().find(|m| m.server_id == server) else {
                            continue;
                        };
                        match deployment {
                            Ok(deployment) => {
                                self.groups.follow(&deployment.id, id);
                                member.deployment_id = Some(deployment.id);
                                member.status = deployment.status;
                            }
                            Err(error) => {
                                warn!(group = %id, %server, error = %error.message, "a group member could not be deployed");
                                member.status = status::FAILED.into();
                            }
                        }
                    }
                }
            }
        }
        record.group.rollout = run.status.clone();
        if record.group.members.iter().all(|m| is_final(&m.status)) {
            let failed = record.group.members.iter().filter(|m| m.status != status::COMPLETE).count();
            let total = record.group.members.len();
            if failed == 0 {
                record.group.status = status::COMPLETE.into();
                record.group.status_reason = format!("all {total} deployments completed");
            } else {
                record.group.status = status::FAILED.into();
                let why = run.status.reason.clone().map(|r| format!(" (rollout stopped: {r})")).unwrap_or_default();
                record.group.status_reason = format!("{failed} of {total} deployments did not complete{why}");
            }
        }
        if record.group != before {
            self.store.put_group(&record, self.clock.wall_ms()).await?;
            if record.group.status != before.status || record.group.rollout != before.rollout {
                self.emit_shared(
                    format!("halite/deployment_group/{id}/{}", record.group.status),
                    super::owned_event(serde_json::to_value(&record.group).unwrap_or_default(), &record.principal),
                );
            }
        }
        if record.group.status != status::IN_PROGRESS {
            info!(group = %id, status = %record.group.status, reason = %record.group.status_reason, "deployment group finished");
            self.forget_group(id);
        } else {
            // A wait still ahead wakes the loop when it ends; one passed is done with.
            self.groups.open(id, run.not_before.filter(|at| *at > now));
        }
        Ok(())
    }

    /// Starts one member's deployment.
    async fn start_member(&mut self, record: &GroupRecord, server: &str) -> Result<SoftwareDeployment, RequestError> {
        let spec = member_spec(&record.spec, server);
        super::validate::deployment(&spec)?;
        self.check_signal_url(&spec)?;
        let deployment = super::records::new_deployment(spec, &record.principal, self.clock.wall_ms());
        let push = Push { record: deployment, update: false, config_checked: false };
        self.push_member(push, &record.principal).await
    }

    /// Runs a kept member's deployment again with the group's config, inputs and action.
    async fn restart_member(
        &mut self,
        record: &GroupRecord,
        deployment: &str,
    ) -> Result<SoftwareDeployment, RequestError> {
        let update = halite_protocol::message::DeploymentUpdate {
            config_id: Some(record.spec.config_id.clone()),
            input_values: Some(record.spec.input_values.clone()),
            action: Some(record.group.action.clone()),
        };
        let Some(existing) = self.store.deployment(deployment).await.map_err(RequestError::from)? else {
            return Err(RequestError::not_found(format!("no deployment {deployment}")));
        };
        let push = Push {
            record: super::records::updated(existing, update, self.clock.wall_ms())?,
            update: true,
            config_checked: false,
        };
        self.push_member(push, &record.principal).await
    }

    /// Pushes a member's deployment as a client's request would (`Master::prepare_push`),
    /// awaiting each store call in turn.
    async fn push_member(&mut self, push: Push, principal: &str) -> Result<SoftwareDeployment, RequestError> {
        let deployment = &push.record.deployment;
        let (config, server, action) = (&deployment.config_id, &deployment.server_id, &deployment.action);
        let inputs = reads::push_inputs(&self.store, config, server, action, self.clock.wall_ms()).await?;
        let (record, pushed) = match self.prepare_push(push, inputs, principal)? {
            Pushing::Job(job, record) => {
                let stored = self.insert_job(&job).await;
                self.job_stored(job, stored)?;
                (record, true)
            }
            Pushing::Finished(record) => (record, false),
        };
        self.store.put_deployment(&record, self.clock.wall_ms()).await?;
        self.deployment_stored(&record, pushed);
        Ok(record.deployment)
    }

    fn forget_group(&mut self, id: &str) {
        self.groups.close(id);
    }

    /// After a restart: the groups this master owns go on.
    pub(crate) async fn resume_groups(&mut self) -> Result<(), StoreError> {
        for record in self.store.open_groups().await? {
            if record.owner != self.config.id {
                continue;
            }
            let id = record.group.id.clone();
            for member in &record.group.members {
                if let Some(deployment) = &member.deployment_id {
                    self.groups.follow(deployment, &id);
                }
            }
            self.groups.open(&id, None);
            self.groups.due(&id);
        }
        Ok(())
    }
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
