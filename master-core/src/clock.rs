//! Time as the core is given it, and the ids it makes. The core reads no clock: the driver reads
//! its clocks and hands the readings in as a [`Now`]. Two clocks, kept apart on purpose: the
//! monotonic one measures every timeout, TTL and rate, so a wall-clock step never makes one
//! longer or shorter; the wall clock only stamps records and seeds jids.

use std::time::Instant;

/// The time a handler is given: read once when its desk is lent, so everything it decides
/// in one piece of work is decided as of one instant, and no handler reads a clock.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Monotonic: deadlines and rates.
    pub at: Instant,
    /// Wall clock, Unix milliseconds: what records are stamped with.
    pub wall_ms: u64,
    /// Wall clock, Unix microseconds: what jids are made of.
    pub wall_micros: u64,
    /// How far the wall clock is set from this host's own (the driver's clock).
    pub offset_ms: i64,
}

/// A random (version 4) UUID, the form of Heat's config and deployment ids.
pub fn new_uuid() -> String {
    use rand_core::RngCore;
    let mut b = [0u8; 16];
    rand_core::OsRng.fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = halite_protocol::hex::encode(&b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Hands out job ids like Salt's: `YYYYMMDDhhmmssffffff` (UTC, microseconds), strictly
/// increasing: within a run even when two jobs are published in the same microsecond or the
/// wall clock is set back, and across restarts once [`JidGenerator::resume_after`] is given
/// the newest stored jid.
#[derive(Debug, Default)]
pub struct JidGenerator {
    last: u64,
}

impl JidGenerator {
    /// Continues after `jid` (the newest one stored), whatever the wall clock says now.
    pub fn resume_after(&mut self, jid: &str) {
        if let Some(micros) = halite_protocol::time::parse_compact_utc(jid) {
            self.last = self.last.max(micros);
        }
    }

    /// The next jid, given the wall clock now.
    pub fn next(&mut self, wall_micros: u64) -> String {
        self.last = wall_micros.max(self.last + 1);
        halite_protocol::time::compact_utc(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_4() {
        let id = new_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_uuid());
    }
}
