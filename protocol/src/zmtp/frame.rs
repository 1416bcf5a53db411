//! ZMTP frame headers (RFC 23/37 "Framing"): a flags octet, then a 1-octet or 8-octet
//! big-endian size.

use super::ZmtpError;

/// More frames of the same message follow.
pub(crate) const FLAG_MORE: u8 = 0x01;
/// The size field is 8 octets.
pub(crate) const FLAG_LONG: u8 = 0x02;
/// The frame is a command, not message data.
pub(crate) const FLAG_COMMAND: u8 = 0x04;
/// Bits 7..3 are reserved and must be zero.
const FLAGS_RESERVED: u8 = 0xF8;

/// Longest possible frame header: flags plus an 8-octet size.
pub(crate) const MAX_HEADER_LEN: usize = 9;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) more: bool,
    pub(crate) command: bool,
    pub(crate) size: u64,
}

/// How many header bytes a header starting with `flags` has in total.
pub(crate) fn header_len(flags: u8) -> usize {
    if flags & FLAG_LONG != 0 {
        MAX_HEADER_LEN
    } else {
        2
    }
}

/// Decodes a complete header (`buf.len() == header_len(buf[0])`).
pub(crate) fn decode_header(buf: &[u8]) -> Result<Header, ZmtpError> {
    let flags = buf[0];
    if flags & FLAGS_RESERVED != 0 {
        return Err(ZmtpError::ReservedFlags(flags));
    }
    let size = if flags & FLAG_LONG != 0 {
        let mut size = [0u8; 8];
        size.copy_from_slice(&buf[1..9]);
        u64::from_be_bytes(size)
    } else {
        u64::from(buf[1])
    };
    let command = flags & FLAG_COMMAND != 0;
    let more = flags & FLAG_MORE != 0;
    if command && more {
        return Err(ZmtpError::MultipartCommand);
    }
    Ok(Header { more, command, size })
}

/// Appends a frame (header and body) to `out`. Short sizes use the short form, as RFC 23
/// requires ("frames of 255 octets or less MUST use the short form").
pub(crate) fn encode(out: &mut Vec<u8>, flags: u8, body: &[u8]) {
    encode_header(out, flags, body.len());
    out.extend_from_slice(body);
}

/// Appends just a frame header for a body of `len` bytes.
pub(crate) fn encode_header(out: &mut Vec<u8>, flags: u8, len: usize) {
    match u8::try_from(len) {
        Ok(short) => {
            out.push(flags);
            out.push(short);
        }
        Err(_) => {
            out.push(flags | FLAG_LONG);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_headers_round_trip() {
        for (len, flags) in [(0usize, FLAG_MORE), (255, 0), (256, FLAG_MORE), (70_000, FLAG_COMMAND)] {
            let mut out = Vec::new();
            encode_header(&mut out, flags, len);
            assert_eq!(out.len(), header_len(out[0]));
            let h = decode_header(&out).unwrap();
            assert_eq!(h.size, len as u64);
            assert_eq!(h.more, flags & FLAG_MORE != 0);
            assert_eq!(h.command, flags & FLAG_COMMAND != 0);
        }
    }

    #[test]
    fn reserved_bits_and_multipart_commands_are_errors() {
        assert_eq!(decode_header(&[0x10, 0]), Err(ZmtpError::ReservedFlags(0x10)));
        assert_eq!(decode_header(&[FLAG_COMMAND | FLAG_MORE, 0]), Err(ZmtpError::MultipartCommand));
    }
}
