//! The halite minion daemon: connects out to its master, authenticates, announces its grains and
//! functions, runs signed jobs through `halite-modules`, and keeps every result in a durable
//! outbox until the master acknowledges it.
//!
//! It does not depend on the master crate or on any database; it trusts nobody by default.
//!
//! The daemon is not built yet; this crate only fixes its place in the workspace.
