//! Which events senders may put on the bus: a minion's by the `[[events]]` rule naming it (its
//! tag, size and rate), an engine's (`fire_event`) by the engines' rate. One token bucket per
//! sender, minions' and engines' apart; refusals are counted for operators. It decides; the master emits what passes and
//! reports what does not.

use std::collections::HashMap;
use std::time::Instant;

use halite_protocol::message::Value;

use crate::acl::{self, EventRule, RateLimiter};

/// The senders' token buckets and the count of minion events refused.
#[derive(Debug, Default)]
pub struct EventGate {
    /// By minion id.
    minions: HashMap<String, RateLimiter>,
    /// By engine principal: apart from the minions', whatever the names.
    engines: HashMap<String, RateLimiter>,
    denied: u64,
}

impl EventGate {
    /// Whether minion `id` may send an event `tag` with `data` now, by the first of `rules`
    /// naming it; why not otherwise (the refusal is counted).
    pub fn minion_event(
        &mut self,
        rules: &[EventRule],
        id: &str,
        tag: &str,
        data: &Value,
        now: Instant,
    ) -> Result<(), &'static str> {
        let refusal = if !acl::valid_tag(tag) {
            Some("malformed tag")
        } else if acl::reserved_tag(tag) {
            Some("reserved namespace")
        } else {
            // Borrowed, not cloned: this runs for every minion event.
            match rules.iter().find(|r| acl::any_glob(&r.minions, id)) {
                None => Some("no event rule for this minion"),
                Some(rule) if !acl::any_glob(&rule.allow, tag) => Some("tag not allowed"),
                Some(rule) if serde_json::to_vec(data).map_or(usize::MAX, |b| b.len()) > rule.max_bytes => {
                    Some("event too large")
                }
                Some(rule) => {
                    (!allow(&mut self.minions, id, rule.rate_per_sec, rule.burst, now)).then_some("rate limit exceeded")
                }
            }
        };
        match refusal {
            None => Ok(()),
            Some(reason) => {
                self.denied += 1;
                Err(reason)
            }
        }
    }

    /// Whether engine `principal` may fire one more event now, at `rate_per_sec` with `burst`.
    pub fn engine_event(&mut self, principal: &str, rate_per_sec: f64, burst: f64, now: Instant) -> bool {
        allow(&mut self.engines, principal, rate_per_sec, burst, now)
    }

    /// Minion events refused since start.
    pub fn denied_total(&self) -> u64 {
        self.denied
    }
}

/// Takes a token from `sender`'s bucket in `buckets` (a new one starts full); whether there was
/// one.
fn allow(
    buckets: &mut HashMap<String, RateLimiter>,
    sender: &str,
    rate_per_sec: f64,
    burst: f64,
    now: Instant,
) -> bool {
    if !buckets.contains_key(sender) {
        buckets.insert(sender.to_owned(), RateLimiter::new(burst, now));
    }
    buckets.get_mut(sender).is_some_and(|bucket| bucket.allow(rate_per_sec, burst, now))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn rule(minions: &str, allow: &str, max_bytes: usize) -> EventRule {
        EventRule { minions: vec![minions.into()], allow: vec![allow.into()], rate_per_sec: 1.0, burst: 2.0, max_bytes }
    }

    /// A minion's event passes only through the first rule naming it, within its tags, size
    /// and rate; each refusal says why and is counted.
    #[test]
    fn a_minion_event_passes_by_its_rule_and_each_refusal_is_counted() {
        let rules = [rule("web*", "app/*", 64), rule("*", "anything/*", 1024)];
        let (mut gate, now, small) = (EventGate::default(), Instant::now(), Value::from("ok"));
        assert_eq!(gate.minion_event(&rules, "web1", "app/deployed", &small, now), Ok(()));
        assert_eq!(gate.minion_event(&rules, "web1", "anything/x", &small, now), Err("tag not allowed"));
        assert_eq!(gate.minion_event(&rules, "web1", "halite/job/1/done", &small, now), Err("reserved namespace"));
        assert_eq!(gate.minion_event(&rules, "web1", "app/../x", &small, now), Err("malformed tag"));
        let large = Value::from("x".repeat(100));
        assert_eq!(gate.minion_event(&rules, "web1", "app/big", &large, now), Err("event too large"));
        assert_eq!(gate.minion_event(&[], "web1", "app/x", &small, now), Err("no event rule for this minion"));
        assert_eq!(gate.denied_total(), 5);

        // A burst of two, then one a second; each minion has its own bucket.
        assert_eq!(gate.minion_event(&rules, "web1", "app/second", &small, now), Ok(()));
        assert_eq!(gate.minion_event(&rules, "web1", "app/third", &small, now), Err("rate limit exceeded"));
        assert_eq!(gate.minion_event(&rules, "web2", "app/first", &small, now), Ok(()));
        let later = now + Duration::from_secs(1);
        assert_eq!(gate.minion_event(&rules, "web1", "app/later", &small, later), Ok(()));
        assert_eq!(gate.denied_total(), 6);
    }

    /// An engine's events have their own bucket, apart from any minion's, whatever the names.
    #[test]
    fn an_engines_events_have_their_own_bucket() {
        let (mut gate, now) = (EventGate::default(), Instant::now());
        assert!(gate.engine_event("heat", 1.0, 1.0, now));
        assert!(!gate.engine_event("heat", 1.0, 1.0, now));
        let rules = [rule("*", "app/*", 64)];
        assert_eq!(gate.minion_event(&rules, "heat", "app/x", &Value::Null, now), Ok(()));
        assert_eq!(gate.minion_event(&rules, "principal:heat", "app/x", &Value::Null, now), Ok(()));
        assert!(gate.engine_event("heat", 1.0, 1.0, now + Duration::from_secs(1)));
        assert_eq!(gate.denied_total(), 0, "an engine's refusal is the caller's to report");
    }
}
