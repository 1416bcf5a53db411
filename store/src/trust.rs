//! Whose word a master takes from its store. Everything in the store that grants something (an
//! accepted minion key, a principal) and everything masters announce to each other is signed
//! by a master's own identity key, each under its own domain string; a master acts on it only
//! when the signer is a master it trusts:
//!
//! - itself;
//! - with a certificate from a cluster key (`halite-master cluster certify`): any master whose
//!   key is registered in the store's `masters` table with a certificate from the same cluster
//!   key, for that key and the id it registered, and not in `revoked_masters`. The cluster key
//!   stays offline; the database holds no secret, so a role that may write every table still
//!   cannot make a key the masters trust;
//! - without a certificate, on a shared store: any key registered in `masters`. A role that may
//!   only connect cannot register one; a role that may write `masters` can. Certifying the
//!   masters closes that (docs/operations.md says so);
//! - without a certificate, on a store one master uses alone (SQLite): itself only.
//!
//! What a signed row cannot prove is that it is the newest: a role that may write the tables
//! can put back a row as it was earlier (an older signed version) or delete one.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use halite_protocol::identity::{IdentityKey, PublicIdentity};
use halite_protocol::noise::MasterCertificate;
use prometheus_client::metrics::counter::Counter;

/// What a key row's signature covers: the minion id, its key and the key's state.
const KEY_ROW: &[u8] = b"halite key row v1";
/// What a principal row's signature covers: the name, its key and its ACL as stored.
const PRINCIPAL_ROW: &[u8] = b"halite principal row v1";
/// What an announcement's signature covers: its body, as sent.
const ANNOUNCEMENT: &[u8] = b"halite cluster announcement v1";
/// What an enrollment token row's signature covers: the token's hash, the id it enrolls, its
/// expiry and the accepted key it may replace, if any.
const ENROLLMENT_TOKEN_ROW: &[u8] = b"halite enrollment token row v1";
/// What a gateway token row's signature covers: the token's hash, the principal it acts as and
/// its expiry.
const API_TOKEN_ROW: &[u8] = b"halite gateway token row v1";

/// Why something in the store or on the cluster channel was not taken as a master's word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    /// No signature at all (written by something other than a master of this version).
    #[error("not signed by a master")]
    Unsigned,
    /// The signer field is not a public key.
    #[error("the signer is not a valid key")]
    BadSigner,
    /// A key that is not this master's and not registered as a master.
    #[error("signed by {0}, which is not a registered master")]
    UnknownSigner(String),
    /// A registered master key without a valid certificate from this master's cluster key.
    #[error("signed by {0}, which has no certificate from this cluster's key")]
    Uncertified(String),
    /// A master key the cluster key revoked.
    #[error("signed by {0}, a revoked master key")]
    Revoked(String),
    /// The signature does not match what it is attached to.
    #[error("the signature does not match")]
    BadSignature,
}

/// A master key as registered in the store's `masters` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The master's id (`id` in its config), which its certificate names.
    pub id: String,
    /// Its certificate from a cluster key, as `MasterCertificate::to_bytes`.
    pub certificate: Option<Vec<u8>>,
}

/// A row's signature: who signed it and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSeal {
    /// The signing master's public key.
    pub signer: Vec<u8>,
    /// The ed25519 signature.
    pub signature: Vec<u8>,
}

/// This master's keys and what it trusts, for the store it uses.
pub struct Trust {
    key: IdentityKey,
    certificate: Option<MasterCertificate>,
    id: String,
    revoked: Vec<PublicIdentity>,
    /// Where this master answers its readiness, registered for the others to ask.
    ready_url: Option<String>,
    /// Whether other masters share the store (then registered keys may be trusted).
    shared: bool,
    /// Master keys found trustworthy (registrations only change by a master starting).
    admitted: RwLock<HashSet<[u8; 32]>>,
    /// Announcements refused (bad signature, unknown signer, replayed, stale).
    pub announcements_refused: Counter,
    /// Key and principal rows refused.
    pub rows_refused: Counter,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Trust({}, {})", self.id, self.key.public().fingerprint())
    }
}

/// A field in a signed message: its length first, so no two field lists sign the same bytes.
fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn key_row(id: &str, public_key: &[u8], state: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + id.len());
    field(&mut out, id.as_bytes());
    field(&mut out, public_key);
    field(&mut out, state.as_bytes());
    out
}

fn principal_row(name: &str, public_key: &[u8], acl: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + name.len() + acl.len());
    field(&mut out, name.as_bytes());
    field(&mut out, public_key);
    field(&mut out, acl.as_bytes());
    out
}

