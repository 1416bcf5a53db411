//! Wall-clock time and job ids: the daemon reads the clock here and nowhere else.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Hands out job ids like Salt's: `YYYYMMDDhhmmssffffff` (UTC, microseconds), strictly
/// increasing even when two jobs are published in the same microsecond.
#[derive(Debug, Default)]
pub(crate) struct JidGenerator {
    last: u64,
}

impl JidGenerator {
    /// The next jid.
    pub(crate) fn next(&mut self) -> String {
        let micros = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        self.last = micros.max(self.last + 1);
        halite_protocol::time::compact_utc(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jids_strictly_increase() {
        let mut generator = JidGenerator::default();
        let a = generator.next();
        let b = generator.next();
        assert!(b > a);
    }
}
