//! The master's own periodic duties, as a table of deadlines (quinn-proto's `TimerTable`):
//! each kind is set to when it is next due, or not set. The loop sleeps until the earliest of
//! these, of the deadlines the owners keep themselves (job slots, handshakes, tokens, rollout
//! waits) and of a retry while something is being retried (see `Master::next_timeout`), so it
//! wakes only when something is due, never on a fixed tick.

use std::time::Instant;

/// A duty of the master that comes due at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// The figures counted rather than kept (sessions, live jobs, the clock's offset).
    Gauges,
    /// Recording the wall clock reached, which TTLs resume from after a restart.
    WallMark,
    /// Retention: deleting jobs past `keep_jobs_hours`.
    Purge,
}

const KINDS: usize = 3;

impl Timer {
    fn index(self) -> usize {
        match self {
            Timer::Gauges => 0,
            Timer::WallMark => 1,
            Timer::Purge => 2,
        }
    }
}

/// When each [`Timer`] is next due.
#[derive(Debug, Default, Clone)]
pub struct TimerTable {
    at: [Option<Instant>; KINDS],
}

impl TimerTable {
    /// Sets `timer` to come due at `at`.
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer.index()] = Some(at);
    }

    /// Whether `timer` has come due by `now`; if so it is unset (its duty sets it again).
    pub fn expired(&mut self, timer: Timer, now: Instant) -> bool {
        let slot = &mut self.at[timer.index()];
        if slot.is_some_and(|at| at <= now) {
            *slot = None;
            return true;
        }
        false
    }

    /// The earliest timer set.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_earliest_timer_set_is_next_and_fires_once() {
        let start = Instant::now();
        let mut timers = TimerTable::default();
        assert_eq!(timers.next_timeout(), None);
        timers.set(Timer::Purge, start + Duration::from_secs(3600));
        timers.set(Timer::WallMark, start + Duration::from_secs(5));
        assert_eq!(timers.next_timeout(), Some(start + Duration::from_secs(5)));
        assert!(!timers.expired(Timer::WallMark, start + Duration::from_secs(4)));
        assert!(timers.expired(Timer::WallMark, start + Duration::from_secs(5)));
        assert!(!timers.expired(Timer::WallMark, start + Duration::from_secs(6)), "unset once fired");
        assert_eq!(timers.next_timeout(), Some(start + Duration::from_secs(3600)));
    }
}
