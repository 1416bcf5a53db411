//! Software configs and deployments: OpenStack Heat's model (`docs/engine-guide.md`, "Heat"),
//! as engines create and read them.

use serde::{Deserialize, Serialize};
use serde_json::Map;

/// The function a software deployment's job runs on its server (the minion's Heat agent).
pub const DEPLOY_FUNCTION: &str = "deploy.apply";

use super::types::Value;

fn string_type() -> String {
    "String".into()
}

fn ungrouped() -> String {
    "Heat::Ungrouped".into()
}

fn empty_config() -> Value {
    Value::String(String::new())
}

/// A declared input of a config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigInput {
    /// Name: the script's environment variable.
    pub name: String,
    /// `String` (default), `Number`, `CommaDelimitedList`, `Json` or `Boolean`.
    #[serde(rename = "type", default = "string_type")]
    pub kind: String,
    /// Value when the deployment gives none.
    #[serde(default)]
    pub default: Option<Value>,
    /// For people.
    #[serde(default)]
    pub description: Option<String>,
    /// Heat replaces the server when this input changes; recorded, not acted on.
    #[serde(default)]
    pub replace_on_change: bool,
}

/// A declared output of a config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfigOutput {
    /// Name: the file `$heat_outputs_path.<name>` for scripts.
    pub name: String,
    /// Type, as for inputs.
    #[serde(rename = "type", default = "string_type")]
    pub kind: String,
    /// For people.
    #[serde(default)]
    pub description: Option<String>,
    /// The deployment fails when this output is signalled at all (even empty).
    #[serde(default)]
    pub error_output: bool,
}

/// What an engine gives to create a config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewSoftwareConfig {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// The hook that applies it: `script`, or an installed heat-agents hook.
    #[serde(default = "ungrouped")]
    pub group: String,
    /// The script (a string), or a map for structured configs (`get_input` is substituted).
    #[serde(default = "empty_config")]
    pub config: Value,
    /// Declared inputs.
    #[serde(default)]
    pub inputs: Vec<ConfigInput>,
    /// Declared outputs.
    #[serde(default)]
    pub outputs: Vec<ConfigOutput>,
    /// Hook options (a map, or null).
    #[serde(default)]
    pub options: Option<Map<String, Value>>,
}

/// A stored config. Immutable: there is no update, only create, show, list and delete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SoftwareConfig {
    /// Id (a UUID).
    pub id: String,
    /// Name.
    pub name: String,
    /// Hook group.
    pub group: String,
    /// Script or structured config.
    pub config: Value,
    /// Declared inputs.
    pub inputs: Vec<ConfigInput>,
    /// Declared outputs.
    pub outputs: Vec<ConfigOutput>,
    /// Hook options.
    pub options: Option<Map<String, Value>>,
    /// ISO 8601 UTC.
    pub creation_time: String,
}

/// What an engine gives to deploy a config to a server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewDeployment {
    /// The config to apply.
    pub config_id: String,
    /// The minion id of the server; it need not have connected yet.
    pub server_id: String,
    /// Input values by name; names the config does not declare become String inputs.
    #[serde(default)]
    pub input_values: Map<String, Value>,
    /// `CREATE` (default), `UPDATE`, `DELETE`, `SUSPEND` or `RESUME`.
    #[serde(default)]
    pub action: Option<String>,
    /// Heat's stack path, passed as `deploy_stack_id`.
    #[serde(default)]
    pub stack_id: String,
    /// Heat's resource name, passed as `deploy_resource_name`.
    #[serde(default)]
    pub resource_name: String,
    /// Passed as `deploy_signal_transport`; default `CFN_SIGNAL` when `signal_id` is set
    /// (`TEMP_URL_SIGNAL` with verb PUT), `NO_SIGNAL` otherwise.
    #[serde(default)]
    pub signal_transport: Option<String>,
    /// A URL the master also sends the signal to, as heat-config-notify does.
    #[serde(default)]
    pub signal_id: Option<String>,
    /// `POST` (default) or `PUT`.
    #[serde(default)]
    pub signal_verb: Option<String>,
    /// Seconds the hook may run before it is killed (default: the master's
    /// `deployment_timeout_secs`).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// For structured (map) configs: the function name substituted, default `get_input`.
    #[serde(default)]
    pub input_key: Option<String>,
    /// For structured configs: `LAX` (default; a missing input is null) or `STRICT` (refused).
    #[serde(default)]
    pub input_values_validation: Option<String>,
}

/// A change to a deployment: a new derived config is built and pushed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeploymentUpdate {
    /// Another config.
    #[serde(default)]
    pub config_id: Option<String>,
    /// New input values (replace the old ones).
    #[serde(default)]
    pub input_values: Option<Map<String, Value>>,
    /// The action, e.g. `UPDATE` (default) or `DELETE`.
    #[serde(default)]
    pub action: Option<String>,
}

