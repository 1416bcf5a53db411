//! The audit trail's records, as the master's store keeps them, its answers carry and its
//! export holds: each record chained to the one before it by hash and signed by the master
//! that wrote it (one chain per master), and the check that finds the first record removed,
//! changed or moved (`verify.rs`). Pure: no I/O, no clock; the master appends and stores,
//! `halite audit verify` checks a store or an exported file with these.

mod export;
mod record;
mod verify;

pub use export::{ExportHeader, ExportedMaster, EXPORT_FORMAT};
pub use record::{
    chain_records, checkpoint_signed_by, hash_from_hex, record_hash, record_signed_by, sign_checkpoint, AuditEntry,
    AuditRecord, Checkpoint, CHAIN_HEADS, GENESIS,
};
pub use verify::{Broken, Trusted, Verified, Verifier};
