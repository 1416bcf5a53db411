//! Jittered exponential backoff for reconnecting.

use std::time::Duration;

/// Exponential backoff with "full jitter": each delay is uniform in `[base/2, base]`, where
/// `base` doubles from `initial` up to `max`. Jitter keeps 10,000 minions from reconnecting in
/// lockstep after a master restart.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    current: Duration,
    rng: u64,
}

impl Backoff {
    /// A backoff starting at `initial` and capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let mut seed = [0u8; 8];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut seed);
        Backoff { initial, max, current: initial, rng: u64::from_le_bytes(seed) | 1 }
    }

    /// The next delay to wait before retrying.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        // xorshift64: jitter needs spread, not unpredictability.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let half = base / 2;
        let spread = half.as_nanos().max(1) as u64;
        half + Duration::from_nanos(self.rng % spread)
    }

    /// Starts over from `initial`, after a connection succeeded.
    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_stay_jittered_and_capped() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let delays: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(50) && delays[0] <= Duration::from_millis(100));
        assert!(delays[3] >= Duration::from_millis(400) && delays[3] <= Duration::from_millis(800));
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(2)));
        assert!(delays[7] >= Duration::from_secs(1));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
