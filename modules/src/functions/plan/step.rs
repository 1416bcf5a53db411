//! A plan's steps: their fields, where each was written, and the checks a plan passes before
//! any step runs.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::document::{Marked, Node};
use crate::ModuleError;

/// One step of a plan.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Step {
    /// Unique name of the step.
    pub(crate) id: String,
    /// Function to call, e.g. `pkg.install`.
    pub(crate) function: String,
    /// Positional arguments.
    #[serde(default)]
    pub(crate) args: Vec<Value>,
    /// Keyword arguments.
    #[serde(default)]
    pub(crate) kwargs: BTreeMap<String, Value>,
    /// Earlier steps that must have succeeded.
    #[serde(default)]
    pub(crate) require: Vec<String>,
    /// Run only if one of these earlier steps changed something.
    #[serde(default)]
    pub(crate) onchanges: Vec<String>,
    /// Shell command that must exit 0 for the step to run (needs cmd.run allowed).
    #[serde(default)]
    pub(crate) onlyif: Option<String>,
    /// Shell command that must not exit 0 for the step to run (needs cmd.run allowed).
    #[serde(default)]
    pub(crate) unless: Option<String>,
    /// Tags for selecting steps.
    #[serde(default)]
    pub(crate) tags: Vec<String>,
}

/// A step and where it was written: `file line N` in errors. Inline steps have no file.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) step: Step,
    pub(crate) file: Option<String>,
    pub(crate) line: usize,
}

impl Placed {
    /// `step <id>` for an inline step, `<file> line <n>: step <id>` for one read from a file.
    pub(crate) fn name(&self) -> String {
        match &self.file {
            Some(file) => format!("{file} line {}: step {}", self.line, self.step.id),
            None => format!("step {}", self.step.id),
        }
    }
}

/// An error about a plan file: its name, the line, what is wrong.
pub(crate) fn at(file: &str, line: usize, what: impl std::fmt::Display) -> ModuleError {
    ModuleError::Failed(format!("{file} line {line}: {what}"))
}

/// The fields a step may have, from its schema (so the list cannot drift from the struct).
fn fields() -> Vec<String> {
    let schema = serde_json::to_value(schemars::schema_for!(Step)).unwrap_or_default();
    schema["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default()
}

/// The steps of a plan file (`steps:` with a list of steps), each with its line.
pub(crate) fn from_document(document: Marked, file: &str) -> Result<Vec<Placed>, ModuleError> {
    let Node::Map(entries) = document.node else {
        return Err(at(file, document.line, format!("a plan is a mapping with `steps`, not {}", document.kind())));
    };
    let mut steps = None;
    for (key, line, value) in entries {
        match key.as_str() {
            "steps" => steps = Some(value),
            _ => return Err(at(file, line, format!("unknown key `{key}` (a plan has only `steps`)"))),
        }
    }
    let Some(steps) = steps else { return Err(at(file, document.line, "no `steps` in the plan")) };
    let Node::List(items) = steps.node else {
        return Err(at(file, steps.line, format!("`steps` is a list of steps, not {}", steps.kind())));
    };
    let known = fields();
    items
        .into_iter()
        .map(|item| {
            let line = item.line;
            let Node::Map(entries) = &item.node else {
                return Err(at(file, line, format!("a step is a mapping, not {}", item.kind())));
            };
            if let Some((key, key_line, _)) = entries.iter().find(|(key, _, _)| !known.contains(key)) {
                return Err(at(file, *key_line, format!("unknown step field `{key}` (fields: {})", known.join(", "))));
            }
            let step = serde_json::from_value::<Step>(item.into_value()).map_err(|e| at(file, line, e))?;
            Ok(Placed { step, file: Some(file.to_owned()), line })
        })
        .collect()
}

/// Unique ids, requisites naming earlier steps, no plans inside plans.
pub(crate) fn check(steps: &[Placed]) -> Result<(), ModuleError> {
    let bad = |placed: &Placed, why: String| match &placed.file {
        Some(_) => ModuleError::Failed(format!("{}: {why}", placed.name())),
        None => ModuleError::BadArguments(format!("{}: {why}", placed.name())),
    };
    let mut seen = BTreeSet::new();
    for placed in steps {
        let step = &placed.step;
        if step.function.starts_with("plan.") {
            return Err(bad(placed, "plans cannot run plans".into()));
        }
        for requisite in step.require.iter().chain(&step.onchanges) {
            if !seen.contains(requisite) {
                return Err(bad(placed, format!("{requisite} is not an earlier step")));
            }
        }
        if !seen.insert(step.id.clone()) {
            return Err(bad(placed, format!("step id {} is used twice", step.id)));
        }
    }
    Ok(())
}

/// A plan's steps as parts of a larger run: ids become `<plan>:<id>`, and a requisite naming a
/// step of the same plan follows it (one naming `<other plan>:<id>` is left as it is).
pub(crate) fn qualify(plan: &str, steps: Vec<Placed>) -> Vec<Placed> {
    let own: BTreeSet<String> = steps.iter().map(|p| p.step.id.clone()).collect();
    let rename = |id: String| if own.contains(&id) { format!("{plan}:{id}") } else { id };
    steps
        .into_iter()
        .map(|mut placed| {
            let step = &mut placed.step;
            step.id = format!("{plan}:{}", step.id);
            step.require = std::mem::take(&mut step.require).into_iter().map(rename).collect();
            step.onchanges = std::mem::take(&mut step.onchanges).into_iter().map(rename).collect();
            placed
        })
        .collect()
}