/// An enrollment token row as signed. Its owner (who may list and revoke it) and whether it
/// was used are not covered: neither grants anything.
#[derive(Debug, Clone, Copy)]
pub struct EnrollmentTokenRow<'a> {
    /// The token's SHA-256.
    pub hash: &'a [u8],
    /// The minion id it enrolls.
    pub minion: &'a str,
    /// When it expires (Unix ms).
    pub expires_at_ms: u64,
    /// The accepted key it may replace (the one accepted when it was made), if it may replace
    /// one: once another key is accepted, it replaces nothing.
    pub replaces: Option<&'a [u8]>,
}

impl EnrollmentTokenRow<'_> {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.minion.len());
        field(&mut out, self.hash);
        field(&mut out, self.minion.as_bytes());
        field(&mut out, &self.expires_at_ms.to_be_bytes());
        match self.replaces {
            Some(key) => {
                field(&mut out, &[1]);
                field(&mut out, key);
            }
            None => field(&mut out, &[0]),
        }
        out
    }
}

/// A gateway token row as signed. Its owner (who may list and revoke it) is not covered.
#[derive(Debug, Clone, Copy)]
pub struct ApiTokenRow<'a> {
    /// The token's SHA-256.
    pub hash: &'a [u8],
    /// The principal it acts as.
    pub principal: &'a str,
    /// When it expires (Unix ms), if it does.
    pub expires_at_ms: Option<u64>,
}

impl ApiTokenRow<'_> {
    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.principal.len());
        field(&mut out, self.hash);
        field(&mut out, self.principal.as_bytes());
        match self.expires_at_ms {
            Some(at) => field(&mut out, &at.to_be_bytes()),
            None => field(&mut out, &[]),
        }
        out
    }
}

impl Trust {
    /// The trust of a master with identity key `key` and its certificate from a cluster key
    /// (checked when the master started), its config `id` and the revoked master keys of its
    /// config.
    pub fn new(
        key: IdentityKey,
        certificate: Option<MasterCertificate>,
        id: &str,
        revoked: Vec<PublicIdentity>,
    ) -> Self {
        Trust {
            key,
            certificate,
            id: id.to_owned(),
            revoked,
            ready_url: None,
            shared: false,
            admitted: RwLock::new(HashSet::new()),
            announcements_refused: Counter::default(),
            rows_refused: Counter::default(),
        }
    }

    /// A key of its own, for a store no master has given its trust yet (tools and tests that
    /// use a store alone): what it writes it can read back, nothing else trusts it.
    pub fn ephemeral() -> Self {
        Trust::new(IdentityKey::generate_os(), None, "", Vec::new())
    }

    /// The same, counting its refusals in these counters (the master's metrics).
    pub fn counting(mut self, announcements: Counter, rows: Counter) -> Self {
        self.announcements_refused = announcements;
        self.rows_refused = rows;
        self
    }

    /// The same, registering where this master answers its readiness (`/readyz`): a master of
    /// the cluster that loses the store asks the others there before handing its minions over.
    pub fn ready_at(mut self, url: Option<String>) -> Self {
        self.ready_url = url;
        self
    }

    /// Where this master registers its readiness, if it serves it.
    pub fn ready_url(&self) -> Option<&str> {
        self.ready_url.as_deref()
    }

