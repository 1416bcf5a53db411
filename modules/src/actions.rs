//! Local custom actions: higher-level functions an image defines in TOML files
//! (`/etc/halite/actions.d/*.toml`), which a master can name but never define.
//!
//! ```toml
//! name = "mysql.create_user"
//! doc = "Creates a MySQL user."
//! command = ["/usr/local/lib/halite/mysql-create-user"]
//! timeout = 30          # seconds (default 60)
//! user = "mysql"        # optional
//! positional = ["name"]
//!
//! [args.name]
//! type = "string"       # string, int, bool, list or map
//! required = true
//! pattern = "^[a-z_][a-z0-9_]{0,31}$"
//! max_length = 32
//! doc = "User name."
//!
//! [args.admin]
//! type = "bool"
//! default = false
//! ```
//!
//! The command receives the validated arguments as one JSON object on stdin and must print a
//! JSON value on stdout; a non-zero exit fails the job with its stderr.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use halite_protocol::message::Value;
use regex_lite::Regex;
use serde::Deserialize;
use serde_json::json;

use crate::function::{CallFuture, Function};
use crate::{valid_name, Args, Command, Context, ModuleError, Output, Registry};

/// Argument types an action can declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgType {
    /// `string`.
    String,
    /// `int`.
    Int,
    /// `bool`.
    Bool,
    /// `list`.
    List,
    /// `map`.
    Map,
}

