//! A cluster of masters under one key: the cluster key (kept offline by the operator) certifies
//! each master's own identity key, and can revoke one. A minion or client pins the cluster key
//! and accepts any master holding a certificate from it that it has not seen revoked, so adding
//! or replacing a master changes nothing on them, and a retired master's key can be revoked
//! alone.
//!
//! A certificate travels at the end of the master's identity payload in handshake message 2;
//! revocations travel in `welcome` and are kept by the minion.

use super::HandshakeError;
use crate::identity::{IdentityKey, PublicIdentity};

/// What a certificate's signature covers: the master's key, then its name.
const CERTIFICATE_DOMAIN: &[u8] = b"halite master certificate v1";
/// What a revocation's signature covers: the revoked master's key.
const REVOCATION_DOMAIN: &[u8] = b"halite master revocation v1";

/// Encoded length of a certificate: the cluster key (32) and its signature (64).
pub const CERTIFICATE_LEN: usize = 96;

/// The cluster key's statement that a master key, under a name, belongs to the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterCertificate {
    /// The cluster key that signed it.
    pub cluster: PublicIdentity,
    signature: [u8; 64],
}

fn signed_by_cluster(master: &PublicIdentity, name: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(32 + name.len());
    message.extend_from_slice(master.as_bytes());
    message.extend_from_slice(name.as_bytes());
    message
}

impl MasterCertificate {
    /// Certifies `master` (named `name`, the master's `id`) with the cluster key.
    pub fn issue(cluster: &IdentityKey, master: &PublicIdentity, name: &str) -> Self {
        let signature = cluster.sign(CERTIFICATE_DOMAIN, &signed_by_cluster(master, name));
        MasterCertificate { cluster: cluster.public(), signature }
    }

    /// Checks that this certifies `master` under `name`.
    pub fn verify(&self, master: &PublicIdentity, name: &str) -> Result<(), HandshakeError> {
        self.cluster.verify(CERTIFICATE_DOMAIN, &signed_by_cluster(master, name), &self.signature)?;
        Ok(())
    }

    /// The wire and file form.
    pub fn to_bytes(&self) -> [u8; CERTIFICATE_LEN] {
        let mut out = [0u8; CERTIFICATE_LEN];
        out[..32].copy_from_slice(self.cluster.as_bytes());
        out[32..].copy_from_slice(&self.signature);
        out
    }

    /// Reads [`MasterCertificate::to_bytes`]'s form (the signature is checked by `verify`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, HandshakeError> {
        if bytes.len() != CERTIFICATE_LEN {
            return Err(HandshakeError::Malformed("a master certificate is 96 bytes"));
        }
        let cluster = PublicIdentity::from_bytes(&bytes[..32])?;
        let mut signature = [0u8; 64];
        signature.copy_from_slice(&bytes[32..]);
        Ok(MasterCertificate { cluster, signature })
    }
}

/// The cluster key's statement that a master key no longer belongs to the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// The revoked master key.
    pub master: PublicIdentity,
    signature: [u8; 64],
}

impl Revocation {
    /// Revokes `master` with the cluster key.
    pub fn issue(cluster: &IdentityKey, master: &PublicIdentity) -> Self {
        Revocation { master: *master, signature: cluster.sign(REVOCATION_DOMAIN, master.as_bytes()) }
    }

    /// Checks that `cluster` signed it.
    pub fn verify(&self, cluster: &PublicIdentity) -> Result<(), HandshakeError> {
        cluster.verify(REVOCATION_DOMAIN, self.master.as_bytes(), &self.signature)?;
        Ok(())
    }

    /// As text: the master key and the signature, hex.
    pub fn to_hex(&self) -> String {
        let mut bytes = Vec::with_capacity(96);
        bytes.extend_from_slice(self.master.as_bytes());
        bytes.extend_from_slice(&self.signature);
        crate::hex::encode(&bytes)
    }

