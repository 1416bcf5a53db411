//! TCP keepalive and a user timeout on the sockets a minion (or client) opens to its master: a
//! link that goes silent without a reset (a network that drops everything, a host that vanished,
//! a firewall forgetting the connection) is noticed by the kernel within about
//! [`SILENT_LINK_NOTICED`], whether or not anything was on its way, at no cost to either
//! process. The application heartbeat (ZMTP PING, [`halite_protocol::zmtp::Heartbeat`]) covers
//! what keepalive cannot see: a peer whose kernel answers but whose process does not.

use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};

/// Idle time before the first keepalive probe, the time between probes, and how many go
/// unanswered before the link counts as dead.
const KEEPALIVE_IDLE_SECS: u32 = 4;
const KEEPALIVE_INTERVAL_SECS: u32 = 1;
const KEEPALIVE_PROBES: u32 = 3;

/// The longest sent data may stay unacknowledged before the connection is dropped.
const USER_TIMEOUT: Duration = Duration::from_secs(7);

/// About how long a silent link lasts before the connection is dropped.
pub const SILENT_LINK_NOTICED: Duration = Duration::from_secs(7);

/// Sets keepalive and the user timeout on `stream`; a failure (an old kernel, a socket that is
/// not TCP) only leaves it to the application heartbeat, and is logged.
pub(crate) fn watch_link(stream: &tokio::net::TcpStream) {
    let set = || -> nix::Result<()> {
        setsockopt(stream, sockopt::KeepAlive, &true)?;
        setsockopt(stream, sockopt::TcpKeepIdle, &KEEPALIVE_IDLE_SECS)?;
        setsockopt(stream, sockopt::TcpKeepInterval, &KEEPALIVE_INTERVAL_SECS)?;
        setsockopt(stream, sockopt::TcpKeepCount, &KEEPALIVE_PROBES)?;
        setsockopt(stream, sockopt::TcpUserTimeout, &(USER_TIMEOUT.as_millis() as u32))?;
        Ok(())
    };
    if let Err(error) = set() {
        tracing::debug!(%error, "could not set TCP keepalive on a connection; the heartbeat alone watches it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_to_the_master_is_watched_by_the_kernel() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        watch_link(&stream);
        assert!(nix::sys::socket::getsockopt(&stream, sockopt::KeepAlive).unwrap());
        assert_eq!(nix::sys::socket::getsockopt(&stream, sockopt::TcpKeepIdle).unwrap(), KEEPALIVE_IDLE_SECS);
        assert_eq!(nix::sys::socket::getsockopt(&stream, sockopt::TcpKeepCount).unwrap(), KEEPALIVE_PROBES);
        assert_eq!(nix::sys::socket::getsockopt(&stream, sockopt::TcpUserTimeout).unwrap(), 7_000);
    }
}
