//! One audit record: what the master appends (an [`AuditEntry`]) and what the store keeps of it
//! (an [`AuditRecord`]: its place in its chain, the hash chaining it to the record before, and
//! the signature of the master that wrote it).
//!
//! The hash covers the chain's name, the record's number in it, its time, the hash of the
//! record before and the entry's JSON exactly as stored; the signature covers the hash. So a
//! record changed, removed or moved breaks the chain at that place, and a record written by
//! anything but a master (a database role) carries no signature a master's key makes.

use crate::identity::{IdentityKey, PublicIdentity};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a record's hash is over (domain-separated from every other hash of the master's).
const RECORD_HASH: &[u8] = b"halite audit record v1\0";
/// What a record's signature covers: its hash.
const RECORD_SIGNATURE: &[u8] = b"halite audit record signature v1";
/// What a checkpoint's signature covers: the chain, the number and hash of the last record
/// pruned.
const CHECKPOINT_SIGNATURE: &[u8] = b"halite audit checkpoint v1";

/// The hash before a chain's first record.
pub const GENESIS: [u8; 32] = [0; 32];

/// The kind (and action) of a record that cross-links chains: a master writes into its own
/// chain the last record number of every other master's (`detail.heads`), so a chain cut
/// short at its end is found by the records that saw it longer.
pub const CHAIN_HEADS: &str = "chain_heads";

/// What happened, as the master appends it. The store fills in its place in the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AuditEntry {
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// What kind of record: `request`, `job_end`, `deployment_end`, `group_end`, `key`,
    /// `policy`, `master`.
    pub kind: String,
    /// Who: a principal's name, `root`, `minion:<id>`, or `master` for what the master did
    /// by itself.
    pub principal: String,
    /// The tenant the record belongs to (the asker's, or the tenant of every minion it is
    /// about), if any: what a tenant's principal may read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// What was asked or happened (`publish`, `key_accept`, `principal_add`, …).
    pub action: String,
    /// `granted`, `refused`, `failed`, or the final state of what ended.
    pub decision: String,
    /// Why, when refused or failed (the answer's message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The minions it concerns (targets, a job's minions, a key's id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub minions: Vec<String>,
    /// The rest: session and address, the request's arguments (secrets left out), a job's
    /// states.
    #[serde(default)]
    pub detail: serde_json::Value,
}

impl AuditEntry {
    /// The entry's JSON as it is stored and hashed: made through `serde_json::Value`, so
    /// reading it back and writing it again gives the same bytes.
    pub fn to_json(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        value.to_string()
    }
}

/// A record as stored: an entry in its place in one master's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AuditRecord {
    /// Its place in the store's order (a cursor for paging; not covered by the hash).
    pub id: i64,
    /// The chain: the id of the master that wrote it.
    pub chain: String,
    /// Its number in the chain, from 1.
    pub seq: u64,
    /// The entry's JSON, as hashed.
    pub body: String,
    /// The hash of the record before (hex; zeros before the first).
    pub prev: String,
    /// This record's hash (hex).
    pub hash: String,
    /// The public key of the master that signed it (hex).
    pub signer: String,
    /// Its ed25519 signature over the hash (hex).
    pub signature: String,
}

impl AuditRecord {
    /// The entry it holds, if its body is one.
    pub fn entry(&self) -> Option<AuditEntry> {
        serde_json::from_str(&self.body).ok()
    }
}

/// Where a pruned chain now starts: the last record removed, signed by the master that pruned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The chain.
    pub chain: String,
    /// The number of the last record removed (the chain goes on at `seq + 1`).
    pub seq: u64,
    /// Its hash (hex): the next record's `prev`.
    pub hash: String,
    /// The signer's public key (hex).
    pub signer: String,
    /// The signature (hex).
    pub signature: String,
}

/// The hash of record `seq` of `chain` with this `body`, after the record hashed `prev`.
pub fn record_hash(chain: &str, seq: u64, prev: &[u8; 32], body: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(RECORD_HASH);
    hasher.update((chain.len() as u64).to_be_bytes());
    hasher.update(chain.as_bytes());
    hasher.update(seq.to_be_bytes());
    hasher.update(prev);
    hasher.update(body.as_bytes());
    hasher.finalize().into()
}

/// Signs a record's hash.
pub(super) fn sign_record(key: &IdentityKey, hash: &[u8; 32]) -> [u8; 64] {
    key.sign(RECORD_SIGNATURE, hash)
}

/// Whether `signature` is `signer`'s over a record's hash.
pub fn record_signed_by(signer: &PublicIdentity, hash: &[u8; 32], signature: &[u8]) -> bool {
    signer.verify(RECORD_SIGNATURE, hash, signature).is_ok()
}

fn checkpoint_bytes(chain: &str, seq: u64, hash: &[u8; 32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(chain.len() + 48);
    bytes.extend_from_slice(&(chain.len() as u64).to_be_bytes());
    bytes.extend_from_slice(chain.as_bytes());
    bytes.extend_from_slice(&seq.to_be_bytes());
    bytes.extend_from_slice(hash);
    bytes
}

/// Signs a checkpoint: the chain goes on after record `seq`, hashed `hash`.
pub fn sign_checkpoint(key: &IdentityKey, chain: &str, seq: u64, hash: &[u8; 32]) -> [u8; 64] {
    key.sign(CHECKPOINT_SIGNATURE, &checkpoint_bytes(chain, seq, hash))
}

/// Whether a checkpoint's signature is its signer's.
pub fn checkpoint_signed_by(signer: &PublicIdentity, chain: &str, seq: u64, hash: &[u8; 32], signature: &[u8]) -> bool {
    signer.verify(CHECKPOINT_SIGNATURE, &checkpoint_bytes(chain, seq, hash), signature).is_ok()
}

/// 32 bytes from hex, if they are.
pub fn hash_from_hex(text: &str) -> Option<[u8; 32]> {
    crate::hex::decode(text)?.try_into().ok()
}

/// The records an append makes of `entries`, continuing `chain` after record `seq` hashed
/// `prev`, signed with `key`.
pub fn chain_records(
    key: &IdentityKey,
    chain: &str,
    mut seq: u64,
    mut prev: [u8; 32],
    entries: &[AuditEntry],
) -> Vec<AuditRecord> {
    let signer = crate::hex::encode(key.public().as_bytes());
    entries
        .iter()
        .map(|entry| {
            seq += 1;
            let body = entry.to_json();
            let hash = record_hash(chain, seq, &prev, &body);
            let record = AuditRecord {
                id: 0,
                chain: chain.to_owned(),
                seq,
                body,
                prev: crate::hex::encode(&prev),
                hash: crate::hex::encode(&hash),
                signer: signer.clone(),
                signature: crate::hex::encode(&sign_record(key, &hash)),
            };
            prev = hash;
            record
        })
        .collect()
}
