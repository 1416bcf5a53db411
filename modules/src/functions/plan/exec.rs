//! Runs a plan's steps in order: requisites, guards and tags decide which run; each call goes
//! through the dispatcher, so the minion's policy and the job's reach hold for every step.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Value};

use super::step::Placed;
use crate::{Args, Command, Context, ModuleError, Output};

/// How one step ended.
struct Outcome {
    succeeded: bool,
    changed: bool,
}

/// Runs `steps` (already checked), only those carrying one of `tags` when given. The result
/// lists every step: `result` (succeeded, failed, skipped), `changed`, `comment` (one line),
/// `duration_ms`, and the step's `return` or `error`, or why it was `skipped`.
pub(crate) async fn run(steps: &[Placed], tags: Option<&[String]>, cx: &Context) -> Result<Output, ModuleError> {
    let dispatcher = cx.dispatcher.as_ref().ok_or_else(|| ModuleError::Failed("no registry in this context".into()))?;
    let started = Instant::now();
    let mut outcomes: BTreeMap<&str, Outcome> = BTreeMap::new();
    let mut report = Vec::with_capacity(steps.len());
    let (mut failed, mut skipped) = (0, 0);
    for placed in steps {
        let step = &placed.step;
        let skip = |reason: String| {
            json!({ "id": step.id, "function": step.function, "result": "skipped", "changed": false,
                    "comment": reason, "reason": reason, "duration_ms": 0 })
        };
        let selected = tags.is_none_or(|tags| step.tags.iter().any(|t| tags.contains(t)));
        let reason = if !selected {
            Some("not selected by tags".to_owned())
        } else if let Some(bad) = step.require.iter().find(|r| outcomes.get(r.as_str()).is_none_or(|o| !o.succeeded)) {
            Some(format!("required step {bad} did not succeed"))
        } else if !step.onchanges.is_empty()
            && !step.onchanges.iter().any(|r| outcomes.get(r.as_str()).is_some_and(|o| o.changed))
        {
            Some(format!("no changes in {}", step.onchanges.join(", ")))
        } else {
            guard(cx, placed).await?
        };
        if let Some(reason) = reason {
            report.push(skip(reason));
            skipped += 1;
            continue;
        }
        let began = Instant::now();
        let result = dispatcher.call(&step.function, Args::new(step.args.clone(), step.kwargs.clone()), cx).await;
        let duration_ms = began.elapsed().as_millis() as u64;
        let (outcome, entry) = match result {
            Ok(output) => {
                let succeeded = output.retcode == 0;
                let changed = output.value.get("changed").and_then(Value::as_bool).unwrap_or(false);
                let entry = json!({ "id": step.id, "function": step.function,
                                    "result": if succeeded { "succeeded" } else { "failed" }, "changed": changed,
                                    "comment": comment(&output.value), "duration_ms": duration_ms,
                                    "return": output.value });
                (Outcome { succeeded, changed }, entry)
            }
            Err(error) => {
                let error = error.to_string();
                let entry = json!({ "id": step.id, "function": step.function, "result": "failed", "changed": false,
                                    "comment": first_line(&error), "duration_ms": duration_ms, "error": error });
                (Outcome { succeeded: false, changed: false }, entry)
            }
        };
        if !outcome.succeeded {
            failed += 1;
        }
        outcomes.insert(&step.id, outcome);
        report.push(entry);
    }
    let changed = outcomes.values().any(|o| o.changed);
    let succeeded = outcomes.values().filter(|o| o.succeeded).count();
    let value = json!({ "changed": changed, "test": cx.test, "steps": report, "succeeded": succeeded,
                        "failed": failed, "skipped": skipped, "total": steps.len(),
                        "duration_ms": started.elapsed().as_millis() as u64 });
    Ok(Output { value, retcode: i32::from(failed > 0), truncated: false })
}

/// A step's result in one line: its `comment` when it has one (state-changing functions), else
/// the first line of what it printed or returned.
fn comment(value: &Value) -> String {
    let text = match value {
        // cmd.run with test=true says what it would run.
        Value::Object(map) if map.get("would_run").is_some_and(Value::is_array) => {
            let argv: Vec<String> = map["would_run"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect();
            format!("would run {}", argv.join(" "))
        }
        Value::Object(map) => ["comment", "stdout", "stderr", "error"]
            .iter()
            .filter_map(|key| map.get(*key).and_then(Value::as_str))
            .find(|text| !text.trim().is_empty())
            .map(str::to_owned)
            .unwrap_or_default(),
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    first_line(&text)
}

/// The first non-blank line of `text`, at most 200 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// Runs `onlyif`/`unless`; `Some(reason)` to skip. Guards are shell commands, so they need
/// `cmd.run` to be allowed: a plan cannot reach a shell the policy forbids.
async fn guard(cx: &Context, placed: &Placed) -> Result<Option<String>, ModuleError> {
    let step = &placed.step;
    for (command, wanted_success, word) in [(&step.onlyif, true, "onlyif"), (&step.unless, false, "unless")] {
        let Some(command) = command else { continue };
        if !cfg!(feature = "cmd") {
            // A minion built without cmd.* runs no shell, not even for a guard.
            return Err(ModuleError::Denied(format!(
                "{} {word}: guards are shell commands, and this minion is built without cmd.*",
                placed.name()
            )));
        }
        if let Some(dispatcher) = &cx.dispatcher {
            dispatcher
                .permit("cmd.run", cx)
                .map_err(|e| ModuleError::Denied(format!("{} {word}: {e}", placed.name())))?;
        }
        let done = cx.runner.run(&Command::new(&["/bin/sh", "-c", command.as_str()])).await?;
        if (done.retcode == 0) != wanted_success {
            return Ok(Some(format!("{word} command {}", if wanted_success { "failed" } else { "succeeded" })));
        }
    }
    Ok(None)
}
