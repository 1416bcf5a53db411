//! Whether a signed job is still fresh, judged by the master's clock: the master tells its time
//! in `welcome`, and the minion carries it forward on its own monotonic clock. A job is valid
//! until its issue time plus its TTL plus its timeout (the longest the master itself would still
//! wait for it), with a little slack for latency; a replayed or long-delayed job past that is
//! refused as timed out. Each delivery also says by when the minion must start the job (the
//! master's time it was sent plus its timeout): past it the master may already have recorded the
//! job timed out, so the job is reported timed out instead of run. The minion's wall clock plays
//! no part.

use std::time::{Duration, Instant};

use halite_protocol::message::Job;

/// Longest a welcome may take after its hello to date the master's time by it.
pub(crate) const WELCOME_WITHIN: Duration = Duration::from_secs(2);

/// Allowance for transit and the master's own grace before it gives a job up.
const SLACK: Duration = Duration::from_secs(10);

/// The master's time as last learned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MasterTime {
    master_ms: u64,
    at: Instant,
}

impl MasterTime {
    /// The master said its time was `master_ms` at `at`.
    pub(crate) fn learned(master_ms: u64, at: Instant) -> Option<Self> {
        (master_ms > 0).then_some(MasterTime { master_ms, at })
    }

    /// The master's time now.
    pub(crate) fn now_ms(&self, now: Instant) -> u64 {
        self.master_ms.saturating_add(now.saturating_duration_since(self.at).as_millis() as u64)
    }
}

/// Why `job` is too old to start, if it is.
pub(crate) fn expired(job: &Job, master: Option<MasterTime>, now: Instant) -> Option<String> {
    let master_now = master?.now_ms(now);
    let valid_until = job
        .issued_at_ms
        .saturating_add(job.ttl_ms)
        .saturating_add(job.timeout_ms)
        .saturating_add(SLACK.as_millis() as u64);
    (job.timeout_ms > 0 && master_now > valid_until).then(|| {
        format!(
            "expired: issued at {} ms with ttl {} ms and timeout {} ms, it was valid until {valid_until} ms; \
             the master's time is now {master_now} ms",
            job.issued_at_ms, job.ttl_ms, job.timeout_ms
        )
    })
}

/// By when, on this minion's clock, a job delivered with `start_by_ms` (the master's time by
/// which it must start) has to start: `Err(why)` when that is already past, so it is reported
/// timed out and never run; `Ok(None)` when the master or its time is unknown.
pub(crate) fn start_deadline(
    start_by_ms: Option<u64>,
    master: Option<MasterTime>,
    now: Instant,
) -> Result<Option<Instant>, StartMissed> {
    let (Some(start_by), Some(master)) = (start_by_ms, master) else { return Ok(None) };
    let master_now = master.now_ms(now);
    match start_by.checked_sub(master_now) {
        Some(left) => Ok(Some(now + Duration::from_millis(left))),
        None => Err(StartMissed { start_by, master_now }),
    }
}

/// A job arrived after the master's time by which it had to start (times in the master's ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "not started: the master gave it until {start_by} ms (its time) to start, and its time is now \
     {master_now} ms, {} ms later; the master may already have recorded it timed out",
    master_now - start_by
)]
pub(crate) struct StartMissed {
    start_by: u64,
    master_now: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(issued_at_ms: u64, ttl_ms: u64, timeout_ms: u64) -> Job {
        Job {
            jid: "1".into(),
            function: "test.ping".into(),
            args: Vec::new(),
            kwargs: Default::default(),
            timeout_ms,
            issued_at_ms,
            ttl_ms,
            caller: "root".into(),
            reach: None,
        }
    }

    #[test]
    fn freshness_is_judged_on_the_masters_clock() {
        let start = Instant::now();
        let master = MasterTime::learned(1_000_000, start);
        // Fresh, and fresh a minute later thanks to its TTL.
        assert_eq!(expired(&job(1_000_000, 0, 30_000), master, start), None);
        assert_eq!(expired(&job(1_000_000, 120_000, 30_000), master, start + Duration::from_secs(60)), None);
        // Past issue + ttl + timeout + slack on the master's clock, whatever the local one says.
        let old = expired(&job(1_000_000, 0, 30_000), master, start + Duration::from_secs(41));
        assert!(old.is_some_and(|why| why.starts_with("expired")));
        // A replay of a job issued long ago.
        assert!(expired(&job(1, 0, 30_000), master, start).is_some());
        // Without the master's time (an older master), nothing is refused.
        assert_eq!(expired(&job(1, 0, 30_000), None, start), None);
        assert_eq!(MasterTime::learned(0, start).map(|m| m.now_ms(start)), None);
    }

    #[test]
    fn a_job_delivered_past_its_start_by_time_is_never_started() {
        let start = Instant::now();
        let master = MasterTime::learned(1_000_000, start);
        // Delivered with 3 s to start, on time.
        let by = start_deadline(Some(1_003_000), master, start).unwrap().unwrap();
        assert_eq!(by.duration_since(start), Duration::from_secs(3));
        // The minion was frozen 15 s: the master's time is past the start-by time.
        let late = start_deadline(Some(1_003_000), master, start + Duration::from_secs(15)).unwrap_err().to_string();
        assert!(late.contains("12000 ms later"), "{late}");
        // Nothing said, or the master's time unknown: only the TTL check applies.
        assert_eq!(start_deadline(None, master, start), Ok(None));
        assert_eq!(start_deadline(Some(1), None, start), Ok(None));
    }
}
