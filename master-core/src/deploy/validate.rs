//! Checks on what engines send, with messages naming the field.

use halite_protocol::message::{NewDeployment, NewSoftwareConfig, Value};

const TYPES: &[&str] = &["String", "Number", "CommaDelimitedList", "Json", "Boolean"];
const ACTIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "SUSPEND", "RESUME"];

/// A new config.
pub fn config(new: &NewSoftwareConfig) -> Result<(), Invalid> {
    if new.name.len() > 255 {
        return Err(Invalid::Name);
    }
    if new.group.is_empty() || new.group.len() > 255 {
        return Err(Invalid::Group);
    }
    if !matches!(new.config, Value::String(_) | Value::Object(_)) {
        return Err(Invalid::Config);
    }
    let mut seen = std::collections::HashSet::new();
    for input in &new.inputs {
        if input.name.is_empty() || input.name.contains(['=', '\0']) {
            return Err(Invalid::InputName(input.name.clone()));
        }
        if !seen.insert(input.name.as_str()) {
            return Err(Invalid::InputTwice(input.name.clone()));
        }
        if !TYPES.contains(&input.kind.as_str()) {
            return Err(Invalid::InputType { name: input.name.clone(), kind: input.kind.clone() });
        }
    }
    let mut seen = std::collections::HashSet::new();
    for output in &new.outputs {
        if output.name.is_empty() || output.name.contains(['/', '\0']) || output.name == "." || output.name == ".." {
            return Err(Invalid::OutputName(output.name.clone()));
        }
        if !seen.insert(output.name.as_str()) {
            return Err(Invalid::OutputTwice(output.name.clone()));
        }
    }
    Ok(())
}

/// A new or updated deployment.
pub fn deployment(spec: &NewDeployment) -> Result<(), Invalid> {
    halite_protocol::id::validate(&spec.server_id).map_err(Invalid::ServerId)?;
    if let Some(action) = &spec.action {
        if !ACTIONS.contains(&action.to_ascii_uppercase().as_str()) {
            return Err(Invalid::Action { action: action.clone() });
        }
    }
    if let Some(url) = &spec.signal_id {
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 4096 {
            return Err(Invalid::SignalId);
        }
    }
    if let Some(verb) = &spec.signal_verb {
        if !verb.eq_ignore_ascii_case("POST") && !verb.eq_ignore_ascii_case("PUT") {
            return Err(Invalid::SignalVerb(verb.clone()));
        }
    }
    if spec.input_values.keys().any(|k| k.is_empty() || k.contains(['=', '\0'])) {
        return Err(Invalid::InputValues);
    }
    super::derive::validation(spec)?;
    Ok(())
}

/// What is wrong with a config or deployment an engine sent; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("name: at most 255 bytes")]
    Name,
    #[error("group: 1 to 255 bytes")]
    Group,
    #[error("config: a string (script) or a map (structured config)")]
    Config,
    #[error("inputs: {0:?} cannot be an environment variable name")]
    InputName(String),
    #[error("inputs: {0:?} is declared twice")]
    InputTwice(String),
    #[error("inputs: {name}: type {kind:?} is not one of {}", TYPES.join(", "))]
    InputType { name: String, kind: String },
    #[error("outputs: {0:?} cannot be part of a file name")]
    OutputName(String),
    #[error("outputs: {0:?} is declared twice")]
    OutputTwice(String),
    #[error("server_id: {0}")]
    ServerId(halite_protocol::id::IdError),
    #[error("action: {action:?} is not one of {}", ACTIONS.join(", "))]
    Action { action: String },
    #[error("signal_id: an http:// or https:// URL")]
    SignalId,
    #[error("signal_verb: POST or PUT, not {0:?}")]
    SignalVerb(String),
    #[error("input_values: names cannot be empty or contain '=' or NUL")]
    InputValues,
    #[error(transparent)]
    Validation(#[from] super::derive::UnknownValidation),
}

impl From<Invalid> for crate::request_error::RequestError {
    fn from(error: Invalid) -> Self {
        Self::bad_request(error.to_string())
    }
}
