//! The 64-byte ZMTP greeting (ZMTP 3.1 §"The Greeting", RFC 37).
//!
//! Layout: signature `FF 00×8 7F`, version major/minor, 20-byte mechanism name padded with NULs,
//! the as-server flag, and 31 bytes of filler.

use super::ZmtpError;

/// Length of a ZMTP 3.x greeting.
pub const GREETING_LEN: usize = 64;

/// The mechanism halite speaks at the ZMTP layer. Encryption is Noise, one layer up.
const MECHANISM_NULL: &[u8] = b"NULL";

/// Builds our greeting: ZMTP 3.1, mechanism NULL.
pub(crate) fn encode(as_server: bool) -> [u8; GREETING_LEN] {
    let mut g = [0u8; GREETING_LEN];
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[10] = 3;
    g[11] = 1;
    g[12..12 + MECHANISM_NULL.len()].copy_from_slice(MECHANISM_NULL);
    g[32] = u8::from(as_server);
    g
}

/// Checks a greeting prefix as bytes arrive, so that a peer speaking something else is refused
/// at its first wrong byte instead of after 64 bytes (or never, if it stops sending).
pub(crate) fn check_prefix(prefix: &[u8]) -> Result<(), ZmtpError> {
    if let Some(&b) = prefix.first() {
        if b != 0xFF {
            return Err(ZmtpError::BadGreeting("signature does not start with 0xFF"));
        }
    }
    if prefix.len() > 9 && prefix[9] & 0x01 != 0x01 {
        // RFC 23 lets the padding carry a ZMTP 1.0 length; a 3.x peer sends 0x7F here.
        return Err(ZmtpError::BadGreeting("signature does not end with 0x7F"));
    }
    if prefix.len() > 10 && prefix[10] < 3 {
        return Err(ZmtpError::UnsupportedVersion(prefix[10]));
    }
    Ok(())
}

/// What we learn from the peer's complete greeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerGreeting {
    /// The minor version both sides will speak: 0 for ZMTP 3.0, 1 for 3.1.
    pub(crate) minor: u8,
}

/// Parses a complete greeting. Version negotiation follows RFC 37: a peer announcing a higher
/// version talks down to ours, so the effective version is the lower of the two.
pub(crate) fn decode(g: &[u8; GREETING_LEN]) -> Result<PeerGreeting, ZmtpError> {
    check_prefix(g)?;
    let (major, minor) = (g[10], g[11]);
    let minor = if major > 3 { 1 } else { minor.min(1) };
    let mechanism = &g[12..32];
    let name_len = mechanism.iter().position(|&b| b == 0).unwrap_or(mechanism.len());
    if &mechanism[..name_len] != MECHANISM_NULL || mechanism[name_len..].iter().any(|&b| b != 0) {
        return Err(ZmtpError::UnsupportedMechanism(String::from_utf8_lossy(&mechanism[..name_len]).into_owned()));
    }
    Ok(PeerGreeting { minor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_greeting_decodes_as_3_1_null() {
        assert_eq!(decode(&encode(true)), Ok(PeerGreeting { minor: 1 }));
    }

    #[test]
    fn a_3_0_peer_is_spoken_to_in_3_0() {
        let mut g = encode(false);
        g[11] = 0;
        assert_eq!(decode(&g), Ok(PeerGreeting { minor: 0 }));
    }

    #[test]
    fn a_newer_peer_talks_down_to_3_1() {
        let mut g = encode(false);
        g[10] = 4;
        g[11] = 7;
        assert_eq!(decode(&g), Ok(PeerGreeting { minor: 1 }));
    }

    #[test]
    fn zmtp_2_and_curve_are_refused() {
        let mut g = encode(false);
        g[10] = 2;
        assert_eq!(decode(&g), Err(ZmtpError::UnsupportedVersion(2)));
        let mut g = encode(false);
        g[12..17].copy_from_slice(b"CURVE");
        assert_eq!(decode(&g), Err(ZmtpError::UnsupportedMechanism("CURVE".into())));
    }

    #[test]
    fn garbage_is_refused_at_the_first_byte() {
        assert!(check_prefix(b"GET / HTTP/1.1").is_err());
    }
}
