//! The `deploy.apply` jobs in flight here, each with the deployment it carries, and the job
//! ends whose deployment could not be recorded yet because the store did not answer: those are
//! tried again a second later, reread from the store (the job's end is stored with it), so a
//! deployment is never left in progress by a store that came back. What is kept of each is a
//! few ids: a long outage holds no returns in memory. Relays whose end could not be recorded
//! are tried again the same way, so a relayed signal is not relayed again at the next start.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::calls::deploy::EndToRecord;
use crate::relay_requests::RelayDone;

/// How long a job end whose deployment could not be recorded waits before it is tried again.
pub const RECORD_RETRY: Duration = Duration::from_secs(1);

/// See the module docs.
#[derive(Default)]
pub struct DeployJobs {
    /// jid → the deployment it carries.
    carried: HashMap<String, String>,
    /// Job ends to record again, each with when.
    retries: Vec<(Instant, EndToRecord)>,
    /// Relays' ends to record again, each with when.
    relays: Vec<(Instant, RelayDone)>,
}

impl DeployJobs {
    /// Job `jid` carries deployment `id`.
    pub fn carries(&mut self, jid: &str, id: &str) {
        self.carried.insert(jid.to_owned(), id.to_owned());
    }

    /// Job `jid` no longer carries anything (its deployment was deleted or derived again).
    pub fn forget(&mut self, jid: &str) {
        self.carried.remove(jid);
    }

    /// Job `jid` ended: the deployment it carried, if this master knows it.
    pub fn ended(&mut self, jid: &str) -> Option<String> {
        self.carried.remove(jid)
    }

    /// A job end whose deployment could not be recorded at `now`: tried again later.
    pub fn retry(&mut self, end: EndToRecord, now: Instant) {
        self.retries.push((now + RECORD_RETRY, end));
    }

    /// A job end found unrecorded when the master started: recorded at the first step.
    pub fn recover(&mut self, end: EndToRecord, now: Instant) {
        self.retries.push((now, end));
    }

    /// The job ends due to be recorded again at `now`, oldest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<EndToRecord> {
        take_due(&mut self.retries, now)
    }

    /// A relay's end that could not be recorded at `now`: tried again later.
    pub fn retry_relay(&mut self, done: RelayDone, now: Instant) {
        self.relays.push((now + RECORD_RETRY, done));
    }

    /// The relays' ends due to be recorded again at `now`, oldest first.
    pub fn take_due_relays(&mut self, now: Instant) -> Vec<RelayDone> {
        take_due(&mut self.relays, now)
    }

    /// When the next job or relay end is to be recorded again.
    pub fn next_retry(&self) -> Option<Instant> {
        let ends = self.retries.iter().map(|(at, _)| *at);
        ends.chain(self.relays.iter().map(|(at, _)| *at)).min()
    }
}

/// The entries of `waiting` due at `now`, oldest first; the rest wait on.
fn take_due<T>(waiting: &mut Vec<(Instant, T)>, now: Instant) -> Vec<T> {
    if waiting.iter().all(|(at, _)| *at > now) {
        return Vec::new();
    }
    let (due, later): (Vec<_>, Vec<_>) = std::mem::take(waiting).into_iter().partition(|(at, _)| *at <= now);
    *waiting = later;
    due.into_iter().map(|(_, entry)| entry).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(jid: &str) -> EndToRecord {
        EndToRecord { jid: jid.into(), id: Some("d1".into()), written: None }
    }

    #[test]
    fn a_job_end_is_tried_again_once_its_wait_is_over_and_only_then() {
        let now = Instant::now();
        let mut jobs = DeployJobs::default();
        jobs.carries("j1", "d1");
        assert_eq!(jobs.ended("j1").as_deref(), Some("d1"));
        assert_eq!(jobs.ended("j1"), None, "an end is the job's last");
        jobs.retry(end("j1"), now);
        jobs.retry(end("j2"), now + RECORD_RETRY);
        assert_eq!(jobs.next_retry(), Some(now + RECORD_RETRY));
        assert!(jobs.take_due(now).is_empty(), "not before its wait is over");
        let due: Vec<String> = jobs.take_due(now + RECORD_RETRY).into_iter().map(|e| e.jid).collect();
        assert_eq!(due, ["j1"]);
        assert_eq!(jobs.next_retry(), Some(now + 2 * RECORD_RETRY));
    }
}
