//! Checks on what engines send, with messages naming the field.

use halite_protocol::message::{NewDeployment, NewSoftwareConfig, Value};

const TYPES: &[&str] = &["String", "Number", "CommaDelimitedList", "Json", "Boolean"];
const ACTIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "SUSPEND", "RESUME"];

/// A new config.
pub(crate) fn config(new: &NewSoftwareConfig) -> Result<(), String> {
    if new.name.len() > 255 {
        return Err("name: at most 255 bytes".into());
    }
    if new.group.is_empty() || new.group.len() > 255 {
        return Err("group: 1 to 255 bytes".into());
    }
    if !matches!(new.config, Value::String(_) | Value::Object(_)) {
        return Err("config: a string (script) or a map (structured config)".into());
    }
    let mut seen = std::collections::HashSet::new();
    for input in &new.inputs {
        if input.name.is_empty() || input.name.contains(['=', '\0']) {
            return Err(format!("inputs: {:?} cannot be an environment variable name", input.name));
        }
        if !seen.insert(input.name.as_str()) {
            return Err(format!("inputs: {:?} is declared twice", input.name));
        }
        if !TYPES.contains(&input.kind.as_str()) {
            return Err(format!("inputs: {}: type {:?} is not one of {}", input.name, input.kind, TYPES.join(", ")));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for output in &new.outputs {
        if output.name.is_empty() || output.name.contains(['/', '\0']) || output.name == "." || output.name == ".." {
            return Err(format!("outputs: {:?} cannot be part of a file name", output.name));
        }
        if !seen.insert(output.name.as_str()) {
            return Err(format!("outputs: {:?} is declared twice", output.name));
        }
    }
    Ok(())
}

/// A new or updated deployment.
pub(crate) fn deployment(spec: &NewDeployment) -> Result<(), String> {
    halite_protocol::id::validate(&spec.server_id).map_err(|e| format!("server_id: {e}"))?;
    if let Some(action) = &spec.action {
        if !ACTIONS.contains(&action.to_ascii_uppercase().as_str()) {
            return Err(format!("action: {action:?} is not one of {}", ACTIONS.join(", ")));
        }
    }
    if let Some(url) = &spec.signal_id {
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() > 4096 {
            return Err("signal_id: an http:// or https:// URL".into());
        }
    }
    if let Some(verb) = &spec.signal_verb {
        if !verb.eq_ignore_ascii_case("POST") && !verb.eq_ignore_ascii_case("PUT") {
            return Err(format!("signal_verb: POST or PUT, not {verb:?}"));
        }
    }
    if spec.input_values.keys().any(|k| k.is_empty() || k.contains(['=', '\0'])) {
        return Err("input_values: names cannot be empty or contain '=' or NUL".into());
    }
    super::derive::validation(spec)?;
    Ok(())
}
