//! The registries the core keeps in memory: which minion ids have an accepted key (the universe
//! targets resolve against) and which key, what each minion announced (grains, functions, when
//! it was last seen), and the client principals. Loaded from the store at start and kept in
//! step with it by the code that changes the store; nothing here writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use halite_protocol::message::Value;

use crate::store::{MinionRecord, PrincipalRecord};

/// What the registry knows of a minion.
#[derive(Debug, Clone, Default)]
pub struct MinionEntry {
    pub grains: BTreeMap<String, Value>,
    pub functions: Vec<String>,
    pub last_seen_ms: u64,
    /// Every function it has, policy aside, as it said when it last connected here (none when
    /// it did not: nothing is refused for it). Shared between minions that have the same.
    pub installed: Option<std::sync::Arc<BTreeSet<String>>>,
}

/// The most distinct `installed` lists shared (see [`Registry::intern_installed`]).
const MAX_INSTALLED_SETS: usize = 1024;

/// The most function names kept of one minion's `installed` list (past it: not kept, so a
/// minion cannot make the master hold an unbounded list).
pub const MAX_INSTALLED: usize = 4096;

/// Keys, minions and principals, as the core holds them.
#[derive(Debug, Default)]
pub struct Registry {
    /// Ids with an accepted key: the universe targets are resolved against.
    accepted: BTreeSet<String>,
    /// Their accepted keys: a reconnecting minion is admitted without a store round trip.
    accepted_keys: HashMap<String, [u8; 32]>,
    /// What each minion announced.
    minions: HashMap<String, MinionEntry>,
    /// Registered client principals by name (root is not among them).
    principals: HashMap<String, PrincipalRecord>,
    /// The distinct `installed` lists minions announced, each held once.
    installed_sets: std::collections::HashSet<std::sync::Arc<BTreeSet<String>>>,
}

/// The grains of a minion nobody has heard from.
static NO_GRAINS: BTreeMap<String, Value> = BTreeMap::new();

impl Registry {
    /// The shared copy of an `installed` list (none past [`MAX_INSTALLED`] names, or empty).
    pub fn intern_installed(&mut self, names: Vec<String>) -> Option<std::sync::Arc<BTreeSet<String>>> {
        if names.is_empty() || names.len() > MAX_INSTALLED {
            return None;
        }
        let set: BTreeSet<String> = names.into_iter().collect();
        if let Some(shared) = self.installed_sets.get(&set) {
            return Some(shared.clone());
        }
        let shared = std::sync::Arc::new(set);
        // Fleets have a few versions; a minion sending a new list at every connection does
        // not grow this past a bound (its list is then its own).
        if self.installed_sets.len() < MAX_INSTALLED_SETS {
            self.installed_sets.insert(shared.clone());
        }
        Some(shared)
    }

    /// A minion's grains (empty when unknown).
    pub fn grains(&self, id: &str) -> &BTreeMap<String, Value> {
        self.minions.get(id).map_or(&NO_GRAINS, |m| &m.grains)
    }

    /// Replaces the accepted keys (at start, and after the store changed them).
    pub fn set_accepted(&mut self, keys: impl IntoIterator<Item = (String, [u8; 32])>) {
        self.accepted_keys = keys.into_iter().collect();
        self.accepted = self.accepted_keys.keys().cloned().collect();
    }

    /// Takes the accepted keys as read: all of them, or those of some ids.
    pub fn take_accepted(&mut self, keys: AcceptedKeys) {
        match keys {
            AcceptedKeys::All(keys) => self.set_accepted(keys),
            AcceptedKeys::Of(of) => {
                for (id, key) in of {
                    self.set_accepted_of(&id, key);
                }
            }
        }
    }

    /// Records a newly accepted key for `id`.
    pub fn accept(&mut self, id: &str, key: [u8; 32]) {
        self.accepted.insert(id.to_owned());
        self.accepted_keys.insert(id.to_owned(), key);
    }

    /// Sets (or, with `None`, removes) the accepted key of one id, as the store now has it.
    pub fn set_accepted_of(&mut self, id: &str, key: Option<[u8; 32]>) {
        match key {
            Some(key) => self.accept(id, key),
            None => {
                self.accepted.remove(id);
                self.accepted_keys.remove(id);
            }
        }
    }

    /// Whether `id` has an accepted key.
    pub fn has_accepted(&self, id: &str) -> bool {
        self.accepted.contains(id)
    }

    /// The ids with an accepted key, in order.
    pub fn accepted_ids(&self) -> &BTreeSet<String> {
        &self.accepted
    }

    /// What a minion announced, if it ever connected.
    pub fn minion(&self, id: &str) -> Option<&MinionEntry> {
        self.minions.get(id)
    }

    /// What a minion announced, to change (an empty entry for one never heard from).
    pub fn minion_mut(&mut self, id: &str) -> &mut MinionEntry {
        self.minions.entry(id.to_owned()).or_default()
    }

    /// Sets what a minion announced (loaded from the store, or told by another master).
    pub fn set_minion(&mut self, id: String, entry: MinionEntry) {
        self.minions.insert(id, entry);
    }