/// A change to a deployment group, made in place (Heat's group update): the servers it keeps
/// run the action (`UPDATE` by default) with the new config and inputs, the servers it gains
/// run `CREATE`, as the rollout allows; the servers it loses leave it (their deployments are
/// the caller's to delete).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeploymentGroupUpdate {
    /// Another config.
    #[serde(default)]
    pub config_id: Option<String>,
    /// New input values (replace the old ones).
    #[serde(default)]
    pub input_values: Option<Map<String, Value>>,
    /// The servers from now on (default: the same).
    #[serde(default)]
    pub servers: Option<Vec<String>>,
    /// The action of the servers it keeps: `UPDATE` (default), `SUSPEND`, `RESUME`.
    #[serde(default)]
    pub action: Option<String>,
    /// How this change rolls out (default: as the group's last did).
    #[serde(default)]
    pub rollout: Option<super::types::Rollout>,
}

/// A deployment as the master records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SoftwareDeployment {
    /// Id (a UUID).
    pub id: String,
    /// The config deployed.
    pub config_id: String,
    /// The minion id.
    pub server_id: String,
    /// Input values as given.
    pub input_values: Map<String, Value>,
    /// Declared outputs received, plus `deploy_stdout`, `deploy_stderr`, `deploy_status_code`.
    pub output_values: Map<String, Value>,
    /// The current action.
    pub action: String,
    /// `IN_PROGRESS`, `COMPLETE` or `FAILED`.
    pub status: String,
    /// Why, in Heat's words.
    pub status_reason: String,
    /// The derived config applied for the current action.
    pub derived_config_id: String,
    /// ISO 8601 UTC.
    pub creation_time: String,
    /// ISO 8601 UTC of the last change.
    pub updated_time: Option<String>,
}

/// One config deployed to several servers, rolled out (Heat's `SoftwareDeploymentGroup`): each
/// server gets a deployment of its own, started as the group's rollout allows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewDeploymentGroup {
    /// The config to apply.
    pub config_id: String,
    /// The servers' minion ids (they need not have connected yet); rolled out in id order.
    pub servers: Vec<String>,
    /// Input values by name, the same for every server.
    #[serde(default)]
    pub input_values: Map<String, Value>,
    /// `CREATE` (default), `UPDATE`, `DELETE`, `SUSPEND` or `RESUME`.
    #[serde(default)]
    pub action: Option<String>,
    /// Heat's stack path, passed as `deploy_stack_id`.
    #[serde(default)]
    pub stack_id: String,
    /// Heat's resource name, passed as `deploy_resource_name`.
    #[serde(default)]
    pub resource_name: String,
    /// Seconds each server's hook may run (default: the master's `deployment_timeout_secs`).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// How the deployments start over time (a window, an error budget, canaries, abort
    /// events); absent: all at once. A failed deployment is a failure.
    #[serde(default)]
    pub rollout: Option<super::types::Rollout>,
}

/// One server of a deployment group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupMember {
    /// The server's minion id.
    pub server_id: String,
    /// Its deployment, once started.
    #[serde(default)]
    pub deployment_id: Option<String>,
    /// `QUEUED` (not started yet), `IN_PROGRESS`, `COMPLETE`, `FAILED`, or `SKIPPED` (the
    /// rollout stopped before starting it).
    pub status: String,
}

/// A deployment group and where it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeploymentGroup {
    /// Id (a UUID).
    pub id: String,
    /// The config deployed.
    pub config_id: String,
    /// The action.
    pub action: String,
    /// `IN_PROGRESS` until every server is final; then `COMPLETE` if every deployment
    /// completed, else `FAILED`.
    pub status: String,
    /// Why, in Heat's words.
    pub status_reason: String,
    /// Its rollout and where it is.
    pub rollout: super::types::RolloutStatus,
    /// Every server, in id order.
    pub members: Vec<GroupMember>,
    /// ISO 8601 UTC.
    pub creation_time: String,
}

/// Deployment statuses.
pub mod status {
    /// Waiting for the server's signal.
    pub const IN_PROGRESS: &str = "IN_PROGRESS";
    /// Signalled success.
    pub const COMPLETE: &str = "COMPLETE";
    /// Signalled failure, or could not be applied.
    pub const FAILED: &str = "FAILED";
    /// A group's server whose deployment has not started yet.
    pub const QUEUED: &str = "QUEUED";
    /// A group's server whose deployment never started: the rollout stopped first.
    pub const SKIPPED: &str = "SKIPPED";
}
