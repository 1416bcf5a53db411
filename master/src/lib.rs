//! The halite master daemon: key registry, minion registry and targeting, job dispatch, the
//! event bus and the store.
//!
//! It never runs modules itself; minions do.
//!
//! The daemon is not built yet; this crate only fixes its place in the workspace.
