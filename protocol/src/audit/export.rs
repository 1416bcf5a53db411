//! An exported audit trail (`halite audit export --out FILE`): JSON lines, the first an
//! [`ExportHeader`] (the masters whose chains follow, with their keys and certificates, and the
//! checkpoints where pruned chains start), then one [`AuditRecord`](super::AuditRecord) per
//! line in store order. Verifiable offline with a master's key or the cluster's
//! (`halite audit verify --file FILE`): the header says which keys signed, the key given says
//! which to believe.

use serde::{Deserialize, Serialize};

use super::Checkpoint;

/// The header's `format`.
pub const EXPORT_FORMAT: &str = "halite-audit-export-v1";

/// The first line of an export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExportHeader {
    /// [`EXPORT_FORMAT`].
    pub format: String,
    /// The masters whose chains the export holds.
    pub masters: Vec<ExportedMaster>,
    /// Where pruned chains start.
    pub checkpoints: Vec<Checkpoint>,
    /// Each chain's last record when the export was made: an export cut short shows.
    #[serde(default)]
    pub heads: std::collections::BTreeMap<String, u64>,
}

/// A master whose chain an export holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExportedMaster {
    /// Its id (its chain).
    pub id: String,
    /// Its public key (hex).
    pub key: String,
    /// Its certificate from the cluster key (hex), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
}
