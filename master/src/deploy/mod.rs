//! Software configs and deployments (`docs/engine-guide.md`, "Heat"): requests from engines,
//! the `deploy.apply` job that carries each derived config to its minion, and what the
//! minion's signal does to the deployment.
//!
//! A deployment rides on an ordinary job with a long TTL, so it inherits everything jobs
//! already guarantee: pushed at once to a connected minion or when it connects (enrolled by
//! token or not yet), at-most-once execution, and a return that survives restarts of either
//! side.

pub(crate) mod derive;
pub(crate) mod ending;
pub(crate) mod groups;
pub(crate) mod relay;
pub(crate) mod signal_hosts;
mod validate;

use halite_protocol::message::{
    status, DeploymentUpdate, JobSpec, NewDeployment, NewSoftwareConfig, PrincipalAcl, RequestBody, ResponseBody,
    SoftwareConfig, SoftwareDeployment, Target, TargetKind, Value,
};
use serde_json::{json, Map};
use tracing::{error, info, warn};

use crate::authz::Who;
use crate::clock::new_uuid;
use crate::core::asks::Ask;
use crate::core::deploy_jobs::EndToRecord;
use crate::net::Net;
use crate::request_error::{Reply, RequestError};
use crate::server::{Master, NewJob};
use crate::store::reads::DeploymentEnding;
use crate::store::{DeploymentRecord, Store, StoreError};
use ending::Recording;
use relay::RelayRequest;
use signal_hosts::SignalHosts;

/// Most configs one listing returns.
const MAX_CONFIG_LIST: u32 = 1000;
/// Extra time the job gets past the hook's own timeout, for the minion to report it.
const JOB_MARGIN_MS: u64 = 30_000;

