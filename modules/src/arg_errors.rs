//! Arguments that do not fit a function's schema, explained as its caller needs: which
//! argument, what it takes, and an example written as on a command line
//! (`timeout: "abc" is not a number; timeout takes a number, e.g. timeout=30`), rather than
//! serde's `invalid type: string "abc", expected f64`, which names neither.

use halite_protocol::message::Value;
use serde_json::Map;

/// Arguments that do not fit a function's schema: the explanation, in words naming the argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Misfit(pub(crate) String);

/// `object` parsed as `T`, or why not, in words naming the argument (see the module doc).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(object: Map<String, Value>, schema: &Value) -> Result<T, Misfit> {
    serde_path_to_error::deserialize::<_, T>(&object).map_err(|error| {
        let argument = match error.path().iter().next() {
            Some(serde_path_to_error::Segment::Map { key }) => Some(key.clone()),
            // Flattened arguments lose their path in serde: the one whose type the schema
            // does not take is the one.
            _ => misfit(&object, schema),
        };
        Misfit(explain(argument.as_deref(), &error.inner().to_string(), &object, schema))
    })
}

fn explain(argument: Option<&str>, serde_says: &str, object: &Map<String, Value>, schema: &Value) -> String {
    let properties = schema.get("properties").and_then(Value::as_object);
    // Missing and unknown arguments are errors of the whole object: serde names them.
    if let Some(name) = between_backticks(serde_says, "missing field `") {
        let takes = properties.and_then(|p| p.get(name)).map(|p| takes(name, p, schema)).unwrap_or_default();
        return format!("missing argument {name}{takes}");
    }
    if let Some(name) = between_backticks(serde_says, "unknown field `") {
        let known: Vec<&str> = properties.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
        return format!("unknown argument {}; this function takes {}", cut(name), known.join(", "));
    }
    let Some(name) = argument else { return serde_says.to_owned() };
    let property = properties.and_then(|p| p.get(name));
    let given = object.get(name).map(shown).unwrap_or_default();
    let takes = property.map(|p| takes(name, p, schema)).unwrap_or_default();
    // A wrong type is said plainly; anything else (a bad value inside a list, a number out of
    // range) keeps serde's words after the argument's name.
    if serde_says.starts_with("invalid type") && says_only_a_type(serde_says) {
        let wanted = property.map(|p| described(&crate::coerce::accepted_types(schema, p))).unwrap_or_default();
        if !wanted.is_empty() {
            return format!("{name}: {given} is not {wanted}{takes}");
        }
    }
    format!("{name}: {}{takes}", rust_words_out(serde_says))
}

/// Whether serde's `invalid type` message expects no more than a type (a function's own
/// words, a custom expectation, are kept).
fn says_only_a_type(serde_says: &str) -> bool {
    let Some((_, expected)) = serde_says.rsplit_once(", expected ") else { return false };
    let plain = [
        "a string",
        "a boolean",
        "a sequence",
        "a map",
        "f32",
        "f64",
        "u8",
        "u16",
        "u32",
        "u64",
        "i8",
        "i16",
        "i32",
        "i64",
    ];
    plain.contains(&expected) || expected.starts_with("struct ")
}

/// The first argument whose JSON type its property in `schema` does not take.
fn misfit(object: &Map<String, Value>, schema: &Value) -> Option<String> {
    let properties = schema.get("properties").and_then(Value::as_object)?;
    object.iter().find_map(|(name, value)| {
        let types = crate::coerce::accepted_types(schema, properties.get(name)?);
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let fits = types.is_empty() || types.iter().any(|t| t == kind || (t == "number" && kind == "integer"));
        (!fits).then(|| name.clone())
    })
}

/// "; NAME takes TYPE, e.g. NAME=EXAMPLE" for a property of `schema`.
fn takes(name: &str, property: &Value, schema: &Value) -> String {
    let types = crate::coerce::accepted_types(schema, property);
    // Text, when it is one of the choices, makes the plainest example.
    let Some(kind) = types.iter().find(|t| *t == "string").or_else(|| types.iter().find(|t| *t != "null")) else {
        return String::new();
    };
    let example = match property.get("default") {
        Some(default) if !is_blank(default) => cli_form(default),
        _ => match kind.as_str() {
            "boolean" => "true".to_owned(),
            "integer" => "5".to_owned(),
            "number" => "30".to_owned(),
            "array" => r#"'["a","b"]'"#.to_owned(),
            "object" => r#"'{"KEY":"value"}'"#.to_owned(),
            _ => "text".to_owned(),
        },
    };
    format!("; {name} takes {}, e.g. {name}={example}", described(&types))
}

