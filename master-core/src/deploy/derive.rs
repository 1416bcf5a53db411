//! The derived config of a deployment, and what a signal does to it: Heat's rules, as pure
//! functions (heat/engine/resources/openstack/heat/software_deployment.py, structured_config.py
//! and heat/engine/service_software_config.py).

use halite_protocol::message::{ConfigOutput, NewDeployment, SoftwareConfig, Value};
use serde_json::{json, Map};

use super::lifecycle::Status;

/// Builds the item the minion applies: declared inputs with their values (given, else the
/// default), undeclared input values as String inputs, then the `deploy_*` inputs.
pub fn derived_item(
    config: &SoftwareConfig,
    spec: &NewDeployment,
    action: &str,
    derived_id: &str,
    creation_time: &str,
) -> Result<Value, DeriveError> {
    let mut values = spec.input_values.clone();
    let mut inputs: Vec<Value> = Vec::new();
    for input in &config.inputs {
        let mut entry = serde_json::to_value(input)?;
        let value = values.shift_remove(&input.name).or_else(|| input.default.clone()).unwrap_or(Value::Null);
        entry["value"] = value;
        inputs.push(entry);
    }
    for (name, value) in values {
        inputs.push(json!({ "name": name, "type": "String", "value": value }));
    }
    let deploy_input = |name: &str, description: &str, value: Value| json!({ "name": name, "description": description, "type": "String", "value": value });
    inputs.push(deploy_input("deploy_server_id", "ID of the server being deployed to", json!(spec.server_id)));
    inputs.push(deploy_input("deploy_action", "Name of the current action being deployed", json!(action)));
    inputs.push(deploy_input("deploy_stack_id", "ID of the stack this deployment belongs to", json!(spec.stack_id)));
    inputs.push(deploy_input(
        "deploy_resource_name",
        "Name of this deployment resource in the stack",
        json!(spec.resource_name),
    ));
    inputs.push(deploy_input(
        "deploy_signal_transport",
        "How the server should signal to heat with the deployment output values.",
        json!(signal_transport(spec)),
    ));
    if let Some(url) = &spec.signal_id {
        inputs.push(deploy_input("deploy_signal_id", "ID of signal to use for signaling output values", json!(url)));
        inputs.push(deploy_input(
            "deploy_signal_verb",
            "HTTP verb to use for signaling outputvalues",
            json!(signal_verb(spec)),
        ));
    }
    let config_body = match &config.config {
        structured @ Value::Object(_) => {
            let known: Map<String, Value> =
                inputs.iter().filter_map(|i| Some((i["name"].as_str()?.to_owned(), i["value"].clone()))).collect();
            let key = spec.input_key.as_deref().unwrap_or("get_input");
            let strict = validation(spec)? == "STRICT";
            substitute(structured, key, &known, strict)?
        }
        other => other.clone(),
    };
    Ok(json!({
        "id": derived_id,
        "name": config.name,
        "group": config.group,
        "config": config_body,
        "inputs": inputs,
        "outputs": config.outputs,
        "options": config.options,
        "creation_time": creation_time,
    }))
}

/// `deploy_signal_transport`: as given, else what a URL implies.
pub fn signal_transport(spec: &NewDeployment) -> String {
    match (&spec.signal_transport, &spec.signal_id) {
        (Some(transport), _) => transport.clone(),
        (None, Some(_)) if signal_verb(spec) == "PUT" => "TEMP_URL_SIGNAL".into(),
        (None, Some(_)) => "CFN_SIGNAL".into(),
        (None, None) => "NO_SIGNAL".into(),
    }
}

/// `POST` unless `PUT` was asked for.
pub fn signal_verb(spec: &NewDeployment) -> &'static str {
    match spec.signal_verb.as_deref() {
        Some(verb) if verb.eq_ignore_ascii_case("PUT") => "PUT",
        _ => "POST",
    }
}