    /// The same, for a store other masters share or not.
    pub fn sharing(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// This master's public key.
    pub fn public(&self) -> PublicIdentity {
        self.key.public()
    }

    /// This master's registration, as it puts it in the store.
    pub fn registration(&self) -> Registration {
        Registration { id: self.id.clone(), certificate: self.certificate.as_ref().map(|c| c.to_bytes().to_vec()) }
    }

    fn seal(&self, domain: &[u8], message: &[u8]) -> RowSeal {
        RowSeal { signer: self.public().as_bytes().to_vec(), signature: self.key.sign(domain, message).to_vec() }
    }

    /// Signs a key row.
    pub fn seal_key(&self, id: &str, public_key: &[u8], state: &str) -> RowSeal {
        self.seal(KEY_ROW, &key_row(id, public_key, state))
    }

    /// Signs a principal row (`acl` exactly as stored).
    pub fn seal_principal(&self, name: &str, public_key: &[u8], acl: &str) -> RowSeal {
        self.seal(PRINCIPAL_ROW, &principal_row(name, public_key, acl))
    }

    /// Signs an enrollment token row.
    pub fn seal_enrollment_token(&self, row: &EnrollmentTokenRow<'_>) -> RowSeal {
        self.seal(ENROLLMENT_TOKEN_ROW, &row.bytes())
    }

    /// Signs a gateway token row.
    pub fn seal_api_token(&self, row: &ApiTokenRow<'_>) -> RowSeal {
        self.seal(API_TOKEN_ROW, &row.bytes())
    }

    /// The audit records `entries` make, continuing `chain` after record `seq` hashed `prev`,
    /// signed with this master's key.
    pub fn chain_audit(
        &self,
        chain: &str,
        seq: u64,
        prev: [u8; 32],
        entries: &[halite_protocol::audit::AuditEntry],
    ) -> Vec<halite_protocol::audit::AuditRecord> {
        halite_protocol::audit::chain_records(&self.key, chain, seq, prev, entries)
    }

    /// A signed checkpoint: `chain` goes on after record `seq`, hashed `hash`.
    pub fn audit_checkpoint(&self, chain: &str, seq: u64, hash: &[u8; 32]) -> halite_protocol::audit::Checkpoint {
        halite_protocol::audit::Checkpoint {
            chain: chain.to_owned(),
            seq,
            hash: halite_protocol::hex::encode(hash),
            signer: halite_protocol::hex::encode(self.public().as_bytes()),
            signature: halite_protocol::hex::encode(&halite_protocol::audit::sign_checkpoint(
                &self.key, chain, seq, hash,
            )),
        }
    }

    /// Signs an announcement's body.
    pub fn sign_announcement(&self, body: &str) -> [u8; 64] {
        self.key.sign(ANNOUNCEMENT, body.as_bytes())
    }

    /// Checks a key row's signature by `signer` (already found trusted).
    pub fn check_key(
        signer: &PublicIdentity,
        id: &str,
        public_key: &[u8],
        state: &str,
        signature: &[u8],
    ) -> Result<(), Untrusted> {
        signer.verify(KEY_ROW, &key_row(id, public_key, state), signature).map_err(|_| Untrusted::BadSignature)
    }

    /// Checks a principal row's signature by `signer` (already found trusted).
    pub fn check_principal(
        signer: &PublicIdentity,
        name: &str,
        public_key: &[u8],
        acl: &str,
        signature: &[u8],
    ) -> Result<(), Untrusted> {
        signer
            .verify(PRINCIPAL_ROW, &principal_row(name, public_key, acl), signature)
            .map_err(|_| Untrusted::BadSignature)
    }

    /// Checks an enrollment token row's signature by `signer` (already found trusted).
    pub fn check_enrollment_token(
        signer: &PublicIdentity,
        row: &EnrollmentTokenRow<'_>,
        signature: &[u8],
    ) -> Result<(), Untrusted> {
        signer.verify(ENROLLMENT_TOKEN_ROW, &row.bytes(), signature).map_err(|_| Untrusted::BadSignature)
    }

    /// Checks a gateway token row's signature by `signer` (already found trusted).
    pub fn check_api_token(signer: &PublicIdentity, row: &ApiTokenRow<'_>, signature: &[u8]) -> Result<(), Untrusted> {
        signer.verify(API_TOKEN_ROW, &row.bytes(), signature).map_err(|_| Untrusted::BadSignature)
    }

    /// Checks an announcement's signature by `signer` (already found trusted).
    pub fn check_announcement(signer: &PublicIdentity, body: &str, signature: &[u8]) -> Result<(), Untrusted> {
        signer.verify(ANNOUNCEMENT, body.as_bytes(), signature).map_err(|_| Untrusted::BadSignature)
    }

    /// The signer, if it is this master or one it trusted before (no registration needed).
    /// `Err` when the bytes are no key; `Ok(None)` when its registration must be read.
    pub fn known(&self, signer: &[u8]) -> Result<Option<PublicIdentity>, Untrusted> {
        let key = PublicIdentity::from_bytes(signer).map_err(|_| Untrusted::BadSigner)?;
        if key == self.public() {
            return Ok(Some(key));
        }
        let admitted = self.admitted.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(admitted.contains(key.as_bytes()).then_some(key))
    }

    /// Whether `key`, registered as `registration` (or not at all), is a master this master
    /// trusts (the rules in the module's comment); remembered when it is.
    pub fn admit(&self, key: &PublicIdentity, registration: Option<&Registration>) -> Result<(), Untrusted> {
        if *key == self.public() {
            return Ok(());
        }
        let name = key.fingerprint();
        if self.revoked.contains(key) {
            return Err(Untrusted::Revoked(name));
        }
        let Some(registration) = registration else { return Err(Untrusted::UnknownSigner(name)) };
        match &self.certificate {
            Some(own) => {
                let theirs = registration.certificate.as_deref().and_then(|b| MasterCertificate::from_bytes(b).ok());
                let valid = theirs.is_some_and(|c| c.cluster == own.cluster && c.verify(key, &registration.id).is_ok());
                if !valid {
                    return Err(Untrusted::Uncertified(name));
                }
            }
            None if self.shared => {}
            None => return Err(Untrusted::UnknownSigner(name)),
        }
        self.admitted.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(*key.as_bytes());
        Ok(())
    }
}

/// The trust a store uses, replaceable once its master knows its keys, and whether rows that
/// predate signatures are to be signed (see [`TrustSlot::legacy_rows`]).
#[derive(Debug)]
pub struct TrustSlot {
    current: RwLock<Arc<Trust>>,
    legacy: AtomicBool,
    legacy_tokens: AtomicBool,
}

impl Default for TrustSlot {
    fn default() -> Self {
        TrustSlot {
            current: RwLock::new(Arc::new(Trust::ephemeral())),
            legacy: AtomicBool::new(false),
            legacy_tokens: AtomicBool::new(false),
        }
    }
}

impl TrustSlot {
    /// The trust in use.
    pub fn get(&self) -> Arc<Trust> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Puts `trust` in use.
    pub fn set(&self, trust: Trust) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(trust);
    }

