//! The minion's execution modules: the registry of named, locally defined actions
//! (`test.ping`, `cmd.run`, `pkg.install`, ...), their typed arguments, their documentation,
//! the minion's policy over them, and local custom actions.
//!
//! A master can only name these functions, never define them. This crate knows nothing of the
//! network or of cryptography: the minion daemon (or `halite-minion call`) decodes a job and
//! calls through a [`Dispatcher`] (registry + [`Policy`]) with [`Args`] and a [`Context`].
//!
//! Cancellation is by drop: the minion drops a call's future at its timeout or on a cancel, and
//! every function is written so that dropping it stops its work: the [`Runner`] kills a
//! command's whole process group.
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

pub mod actions;
mod arg_errors;
mod args;
mod coerce;
mod context;
mod dispatcher;
pub mod docs;
mod function;
mod functions;
pub mod grains;
mod hostile_tests;
mod master_files;
mod paths;
mod policy;
mod registry;
mod runner;
#[cfg(any(feature = "cmd", feature = "deploy"))]
mod shebang;
mod temp_file;

pub use args::Args;
pub use context::{Context, FileRequest, OutgoingEvent, PeerRefusal, PeerRequest};
pub use dispatcher::Dispatcher;
pub use function::{CallFuture, Function, ModuleError, Output, Typed};
pub use functions::deploy_settings::DeploySettings;
pub use paths::{Access, PathGuard, Pinned, ReadFile};
pub use policy::{CallerRule, Policy, PolicyRefusal, DEFAULT_ALLOW};
pub use registry::{valid_name, AlreadyDefined, Registry};
pub use runner::{Command, Finished, Runner, OUTPUT_CAP};
