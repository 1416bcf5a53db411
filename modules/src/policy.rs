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
    /// Function globs that may run (anchored: `pkg.*` matches `pkg.install`, never `pkgx.y`).
    pub allow: Vec<String>,
    /// Function globs that never run, even if allowed.
    pub deny: Vec<String>,
    /// Whether local custom actions (actions.d) are allowed without listing them.
    pub allow_actions: bool,
    /// Per-caller restrictions: when any rule matches the caller, the function must also be
    /// allowed by one of the matching rules.
    pub callers: Vec<CallerRule>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow: DEFAULT_ALLOW.iter().map(|s| (*s).to_owned()).collect(),
            deny: Vec::new(),
            allow_actions: true,
            callers: Vec::new(),
        }
    }
}

impl Policy {
    /// Allows everything (for tests and demos).
    pub fn allow_all() -> Self {
        Policy { allow: vec!["*".into()], ..Policy::default() }
    }

    /// `Err(reason)` when `function` may not run for `caller`.
    pub fn check(&self, function: &str, caller: &str, is_action: bool) -> Result<(), String> {
        let listed = |globs: &[String]| globs.iter().any(|g| glob::matches(g, function));
        if listed(&self.deny) {
            return Err(format!("{function} is denied by this minion's policy"));
        }
        if !(listed(&self.allow) || (is_action && self.allow_actions)) {
            return Err(format!("{function} is not allowed by this minion's policy"));
        }
        let rules: Vec<&CallerRule> = self.callers.iter().filter(|r| glob::matches(&r.caller, caller)).collect();
        if !rules.is_empty() && !rules.iter().any(|r| listed(&r.allow)) {
            return Err(format!("{function} is not allowed for caller {caller}"));
        }
        Ok(())
    }
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
}
