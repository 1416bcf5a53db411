//! The top file: which plans each minion runs, as Salt's `top.sls`. A mapping, in the file's
//! order, of target expressions to lists of plan names:
//!
//! ```yaml
//! '*': [common]
//! 'web*': [nginx, app]
//! 'G@role:db': [postgres]
//! ```
//!
//! The minion reads it and picks the entries that match itself, as Salt's minion does. It
//! matches a glob on its id, `L@id1,id2` and `G@grain:glob` (nested grains as `G@a:b:glob`),
//! with the master's rules for each (the same glob, and the same reading of list and number
//! grains). Compound expressions, `E@`, `S@` and nodegroups are refused with the line they are
//! on rather than matched differently from the master: the master's matcher brings a regular
//! expression engine that would grow the minion by a quarter (docs/operations.md).

use std::collections::BTreeMap;

use halite_protocol::glob;
use halite_protocol::message::Value;

use super::document::{Marked, Node};
use super::step::at;
use crate::ModuleError;

/// One entry of a top file: the target and its plans.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    target: Target,
    plans: Vec<String>,
}

/// A target the minion can match itself against.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    /// A glob on the id.
    Glob(String),
    /// Exact ids.
    List(Vec<String>),
    /// A glob on a grain's value (a list grain matches when one of its items does).
    Grain { path: Vec<String>, pattern: String },
}

/// Why a top file's target is refused; each but `Empty` carries the expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum TargetError {
    #[error("an empty target")]
    Empty,
    #[error("{0:?}: compound targets are not matched on the minion; give one glob, L@ or G@ target per entry")]
    Compound(String),
    #[error("{0:?}: no ids in the list")]
    NoIds(String),
    #[error("{0:?}: a grain target is G@key:glob")]
    GrainShape(String),
    #[error("{0:?}: only glob, L@ and G@ targets are matched on the minion")]
    Kind(String),
    #[error("{0:?}: no minion id has a ':'; a grain target is written G@{0}")]
    Colon(String),
}

impl Target {
    fn parse(expr: &str) -> Result<Target, TargetError> {
        let expr = expr.trim();
        let refused = |why: fn(String) -> TargetError| Err(why(expr.to_owned()));
        if expr.is_empty() {
            return Err(TargetError::Empty);
        }
        if expr.split_whitespace().count() > 1 || expr.contains(['(', ')']) {
            return refused(TargetError::Compound);
        }
        if let Some(ids) = expr.strip_prefix("L@") {
            let ids: Vec<String> = ids.split(',').filter(|id| !id.is_empty()).map(str::to_owned).collect();
            return if ids.is_empty() { refused(TargetError::NoIds) } else { Ok(Target::List(ids)) };
        }
        if let Some(grain) = expr.strip_prefix("G@") {
            let Some((path, pattern)) = grain.rsplit_once(':') else { return refused(TargetError::GrainShape) };
            let path: Vec<String> = path.split(':').map(str::to_owned).collect();
            if path.iter().any(String::is_empty) {
                return refused(TargetError::GrainShape);
            }
            return Ok(Target::Grain { path, pattern: pattern.to_owned() });
        }
        if expr.get(1..2) == Some("@") {
            return refused(TargetError::Kind);
        }
        if expr.contains(':') {
            // An id has no ':'; `os:Debian` is a grain target written without its G@.
            return refused(TargetError::Colon);
        }
        Ok(Target::Glob(expr.to_owned()))
    }

    fn matches(&self, id: &str, grains: &BTreeMap<String, Value>) -> bool {
        match self {
            Target::Glob(pattern) => glob::matches(pattern, id),
            Target::List(ids) => ids.iter().any(|listed| listed == id),
            Target::Grain { path, pattern } => {
                let mut value = path.first().and_then(|first| grains.get(first));
                for key in path.iter().skip(1) {
                    value = value.and_then(|v| v.get(key));
                }
                value.is_some_and(|v| grain_matches(v, pattern))
            }
        }
    }
}

/// Salt's rule for a grain's value (as the master's `G@` has it, halite-targeting): the value
/// as Python prints it (`True`, `None`, `4`) and the pattern, both lower-cased, by glob; a list
/// by any of its items; a mapping by one of its keys.
fn grain_matches(value: &Value, pattern: &str) -> bool {
    let folded = |text: &str| glob::matches(&pattern.to_lowercase(), &text.to_lowercase());
    match value {
        Value::String(text) => folded(text),
        Value::Array(items) => items.iter().any(|item| grain_matches(item, pattern)),
        Value::Object(map) => pattern == "*" || map.contains_key(pattern),
        Value::Null => folded("None"),
        Value::Bool(true) => folded("True"),
        Value::Bool(false) => folded("False"),
        other => folded(&other.to_string()),
    }
}

