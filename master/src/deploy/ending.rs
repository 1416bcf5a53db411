//! What a `deploy.apply` job's end does to its deployment, decided as a value: the status,
//! reason and outputs the deployment takes, and the signal relayed to its engine. The loop
//! reads what the decision needs (`store::reads::deployment_ending`) and stores what it
//! returns; nothing here reads, writes or sends.

use halite_protocol::message::{status, JobReturn, MinionJobState, Value};
use serde_json::{json, Map};

use super::derive;
use crate::config::MasterConfig;
use crate::core::jobs::SlotMoved;
use crate::store::reads::DeploymentEnding;
use crate::store::DeploymentRecord;

/// A `deploy.apply` job that ended, and what was known of it before the store was read.
#[derive(Debug)]
pub(crate) struct DeploymentEnd {
    pub(crate) moved: SlotMoved,
    /// The deployment this master published the job for (`None`: published on another master,
    /// or adopted before that master recorded which deployment the job carries).
    pub(crate) id: Option<String>,
    /// What the hook signalled, if it did.
    pub(crate) signal: Option<Map<String, Value>>,
    /// Set when the job expired after the short wait for a server nobody was enrolling as: how
    /// short (ms). The reason then says the server never enrolled, if it still has no key.
    pub(crate) short_wait_ms: Option<u64>,
}

impl DeploymentEnd {
    /// The end of `moved`, the job of deployment `id` if this master knows it.
    pub(crate) fn new(config: &MasterConfig, moved: SlotMoved, id: Option<String>) -> Self {
        let signal = signal_of(moved.state, moved.ret.as_ref());
        let short = config.deployment_unenrolled_wait_secs.saturating_mul(1000);
        let shorter = short < config.deployment_ttl_secs.saturating_mul(1000);
        let expired = moved.state == MinionJobState::Expired && signal.is_none();
        let short_wait_ms = (expired && shorter).then_some(short);
        DeploymentEnd { moved, id, signal, short_wait_ms }
    }
}

/// The signal a job's end carries: a return's outputs, or a failure's when the hook reported
/// its status code.
fn signal_of(state: MinionJobState, ret: Option<&JobReturn>) -> Option<Map<String, Value>> {
    match (state, ret.map(|r| &r.outputs)) {
        (MinionJobState::Returned, Some(Value::Object(signal))) => Some(signal.clone()),
        (MinionJobState::Failed, Some(Value::Object(signal))) if signal.contains_key("deploy_status_code") => {
            Some(signal.clone())
        }
        _ => None,
    }
}

