//! The built-in `script` hook: heat-agents' `hook-script.py`, observable behaviour for
//! observable behaviour, minus its crashes.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::item::Item;
use super::{python, DeploySettings};
use crate::{Command, Context, ModuleError};

/// Bytes kept of stdout, of stderr and of each output file.
pub(crate) const CAPTURE_CAP: usize = 16 * 1024 * 1024;

/// An input as the script's environment variable: its text; maps and lists, and a declared
/// `Json` input's null, as JSON text (heat-agents crashes on that null); other values as
/// Python's `str()` writes them; a missing value as the empty string.
pub(crate) fn env_value(input: &super::item::Input) -> String {
    match &input.value {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v @ (Value::Object(_) | Value::Array(_))) => python::json_dumps(v),
        Some(Value::Null) if input.json => "null".to_owned(),
        Some(other) => python::str_of(other),
    }
}

/// Runs the item's script and returns the signal: the declared outputs that were written, then
/// `deploy_stdout`, `deploy_stderr` and `deploy_status_code`.
pub(crate) async fn run(
    item: &Item,
    settings: &DeploySettings,
    timeout: Option<Duration>,
    cx: &Context,
) -> Result<Map<String, Value>, ModuleError> {
    let working = &settings.script_working_dir;
    let outputs = &settings.script_outputs_dir;
    prepare_dir(outputs)?;
    prepare_dir(working)?;
    let script = match item.raw.get("config") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err(ModuleError::Failed("the script hook needs the config to be a string".into())),
    };
    let path = working.join(&item.id);
    super::write_synced(&path, script.as_bytes(), 0o700)?;
    let outputs_path = outputs.join(&item.id);

    let mut env = std::collections::BTreeMap::new();
    for input in &item.inputs {
        let text = env_value(input);
        if text.contains('\0') {
            return Ok(failed(format!(
                "halite: input {} contains a NUL byte and cannot be passed to the script",
                input.name
            )));
        }
        env.insert(input.name.clone(), text);
    }
    env.insert("heat_outputs_path".into(), outputs_path.display().to_string());

    if let Some(problem) = exec_problem(&path, &script) {
        return Ok(failed(problem));
    }
    // Run through its interpreter, never executed itself: no ETXTBSY from a descriptor another
    // job's fork still holds (see `shebang`).
    let argv = crate::shebang::interpreted(&path, &script).unwrap_or_else(|| vec![path.display().to_string()]);
    let command = Command { argv, cwd: Some(working.clone()), env, output_cap: CAPTURE_CAP, ..Command::default() };
    let finished = match super::run_within(&command, timeout, cx).await {
        Some(Ok(done)) => done,
        Some(Err(error)) => return Ok(failed(format!("halite: {error}"))),
        None => {
            let limit = timeout.unwrap_or_default().as_secs_f64();
            let mut signal = Map::new();
            signal.insert("deploy_stdout".into(), json!(""));
            signal.insert(
                "deploy_stderr".into(),
                json!(format!("halite: the script timed out after {limit} s and was killed")),
            );
            signal.insert("deploy_status_code".into(), json!(-9));
            return Ok(signal);
        }
    };

    let mut signal = Map::new();
    let mut notes = Vec::new();
    for name in &item.output_names {
        let file = outputs.join(format!("{}.{name}", item.id));
        match read_output(&file) {
            Ok(Some((text, note))) => {
                signal.insert(name.clone(), Value::String(text));
                notes.extend(note.map(|n| format!("halite: output {name}: {n}")));
            }
            Ok(None) => {}
            Err(error) => notes.push(format!("halite: output {name}: cannot read {}: {error}", file.display())),
        }
    }
    let mut stderr = finished.stderr;
    if finished.truncated {
        notes.push(format!("halite: stdout or stderr was cut at {CAPTURE_CAP} bytes"));
    }
    for note in notes {
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(&note);
        stderr.push('\n');
    }
    let code = finished.signal.map_or(finished.retcode, |sig| -sig);
    signal.insert("deploy_stdout".into(), Value::String(finished.stdout));
    signal.insert("deploy_stderr".into(), Value::String(stderr));
    signal.insert("deploy_status_code".into(), json!(code));
    Ok(signal)
}

/// The signal of a script that could not be started: status 1, as heat-agents reports it,
/// with the reason in stderr instead of a Python traceback.
fn failed(why: String) -> Map<String, Value> {
    let mut signal = Map::new();
    signal.insert("deploy_stdout".into(), json!(""));
    signal.insert("deploy_stderr".into(), json!(why + "\n"));
    signal.insert("deploy_status_code".into(), json!(1));
    signal
}

pub(crate) fn prepare_dir(path: &Path) -> Result<(), ModuleError> {
    if path.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| ModuleError::Failed(format!("cannot create {}: {e}", path.display())))
}

/// Why the kernel would refuse to execute the script, worded for a person: heat-agents shows
/// a traceback (or, for CRLF scripts, wrongly says the script is missing).
fn exec_problem(path: &Path, script: &str) -> Option<String> {
    let Some(rest) = script.strip_prefix("#!") else {
        return Some(format!(
            "halite: cannot execute {}: the script does not start with a #! line naming its interpreter",
            path.display()
        ));
    };
    let line = rest.split('\n').next().unwrap_or_default();
    let interpreter = line.trim_start_matches([' ', '\t']).split([' ', '\t']).next().unwrap_or_default();
    if interpreter.ends_with('\r') {
        return Some(format!(
            "halite: cannot execute {}: the script has Windows (CRLF) line endings, so its interpreter {:?} does not exist",
            path.display(),
            interpreter
        ));
    }
    if interpreter.is_empty() || !Path::new(interpreter).exists() {
        return Some(format!("halite: cannot execute {}: interpreter {interpreter:?} not found", path.display()));
    }
    None
}

/// An output file as Python's text mode reads it: universal newlines, invalid UTF-8 replaced
/// (with a note, where heat-agents crashes). `None` when the file does not exist.
fn read_output(path: &Path) -> std::io::Result<Option<(String, Option<String>)>> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, CAPTURE_CAP as u64 + 1), &mut bytes)?;
    let mut notes = Vec::new();
    if bytes.len() > CAPTURE_CAP {
        bytes.truncate(CAPTURE_CAP);
        notes.push(format!("cut at {CAPTURE_CAP} bytes"));
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            notes.push("not valid UTF-8; invalid bytes were replaced with U+FFFD".into());
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }
    };
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    Ok(Some((text, (!notes.is_empty()).then(|| notes.join("; ")))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functions::deploy::item::Input;
    use serde_json::json;

    fn input(value: Option<Value>, json: bool) -> Input {
        Input { name: "x".into(), value, json }
    }

    #[test]
    fn inputs_reach_the_script_as_heat_writes_them_and_a_json_null_as_null() {
        assert_eq!(env_value(&input(Some(json!(null)), true)), "null");
        assert_eq!(env_value(&input(Some(json!(null)), false)), "None");
        assert_eq!(env_value(&input(Some(json!({"a": 1})), true)), r#"{"a": 1}"#);
        assert_eq!(env_value(&input(Some(json!(true)), false)), "True");
        assert_eq!(env_value(&input(None, true)), "");
    }
}
