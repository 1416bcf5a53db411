//! Configs and deployments as requests make and change them, and the `deploy.apply` job that
//! carries a deployment's derived config: values built from what was asked and read, before
//! anything is stored.

use std::collections::BTreeMap;

use halite_protocol::message::{
    DeploymentUpdate, JobSpec, NewDeployment, NewSoftwareConfig, SoftwareConfig, SoftwareDeployment, Target,
    TargetKind, Value,
};
use serde_json::{json, Map};

use super::lifecycle::{self, Status};
use super::{derive, validate, DEPLOY_FUNCTION};
use crate::clock::new_uuid;
use crate::outputs::asks::NewJob;
use crate::request_error::RequestError;
use crate::store::DeploymentRecord;

/// Extra time the job gets past the hook's own timeout, for the minion to report it.
const JOB_MARGIN_MS: u64 = 30_000;

/// A new config, as asked for (already valid), created at `now_ms`.
pub fn new_config(new: NewSoftwareConfig, now_ms: u64) -> SoftwareConfig {
    SoftwareConfig {
        id: new_uuid(),
        name: new.name,
        group: new.group,
        config: new.config,
        inputs: new.inputs,
        outputs: new.outputs,
        options: new.options,
        creation_time: halite_protocol::time::iso8601_utc(now_ms),
    }
}

/// A new deployment of `spec` (already valid) by `principal`, in progress, not pushed yet.
pub fn new_deployment(spec: NewDeployment, principal: &str, now_ms: u64) -> DeploymentRecord {
    let action = spec.action.clone().unwrap_or_else(|| "CREATE".into()).to_ascii_uppercase();
    let deployment = SoftwareDeployment {
        id: new_uuid(),
        config_id: spec.config_id.clone(),
        server_id: spec.server_id.clone(),
        input_values: spec.input_values.clone(),
        output_values: Map::new(),
        action,
        status: Status::InProgress.as_str().into(),
        status_reason: "Deploy data available".into(),
        derived_config_id: String::new(),
        creation_time: halite_protocol::time::iso8601_utc(now_ms),
        updated_time: None,
    };
    DeploymentRecord {
        owner: principal.to_owned(),
        deployment,
        spec,
        jid: String::new(),
        item: Value::Null,
        relay_pending: false,
        last_signal: None,
        finish_id: String::new(),
    }
}

/// A deployment changed by an update (its action `UPDATE` unless named), if still valid: in
/// progress again at `now_ms` with its new config, inputs and action, no signal relayed and no
/// write finishing it yet. Its previous job is superseded once it is pushed again.
pub fn updated(
    mut record: DeploymentRecord,
    update: DeploymentUpdate,
    now_ms: u64,
) -> Result<DeploymentRecord, RequestError> {
    if let Some(config_id) = update.config_id {
        record.spec.config_id = config_id;
    }
    if let Some(values) = update.input_values {
        record.spec.input_values = values;
    }
    let action = update.action.unwrap_or_else(|| "UPDATE".into()).to_ascii_uppercase();
    record.spec.action = Some(action.clone());
    validate::deployment(&record.spec)?;
    record.deployment.config_id = record.spec.config_id.clone();
    record.deployment.input_values = record.spec.input_values.clone();
    record.deployment.action = action;
    lifecycle::move_deployment(&mut record.deployment, Status::InProgress);
    record.deployment.status_reason = "Deploy data available".into();
    record.deployment.updated_time = Some(halite_protocol::time::iso8601_utc(now_ms));
    record.relay_pending = false;
    // Not finished any more: no write has finished it yet.
    record.finish_id.clear();
    Ok(record)
}

/// Finishes a deployment COMPLETE without running anything on its server, with `reason`, at
/// `now_ms`; its signal is to be relayed where the engine gave a URL.
pub fn finish_without_job(record: &mut DeploymentRecord, reason: &str, now_ms: u64) {
    lifecycle::move_deployment(&mut record.deployment, Status::Complete);
    record.deployment.status_reason = reason.to_owned();
    record.deployment.updated_time = Some(halite_protocol::time::iso8601_utc(now_ms));
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
}

/// A derived config: its id and the item the minion's hook runs.
pub struct Derived {
    pub id: String,
    pub item: Value,
}

/// The `deploy.apply` job that carries a deployment's config, derived for its current action
/// at `now_ms`, to its server: it waits `wait_secs` for the server to connect, and runs for
/// the deployment's timeout (`default_timeout_secs` without one) plus a margin to report.
pub fn deployment_job(
    record: &DeploymentRecord,
    config: &SoftwareConfig,
    wait_secs: u64,
    default_timeout_secs: u64,
    now_ms: u64,
) -> Result<(NewJob, Derived), RequestError> {
    let derived_id = new_uuid();
    let item = derive::derived_item(
        config,
        &record.spec,
        &record.deployment.action,
        &derived_id,
        &halite_protocol::time::iso8601_utc(now_ms),
    )?;
    let timeout_secs = record.spec.timeout_secs.unwrap_or(default_timeout_secs).max(1);
    let mut kwargs = BTreeMap::new();
    kwargs.insert("item".to_owned(), item.clone());
    kwargs.insert("timeout".to_owned(), json!(timeout_secs));
    let target = Target { kind: TargetKind::List, expr: record.deployment.server_id.clone() };
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
    Ok((job, Derived { id: derived_id, item }))
}
