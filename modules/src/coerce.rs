//! Command-line values fitted to a function's argument schema, as Salt's CLI users expect:
//! `mode=644` is the text "644" where the schema wants text, `test=True` is true where it wants a
//! boolean, `cmd.run false` runs the command `false`, and `cmd.run 'LANG=C date'` is a command,
//! not a keyword `LANG`. Applied only to arguments that do not fit as they are.

use halite_protocol::message::Value;
use serde_json::Map;

/// The JSON types a property of `schema` accepts (from `type`, or each branch of
/// `anyOf`/`oneOf`, following local `$ref`s once).
pub(crate) fn accepted_types(schema: &Value, property: &Value) -> Vec<String> {
    let resolve = |p: &Value| -> Value {
        match p.get("$ref").and_then(Value::as_str).and_then(|r| r.rsplit('/').next()) {
            Some(name) => schema
                .get("$defs")
                .or_else(|| schema.get("definitions"))
                .and_then(|defs| defs.get(name))
                .cloned()
                .unwrap_or(Value::Null),
            None => p.clone(),
        }
    };
    let property = resolve(property);
    let mut types = Vec::new();
    let mut add = |p: &Value| match p.get("type") {
        Some(Value::String(t)) => types.push(t.clone()),
        Some(Value::Array(ts)) => types.extend(ts.iter().filter_map(Value::as_str).map(str::to_owned)),
        _ => {}
    };
    add(&property);
    for key in ["anyOf", "oneOf"] {
        for branch in property.get(key).and_then(Value::as_array).into_iter().flatten() {
            add(&resolve(branch));
        }
    }
    types
}

/// Fits each argument of `object` to the type `schema` gives it, where it does not fit as it is.
pub(crate) fn to_schema(object: &mut Map<String, Value>, schema: &Value, positional: &[&str]) {
    let properties = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    // `VAR=value words` on a command line is a command whose first word sets a variable, not a
    // keyword argument: an upper-case name the function does not take fills its first
    // positional argument not given.
    let strays: Vec<String> = object
        .keys()
        .filter(|k| {
            !properties.contains_key(*k) && k.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
        .cloned()
        .collect();
    for key in strays {
        let Some(free) = positional.iter().find(|p| !object.contains_key(**p)) else { break };
        if let Some(value) = object.remove(&key) {
            object.insert((*free).to_owned(), Value::String(format!("{key}={}", text(&value))));
        }
    }
    for (name, value) in object.iter_mut() {
        let Some(property) = properties.get(name) else { continue };
        let types = accepted_types(schema, property);
        let takes = |t: &str| types.iter().any(|x| x == t);
        let fitted = match &*value {
            Value::Number(_) | Value::Bool(_)
                if takes("string") && !takes("number") && !takes("integer") && !takes("boolean") =>
            {
                Some(Value::String(text(value)))
            }
            Value::String(s) if takes("boolean") && !takes("string") => match s.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Some(Value::Bool(true)),
                "false" | "no" | "off" | "0" => Some(Value::Bool(false)),
                _ => None,
            },
            Value::String(s) if (takes("integer") || takes("number")) && !takes("string") => {
                serde_json::from_str::<serde_json::Number>(s.trim()).ok().map(Value::Number)
            }
            _ => None,
        };
        if let Some(fitted) = fitted {
            *value = fitted;
        }
    }
}

/// A value as it was written on the command line.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_fit_the_schema_and_a_variable_assignment_stays_a_command() {
        let schema = json!({
            "properties": {
                "cmd": {"anyOf": [{"type": "string"}, {"type": "array"}]},
                "mode": {"type": ["string", "null"]},
                "test": {"type": "boolean"},
                "count": {"type": "integer"},
                "either": {"type": ["string", "integer"]},
            }
        });
        let mut object = json!({"mode": 644, "test": "True", "count": "3", "either": 5}).as_object().unwrap().clone();
        to_schema(&mut object, &schema, &["cmd"]);
        assert_eq!(Value::Object(object), json!({"mode": "644", "test": true, "count": 3, "either": 5}));
        let mut object = json!({"cmd": false}).as_object().unwrap().clone();
        to_schema(&mut object, &schema, &["cmd"]);
        assert_eq!(object["cmd"], "false");
        let mut object = json!({"LANG": "C date"}).as_object().unwrap().clone();
        to_schema(&mut object, &schema, &["cmd"]);
        assert_eq!(Value::Object(object), json!({"cmd": "LANG=C date"}));
        // A lower-case unknown name stays, to be refused by name.
        let mut object = json!({"cmd": "true", "shel": true}).as_object().unwrap().clone();
        to_schema(&mut object, &schema, &["cmd"]);
        assert!(object.contains_key("shel"));
    }
}
