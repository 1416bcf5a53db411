//! The minion's execution modules: the registry of named, locally defined actions
//! (`test.ping`, `cmd.run`, `pkg.install`, ...), their typed argument schemas and their docs.
//!
//! A master can only name these functions, never define them. This crate knows nothing of the
//! network or of cryptography: the minion daemon calls into it with decoded arguments and sends
//! the results back itself.
//!
//! The registry is not built yet; this crate only fixes its place in the workspace.
