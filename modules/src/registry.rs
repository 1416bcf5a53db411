//! The list of every function a minion offers: built-ins plus local custom actions.

use std::collections::{BTreeMap, BTreeSet};

use crate::function::Function;
use crate::functions;

/// Every function, by name.
pub struct Registry {
    functions: BTreeMap<String, Box<dyn Function>>,
    actions: BTreeSet<String>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.functions.keys()).finish()
    }
}

/// A custom action was refused: a function of its name (the field) exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is already defined")]
pub struct AlreadyDefined(pub String);

impl Registry {
    /// The built-in functions.
    pub fn standard() -> Self {
        let mut registry = Registry { functions: BTreeMap::new(), actions: BTreeSet::new() };
        for function in functions::all() {
            registry.functions.insert(function.name().to_owned(), function);
        }
        registry
    }

    /// Adds a local custom action; refuses names already taken.
    pub fn add_action(&mut self, action: Box<dyn Function>) -> Result<(), AlreadyDefined> {
        let name = action.name().to_owned();
        if self.functions.contains_key(&name) {
            return Err(AlreadyDefined(name));
        }
        self.actions.insert(name.clone());
        self.functions.insert(name, action);
        Ok(())
    }

    /// Looks a function up.
    pub fn get(&self, name: &str) -> Option<&dyn Function> {
        self.functions.get(name).map(|f| f.as_ref())
    }

    /// Whether `name` is a local custom action.
    pub fn is_action(&self, name: &str) -> bool {
        self.actions.contains(name)
    }
    /// The error for a call of a name not registered, with a suggestion when one is close (or
    /// halite's way, for a Salt function name).
    pub fn unknown(&self, name: &str) -> crate::ModuleError {
        let hint = halite_protocol::function_names::hint(name, self.iter().map(|f| f.name()));
        match hint.is_empty() {
            false => crate::ModuleError::UnknownFunction(format!("{name:?}{hint}")),
            true => crate::ModuleError::UnknownFunction(format!("{name:?} (sys.list_functions lists them)")),
        }
    }

    /// Every function, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Function> {
        self.functions.values().map(|f| f.as_ref())
    }
}

/// Whether a function name has the `module.function` form: `^[a-z]+\.[a-z_]+$`.
pub fn valid_name(name: &str) -> bool {
    let Some((module, function)) = name.split_once('.') else { return false };
    !module.is_empty()
        && module.bytes().all(|b| b.is_ascii_lowercase())
        && !function.is_empty()
        && function.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

// The names it suggests come from the full build.
#[cfg(test)]
#[cfg(feature = "full")]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_name_gets_the_nearest_known_one() {
        let registry = Registry::standard();
        assert!(registry.unknown("test.pnig").to_string().ends_with("did you mean test.ping?"));
        assert!(registry.unknown("cmd.rn").to_string().ends_with("did you mean cmd.run?"));
        assert!(registry.unknown("pkg.instal").to_string().ends_with("did you mean pkg.install?"));
        let salt = registry.unknown("state.apply").to_string();
        assert!(salt.contains("halite's way to do that is plan.apply"), "{salt}");
        assert!(registry.unknown("grains.item").to_string().ends_with("grains.get"), "not grains.items");
        let error = registry.unknown("servce.restart").to_string();
        assert_eq!(error, "unknown function \"servce.restart\"; did you mean service.restart?");
        assert!(registry.unknown("zz.top").to_string().contains("sys.list_functions"));
    }

    #[test]
    fn every_function_has_a_valid_unique_name_docs_and_a_schema() {
        let all = functions::all();
        let registry = Registry::standard();
        assert_eq!(registry.iter().count(), all.len(), "duplicate function names");
        for f in registry.iter() {
            assert!(valid_name(f.name()), "{} does not match ^[a-z]+\\.[a-z_]+$", f.name());
            assert!(f.doc().len() > 20, "{} has no real docs", f.name());
            let schema = f.schema();
            assert_eq!(schema["type"], "object", "{}: {schema}", f.name());
            let rendered = crate::docs::render_function(f);
            assert!(rendered.contains(f.name()));
            for positional in f.positional() {
                assert!(
                    schema["properties"].get(&positional).is_some(),
                    "{}: positional {positional} not in schema",
                    f.name()
                );
            }
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("pkg.install"));
        assert!(valid_name("mysql.create_user"));
        assert!(!valid_name("Pkg.install"));
        assert!(!valid_name("pkg"));
        assert!(!valid_name("pkg.in-stall"));
        assert!(!valid_name("a.b.c"));
    }
}