/// "a number", "text or a list", ... for JSON schema type names.
fn described(types: &[String]) -> String {
    let words: Vec<&str> = types
        .iter()
        .filter(|t| *t != "null")
        .map(|t| match t.as_str() {
            "boolean" => "true or false",
            "integer" => "a whole number",
            "number" => "a number",
            "array" => "a list",
            "object" => "an object",
            _ => "text",
        })
        .collect();
    words.join(" or ")
}

/// A default too plain to show what a value looks like (`null`, `false`, `""`, `[]`, `{}`).
fn is_blank(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A value as it would be written after `name=` on a command line.
fn cli_form(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A given value as the message quotes it, cut short.
fn shown(value: &Value) -> String {
    cut(&value.to_string())
}

/// `text` cut short for a message (a caller's name or value may be of any length).
fn cut(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

/// The name between `prefix` and the next backtick in `text`.
fn between_backticks<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.strip_prefix(prefix).and_then(|rest| rest.split('`').next())
}

/// serde's words with Rust's type names put as a caller knows them.
fn rust_words_out(text: &str) -> String {
    [
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u32", "expected a whole number from 0"),
        ("expected u64", "expected a whole number from 0"),
        ("expected i32", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("sequence", "list"),
    ]
    .iter()
    .fold(text.to_owned(), |text, (rust, words)| text.replace(rust, words))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        name: String,
        #[serde(default)]
        timeout: Option<f64>,
        #[serde(default)]
        makedirs: bool,
        #[serde(default)]
        uid: Option<u32>,
        #[serde(default)]
        pkgs: Vec<String>,
    }

    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Flattened {
        cmd: String,
        #[serde(flatten)]
        options: Options,
    }

    #[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Options {
        #[serde(default)]
        env: std::collections::BTreeMap<String, String>,
    }

    #[test]
    fn a_flattened_argument_is_named_too() {
        let schema = serde_json::to_value(schemars::schema_for!(Flattened)).unwrap();
        let serde_json::Value::Object(object) = json!({"cmd": "date", "env": "LANG=C"}) else { unreachable!() };
        assert_eq!(
            super::parse::<Flattened>(object, &schema).unwrap_err().to_string(),
            r#"env: "LANG=C" is not an object; env takes an object, e.g. env='{"KEY":"value"}'"#
        );
    }

    fn error(args: serde_json::Value) -> String {
        let schema = serde_json::to_value(schemars::schema_for!(Sample)).unwrap();
        let serde_json::Value::Object(object) = args else { panic!("an object") };
        super::parse::<Sample>(object, &schema).unwrap_err().to_string()
    }

    #[test]
    fn a_value_that_does_not_fit_is_named_with_its_type_and_an_example() {
        assert_eq!(
            error(json!({"name": "x", "timeout": "abc"})),
            r#"timeout: "abc" is not a number; timeout takes a number, e.g. timeout=30"#
        );
        assert_eq!(
            error(json!({"name": "x", "makedirs": "maybe"})),
            r#"makedirs: "maybe" is not true or false; makedirs takes true or false, e.g. makedirs=true"#
        );
        assert_eq!(
            error(json!({"name": "x", "uid": -5})),
            "uid: invalid value: integer `-5`, expected a whole number from 0; uid takes a whole number, e.g. uid=5"
        );
        assert_eq!(
            error(json!({"name": "x", "pkgs": "curl"})),
            r#"pkgs: "curl" is not a list; pkgs takes a list, e.g. pkgs='["a","b"]'"#
        );
        assert_eq!(error(json!({"timeout": 3})), "missing argument name; name takes text, e.g. name=text");
        assert_eq!(
            error(json!({"name": "x", "bogus": 1})),
            "unknown argument bogus; this function takes name, timeout, makedirs, uid, pkgs"
        );
        let long = "k".repeat(100_000);
        assert!(error(json!({"name": "x", long.clone(): 1})).len() < 200, "a caller's long name is cut");
    }
}
