//! ZMTP commands (RFC 37 "Commands"): READY with its metadata, ERROR, PING and PONG.
//!
//! A command body is `name-size name data`. Parsing works on a body whose size the frame
//! decoder already bounded, and never trusts an inner length without checking it against
//! the bytes actually present.

use super::ZmtpError;

/// A ZMTP command, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    /// Handshake completion with metadata properties.
    Ready(Vec<(String, Vec<u8>)>),
    /// The peer refuses the connection.
    Error(String),
    /// Heartbeat request: TTL in deciseconds and up to 16 bytes of context.
    Ping { ttl_ds: u16, context: Vec<u8> },
    /// Heartbeat reply echoing the ping's context.
    Pong(Vec<u8>),
    /// Any other command (SUBSCRIBE, CANCEL, future ones): ignored after the handshake.
    Other(String),
}

/// Longest PING context allowed by RFC 37.
pub(crate) const MAX_PING_CONTEXT: usize = 16;

pub(crate) fn encode_ready(out: &mut Vec<u8>, properties: &[(&str, &[u8])]) {
    let mut body = Vec::with_capacity(64);
    push_name(&mut body, "READY");
    for (name, value) in properties {
        push_name(&mut body, name);
        body.extend_from_slice(&(value.len() as u32).to_be_bytes());
        body.extend_from_slice(value);
    }
    super::frame::encode(out, super::frame::FLAG_COMMAND, &body);
}

pub(crate) fn encode_error(out: &mut Vec<u8>, reason: &str) {
    let mut body = Vec::with_capacity(7 + reason.len());
    push_name(&mut body, "ERROR");
    // The reason is a short string: at most 255 octets, cut on a character boundary.
    let mut end = reason.len().min(255);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    push_name(&mut body, &reason[..end]);
    super::frame::encode(out, super::frame::FLAG_COMMAND, &body);
}

pub(crate) fn encode_ping(out: &mut Vec<u8>, ttl_ds: u16, context: &[u8]) {
    let mut body = Vec::with_capacity(7 + context.len());
    push_name(&mut body, "PING");
    body.extend_from_slice(&ttl_ds.to_be_bytes());
    body.extend_from_slice(context);
    super::frame::encode(out, super::frame::FLAG_COMMAND, &body);
}

pub(crate) fn encode_pong(out: &mut Vec<u8>, context: &[u8]) {
    let mut body = Vec::with_capacity(5 + context.len());
    push_name(&mut body, "PONG");
    body.extend_from_slice(context);
    super::frame::encode(out, super::frame::FLAG_COMMAND, &body);
}

fn push_name(body: &mut Vec<u8>, name: &str) {
    // Names are at most 255 octets by construction of every caller (fixed names, truncated
    // reasons, metadata names we choose ourselves).
    body.push(name.len() as u8);
    body.extend_from_slice(name.as_bytes());
}

/// Decodes one command body.
pub(crate) fn decode(body: &[u8]) -> Result<Command, ZmtpError> {
    let mut r = Reader(body);
    let name = r.short_string().ok_or(ZmtpError::MalformedCommand("missing command name"))?;
    match name {
        "READY" => decode_properties(r.0).map(Command::Ready),
        "ERROR" => {
            let reason = r.short_string().ok_or(ZmtpError::MalformedCommand("ERROR without a reason"))?;
            Ok(Command::Error(reason.to_owned()))
        }
        "PING" => {
            let ttl = r.take(2).ok_or(ZmtpError::MalformedCommand("PING without a TTL"))?;
            let context = r.0;
            if context.len() > MAX_PING_CONTEXT {
                return Err(ZmtpError::MalformedCommand("PING context longer than 16 octets"));
            }
            Ok(Command::Ping { ttl_ds: u16::from_be_bytes([ttl[0], ttl[1]]), context: context.to_vec() })
        }
        "PONG" => {
            if r.0.len() > MAX_PING_CONTEXT {
                return Err(ZmtpError::MalformedCommand("PONG context longer than 16 octets"));
            }
            Ok(Command::Pong(r.0.to_vec()))
        }
        other => Ok(Command::Other(other.to_owned())),
    }
}

fn decode_properties(mut rest: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ZmtpError> {
    let mut props = Vec::new();
    while !rest.is_empty() {
        let mut r = Reader(rest);
        let name = r.short_string().ok_or(ZmtpError::MalformedCommand("truncated property name"))?;
        if name.is_empty() {
            return Err(ZmtpError::MalformedCommand("empty property name"));
        }
        let len = r.take(4).ok_or(ZmtpError::MalformedCommand("truncated property length"))?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let value = r.take(len).ok_or(ZmtpError::MalformedCommand("property value longer than the command"))?;
        props.push((name.to_owned(), value.to_vec()));
        rest = r.0;
    }
    Ok(props)
}

/// A cursor over a command body; every read checks the bytes are there.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn short_string(&mut self) -> Option<&'a str> {
        let len = *self.take(1)?.first()? as usize;
        std::str::from_utf8(self.take(len)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        &frame[super::super::frame::header_len(frame[0])..]
    }

    #[test]
    fn commands_round_trip() {
        let mut out = Vec::new();
        encode_ready(&mut out, &[("Socket-Type", b"ROUTER"), ("Identity", b"")]);
        assert_eq!(
            decode(body(&out)),
            Ok(Command::Ready(vec![("Socket-Type".into(), b"ROUTER".to_vec()), ("Identity".into(), vec![])]))
        );
        out.clear();
        encode_ping(&mut out, 300, b"ctx");
        assert_eq!(decode(body(&out)), Ok(Command::Ping { ttl_ds: 300, context: b"ctx".to_vec() }));
        out.clear();
        encode_pong(&mut out, b"ctx");
        assert_eq!(decode(body(&out)), Ok(Command::Pong(b"ctx".to_vec())));
        out.clear();
        encode_error(&mut out, &"é".repeat(200));
        match decode(body(&out)) {
            Ok(Command::Error(reason)) => assert_eq!(reason.len(), 254),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_property_longer_than_its_command_is_malformed() {
        let mut b = vec![5];
        b.extend_from_slice(b"READY");
        b.push(1);
        b.push(b'x');
        b.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(decode(&b), Err(ZmtpError::MalformedCommand("property value longer than the command")));
    }
}
