//! Principal key files: what an engine generates once and registers with `add_principal`.

use std::path::PathBuf;

use halite_protocol::identity::IdentityKey;
use pyo3::prelude::*;

use crate::errors;

/// Generates a new ed25519 principal key into `path` (mode 0600; an existing file is an
/// error, never overwritten); its public key as 64 hex digits. With `seed` (64 hex digits,
/// secret) the key is the one that seed makes, the same wherever it is made: how several hosts
/// of one engine derive the same key for a principal without copying key files.
#[pyfunction]
#[pyo3(signature = (path, seed=None))]
pub(crate) fn generate_key(path: PathBuf, seed: Option<String>) -> PyResult<String> {
    if path.exists() {
        return Err(pyo3::exceptions::PyFileExistsError::new_err(format!("{}: already exists", path.display())));
    }
    let key = match seed {
        Some(seed) => {
            let bytes = halite_protocol::hex::decode(seed.trim())
                .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                .ok_or_else(|| errors::bad_argument("seed: expected 64 hex digits"))?;
            IdentityKey::from_seed(&bytes)
        }
        None => IdentityKey::generate_os(),
    };
    halite_transport::keyfile::write_secret(&path, &key).map_err(|e| errors::bad_argument(e.to_string()))?;
    Ok(halite_protocol::hex::encode(key.public().as_bytes()))
}

/// The public key (64 hex digits) of the principal key file at `path`.
#[pyfunction]
pub(crate) fn public_key(path: PathBuf) -> PyResult<String> {
    let key = halite_transport::keyfile::read_secret(&path).map_err(|e| errors::bad_argument(e.to_string()))?;
    Ok(halite_protocol::hex::encode(key.public().as_bytes()))
}
