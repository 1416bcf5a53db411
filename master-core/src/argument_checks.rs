//! What the master checks of a job's arguments before it sends them: a call every minion
//! would refuse the same way is refused once, at the master, in the minion's own words,
//! instead of failing on each targeted minion.

use std::collections::BTreeMap;

use halite_protocol::message::Value;

/// Why `function` with these arguments would be refused by every minion, if it would.
pub fn refusal(function: &str, positional: &[Value], keyword: &BTreeMap<String, Value>) -> Option<String> {
    match function {
        // `cmd.run` reads a string without a shell as words (`shell_words`); `python_shell`
        // is Salt's name for `shell`.
        "cmd.run" => {
            if ["shell", "python_shell"].iter().any(|name| keyword.get(*name).is_some_and(truthy)) {
                return None;
            }
            let line = keyword.get("cmd").or_else(|| positional.first())?.as_str()?;
            halite_protocol::shell_words::split(line).err().map(|error| error.to_string())
        }
        _ => None,
    }
}

/// Whether a value says yes as the minion reads a boolean argument (`true`, or the text
/// `true`, `True`, `yes`, `on`, `1`; a number is no boolean there, so none here).
fn truthy(value: &Value) -> bool {
    match value {
        Value::Bool(b) => *b,
        Value::String(s) => matches!(s.to_ascii_lowercase().as_str(), "true" | "yes" | "on" | "1"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shell_syntax_without_a_shell_is_refused_before_it_is_sent() {
        let kw = |pairs: &[(&str, Value)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        let why = refusal("cmd.run", &[json!("df -h | tail -1")], &BTreeMap::new()).unwrap();
        assert!(why.contains("add shell=true"), "{why}");
        for shell in [json!(true), json!("True"), json!("yes")] {
            assert_eq!(refusal("cmd.run", &[json!("df -h | tail -1")], &kw(&[("python_shell", shell.clone())])), None);
            assert_eq!(refusal("cmd.run", &[json!("df -h | tail -1")], &kw(&[("shell", shell)])), None);
        }
        assert_eq!(refusal("cmd.run", &[json!("uptime")], &BTreeMap::new()), None);
        assert_eq!(refusal("cmd.run", &[json!(["sh", "-c", "a | b"])], &BTreeMap::new()), None, "an argv is no line");
        assert!(refusal("cmd.run", &[], &kw(&[("cmd", json!("a && b"))])).is_some());
        assert_eq!(refusal("test.echo", &[json!("a | b")], &BTreeMap::new()), None);
        // The minion takes no number for a boolean: shell=2 is not a shell.
        assert!(refusal("cmd.run", &[json!("a | b")], &kw(&[("shell", json!(2))])).is_some());
    }
}
