//! Jobs and their master signature.
//!
//! The master signs the exact bytes it sends: `signature = ed25519(JOB_SIGNATURE_DOMAIN ||
//! body)`, where `body` is the MessagePack encoding of [`Job`]. Verifying the transmitted bytes
//! (rather than a re-encoding) makes the canonical form simply "the bytes signed", so two
//! implementations never disagree about canonicalisation.
//!
//! A master of a cluster (one holding a certificate from the cluster key) appends who signed
//! to the signature bytes: `signature || signer key (32) || certificate (96) || name length (1)
//! || name`. Any master of the cluster may deliver a job another one signed; a minion pinning
//! the cluster key checks the certificate, then the signature under the signer's key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::codec::{from_slice, to_vec, CodecError};
use super::{JobSpec, Value};
use crate::identity::{IdentityError, IdentityKey, PublicIdentity};
use crate::noise::{MasterCertificate, CERTIFICATE_LEN};

/// How long each minion may run a job when the publisher does not say: an hour, the CLI's
/// (`--job-timeout`), the SDKs', the gateway's and `peer.publish`'s default alike. Salt kills
/// no job by default; an hour stops a hung one without cutting an upgrade short.
pub const DEFAULT_JOB_TIMEOUT_MS: u64 = 3_600_000;

/// Domain separation for job signatures.
pub const JOB_SIGNATURE_DOMAIN: &[u8] = b"halite-job-signature-v1\0";

/// A job as the master issued it: what a minion runs of a [`JobSpec`], and under which id,
/// when and for whom (its target and rollout are the master's business, not sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Job id, unique per master: `YYYYMMDDhhmmssffffff` like Salt's.
    pub jid: String,
    /// [`JobSpec::function`].
    pub function: String,
    /// [`JobSpec::args`].
    #[serde(default)]
    pub args: Vec<Value>,
    /// [`JobSpec::kwargs`].
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
    /// [`JobSpec::timeout_ms`].
    pub timeout_ms: u64,
    /// When the master issued the job, Unix milliseconds.
    pub issued_at_ms: u64,
    /// [`JobSpec::ttl_ms`]: how long after `issued_at_ms` the job may still start.
    pub ttl_ms: u64,
    /// The principal on whose behalf the job runs (for the minion's per-caller policy).
    pub caller: String,
    /// Function globs the caller may reach on this job's targets, directly or through
    /// functions that call functions (`plan.run` steps and guards, stored plans): the minion
    /// refuses any nested call outside them. `None` for a caller without limits (root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<Vec<String>>,
}

impl Job {
    /// The job the master signs for `spec`, issued as `jid` at `issued_at_ms` (Unix ms) on
    /// `caller`'s behalf, reaching at most `reach` (see [`Job::reach`]).
    pub fn issue(jid: String, spec: &JobSpec, issued_at_ms: u64, caller: String, reach: Option<Vec<String>>) -> Job {
        Job {
            jid,
            function: spec.function.clone(),
            args: spec.args.clone(),
            kwargs: spec.kwargs.clone(),
            timeout_ms: spec.timeout_ms,
            issued_at_ms,
            ttl_ms: spec.ttl_ms,
            caller,
            reach,
        }
    }
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
    /// The master's time (Unix ms) by which the minion must have started the job: when this
    /// delivery was sent plus the job's timeout. Past it the master may already have recorded
    /// the job timed out, so a minion that gets it late (it was frozen, its link stalled) reports
    /// it `timed_out` and never runs it. Set at each delivery, so not signed; the session it
    /// comes over is the master's. `None` from a master that does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_by_ms: Option<u64>,
}