/// Whether a request is about configs or deployments.
pub(crate) fn is_deploy_request(body: &RequestBody) -> bool {
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

/// The minion function a deployment's job runs.
pub(crate) const DEPLOY_FUNCTION: &str = "deploy.apply";
impl<S: Store, N: Net> Master<S, N> {
    /// Serves a config or deployment request for `principal`.
    pub(crate) async fn handle_deploy_request(
        &mut self,
        body: RequestBody,
        principal: &str,
        acl: Option<&PrincipalAcl>,
    ) -> Reply {
        // What the principal created is its own; another's is answered as if it did not exist.
        let who = Who { name: principal, acl };
        match body {
            RequestBody::ConfigCreate(new) => {
                self.may_deploy(acl, None)?;
                self.create_config(new, principal).await
            }
            RequestBody::ConfigShow { id } => {
                self.may_deploy(acl, None)?;
                Ok(ResponseBody::Config(self.readable_config(&id, who).await?))
            }
            RequestBody::ConfigList { limit } => {
                self.may_deploy(acl, None)?;
                let limit = limit.min(MAX_CONFIG_LIST);
                Ok(ResponseBody::Configs(
                    self.store.configs(self.access().owned_by(who), limit).await.map_err(RequestError::from)?,
                ))
            }
            RequestBody::ConfigDelete { id } => {
                self.may_deploy(acl, None)?;
                if !self.store.delete_config(&id, self.access().owned_by(who)).await.map_err(RequestError::from)? {
                    return Err(no_config(&id));
                }
                info!(config = %id, "software config deleted");
                Ok(ResponseBody::Deleted(id))
            }
            RequestBody::DeploymentGroupCreate(spec) => self.create_group(spec, who).await,
            RequestBody::DeploymentGroupShow { id } => self.show_group(&id, who).await,
            RequestBody::DeploymentGroupUpdate { id, update } => self.update_group(&id, update, who).await,
            RequestBody::DeploymentCreate(spec) => {
                self.may_deploy(acl, Some(&spec.server_id))?;
                self.readable_config(&spec.config_id, who).await?;
                self.create_deployment(spec, principal).await
            }
            RequestBody::DeploymentUpdate { id, update } => {
                let record = self.load_deployment(&id, who).await?;
                self.may_deploy(acl, Some(&record.deployment.server_id))?;
                if let Some(config_id) = &update.config_id {
                    self.readable_config(config_id, who).await?;
                }
                self.update_deployment(record, update, principal).await
            }
            RequestBody::DeploymentShow { id } => {
                let record = self.load_deployment(&id, who).await?;
                self.may_deploy(acl, Some(&record.deployment.server_id))?;
                Ok(ResponseBody::Deployment(record.deployment))
            }
            RequestBody::DeploymentList { server_id } => {
                let records = self.store.deployments(server_id.as_deref()).await.map_err(RequestError::from)?;
                let visible = records
                    .into_iter()
                    .filter(|r| {
                        self.access().may_own(who, &r.owner)
                            && self.may_deploy(acl, Some(&r.deployment.server_id)).is_ok()
                    })
                    .map(|r| r.deployment)
                    .collect();
                Ok(ResponseBody::Deployments(visible))
            }
            RequestBody::DeploymentDelete { id } => {
                let record = self.load_deployment(&id, who).await?;
                self.may_deploy(acl, Some(&record.deployment.server_id))?;
                self.deploy_jobs.forget(&record.jid);
                self.cancel_live(&record.jid);
                self.store.delete_deployment(&id).await.map_err(RequestError::from)?;
                info!(deployment = %id, "deployment deleted");
                self.emit_shared(
                    format!("halite/deployment/{id}/DELETED"),
                    json!({ "server_id": record.deployment.server_id, "owner": record.owner }),
                );
                Ok(ResponseBody::Deleted(id))
            }
            RequestBody::ServerConfigs { server_id } => {
                self.may_deploy(acl, Some(&server_id))?;
                let mut records = self.store.deployments(Some(&server_id)).await.map_err(RequestError::from)?;
                records.retain(|r| self.access().may_own(who, &r.owner));
                records.reverse();
                Ok(ResponseBody::Items(records.into_iter().map(|r| r.item).collect()))
            }
            _ => Err(RequestError::bad_request("not a deployment request")),
        }
    }

    /// Root and admins may do anything; other principals need a publish rule for
    /// `deploy.apply` (covering the server, when there is one).
    pub(crate) fn may_deploy(&self, acl: Option<&PrincipalAcl>, server: Option<&str>) -> Result<(), RequestError> {
        let asker = crate::authz::Asker::client("", acl);
        let action = match server {
            Some(server) => crate::authz::Action::Deploy { server },
            // Configs belong to no server: any rule for deploy.apply is enough.
            None => crate::authz::Action::UseConfigs,
        };
        self.access().decide(&asker, &action).map(drop).map_err(RequestError::from)
    }

    async fn create_config(&mut self, new: NewSoftwareConfig, principal: &str) -> Reply {
        validate::config(&new)?;
        let now = self.clock.wall_ms();
        let config = SoftwareConfig {
            id: new_uuid(),
            name: new.name,
            group: new.group,
            config: new.config,
            inputs: new.inputs,
            outputs: new.outputs,
            options: new.options,
            creation_time: halite_protocol::time::iso8601_utc(now),
        };
        self.store.put_config(&config, principal, now).await.map_err(RequestError::from)?;
        info!(config = %config.id, name = %config.name, group = %config.group, "software config created");
        Ok(ResponseBody::Config(config))
    }

    /// A config `who` may read (and reference from a deployment): its own, or any for root
    /// and administrators. Another's is answered like a config that does not exist.
    pub(crate) async fn readable_config(&self, id: &str, who: Who<'_>) -> Result<SoftwareConfig, RequestError> {
        let record = self.store.config(id).await.map_err(RequestError::from)?;
        record.filter(|r| self.access().may_own(who, &r.owner)).map(|r| r.config).ok_or_else(|| no_config(id))
    }

    /// A deployment `who` owns (any, for root and administrators); another's is answered like
    /// a deployment that does not exist.
    async fn load_deployment(&self, id: &str, who: Who<'_>) -> Result<DeploymentRecord, RequestError> {
        self.store
            .deployment(id)
            .await
            .map_err(RequestError::from)?
            .filter(|r| self.access().may_own(who, &r.owner))
            .ok_or_else(|| RequestError::not_found(format!("no deployment {id}")))
    }

    pub(crate) async fn create_deployment(&mut self, spec: NewDeployment, principal: &str) -> Reply {
        validate::deployment(&spec)?;
        self.check_signal_url(&spec)?;
        let config = self
            .store
            .config(&spec.config_id)
            .await
            .map_err(RequestError::from)?
            .map(|r| r.config)
            .ok_or_else(|| no_config(&spec.config_id))?;
        let action = spec.action.clone().unwrap_or_else(|| "CREATE".into()).to_ascii_uppercase();
        let now = self.clock.wall_ms();
        let deployment = SoftwareDeployment {
            id: new_uuid(),
            config_id: config.id.clone(),
            server_id: spec.server_id.clone(),
            input_values: spec.input_values.clone(),
            output_values: Map::new(),
            action,
            status: status::IN_PROGRESS.into(),
            status_reason: "Deploy data available".into(),
            derived_config_id: String::new(),
            creation_time: halite_protocol::time::iso8601_utc(now),
            updated_time: None,
        };
        let record = DeploymentRecord {
            owner: principal.to_owned(),
            deployment,
            spec,
            jid: String::new(),
            item: Value::Null,
            relay_pending: false,
            last_signal: None,
            finish_id: String::new(),
        };
        let record = self.push(record, &config, principal).await?;
        Ok(ResponseBody::Deployment(record.deployment))
    }

    async fn update_deployment(
        &mut self,
        mut record: DeploymentRecord,
        update: DeploymentUpdate,
        principal: &str,
    ) -> Reply {
        if let Some(config_id) = update.config_id {
            record.spec.config_id = config_id;
        }
        if let Some(values) = update.input_values {
            record.spec.input_values = values;
        }
        let action = update.action.unwrap_or_else(|| "UPDATE".into()).to_ascii_uppercase();
        record.spec.action = Some(action.clone());
        validate::deployment(&record.spec)?;
        let config = self
            .store
            .config(&record.spec.config_id)
            .await
            .map_err(RequestError::from)?
            .map(|r| r.config)
            .ok_or_else(|| no_config(&record.spec.config_id))?;
        // The previous derived config is superseded: its job is cancelled if still pending.
        self.deploy_jobs.forget(&record.jid);
        self.cancel_live(&record.jid);
        let now = self.clock.wall_ms();
        record.deployment.config_id = config.id.clone();
        record.deployment.input_values = record.spec.input_values.clone();
        record.deployment.action = action;
        record.deployment.status = status::IN_PROGRESS.into();
        record.deployment.status_reason = "Deploy data available".into();
        record.deployment.updated_time = Some(halite_protocol::time::iso8601_utc(now));
        record.relay_pending = false;
        // Not finished any more: no write has finished it yet.
        record.finish_id.clear();
        if record.deployment.action == "DELETE" && !self.registry.has_accepted(&record.deployment.server_id) {
            // Nothing to un-configure on a server that is gone: Heat's own resource skips it too.
            let reason = format!(
                "DELETE skipped: server {} has no accepted key (deleted, or never enrolled)",
                record.deployment.server_id
            );
            return self.finish_without_job(record, &reason).await;
        }
        let record = self.push(record, &config, principal).await?;
        Ok(ResponseBody::Deployment(record.deployment))
    }

    /// Finishes a deployment COMPLETE without running anything on its server, with `reason`:
    /// stored, announced, and signalled where the engine gave a URL.
    async fn finish_without_job(&mut self, mut record: DeploymentRecord, reason: &str) -> Reply {
        let now = self.clock.wall_ms();
        record.deployment.status = status::COMPLETE.into();
        record.deployment.status_reason = reason.to_owned();
        record.deployment.updated_time = Some(halite_protocol::time::iso8601_utc(now));
        let signal: Map<String, Value> = [
            ("deploy_stdout".to_owned(), json!("")),
            ("deploy_stderr".to_owned(), json!(reason)),
            ("deploy_status_code".to_owned(), json!(0)),
        ]
        .into_iter()
        .collect();
        record.deployment.output_values.extend(signal.clone());
        record.last_signal = Some(Value::Object(signal));
        record.relay_pending = record.spec.signal_id.is_some();
        self.store.put_deployment(&record, now).await.map_err(RequestError::from)?;
        info!(deployment = %record.deployment.id, server = %record.deployment.server_id, %reason, "deployment finished");
        self.announce(&record.deployment, &record.owner);
        if record.relay_pending {
            self.start_relay(&record);
        }
        Ok(ResponseBody::Deployment(record.deployment))
    }

    /// Derives the config for the deployment's current action and starts its `deploy.apply`
    /// job on the server; stores the deployment and announces it.
    async fn push(
        &mut self,
        mut record: DeploymentRecord,
        config: &SoftwareConfig,
        principal: &str,
    ) -> Result<DeploymentRecord, RequestError> {
        let derived_id = new_uuid();
        let now = self.clock.wall_ms();
        let item = derive::derived_item(
            config,
            &record.spec,
            &record.deployment.action,
            &derived_id,
            &halite_protocol::time::iso8601_utc(now),
        )?;
        let timeout_secs = record.spec.timeout_secs.unwrap_or(self.config.deployment_timeout_secs).max(1);
        let mut kwargs = std::collections::BTreeMap::new();
        kwargs.insert("item".to_owned(), item.clone());
        kwargs.insert("timeout".to_owned(), json!(timeout_secs));
        let server = record.deployment.server_id.clone();
        let wait_secs = self.deployment_wait_secs(&record.deployment.action, &server).await?;
        let target = Target { kind: TargetKind::List, expr: server.clone() };
        let job = NewJob {
            spec: JobSpec {
                kwargs,
                timeout_ms: timeout_secs * 1000 + JOB_MARGIN_MS,
                ttl_ms: wait_secs * 1000,
                ..JobSpec::new(target, DEPLOY_FUNCTION)
            },
            // The hook runs the deployment's own config; it calls no other function.
            reach: Some(vec![DEPLOY_FUNCTION.into()]),
            unknown: Vec::new(),
        };
        // Stored before the deployment that names it (awaited here: deployments still await the store).
        let prepared = self.prepare_job(principal, job, vec![server.clone()]);
        let stored = self.insert_job(&prepared).await;
        let jid = self.job_stored(prepared, stored).map_err(RequestError::from)?;
        record.deployment.derived_config_id = derived_id;
        record.jid = jid.clone();
        record.item = item;
        self.store.put_deployment(&record, now).await.map_err(RequestError::from)?;
        self.deploy_jobs.carries(&jid, &record.deployment.id);
        info!(deployment = %record.deployment.id, server = %server, %jid, action = %record.deployment.action, "deployment pushed");
        self.announce(&record.deployment, &record.owner);
        // A server that is not a known minion cannot receive it until it enrolls: the job waits.
        Ok(record)
    }

    /// A deployment's new status, on the bus for its creator (`owner`).
    fn announce(&mut self, deployment: &SoftwareDeployment, owner: &str) {
        let status = crate::metrics::Status { status: deployment.status.clone() };
        self.metrics.get().deployments.get_or_create(&status).inc();
        self.emit_shared(
            format!("halite/deployment/{}/{}", deployment.id, deployment.status),
            owned_event(serde_json::to_value(deployment).unwrap_or_default(), owner),
        );
    }

    /// Records the deployments whose `deploy.apply` jobs ended since the last call (heard by
    /// `Master::hear_moves`): each read, stored and announced in the order its job ended. The
    /// loop answers what this asks right away, so the deployments' groups hear the
    /// announcements in the same step. Ends the store could not take before come first.
    pub(crate) fn record_deployment_ends(&mut self) {
        for retry in self.deploy_jobs.take_due(self.clock.now()) {
            self.asks.push(Ask::RereadDeploymentEnd(Box::new(retry)));
        }
        for moved in self.hearing.take_deployment_ends() {
            let id = self.deploy_jobs.ended(&moved.jid);
            let end = ending::DeploymentEnd::of_move(&self.config, moved, id);
            self.asks.push(Ask::ReadDeploymentEnd(Box::new(end)));
        }
    }

    /// A job end whose deployment the store could not read or write: tried again a second
    /// later (`DeployJobs::retry`), so the deployment is not left in progress, unless the store
    /// refused it for good (a conflict, a row it cannot decode: trying again fails again).
    fn record_deployment_later(&mut self, retry: EndToRecord, error: &StoreError) {
        let now = self.clock.now();
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
    pub(crate) fn deployment_end_reread(
        &mut self,
        retry: EndToRecord,
        read: Result<Option<halite_protocol::message::JobDetail>, StoreError>,
    ) {
        match read {
            Ok(Some(job)) => match ending::stored_end(&self.config, &retry, &job.minions) {
                Some(end) => self.asks.push(Ask::ReadDeploymentEnd(Box::new(end))),
                None => self.deploy_jobs.retry(retry, self.clock.now()),
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
    pub(crate) fn deployment_end_read(
        &mut self,
        end: ending::DeploymentEnd,
        read: Result<Option<DeploymentEnding>, StoreError>,
    ) {
        let ending = match read {
            Ok(Some(ending)) => ending,
            Ok(None) => return,
            Err(error) => return self.record_deployment_later(end.to_retry(end.written.clone()), &error),
        };
        match ending::recording(&self.config, &end, ending, (self.clock.wall_ms(), new_uuid())) {
            Recording::Written(record) => self.deployment_finished(end, record, Ok(true)),
            Recording::Finish(record) => self.asks.push(Ask::FinishDeployment(Box::new((end, record)))),
            Recording::Nothing => {}
        }
    }

    /// A deployment finished by its job's end, as stored: announced, and its signal relayed
    /// when the engine gave a URL. Not when another master sharing the store finished it
    /// first, or it was updated meanwhile (`Ok(false)`): that master announces and relays.
    pub(crate) fn deployment_finished(
        &mut self,
        end: ending::DeploymentEnd,
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
    /// `deployment_delete_wait_secs`; a server nobody is enrolling as (no key of any state, no
    /// outstanding token) no longer than `deployment_unenrolled_wait_secs`.
    async fn deployment_wait_secs(&self, action: &str, server: &str) -> Result<u64, RequestError> {
        let ttl = self.config.deployment_ttl_secs;
        if action == "DELETE" {
            return Ok(self.config.deployment_delete_wait_secs.min(ttl));
        }
        let now = self.clock.wall_ms();
        let unknown = self.store.keys_for(server).await.map_err(RequestError::from)?.is_empty()
            && !self.store.token_outstanding(server, now).await.map_err(RequestError::from)?;
        Ok(if unknown { self.config.deployment_unenrolled_wait_secs.min(ttl) } else { ttl })
    }

    /// The `[deploy] signal_hosts` allowlist (checked when the config was read; an entry that
    /// somehow does not parse allows nothing).
    pub(crate) fn signal_hosts(&self) -> SignalHosts {
        SignalHosts::parse(&self.config.deploy.signal_hosts).unwrap_or_default()
    }

    /// A `signal_id` the relay would refuse is refused when the deployment is made, so the
    /// engine learns at once (the relay checks again, resolved addresses included).
    pub(crate) fn check_signal_url(&self, spec: &NewDeployment) -> Result<(), RequestError> {
        let Some(url) = &spec.signal_id else { return Ok(()) };
        self.signal_hosts()
            .admit_url(url)
            .map_err(|refused| RequestError::bad_request(format!("signal_id: {refused}")))?;
        Ok(())
    }

    /// Starts relaying a deployment's last signal to its `signal_id`.
    pub(crate) fn start_relay(&mut self, record: &DeploymentRecord) {
        let (Some(url), Some(Value::Object(signal))) = (&record.spec.signal_id, &record.last_signal) else { return };
        let request = RelayRequest {
            deployment_id: record.deployment.id.clone(),
            derived_config_id: record.deployment.derived_config_id.clone(),
            url: url.clone(),
            verb: derive::signal_verb(&record.spec),
            body: derive::trimmed_body(signal, relay::MAX_BODY),
        };
        relay::spawn(self.signal_hosts(), request, self.relay_tx.clone());
    }

    /// A relay ended: its deployment is read, then recorded as relayed
    /// ([`Master::relayed_read`]).
    pub(crate) fn relay_finished(&mut self, done: relay::RelayDone) {
        self.asks.push(Ask::ReadRelayed(Box::new(done)));
    }

    /// The deployment a relay was for, as read: no longer pending, unless it has been derived
    /// again since (a newer signal is on its way).
    pub(crate) fn relayed_read(&mut self, done: relay::RelayDone, read: Result<Option<DeploymentRecord>, StoreError>) {
        match read {
            Ok(Some(mut record)) if record.deployment.derived_config_id == done.request.derived_config_id => {
                record.relay_pending = false;
                self.asks.push(Ask::StoreRelayed(Box::new((record, done))));
            }
            Ok(_) => {}
            Err(error) => warn!(%error, deployment = %done.request.deployment_id, "recording a relay failed"),
        }
    }

    /// A relay recorded, as stored: announced. The announcement says only `relayed` (the
    /// engine's URL answered 2xx) or `refused` (anything else): a status code or connection
    /// error would tell whoever chose the URL what answers where the master stands. Those go
    /// to the log.
    pub(crate) fn relay_recorded(
        &mut self,
        record: DeploymentRecord,
        done: relay::RelayDone,
        stored: Result<bool, StoreError>,
    ) {
        let id = &done.request.deployment_id;
        match stored {
            Ok(true) => {}
            // Deleted or updated meanwhile, or recorded already: nothing to tell about it.
            Ok(false) => return,
            Err(error) => return warn!(%error, deployment = %id, "recording a relay failed"),
        }
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
        self.emit_shared(format!("halite/deployment/{id}/relayed"), data);
    }

    /// After a restart: in-progress deployments are linked to their jobs again and pending
    /// relays resume.
    pub(crate) async fn resume_deployments(&mut self) -> Result<(), StoreError> {
        let now = self.clock.now();
        for record in self.store.open_deployments().await? {
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
        Ok(())
    }
}

pub(crate) fn no_config(id: &str) -> RequestError {
    RequestError::not_found(format!("no software config {id}"))
}

/// A deployment's or group's event data with its creator (`owner`): only the creator, root and
/// administrators receive it (`authz::decide`, `Action::Receive`), since a deployment's
/// events carry its input and output values.
pub(crate) fn owned_event(mut data: Value, owner: &str) -> Value {
    if let Value::Object(map) = &mut data {
        map.insert("owner".into(), Value::from(owner));
    }
    data
}
