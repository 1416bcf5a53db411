//! Time for the master, from one injected source, and job ids.
//!
//! Two clocks, kept apart on purpose: the monotonic one (`Instant`) measures every timeout,
//! TTL and rate, so a wall-clock step never makes one longer or shorter; the wall clock only
//! stamps records (`created_at`, `last_seen`) and seeds jids. The daemon uses [`SystemClock`];
//! tests drive a [`FakeClock`] and step either clock alone. What the core is given of them
//! ([`Now`]) and the job ids are `halite-master-core`'s.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use halite_master_core::clock::{new_uuid, JidGenerator, Now};

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
    /// Every reading at once, as the core is given time: monotonic, wall and offset.
    fn read(&self) -> Now {
        let wall_micros = self.wall_micros();
        Now { at: self.now(), wall_ms: wall_micros / 1000, wall_micros, offset_ms: self.offset_ms() }
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

#[cfg(test)]
mod tests {
    use super::*;

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
