//! The event bus: who is subscribed to which tags. Delivery goes through each subscriber's
//! bounded send queue; an event that does not fit is dropped and counted, and the subscriber
//! gets a `halite/bus/dropped` notice with the count as soon as there is room again, so a slow
//! subscriber costs bounded memory and learns what it missed.

use std::collections::HashMap;

use halite_protocol::glob;
use halite_transport::PeerId;

#[derive(Debug)]
struct Subscription {
    patterns: Vec<String>,
    /// Tag globs this subscriber may see at all (`None`: everything, for root).
    allowed: Option<Vec<String>>,
    dropped: u64,
}

/// Subscriptions by client connection.
#[derive(Debug, Default)]
pub struct Bus {
    subscribers: HashMap<PeerId, Subscription>,
}

impl Bus {
    /// Replaces a client's subscription.
    pub fn subscribe(&mut self, peer: PeerId, patterns: Vec<String>, allowed: Option<Vec<String>>) {
        self.subscribers.insert(peer, Subscription { patterns, allowed, dropped: 0 });
    }

    /// Forgets a client.
    pub fn unsubscribe(&mut self, peer: PeerId) {
        self.subscribers.remove(&peer);
    }

    /// Subscribers that should receive an event with this tag.
    pub fn recipients(&self, tag: &str) -> Vec<PeerId> {
        self.subscribers
            .iter()
            .filter(|(_, s)| s.patterns.iter().any(|p| glob::matches(p, tag)))
            .filter(|(_, s)| s.allowed.as_ref().is_none_or(|a| a.iter().any(|p| glob::matches(p, tag))))
            .map(|(peer, _)| *peer)
            .collect()
    }

    /// Counts an event a subscriber's queue had no room for.
    pub fn dropped(&mut self, peer: PeerId) {
        if let Some(s) = self.subscribers.get_mut(&peer) {
            s.dropped += 1;
        }
    }

    /// Takes the count of events dropped for a subscriber since its last notice.
    pub fn take_dropped(&mut self, peer: PeerId) -> u64 {
        self.subscribers.get_mut(&peer).map_or(0, |s| std::mem::take(&mut s.dropped))
    }

    /// Gives back a count that could not be reported yet.
    pub fn restore_dropped(&mut self, peer: PeerId, count: u64) {
        if let Some(s) = self.subscribers.get_mut(&peer) {
            s.dropped += count;
        }
    }

    /// Whether nobody is subscribed (events are then not even built).
    pub fn is_empty(&self) -> bool {
        self.subscribers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_allowances_both_apply() {
        let mut bus = Bus::default();
        bus.subscribe(PeerId(1), vec!["minion/*".into()], None);
        bus.subscribe(PeerId(2), vec!["*".into()], Some(vec!["halite/job/*".into()]));
        assert_eq!(bus.recipients("minion/web1/app/ready"), vec![PeerId(1)]);
        assert_eq!(bus.recipients("halite/job/1/new"), vec![PeerId(2)]);
        assert!(bus.recipients("halite/key/web1/accepted").is_empty());
        bus.dropped(PeerId(1));
        bus.dropped(PeerId(1));
        assert_eq!(bus.take_dropped(PeerId(1)), 2);
        assert_eq!(bus.take_dropped(PeerId(1)), 0);
        bus.unsubscribe(PeerId(1));
        assert!(bus.recipients("minion/web1/x").is_empty());
    }
}
