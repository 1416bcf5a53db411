//! The minion's execution modules: the registry of named, locally defined actions
//! (`test.ping`, `cmd.run`, ...), their typed arguments and their documentation.
//!
//! A master can only name these functions, never define them. This crate knows nothing of the
//! network or of cryptography: the minion daemon (or `halite-minion call`) decodes a job, looks
//! the function up in [`Registry`], and calls it with [`Args`] and a [`Context`].
//!
//! Cancellation is by drop: the minion drops a call's future at its timeout or on a cancel, and
//! every function is written so that dropping it stops its work (a command's whole process group
//! is killed).
//!
//! ```
//! # tokio_test_block_on(async {
//! use halite_modules::{Args, Context, Registry};
//! let registry = Registry::standard();
//! let ping = registry.get("test.ping").unwrap();
//! let out = ping.call(Args::default(), &Context::default()).await.unwrap();
//! assert_eq!(out.value, serde_json::json!(true));
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

mod args;
mod context;
mod function;
mod functions;
pub mod grains;
mod registry;

pub use args::Args;
pub use context::Context;
pub use function::{CallFuture, Function, ModuleError, Output};
pub use registry::Registry;
