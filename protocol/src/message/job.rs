//! Jobs and their master signature.
//!
//! The master signs the exact bytes it sends: `signature = ed25519(JOB_SIGNATURE_DOMAIN ||
//! body)`, where `body` is the MessagePack encoding of [`Job`]. Verifying the transmitted bytes
//! (rather than a re-encoding) makes the canonical form simply "the bytes signed", so two
//! implementations never disagree about canonicalisation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::codec::{from_slice, to_vec, CodecError};
use super::Value;
use crate::identity::{IdentityError, IdentityKey, PublicIdentity};

/// Domain separation for job signatures.
pub const JOB_SIGNATURE_DOMAIN: &[u8] = b"halite-job-signature-v1\0";

/// A job as the master issued it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Job id, unique per master: `YYYYMMDDhhmmssffffff` like Salt's.
    pub jid: String,
    /// Fully qualified function, e.g. `pkg.install`.
    pub function: String,
    /// Positional arguments.
    #[serde(default)]
    pub args: Vec<Value>,
    /// Keyword arguments, sorted by name.
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
    /// Execution timeout, milliseconds; the minion kills the job's process group after it.
    pub timeout_ms: u64,
    /// When the master issued the job, Unix milliseconds.
    pub issued_at_ms: u64,
    /// How long after `issued_at_ms` the job may still start, milliseconds.
    pub ttl_ms: u64,
    /// The principal on whose behalf the job runs (for the minion's per-caller policy).
    pub caller: String,
    /// Function globs the caller may reach on this job's targets, directly or through
    /// functions that call functions (`plan.run` steps and guards, stored plans): the minion
    /// refuses any nested call outside them. `None` for a caller without limits (root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<Vec<String>>,
}

/// A job with the master's signature over its encoded bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedJob {
    /// MessagePack encoding of [`Job`].
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// ed25519 signature over `JOB_SIGNATURE_DOMAIN || body`.
    #[serde(with = "serde_bytes")]
    pub signature: Vec<u8>,
}

/// Why a signed job was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The signature does not verify under the master's key.
    #[error("job signature invalid: {0}")]
    Signature(#[from] IdentityError),
    /// The signed body is not a valid job.
    #[error("job body invalid: {0}")]
    Body(#[from] CodecError),
}

impl SignedJob {
    /// Encodes and signs a job.
    pub fn sign(job: &Job, key: &IdentityKey) -> Self {
        let body = to_vec(job);
        let signature = key.sign(JOB_SIGNATURE_DOMAIN, &body).to_vec();
        SignedJob { body, signature }
    }

    /// Verifies the signature, then decodes the body. Nothing in the body is looked at before
    /// the signature checks out.
    pub fn verify(&self, master: &PublicIdentity) -> Result<Job, JobError> {
        master.verify(JOB_SIGNATURE_DOMAIN, &self.body, &self.signature)?;
        Ok(from_slice(&self.body)?)
    }
}
