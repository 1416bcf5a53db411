//! `deploy.apply`: applies one derived software config the way heat-agents' heat-config does
//! (de-duplicated by config id, hook chosen by group), so configs written for OpenStack Heat
//! run unchanged. The behaviour it matches, and where it deliberately differs, is in
//! `docs/engine-guide.md`.

mod hooks;
mod item;
mod python;
mod script;

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

pub(crate) use super::deploy_settings::DeploySettings;

use crate::{Command, Context, Finished, ModuleError, Output, Typed};
use item::Item;

/// `deploy.apply`.
pub(crate) struct Apply;

/// Arguments of `deploy.apply`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyArgs {
    /// The derived config: `{id, name, group, config, inputs, outputs, options, creation_time}`
    /// as Heat's per-server metadata lists it (the master builds it from a deployment).
    item: Value,
    /// Seconds after which the hook is killed (status -9); default from `[deploy]`, else none.
    #[serde(default)]
    timeout: Option<f64>,
}

/// The hook that applies an item.
enum Hook {
    /// The built-in script hook.
    Script,
    /// An executable found in a hooks directory.
    External(PathBuf),
}

impl Typed for Apply {
    const NAME: &'static str = "deploy.apply";
    const DOC: &'static str = "Applies a derived software config (the Heat contract) once per config id: the built-in \
`script` hook for group `script`, else the executable named after the group in the hooks directories. Returns the \
signal: declared outputs plus `deploy_stdout`, `deploy_stderr`, `deploy_status_code` (the return code). A config id \
already applied is not run again: its recorded signal is returned. An unknown group fails at once.";
    const POSITIONAL: &'static [&'static str] = &["item"];
    type Args = ApplyArgs;

    async fn run(&self, args: ApplyArgs, cx: &Context) -> Result<Output, ModuleError> {
        let settings = cx.dispatcher.as_ref().map(|d| d.deploy.clone()).unwrap_or_default();
        let timeout = match args.timeout {
            Some(secs) if secs > 0.0 && secs.is_finite() => Some(Duration::from_secs_f64(secs)),
            Some(_) => return Err(ModuleError::BadArguments("timeout must be a positive number of seconds".into())),
            None => (settings.default_timeout_secs > 0).then(|| Duration::from_secs(settings.default_timeout_secs)),
        };
        let mut item = Item::parse(args.item)?;
        let marker = settings.deployed_dir.join(format!("{}.json", item.id));
        let notify = settings.deployed_dir.join(format!("{}.notify.json", item.id));
        if marker.exists() {
            return previous_signal(&item.id, &marker, &notify);
        }
        if !item.resolve_component()? {
            let action = item.input("deploy_action").and_then(Value::as_str).unwrap_or_default().to_owned();
            return Err(ModuleError::Failed(format!("group component has no config for action {action:?}")));
        }
        // Sanitised first, as heat-config does for every hook: `../script` is the script hook.
        let hook = if hooks::sanitized(&item.group) == "script" {
            Hook::Script
        } else {
            match hooks::find(&item.group, &settings.hooks_dirs) {
                Some(path) => Hook::External(path),
                None => {
                    let searched: Vec<String> = settings.hooks_dirs.iter().map(|d| d.display().to_string()).collect();
                    return Err(ModuleError::Failed(format!(
                        "no hook for group {:?}: not the built-in script hook, and none in {}",
                        item.group,
                        searched.join(", ")
                    )));
                }
            }
        };
        if cx.test {
            return Ok(Output::change(
                true,
                format!("would apply config {} with the {} hook", item.id, item.group),
                Value::Null,
            ));
        }
        // Written before the hook runs: a config that fails, or is interrupted, never runs twice.
        script::prepare_dir(&settings.deployed_dir)?;
        write_synced(&marker, &serde_json::to_vec_pretty(&item.raw).unwrap_or_default(), 0o600)?;
        let signal = match hook {
            Hook::Script => script::run(&item, &settings, timeout, cx).await?,
            Hook::External(path) => hooks::run(&path, &item, timeout, cx).await?,
        };
        write_synced(&notify, &serde_json::to_vec_pretty(&signal).unwrap_or_default(), 0o600)?;
        Ok(signal_output(signal))
    }
}

/// The call's output: the signal, with its status code as the return code so a failed deploy
/// shows as failed to whoever ran it.
fn signal_output(signal: Map<String, Value>) -> Output {
    let code = match signal.get("deploy_status_code") {
        Some(Value::Number(n)) => n.as_i64().map_or(1, |c| i32::try_from(c).unwrap_or(1)),
        Some(Value::String(s)) if s != "0" && !s.is_empty() => 1,
        _ => 0,
    };
    Output { value: Value::Object(signal), retcode: code, truncated: false }
}

fn previous_signal(id: &str, marker: &Path, notify: &Path) -> Result<Output, ModuleError> {
    match std::fs::read(notify) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(Value::Object(signal)) => Ok(signal_output(signal)),
            _ => Err(ModuleError::Failed(format!(
                "config {id} was already applied; its signal {} is unreadable",
                notify.display()
            ))),
        },
        Err(_) => Err(ModuleError::Failed(format!(
            "config {id} was already applied but never finished (interrupted); it is not run again; remove {} to force",
            marker.display()
        ))),
    }
}

/// Writes a file with exactly `mode` (even if it existed with another) and syncs it.
pub(crate) fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ModuleError> {
    let fail = |e: std::io::Error| ModuleError::Failed(format!("cannot write {}: {e}", path.display()));
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path).map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(fail)
}

/// Runs a hook's process; `None` when `timeout` passed first (its process group is killed).
pub(crate) async fn run_within(
    command: &Command,
    timeout: Option<Duration>,
    cx: &Context,
) -> Option<Result<Finished, ModuleError>> {
    match timeout {
        Some(limit) => tokio::time::timeout(limit, cx.runner.run(command)).await.ok(),
        None => Some(cx.runner.run(command).await),
    }
}
