//! One identity for a cluster of masters without sharing a secret: a cluster key (created once,
//! kept offline) certifies each master's own key, and revokes a retired one. Minions and
//! clients pin the cluster key (`master_key` = `cluster.pub`); each master presents its
//! certificate (`state_dir/master.cert`) in every handshake and tells minions the revocations
//! in its config (`revoked_masters`).

use std::path::{Path, PathBuf};

use halite_protocol::hex;
use halite_protocol::identity::PublicIdentity;
use halite_protocol::noise::{LocalIdentity, MasterCertificate, Revocation};
use halite_transport::keyfile;

use crate::{MasterConfig, MasterError};

fn cluster_error(message: String) -> MasterError {
    MasterError::Cluster(message)
}

/// This master's identity with its certificate when it has one, after checking the
/// certificate and the configured revocations belong together and to this master.
pub(crate) fn certified(config: &MasterConfig, identity: LocalIdentity) -> Result<LocalIdentity, MasterError> {
    let path = config.certificate_path();
    let certificate = match std::fs::read_to_string(&path) {
        Ok(text) => Some(read_certificate(&path, &text)?),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(cluster_error(format!("{}: {error}", path.display()))),
    };
    let Some(certificate) = certificate else {
        if !config.revoked_masters.is_empty() {
            return Err(cluster_error(format!(
                "revoked_masters is set but this master has no certificate ({}): run `halite-master cluster certify`",
                path.display()
            )));
        }
        return Ok(identity);
    };
    certificate.verify(&identity.public(), &config.id).map_err(|_| {
        cluster_error(format!(
            "{} does not certify this master's key {} under the id {:?}: certify it again",
            path.display(),
            identity.public().fingerprint(),
            config.id
        ))
    })?;
    check_revocations(&config.revoked_masters, &certificate, &identity.public())?;
    tracing::info!(cluster = %certificate.cluster.fingerprint(), "serving with a certificate from the cluster key");
    Ok(identity.with_certificate(certificate))
}

/// Whether `revoked` (a config's `revoked_masters`) may be used by the master `identity`:
/// only with a certificate, each revocation signed by its cluster key, none of its own key.
/// Checked when the master starts and when SIGHUP rereads the config.
pub(crate) fn check_revocations_of(revoked: &[String], identity: &LocalIdentity) -> Result<(), MasterError> {
    match identity.certificate() {
        Some(certificate) => check_revocations(revoked, certificate, &identity.public()),
        None if revoked.is_empty() => Ok(()),
        None => Err(cluster_error(
            "revoked_masters is set but this master has no certificate: run `halite-master cluster certify`".into(),
        )),
    }
}

fn check_revocations(
    revoked: &[String],
    certificate: &MasterCertificate,
    own: &PublicIdentity,
) -> Result<(), MasterError> {
    for (i, text) in revoked.iter().enumerate() {
        let revocation = Revocation::from_hex(text).map_err(|e| cluster_error(format!("revoked_masters[{i}]: {e}")))?;
        revocation
            .verify(&certificate.cluster)
            .map_err(|_| cluster_error(format!("revoked_masters[{i}] is not signed by this master's cluster key")))?;
        if revocation.master == *own {
            return Err(cluster_error(format!(
                "this master's key {} is in revoked_masters: it may not serve",
                own.fingerprint()
            )));
        }
    }
    Ok(())
}

fn read_certificate(path: &Path, text: &str) -> Result<MasterCertificate, MasterError> {
    hex::decode(text.trim()).ok_or_else(|| cluster_error(format!("{}: not hex", path.display()))).and_then(|bytes| {
        MasterCertificate::from_bytes(&bytes).map_err(|e| cluster_error(format!("{}: {e}", path.display())))
    })
}

