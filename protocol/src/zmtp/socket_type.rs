//! ZeroMQ socket types that may appear in READY, and which pairs may talk (RFC 37, RFC 28).

use std::fmt;

/// A ZeroMQ socket type, as announced in the READY command's `Socket-Type` property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketType {
    /// Asynchronous request/reply client; the minion and client side.
    Dealer,
    /// Asynchronous request/reply server that routes by peer identity; the master side.
    Router,
    /// Synchronous request.
    Req,
    /// Synchronous reply.
    Rep,
}

impl SocketType {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            SocketType::Dealer => "DEALER",
            SocketType::Router => "ROUTER",
            SocketType::Req => "REQ",
            SocketType::Rep => "REP",
        }
    }

    /// Parses a wire name; names are case-sensitive as in libzmq.
    pub fn from_wire(name: &[u8]) -> Option<Self> {
        match name {
            b"DEALER" => Some(SocketType::Dealer),
            b"ROUTER" => Some(SocketType::Router),
            b"REQ" => Some(SocketType::Req),
            b"REP" => Some(SocketType::Rep),
            _ => None,
        }
    }

    /// Whether a socket of this type may be connected to a peer of type `peer`.
    pub fn accepts(self, peer: SocketType) -> bool {
        use SocketType::*;
        matches!(
            (self, peer),
            (Dealer, Dealer | Router | Rep)
                | (Router, Dealer | Router | Req)
                | (Req, Rep | Router)
                | (Rep, Req | Dealer)
        )
    }
}

impl fmt::Display for SocketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
