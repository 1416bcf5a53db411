//! Writes the core has decided but not yet stored: job state changes, minion registry entries,
//! and what must wait for them (acknowledgements, final states to tell, minions owed a request
//! to resend). They are stored together at the end of each step (group commit); a return is
//! acknowledged only once its change is stored.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use halite_protocol::message::{JobReturn, MinionJobState};
use halite_transport::PeerId;

use crate::store::{MinionRecord, StateChange};

/// What the next commit writes, and what follows from it.
#[derive(Default)]
pub struct PendingWrites {
    /// Job state changes, in order.
    states: Vec<StateChange>,
    /// Minion registry entries (presence, grains), the latest per minion.
    minions: HashMap<String, MinionRecord>,
    /// Returns to acknowledge once `states` is written.
    acks: Vec<(PeerId, String)>,
    /// The size of the returns held in `states` (what the minions sent), bounded by
    /// [`HELD_RETURNS_MAX`] while the store does not answer.
    held_return_bytes: usize,
    /// A lower bound than [`HELD_RETURNS_MAX`], for tests.
    held_returns_cap: Option<usize>,
    /// Minions whose returns were turned away because that bound was reached: told to send them
    /// again (their session is closed, and they resend their outbox) once the store answers.
    owed: BTreeSet<String>,
    /// Whether the store was in doubt at the last wake (see `Master::store_in_doubt`).
    in_doubt: bool,
    /// Deadlines fire again from then on, once the store answers after a doubt: returns the
    /// minions kept meanwhile come back first (they are asked for them), within
    /// [`RESEND_GRACE`], instead of losing to a deadline that passed while nothing could be
    /// stored.
    deadlines_resume_at: Option<Instant>,
    /// The last write of job states failed (they wait in `states`): until one succeeds, the
    /// master decides no slot (see `Master::store_in_doubt`).
    write_failed: bool,
    /// Final states decided here while other masters share the store, by job, told (bus,
    /// watchers, the job's end) once written: as the store keeps them, so each slot's is told
    /// once. A job with one here does not end yet.
    unreported: HashMap<String, Vec<Unreported>>,
    /// Some of `unreported` were written after a failed write: compared with what the store
    /// kept before they are told.
    finals_in_doubt: bool,
}

/// A final state decided here, not yet stored, so not yet told.
pub struct Unreported {
    pub minion: String,
    pub state: MinionJobState,
    pub ret: Option<JobReturn>,
}

/// How long deadlines wait, once the store answers after a doubt, for the returns minions
/// kept meanwhile (a reconnection and a resend of their outbox).
pub const RESEND_GRACE: Duration = Duration::from_secs(5);

/// The most returns, in bytes, the core holds waiting for the store; past it, returns are left
/// on the minions (unacknowledged, in their outboxes) until the store answers again.
pub const HELD_RETURNS_MAX: usize = 256 * 1024 * 1024;

impl PendingWrites {
    /// Queues a slot's change for the next commit.
    pub fn record(&mut self, change: StateChange) {
        self.states.push(change);
    }

    /// Takes a return of `size` bytes to hold until it is stored, if it fits beside those held.
    pub fn hold_return(&mut self, size: usize) -> bool {
        let fits = self.held_return_bytes.saturating_add(size) <= self.held_returns_cap.unwrap_or(HELD_RETURNS_MAX);
        if fits {
            self.held_return_bytes += size;
        }
        fits
    }

    /// `minion`'s return was left on it: it is asked for it again once the store answers.
    pub fn owe(&mut self, minion: &str) {
        self.owed.insert(minion.to_owned());
    }

    /// The minions owed a request to resend their returns, once nothing is left to write
    /// before (empty otherwise; they stay owed).
    pub fn take_owed_once_written(&mut self) -> BTreeSet<String> {
        if !self.states.is_empty() {
            return BTreeSet::new();
        }
        std::mem::take(&mut self.owed)
    }

    /// Acknowledges `jid`'s return to `peer` once the step's changes are stored.
    pub fn ack_once_stored(&mut self, peer: PeerId, jid: String) {
        self.acks.push((peer, jid));
    }

    /// Records a minion's registry entry (the latest one wins).
    pub fn put_minion(&mut self, record: MinionRecord) {
        self.minions.insert(record.id.clone(), record);
    }

