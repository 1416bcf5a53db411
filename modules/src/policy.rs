//! The minion's local policy: which functions run, for which callers. Default deny for
//! everything that changes the host.

use halite_protocol::glob;
use serde::Deserialize;

/// Functions allowed when the config says nothing: read-only and harmless ones. Anything that
/// changes the host (`cmd.*`, `pkg.install`, `file.*`, `user.*`, `group.*`, `archive.*`,
/// `service.start`, ...) must be opted into.
pub const DEFAULT_ALLOW: &[&str] = &[
    "test.*",
    "grains.*",
    "sys.*",
    "pkg.list",
    "pkg.version",
    "service.status",
    "service.enabled",
    "event.send",
    "plan.run",
    // `halite apply` (Salt's state.apply): its steps are each checked again, as plan.run's.
    "plan.apply",
];

/// Extra rules for callers whose name matches `caller`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerRule {
    /// Caller (principal) glob.
    pub caller: String,
    /// Function globs this caller may call (within the global allow list).
    pub allow: Vec<String>,
}

/// `[policy]` in the minion config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// Function globs that may run besides [`DEFAULT_ALLOW`] (anchored: `pkg.*` matches
    /// `pkg.install`, never `pkgx.y`).
    pub allow: Vec<String>,
    /// `allow` replaces the defaults instead of adding to them (to narrow a minion below the
    /// read-only defaults).
    pub replace_defaults: bool,
    /// Function globs that never run, even if allowed.
    pub deny: Vec<String>,
    /// Whether local custom actions (actions.d) are allowed without listing them.
    pub allow_actions: bool,
    /// Per-caller restrictions: when any rule matches the caller, the function must also be
    /// allowed by one of the matching rules.
    pub callers: Vec<CallerRule>,
    /// Directories `file.read` and `file.stat` are confined to (resolved, links followed);
    /// unset: anywhere but the minion's own secrets, which no function ever reaches.
    pub read_paths: Option<Vec<std::path::PathBuf>>,
    /// The virtualenvs or Python interpreters a caller may name as `pkg.*`'s `bin_env` (the
    /// interpreter runs as the minion's user, so the caller never chooses it); empty: `bin_env`
    /// is refused and pip runs `python3`.
    pub pip_bin_envs: Vec<std::path::PathBuf>,
    /// Where the policy was read, for refusals to say where to change it.
    #[serde(skip)]
    pub source: Option<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow: Vec::new(),
            replace_defaults: false,
            deny: Vec::new(),
            allow_actions: true,
            callers: Vec::new(),
            read_paths: None,
            pip_bin_envs: Vec::new(),
            source: None,
        }
    }
}

impl Policy {
    /// Allows everything (for tests and demos).
    pub fn allow_all() -> Self {
        Policy { allow: vec!["*".into()], ..Policy::default() }
    }

    /// `Err(reason)` when `function` may not run for `caller`; the reason says which key of
    /// which file to change.
    pub fn check(&self, function: &str, caller: &str, is_action: bool) -> Result<(), PolicyRefusal> {
        let listed = |globs: &[String]| globs.iter().any(|g| glob::matches(g, function));
        let by_default = !self.replace_defaults && DEFAULT_ALLOW.iter().any(|g| glob::matches(g, function));
        let file = || self.source.as_deref().unwrap_or("the minion's config").to_owned();
        if listed(&self.deny) {
            return Err(PolicyRefusal::Denied { function: function.to_owned(), file: file() });
        }
        if !(by_default || listed(&self.allow) || (is_action && self.allow_actions)) {
            return Err(PolicyRefusal::NotAllowed { function: function.to_owned(), file: file() });
        }
        let rules: Vec<&CallerRule> = self.callers.iter().filter(|r| glob::matches(&r.caller, caller)).collect();
        if !rules.is_empty() && !rules.iter().any(|r| listed(&r.allow)) {
            return Err(PolicyRefusal::Caller {
                function: function.to_owned(),
                caller: caller.to_owned(),
                file: file(),
            });
        }
        Ok(())
    }
}

/// Why the policy refuses a call; each names the file (or "the minion's config") to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyRefusal {
    /// The function matches `[policy] deny`.
    #[error("{function} is denied by this minion's policy ([policy] deny in {file})")]
    Denied {
        /// The function.
        function: String,
        /// The policy's file.
        file: String,
    },
    /// Neither allowed by default nor by `[policy] allow`.
    #[error("{function} is not allowed by this minion's policy (add it to [policy] allow in {file})")]
    NotAllowed {
        /// The function.
        function: String,
        /// The policy's file.
        file: String,
    },
    /// Rules name this caller and none allows the function.
    #[error("{function} is not allowed for caller {caller} ([[policy.callers]] in {file})")]
    Caller {
        /// The function.
        function: String,
        /// The caller.
        caller: String,
        /// The policy's file.
        file: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_denies_what_changes_the_host() {
        let p = Policy::default();
        assert!(p.check("test.ping", "root", false).is_ok());
        assert!(p.check("cmd.run", "root", false).is_err());
        assert!(p.check("pkg.install", "root", false).is_err());
        assert!(p.check("pkg.list", "root", false).is_ok());
        assert!(p.check("mysql.create_user", "root", true).is_ok());
    }

    #[test]
    fn globs_are_anchored_and_deny_wins() {
        let p = Policy {
            allow: vec!["pkg.*".into(), "cmd.run".into()],
            deny: vec!["pkg.remove".into()],
            ..Policy::default()
        };
        assert!(p.check("pkg.install", "x", false).is_ok());
        assert!(p.check("pkg.remove", "x", false).is_err());
        assert!(p.check("pkgx.install", "x", false).is_err());
        assert!(p.check("cmd.run_all", "x", false).is_err());
    }

    #[test]
    fn caller_rules_narrow_what_a_caller_may_call() {
        let p = Policy {
            allow: vec!["*".into()],
            callers: vec![CallerRule { caller: "ci-*".into(), allow: vec!["service.restart".into()] }],
            ..Policy::default()
        };
        assert!(p.check("service.restart", "ci-runner", false).is_ok());
        assert!(p.check("cmd.run", "ci-runner", false).is_err());
        assert!(p.check("cmd.run", "root", false).is_ok());
    }

    #[test]
    fn allow_adds_to_the_defaults_unless_it_replaces_them_and_refusals_say_where_to_change_it() {
        let parse = |text: &str| -> Policy { toml::from_str(text).unwrap() };
        let extended = Policy { source: Some("/etc/halite/minion.toml".into()), ..parse("allow = [\"cmd.run\"]") };
        assert!(extended.check("cmd.run", "root", false).is_ok());
        assert!(extended.check("pkg.version", "root", false).is_ok(), "the defaults stay");
        let refused = extended.check("pkg.install", "root", false).unwrap_err().to_string();
        assert!(refused.contains("[policy] allow in /etc/halite/minion.toml"), "{refused}");
        let narrowed = parse("allow = [\"test.ping\"]\nreplace_defaults = true\ndeny = [\"test.echo\"]");
        assert!(narrowed.check("test.ping", "root", false).is_ok());
        assert!(narrowed.check("grains.items", "root", false).is_err(), "defaults replaced");
        let denied = narrowed.check("test.echo", "root", false).unwrap_err().to_string();
        assert!(denied.contains("[policy] deny in the minion's config"), "{denied}");
    }
}
