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

//!
//! Without its default `io` feature it is only [`peers`] (what a router's owner sees of its
//! connections), [`config_file`], [`logging`]'s formats and the text helpers: what a core that
//! does no I/O (`halite-master-core`) may name.

#[cfg(feature = "io")]
mod admission;
#[cfg(feature = "io")]
mod backoff;
#[cfg(feature = "io")]
mod budget;
pub mod config_file;
#[cfg(feature = "io")]
mod connection;
#[cfg(feature = "io")]
mod dealer;
pub mod error_text;
#[cfg(feature = "io")]
pub mod keyfile;
#[cfg(feature = "io")]
mod link_watch;
pub mod logging;
pub mod metrics_text;
#[cfg(feature = "io")]
mod notify;
#[cfg(feature = "io")]
mod open_files;
#[cfg(feature = "io")]
mod outbound;
pub mod peers;
#[cfg(feature = "io")]
mod router;
#[cfg(feature = "io")]
mod signal;

#[cfg(feature = "io")]
pub use link_watch::SILENT_LINK_NOTICED;

#[cfg(feature = "io")]
pub use backoff::Backoff;
#[cfg(feature = "io")]
pub use dealer::{Dealer, DealerConfig, DealerEvent, DealerSender};
#[cfg(feature = "io")]
pub use notify::{notify_ready, notify_to};
#[cfg(feature = "io")]
pub use open_files::{open_files_limit, raise_open_files, OpenFilesError};
pub use peers::{CloseReason, Lane, PeerId, RouterEvent, SendError};
#[cfg(feature = "io")]
pub use router::{Router, RouterConfig, RouterSender};
#[cfg(feature = "io")]
pub use signal::shutdown_signal;
