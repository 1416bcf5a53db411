//! The bus's recent past: every event this master published, with an id (`<epoch>-<seq>`,
//! the epoch being when the master started), kept within a count and a byte budget, so a
//! client that lost its subscription (an SSE stream that dropped, a restarted engine) can
//! resume after the last id it saw instead of missing what came meanwhile.

use std::collections::VecDeque;

use halite_protocol::message::Value;

/// Events kept at most, and their bytes (tags and bodies as held) at most.
const MAX_EVENTS: usize = 16_384;
const MAX_BYTES: usize = 8 << 20;

/// One published event. Its body is held as JSON text, decoded again only for a resume: a
/// value tree takes several times its text's size (a node and an allocation per map entry),
/// and the budget has to bound what the log really holds.
#[derive(Debug)]
pub struct Logged {
    pub seq: u64,
    pub tag: String,
    data: String,
}

impl Logged {
    /// The event's body.
    pub fn data(&self) -> Value {
        // Written by `record` from a value, so it reads back; `null` would only mean a bug.
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }

    fn bytes(&self) -> usize {
        self.tag.len() + self.data.len()
    }
}

/// What a resume finds.
#[derive(Debug)]
pub struct Since<'a> {
    /// The events after the id, oldest first.
    pub events: Vec<&'a Logged>,
    /// Why some events after the id may be missing (too old, another master run, a bad id).
    pub gap: Option<String>,
}

/// See the module docs.
#[derive(Debug)]
pub struct EventLog {
    epoch: u64,
    next: u64,
    events: VecDeque<Logged>,
    bytes: usize,
}

impl EventLog {
    /// An empty log for a master that started at `epoch` (Unix milliseconds).
    pub fn new(epoch: u64) -> Self {
        EventLog { epoch, next: 1, events: VecDeque::new(), bytes: 0 }
    }

    /// The id of the event numbered `seq`.
    pub fn id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.epoch)
    }

    /// Records an event; its number.
    pub fn record(&mut self, tag: &str, data: &Value) -> u64 {
        let seq = self.next;
        self.next += 1;
        let logged = Logged { seq, tag: tag.to_owned(), data: data.to_string() };
        self.bytes += logged.bytes();
        self.events.push_back(logged);
        while self.events.len() > MAX_EVENTS || self.bytes > MAX_BYTES {
            match self.events.pop_front() {
                Some(old) => self.bytes -= old.bytes(),
                None => break,
            }
        }
        seq
    }

    /// The events after `id`, and whether some may be missing.
    pub fn since(&self, id: &str) -> Since<'_> {
        let parsed =
            id.split_once('-').and_then(|(epoch, seq)| Some((epoch.parse::<u64>().ok()?, seq.parse::<u64>().ok()?)));
        let (after, gap) = match parsed {
            None => (0, Some(format!("{id:?} is not an event id"))),
            Some((epoch, _)) if epoch != self.epoch => (0, Some("the master restarted since that event".into())),
            Some((_, seq)) if seq >= self.next => (0, Some("that event id is from the future".into())),
            Some((_, seq)) => {
                let oldest = self.events.front().map_or(self.next, |e| e.seq);
                let gap = (seq + 1 < oldest).then(|| "events after it were no longer kept".to_owned());
                (seq, gap)
            }
        };
        Since { events: self.events.iter().filter(|e| e.seq > after).collect(), gap }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resuming_gives_what_came_after_and_says_when_something_is_missing() {
        let mut log = EventLog::new(7);
        for i in 0..5 {
            log.record(&format!("t/{i}"), &json!(i));
        }
        let since = log.since("7-3");
        assert_eq!(since.events.iter().map(|e| e.tag.as_str()).collect::<Vec<_>>(), ["t/3", "t/4"]);
        assert_eq!(since.events.iter().map(|e| e.data()).collect::<Vec<_>>(), [json!(3), json!(4)]);
        assert!(since.gap.is_none());
        assert!(log.since("7-5").events.is_empty(), "nothing after the newest");
        let restarted = log.since("6-3");
        assert_eq!(restarted.events.len(), 5, "everything held");
        assert_eq!(restarted.gap.as_deref(), Some("the master restarted since that event"));
        assert!(log.since("nonsense").gap.is_some());
        assert!(log.since("7-99").gap.is_some());
        assert_eq!(log.id(4), "7-4");
    }

    #[test]
    fn the_log_keeps_within_its_budget_and_reports_what_fell_out() {
        let mut log = EventLog::new(1);
        let big = json!("x".repeat(1 << 20));
        for _ in 0..20 {
            log.record("big", &big);
        }
        assert!(log.bytes <= MAX_BYTES && log.events.len() < 20);
        let since = log.since("1-1");
        assert_eq!(since.gap.as_deref(), Some("events after it were no longer kept"));
        assert_eq!(since.events.last().map(|e| e.seq), Some(20));
    }
}
