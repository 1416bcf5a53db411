//! Documentation generated from the registry: `sys.doc` and `docs/modules.md` come from here.

use serde_json::Value;

use crate::{Function, Registry};

/// One function's documentation: its text, then an argument table from its schema.
pub fn render_function(f: &dyn Function) -> String {
    let mut out = format!("### `{}`\n\n{}\n", f.name(), f.doc().trim());
    let schema = f.schema();
    let Some(properties) = schema["properties"].as_object().filter(|p| !p.is_empty()) else {
        out.push_str("\nNo arguments.\n");
        return out;
    };
    let required: Vec<&str> =
        schema["required"].as_array().map_or(Vec::new(), |r| r.iter().filter_map(Value::as_str).collect());
    out.push_str("\n| argument | type | required | description |\n|---|---|---|---|\n");
    for (name, property) in properties {
        let position = f.positional().iter().position(|p| p == name).map(|i| format!(" (positional {})", i + 1));
        let description = property["description"].as_str().unwrap_or("").replace('\n', " ");
        out.push_str(&format!(
            "| `{name}`{} | {} | {} | {} |\n",
            position.unwrap_or_default(),
            type_name(property, &schema),
            if required.contains(&name.as_str()) { "yes" } else { "no" },
            description
        ));
    }
    out
}

fn type_name(property: &Value, root: &Value) -> String {
    if let Some(reference) = property["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        let target = &root["$defs"][name];
        return if target.is_null() { name.to_owned() } else { type_name(target, root) };
    }
    if let Some(types) = property["type"].as_array() {
        return types.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect::<Vec<_>>().join(" or ");
    }
    if let Some(t) = property["type"].as_str() {
        return match (t, property["items"]["type"].as_str()) {
            ("array", Some(item)) => format!("list of {item}"),
            (t, _) => t.to_owned(),
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = property[key].as_array() {
            let names: Vec<String> =
                options.iter().map(|o| type_name(o, root)).filter(|n| !n.is_empty() && n != "null").collect();
            return names.join(" or ");
        }
    }
    if property["enum"].is_array() {
        let values: Vec<String> = property["enum"].as_array().into_iter().flatten().map(|v| v.to_string()).collect();
        return values.join(" \\| ");
    }
    "any".into()
}

/// `docs/modules.md`: every built-in function, grouped by module.
pub fn render_markdown(registry: &Registry) -> String {
    let mut out = String::from(
        "# Execution modules\n\nGenerated from the registry by `halite-minion doc`; do not edit by hand.\n\
         State-changing functions return `{changed, comment, details}` and accept `test=true` to report \
         what would change without changing it. Which functions may run is the minion's policy \
         (`docs/operations.md`).\n",
    );
    let mut module = "";
    for f in registry.iter().filter(|f| !registry.is_action(f.name())) {
        let this = f.name().split('.').next().unwrap_or_default();
        if this != module {
            out.push_str(&format!("\n## `{this}`\n"));
            module = this;
        }
        out.push('\n');
        out.push_str(&render_function(f));
    }
    out
}

// The committed reference documents the full build.
#[cfg(test)]
#[cfg(feature = "full")]
mod tests {
    use super::*;

    /// `docs/modules.md` is generated; regenerate with `halite-minion doc > docs/modules.md`.
    #[test]
    fn docs_modules_md_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/modules.md");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        let generated = render_markdown(&Registry::standard());
        assert!(committed == generated, "docs/modules.md is stale: run `halite-minion doc > docs/modules.md`");
    }
}
