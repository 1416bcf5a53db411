//! What a function call may know about its surroundings.

use std::collections::BTreeMap;
use std::sync::Arc;

use halite_protocol::message::Value;

/// Per-call context.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// `test=true`: report what would change without changing it.
    pub test: bool,
    /// This minion's grains, collected at start-up.
    pub grains: Arc<BTreeMap<String, Value>>,
    /// The registry's function names and docs, for `sys.*`.
    pub functions: Arc<BTreeMap<String, String>>,
}
