//! Time for the master, from one injected source, and job ids.
//!
//! Two clocks, kept apart on purpose: the monotonic one (`Instant`) measures every timeout,
//! TTL and rate, so a wall-clock step never makes one longer or shorter; the wall clock only
//! stamps records (`created_at`, `last_seen`) and seeds jids. The daemon uses [`SystemClock`];
//! tests drive a [`FakeClock`] and step either clock alone.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the master reads the time.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now: deadlines and rates.
    fn now(&self) -> Instant;
    /// Wall-clock now, in Unix milliseconds: what records are stamped with.
    fn wall_ms(&self) -> u64 {
        self.wall_micros() / 1000
    }
    /// Wall-clock now, in Unix microseconds.
    fn wall_micros(&self) -> u64;
    /// How far the wall clock is set from this host's own (a shared store's time, see
    /// [`ClusterClock`]), in milliseconds.
    fn offset_ms(&self) -> i64 {
        0
    }
}

/// The time a handler is given: read once when its desk is lent, so everything it decides
/// in one piece of work is decided as of one instant, and no handler reads a clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    /// Monotonic: deadlines and rates.
    pub(crate) at: Instant,
    /// Wall clock, Unix milliseconds: what records are stamped with.
    pub(crate) wall_ms: u64,
    /// Wall clock, Unix microseconds: what jids are made of.
    pub(crate) wall_micros: u64,
    /// How far the wall clock is set from this host's own ([`Clock::offset_ms`]).
    pub(crate) offset_ms: i64,
}

impl Now {
    /// `clock`'s time now.
    pub(crate) fn of(clock: &dyn Clock) -> Self {
        let wall_micros = clock.wall_micros();
        Now { at: clock.now(), wall_ms: wall_micros / 1000, wall_micros, offset_ms: clock.offset_ms() }
    }
}

/// The operating system's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_micros(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    }
}

/// The operating system's clocks, with the wall clock corrected to a shared store's: masters
/// sharing a database stamp jobs, announcements and the times they tell minions in its time,
/// so a master whose own clock is off still issues jobs the others' minions take, and judges
/// theirs as they do. The offset is measured and kept up to date by the store.
#[derive(Debug, Clone)]
pub struct ClusterClock {
    offset_ms: Arc<std::sync::atomic::AtomicI64>,
}

impl ClusterClock {
    /// The system clock, corrected by `offset_ms` (the store's clock minus this host's).
    pub fn new(offset_ms: Arc<std::sync::atomic::AtomicI64>) -> Self {
        ClusterClock { offset_ms }
    }

    /// The correction now, in milliseconds.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Clock for ClusterClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_micros(&self) -> u64 {
        let offset = self.offset_ms().saturating_mul(1000);
        SystemClock.wall_micros().saturating_add_signed(offset)
    }

    fn offset_ms(&self) -> i64 {
        ClusterClock::offset_ms(self)
    }
}

/// A clock that moves only when told: both clocks together ([`FakeClock::advance`]) or the
/// wall clock alone ([`FakeClock::step_wall`], like NTP or an operator fixing the date).
#[derive(Debug, Clone)]
pub struct FakeClock {
    inner: Arc<Mutex<FakeTime>>,
}

#[derive(Debug)]
struct FakeTime {
    now: Instant,
    wall_micros: u64,
}

impl FakeClock {
    /// A clock whose wall time starts at `wall_ms`.
    pub fn new(wall_ms: u64) -> Self {
        FakeClock { inner: Arc::new(Mutex::new(FakeTime { now: Instant::now(), wall_micros: wall_ms * 1000 })) }
    }

    fn time(&self) -> std::sync::MutexGuard<'_, FakeTime> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets `by` pass on both clocks.
    pub fn advance(&self, by: Duration) {
        let mut time = self.time();
        time.now += by;
        time.wall_micros += by.as_micros() as u64;
    }

    /// Steps the wall clock alone, forwards (`ahead`) or back.
    pub fn step_wall(&self, by: Duration, ahead: bool) {
        let mut time = self.time();
        let by = by.as_micros() as u64;
        time.wall_micros = if ahead { time.wall_micros + by } else { time.wall_micros.saturating_sub(by) };
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.time().now
    }

    fn wall_micros(&self) -> u64 {
        self.time().wall_micros
    }
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
/// increasing: within a run even when two jobs are published in the same microsecond or the
/// wall clock is set back, and across restarts once [`JidGenerator::resume_after`] is given
/// the newest stored jid.
#[derive(Debug, Default)]
pub(crate) struct JidGenerator {
    last: u64,
}

impl JidGenerator {
    /// Continues after `jid` (the newest one stored), whatever the wall clock says now.
    pub(crate) fn resume_after(&mut self, jid: &str) {
        if let Some(micros) = halite_protocol::time::parse_compact_utc(jid) {
            self.last = self.last.max(micros);
        }
    }

    /// The next jid, given the wall clock now.
    pub(crate) fn next(&mut self, wall_micros: u64) -> String {
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

    #[test]
    fn jids_strictly_increase_through_clock_steps_and_restarts() {
        let clock = FakeClock::new(1_795_242_922_123);
        let mut generator = JidGenerator::default();
        let a = generator.next(clock.wall_micros());
        let b = generator.next(clock.wall_micros());
        assert!(b > a);
        clock.step_wall(Duration::from_secs(3600), false);
        let c = generator.next(clock.wall_micros());
        assert!(c > b, "a clock set back must not reuse jids");
        // A restarted master, clock still behind, resumes after the newest stored jid.
        let mut restarted = JidGenerator::default();
        restarted.resume_after(&c);
        assert!(restarted.next(clock.wall_micros()) > c);
    }

    #[test]
    fn the_fake_clock_steps_wall_time_alone() {
        let clock = FakeClock::new(1000);
        let t0 = clock.now();
        clock.step_wall(Duration::from_secs(7 * 86_400), true);
        assert_eq!(clock.now(), t0);
        assert_eq!(clock.wall_ms(), 1000 + 7 * 86_400_000);
        clock.advance(Duration::from_millis(5));
        assert_eq!(clock.now() - t0, Duration::from_millis(5));
    }
}