/// The deployment as its job's end leaves it, at `now_ms`: the signal's status (or a failure
/// with the reason the job gives), and the signal to relay when the engine gave a URL. A
/// failure with no signal still reaches the engine, so Heat fails at once instead of waiting
/// for its timeout.
pub(crate) fn finished(
    config: &MasterConfig,
    end: &DeploymentEnd,
    ending: DeploymentEnding,
    now_ms: u64,
) -> DeploymentRecord {
    let mut record = ending.record;
    let outcome = match &end.signal {
        Some(signal) => derive::apply_signal(&ending.outputs, signal, &record.deployment.output_values),
        None => {
            let mut reason = failure_reason(config, &record, end.moved.state, end.moved.ret.as_ref());
            if ending.never_enrolled {
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
    record.deployment.status = outcome.status.into();
    record.deployment.status_reason = outcome.reason;
    record.deployment.updated_time = Some(halite_protocol::time::iso8601_utc(now_ms));
    let relayed_signal = end.signal.clone().unwrap_or_else(|| {
        let mut made_up = Map::new();
        for key in ["deploy_stdout", "deploy_stderr", "deploy_status_code"] {
            made_up.insert(key.into(), outcome.output_values.get(key).cloned().unwrap_or(Value::Null));
        }
        made_up
    });
    record.deployment.output_values = outcome.output_values;
    record.last_signal = Some(Value::Object(relayed_signal));
    record.relay_pending = record.spec.signal_id.is_some();
    record
}

/// Why a job that sent no signal failed its deployment, in words for the engine's user.
fn failure_reason(
    config: &MasterConfig,
    record: &DeploymentRecord,
    state: MinionJobState,
    ret: Option<&JobReturn>,
) -> String {
    let error = ret.and_then(|r| r.outputs.get("error")).and_then(Value::as_str);
    match (state, error) {
        (MinionJobState::Expired, _) if record.deployment.action == "DELETE" => format!(
            "server {} did not connect within {} s of the DELETE (deployment_delete_wait_secs); nothing was run on it",
            record.deployment.server_id,
            config.deployment_delete_wait_secs.min(config.deployment_ttl_secs)
        ),
        (MinionJobState::Expired, _) => format!(
            "server {} did not connect within {} s of the deployment",
            record.deployment.server_id, config.deployment_ttl_secs
        ),
        (MinionJobState::TimedOut, _) => "deploy.apply did not finish before its timeout".into(),
        (MinionJobState::Cancelled, _) => "deployment cancelled".into(),
        (MinionJobState::Offline, _) => format!("server {} is offline", record.deployment.server_id),
        (MinionJobState::Denied, Some(error)) => format!("the server's policy refused deploy.apply: {error}"),
        (_, Some(error)) => error.to_owned(),
        (state, None) => format!("deploy.apply ended {}", state.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use halite_protocol::message::{NewDeployment, SoftwareDeployment};

    use super::*;

    fn in_progress(signal_url: Option<&str>) -> DeploymentRecord {
        let spec: NewDeployment =
            serde_json::from_value(json!({"config_id": "c1", "server_id": "vm-1", "signal_id": signal_url}))
                .expect("spec");
        DeploymentRecord {
            owner: "heat".into(),
            deployment: SoftwareDeployment {
                id: "d1".into(),
                config_id: "c1".into(),
                server_id: "vm-1".into(),
                input_values: Map::new(),
                output_values: Map::new(),
                action: "CREATE".into(),
                status: status::IN_PROGRESS.into(),
                status_reason: String::new(),
                derived_config_id: "d1-a".into(),
                creation_time: "2026-11-27T00:00:00Z".into(),
                updated_time: None,
            },
            spec,
            jid: "j1".into(),
            item: json!({}),
            relay_pending: false,
            last_signal: None,
        }
    }

    fn end_of(config: &MasterConfig, state: MinionJobState, outputs: Option<Value>) -> DeploymentEnd {
        let ret = outputs.map(|outputs| JobReturn { minion: "vm-1".into(), outputs, ..crate::sim::ret("j1") });
        let moved = SlotMoved {
            jid: "j1".into(),
            minion: "vm-1".into(),
            state,
            ret,
            returned: true,
            at: Instant::now(),
            at_ms: 0,
            created_at_ms: 0,
            deploy: true,
        };
        DeploymentEnd::new(config, moved, Some("d1".into()))
    }

    #[test]
    fn a_signal_sets_the_status_and_is_relayed_as_sent() {
        let config = MasterConfig::default();
        let signal = json!({ "deploy_status_code": 0, "deploy_stdout": "ok", "deploy_stderr": "" });
        let end = end_of(&config, MinionJobState::Returned, Some(signal.clone()));
        assert_eq!(end.short_wait_ms, None, "a job that signalled is not asked whether it enrolled");
        let ending = DeploymentEnding {
            record: in_progress(Some("http://heat/signal")),
            outputs: Vec::new(),
            never_enrolled: false,
        };
        let record = finished(&config, &end, ending, 1_000);
        assert_eq!(record.deployment.status, status::COMPLETE);
        assert_eq!(record.last_signal, Some(signal));
        assert!(record.relay_pending, "an engine that gave a URL is told");
        assert_eq!(record.deployment.updated_time.as_deref(), Some("1970-01-01T00:00:01Z"));
    }

    #[test]
    fn a_failure_without_a_signal_makes_one_up_that_says_why() {
        let config = MasterConfig::default();
        // A failure that carries no status code is not a signal.
        let end = end_of(&config, MinionJobState::Failed, Some(json!({ "error": "no such hook" })));
        assert_eq!(end.signal, None);
        let ending = DeploymentEnding { record: in_progress(None), outputs: Vec::new(), never_enrolled: false };
        let record = finished(&config, &end, ending, 0);
        assert_eq!(record.deployment.status, status::FAILED);
        assert_eq!(record.deployment.status_reason, "no such hook");
        let made_up = record.last_signal.expect("a signal");
        assert_eq!(made_up["deploy_status_code"], json!(1));
        assert_eq!(made_up["deploy_stderr"], json!("no such hook"));
        assert!(!record.relay_pending, "no URL, nothing to relay");
    }

    #[test]
    fn an_expired_job_after_the_short_wait_says_the_server_never_enrolled() {
        let config =
            MasterConfig { deployment_unenrolled_wait_secs: 60, deployment_ttl_secs: 3600, ..Default::default() };
        let end = end_of(&config, MinionJobState::Expired, None);
        assert_eq!(end.short_wait_ms, Some(60_000), "the store is asked whether it waited only that long");
        let never = DeploymentEnding { record: in_progress(None), outputs: Vec::new(), never_enrolled: true };
        assert!(finished(&config, &end, never, 0).deployment.status_reason.contains("server vm-1 never enrolled"));
        let late = DeploymentEnding { record: in_progress(None), outputs: Vec::new(), never_enrolled: false };
        let reason = finished(&config, &end, late, 0).deployment.status_reason;
        assert_eq!(reason, "server vm-1 did not connect within 3600 s of the deployment");

        let no_short_wait = MasterConfig { deployment_unenrolled_wait_secs: 3600, ..config };
        assert_eq!(end_of(&no_short_wait, MinionJobState::Expired, None).short_wait_ms, None);
    }
}
