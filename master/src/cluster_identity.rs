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
    for (i, text) in config.revoked_masters.iter().enumerate() {
        let revocation = Revocation::from_hex(text).map_err(|e| cluster_error(format!("revoked_masters[{i}]: {e}")))?;
        revocation
            .verify(&certificate.cluster)
            .map_err(|_| cluster_error(format!("revoked_masters[{i}] is not signed by this master's cluster key")))?;
        if revocation.master == identity.public() {
            return Err(cluster_error(format!(
                "this master's key {} is in revoked_masters: it may not serve",
                identity.public().fingerprint()
            )));
        }
    }
    tracing::info!(cluster = %certificate.cluster.fingerprint(), "serving with a certificate from the cluster key");
    Ok(identity.with_certificate(certificate))
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