    /// Why `function` cannot be sent: none of the targeted minions has it, as each said which
    /// functions it has when it connected here (one that did not say may have it: the job
    /// goes). Named, with the nearest name they have or halite's way for a Salt name, so a
    /// typo is not sent to every minion to fail there. On a mixed fleet, the minions that have
    /// it run it and the others answer for themselves.
    pub fn function_missing(&self, function: &str, targets: &[String]) -> Option<String> {
        let mut lacking: Vec<&str> = Vec::new();
        let mut known: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for id in targets {
            // One that did not say may have it.
            let installed = self.minion(id).and_then(|m| m.installed.as_ref())?;
            if installed.contains(function) {
                return None;
            }
            lacking.push(id);
            known.extend(installed.iter().map(String::as_str));
        }
        if lacking.is_empty() {
            return None;
        }
        const SHOWN: usize = 10;
        let mut named = lacking.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
        if lacking.len() > SHOWN {
            named.push_str(&format!(" and {} more", lacking.len() - SHOWN));
        }
        let hint = halite_protocol::function_names::hint(function, known);
        Some(format!(
            "{function} is not a function of {} targeted minion(s): {named}; nothing was sent{hint}",
            lacking.len()
        ))
    }

    /// Minion `id` was seen at `wall_ms` (its hello, its session's end): its record as it is
    /// now, to write with the next batch.
    pub fn seen(&mut self, id: &str, wall_ms: u64) -> MinionRecord {
        let entry = self.minion_mut(id);
        entry.last_seen_ms = wall_ms;
        MinionRecord {
            id: id.to_owned(),
            grains: entry.grains.clone(),
            functions: entry.functions.clone(),
            last_seen_ms: wall_ms,
        }
    }

    /// Forgets what a minion announced (its key was deleted or is no longer accepted).
    pub fn forget_minion(&mut self, id: &str) {
        self.minions.remove(id);
    }

    /// A registered principal.
    pub fn principal(&self, name: &str) -> Option<&PrincipalRecord> {
        self.principals.get(name)
    }

    /// The registered principals.
    pub fn principals(&self) -> impl Iterator<Item = &PrincipalRecord> {
        self.principals.values()
    }

    /// The tenants principals are confined to (a name once per principal confined to it).
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.principals.values().filter_map(|p| p.acl.tenant.as_deref())
    }

    /// Replaces the principals (at start, and after the store changed them).
    pub fn set_principals(&mut self, principals: impl IntoIterator<Item = PrincipalRecord>) {
        self.principals = principals.into_iter().map(|p| (p.name.clone(), p)).collect();
    }

    /// Whether `key` is the accepted key of `id`.
    pub fn is_accepted(&self, id: &str, key: &[u8; 32]) -> bool {
        self.accepted_keys.get(id) == Some(key)
    }
}

/// Accepted keys as reread.
#[derive(Debug)]
pub enum AcceptedKeys {
    /// Every accepted key.
    All(Vec<(String, [u8; 32])>),
    /// The accepted key of each id named (the last accepted row, as a full reread keeps it),
    /// `None` for an id with none.
    Of(Vec<(String, Option<[u8; 32]>)>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeing a minion dates it and gives the record to write: what it announced, as it is now.
    #[test]
    fn a_minion_seen_is_dated_and_its_record_carries_what_it_announced() {
        let mut registry = Registry::default();
        let first = registry.seen("web1", 5);
        assert_eq!((first.id.as_str(), first.last_seen_ms, first.functions.len()), ("web1", 5, 0));
        let entry = registry.minion_mut("web1");
        entry.functions = vec!["test.ping".into()];
        entry.grains.insert("os".into(), Value::from("debian"));
        let again = registry.seen("web1", 9);
        assert_eq!(again.functions, ["test.ping"]);
        assert_eq!(again.grains.get("os"), Some(&Value::from("debian")));
        assert_eq!(registry.minion("web1").map(|m| m.last_seen_ms), Some(9));
    }

    /// A function is missing only when every targeted minion said what it has and none has
    /// it; the message names them (ten at most) with the nearest name they have.
    #[test]
    fn a_function_is_missing_only_when_every_target_said_it_lacks_it() {
        let mut registry = Registry::default();
        let installed = registry.intern_installed(vec!["test.ping".into(), "cmd.run".into()]);
        for i in 0..12 {
            registry.minion_mut(&format!("m{i:02}")).installed = installed.clone();
        }
        let targets: Vec<String> = (0..12).map(|i| format!("m{i:02}")).collect();
        assert_eq!(registry.function_missing("test.ping", &targets), None);
        let why = registry.function_missing("test.pong", &targets).unwrap();
        assert!(why.starts_with("test.pong is not a function of 12 targeted minion(s): m00, m01"), "{why}");
        assert!(why.contains("m09 and 2 more; nothing was sent") && why.contains("test.ping"), "{why}");
        registry.minion_mut("silent");
        let with_silent = [targets[0].clone(), "silent".to_owned()];
        assert_eq!(registry.function_missing("test.pong", &with_silent), None, "one that did not say may have it");
    }
}
