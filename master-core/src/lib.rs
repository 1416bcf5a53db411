//! The halite master's state machine, with no I/O: what the master decides, and nothing of
//! how it talks to the world. Time comes in as a value, connection events and store answers
//! come in as inputs; sends leave through an outlet that never waits, store calls and work to
//! do outside (relays, file reads) leave as values the driver takes. Nothing in it is `async`,
//! reads a clock, or names a socket or a database (`cargo tree -e normal -p
//! halite-master-core` holds no tokio, sqlx, axum, hyper or rustls).
//!
//! The driver that awaits (the loop, the store, the network, the gateway's HTTP) is
//! `halite-master`.

// The crate is the master's inside, split out so that it cannot do I/O; its one client is
// `halite-master`. Items say what they are where their names do not: a field named `jid` is
// not restated.
#![allow(missing_docs)]

pub mod acl;
pub mod argument_checks;
pub mod audit_requests;
pub mod clock;
pub mod file_scope;
pub mod limits;
pub mod request_error;
pub use halite_store as store;
/// Target expressions: the parser and matcher live in `halite-targeting`.
pub use halite_targeting as target;
pub mod admin;
pub mod admission;
pub mod authz;
pub mod calls;
pub mod cluster;
pub mod cluster_jobs;
pub mod config;
pub mod core;
pub mod deploy;
pub mod file_reads;
pub mod keys;
pub mod local_sessions;
pub mod machine;
pub mod metrics;
pub mod minion_messages;
pub mod outlet;
pub mod outputs;
pub mod publishing;
pub mod relay_requests;
pub mod rollouts;
pub mod tenants;
pub mod token_sessions;
