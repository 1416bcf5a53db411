//! Arguments as they arrive (positional and keyword values), and their conversion into a
//! function's typed argument struct.

use std::collections::BTreeMap;

use halite_protocol::message::Value;
use serde::de::DeserializeOwned;

use crate::ModuleError;

/// Positional and keyword arguments of a call, as the CLI or the master sends them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Args {
    /// Positional values.
    pub positional: Vec<Value>,
    /// `key=value` values.
    pub keyword: BTreeMap<String, Value>,
}

impl Args {
    /// Arguments from both lists.
    pub fn new(positional: Vec<Value>, keyword: BTreeMap<String, Value>) -> Self {
        Args { positional, keyword }
    }

    /// Parses command-line words as Salt does: `key=value` words are keyword arguments (when
    /// `key` is an identifier), the rest positional; each value is read as JSON when it parses
    /// (`3`, `true`, `[1,2]`, `{"a":1}`, `"quoted"`) and as a plain string otherwise.
    pub fn from_cli<S: AsRef<str>>(words: &[S]) -> Self {
        let mut args = Args::default();
        for word in words {
            let word = word.as_ref();
            match word.split_once('=') {
                Some((key, value)) if is_identifier(key) => {
                    args.keyword.insert(key.to_owned(), cli_value(value));
                }
                _ => args.positional.push(cli_value(word)),
            }
        }
        args
    }

    /// Converts into `T`, naming positional values after `positional_names` in order. `T`
    /// should use `#[serde(deny_unknown_fields)]` so a misspelt keyword is an error that names
    /// it.
    pub fn parse<T: DeserializeOwned>(&self, positional_names: &[&str]) -> Result<T, ModuleError> {
        if self.positional.len() > positional_names.len() {
            return Err(ModuleError::BadArguments(format!(
                "takes at most {} positional argument(s) ({}), got {}",
                positional_names.len(),
                positional_names.join(", "),
                self.positional.len()
            )));
        }
        let mut object = serde_json::Map::new();
        for (name, value) in positional_names.iter().zip(&self.positional) {
            object.insert((*name).to_owned(), value.clone());
        }
        for (name, value) in &self.keyword {
            if object.insert(name.clone(), value.clone()).is_some() {
                return Err(ModuleError::BadArguments(format!("argument `{name}` given both by position and by name")));
            }
        }
        serde_json::from_value(Value::Object(object)).map_err(|e| ModuleError::BadArguments(e.to_string()))
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn cli_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Sleep {
        length: f64,
        #[serde(default)]
        quiet: bool,
    }

    #[test]
    fn positional_and_keyword_values_fill_the_struct() {
        let args = Args::new(vec![json!(1.5)], BTreeMap::from([("quiet".into(), json!(true))]));
        assert_eq!(args.parse::<Sleep>(&["length"]).unwrap(), Sleep { length: 1.5, quiet: true });
    }

    #[test]
    fn command_line_words_become_typed_values() {
        let args = Args::from_cli(&["ls -l", "3", "shell=true", "env={\"A\":\"b\"}", "a=b=c", "x-y=1", "[1]"]);
        assert_eq!(args.positional, vec![json!("ls -l"), json!(3), json!("x-y=1"), json!([1])]);
        assert_eq!(args.keyword["shell"], json!(true));
        assert_eq!(args.keyword["env"], json!({"A": "b"}));
        assert_eq!(args.keyword["a"], json!("b=c"));
    }

    #[test]
    fn errors_name_the_bad_argument() {
        let args = Args::new(vec![], BTreeMap::from([("lenght".into(), json!(1))]));
        let err = args.parse::<Sleep>(&["length"]).unwrap_err().to_string();
        assert!(err.contains("lenght"), "{err}");
        let err = Args::new(vec![json!(1), json!(2)], BTreeMap::new()).parse::<Sleep>(&["length"]).unwrap_err();
        assert!(err.to_string().contains("at most 1"), "{err}");
        let args = Args::new(vec![json!(1)], BTreeMap::from([("length".into(), json!(1))]));
        assert!(args.parse::<Sleep>(&["length"]).unwrap_err().to_string().contains("both"));
    }
}
