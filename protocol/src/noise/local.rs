//! This node's side of a handshake: its identity and the static key bound to it.

use std::sync::Arc;

use super::{HandshakeError, NOISE_PARAMS, STATIC_KEY_DOMAIN};
use crate::identity::{IdentityKey, PublicIdentity};

/// This node's identity key with an X25519 static key and the signature binding the two.
///
/// The static key is generated once per process; the signature over it is made once, not per
/// handshake. Cheap to clone.
#[derive(Clone)]
pub struct LocalIdentity(Arc<Inner>);

struct Inner {
    key: IdentityKey,
    static_private: Vec<u8>,
    /// The identity payload sent in the handshake, minus the role byte:
    /// `ed25519 public key (32) || signature over the static key (64)`.
    binding: Vec<u8>,
    /// A master's certificate from its cluster key, sent after its claim.
    certificate: Option<super::MasterCertificate>,
}

impl LocalIdentity {
    /// Generates a static key and binds it to `key`.
    pub fn new(key: IdentityKey) -> Result<Self, HandshakeError> {
        let keypair = snow::Builder::new(params()).generate_keypair()?;
        let signature = key.sign(STATIC_KEY_DOMAIN, &keypair.public);
        let mut binding = Vec::with_capacity(96);
        binding.extend_from_slice(key.public().as_bytes());
        binding.extend_from_slice(&signature);
        Ok(LocalIdentity(Arc::new(Inner { key, static_private: keypair.private, binding, certificate: None })))
    }

    /// The same identity presenting `certificate` (a master of a cluster) in its handshakes.
    pub fn with_certificate(&self, certificate: super::MasterCertificate) -> Self {
        LocalIdentity(Arc::new(Inner {
            key: IdentityKey::from_seed(self.0.key.seed()),
            static_private: self.0.static_private.clone(),
            binding: self.0.binding.clone(),
            certificate: Some(certificate),
        }))
    }

    /// The certificate presented, if any.
    pub fn certificate(&self) -> Option<&super::MasterCertificate> {
        self.0.certificate.as_ref()
    }

    /// The public identity.
    pub fn public(&self) -> PublicIdentity {
        self.0.key.public()
    }

    /// The identity key, for signing jobs and the like.
    pub fn key(&self) -> &IdentityKey {
        &self.0.key
    }

    pub(crate) fn static_private(&self) -> &[u8] {
        &self.0.static_private
    }

    pub(crate) fn binding(&self) -> &[u8] {
        &self.0.binding
    }
}

impl std::fmt::Debug for LocalIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LocalIdentity").field(&self.public().fingerprint()).finish()
    }
}

pub(crate) fn params() -> snow::params::NoiseParams {
    // A constant that parses; covered by every handshake test.
    #[allow(clippy::expect_used)]
    NOISE_PARAMS.parse().expect("NOISE_PARAMS is a valid Noise protocol name")
}