    /// Drops a minion's entry not yet written (the minion is being deleted).
    pub fn drop_minion(&mut self, id: &str) {
        self.minions.remove(id);
    }

    /// The minion entries to write.
    pub fn take_minions(&mut self) -> Vec<MinionRecord> {
        self.minions.drain().map(|(_, record)| record).collect()
    }

    /// Keeps entries whose write failed for the next commit, unless a newer entry of the same
    /// minion came meanwhile.
    pub fn keep_minions(&mut self, records: Vec<MinionRecord>) {
        for record in records {
            self.minions.entry(record.id.clone()).or_insert(record);
        }
    }

    /// Whether anything waits on the next write of job states.
    pub fn has_states(&self) -> bool {
        !self.states.is_empty() || !self.acks.is_empty()
    }

    /// Takes the state changes and their acknowledgements, to write.
    pub fn take_states(&mut self) -> (Vec<StateChange>, Vec<(PeerId, String)>) {
        (std::mem::take(&mut self.states), std::mem::take(&mut self.acks))
    }

    /// The write of `changes` failed: they go back ahead of any newer ones, retried at the next
    /// commit, and nothing is acknowledged or decided meanwhile.
    pub fn write_failed_for(&mut self, changes: Vec<StateChange>, acks: Vec<(PeerId, String)>) {
        self.states.splice(0..0, changes);
        self.acks.splice(0..0, acks);
        self.write_failed = true;
    }

    /// The changes taken were stored: the returns they held are no longer held. Final states
    /// decided while a write was failing are compared with the store before they are told
    /// (another master may have recorded some of those slots first).
    pub fn written(&mut self) {
        if std::mem::take(&mut self.write_failed) {
            self.finals_in_doubt = true;
        }
        self.held_return_bytes = 0;
    }

    /// Whether the last write of job states failed.
    pub fn write_failed(&self) -> bool {
        self.write_failed
    }

    /// Holds a final state decided here until it is stored.
    pub fn hold_final(&mut self, jid: &str, slot: Unreported) {
        self.unreported.entry(jid.to_owned()).or_default().push(slot);
    }

    /// Whether a final state of `jid` waits to be told (its end waits for it).
    pub fn holds_final_of(&self, jid: &str) -> bool {
        self.unreported.contains_key(jid)
    }

    /// Whether final states wait to be told and are stored (none failed to be written).
    pub fn finals_to_tell(&self) -> bool {
        !self.unreported.is_empty() && !self.write_failed
    }

    /// Whether the final states waiting must first be compared with the store.
    pub fn finals_in_doubt(&self) -> bool {
        self.finals_in_doubt
    }

    /// The final states waiting were compared with the store.
    pub fn finals_checked(&mut self) {
        self.finals_in_doubt = false;
    }

    /// The jobs with final states waiting to be told.
    pub fn unreported_jids(&self) -> Vec<String> {
        self.unreported.keys().cloned().collect()
    }

    /// `jid`'s final states waiting to be told.
    pub fn unreported_of(&self, jid: &str) -> &[Unreported] {
        self.unreported.get(jid).map_or(&[], Vec::as_slice)
    }

    /// The store kept `kept` (with `ret`) for `minion`'s slot of `jid`: that is what is told.
    pub fn follow_stored(&mut self, jid: &str, minion: &str, kept: MinionJobState, ret: Option<JobReturn>) {
        let slots = self.unreported.get_mut(jid).into_iter().flatten();
        for slot in slots.filter(|slot| slot.minion == minion) {
            slot.state = kept;
            slot.ret = ret.clone();
        }
    }

    /// The final states to tell now, by job.
    pub fn take_unreported(&mut self) -> HashMap<String, Vec<Unreported>> {
        std::mem::take(&mut self.unreported)
    }

    /// Whether job deadlines wait at `now`: while the store is in doubt, and for
    /// [`RESEND_GRACE`] after it answers again.
    pub fn deadlines_wait(&mut self, in_doubt: bool, now: Instant) -> bool {
        if std::mem::replace(&mut self.in_doubt, in_doubt) && !in_doubt {
            self.deadlines_resume_at = Some(now + RESEND_GRACE);
        }
        if self.deadlines_resume_at.is_some_and(|at| now >= at) {
            self.deadlines_resume_at = None;
        }
        in_doubt || self.deadlines_resume_at.is_some()
    }