/// Why a signed job was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The signature does not verify under the master's key.
    #[error("job signature invalid: {0}")]
    Signature(#[from] IdentityError),
    /// The signing master is not the pinned key, nor certified by it.
    #[error("job signed by {0}, a master the pinned key does not certify")]
    Signer(String),
    /// The signed body is not a valid job.
    #[error("job body invalid: {0}")]
    Body(#[from] CodecError),
}

impl SignedJob {
    /// Encodes and signs a job.
    pub fn sign(job: &Job, key: &IdentityKey) -> Self {
        let body = to_vec(job);
        let signature = key.sign(JOB_SIGNATURE_DOMAIN, &body).to_vec();
        SignedJob { body, signature, start_by_ms: None }
    }

    /// Encodes and signs a job as a master of a cluster, naming itself (`name`, its id) and
    /// attaching its certificate.
    pub fn sign_certified(job: &Job, key: &IdentityKey, certificate: &MasterCertificate, name: &str) -> Self {
        let mut signed = SignedJob::sign(job, key);
        let name = &name.as_bytes()[..name.len().min(255)];
        signed.signature.extend_from_slice(key.public().as_bytes());
        signed.signature.extend_from_slice(&certificate.to_bytes());
        signed.signature.push(name.len() as u8);
        signed.signature.extend_from_slice(name);
        signed
    }

    /// The master that signed, when the signature names one (a master of a cluster): its key,
    /// its certificate and its name. Not checked here; [`SignedJob::verify`] checks them.
    fn signer(&self) -> Result<Option<(PublicIdentity, MasterCertificate, &str)>, JobError> {
        let Some(tail) = self.signature.get(64..).filter(|t| !t.is_empty()) else { return Ok(None) };
        let malformed = || JobError::Signer("a malformed signer".into());
        if tail.len() < 32 + CERTIFICATE_LEN + 1 {
            return Err(malformed());
        }
        let key = PublicIdentity::from_bytes(&tail[..32])?;
        let certificate = MasterCertificate::from_bytes(&tail[32..32 + CERTIFICATE_LEN]).map_err(|_| malformed())?;
        let name = &tail[32 + CERTIFICATE_LEN + 1..];
        if name.len() != usize::from(tail[32 + CERTIFICATE_LEN]) {
            return Err(malformed());
        }
        let name = std::str::from_utf8(name).map_err(|_| malformed())?;
        Ok(Some((key, certificate, name)))
    }

    /// The key of the master that signed, when the signature names one.
    pub fn signer_key(&self) -> Option<PublicIdentity> {
        self.signer().ok().flatten().map(|(key, _, _)| key)
    }

    /// The jid the body claims, read without checking the signature: only to name the job a
    /// minion refuses (a forged body names a job its own session may fail anyway).
    pub fn claimed_jid(&self) -> Option<String> {
        let job: Job = from_slice(&self.body).ok()?;
        crate::id::validate(&job.jid).ok()?;
        Some(job.jid)
    }

    /// Verifies the signature (under `master`, or under a master `master` certified), then
    /// decodes the body. Nothing in the body is looked at before the signature checks out.
    pub fn verify(&self, master: &PublicIdentity) -> Result<Job, JobError> {
        let signer = match self.signer()? {
            None => *master,
            Some((key, _, _)) if key == *master => key,
            Some((key, certificate, name)) => {
                if certificate.cluster != *master || certificate.verify(&key, name).is_err() {
                    return Err(JobError::Signer(key.fingerprint()));
                }
                key
            }
        };
        signer.verify(JOB_SIGNATURE_DOMAIN, &self.body, &self.signature[..self.signature.len().min(64)])?;
        Ok(from_slice(&self.body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Job {
            jid: "20261123000000000001".into(),
            function: "test.ping".into(),
            args: Vec::new(),
            kwargs: BTreeMap::new(),
            timeout_ms: 1_000,
            issued_at_ms: 1,
            ttl_ms: 0,
            caller: "root".into(),
            reach: None,
        }
    }

    #[test]
    fn a_job_signed_by_a_certified_master_verifies_under_the_cluster_key_only_as_certified() {
        let cluster = IdentityKey::from_seed(&[1; 32]);
        let master = IdentityKey::from_seed(&[2; 32]);
        let certificate = MasterCertificate::issue(&cluster, &master.public(), "m1");
        let signed = SignedJob::sign_certified(&job(), &master, &certificate, "m1");
        assert_eq!(signed.verify(&cluster.public()).unwrap(), job());
        assert_eq!(signed.verify(&master.public()).unwrap(), job(), "its own key, pinned");
        assert_eq!(signed.signer_key(), Some(master.public()));
        let stranger = IdentityKey::from_seed(&[3; 32]).public();
        assert!(matches!(signed.verify(&stranger), Err(JobError::Signer(_))));
        // Another name than the certified one, a body changed, a cut signer: refused.
        let renamed = SignedJob::sign_certified(&job(), &master, &certificate, "m2");
        assert!(renamed.verify(&cluster.public()).is_err());
        let mut changed = signed.clone();
        changed.body[3] ^= 1;
        assert!(changed.verify(&cluster.public()).is_err());
        let mut cut = signed.clone();
        cut.signature.truncate(100);
        assert!(cut.verify(&cluster.public()).is_err());
        // A plain signature still verifies under its master's key, and not under the cluster's.
        let plain = SignedJob::sign(&job(), &master);
        assert!(plain.verify(&master.public()).is_ok() && plain.verify(&cluster.public()).is_err());
        assert_eq!(plain.signer_key(), None);
    }
}