/// `halite-master cluster init DIR`: a new cluster key, `DIR/cluster.key` (0600) and
/// `DIR/cluster.pub`. Refuses to overwrite one.
pub fn init_cluster_key(dir: &Path) -> Result<(PathBuf, PublicIdentity), MasterError> {
    let (secret, public) = (dir.join("cluster.key"), dir.join("cluster.pub"));
    if secret.exists() {
        return Err(cluster_error(format!("{} exists; a cluster has one key", secret.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| cluster_error(format!("{}: {e}", dir.display())))?;
    let key = keyfile::load_or_generate(&secret)?;
    keyfile::write_public(&public, &key.public())?;
    Ok((public, key.public()))
}

/// `halite-master cluster certify --cluster-key FILE`: certifies this master's key under its id,
/// into `state_dir/master.cert`.
pub fn certify(config: &MasterConfig, cluster_key: &Path) -> Result<PathBuf, MasterError> {
    let cluster = keyfile::read_secret(cluster_key)?;
    let keys = crate::init(config)?;
    let certificate = MasterCertificate::issue(&cluster, &keys.identity.public(), &config.id);
    let path = config.certificate_path();
    std::fs::write(&path, format!("{}\n", hex::encode(&certificate.to_bytes())))
        .map_err(|e| cluster_error(format!("{}: {e}", path.display())))?;
    Ok(path)
}

/// `halite-master cluster revoke --cluster-key FILE MASTER_PUB`: the revocation of a master's
/// key, for every master's `revoked_masters`.
pub fn revoke(cluster_key: &Path, master_pub: &Path) -> Result<String, MasterError> {
    let cluster = keyfile::read_secret(cluster_key)?;
    let master = keyfile::read_public(master_pub)?;
    Ok(Revocation::issue(&cluster, &master).to_hex())
}

#[cfg(test)]
mod tests {
    use super::*;
    use halite_protocol::identity::IdentityKey;

    fn master(cluster: Option<&IdentityKey>) -> LocalIdentity {
        let identity = LocalIdentity::new(IdentityKey::generate_os()).unwrap();
        match cluster {
            Some(cluster) => identity.with_certificate(MasterCertificate::issue(cluster, &identity.public(), "m1")),
            None => identity,
        }
    }

    fn error(revoked: &[String], identity: &LocalIdentity) -> String {
        check_revocations_of(revoked, identity).unwrap_err().to_string()
    }

    #[test]
    fn only_a_certified_master_takes_revocations_signed_by_its_cluster_key_and_never_its_own() {
        let cluster = IdentityKey::generate_os();
        let retired = IdentityKey::generate_os().public();
        let revocation = Revocation::issue(&cluster, &retired).to_hex();
        assert!(check_revocations_of(&[], &master(None)).is_ok());
        assert!(error(std::slice::from_ref(&revocation), &master(None)).contains("no certificate"));
        let certified = master(Some(&cluster));
        assert!(check_revocations_of(std::slice::from_ref(&revocation), &certified).is_ok());
        let foreign = Revocation::issue(&IdentityKey::generate_os(), &retired).to_hex();
        assert!(error(&[revocation.clone(), foreign], &certified).contains("revoked_masters[1] is not signed"));
        assert!(error(&["zz".into()], &certified).contains("revoked_masters[0]"));
        let own = Revocation::issue(&cluster, &certified.public()).to_hex();
        assert!(error(&[own], &certified).contains("may not serve"));
    }

    #[test]
    fn sighup_keeps_the_running_rules_when_the_new_revocations_cannot_be_used() {
        let path = std::env::temp_dir().join(format!("halite-reread-{}.toml", std::process::id()));
        let write = |text: &str| std::fs::write(&path, text).unwrap();
        write("[nodegroups]\nweb = \"web*\"\n");
        let mut config = crate::config::MasterConfig::load(&path).unwrap();
        let identity =
            halite_protocol::noise::LocalIdentity::new(halite_protocol::identity::IdentityKey::generate_os()).unwrap();
        // This master has no certificate: a revocation is refused, and nothing else changes.
        write("revoked_masters = [\"00\"]\n[nodegroups]\nweb = \"www*\"\n");
        assert_eq!(config.reread_rules(|revoked| check_revocations_of(revoked, &identity)), None);
        assert_eq!((config.nodegroups["web"].as_str(), config.revoked_masters.len()), ("web*", 0));
        write("[nodegroups]\nweb = \"www*\"\n");
        assert_eq!(
            config.reread_rules(|revoked| check_revocations_of(revoked, &identity)),
            None,
            "the revocations did not change"
        );
        assert_eq!(config.nodegroups["web"], "www*");
        std::fs::remove_file(&path).unwrap();
    }
}
