//! Function arguments as people type them on a command line.

use std::collections::BTreeMap;

use super::Value;

/// Splits command-line words into positional and keyword arguments as Salt does: `key=value`
/// words are keyword arguments when `key` is an identifier, the rest positional; each value is
/// read as JSON when it parses (`3`, `true`, `[1,2]`, `{"a":1}`, `"quoted"`) and as a plain
/// string otherwise.
pub fn parse_cli_args<S: AsRef<str>>(words: &[S]) -> (Vec<Value>, BTreeMap<String, Value>) {
    let mut positional = Vec::new();
    let mut keyword = BTreeMap::new();
    for word in words {
        let word = word.as_ref();
        match word.split_once('=') {
            Some((key, value)) if is_identifier(key) => {
                keyword.insert(key.to_owned(), cli_value(value));
            }
            _ => positional.push(cli_value(word)),
        }
    }
    (positional, keyword)
}

/// Whether `key` may name a `key=value` argument (a letter or `_`, then letters, digits, `_`).
pub fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn cli_value(text: &str) -> Value {
    match serde_json::from_str(text) {
        // `1.10` is a version, not 1.1: a number is kept only when it reads back unchanged.
        Ok(Value::Number(n)) if n.to_string() != text => Value::String(text.to_owned()),
        Ok(value) => value,
        Err(_) => Value::String(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn command_line_words_become_typed_values() {
        let (positional, keyword) =
            parse_cli_args(&["ls -l", "3", "shell=true", "env={\"A\":\"b\"}", "a=b=c", "x-y=1", "[1]"]);
        assert_eq!(positional, vec![json!("ls -l"), json!(3), json!("x-y=1"), json!([1])]);
        assert_eq!(keyword["shell"], json!(true));
        assert_eq!(keyword["env"], json!({"A": "b"}));
        assert_eq!(keyword["a"], json!("b=c"));
        let (positional, _) = parse_cli_args(&["1.10", "1.5", "007", "1e3"]);
        assert_eq!(positional, vec![json!("1.10"), json!(1.5), json!("007"), json!("1e3")]);
    }
}
