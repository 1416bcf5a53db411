//! What a `deploy.apply` job's end does to its deployment, decided as a value: the status,
//! reason and outputs the deployment takes, and the signal relayed to its engine. The loop
//! reads what the decision needs (`store_calls::reads::deployment_ending`) and stores what it
//! returns; nothing here reads, writes or sends.

use halite_protocol::message::{status, ConfigOutput, JobReturn, MinionJobState, Value};
use serde_json::{json, Map};

use super::derive;
use super::lifecycle::{self, Status};
use crate::calls::deploy::{DeploymentEnd, EndToRecord};
use crate::config::MasterConfig;
use crate::core::jobs::SlotMoved;
use crate::store::DeploymentRecord;

impl DeploymentEnd {
    /// The end of job `jid` on `minion` in `state` with `ret`, the job of deployment `id` if
    /// this master knows it.
    pub fn new(
        config: &MasterConfig,
        (jid, minion): (String, String),
        (state, ret): (MinionJobState, Option<&JobReturn>),
        id: Option<String>,
    ) -> Self {
        let signal = signal_of(state, ret);
        let error = match &signal {
            Some(_) => None,
            None => ret.and_then(|r| r.outputs.get("error")).and_then(Value::as_str).map(str::to_owned),
        };
        let short = config.deployment_unenrolled_wait_secs.saturating_mul(1000);
        let shorter = short < config.deployment_ttl_secs.saturating_mul(1000);
        let expired = state == MinionJobState::Expired && signal.is_none();
        let short_wait_ms = (expired && shorter).then_some(short);
        DeploymentEnd { jid, minion, state, id, signal, error, short_wait_ms, written: None }
    }

    /// The end as a slot's move tells it.
    pub fn of_move(config: &MasterConfig, moved: SlotMoved, id: Option<String>) -> Self {
        DeploymentEnd::new(config, (moved.jid, moved.minion), (moved.state, moved.ret.as_ref()), id)
    }

    /// What is kept of it to record it again later: it is reread from the store then. A
    /// deployment `written` names is looked up by its id, even if this master did not know it
    /// (finished, it is no longer among the open deployments the job's id is searched in).
    pub fn to_retry(&self, written: Option<DeploymentRecord>) -> EndToRecord {
        let id = self.id.clone().or_else(|| written.as_ref().map(|record| record.deployment.id.clone()));
        EndToRecord { jid: self.jid.clone(), id, written }
    }
}

/// Whether deployment `record` still waits on `end`'s job: in progress on that job, on the
/// server whose slot ended (a row naming the job for another server is not its deployment).
fn waits_on(record: &DeploymentRecord, end: &DeploymentEnd) -> bool {
    record.jid == end.jid
        && record.deployment.status == status::IN_PROGRESS
        && record.deployment.server_id == end.minion
}