/// `LAX` or `STRICT`.
pub fn validation(spec: &NewDeployment) -> Result<&'static str, UnknownValidation> {
    match spec.input_values_validation.as_deref() {
        None => Ok("LAX"),
        Some(v) if v.eq_ignore_ascii_case("LAX") => Ok("LAX"),
        Some(v) if v.eq_ignore_ascii_case("STRICT") => Ok("STRICT"),
        Some(other) => Err(UnknownValidation(other.to_owned())),
    }
}

/// `input_values_validation` is neither `LAX` nor `STRICT`; what it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input_values_validation must be LAX or STRICT, not {0:?}")]
pub struct UnknownValidation(String);

/// Why a deployment's config could not be derived.
#[derive(Debug, thiserror::Error)]
pub enum DeriveError {
    /// A declared input does not serialize.
    #[error("{0}")]
    Input(#[from] serde_json::Error),
    /// The validation mode is unknown.
    #[error(transparent)]
    Validation(#[from] UnknownValidation),
    /// STRICT validation and a structured config names an input without a value.
    #[error("the input {0:?} has no value (STRICT validation)")]
    NoValue(String),
}

impl From<DeriveError> for crate::request_error::RequestError {
    fn from(error: DeriveError) -> Self {
        Self::bad_request(error.to_string())
    }
}

/// Replaces every `{<key>: "<input name>"}` (a map with that one entry) by the input's value.
fn substitute(snippet: &Value, key: &str, inputs: &Map<String, Value>, strict: bool) -> Result<Value, DeriveError> {
    match snippet {
        Value::Object(map) => {
            if map.len() == 1 {
                if let Some(Value::String(name)) = map.get(key) {
                    return match inputs.get(name) {
                        Some(value) => Ok(value.clone()),
                        None if strict => Err(DeriveError::NoValue(name.clone())),
                        None => Ok(Value::Null),
                    };
                }
            }
            map.iter()
                .map(|(k, v)| Ok((k.clone(), substitute(v, key, inputs, strict)?)))
                .collect::<Result<Map<_, _>, _>>()
                .map(Value::Object)
        }
        Value::Array(items) => {
            items.iter().map(|v| substitute(v, key, inputs, strict)).collect::<Result<Vec<_>, _>>().map(Value::Array)
        }
        other => Ok(other.clone()),
    }
}

/// The outcome of a signal: status, reason, and the output values kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: Status,
    pub reason: String,
    pub output_values: Map<String, Value>,
}

/// What Heat does with a signal: FAILED on a non-zero `deploy_status_code` or on any
/// `error_output` output present (even empty), otherwise COMPLETE; only declared outputs and
/// the three `deploy_*` values are kept.
pub fn apply_signal(outputs: &[ConfigOutput], signal: &Map<String, Value>, previous: &Map<String, Value>) -> Outcome {
    let mut output_values = previous.clone();
    let mut failed = false;
    let mut reasons: Vec<(String, String)> = Vec::new();
    let code = signal.get("deploy_status_code");
    let nonzero = match code {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty() && s != "0",
        Some(_) => true,
    };
    if let Some(code) = code.filter(|_| nonzero) {
        failed = true;
        reasons.push((
            "deploy_status_code".into(),
            format!("Deployment exited with non-zero status code: {}", python_str(code)),
        ));
    }
    for output in outputs {
        if let Some(value) = signal.get(&output.name) {
            output_values.insert(output.name.clone(), value.clone());
            if output.error_output {
                failed = true;
                reasons.retain(|(k, _)| k != &output.name);
                reasons.push((output.name.clone(), python_str(value)));
            }
        }
    }
    for key in ["deploy_stdout", "deploy_stderr", "deploy_status_code"] {
        output_values.insert(key.into(), signal.get(key).cloned().unwrap_or(Value::Null));
    }
    if failed {
        let reason = reasons.iter().map(|(k, v)| format!("{k} : {v}")).collect::<Vec<_>>().join(", ");
        Outcome { status: Status::Failed, reason, output_values }
    } else {
        Outcome { status: Status::Complete, reason: "Outputs received".into(), output_values }
    }
}

/// Python's `str()` of a signalled value, as Heat formats reasons.
fn python_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.to_string(),
    }
}