impl ArgType {
    fn json_type(self) -> &'static str {
        match self {
            ArgType::String => "string",
            ArgType::Int => "integer",
            ArgType::Bool => "boolean",
            ArgType::List => "array",
            ArgType::Map => "object",
        }
    }

    fn accepts(self, value: &Value) -> bool {
        match self {
            ArgType::String => value.is_string(),
            ArgType::Int => value.is_i64() || value.is_u64(),
            ArgType::Bool => value.is_boolean(),
            ArgType::List => value.is_array(),
            ArgType::Map => value.is_object(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArgSpec {
    #[serde(rename = "type")]
    kind: ArgType,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    default: Option<Value>,
    /// A regular expression (`regex-lite` syntax: the `regex` crate's, without Unicode
    /// classes) a string argument must match.
    #[serde(default)]
    pattern: Option<String>,
    #[serde(default)]
    max_length: Option<usize>,
    #[serde(default)]
    doc: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Definition {
    name: String,
    doc: String,
    command: Vec<String>,
    #[serde(default = "default_timeout")]
    timeout: f64,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    positional: Vec<String>,
    #[serde(default)]
    args: BTreeMap<String, ArgSpec>,
}

fn default_timeout() -> f64 {
    60.0
}

/// Why an action definition was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    /// Not TOML, or not the shape of a definition.
    #[error("{}", .0.to_string().trim_end())]
    Toml(toml::de::Error),
    /// The name is not `module.function`.
    #[error("name {0:?} must look like module.function (^[a-z]+\\.[a-z_]+$)")]
    Name(String),
    /// The command is empty or not an absolute path.
    #[error("command must be a list starting with an absolute path")]
    Command,
    /// The timeout is not a positive number.
    #[error("timeout must be a positive number of seconds")]
    Timeout,
    /// A positional argument is not declared.
    #[error("positional argument {0:?} is not declared under [args]")]
    Positional(String),
    /// An argument's default is not of its type.
    #[error("args.{arg}: default does not have type {kind:?}")]
    Default {
        /// The argument.
        arg: String,
        /// Its declared type.
        kind: ArgType,
    },
    /// A pattern on an argument that is not a string.
    #[error("args.{0}: pattern applies to strings only")]
    PatternType(String),
    /// A pattern that is not a regular expression.
    #[error("args.{arg}: bad pattern: {source}")]
    Pattern {
        /// The argument.
        arg: String,
        /// Why.
        source: Box<regex_lite::Error>,
    },
}

/// A loaded action.
#[derive(Debug)]
pub struct Action {
    definition: Definition,
    patterns: BTreeMap<String, Regex>,
}

impl Action {
    /// Parses and checks a definition; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Action, ActionError> {
        let definition: Definition = toml::from_str(text).map_err(ActionError::Toml)?;
        if !valid_name(&definition.name) {
            return Err(ActionError::Name(definition.name));
        }
        if definition.command.is_empty() || !definition.command[0].starts_with('/') {
            return Err(ActionError::Command);
        }
        if !(definition.timeout > 0.0 && definition.timeout.is_finite()) {
            return Err(ActionError::Timeout);
        }
        if let Some(p) = definition.positional.iter().find(|p| !definition.args.contains_key(*p)) {
            return Err(ActionError::Positional(p.clone()));
        }
        let mut patterns = BTreeMap::new();
        for (name, spec) in &definition.args {
            if let Some(default) = &spec.default {
                if !spec.kind.accepts(default) {
                    return Err(ActionError::Default { arg: name.clone(), kind: spec.kind });
                }
            }
            if let Some(pattern) = &spec.pattern {
                if spec.kind != ArgType::String {
                    return Err(ActionError::PatternType(name.clone()));
                }
                let re = Regex::new(pattern)
                    .map_err(|source| ActionError::Pattern { arg: name.clone(), source: Box::new(source) })?;
                patterns.insert(name.clone(), re);
            }
        }
        Ok(Action { definition, patterns })
    }

    fn validate(
        &self,
        mut values: serde_json::Map<String, Value>,
    ) -> Result<serde_json::Map<String, Value>, ModuleError> {
        let bad = |msg: String| Err(ModuleError::BadArguments(msg));
        if let Some(unknown) = values.keys().find(|k| !self.definition.args.contains_key(*k)) {
            let known: Vec<&str> = self.definition.args.keys().map(String::as_str).collect();
            return bad(format!("unknown argument `{unknown}`, expected one of {}", known.join(", ")));
        }
        for (name, spec) in &self.definition.args {
            let Some(value) = values.get(name) else {
                match (&spec.default, spec.required) {
                    (Some(default), _) => {
                        values.insert(name.clone(), default.clone());
                        continue;
                    }
                    (None, true) => return bad(format!("missing argument `{name}`")),
                    (None, false) => continue,
                }
            };
            if !spec.kind.accepts(value) {
                return bad(format!("argument `{name}` must be a {}", spec.kind.json_type()));
            }
            let length = match value {
                Value::String(s) => Some(s.chars().count()),
                Value::Array(a) => Some(a.len()),
                _ => None,
            };
            if let (Some(max), Some(length)) = (spec.max_length, length) {
                if length > max {
                    return bad(format!("argument `{name}` is longer than {max}"));
                }
            }
            if let (Some(re), Some(text)) = (self.patterns.get(name), value.as_str()) {
                if !re.is_match(text) {
                    return bad(format!("argument `{name}` does not match {}", re.as_str()));
                }
            }
        }
        Ok(values)
    }
}

impl Function for Action {
    fn name(&self) -> &str {
        &self.definition.name
    }

    fn doc(&self) -> &str {
        &self.definition.doc
    }

    fn schema(&self) -> Value {
        let properties: serde_json::Map<String, Value> = self
            .definition
            .args
            .iter()
            .map(|(name, spec)| {
                let mut property = json!({ "type": spec.kind.json_type(), "description": spec.doc });
                if let Some(pattern) = &spec.pattern {
                    property["pattern"] = json!(pattern);
                }
                if let Some(max) = spec.max_length {
                    property[if spec.kind == ArgType::List { "maxItems" } else { "maxLength" }] = json!(max);
                }
                if let Some(default) = &spec.default {
                    property["default"] = default.clone();
                }
                (name.clone(), property)
            })
            .collect();
        let required: Vec<&String> = self.definition.args.iter().filter(|(_, s)| s.required).map(|(n, _)| n).collect();
        json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
    }

    fn positional(&self) -> Vec<String> {
        self.definition.positional.clone()
    }

    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            let values = self.validate(args.to_object(&self.definition.positional)?)?;
            if cx.test {
                return Ok(Output::ok(json!({ "would_run": self.definition.command, "input": values })));
            }
            let command = Command {
                argv: self.definition.command.clone(),
                stdin: Some(serde_json::to_vec(&values).unwrap_or_default()),
                user: self.definition.user.clone(),
                timeout: Some(Duration::from_secs_f64(self.definition.timeout)),
                ..Command::default()
            };
            let done = cx.runner.run(&command).await?;
            if done.retcode != 0 {
                return Err(ModuleError::Failed(format!(
                    "{} exited {}: {}",
                    self.definition.name,
                    done.retcode,
                    done.stderr.trim()
                )));
            }
            let value: Value = serde_json::from_str(done.stdout.trim()).map_err(|e| {
                ModuleError::Failed(format!("{} printed something that is not JSON: {e}", self.definition.name))
            })?;
            Ok(Output { value, retcode: 0, truncated: done.truncated })
        })
    }
}

