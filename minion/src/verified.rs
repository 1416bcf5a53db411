//! A cache of verified jobs shared by the minions of one process (the swarm).
//!
//! Every minion of a fan-out receives the same signed bytes. Separate machines each verify on
//! their own CPU, in parallel; thousands of embedded minions on one machine would instead
//! measure the load generator's ed25519 throughput. With this cache, a process verifies each
//! distinct signed job once. The daemon never uses it: a real minion verifies every job.

use std::collections::HashMap;
use std::sync::Mutex;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{Job, JobError, SignedJob};
use sha2::{Digest, Sha256};

/// Distinct jobs remembered; the cache starts over when full.
const CAPACITY: usize = 4096;

/// Signed jobs already verified, by the SHA-256 of their bytes and signature.
#[derive(Debug, Default)]
pub struct VerifiedJobs {
    jobs: Mutex<HashMap<[u8; 32], Job>>,
}

impl VerifiedJobs {
    /// An empty cache.
    pub fn new() -> Self {
        VerifiedJobs::default()
    }

    /// [`SignedJob::verify`], once per distinct signed job and master key.
    pub(crate) fn verify(&self, signed: &SignedJob, master: &PublicIdentity) -> Result<Job, JobError> {
        let mut hasher = Sha256::new();
        hasher.update(master.as_bytes());
        hasher.update(&signed.body);
        hasher.update(&signed.signature);
        let digest: [u8; 32] = hasher.finalize().into();
        if let Some(job) = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&digest) {
            return Ok(job.clone());
        }
        let job = signed.verify(master)?;
        let mut jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if jobs.len() >= CAPACITY {
            jobs.clear();
        }
        jobs.insert(digest, job.clone());
        Ok(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_protocol::identity::IdentityKey;

    fn job(jid: &str) -> Job {
        Job {
            jid: jid.into(),
            function: "test.ping".into(),
            args: Vec::new(),
            kwargs: Default::default(),
            timeout_ms: 1000,
            issued_at_ms: 1,
            ttl_ms: 0,
            caller: "root".into(),
            reach: None,
        }
    }

    #[test]
    fn a_cached_verdict_never_covers_other_bytes_or_another_master() {
        let (master, other) = (IdentityKey::generate_os(), IdentityKey::generate_os());
        let cache = VerifiedJobs::new();
        let signed = SignedJob::sign(&job("1"), &master);
        assert_eq!(cache.verify(&signed, &master.public()).unwrap().jid, "1");
        assert_eq!(cache.verify(&signed, &master.public()).unwrap().jid, "1");
        assert!(cache.verify(&signed, &other.public()).is_err(), "another master's key");
        let mut tampered = signed.clone();
        tampered.body[0] ^= 1;
        assert!(cache.verify(&tampered, &master.public()).is_err(), "other bytes");
        let forged = SignedJob { body: SignedJob::sign(&job("2"), &master).body, ..signed.clone() };
        assert!(cache.verify(&forged, &master.public()).is_err(), "a signature moved to other bytes");
    }
}