    /// Notes that this process applied the migration that added signatures: the unsigned rows
    /// it found are the operator's own, from before, and are signed once (`set_trust`).
    pub fn found_legacy_rows(&self) {
        self.legacy.store(true, Ordering::Release);
    }

    /// Whether rows from before signatures are to be signed now; once.
    pub fn legacy_rows(&self) -> bool {
        self.legacy.swap(false, Ordering::AcqRel)
    }

    /// The same for the migration that added signatures to enrollment and gateway tokens.
    pub fn found_legacy_tokens(&self) {
        self.legacy_tokens.store(true, Ordering::Release);
    }

    /// Whether token rows from before their signatures are to be signed now; once.
    pub fn legacy_tokens(&self) -> bool {
        self.legacy_tokens.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(seed: u8) -> IdentityKey {
        IdentityKey::from_seed(&[seed; 32])
    }

    fn trust(seed: u8) -> Trust {
        Trust::new(master(seed), None, "m1", Vec::new())
    }

    #[test]
    fn a_row_verifies_only_as_signed() {
        let trust = trust(1);
        let signer = trust.public();
        let seal = trust.seal_key("web1", &[7; 32], "accepted");
        assert_eq!(seal.signer, signer.as_bytes().to_vec());
        assert_eq!(Trust::check_key(&signer, "web1", &[7; 32], "accepted", &seal.signature), Ok(()));
        for (id, key, state) in
            [("web2", [7; 32], "accepted"), ("web1", [8; 32], "accepted"), ("web1", [7; 32], "pending")]
        {
            let checked = Trust::check_key(&signer, id, &key, state, &seal.signature);
            assert_eq!(checked, Err(Untrusted::BadSignature), "{id} {state}");
        }
        let seal = trust.seal_principal("ops", &[1; 32], r#"{"admin":false}"#);
        assert_eq!(Trust::check_principal(&signer, "ops", &[1; 32], r#"{"admin":false}"#, &seal.signature), Ok(()));
        let widened = Trust::check_principal(&signer, "ops", &[1; 32], r#"{"admin":true}"#, &seal.signature);
        assert_eq!(widened, Err(Untrusted::BadSignature));
    }

    #[test]
    fn a_token_row_verifies_only_as_signed() {
        let trust = trust(1);
        let signer = trust.public();
        let row = EnrollmentTokenRow { hash: &[3; 32], minion: "web1", expires_at_ms: 100, replaces: None };
        let seal = trust.seal_enrollment_token(&row);
        assert_eq!(Trust::check_enrollment_token(&signer, &row, &seal.signature), Ok(()));
        for changed in [
            EnrollmentTokenRow { minion: "web2", ..row },
            EnrollmentTokenRow { expires_at_ms: 101, ..row },
            EnrollmentTokenRow { replaces: Some(&[7; 32]), ..row },
            EnrollmentTokenRow { hash: &[4; 32], ..row },
        ] {
            assert_eq!(Trust::check_enrollment_token(&signer, &changed, &seal.signature), Err(Untrusted::BadSignature));
        }
        let row = ApiTokenRow { hash: &[3; 32], principal: "heat", expires_at_ms: None };
        let seal = trust.seal_api_token(&row);
        assert_eq!(Trust::check_api_token(&signer, &row, &seal.signature), Ok(()));
        for changed in [
            ApiTokenRow { principal: "root", ..row },
            ApiTokenRow { expires_at_ms: Some(u64::MAX), ..row },
            ApiTokenRow { hash: &[4; 32], ..row },
        ] {
            assert_eq!(Trust::check_api_token(&signer, &changed, &seal.signature), Err(Untrusted::BadSignature));
        }
        // A gateway token's signature is no enrollment token's.
        let as_enrollment = EnrollmentTokenRow { hash: &[3; 32], minion: "heat", expires_at_ms: 0, replaces: None };
        assert!(Trust::check_enrollment_token(&signer, &as_enrollment, &seal.signature).is_err());
    }

    #[test]
    fn signatures_are_bound_to_their_purpose() {
        let trust = trust(1);
        let signer = trust.public();
        // The same bytes signed as one kind of thing are not valid as another.
        let seal = trust.seal_key("a", b"b", "c");
        assert!(Trust::check_principal(&signer, "a", b"b", "c", &seal.signature).is_err());
        let body = String::from_utf8(key_row("a", b"b", "c")).unwrap();
        assert!(Trust::check_announcement(&signer, &body, &seal.signature).is_err());
        let signature = trust.sign_announcement("{}");
        assert!(Trust::check_announcement(&signer, "{}", &signature).is_ok());
        assert!(Trust::check_announcement(&master(2).public(), "{}", &signature).is_err());
    }

    #[test]
    fn an_uncertified_master_trusts_registered_keys_only_on_a_shared_store() {
        let other = master(2).public();
        let registration = Registration { id: "m2".into(), certificate: None };
        let alone = trust(1);
        assert!(matches!(alone.admit(&other, Some(&registration)), Err(Untrusted::UnknownSigner(_))));
        assert_eq!(alone.known(alone.public().as_bytes()), Ok(Some(alone.public())));
        let shared = trust(1).sharing(true);
        assert!(matches!(shared.admit(&other, None), Err(Untrusted::UnknownSigner(_))));
        assert_eq!(shared.known(other.as_bytes()), Ok(None));
        assert_eq!(shared.admit(&other, Some(&registration)), Ok(()));
        assert_eq!(shared.known(other.as_bytes()), Ok(Some(other)), "remembered");
        assert_eq!(shared.known(&[0; 31]), Err(Untrusted::BadSigner));
    }

    #[test]
    fn a_certified_master_trusts_only_masters_certified_by_its_cluster_key_and_not_revoked() {
        let cluster = IdentityKey::from_seed(&[9; 32]);
        let rogue_cluster = IdentityKey::from_seed(&[10; 32]);
        let me = master(1);
        let own = MasterCertificate::issue(&cluster, &me.public(), "m1");
        let (two, three, four) = (master(2).public(), master(3).public(), master(4).public());
        let cert = |cluster: &IdentityKey, key: &PublicIdentity, id: &str| Registration {
            id: id.into(),
            certificate: Some(MasterCertificate::issue(cluster, key, id).to_bytes().to_vec()),
        };
        let trust = Trust::new(me, Some(own), "m1", vec![four]).sharing(true);
        assert_eq!(trust.admit(&two, Some(&cert(&cluster, &two, "m2"))), Ok(()));
        let uncertified = Registration { id: "m3".into(), certificate: None };
        assert!(matches!(trust.admit(&three, Some(&uncertified)), Err(Untrusted::Uncertified(_))));
        assert!(matches!(
            trust.admit(&three, Some(&cert(&rogue_cluster, &three, "m3"))),
            Err(Untrusted::Uncertified(_))
        ));
        // A certificate is for one key under one id.
        let moved = Registration { id: "m9".into(), ..cert(&cluster, &three, "m3") };
        assert!(matches!(trust.admit(&three, Some(&moved)), Err(Untrusted::Uncertified(_))));
        assert!(matches!(trust.admit(&three, Some(&cert(&cluster, &two, "m3"))), Err(Untrusted::Uncertified(_))));
        assert!(matches!(trust.admit(&four, Some(&cert(&cluster, &four, "m4"))), Err(Untrusted::Revoked(_))));
    }
}
