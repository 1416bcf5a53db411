//! The master's state, by owner: each module holds one concern's state behind its methods and
//! keeps that concern's invariants (a slot only moves forward, a deadline is indexed by when it
//! comes due, a subscriber's queue is bounded). None of them does I/O, awaits, reads a clock
//! (time is given as `now`) or holds `impl Master`: what the master does with them is in the
//! files beside this folder, and the loop (`server/`) is what awaits the store and the
//! network (checked by `scripts/check-architecture.sh`).

pub(crate) mod audit_log;
pub(crate) mod bus;
pub(crate) mod cluster_view;
pub(crate) mod event_gate;
pub(crate) mod event_log;
pub(crate) mod hearing;
pub(crate) mod jobs;
pub(crate) mod registry;
pub(crate) mod rollout;
pub(crate) mod rollout_queue;
pub(crate) mod sessions;
pub(crate) mod slot_moves;
pub(crate) mod timers;
pub(crate) mod watchers;
pub(crate) mod writes;
