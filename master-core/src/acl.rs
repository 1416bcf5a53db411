//! Access rules the master enforces: which events minions may send, which jobs minions may
//! publish on their peers, and what client principals may run. All matching is anchored globs
//! (`test.ping` never allows `test.pingX`) or target expressions; nothing is a prefix match.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use halite_protocol::glob;
use halite_protocol::message::{TargetKind, Value};
use serde::Deserialize;

use crate::target::{Expr, TargetError};

/// `[[events]]`: events minions may send.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventRule {
    /// Minion id globs this rule applies to.
    pub minions: Vec<String>,
    /// Tag globs (relative to the minion's namespace) they may send.
    pub allow: Vec<String>,
    /// Sustained events per second per minion.
    #[serde(default = "default_rate")]
    pub rate_per_sec: f64,
    /// Events a minion may send in a burst.
    #[serde(default = "default_burst")]
    pub burst: f64,
    /// Largest event body, in bytes of JSON.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
}

fn default_rate() -> f64 {
    10.0
}
fn default_burst() -> f64 {
    20.0
}
fn default_max_bytes() -> usize {
    64 * 1024
}

/// `[[peers]]`: jobs minions may publish on other minions.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerRule {
    /// Minion id globs of the minions allowed to publish.
    pub minions: Vec<String>,
    /// Compound target expression every targeted minion must match.
    pub target: String,
    /// Function globs they may call.
    pub functions: Vec<String>,
}

/// Whether any glob matches.
pub fn any_glob(globs: &[String], text: &str) -> bool {
    globs.iter().any(|g| glob::matches(g, text))
}

/// Tags a minion may never send, whatever the ACL says: they imitate master events or another
/// namespace.
pub fn reserved_tag(tag: &str) -> bool {
    tag.starts_with("halite/") || tag.starts_with("minion/") || tag == "halite" || tag == "minion"
}

/// Whether a tag is well-formed: 1–255 bytes of `A-Za-z0-9_.-/`, no empty or `..` segment.
pub fn valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 255
        && !tag.split('/').any(|part| part.is_empty() || part == "..")
        && tag.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'))
}

/// Checks that `targets` (resolved minion ids with their grains) are all within `expr`.
pub fn all_within(
    expr: &str,
    nodegroups: &BTreeMap<String, String>,
    targets: &[(&str, &BTreeMap<String, Value>)],
) -> Result<bool, TargetError> {
    let allowed = Expr::parse(TargetKind::Compound, expr, nodegroups)?;
    Ok(targets.iter().all(|(id, grains)| allowed.matches(id, grains)))
}

/// Whether a rule's argument constraints hold for these keyword arguments.
pub fn args_allowed(constraints: &BTreeMap<String, String>, kwargs: &BTreeMap<String, Value>) -> bool {
    constraints.iter().all(|(name, pattern)| {
        let Some(Value::String(value)) = kwargs.get(name) else { return false };
        regex::Regex::new(&format!("^(?:{pattern})$")).is_ok_and(|re| re.is_match(value))
    })
}

/// A token bucket.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(burst: f64, now: Instant) -> Self {
        RateLimiter { tokens: burst, last: now }
    }

    /// Takes one token if there is one.
    pub fn allow(&mut self, rate: f64, burst: f64, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Rate-limits a notice (such as `halite/acl/denied`) to one per interval per key.
#[derive(Debug, Default)]
pub struct NoticeThrottle {
    last: BTreeMap<String, Instant>,
}

impl NoticeThrottle {
    /// Whether a notice for `key` may go out now.
    pub fn ready(&mut self, key: &str, every: Duration, now: Instant) -> bool {
        match self.last.get(key) {
            Some(t) if now.saturating_duration_since(*t) < every => false,
            _ => {
                self.last.insert(key.to_owned(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matching_is_anchored() {
        let functions = vec!["test.ping".to_owned(), "service.*".to_owned()];
        assert!(any_glob(&functions, "test.ping"));
        assert!(!any_glob(&functions, "test.pingX"));
        assert!(!any_glob(&functions, "xtest.ping"));
        assert!(any_glob(&functions, "service.restart"));
        assert!(!any_glob(&functions, "services.restart"));
    }

    #[test]
    fn tags_and_reserved_namespaces() {
        assert!(valid_tag("app/ready"));
        assert!(!valid_tag("app//ready") && !valid_tag("../x") && !valid_tag("a b") && !valid_tag(""));
        assert!(reserved_tag("halite/job/x/publish"));
        assert!(reserved_tag("minion/db1/app/ready"));
        assert!(!reserved_tag("app/halite"));
    }

    #[test]
    fn targets_and_arguments_must_fit_the_rule() {
        let grains = BTreeMap::from([("os".to_owned(), json!("Debian"))]);
        let none = BTreeMap::new();
        let groups = BTreeMap::new();
        assert!(all_within("web*", &groups, &[("web1", &grains), ("web2", &none)]).unwrap());
        assert!(!all_within("web*", &groups, &[("web1", &grains), ("db1", &none)]).unwrap());
        assert!(all_within("G@os:Debian", &groups, &[("db1", &grains)]).unwrap());
        let constraints = BTreeMap::from([("name".to_owned(), "nginx|apache2".to_owned())]);
        assert!(args_allowed(&constraints, &BTreeMap::from([("name".to_owned(), json!("nginx"))])));
        assert!(!args_allowed(&constraints, &BTreeMap::from([("name".to_owned(), json!("nginx-evil"))])));
        assert!(!args_allowed(&constraints, &BTreeMap::new()));
    }

    #[test]
    fn buckets_refill_at_the_rate() {
        let t0 = Instant::now();
        let mut bucket = RateLimiter::new(2.0, t0);
        assert!(bucket.allow(1.0, 2.0, t0));
        assert!(bucket.allow(1.0, 2.0, t0));
        assert!(!bucket.allow(1.0, 2.0, t0));
        assert!(bucket.allow(1.0, 2.0, t0 + Duration::from_secs(1)));
        let mut throttle = NoticeThrottle::default();
        assert!(throttle.ready("web1", Duration::from_secs(1), t0));
        assert!(!throttle.ready("web1", Duration::from_secs(1), t0 + Duration::from_millis(10)));
        assert!(throttle.ready("db1", Duration::from_secs(1), t0));
    }
}
