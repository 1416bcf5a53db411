//! The halite master daemon.
pub mod config;
pub mod store;
pub mod target;