/// The entries of the top file `file`, in its order; every error names the line.
pub(crate) fn entries(document: Marked, file: &str) -> Result<Vec<Entry>, ModuleError> {
    let entries = match document.node {
        Node::Map(entries) => entries,
        // An empty file assigns nothing.
        Node::Scalar(Value::Null) => Vec::new(),
        _ => {
            return Err(at(
                file,
                document.line,
                format!("a top file maps targets to lists of plans, not {}", document.kind()),
            ))
        }
    };
    entries
        .into_iter()
        .map(|(expr, line, plans)| {
            let target = Target::parse(&expr).map_err(|why| at(file, line, why))?;
            let names = match plans.node {
                Node::List(items) => items,
                // `'web*': nginx`: one plan.
                Node::Scalar(Value::String(_)) => vec![plans],
                _ => return Err(at(file, plans.line, format!("{expr}: a list of plan names, not {}", plans.kind()))),
            };
            let plans = names
                .into_iter()
                .map(|name| match name.node {
                    Node::Scalar(Value::String(name)) => Ok(name),
                    _ => Err(at(file, name.line, format!("{expr}: a plan name is text, not {}", name.kind()))),
                })
                .collect::<Result<Vec<String>, ModuleError>>()?;
            Ok(Entry { target, plans })
        })
        .collect()
}

/// The plans the entries give minion `id` with `grains`: those of every matching entry, in
/// the file's order, each once.
pub(crate) fn plans_for(entries: &[Entry], id: &str, grains: &BTreeMap<String, Value>) -> Vec<String> {
    let mut plans: Vec<String> = Vec::new();
    for entry in entries.iter().filter(|e| e.target.matches(id, grains)) {
        for plan in &entry.plans {
            if !plans.contains(plan) {
                plans.push(plan.clone());
            }
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::super::document::{parse, Syntax};
    use super::*;
    use serde_json::json;

    fn top(text: &str) -> Result<Vec<Entry>, ModuleError> {
        entries(parse(text, Syntax::Yaml).unwrap(), "halite://top.yaml")
    }

    #[test]
    fn entries_match_in_file_order_and_each_plan_runs_once() {
        let entries =
            top("'*': [common]\n'web*':\n  - nginx\n  - common\n'L@db1,web2': app\n'G@roles:edge': [edge]\n").unwrap();
        let grains = BTreeMap::from([("roles".to_owned(), json!(["edge", "base"])), ("cpus".to_owned(), json!(4))]);
        assert_eq!(plans_for(&entries, "web1", &BTreeMap::new()), ["common", "nginx"]);
        assert_eq!(plans_for(&entries, "web2", &grains), ["common", "nginx", "app", "edge"]);
        assert_eq!(plans_for(&entries, "db1", &BTreeMap::new()), ["common", "app"]);
        let numbers = top("'G@cpus:4': [big]\n'G@net:eth0:10.*': [lan]\n").unwrap();
        let grains = BTreeMap::from([("cpus".to_owned(), json!(4)), ("net".to_owned(), json!({"eth0": "10.0.0.2"}))]);
        assert_eq!(plans_for(&numbers, "x", &grains), ["big", "lan"]);
        assert!(plans_for(&numbers, "x", &BTreeMap::new()).is_empty());
        assert!(top("").unwrap().is_empty(), "an empty top assigns nothing");
    }

    #[test]
    fn targets_the_minion_cannot_match_as_the_master_would_are_refused_with_their_line() {
        for (text, line, why) in [
            ("'*': [a]\n'web* and G@os:Debian': [b]\n", 2, "compound targets are not matched"),
            ("'*': [a]\n'E@web[0-9]': [b]\n", 2, "only glob, L@ and G@"),
            ("'os:Debian': [b]\n", 1, "written G@os:Debian"),
            ("'G@os': [b]\n", 1, "G@key:glob"),
            ("'web*':\n  - a\n  - [b]\n", 3, "a plan name is text, not a list"),
            ("'web*': 3\n", 1, "a list of plan names, not a number"),
            ("- a\n", 1, "not a list"),
        ] {
            let error = top(text).unwrap_err().to_string();
            assert!(error.starts_with(&format!("halite://top.yaml line {line}: ")), "{text:?}: {error}");
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }
}
