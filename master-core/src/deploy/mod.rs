//! Software configs and deployments (`docs/engine-guide.md`, "Heat"): requests from engines,
//! the `deploy.apply` job that carries each derived config to its minion, and what the
//! minion's signal does to the deployment.
//!
//! A deployment rides on an ordinary job with a long TTL, so it inherits everything jobs
//! already guarantee: pushed at once to a connected minion or when it connects (enrolled by
//! token or not yet), at-most-once execution, and a return that survives restarts of either
//! side.
//!
//! Nothing here awaits or acts on the master: the loop lends a [`DeployDesk`] (the deployments'
//! jobs in flight and what the step heard of their ends, and a `JobIssuer` for the jobs it
//! pushes; the registry, live jobs and config, read-only) and carries out the [`Effect`]s it
//! returns: answers, store calls, cancels, members pushed to their group, relays to start,
//! events (`Core::with_deploy_desk`). Deployment groups have their own desk (`groups.rs`).

pub mod derive;
pub mod ending;
pub mod group_runs;
pub mod groups;
pub mod jobs;
pub mod lifecycle;
pub mod records;
pub mod validate;

use halite_protocol::message::{
    status, NewDeployment, PrincipalAcl, RequestBody, ResponseBody, SoftwareDeployment, Value,
};
use serde_json::json;
use tracing::{error, info, warn};

use crate::acl::NoticeThrottle;
use crate::authz::Access;
use crate::calls::admin::RequestFrom;
use crate::calls::deploy::{
    DeployAsk, DeployCall, DeployDone, DeploymentRead, DeploymentWrite, Listing, Push, PushInputs, Requester,
};
use crate::calls::deploy::{DeploymentEnd, EndToRecord};
use crate::clock::new_uuid;
use crate::clock::Now;
use crate::config::signal_hosts::SignalHosts;
use crate::config::MasterConfig;
use crate::core::hearing::Hearing;
use crate::core::jobs::JobTable;
use crate::core::registry::Registry;
use crate::deploy::ending::DeploymentEnding;
use crate::deploy::jobs::DeployJobs;
use crate::metrics::Metrics;
use crate::outputs::asks::{Ask, PreparedJob};
use crate::outputs::effects::{Effect, Effects};
use crate::publishing::JobIssuer;
use crate::relay_requests::RelayRequest;
use crate::request_error::{Reply, RequestError};
use crate::store::{DeploymentRecord, StoreError};
use ending::Recording;

/// Most configs one listing returns.
const MAX_CONFIG_LIST: u32 = 1000;

/// What a deployment request's answer from the store leads to.
enum Next {
    Answer(Box<ResponseBody>),
    Ask(DeployCall),
    /// A push's job, to store before the deployment that names it.
    InsertJob(Box<PreparedJob>, Box<DeploymentWrite>),
}

/// A push prepared ([`DeployDesk::prepare_push`]).
// Made once per push and taken apart at once: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Pushing {
    /// Its job, to store first, and the deployment naming it, to store next.
    Job(PreparedJob, DeploymentWrite),
    /// Finished without a job (a DELETE on a server that is gone), to store.
    Finished(DeploymentWrite),
}

/// Whether a request is about configs or deployments.
pub fn is_deploy_request(body: &RequestBody) -> bool {
    matches!(
        body,
        RequestBody::ConfigCreate(_)
            | RequestBody::ConfigShow { .. }
            | RequestBody::ConfigList { .. }
            | RequestBody::ConfigDelete { .. }
            | RequestBody::DeploymentCreate(_)
            | RequestBody::DeploymentUpdate { .. }
            | RequestBody::DeploymentShow { .. }
            | RequestBody::DeploymentList { .. }
            | RequestBody::DeploymentDelete { .. }
            | RequestBody::ServerConfigs { .. }
            | RequestBody::DeploymentGroupCreate(_)
            | RequestBody::DeploymentGroupShow { .. }
            | RequestBody::DeploymentGroupUpdate { .. }
    )
}

