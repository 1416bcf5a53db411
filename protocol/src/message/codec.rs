//! MessagePack encoding and bounded decoding of envelopes.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Envelope, Message, MESSAGE_VERSION};

/// Deepest nesting of arrays and maps accepted when decoding. rmp-serde's default (1024) lets a
/// few kilobytes of `[[[[...]]]]` recurse deep enough to matter; 64 is ample for real data.
pub const MAX_DEPTH: usize = 64;

/// Most MessagePack values one message may contain. Each decoded value costs far more memory
/// than its one-byte encoding (a `serde_json::Value` and its map or vector slot, some 70 bytes),
/// so without a count 16 MiB of nils would expand into more than a gigabyte before any size or
/// permission check. Real messages stay far below: a return listing 5,000 packages with their
/// versions is some 20,000 values.
pub const MAX_VALUES: usize = 262_144;

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
    /// More than [`MAX_VALUES`] values.
    #[error("message holds more than {MAX_VALUES} values")]
    TooManyValues,
    /// The envelope's version is not ours.
    #[error("unsupported message version {0} (this node speaks {MESSAGE_VERSION})")]
    UnsupportedVersion(u16),
    /// Bytes left over after the message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
}

/// Why a message received on a session could not be read: the session refused its parts, or
/// they opened to bytes that do not decode. Displays as the cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnreadableMessage {
    /// The session could not open the parts.
    #[error(transparent)]
    Open(#[from] crate::noise::SessionError),
    /// The opened bytes are not a message.
    #[error(transparent)]
    Decode(#[from] CodecError),
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

/// The length of a value's encoding, counted without building it.
pub fn encoded_len<T: Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = value.serialize(&mut rmp_serde::Serializer::new(&mut count).with_struct_map());
    count.0
}

pub(crate) fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    scan(bytes)?;
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

/// The length of a value's encoding and how many MessagePack values it holds: what a part of
/// an answer must keep under the message cap and [`MAX_VALUES`].
pub fn measure<T: Serialize>(value: &T) -> (usize, usize) {
    let bytes = to_vec(value);
    (bytes.len(), count_values(&bytes))
}

/// How many values a well-formed encoding holds (the same walk as the decoder's check).
fn count_values(bytes: &[u8]) -> usize {
    let mut count = 0;
    let _ = walk(bytes, usize::MAX, &mut count);
    count
}

/// Walks the MessagePack structure without building anything, so a message that would expand
/// into too many values is refused before it costs memory. Linear in the number of values:
/// strings, binaries and extensions are skipped by their length. Anything malformed is left
/// for the real decoder to name, except a container claiming more elements than there are
/// bytes left, which is malformed for certain (every element takes at least one byte).
fn scan(bytes: &[u8]) -> Result<(), CodecError> {
    walk(bytes, MAX_VALUES, &mut 0)
}

/// [`scan`] with a given limit, counting the values seen into `seen`.
fn walk(bytes: &[u8], limit: usize, seen: &mut usize) -> Result<(), CodecError> {
    let mut at = 0usize;
    // Values still to read: one top-level value, plus every element announced so far.
    let mut pending: usize = 1;
    while pending > 0 {
        let Some(&marker) = bytes.get(at) else { return Ok(()) };
        at += 1;
        pending -= 1;
        *seen += 1;
        if *seen > limit {
            return Err(CodecError::TooManyValues);
        }
        let (children, skip) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (2 * usize::from(marker & 0x0f), 0),
            0x90..=0x9f => (usize::from(marker & 0x0f), 0),
            0xa0..=0xbf => (0, usize::from(marker & 0x1f)),
            0xcc | 0xd0 => (0, 1),
            0xcd | 0xd1 => (0, 2),
            0xca | 0xce | 0xd2 => (0, 4),
            0xcb | 0xcf | 0xd3 => (0, 8),
            0xd4 => (0, 2),
            0xd5 => (0, 3),
            0xd6 => (0, 5),
            0xd7 => (0, 9),
            0xd8 => (0, 17),
            0xc4 | 0xd9 => (0, read_len(bytes, &mut at, 1)?),
            0xc5 | 0xda => (0, read_len(bytes, &mut at, 2)?),
            0xc6 | 0xdb => (0, read_len(bytes, &mut at, 4)?),
            0xc7 => (0, read_len(bytes, &mut at, 1)? + 1),
            0xc8 => (0, read_len(bytes, &mut at, 2)? + 1),
            0xc9 => (0, read_len(bytes, &mut at, 4)? + 1),
            0xdc => (read_len(bytes, &mut at, 2)?, 0),
            0xdd => (read_len(bytes, &mut at, 4)?, 0),
            0xde => (2 * read_len(bytes, &mut at, 2)?, 0),
            0xdf => (2 * read_len(bytes, &mut at, 4)?, 0),
            // 0xc1 is never used; the decoder names it.
            0xc1 => return Ok(()),
        };
        at = at.saturating_add(skip);
        pending = pending.saturating_add(children);
        if pending > bytes.len().saturating_sub(at) {
            return Err(CodecError::Malformed(format!(
                "a container announces {children} elements but only {} bytes follow",
                bytes.len().saturating_sub(at)
            )));
        }
    }
    Ok(())
}

/// Reads a big-endian length of `width` bytes at `at`.
fn read_len(bytes: &[u8], at: &mut usize, width: usize) -> Result<usize, CodecError> {
    let end = at.checked_add(width).filter(|end| *end <= bytes.len());
    let Some(end) = end else {
        return Err(CodecError::Malformed("truncated length".into()));
    };
    let len = bytes[*at..end].iter().fold(0usize, |len, byte| (len << 8) | usize::from(*byte));
    *at = end;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array32(count: u32, element: u8) -> Vec<u8> {
        let mut bytes = vec![0xdd];
        bytes.extend_from_slice(&count.to_be_bytes());
        bytes.resize(bytes.len() + count as usize, element);
        bytes
    }

    #[test]
    fn counts_values_not_bytes() {
        assert_eq!(scan(&array32(MAX_VALUES as u32 - 1, 0xc0)), Ok(()));
        assert_eq!(scan(&array32(MAX_VALUES as u32, 0xc0)), Err(CodecError::TooManyValues));
    }

    #[test]
    fn measures_bytes_and_values() {
        let value = serde_json::json!({"a": [1, 2, "x"], "b": null});
        let (bytes, values) = measure(&value);
        assert_eq!(bytes, to_vec(&value).len());
        assert_eq!(values, 8, "map, 2 keys, array, 3 items, null");
    }

    #[test]
    fn skips_strings_and_binaries_by_length() {
        let mut bytes = vec![0x92, 0xdb];
        bytes.extend_from_slice(&100_000u32.to_be_bytes());
        bytes.resize(bytes.len() + 100_000, b'a');
        bytes.extend_from_slice(&[0xc6, 0, 0, 0, 3, 0x90, 0x90, 0x90]);
        assert_eq!(scan(&bytes), Ok(()));
    }

    #[test]
    fn a_container_longer_than_the_message_is_malformed() {
        let mut bytes = vec![0xdf];
        bytes.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(scan(&bytes), Err(CodecError::Malformed(_))));
        assert!(matches!(scan(&[0xdd, 0, 0]), Err(CodecError::Malformed(_))));
    }
}
