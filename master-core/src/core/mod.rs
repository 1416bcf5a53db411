//! The master's state, by owner: each module holds one concern's state behind its methods and
//! keeps that concern's invariants (a slot only moves forward, a deadline is indexed by when it
//! comes due, a subscriber's queue is bounded). None of them does I/O, awaits, reads a clock
//! (time is given as `now`) or holds `impl Master`: what the master does with them is in the
//! files beside this folder, and the loop (`server/`) is what awaits the store and the
//! network (checked by `scripts/check-architecture.sh`).

pub mod audit_log;
pub mod bus;
pub mod cluster_view;
pub mod event_gate;
pub mod event_log;
pub mod hearing;
pub mod jobs;
pub mod registry;
pub mod rollout;
pub mod rollout_queue;
pub mod sessions;
pub mod slot_moves;
pub mod timers;
pub mod watchers;
pub mod writes;