pub use halite_protocol::message::DEPLOY_FUNCTION;

/// Whether a request is about deployment groups (`groups.rs` answers those).
pub fn is_group_request(body: &RequestBody) -> bool {
    matches!(
        body,
        RequestBody::DeploymentGroupCreate(_)
            | RequestBody::DeploymentGroupShow { .. }
            | RequestBody::DeploymentGroupUpdate { .. }
    )
}

/// What configs and deployments are handled with: what that changes, and what it reads.
pub struct DeployDesk<'a> {
    pub config: &'a MasterConfig,
    pub registry: &'a Registry,
    pub jobs: &'a JobTable,
    pub deploy_jobs: &'a mut DeployJobs,
    pub hearing: &'a mut Hearing,
    pub notices: &'a mut NoticeThrottle,
    pub metrics: &'a Metrics,
    /// Deployments' jobs are issued here (stored and sent by the publishing desk).
    pub issuer: JobIssuer<'a>,
    /// The time, read when a decision needs it.
    pub now: Now,
    pub out: Effects,
}

impl DeployDesk<'_> {
    fn access(&self) -> Access<'_> {
        Access::of(self.config, self.registry, self.jobs)
    }

    fn cancel_live(&mut self, jid: &str) {
        self.out.push(Effect::CancelLive { jid: jid.to_owned() });
    }

    /// Answers a request for configs or deployments, or asks the store what it needs: the
    /// answer then comes from `deploy_answered` (groups' requests: `groups.rs`).
    pub fn answer_deploy_request(&mut self, from: RequestFrom, body: RequestBody) {
        match self.decide_deploy_request(&from, body) {
            Ok(call) => self.out.ask(Ask::Deploy(Box::new(DeployAsk { from: Requester::Client(from), call }))),
            Err(error) => self.out.reply(from.peer, from.request_id, Err(error)),
        }
    }

    /// Who may make the request and whether it is valid; what it needs of the store.
    fn decide_deploy_request(&mut self, from: &RequestFrom, body: RequestBody) -> Result<DeployCall, RequestError> {
        let acl = from.acl.as_deref();
        // What the principal created is its own; another's is answered as if it did not exist.
        let owner = || self.access().owned_by(from.who()).map(str::to_owned);
        Ok(match body {
            RequestBody::ConfigCreate(new) => {
                self.may_deploy(acl, None)?;
                validate::config(&new)?;
                let config = records::new_config(new, self.now.wall_ms);
                DeployCall::PutConfig { config: Box::new(config), owner: from.principal.clone() }
            }
            RequestBody::ConfigShow { id } => {
                self.may_deploy(acl, None)?;
                DeployCall::ReadConfig { id }
            }
            RequestBody::ConfigList { limit } => {
                self.may_deploy(acl, None)?;
                DeployCall::ListConfigs { owner: owner(), limit: limit.min(MAX_CONFIG_LIST) }
            }
            RequestBody::ConfigDelete { id } => {
                self.may_deploy(acl, None)?;
                DeployCall::DeleteConfig { id, owner: owner() }
            }
            RequestBody::DeploymentCreate(spec) => {
                self.may_deploy(acl, Some(&spec.server_id))?;
                validate::deployment(&spec)?;
                self.check_signal_url(&spec)?;
                let record = records::new_deployment(spec, &from.principal, self.now.wall_ms);
                DeployCall::ReadPush(Box::new(Push { record, update: false, config_checked: true }))
            }
            RequestBody::DeploymentUpdate { id, update } => {
                DeployCall::ReadDeployment { id, then: DeploymentRead::Update(update) }
            }
            RequestBody::DeploymentShow { id } => DeployCall::ReadDeployment { id, then: DeploymentRead::Show },
            RequestBody::DeploymentDelete { id } => DeployCall::ReadDeployment { id, then: DeploymentRead::Delete },
            RequestBody::DeploymentList { server_id } => {
                DeployCall::ListDeployments { server_id, then: Listing::Deployments }
            }
            RequestBody::ServerConfigs { server_id } => {
                self.may_deploy(acl, Some(&server_id))?;
                DeployCall::ListDeployments { server_id: Some(server_id), then: Listing::ServerConfigs }
            }
            _ => return Err(RequestError::bad_request("not a deployment request")),
        })
    }

    /// What the store answered a request for configs or deployments: answered, or asked on.
    pub fn deploy_answered(&mut self, from: Requester, done: DeployDone) {
        match self.deploy_answer(&from, done) {
            Ok(Next::Answer(body)) => self.deploy_reply(from, Ok(*body)),
            Ok(Next::Ask(call)) => self.out.ask(Ask::Deploy(Box::new(DeployAsk { from, call }))),
            Ok(Next::InsertJob(job, write)) => self.out.ask(Ask::InsertDeploymentJob(Box::new((*job, from, *write)))),
            Err(error) => self.deploy_reply(from, Err(error)),
        }
    }

    /// A deployment request's answer, to the client, or to the group whose member it starts.
    fn deploy_reply(&mut self, from: Requester, answer: Reply) {
        match from {
            Requester::Client(from) => self.out.reply(from.peer, from.request_id, answer),
            Requester::Member(member) => {
                let pushed = answer.and_then(|body| match body {
                    ResponseBody::Deployment(deployment) => Ok(deployment),
                    _ => Err(RequestError::bad_request("unexpected answer pushing a deployment")),
                });
                self.out.push(Effect::MemberPushed { member, pushed: Box::new(pushed) });
            }
        }
    }

    fn deploy_answer(&mut self, from: &Requester, done: DeployDone) -> Result<Next, RequestError> {
        let who = from.client();
        // What a client reads is checked against it; a group's member reads nothing but its own
        // deployment, as the group decided (below).
        let client = || who.ok_or_else(|| RequestError::bad_request("not a client's request"));
        let answer = |body: ResponseBody| Ok(Next::Answer(Box::new(body)));
        match done {
            DeployDone::ConfigPut { config, stored } => {
                stored?;
                info!(config = %config.id, name = %config.name, group = %config.group, "software config created");
                answer(ResponseBody::Config(*config))
            }
            DeployDone::Config { id, read } => {
                let who = client()?;
                let readable = read?.filter(|r| self.access().may_own(who, &r.owner));
                answer(ResponseBody::Config(readable.map(|r| r.config).ok_or_else(|| no_config(&id))?))
            }
            DeployDone::Configs(configs) => answer(ResponseBody::Configs(configs?)),
            DeployDone::ConfigDeleted { id, deleted } => {
                if !deleted? {
                    return Err(no_config(&id));
                }
                info!(config = %id, "software config deleted");
                answer(ResponseBody::Deleted(id))
            }
            // A group's kept member, run again as the group decided.
            DeployDone::Deployment { id, then: DeploymentRead::Restart(update), read } if who.is_none() => {
                let Some(record) = read? else {
                    return Err(RequestError::not_found(format!("no deployment {id}")));
                };
                let record = records::updated(record, update, self.now.wall_ms)?;
                Ok(Next::Ask(DeployCall::ReadPush(Box::new(Push { record, update: true, config_checked: false }))))
            }
            DeployDone::Deployment { id, then, read } => {
                let who = client()?;
                let Some(record) = read?.filter(|r| self.access().may_own(who, &r.owner)) else {
                    return Err(RequestError::not_found(format!("no deployment {id}")));
                };
                self.may_deploy(who.acl, Some(&record.deployment.server_id))?;
                match then {
                    DeploymentRead::Show => answer(ResponseBody::Deployment(record.deployment)),
                    DeploymentRead::Delete => {
                        self.deploy_jobs.forget(&record.jid);
                        self.cancel_live(&record.jid);
                        Ok(Next::Ask(DeployCall::DeleteDeployment(Box::new(record))))
                    }
                    DeploymentRead::Update(update) | DeploymentRead::Restart(update) => {
                        let config_checked = update.config_id.is_some();
                        let record = records::updated(record, update, self.now.wall_ms)?;
                        Ok(Next::Ask(DeployCall::ReadPush(Box::new(Push { record, update: true, config_checked }))))
                    }
                }
            }
            DeployDone::Deployments { then, read } => {
                let who = client()?;
                let mut records = read?;
                records.retain(|r| {
                    self.access().may_own(who, &r.owner)
                        && (then == Listing::ServerConfigs
                            || self.may_deploy(who.acl, Some(&r.deployment.server_id)).is_ok())
                });
                match then {
                    Listing::Deployments => {
                        answer(ResponseBody::Deployments(records.into_iter().map(|r| r.deployment).collect()))
                    }
                    Listing::ServerConfigs => {
                        answer(ResponseBody::Items(records.into_iter().rev().map(|r| r.item).collect()))
                    }
                }
            }
            DeployDone::DeploymentDeleted { record, deleted } => {
                deleted?;
                let id = record.deployment.id;
                info!(deployment = %id, "deployment deleted");
                self.out.emit_shared(
                    format!("halite/deployment/{id}/DELETED"),
                    json!({ "server_id": record.deployment.server_id, "owner": record.owner }),
                );
                answer(ResponseBody::Deleted(id))
            }
            DeployDone::PushRead { push, read } => {
                let config_checked = push.config_checked;
                let readable = |config: &crate::store::ConfigRecord| match (config_checked, who) {
                    (false, _) => true,
                    (true, Some(who)) => self.access().may_own(who, &config.owner),
                    (true, None) => false,
                };
                let read = read.map(|mut inputs| {
                    inputs.config = inputs.config.filter(readable);
                    inputs
                });
                match self.prepare_push(*push, read?, from.principal())? {
                    Pushing::Job(job, write) => Ok(Next::InsertJob(Box::new(job), Box::new(write))),
                    Pushing::Finished(write) => {
                        Ok(Next::Ask(DeployCall::PutDeployment { write: Box::new(write), pushed: false }))
                    }
                }
            }
            DeployDone::DeploymentPut { record, pushed, stored } => {
                if !stored? {
                    // Deleted or updated through another master since it was read: its new job
                    // goes nowhere, and the engine reads it again.
                    if pushed {
                        self.cancel_live(&record.jid);
                    }
                    let id = &record.deployment.id;
                    return Err(RequestError::conflict(format!(
                        "deployment {id} was deleted or updated meanwhile; read it again"
                    )));
                }
                self.deployment_stored(&record, pushed);
                answer(ResponseBody::Deployment(record.deployment))
            }
        }
    }

    /// A push job stored and gone live (or not: `Core::job_stored`): the deployment
    /// that names it is stored next.
    pub fn deployment_job_stored(
        &mut self,
        from: Requester,
        write: DeploymentWrite,
        stored: Result<String, StoreError>,
    ) {
        match stored {
            Ok(_) => {
                let call = DeployCall::PutDeployment { write: Box::new(write), pushed: true };
                self.out.ask(Ask::Deploy(Box::new(DeployAsk { from, call })));
            }
            Err(error) => self.deploy_reply(from, Err(error.into())),
        }
    }

    /// A deployment to push, with what the store said of its config and server: its
    /// `deploy.apply` job, prepared, and the deployment naming it; or, for a DELETE on a server
    /// that is gone, the deployment finished without a job. An update supersedes the
    /// deployment's previous job (cancelled if still pending).
    pub fn prepare_push(&mut self, push: Push, inputs: PushInputs, principal: &str) -> Result<Pushing, RequestError> {
        let Push { mut record, update, .. } = push;
        // An update is stored only while its row still waits on the job it was read on.
        let read_on = update.then(|| record.jid.clone());
        let config = inputs.config.map(|r| r.config).ok_or_else(|| no_config(&record.spec.config_id))?;
        let now = self.now.wall_ms;
        if update {
            self.deploy_jobs.forget(&record.jid);
            self.cancel_live(&record.jid);
            if record.deployment.action == "DELETE" && !self.registry.has_accepted(&record.deployment.server_id) {
                // Nothing to un-configure on a server that is gone: Heat's own resource skips it too.
                let reason = format!(
                    "DELETE skipped: server {} has no accepted key (deleted, or never enrolled)",
                    record.deployment.server_id
                );
                records::finish_without_job(&mut record, &reason, now);
                return Ok(Pushing::Finished(DeploymentWrite { record, read_on }));
            }
        }
        let wait_secs = self.deployment_wait_secs(&record.deployment.action, inputs.server_unknown);
        let default_timeout = self.config.deployment_timeout_secs;
        let (job, derived) = records::deployment_job(&record, &config, wait_secs, default_timeout, now)?;
        let server = record.deployment.server_id.clone();
        let prepared = self.issuer.prepare(principal, job, vec![server]);
        record.deployment.derived_config_id = derived.id;
        record.jid = prepared.record.jid.clone();
        record.item = derived.item;
        Ok(Pushing::Job(prepared, DeploymentWrite { record, read_on }))
    }

    /// A deployment stored: pushed (its job is carried from now on) or finished without a
    /// job (its signal relayed where the engine gave a URL); announced either way.
    pub fn deployment_stored(&mut self, record: &DeploymentRecord, pushed: bool) {
        let deployment = &record.deployment;
        if pushed {
            self.deploy_jobs.carries(&record.jid, &deployment.id);
            info!(deployment = %deployment.id, server = %deployment.server_id, jid = %record.jid, action = %deployment.action, "deployment pushed");
        } else {
            info!(deployment = %deployment.id, server = %deployment.server_id, reason = %deployment.status_reason, "deployment finished");
        }
        self.announce(&record.deployment, &record.owner);
        if !pushed && record.relay_pending {
            self.start_relay(record);
        }
    }

    /// Whether `acl` may deploy (see [`may_deploy`]).
    fn may_deploy(&self, acl: Option<&PrincipalAcl>, server: Option<&str>) -> Result<(), RequestError> {
        may_deploy(&self.access(), acl, server)
    }

    /// A deployment's new status, on the bus for its creator (`owner`).
    fn announce(&mut self, deployment: &SoftwareDeployment, owner: &str) {
        let status = crate::metrics::Status { status: deployment.status.clone() };
        self.metrics.get().deployments.get_or_create(&status).inc();
        self.out.emit_shared(
            format!("halite/deployment/{}/{}", deployment.id, deployment.status),
            owned_event(serde_json::to_value(deployment).unwrap_or_default(), owner),
        );
    }

    /// Records the deployments whose `deploy.apply` jobs ended since the last call (heard by
    /// `Master::hear_moves`): each read, stored and announced in the order its job ended. The
    /// loop answers what this asks right away, so the deployments' groups hear the
    /// announcements in the same step. Ends the store could not take before come first.
    pub fn record_deployment_ends(&mut self) {
        for retry in self.deploy_jobs.take_due(self.now.at) {
            self.out.ask(Ask::RereadDeploymentEnd(Box::new(retry)));
        }
        for done in self.deploy_jobs.take_due_relays(self.now.at) {
            self.out.ask(Ask::ReadRelayed(Box::new(done)));
        }
        for moved in self.hearing.take_deployment_ends() {
            let id = self.deploy_jobs.ended(&moved.jid);
            let end = DeploymentEnd::of_move(self.config, moved, id);
            self.out.ask(Ask::ReadDeploymentEnd(Box::new(end)));
        }
    }

    /// A job end whose deployment the store could not read or write: tried again a second
    /// later (`DeployJobs::retry`), so the deployment is not left in progress, unless the store
    /// refused it for good (a conflict, a row it cannot decode: trying again fails again).
    fn record_deployment_later(&mut self, retry: EndToRecord, error: &StoreError) {
        let now = self.now.at;
        if !error.is_transient() {
            return error!(%error, jid = %retry.jid, "a deployment's result cannot be recorded; it is left as stored");
        }
        if self.notices.ready("store:deployment_end", std::time::Duration::from_secs(10), now) {
            warn!(%error, jid = %retry.jid, "recording a deployment's result failed; trying again every second");
        }
        self.deploy_jobs.retry(retry, now);
    }

    /// A job end to record again, as the store keeps its job: recorded as when it was first
    /// heard. A job whose end is not stored yet (its state is still being written) waits.
    pub fn deployment_end_reread(
        &mut self,
        retry: EndToRecord,
        read: Result<Option<halite_protocol::message::JobDetail>, StoreError>,
    ) {
        match read {
            Ok(Some(job)) => match ending::stored_end(self.config, &retry, &job.minions) {
                Some(end) => self.out.ask(Ask::ReadDeploymentEnd(Box::new(end))),
                None => self.deploy_jobs.retry(retry, self.now.at),
            },
            Ok(None) => {
                warn!(jid = %retry.jid, "a deployment's job is no longer stored; its result cannot be recorded")
            }
            Err(error) => self.record_deployment_later(retry, &error),
        }
    }

    /// The deployment a job's end is for, as read (`None`: none): if it still waits on that
    /// job, it takes the end's outcome (`ending::finished`), stored before anything is said of
    /// it. Found exactly as an earlier write of unknown outcome left it, that write was made:
    /// what follows it is done now.
    pub fn deployment_end_read(&mut self, end: DeploymentEnd, read: Result<Option<DeploymentEnding>, StoreError>) {
        let ending = match read {
            Ok(Some(ending)) => ending,
            Ok(None) => return,
            Err(error) => return self.record_deployment_later(end.to_retry(end.written.clone()), &error),
        };
        match ending::recording(self.config, &end, ending, (self.now.wall_ms, new_uuid())) {
            Recording::Written(record) => self.deployment_finished(end, record, Ok(true)),
            Recording::Finish(record) => self.out.ask(Ask::FinishDeployment(Box::new((end, record)))),
            Recording::Nothing => {}
        }
    }

    /// A deployment finished by its job's end, as stored: announced, and its signal relayed
    /// when the engine gave a URL. Not when another master sharing the store finished it
    /// first, or it was updated meanwhile (`Ok(false)`): that master announces and relays.
    pub fn deployment_finished(
        &mut self,
        end: DeploymentEnd,
        record: DeploymentRecord,
        stored: Result<bool, StoreError>,
    ) {
        match stored {
            Ok(true) => {
                let deployment = &record.deployment;
                info!(deployment = %deployment.id, status = %deployment.status, reason = %deployment.status_reason, "deployment signalled");
                self.announce(&record.deployment, &record.owner);
                if record.relay_pending {
                    self.start_relay(&record);
                }
            }
            Ok(false) => {}
            // Read and decided again (another master may finish it meanwhile); if the write
            // may have been made, what it wrote is looked for first.
            Err(error) => {
                let written = error.is_indeterminate().then_some(record);
                self.record_deployment_later(end.to_retry(written), &error);
            }
        }
    }

    /// How long a deployment's job waits for its server to connect: a DELETE no longer than
    /// `deployment_delete_wait_secs`; a server nobody is enrolling as (`server_unknown`) no
    /// longer than `deployment_unenrolled_wait_secs`.
    fn deployment_wait_secs(&self, action: &str, server_unknown: bool) -> u64 {
        let ttl = self.config.deployment_ttl_secs;
        if action == "DELETE" {
            self.config.deployment_delete_wait_secs.min(ttl)
        } else if server_unknown {
            self.config.deployment_unenrolled_wait_secs.min(ttl)
        } else {
            ttl
        }
    }

    /// Whether a deployment's `signal_id` is one the relay takes (see [`check_signal_url`]).
    fn check_signal_url(&self, spec: &NewDeployment) -> Result<(), RequestError> {
        check_signal_url(self.config, spec)
    }

    /// Starts relaying a deployment's last signal to its `signal_id`.
    fn start_relay(&mut self, record: &DeploymentRecord) {
        let (Some(url), Some(Value::Object(signal))) = (&record.spec.signal_id, &record.last_signal) else { return };
        let request = RelayRequest {
            deployment_id: record.deployment.id.clone(),
            derived_config_id: record.deployment.derived_config_id.clone(),
            url: url.clone(),
            verb: derive::signal_verb(&record.spec),
            body: derive::trimmed_body(signal, crate::relay_requests::MAX_BODY),
        };
        self.out.push(Effect::StartRelay(Box::new(request)));
    }

    /// A relay ended: its deployment is read, then recorded as relayed
    /// ([`DeployDesk::relayed_read`]).
    pub fn relay_finished(&mut self, done: crate::relay_requests::RelayDone) {
        self.out.ask(Ask::ReadRelayed(Box::new(done)));
    }

    /// The deployment a relay was for, as read: no longer pending, unless it has been derived
    /// again since (a newer signal is on its way).
    pub fn relayed_read(
        &mut self,
        done: crate::relay_requests::RelayDone,
        read: Result<Option<DeploymentRecord>, StoreError>,
    ) {
        match read {
            // A write of this end that may have landed did: told now (stored, not yet told).
            Ok(Some(record))
                if done.written_in_doubt
                    && !record.relay_pending
                    && record.deployment.derived_config_id == done.request.derived_config_id =>
            {
                self.tell_relayed(&record, &done);
            }
            Ok(Some(mut record)) if record.deployment.derived_config_id == done.request.derived_config_id => {
                record.relay_pending = false;
                self.out.ask(Ask::StoreRelayed(Box::new((record, done))));
            }
            Ok(_) => {}
            Err(error) => self.record_relay_later(done, &error),
        }
    }

    /// A relay's end the store could not read or write: tried again a second later
    /// (`DeployJobs::retry_relay`), unless the store refused it for good. Otherwise its
    /// deployment would keep its relay pending, and its signal would be relayed again when a
    /// master next starts.
    fn record_relay_later(&mut self, done: crate::relay_requests::RelayDone, error: &StoreError) {
        let deployment = &done.request.deployment_id;
        if !error.is_transient() {
            return error!(%error, %deployment, "a relay's end cannot be recorded; its relay stays pending");
        }
        if self.notices.ready("store:relay_end", std::time::Duration::from_secs(10), self.now.at) {
            warn!(%error, %deployment, "recording a relay failed; trying again every second");
        }
        self.deploy_jobs.retry_relay(done, self.now.at);
    }

    /// A relay recorded, as stored: announced. The announcement says only `relayed` (the
    /// engine's URL answered 2xx) or `refused` (anything else): a status code or connection
    /// error would tell whoever chose the URL what answers where the master stands. Those go
    /// to the log.
    pub fn relay_recorded(
        &mut self,
        record: DeploymentRecord,
        mut done: crate::relay_requests::RelayDone,
        stored: Result<bool, StoreError>,
    ) {
        match stored {
            Ok(true) => self.tell_relayed(&record, &done),
            // Deleted or updated meanwhile, or recorded already: nothing to tell about it.
            Ok(false) => {}
            // Read and decided again: a write that landed is then found no longer pending, and
            // told then (`relayed_read`); one that did not is written again.
            Err(error) => {
                done.written_in_doubt = true;
                self.record_relay_later(done, &error);
            }
        }
    }

    /// Tells a relay's end, once stored.
    fn tell_relayed(&mut self, record: &DeploymentRecord, done: &crate::relay_requests::RelayDone) {
        let id = &done.request.deployment_id;
        let relayed = match &done.result {
            Ok(code @ 200..=299) => {
                info!(deployment = %id, status = code, "signal relayed");
                true
            }
            Ok(code) => {
                warn!(deployment = %id, status = code, "signal relay answered without success");
                false
            }
            Err(error) => {
                warn!(deployment = %id, %error, "signal relay failed");
                false
            }
        };
        let outcome = if relayed { "relayed" } else { "refused" };
        let data = json!({ "ok": relayed, "outcome": outcome, "server_id": record.deployment.server_id, "owner": record.owner });
        self.out.emit_shared(format!("halite/deployment/{id}/relayed"), data);
    }

    /// After a restart: the open deployments as read (`Store::open_deployments`) are linked to
    /// their jobs again and pending relays resume.
    pub fn resume_deployments(&mut self, open: Vec<DeploymentRecord>) {
        let now = self.now.at;
        for record in open {
            if record.deployment.status == status::IN_PROGRESS && self.jobs.get(&record.jid).is_none() {
                // Its job ended but the deployment was not recorded (the store did not answer,
                // or the master stopped first): recorded at the first step, from the store.
                let end =
                    EndToRecord { jid: record.jid.clone(), id: Some(record.deployment.id.clone()), written: None };
                self.deploy_jobs.recover(end, now);
            } else if record.deployment.status == status::IN_PROGRESS {
                self.deploy_jobs.carries(&record.jid, &record.deployment.id);
            }
            if record.relay_pending {
                self.start_relay(&record);
            }
        }
    }
}

