//! The engine SDK (Rust) and the `halite` admin CLI: connect to a master as a principal, publish
//! jobs, stream returns and events.
//!
//! It talks to the master only through the protocol, never through `halite-master` internals.
//!
//! The SDK is not built yet; this crate only fixes its place in the workspace.
