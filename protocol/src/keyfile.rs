//! The key file format (`docs/protocol.md` §8). Pure encoding and parsing; reading and writing
//! files with the right permissions is `halite-transport`'s `keyfile` module.
//!
//! A secret key file holds one line, `halite-ed25519-secret-v1 <64 hex digits of the seed>`;
//! a public key file holds `halite-ed25519-public-v1 <64 hex digits of the key>`. Lines starting
//! with `#` and blank lines are ignored, so files may carry a comment.

use crate::hex;
use crate::identity::{IdentityError, IdentityKey, PublicIdentity};

/// First word of a secret key file.
pub const SECRET_TAG: &str = "halite-ed25519-secret-v1";
/// First word of a public key file.
pub const PUBLIC_TAG: &str = "halite-ed25519-public-v1";

/// Why key file contents were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFormatError {
    /// No key line found.
    #[error("no key line found")]
    Empty,
    /// The first word is not the expected tag.
    #[error("expected a line starting with {expected:?}")]
    WrongTag {
        /// The tag required.
        expected: &'static str,
    },
    /// The key is not 64 hex digits.
    #[error("key must be 64 hex digits")]
    BadHex,
    /// More than one key line.
    #[error("more than one key line")]
    ExtraLines,
    /// The public key is invalid or weak.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

/// Encodes a secret key file.
pub fn encode_secret(key: &IdentityKey) -> String {
    format!(
        "# halite identity key; fingerprint {}\n{SECRET_TAG} {}\n",
        key.public().fingerprint(),
        hex::encode(key.seed())
    )
}

/// Encodes a public key file.
pub fn encode_public(key: &PublicIdentity) -> String {
    format!("# fingerprint {}\n{PUBLIC_TAG} {}\n", key.fingerprint(), hex::encode(key.as_bytes()))
}

/// Parses a secret key file.
pub fn decode_secret(text: &str) -> Result<IdentityKey, KeyFormatError> {
    let bytes = decode_line(text, SECRET_TAG)?;
    Ok(IdentityKey::from_seed(&bytes))
}

/// Parses a public key file, refusing invalid and weak keys.
pub fn decode_public(text: &str) -> Result<PublicIdentity, KeyFormatError> {
    let bytes = decode_line(text, PUBLIC_TAG)?;
    Ok(PublicIdentity::from_bytes(&bytes)?)
}

fn decode_line(text: &str, tag: &'static str) -> Result<[u8; 32], KeyFormatError> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
    let line = lines.next().ok_or(KeyFormatError::Empty)?;
    if lines.next().is_some() {
        return Err(KeyFormatError::ExtraLines);
    }
    let (word, key) = line.split_once(' ').ok_or(KeyFormatError::WrongTag { expected: tag })?;
    if word != tag {
        return Err(KeyFormatError::WrongTag { expected: tag });
    }
    hex::decode(key.trim()).and_then(|b| <[u8; 32]>::try_from(b).ok()).ok_or(KeyFormatError::BadHex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_round_trip() {
        let key = IdentityKey::from_seed(&[9; 32]);
        assert_eq!(decode_secret(&encode_secret(&key)).unwrap().public(), key.public());
        assert_eq!(decode_public(&encode_public(&key.public())), Ok(key.public()));
    }

    #[test]
    fn wrong_files_get_named_errors() {
        let key = IdentityKey::from_seed(&[9; 32]);
        assert_eq!(
            decode_secret(&encode_public(&key.public())).err(),
            Some(KeyFormatError::WrongTag { expected: SECRET_TAG })
        );
        assert_eq!(decode_public("").err(), Some(KeyFormatError::Empty));
        assert_eq!(decode_public(&format!("{PUBLIC_TAG} abcd")).err(), Some(KeyFormatError::BadHex));
        let two = format!("{0}{0}", encode_public(&key.public()));
        assert_eq!(decode_public(&two).err(), Some(KeyFormatError::ExtraLines));
    }
}