/// The body sent to `deploy_signal_id`: the signal as JSON, cut to `max` bytes by removing the
/// start of `deploy_stdout` and `deploy_stderr` in proportion to their lengths, as
/// heat-config-notify does (and, unlike it, guaranteed to fit).
pub fn trimmed_body(signal: &Map<String, Value>, max: usize) -> Vec<u8> {
    let mut signal = signal.clone();
    loop {
        let body = serde_json::to_vec(&signal).unwrap_or_default();
        if body.len() <= max {
            return body;
        }
        let excess = body.len() - max;
        let total = body.len();
        let mut cut_any = false;
        for key in ["deploy_stdout", "deploy_stderr"] {
            if let Some(Value::String(text)) = signal.get_mut(key) {
                // At least one byte per round, so the loop always ends.
                let cut = ((text.len() as f64 / total as f64) * excess as f64).round().max(1.0) as usize;
                let mut at = cut.min(text.len());
                while !text.is_char_boundary(at) {
                    at += 1;
                }
                if at > 0 {
                    text.drain(..at);
                    cut_any = true;
                }
            }
        }
        if !cut_any {
            // Nothing left to trim: the declared outputs alone are too big. Heat would refuse
            // the body; send it anyway and let the engine say so.
            return body;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_protocol::message::ConfigInput;

    fn config(value: Value) -> SoftwareConfig {
        SoftwareConfig {
            id: "c1".into(),
            name: "conf".into(),
            group: "script".into(),
            config: value,
            inputs: vec![
                ConfigInput {
                    name: "foo".into(),
                    kind: "String".into(),
                    default: Some(json!("dflt")),
                    description: None,
                    replace_on_change: false,
                },
                ConfigInput {
                    name: "bar".into(),
                    kind: "Number".into(),
                    default: None,
                    description: None,
                    replace_on_change: false,
                },
            ],
            outputs: vec![
                ConfigOutput { name: "result".into(), kind: "String".into(), description: None, error_output: false },
                ConfigOutput { name: "err".into(), kind: "String".into(), description: None, error_output: true },
            ],
            options: None,
            creation_time: "2026-11-21T00:00:00Z".into(),
        }
    }

    fn spec(values: Value) -> NewDeployment {
        serde_json::from_value(json!({ "config_id": "c1", "server_id": "web1", "input_values": values })).unwrap()
    }

    #[test]
    fn inputs_are_derived_in_heat_order_with_defaults_and_undeclared_values() {
        let item =
            derived_item(&config(json!("#!/bin/sh\n")), &spec(json!({"bar": 3, "extra": true})), "CREATE", "d1", "t")
                .unwrap();
        let names: Vec<&str> = item["inputs"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "foo",
                "bar",
                "extra",
                "deploy_server_id",
                "deploy_action",
                "deploy_stack_id",
                "deploy_resource_name",
                "deploy_signal_transport"
            ]
        );
        assert_eq!(item["inputs"][0]["value"], json!("dflt"));
        assert_eq!(item["inputs"][1]["value"], json!(3));
        assert_eq!(item["inputs"][2], json!({"name": "extra", "type": "String", "value": true}));
        assert_eq!(item["inputs"][3]["value"], json!("web1"));
        assert_eq!(item["inputs"][7]["value"], json!("NO_SIGNAL"));
        assert_eq!(item["id"], json!("d1"));
    }

    #[test]
    fn a_signal_url_adds_id_and_verb() {
        let mut s = spec(json!({}));
        s.signal_id = Some("http://heat/signal".into());
        s.signal_verb = Some("put".into());
        let item = derived_item(&config(json!("")), &s, "CREATE", "d1", "t").unwrap();
        let inputs = item["inputs"].as_array().unwrap();
        assert_eq!(inputs[inputs.len() - 2]["value"], json!("http://heat/signal"));
        assert_eq!(inputs[inputs.len() - 1]["value"], json!("PUT"));
        assert_eq!(inputs[inputs.len() - 3]["value"], json!("TEMP_URL_SIGNAL"));
    }

    #[test]
    fn structured_configs_substitute_get_input_lax_and_strict() {
        let structured = json!({"a": {"get_input": "foo"}, "b": [{"get_input": "deploy_action"}, {"get_input": "nope"}],
                                "c": {"get_input": "foo", "other": 1}});
        let item = derived_item(&config(structured.clone()), &spec(json!({})), "UPDATE", "d1", "t").unwrap();
        assert_eq!(item["config"], json!({"a": "dflt", "b": ["UPDATE", null], "c": {"get_input": "foo", "other": 1}}));
        let mut strict = spec(json!({}));
        strict.input_values_validation = Some("STRICT".into());
        let error = derived_item(&config(structured), &strict, "CREATE", "d1", "t").unwrap_err().to_string();
        assert!(error.contains("nope"), "{error}");
    }

    #[test]
    fn signals_map_to_status_as_heat_does() {
        let outputs = config(json!("")).outputs;
        let ok = apply_signal(
            &outputs,
            json!({"result": "r", "undeclared": 1, "deploy_stdout": "o", "deploy_stderr": "",
                                               "deploy_status_code": 0})
            .as_object()
            .unwrap(),
            &Map::new(),
        );
        assert_eq!((ok.status.as_str(), ok.reason.as_str()), ("COMPLETE", "Outputs received"));
        assert_eq!(
            Value::Object(ok.output_values),
            json!({"result": "r", "deploy_stdout": "o", "deploy_stderr": "", "deploy_status_code": 0})
        );

        let code = apply_signal(&outputs, json!({"deploy_status_code": 3}).as_object().unwrap(), &Map::new());
        assert_eq!(code.status.as_str(), "FAILED");
        assert_eq!(code.reason, "deploy_status_code : Deployment exited with non-zero status code: 3");

        let empty_error =
            apply_signal(&outputs, json!({"err": "", "deploy_status_code": 0}).as_object().unwrap(), &Map::new());
        assert_eq!((empty_error.status.as_str(), empty_error.reason.as_str()), ("FAILED", "err : "));

        let both = apply_signal(
            &outputs,
            json!({"err": "disk full", "deploy_status_code": 1}).as_object().unwrap(),
            &Map::new(),
        );
        assert_eq!(both.reason, "deploy_status_code : Deployment exited with non-zero status code: 1, err : disk full");

        let nothing = apply_signal(&outputs, &Map::new(), &Map::new());
        assert_eq!(nothing.status.as_str(), "COMPLETE");
        assert_eq!(nothing.output_values["deploy_status_code"], Value::Null);
    }

    #[test]
    fn bodies_over_the_limit_lose_the_start_of_stdout_and_stderr() {
        let signal = json!({"result": "keep", "deploy_stdout": format!("{}END", "o".repeat(2_000_000)),
                            "deploy_stderr": format!("{}TAIL", "é".repeat(300_000)), "deploy_status_code": 0});
        let body = trimmed_body(signal.as_object().unwrap(), 950_000);
        assert!(body.len() <= 950_000, "{}", body.len());
        let back: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(back["result"], json!("keep"));
        assert!(back["deploy_stdout"].as_str().unwrap().ends_with("END"));
        assert!(back["deploy_stderr"].as_str().unwrap().ends_with("TAIL"));
        let small = json!({"deploy_stdout": "x"});
        assert_eq!(trimmed_body(small.as_object().unwrap(), 950_000), serde_json::to_vec(&small).unwrap());
    }
}
