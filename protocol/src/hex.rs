//! Lower-case hex, for key files and fingerprints (ten lines do not warrant a dependency).

/// Encodes bytes as lower-case hex.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

/// Decodes hex (either case); `None` on odd length or a non-hex character.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if text.len() % 2 != 0 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.chunks_exact(2).map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?)).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_rejects_garbage() {
        assert_eq!(super::decode(&super::encode(&[0, 0xab, 0xff])), Some(vec![0, 0xab, 0xff]));
        assert_eq!(super::decode("ABcd"), Some(vec![0xab, 0xcd]));
        assert_eq!(super::decode("abc"), None);
        assert_eq!(super::decode("zz"), None);
    }
}
