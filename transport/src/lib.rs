//! The tokio I/O driver around `halite-protocol`'s ZMTP state machine.
//!
//! - [`Router`]: listens and accepts many peers (ZeroMQ ROUTER semantics: every received
//!   message is tagged with the peer it came from, every sent message names its peer), with
//!   pre-authentication admission limits per IP and in total, and a bounded send queue per peer
//!   that reports [`SendError::Full`] instead of growing.
//! - [`Dealer`]: connects out (ZeroMQ DEALER semantics) and keeps reconnecting with jittered
//!   exponential [`Backoff`] when the connection drops.
//! - [`keyfile`]: reading and writing identity key files with safe permissions.
//! - [`logging`]: the daemons' logger (level names, colour only on a terminal, JSON lines).
//!
//! What it does not do: decide who may connect (the master does, above this crate), know about
//! jobs or storage, or run Noise handshakes on its own; those layers sit on top of the message
//! streams this crate provides.

mod admission;
mod backoff;
mod budget;
pub mod config_file;
mod connection;
mod dealer;
pub mod error_text;
pub mod keyfile;
mod link_watch;
pub mod logging;
pub mod metrics_text;
mod notify;
mod open_files;
mod outbound;
mod router;
mod signal;

pub use link_watch::SILENT_LINK_NOTICED;

pub use backoff::Backoff;
pub use connection::{CloseReason, Lane};
pub use dealer::{Dealer, DealerConfig, DealerEvent, DealerSender};
pub use notify::{notify_ready, notify_to};
pub use open_files::{open_files_limit, raise_open_files, OpenFilesError};
pub use router::{PeerId, Router, RouterConfig, RouterEvent, SendError};
pub use signal::shutdown_signal;
