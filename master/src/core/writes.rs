//! Writes the core has decided but not yet stored: job state changes, minion registry entries,
//! and the acknowledgements that must wait for them. They are stored together at the end of
//! each step (group commit); a return is acknowledged only once its change is stored.

use std::collections::HashMap;

use halite_protocol::message::{JobReturn, MinionJobState};
use halite_transport::PeerId;

use crate::store::{MinionRecord, StateChange};

/// What the next commit writes, and what follows from it.
#[derive(Default)]
pub(crate) struct PendingWrites {
    /// Job state changes, in order.
    pub(crate) states: Vec<StateChange>,
    /// Minion registry entries (presence, grains), the latest per minion.
    pub(crate) minions: HashMap<String, MinionRecord>,
    /// Returns to acknowledge once `states` is written.
    pub(crate) acks: Vec<(PeerId, String)>,
    /// The size of the returns held in `states` (what the minions sent), bounded by
    /// [`HELD_RETURNS_MAX`] while the store does not answer.
    pub(crate) held_return_bytes: usize,
    /// Minions whose returns were turned away because that bound was reached: told to send them
    /// again (their session is closed, and they resend their outbox) once the store answers.
    pub(crate) owed: std::collections::BTreeSet<String>,
    /// Whether the store was in doubt at the last wake (see `Master::store_in_doubt`).
    pub(crate) in_doubt: bool,
    /// Deadlines fire again from then on, once the store answers after a doubt: returns the
    /// minions kept meanwhile come back first (they are asked for them), within
    /// [`RESEND_GRACE`], instead of losing to a deadline that passed while nothing could be
    /// stored.
    pub(crate) deadlines_resume_at: Option<std::time::Instant>,
    /// A lower bound than [`HELD_RETURNS_MAX`], for tests.
    pub(crate) held_returns_cap: Option<usize>,
    /// The last write of job states failed (they wait in `states`): until one succeeds, the
    /// master decides no slot (see `Master::store_in_doubt`).
    pub(crate) write_failed: bool,
    /// Final states decided here while other masters share the store, by job, told (bus,
    /// watchers, the job's end) once written: as the store keeps them, so each slot's is told
    /// once. A job with one here does not end yet.
    pub(crate) unreported: HashMap<String, Vec<Unreported>>,
    /// Some of `unreported` were written after a failed write: compared with what the store
    /// kept before they are told.
    pub(crate) finals_in_doubt: bool,
    /// Slots that ended in this step, for their listeners (`Master::hear_moves`).
    pub(crate) moved: Vec<crate::core::jobs::SlotMoved>,
    /// Events published in this step, for the concerns that listen to events
    /// (`Master::hear_events`).
    pub(crate) heard: Vec<(String, halite_protocol::message::Value)>,
    /// Minions that left this master, for the other masters sharing the store.
    pub(crate) left: Vec<String>,
    /// What to tell the other masters sharing the store, in order: sent by the loop once the
    /// step's writes are done (`Master::flush`), so each is already stored when it arrives.
    pub(crate) announcements: Vec<crate::store::ClusterChange>,
    /// Events published here, for the other masters' subscribers.
    pub(crate) shared_events: Vec<(String, halite_protocol::message::Value)>,
    /// Rollouts to decide at the end of the step (a target finished, a pause ended).
    pub(crate) rollouts_due: std::collections::BTreeSet<String>,
    /// Rollouts an event aborted (jid, why), stopped at the end of the step.
    pub(crate) rollout_aborts: Vec<(String, String)>,
}

/// A final state decided here, not yet stored, so not yet told.
pub(crate) struct Unreported {
    pub(crate) minion: String,
    pub(crate) state: MinionJobState,
    pub(crate) ret: Option<JobReturn>,
}

/// How long deadlines wait, once the store answers after a doubt, for the returns minions
/// kept meanwhile (a reconnection and a resend of their outbox).
pub(crate) const RESEND_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The most returns, in bytes, the core holds waiting for the store; past it, returns are left
/// on the minions (unacknowledged, in their outboxes) until the store answers again.
pub(crate) const HELD_RETURNS_MAX: usize = 256 * 1024 * 1024;

impl PendingWrites {
    /// Whether a return of `size` bytes still fits beside those held.
    pub(crate) fn may_hold_return(&self, size: usize) -> bool {
        self.held_return_bytes.saturating_add(size) <= self.held_returns_cap.unwrap_or(HELD_RETURNS_MAX)
    }
    /// Takes the state changes and their acknowledgements, to write.
    pub(crate) fn take_states(&mut self) -> (Vec<StateChange>, Vec<(PeerId, String)>) {
        (std::mem::take(&mut self.states), std::mem::take(&mut self.acks))
    }

    /// Puts back changes whose write failed, ahead of any newer ones: retried at the next
    /// commit, and nothing is acknowledged meanwhile.
    pub(crate) fn restore_states(&mut self, changes: Vec<StateChange>, acks: Vec<(PeerId, String)>) {
        self.states.splice(0..0, changes);
        self.acks.splice(0..0, acks);
    }
}