/// Loads every `*.toml` in `dir` into `registry`. Returns one message per definition that was
/// skipped (unreadable, invalid, or clashing with an existing name); a missing directory is
/// not a problem.
pub fn load_into(registry: &mut Registry, dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    let mut problems = Vec::new();
    for path in paths {
        let mut load = || -> Result<(), Box<dyn std::error::Error>> {
            let text = std::fs::read_to_string(&path)?;
            registry.add_action(Box::new(Action::parse(&text)?))?;
            Ok(())
        };
        if let Err(problem) = load() {
            problems.push(format!("{}: {problem}", path.display()));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFINITION: &str = r#"
name = "demo.greet"
doc = "Greets someone."
command = ["/bin/sh", "-c", "read input; printf '{\"got\": %s}' \"$input\""]
positional = ["who"]

[args.who]
type = "string"
required = true
pattern = "^[a-z]+$"
max_length = 8
doc = "Whom to greet."

[args.loud]
type = "bool"
default = false
"#;

    fn call(action: &Action, args: Args) -> Result<Output, ModuleError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(action.call(args, &Context::default()))
    }

    #[test]
    fn an_action_gets_validated_json_on_stdin_and_returns_json() {
        let action = Action::parse(DEFINITION).unwrap();
        let out = call(&action, Args::from_cli(&["bob"])).unwrap();
        assert_eq!(out.value, json!({"got": {"who": "bob", "loud": false}}));
        assert_eq!(action.schema()["properties"]["who"]["pattern"], "^[a-z]+$");
    }

    #[test]
    fn arguments_are_checked_against_the_definition() {
        let action = Action::parse(DEFINITION).unwrap();
        let err = |words: &[&str]| call(&action, Args::from_cli(words)).unwrap_err().to_string();
        assert!(err(&[]).contains("missing argument `who`"));
        assert!(err(&["Bob"]).contains("does not match"));
        assert!(err(&["abcdefghij"]).contains("longer than 8"));
        assert!(err(&["bob", "loud=yes"]).contains("must be a boolean"));
        assert!(err(&["bob", "lod=true"]).contains("unknown argument `lod`"));
    }

    #[test]
    fn bad_definitions_are_reported_and_skipped() {
        for (text, expected) in [
            ("name = \"Bad\"\ndoc = \"x\"\ncommand = [\"/bin/true\"]", "module.function"),
            ("name = \"a.b\"\ndoc = \"x\"\ncommand = [\"true\"]", "absolute path"),
            ("name = \"a.b\"\ndoc = \"x\"\ncommand = [\"/bin/true\"]\npositional = [\"z\"]", "not declared"),
            ("name = \"a.b\"\ndoc = \"x\"\ncommand = [\"/bin/true\"]\n[args.x]\ntype = \"float\"", "float"),
            (
                "name = \"a.b\"\ndoc = \"x\"\ncommand = [\"/bin/true\"]\n[args.x]\ntype = \"string\"\npattern = \"(\"",
                "bad pattern",
            ),
            ("name = \"a.b\"\ncommand = [\"/bin/true\"]", "doc"),
        ] {
            let err = Action::parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        let dir = std::env::temp_dir().join(format!("halite-actions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("good.toml"), DEFINITION).unwrap();
        std::fs::write(dir.join("bad.toml"), "name = 1").unwrap();
        std::fs::write(dir.join("clash.toml"), "name = \"test.ping\"\ndoc = \"x\"\ncommand = [\"/bin/true\"]").unwrap();
        let mut registry = Registry::standard();
        let problems = load_into(&mut registry, &dir);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(registry.get("demo.greet").is_some());
        assert!(registry.is_action("demo.greet"));
        assert!(!registry.is_action("test.ping"));
    }
}
