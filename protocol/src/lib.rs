//! The halite wire protocol, sans I/O.
//!
//! This crate turns bytes into protocol events and back. It holds three layers, each usable on
//! its own and each specified in `docs/protocol.md`:
//!
//! - [`zmtp`]: a ZMTP 3.1 peer (greeting, NULL handshake, frames, heartbeats) with every limit
//!   enforced before allocation, so any ZeroMQ library can connect and no peer can make us
//!   allocate without bound;
//! - [`noise`]: Noise XX sessions bound to ed25519 identities, with explicit nonces, a replay
//!   window, chunking of large messages and rekeying;
//! - [`message`]: the typed messages between master, minion and client, MessagePack-encoded,
//!   and the master's job signatures.
//!
//! What it does not do: open sockets, spawn tasks, read clocks (time arrives as a `now`
//! argument), read files, or decide policy (which keys to accept is the master's business).
//! `halite-transport` drives these state machines over tokio.
//!
//! ```
//! use std::time::Instant;
//! use halite_protocol::identity::IdentityKey;
//! use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Responder, Role, SessionConfig};
//!
//! let now = Instant::now();
//! let master = LocalIdentity::new(IdentityKey::generate_os()).unwrap();
//! let minion = LocalIdentity::new(IdentityKey::generate_os()).unwrap();
//! let pin = MasterPin::Key(master.public());
//!
//! let (initiator, msg1) = Initiator::start(&minion, Role::Minion, Claim::new("minion", None).unwrap(), pin, SessionConfig::default()).unwrap();
//! let (responder, msg2) = Responder::new(&master, Claim::new("master", None).unwrap(), SessionConfig::default()).unwrap().read_hello(&msg1).unwrap();
//! let (awaiting, msg3) = initiator.read_response(&msg2).unwrap();
//! let identified = responder.read_identity(&msg3).unwrap();
//! assert_eq!(identified.peer().identity, minion.public());
//! let (mut master_session, verdict) = identified.accept(now).unwrap();
//! let mut minion_session = awaiting.read_verdict(&verdict, now).unwrap();
//!
//! let parts = minion_session.seal(b"hello", now).unwrap();
//! assert_eq!(master_session.open(&parts, now).unwrap(), b"hello");
//! ```

pub mod audit;
pub mod enrollment;
pub mod function_names;
pub mod glob;
pub mod hex;
pub mod id;
pub mod identity;
pub mod keyfile;
pub mod message;
pub mod noise;
pub mod shell_words;
pub mod time;
pub mod zmtp;
