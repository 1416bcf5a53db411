//! Software configs and deployments (`docs/engine-guide.md`, "Heat"): requests from engines,
//! the `deploy.apply` job that carries each derived config to its minion, and what the
//! minion's signal does to the deployment.
//!
//! A deployment rides on an ordinary job with a long TTL, so it inherits everything jobs
//! already guarantee: pushed at once to a connected minion or when it connects (enrolled by
//! token or not yet), at-most-once execution, and a return that survives restarts of either
//! side.

pub(crate) mod derive;
pub(crate) mod groups;
pub(crate) mod relay;
pub(crate) mod signal_hosts;
mod validate;

use halite_protocol::message::{
    status, DeploymentUpdate, JobReturn, JobSpec, MinionJobState, NewDeployment, NewSoftwareConfig, PrincipalAcl,
    RequestBody, ResponseBody, SoftwareConfig, SoftwareDeployment, Target, TargetKind, Value,
};
use serde_json::{json, Map};
use tracing::{info, warn};

use crate::authz::Who;
use crate::clock::new_uuid;
use crate::net::Net;
use crate::request_error::{Reply, RequestError};
use crate::server::{Master, NewJob};
use crate::store::{DeploymentRecord, Store, StoreError};
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
                self.deploy_jobs.remove(&record.jid);
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
        self.deploy_jobs.remove(&record.jid);
        self.cancel_live(&record.jid);
        let now = self.clock.wall_ms();
        record.deployment.config_id = config.id.clone();
        record.deployment.input_values = record.spec.input_values.clone();
        record.deployment.action = action;
        record.deployment.status = status::IN_PROGRESS.into();
        record.deployment.status_reason = "Deploy data available".into();
        record.deployment.updated_time = Some(halite_protocol::time::iso8601_utc(now));
        record.relay_pending = false;
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
        self.deploy_jobs.insert(jid.clone(), record.deployment.id.clone());
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
    /// `Master::hear_moves`): each stored and announced in the order its job ended.
    pub(crate) async fn record_deployment_ends(&mut self) {
        for moved in self.hearing.take_deployment_ends() {
            if let Err(error) = self.deploy_job_finished(&moved.jid, moved.state, moved.ret.as_ref()).await {
                warn!(%error, jid = %moved.jid, minion = %moved.minion, "recording a deployment's result failed");
            }
        }
    }

    /// A `deploy.apply` job reached a final state: the deployment takes the signal's status
    /// (or fails with the reason the job gives), is stored and announced, and the signal is
    /// relayed when the engine gave a URL.
    pub(crate) async fn deploy_job_finished(
        &mut self,
        jid: &str,
        state: MinionJobState,
        ret: Option<&JobReturn>,
    ) -> Result<(), StoreError> {
        let id = match self.deploy_jobs.remove(jid) {
            Some(id) => id,
            // Published on another master (which may since have died), or adopted before that
            // master recorded which deployment the job carries: found by its jid now.
            None => match self.store.open_deployments().await?.into_iter().find(|d| d.jid == jid) {
                Some(open) => open.deployment.id,
                None => return Ok(()),
            },
        };
        let Some(mut record) = self.store.deployment(&id).await? else { return Ok(()) };
        if record.jid != jid || record.deployment.status != status::IN_PROGRESS {
            return Ok(());
        }
        let signal = match (state, ret.map(|r| &r.outputs)) {
            (MinionJobState::Returned, Some(Value::Object(signal))) => Some(signal.clone()),
            (MinionJobState::Failed, Some(Value::Object(signal))) if signal.contains_key("deploy_status_code") => {
                Some(signal.clone())
            }
            _ => None,
        };
        let outcome = match &signal {
            Some(signal) => {
                let config = self.store.config(&record.deployment.config_id).await?;
                let outputs = config.map(|c| c.config.outputs).unwrap_or_default();
                derive::apply_signal(&outputs, signal, &record.deployment.output_values)
            }
            None => {
                let mut reason = self.failure_reason(&record, state, ret);
                if state == MinionJobState::Expired && self.waited_as_unenrolled(jid, &record).await? {
                    reason = format!(
                        "server {} never enrolled: no minion has a key as {0}, and no enrollment token for it was \
                         outstanding when the deployment was made (with Heat, the Nova server's name must be its \
                         OS::Halite::EnrollmentUserData's server_name)",
                        record.deployment.server_id
                    );
                }
                let mut output_values = record.deployment.output_values.clone();
                output_values.insert("deploy_stdout".into(), json!(""));
                output_values.insert("deploy_stderr".into(), json!(reason));
                output_values.insert("deploy_status_code".into(), json!(1));
                derive::Outcome { status: status::FAILED, reason, output_values }
            }
        };
        let now = self.clock.wall_ms();
        record.deployment.status = outcome.status.into();
        record.deployment.status_reason = outcome.reason;
        record.deployment.updated_time = Some(halite_protocol::time::iso8601_utc(now));
        // A failure with no signal still reaches the engine, so Heat fails at once instead of
        // waiting for its timeout.
        let relayed_signal = signal.unwrap_or_else(|| {
            let mut made_up = Map::new();
            for key in ["deploy_stdout", "deploy_stderr", "deploy_status_code"] {
                made_up.insert(key.into(), outcome.output_values.get(key).cloned().unwrap_or(Value::Null));
            }
            made_up
        });
        record.deployment.output_values = outcome.output_values;
        record.last_signal = Some(Value::Object(relayed_signal));
        record.relay_pending = record.spec.signal_id.is_some();
        if !self.store.finish_deployment(&record, now).await? {
            // Another master sharing the store finished it first; it announces and relays.
            return Ok(());
        }
        info!(deployment = %id, status = %record.deployment.status, reason = %record.deployment.status_reason, "deployment signalled");
        self.announce(&record.deployment, &record.owner);
        if record.relay_pending {
            self.start_relay(&record);
        }
        Ok(())
    }

    /// Whether a deployment's job waited only `deployment_unenrolled_wait_secs` (nobody was
    /// enrolling as its server when it was made) and its server still has no key.
    async fn waited_as_unenrolled(&self, jid: &str, record: &DeploymentRecord) -> Result<bool, StoreError> {
        let short = self.config.deployment_unenrolled_wait_secs.saturating_mul(1000);
        if short >= self.config.deployment_ttl_secs.saturating_mul(1000) {
            return Ok(false);
        }
        let Some((job, _)) = self.store.live_job(jid).await? else { return Ok(false) };
        Ok(job.ttl_ms == short && self.store.keys_for(&record.deployment.server_id).await?.is_empty())
    }

    fn failure_reason(&self, record: &DeploymentRecord, state: MinionJobState, ret: Option<&JobReturn>) -> String {
        let error = ret.and_then(|r| r.outputs.get("error")).and_then(Value::as_str);
        match (state, error) {
            (MinionJobState::Expired, _) if record.deployment.action == "DELETE" => format!(
                "server {} did not connect within {} s of the DELETE (deployment_delete_wait_secs); nothing was run on it",
                record.deployment.server_id,
                self.config.deployment_delete_wait_secs.min(self.config.deployment_ttl_secs)
            ),
            (MinionJobState::Expired, _) => format!(
                "server {} did not connect within {} s of the deployment",
                record.deployment.server_id, self.config.deployment_ttl_secs
            ),
            (MinionJobState::TimedOut, _) => "deploy.apply did not finish before its timeout".into(),
            (MinionJobState::Cancelled, _) => "deployment cancelled".into(),
            (MinionJobState::Offline, _) => format!("server {} is offline", record.deployment.server_id),
            (MinionJobState::Denied, Some(error)) => format!("the server's policy refused deploy.apply: {error}"),
            (_, Some(error)) => error.to_owned(),
            (state, None) => format!("deploy.apply ended {}", state.as_str()),
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

    /// A relay ended: recorded, announced. The announcement says only `relayed` (the engine's
    /// URL answered 2xx) or `refused` (anything else): a status code or connection error would
    /// tell whoever chose the URL what answers where the master stands. Those go to the log.
    pub(crate) async fn relay_finished(&mut self, done: relay::RelayDone) -> Result<(), StoreError> {
        let id = &done.request.deployment_id;
        let Some(mut record) = self.store.deployment(id).await? else { return Ok(()) };
        if record.deployment.derived_config_id != done.request.derived_config_id {
            return Ok(());
        }
        record.relay_pending = false;
        self.store.put_deployment(&record, self.clock.wall_ms()).await?;
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
        Ok(())
    }

    /// After a restart: in-progress deployments are linked to their jobs again and pending
    /// relays resume.
    pub(crate) async fn resume_deployments(&mut self) -> Result<(), StoreError> {
        for record in self.store.open_deployments().await? {
            if record.deployment.status == status::IN_PROGRESS {
                self.deploy_jobs.insert(record.jid.clone(), record.deployment.id.clone());
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