    /// Reads [`Revocation::to_hex`]'s form (the signature is checked by `verify`).
    pub fn from_hex(text: &str) -> Result<Self, HandshakeError> {
        let bytes = crate::hex::decode(text.trim()).filter(|b| b.len() == 96);
        let bytes = bytes.ok_or(HandshakeError::Malformed("a revocation is 192 hex digits"))?;
        let master = PublicIdentity::from_bytes(&bytes[..32])?;
        let mut signature = [0u8; 64];
        signature.copy_from_slice(&bytes[32..]);
        Ok(Revocation { master, signature })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_holds_for_its_key_and_name_only() {
        let cluster = IdentityKey::from_seed(&[1; 32]);
        let master = IdentityKey::from_seed(&[2; 32]).public();
        let other = IdentityKey::from_seed(&[3; 32]).public();
        let cert = MasterCertificate::issue(&cluster, &master, "m1");
        cert.verify(&master, "m1").unwrap();
        assert!(cert.verify(&master, "m2").is_err());
        assert!(cert.verify(&other, "m1").is_err());
        let back = MasterCertificate::from_bytes(&cert.to_bytes()).unwrap();
        assert_eq!(back, cert);
        let forged = MasterCertificate::issue(&IdentityKey::from_seed(&[4; 32]), &master, "m1");
        let mut bytes = forged.to_bytes();
        bytes[..32].copy_from_slice(cluster.public().as_bytes());
        assert!(MasterCertificate::from_bytes(&bytes).unwrap().verify(&master, "m1").is_err(), "not the cluster's");
        assert!(MasterCertificate::from_bytes(&bytes[..95]).is_err());
    }

    #[test]
    fn a_revocation_reads_back_and_holds_only_under_its_cluster_key() {
        let cluster = IdentityKey::from_seed(&[1; 32]);
        let master = IdentityKey::from_seed(&[2; 32]).public();
        let revocation = Revocation::issue(&cluster, &master);
        let back = Revocation::from_hex(&revocation.to_hex()).unwrap();
        assert_eq!(back, revocation);
        back.verify(&cluster.public()).unwrap();
        assert!(back.verify(&master).is_err());
        assert!(Revocation::from_hex("zz").is_err());
        assert!(Revocation::from_hex(&revocation.to_hex()[..190]).is_err());
    }

    fn handshake(
        master: &crate::noise::LocalIdentity,
        name: &str,
        pin: crate::noise::MasterPin,
        revoked: Vec<PublicIdentity>,
    ) -> Result<crate::noise::Peer, HandshakeError> {
        use crate::noise::{Claim, Initiator, LocalIdentity, Responder, Role, SessionConfig};
        let minion = LocalIdentity::new(IdentityKey::from_seed(&[9; 32]))?;
        let responder = Responder::new(master, Claim::new(name, None)?, SessionConfig::default())?;
        let (initiator, msg1) =
            Initiator::start(&minion, Role::Minion, Claim::new("web1", None)?, pin, SessionConfig::default())?;
        let (_, msg2) = responder.read_hello(&msg1)?;
        let (awaiting, _) = initiator.refusing(revoked).read_response(&msg2)?;
        Ok(awaiting.master().clone())
    }

    #[test]
    fn a_minion_pinning_the_cluster_key_accepts_certified_masters_and_refuses_revoked_ones() {
        use crate::noise::{LocalIdentity, MasterPin};
        let cluster = IdentityKey::from_seed(&[1; 32]);
        let pin = || MasterPin::Key(cluster.public());
        let plain = LocalIdentity::new(IdentityKey::from_seed(&[2; 32])).unwrap();
        let certify =
            |l: &LocalIdentity, name| l.with_certificate(MasterCertificate::issue(&cluster, &l.public(), name));
        let m1 = certify(&plain, "m1");
        let seen = handshake(&m1, "m1", pin(), Vec::new()).unwrap();
        assert_eq!(seen.identity, m1.public());
        assert!(seen.certificate.is_some());
        // Without a certificate, under another name, or revoked: refused.
        assert!(matches!(handshake(&plain, "m1", pin(), Vec::new()), Err(HandshakeError::UnexpectedPeer { .. })));
        assert!(matches!(handshake(&m1, "m2", pin(), Vec::new()), Err(HandshakeError::UnexpectedPeer { .. })));
        let revoked = handshake(&m1, "m1", pin(), vec![m1.public()]);
        assert!(matches!(revoked, Err(HandshakeError::Revoked(_))), "{revoked:?}");
        // A certificate from another cluster is no certificate.
        let stranger = IdentityKey::from_seed(&[5; 32]);
        let foreign = plain.with_certificate(MasterCertificate::issue(&stranger, &plain.public(), "m1"));
        assert!(handshake(&foreign, "m1", pin(), Vec::new()).is_err());
        // A master pinned by its own key still works, certificate or not.
        handshake(&m1, "m1", MasterPin::Key(m1.public()), Vec::new()).unwrap();
        handshake(&plain, "m1", MasterPin::Key(plain.public()), Vec::new()).unwrap();
    }
}
