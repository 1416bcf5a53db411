//! heat-agents hooks installed on the image: found by group, fed the item on stdin, their
//! stdout JSON taken as the signal.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::item::Item;
use super::script::CAPTURE_CAP;
use crate::{Command, Context, ModuleError};

/// The hook for `group`: the group reduced to `[A-Za-z0-9_-]` (as heat-config does), looked
/// up in each directory in order.
pub(crate) fn find(group: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    let name = sanitized(group);
    if name.is_empty() {
        return None;
    }
    dirs.iter().map(|dir| dir.join(&name)).find(|path| path.exists())
}

/// A group as heat-config sanitises it before choosing any hook (the built-in `script` one
/// included): only `[A-Za-z0-9_-]` are kept, so `../script` is `script`.
pub(crate) fn sanitized(group: &str) -> String {
    group.chars().filter(|c| *c == '-' || *c == '_' || c.is_ascii_alphanumeric()).collect()
}

/// Runs a hook. Its stdout, when it is a JSON object, is the signal; otherwise (or when it
/// failed without one) the signal is the hook's own stdout, stderr and status.
pub(crate) async fn run(
    path: &Path,
    item: &Item,
    timeout: Option<Duration>,
    cx: &Context,
) -> Result<Map<String, Value>, ModuleError> {
    let command = Command {
        argv: vec![path.display().to_string()],
        stdin: Some(serde_json::to_vec(&item.raw).unwrap_or_default()),
        output_cap: CAPTURE_CAP,
        ..Command::default()
    };
    let finished = super::run_within(&command, timeout, cx).await.ok_or_else(|| {
        let limit = timeout.unwrap_or_default().as_secs_f64();
        ModuleError::Failed(format!("hook {} timed out after {limit} s and was killed", path.display()))
    })??;
    let code = finished.signal.map_or(finished.retcode, |sig| -sig);
    if !finished.stdout.is_empty() {
        if let Ok(Value::Object(signal)) = serde_json::from_str(&finished.stdout) {
            return Ok(signal);
        }
    } else if code == 0 {
        // heat-config signals an empty object when a successful hook prints nothing.
        return Ok(Map::new());
    }
    let mut signal = Map::new();
    signal.insert("deploy_stdout".into(), json!(finished.stdout));
    signal.insert("deploy_stderr".into(), json!(finished.stderr));
    signal.insert("deploy_status_code".into(), json!(code));
    Ok(signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_sanitised_before_any_hook_is_chosen() {
        assert_eq!(sanitized("../script"), "script");
        assert_eq!(sanitized("Heat::Ungrouped"), "HeatUngrouped");
        assert_eq!(sanitized("puppet-ng_2"), "puppet-ng_2");
        assert_eq!(sanitized("ansible\u{e9}"), "ansible", "only ASCII letters and digits, as heat-config's pattern");
    }
}