/// Root and admins may do anything; other principals need a publish rule for `deploy.apply`
/// (covering the server, when there is one).
pub fn may_deploy(
    access: &crate::authz::Access<'_>,
    acl: Option<&PrincipalAcl>,
    server: Option<&str>,
) -> Result<(), RequestError> {
    let asker = crate::authz::Asker::client("", acl);
    let action = match server {
        Some(server) => crate::authz::Action::Deploy { server },
        // Configs belong to no server: any rule for deploy.apply is enough.
        None => crate::authz::Action::UseConfigs,
    };
    access.decide(&asker, &action).map(drop).map_err(RequestError::from)
}

/// The `[deploy] signal_hosts` allowlist (checked when the config was read; an entry that
/// somehow does not parse allows nothing).
pub fn signal_hosts(config: &crate::config::MasterConfig) -> SignalHosts {
    SignalHosts::parse(&config.deploy.signal_hosts).unwrap_or_default()
}

/// A `signal_id` the relay would refuse is refused when the deployment is made, so the engine
/// learns at once (the relay checks again, resolved addresses included).
pub fn check_signal_url(config: &crate::config::MasterConfig, spec: &NewDeployment) -> Result<(), RequestError> {
    let Some(url) = &spec.signal_id else { return Ok(()) };
    signal_hosts(config)
        .admit_url(url)
        .map_err(|refused| RequestError::bad_request(format!("signal_id: {refused}")))?;
    Ok(())
}

pub fn no_config(id: &str) -> RequestError {
    RequestError::not_found(format!("no software config {id}"))
}

/// A deployment's or group's event data with its creator (`owner`): only the creator, root and
/// administrators receive it (`authz::decide`, `Action::Receive`), since a deployment's
/// events carry its input and output values.
pub fn owned_event(mut data: Value, owner: &str) -> Value {
    if let Value::Object(map) = &mut data {
        map.insert("owner".into(), Value::from(owner));
    }
    data
}