    /// When deadlines fire again after a doubt, if they wait.
    pub fn deadlines_resume_at(&self) -> Option<Instant> {
        self.deadlines_resume_at
    }

    /// Whether something here is tried again at each wake: a failed write, entries not yet
    /// written, minions owed a request, final states not yet told.
    pub fn retrying(&self) -> bool {
        self.write_failed || !self.minions.is_empty() || !self.owed.is_empty() || !self.unreported.is_empty()
    }

    /// How many state changes wait to be written.
    #[cfg(any(test, feature = "testing"))]
    pub fn states_waiting(&self) -> usize {
        self.states.len()
    }

    /// Holds no more returns than those already held.
    #[cfg(any(test, feature = "testing"))]
    pub fn cap_held_returns_here(&mut self) {
        self.held_returns_cap = Some(self.held_return_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(minion: &str) -> StateChange {
        StateChange {
            jid: "j1".into(),
            minion: minion.into(),
            state: MinionJobState::Returned,
            ret: None,
            at_ms: 0,
            late: false,
        }
    }

    #[test]
    fn a_failed_write_goes_first_at_the_next_and_its_finals_are_compared_before_told() {
        let mut writes = PendingWrites::default();
        writes.record(change("a"));
        writes.ack_once_stored(PeerId(1), "j1".into());
        let (changes, acks) = writes.take_states();
        assert!(!writes.has_states());
        writes.record(change("b"));
        writes.write_failed_for(changes, acks);
        assert!(writes.write_failed());
        let (changes, acks) = writes.take_states();
        let order: Vec<&str> = changes.iter().map(|c| c.minion.as_str()).collect();
        assert_eq!(order, ["a", "b"], "the failed change goes first");
        assert_eq!(acks, [(PeerId(1), "j1".to_owned())], "nothing acknowledged meanwhile");
        writes.written();
        assert!(!writes.write_failed());
        assert!(writes.finals_in_doubt(), "decided while the store did not answer");
        writes.finals_checked();
        writes.written();
        assert!(!writes.finals_in_doubt());
    }

    #[test]
    fn held_returns_are_bounded_until_written() {
        let mut writes = PendingWrites { held_returns_cap: Some(10), ..PendingWrites::default() };
        assert!(writes.hold_return(6));
        assert!(!writes.hold_return(6), "past the bound");
        writes.owe("web2");
        writes.record(change("a"));
        assert!(writes.take_owed_once_written().is_empty(), "asked only once nothing waits before");
        let _ = writes.take_states();
        writes.written();
        assert!(writes.hold_return(10), "written: nothing held");
        assert_eq!(writes.take_owed_once_written().into_iter().collect::<Vec<_>>(), ["web2"]);
        assert!(!writes.retrying());
    }

    #[test]
    fn deadlines_wait_through_a_doubt_and_the_grace_after_it() {
        let start = Instant::now();
        let mut writes = PendingWrites::default();
        assert!(!writes.deadlines_wait(false, start));
        assert!(writes.deadlines_wait(true, start));
        let back = start + Duration::from_secs(1);
        assert!(writes.deadlines_wait(false, back), "the grace begins");
        assert_eq!(writes.deadlines_resume_at(), Some(back + RESEND_GRACE));
        assert!(writes.deadlines_wait(false, back + RESEND_GRACE - Duration::from_millis(1)));
        assert!(!writes.deadlines_wait(false, back + RESEND_GRACE));
        assert_eq!(writes.deadlines_resume_at(), None);
    }

    #[test]
    fn the_latest_entry_of_a_minion_wins_over_one_whose_write_failed() {
        let record = |seen| MinionRecord {
            id: "web1".into(),
            grains: Default::default(),
            functions: vec![],
            last_seen_ms: seen,
        };
        let mut writes = PendingWrites::default();
        writes.put_minion(record(1));
        let failed = writes.take_minions();
        writes.put_minion(record(2));
        writes.keep_minions(failed);
        let kept = writes.take_minions();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].last_seen_ms, 2);
    }
}