/// The end of job `jid`, as the store keeps it: the first slot that ended (a deployment's job
/// has one target), with its return unless it came late (the end was decided without it).
/// `None` while no slot's end is stored yet.
pub fn stored_end(
    config: &MasterConfig,
    retry: &EndToRecord,
    minions: &[halite_protocol::message::MinionJob],
) -> Option<DeploymentEnd> {
    let ended = minions.iter().find(|m| m.state.is_final())?;
    let ret = if ended.late { None } else { ended.ret.as_ref() };
    let slot = (retry.jid.clone(), ended.minion.clone());
    let mut end = DeploymentEnd::new(config, slot, (ended.state, ret), retry.id.clone());
    end.written = retry.written.clone();
    Some(end)
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

/// What to do with the deployment a job's end is for, as read.
#[derive(Debug, PartialEq)]
pub enum Recording {
    /// An earlier write of this end, of unknown outcome, was made (the deployment is stored
    /// exactly as written): what follows the write (announcing, relaying) is still to do.
    Written(DeploymentRecord),
    /// The deployment waits on this job: it is to be stored as this.
    Finish(DeploymentRecord),
    /// It no longer waits on this job (finished, updated, deleted, another server's).
    Nothing,
}

/// What `end` does to its deployment, as stored (`ending`), at `now_ms`; a write that
/// finishes it is marked `finish_id` (unique per write). Found exactly as an earlier write left
/// it, mark included, that write was made: two masters' writes of one end differ in their mark.
pub fn recording(
    config: &MasterConfig,
    end: &DeploymentEnd,
    ending: DeploymentEnding,
    (now_ms, finish_id): (u64, String),
) -> Recording {
    if end.written.as_ref() == Some(&ending.record) {
        return Recording::Written(ending.record);
    }
    if !waits_on(&ending.record, end) {
        return Recording::Nothing;
    }
    let mut record = finished(config, end, ending, now_ms);
    record.finish_id = finish_id;
    Recording::Finish(record)
}

/// The deployment as its job's end leaves it, at `now_ms`: the signal's status (or a failure
/// with the reason the job gives), and the signal to relay when the engine gave a URL. A
/// failure with no signal still reaches the engine, so Heat fails at once instead of waiting
/// for its timeout.
fn finished(config: &MasterConfig, end: &DeploymentEnd, ending: DeploymentEnding, now_ms: u64) -> DeploymentRecord {
    let mut record = ending.record;
    let outcome = match &end.signal {
        Some(signal) => derive::apply_signal(&ending.outputs, signal, &record.deployment.output_values),
        None => {
            let mut reason = failure_reason(config, &record, end.state, end.error.as_deref());
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
            derive::Outcome { status: Status::Failed, reason, output_values }
        }
    };
    lifecycle::move_deployment(&mut record.deployment, outcome.status);
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
    error: Option<&str>,
) -> String {
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

/// The deployment a `deploy.apply` job's end is for, as stored, with what the end needs read.
#[derive(Debug)]
pub struct DeploymentEnding {
    pub record: DeploymentRecord,
    /// The outputs its config declares (read only for a job that signalled, and only while the
    /// deployment waits on that job).
    pub outputs: Vec<ConfigOutput>,
    /// Whether the job waited only the short wait for a server nobody enrolls as, and its
    /// server still has no key (read only for such a job, and only while the deployment waits
    /// on it).
    pub never_enrolled: bool,
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::{NewDeployment, SoftwareDeployment};

    use super::*;
    use crate::core::jobs::testing::ret;

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
            finish_id: String::new(),
        }
    }

    fn end_of(config: &MasterConfig, state: MinionJobState, outputs: Option<Value>) -> DeploymentEnd {
        let ret = outputs.map(|outputs| JobReturn { minion: "vm-1".into(), outputs, ..ret("j1") });
        DeploymentEnd::new(config, ("j1".into(), "vm-1".into()), (state, ret.as_ref()), Some("d1".into()))
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

    #[test]
    fn an_end_records_only_the_deployment_that_waits_on_its_job_on_its_server() {
        let config = MasterConfig::default();
        let end = end_of(&config, MinionJobState::Returned, Some(json!({ "deploy_status_code": 0 })));
        let read = |record| DeploymentEnding { record, outputs: Vec::new(), never_enrolled: false };
        let Recording::Finish(done) = recording(&config, &end, read(in_progress(None)), (0, "w1".into())) else {
            panic!("the deployment waits on this job")
        };
        assert_eq!(done.deployment.status, status::COMPLETE);

        let updated = DeploymentRecord { jid: "j2".into(), ..in_progress(None) };
        assert_eq!(recording(&config, &end, read(updated), (0, "w2".into())), Recording::Nothing, "updated meanwhile");
        assert_eq!(
            recording(&config, &end, read(done.clone()), (0, "w3".into())),
            Recording::Nothing,
            "finished already"
        );
        let mut elsewhere = in_progress(None);
        elsewhere.deployment.server_id = "vm-2".into();
        assert_eq!(recording(&config, &end, read(elsewhere), (0, "w4".into())), Recording::Nothing, "another server's");

        assert_eq!(done.finish_id, "w1", "a finishing write is marked");
        // A write whose outcome was unknown, found stored as written: it was made. Another
        // master's write of the same end, identical but for its mark, was not this one.
        let retried = DeploymentEnd { written: Some(done.clone()), ..end };
        let theirs = DeploymentRecord { finish_id: "w9".into(), ..done.clone() };
        assert_eq!(recording(&config, &retried, read(theirs), (0, "w5".into())), Recording::Nothing);
        assert_eq!(recording(&config, &retried, read(done.clone()), (0, "w6".into())), Recording::Written(done));
    }
}
