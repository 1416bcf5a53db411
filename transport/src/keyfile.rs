//! Identity key files on disk, in the format of `halite_protocol::keyfile`.
//!
//! Secret key files are created with mode 0600 (written to a temporary file in the same
//! directory, then renamed, so a crash never leaves half a key) and refused when group or
//! others can read them, as OpenSSH does.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use halite_protocol::identity::{IdentityKey, PublicIdentity};
use halite_protocol::keyfile::{self as format, KeyFormatError};

/// Why a key file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A secret key file is readable by group or others.
    #[error("{path}: secret key file has mode {mode:o}; it must not be readable by group or others (chmod 600)")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The contents are not a key file.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: KeyFormatError,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> KeyFileError + '_ {
    move |source| KeyFileError::Io { path: path.to_owned(), source }
}

/// Writes a secret key file with mode 0600, atomically. Refuses to overwrite an existing file.
pub fn write_secret(path: &Path, key: &IdentityKey) -> Result<(), KeyFileError> {
    if path.exists() {
        return Err(KeyFileError::Io { path: path.to_owned(), source: io::Error::from(io::ErrorKind::AlreadyExists) });
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io_error(&tmp))?;
    file.write_all(format::encode_secret(key).as_bytes()).map_err(io_error(&tmp))?;
    file.sync_all().map_err(io_error(&tmp))?;
    fs::rename(&tmp, path).map_err(io_error(path))
}

/// Reads a secret key file, refusing it if group or others can read it.
pub fn read_secret(path: &Path) -> Result<IdentityKey, KeyFileError> {
    let mode = fs::metadata(path).map_err(io_error(path))?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Permissions { path: path.to_owned(), mode });
    }
    let text = fs::read_to_string(path).map_err(io_error(path))?;
    format::decode_secret(&text).map_err(|source| KeyFileError::Format { path: path.to_owned(), source })
}

/// Reads the secret key at `path`, or generates one and writes it there if the file does not
/// exist (first start).
pub fn load_or_generate(path: &Path) -> Result<IdentityKey, KeyFileError> {
    match read_secret(path) {
        Err(KeyFileError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            let key = IdentityKey::generate_os();
            write_secret(path, &key)?;
            Ok(key)
        }
        other => other,
    }
}

/// Writes a public key file (mode 0644).
pub fn write_public(path: &Path, key: &PublicIdentity) -> Result<(), KeyFileError> {
    fs::write(path, format::encode_public(key)).map_err(io_error(path))
}

/// Reads a public key file.
pub fn read_public(path: &Path) -> Result<PublicIdentity, KeyFileError> {
    let text = fs::read_to_string(path).map_err(io_error(path))?;
    format::decode_public(&text).map_err(|source| KeyFileError::Format { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("halite-keyfile-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn secret_keys_are_written_0600_and_read_back() {
        let dir = temp_dir("roundtrip");
        let path = dir.join("minion.key");
        let key = load_or_generate(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read_secret(&path).unwrap().public(), key.public());
        assert_eq!(load_or_generate(&path).unwrap().public(), key.public());
        assert!(matches!(write_secret(&path, &key), Err(KeyFileError::Io { .. })));
        let pub_path = dir.join("minion.pub");
        write_public(&pub_path, &key.public()).unwrap();
        assert_eq!(read_public(&pub_path).unwrap(), key.public());
    }

    #[test]
    fn readable_secret_keys_are_refused() {
        let dir = temp_dir("perms");
        let path = dir.join("master.key");
        write_secret(&path, &IdentityKey::generate_os()).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        match read_secret(&path) {
            Err(KeyFileError::Permissions { mode, .. }) => assert_eq!(mode, 0o640),
            other => panic!("expected a permissions error, got {other:?}"),
        }
    }

    #[test]
    fn a_public_key_file_is_not_a_secret_key() {
        let dir = temp_dir("format");
        let path = dir.join("wrong.key");
        let key = IdentityKey::generate_os();
        write_public(&path, &key.public()).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = read_secret(&path).unwrap_err().to_string();
        assert!(err.contains("halite-ed25519-secret-v1"), "{err}");
    }
}
