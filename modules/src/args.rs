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

    /// Parses command-line words (see [`halite_protocol::message::parse_cli_args`]).
    pub fn from_cli<S: AsRef<str>>(words: &[S]) -> Self {
        let (positional, keyword) = halite_protocol::message::parse_cli_args(words);
        Args { positional, keyword }
    }

    /// Converts into `T`, naming positional values after `positional_names` in order. `T`
    /// should use `#[serde(deny_unknown_fields)]` so a misspelt keyword is an error that names
    /// it.
    pub fn parse<T: DeserializeOwned>(&self, positional_names: &[&str]) -> Result<T, ModuleError> {
        let object = self.to_object(positional_names)?;
        serde_json::from_value(Value::Object(object)).map_err(|e| ModuleError::BadArguments(e.to_string()))
    }

    /// The arguments as one JSON object, positional values named after `positional_names`.
    pub fn to_object<S: AsRef<str>>(
        &self,
        positional_names: &[S],
    ) -> Result<serde_json::Map<String, Value>, ModuleError> {
        if self.positional.len() > positional_names.len() {
            return Err(ModuleError::BadArguments(format!(
                "takes at most {} positional argument(s) ({}), got {}",
                positional_names.len(),
                positional_names.iter().map(|p| p.as_ref()).collect::<Vec<_>>().join(", "),
                self.positional.len()
            )));
        }
        let mut object = serde_json::Map::new();
        for (name, value) in positional_names.iter().zip(&self.positional) {
            object.insert(name.as_ref().to_owned(), value.clone());
        }
        for (name, value) in &self.keyword {
            if object.insert(name.clone(), value.clone()).is_some() {
                return Err(ModuleError::BadArguments(format!("argument `{name}` given both by position and by name")));
            }
        }
        Ok(object)
    }
}

/// A version written on a command line: `1.0` reads as a number, but a version is text.
#[cfg(feature = "packages")]
#[derive(Debug, Clone, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(transparent)]
pub(crate) struct VersionString(pub(crate) String);

#[cfg(feature = "packages")]
impl<'de> serde::Deserialize<'de> for VersionString {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(VersionString(s)),
            Value::Number(n) => Ok(VersionString(n.to_string())),
            other => Err(serde::de::Error::custom(format!("a version must be text, not {other}"))),
        }
    }
}

/// `deserialize_with` for an optional version (see [`VersionString`]).
#[cfg(feature = "packages")]
pub(crate) fn version_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Some(<VersionString as serde::Deserialize>::deserialize(d)?.0))
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
