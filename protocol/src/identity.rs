//! Node identities: ed25519 keys, their public halves, and the fingerprints humans compare.

use std::fmt;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use rand_core::{CryptoRng, RngCore};
use sha2::{Digest, Sha256};

use crate::hex;

/// Why a public key or signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The bytes are not a valid ed25519 point.
    #[error("not a valid ed25519 public key")]
    InvalidKey,
    /// The key has small order: anyone could forge signatures that verify under it.
    #[error("weak (small-order) ed25519 public key refused")]
    WeakKey,
    /// A signature did not verify (strict verification).
    #[error("bad signature")]
    BadSignature,
    /// A field had the wrong length.
    #[error("{what} must be {expected} bytes, got {got}")]
    BadLength {
        /// Which field.
        what: &'static str,
        /// Required length.
        expected: usize,
        /// Length seen.
        got: usize,
    },
}

/// A node's private ed25519 identity key (master, minion or client).
#[derive(Clone)]
pub struct IdentityKey(SigningKey);

impl IdentityKey {
    /// Generates a fresh key from a cryptographic random source.
    pub fn generate<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        IdentityKey(SigningKey::generate(rng))
    }

    /// Generates a fresh key from the operating system's random source.
    pub fn generate_os() -> Self {
        Self::generate(&mut rand_core::OsRng)
    }

    /// Rebuilds a key from its 32-byte seed.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        IdentityKey(SigningKey::from_bytes(seed))
    }

    /// The 32-byte seed (secret). Only the key-file encoder should need this.
    pub fn seed(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    /// The public half.
    pub fn public(&self) -> PublicIdentity {
        PublicIdentity(self.0.verifying_key())
    }

    /// Signs `domain || message`. Every use of an identity key has its own domain string, so a
    /// signature made for one purpose is never valid for another.
    pub fn sign(&self, domain: &[u8], message: &[u8]) -> [u8; 64] {
        let mut signed = Vec::with_capacity(domain.len() + message.len());
        signed.extend_from_slice(domain);
        signed.extend_from_slice(message);
        self.0.sign(&signed).to_bytes()
    }
}

impl fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdentityKey({})", self.public().fingerprint())
    }
}

/// A node's public ed25519 identity, known to be a valid, non-weak point.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicIdentity(VerifyingKey);

impl PublicIdentity {
    /// Parses 32 bytes, refusing invalid and weak (small-order) keys.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, IdentityError> {
        let bytes: &[u8; 32] = bytes.try_into().map_err(|_| IdentityError::BadLength {
            what: "ed25519 public key",
            expected: 32,
            got: bytes.len(),
        })?;
        let key = VerifyingKey::from_bytes(bytes).map_err(|_| IdentityError::InvalidKey)?;
        if key.is_weak() {
            return Err(IdentityError::WeakKey);
        }
        Ok(PublicIdentity(key))
    }

    /// The 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    /// Verifies a signature made by [`IdentityKey::sign`] with the same domain, strictly
    /// (no malleable or non-canonical signatures).
    pub fn verify(&self, domain: &[u8], message: &[u8], signature: &[u8]) -> Result<(), IdentityError> {
        let signature: &[u8; 64] = signature.try_into().map_err(|_| IdentityError::BadLength {
            what: "ed25519 signature",
            expected: 64,
            got: signature.len(),
        })?;
        let mut signed = Vec::with_capacity(domain.len() + message.len());
        signed.extend_from_slice(domain);
        signed.extend_from_slice(message);
        self.0.verify_strict(&signed, &Signature::from_bytes(signature)).map_err(|_| IdentityError::BadSignature)
    }

    /// The fingerprint shown to humans: SHA-256 of the public key as colon-separated hex pairs,
    /// the form `salt-key -f` uses.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.as_bytes());
        let mut out = String::with_capacity(95);
        for (i, byte) in digest.iter().enumerate() {
            if i > 0 {
                out.push(':');
            }
            out.push_str(&hex::encode(&[*byte]));
        }
        out
    }
}

impl fmt::Debug for PublicIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicIdentity({})", hex::encode(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_domain_separated() {
        let key = IdentityKey::from_seed(&[7; 32]);
        let sig = key.sign(b"halite-a\0", b"msg");
        assert_eq!(key.public().verify(b"halite-a\0", b"msg", &sig), Ok(()));
        assert_eq!(key.public().verify(b"halite-b\0", b"msg", &sig), Err(IdentityError::BadSignature));
    }

    #[test]
    fn weak_keys_are_refused() {
        // The identity point (0, 1) has small order.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(PublicIdentity::from_bytes(&identity), Err(IdentityError::WeakKey));
        assert!(matches!(PublicIdentity::from_bytes(&[1; 31]), Err(IdentityError::BadLength { .. })));
    }

    #[test]
    fn fingerprints_are_sha256_colon_hex() {
        let fp = IdentityKey::from_seed(&[1; 32]).public().fingerprint();
        assert_eq!(fp.len(), 95);
        assert_eq!(fp.split(':').count(), 32);
    }
}
