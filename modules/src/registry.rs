//! The list of every function a minion offers.

use std::collections::BTreeMap;

use crate::function::Function;
use crate::functions;

/// Every function, by name.
pub struct Registry {
    functions: BTreeMap<&'static str, Box<dyn Function>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.functions.keys()).finish()
    }
}

impl Registry {
    /// The built-in functions.
    pub fn standard() -> Self {
        let mut functions = BTreeMap::new();
        for function in functions::all() {
            functions.insert(function.name(), function);
        }
        Registry { functions }
    }

    /// Looks a function up.
    pub fn get(&self, name: &str) -> Option<&dyn Function> {
        self.functions.get(name).map(|f| f.as_ref())
    }

    /// Every function, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Function> {
        self.functions.values().map(|f| f.as_ref())
    }

    /// Names and docs, for `sys.*` and the minion's hello.
    pub fn docs(&self) -> BTreeMap<String, String> {
        self.iter().map(|f| (f.name().to_owned(), f.doc().to_owned())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_has_a_valid_unique_name_and_docs() {
        let all = functions::all();
        let registry = Registry::standard();
        assert_eq!(registry.iter().count(), all.len(), "duplicate function names");
        for f in registry.iter() {
            let (module, function) = f.name().split_once('.').unwrap_or_else(|| panic!("{} has no module", f.name()));
            assert!(!module.is_empty() && module.bytes().all(|b| b.is_ascii_lowercase()), "{}", f.name());
            assert!(
                !function.is_empty() && function.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                f.name()
            );
            assert!(f.doc().len() > 20, "{} has no real docs", f.name());
        }
    }
}
