//! The halite master's state machine, with no I/O: what the master decides, and nothing of
//! how it talks to the world. Time comes in as a value, connection events and store answers
//! come in as inputs; sends leave through an outlet that never waits, store calls and work to
//! do outside (relays, file reads) leave as values the driver takes. Nothing in it is `async`,
//! reads a clock, or names a socket or a database (`cargo tree -e normal -p
//! halite-master-core` holds no tokio, sqlx, axum, hyper or rustls).
//!
//! The driver that awaits (the loop, the store, the network, the gateway's HTTP) is
//! `halite-master`.

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
pub mod config;
pub mod keys;
pub mod tenants;
