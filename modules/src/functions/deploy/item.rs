//! The derived config item `deploy.apply` receives, as Heat's per-server metadata lists it.

use serde_json::{Map, Value};

use super::python;
use crate::ModuleError;

/// One input of an item, with its derived value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Input {
    pub(crate) name: String,
    /// `None` when the item has no `value` key at all.
    pub(crate) value: Option<Value>,
    /// Declared `type: Json`: its value reaches scripts as JSON text, `null` included.
    pub(crate) json: bool,
}

/// A checked item. The raw JSON is kept: hooks receive it whole, with fields halite does not
/// know about.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) raw: Map<String, Value>,
    pub(crate) id: String,
    pub(crate) group: String,
    pub(crate) inputs: Vec<Input>,
    pub(crate) output_names: Vec<String>,
}

impl Item {
    /// Checks an item and converts String inputs with non-string values the way heat-config
    /// does (Python's `str()`), in the raw JSON too.
    pub(crate) fn parse(value: Value) -> Result<Self, ModuleError> {
        let bad = |why: String| ModuleError::BadArguments(format!("item: {why}"));
        let Value::Object(mut raw) = value else { return Err(bad("must be an object".into())) };
        let id = match raw.get("id") {
            Some(Value::String(id)) => id.clone(),
            _ => return Err(bad("needs a string id".into())),
        };
        if id.is_empty()
            || id.len() > 200
            || id.starts_with('.')
            || !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(bad(format!("id {id:?} must be 1-200 of [A-Za-z0-9._-], not starting with a dot")));
        }
        let group = match raw.get("group") {
            None | Some(Value::Null) => "Heat::Ungrouped".to_owned(),
            Some(Value::String(g)) => g.clone(),
            Some(_) => return Err(bad("group must be a string".into())),
        };
        let mut inputs = Vec::new();
        match raw.get_mut("inputs") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, input) in list.iter_mut().enumerate() {
                    let Value::Object(input) = input else { return Err(bad(format!("inputs[{i}] is not an object"))) };
                    let name = match input.get("name") {
                        Some(Value::String(n)) => n.clone(),
                        _ => return Err(bad(format!("inputs[{i}] needs a string name"))),
                    };
                    if name.is_empty() || name.contains('=') || name.contains('\0') {
                        return Err(bad(format!("input name {name:?} cannot be an environment variable name")));
                    }
                    let string_typed = input.get("type").and_then(Value::as_str) == Some("String");
                    if string_typed {
                        if let Some(value) = input.get_mut("value") {
                            if !value.is_string() {
                                *value = Value::String(python::str_of(value));
                            }
                        }
                    }
                    let json = input.get("type").and_then(Value::as_str) == Some("Json");
                    inputs.push(Input { name, value: input.get("value").cloned(), json });
                }
            }
            Some(_) => return Err(bad("inputs must be a list".into())),
        }
        let mut output_names = Vec::new();
        match raw.get("outputs") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => {
                for (i, output) in list.iter().enumerate() {
                    let Some(name) = output.get("name").and_then(Value::as_str) else {
                        return Err(bad(format!("outputs[{i}] needs a string name")));
                    };
                    // The name becomes part of a file name: no way out of the outputs directory.
                    if name.is_empty() || name.contains('/') || name.contains('\0') || name == "." || name == ".." {
                        return Err(bad(format!("output name {name:?} cannot be part of a file name")));
                    }
                    output_names.push(name.to_owned());
                }
            }
            Some(_) => return Err(bad("outputs must be a list".into())),
        }
        Ok(Item { raw, id, group, inputs, output_names })
    }

    /// The value of an input by name.
    pub(crate) fn input(&self, name: &str) -> Option<&Value> {
        self.inputs.iter().find(|i| i.name == name).and_then(|i| i.value.as_ref())
    }

    /// `group: component` picks, by `deploy_action`, one of the configs it lists and takes its
    /// `tool` as the group, as heat-config does. `Ok(false)` when none is for this action.
    pub(crate) fn resolve_component(&mut self) -> Result<bool, ModuleError> {
        if self.group != "component" {
            return Ok(true);
        }
        let action = self.input("deploy_action").and_then(Value::as_str).unwrap_or_default().to_owned();
        let configs = self.raw.get("config").and_then(|c| c.get("configs")).and_then(Value::as_array);
        let chosen = configs.into_iter().flatten().find(|cfg| {
            cfg.get("actions").and_then(Value::as_array).is_some_and(|a| a.iter().any(|x| x.as_str() == Some(&action)))
        });
        let Some(chosen) = chosen.cloned() else { return Ok(false) };
        let tool = chosen.get("tool").and_then(Value::as_str).unwrap_or_default().to_owned();
        self.raw.insert("config".into(), chosen.get("config").cloned().unwrap_or(Value::Null));
        self.raw.insert("group".into(), Value::String(tool.clone()));
        self.group = tool;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_inputs_are_coerced_like_heat_config() {
        let item = Item::parse(json!({"id": "a1", "group": "script", "inputs": [
            {"name": "s", "type": "String", "value": 1.0},
            {"name": "n", "type": "Number", "value": 3},
            {"name": "b", "type": "String", "value": null},
        ]}))
        .unwrap();
        assert_eq!(item.input("s"), Some(&json!("1.0")));
        assert_eq!(item.input("n"), Some(&json!(3)));
        assert_eq!(item.input("b"), Some(&json!("None")));
        assert_eq!(item.raw["inputs"][0]["value"], json!("1.0"));
    }

    #[test]
    fn unsafe_ids_and_names_are_refused() {
        for bad in [
            json!({"id": "../x"}),
            json!({"id": ""}),
            json!({"id": "a", "outputs": [{"name": "../../etc/shadow"}]}),
            json!({"id": "a", "inputs": [{"name": "A=B"}]}),
            json!({"id": "a", "inputs": "x"}),
            json!([]),
        ] {
            assert!(Item::parse(bad.clone()).is_err(), "{bad}");
        }
    }
}
