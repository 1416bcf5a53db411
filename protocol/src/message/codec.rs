//! MessagePack encoding and bounded decoding of envelopes.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Envelope, Message, MESSAGE_VERSION};

/// Deepest nesting of arrays and maps accepted when decoding. rmp-serde's default (1024) lets a
/// few kilobytes of `[[[[...]]]]` recurse deep enough to matter; 64 is ample for real data.
pub const MAX_DEPTH: usize = 64;

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The bytes are not a valid encoding of the expected type.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("message nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// The envelope's version is not ours.
    #[error("unsupported message version {0} (this node speaks {MESSAGE_VERSION})")]
    UnsupportedVersion(u16),
    /// Bytes left over after the message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
}

/// Encodes a message in an envelope of the current version.
pub fn encode(msg: &Message) -> Vec<u8> {
    to_vec(&EnvelopeRef { v: MESSAGE_VERSION, msg })
}

/// Decodes an envelope, refusing other versions, deep nesting and trailing bytes.
pub fn decode(bytes: &[u8]) -> Result<Message, CodecError> {
    let envelope: Envelope = from_slice(bytes)?;
    if envelope.v != MESSAGE_VERSION {
        return Err(CodecError::UnsupportedVersion(envelope.v));
    }
    Ok(envelope.msg)
}

#[derive(Serialize)]
struct EnvelopeRef<'a> {
    v: u16,
    msg: &'a Message,
}

pub(crate) fn to_vec<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    // Serializing our own types into a Vec cannot fail: every map key is a string and writes to
    // a Vec are infallible.
    let _ = value.serialize(&mut rmp_serde::Serializer::new(&mut out).with_struct_map());
    out
}

pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    // Reading through `&[u8]` advances the slice, which leaves the trailing bytes to check.
    // rmp-serde's reader copies a string or binary only as its bytes are actually present, so
    // a length prefix claiming gigabytes allocates nothing.
    let mut rest = bytes;
    let mut de = rmp_serde::Deserializer::new(&mut rest);
    de.set_max_depth(MAX_DEPTH);
    let value = T::deserialize(&mut de).map_err(|e| match e {
        rmp_serde::decode::Error::DepthLimitExceeded => CodecError::TooDeep,
        other => CodecError::Malformed(other.to_string()),
    })?;
    drop(de);
    if !rest.is_empty() {
        return Err(CodecError::TrailingBytes(rest.len()));
    }
    Ok(value)
}
