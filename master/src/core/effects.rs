//! What an owner decided and only the loop carries out: store calls, events on the bus,
//! announcements to the other masters, and the moves of another concern's state. An owner
//! returns them as values; the loop applies them in the order given (`Master::apply`, in
//! `server/effects.rs`), so an owner never reaches past its own state.

use halite_protocol::message::Value;
use halite_transport::PeerId;

use crate::core::asks::Ask;
use crate::request_error::Reply;
use crate::store::ClusterChange;

/// One thing to do, decided by an owner.
pub(crate) enum Effect {
    /// A store call to make; its answer goes on as the ask says.
    Ask(Ask),
    /// An event for the bus here.
    Emit { tag: String, data: Value },
    /// An event for the bus here and, after the step's writes, on every master sharing the
    /// store (one no other master derives itself).
    EmitShared { tag: String, data: Value },
    /// A change to tell the other masters, after the step's writes.
    Tell(ClusterChange),
    /// A rollout's target to start: sent if its minion is connected here, waiting for the
    /// job's TTL if not, `offline` without one.
    StartTarget { jid: String, minion: String },
    /// A stopped rollout's queued targets end `skipped`.
    SkipQueued { jid: String },
    /// A job whose rollout's stop is stored is cancelled.
    Cancel { jid: String },
    /// A client's request answered.
    Reply { peer: PeerId, request_id: u64, answer: Box<Reply> },
}
