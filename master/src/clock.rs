//! Wall-clock time and job ids: the daemon reads the clock here and nowhere else.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A random (version 4) UUID, the form of Heat's config and deployment ids.
pub(crate) fn new_uuid() -> String {
    use rand_core::RngCore;
    let mut b = [0u8; 16];
    rand_core::OsRng.fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = halite_protocol::hex::encode(&b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
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
    fn uuids_are_version_4() {
        let id = new_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_uuid());
    }

    #[test]
    fn jids_strictly_increase() {
        let mut generator = JidGenerator::default();
        let a = generator.next();
        let b = generator.next();
        assert!(b > a);
    }
}
