//! systemd readiness notification (`Type=notify` units): one datagram, `READY=1`, to the socket
//! named by `$NOTIFY_SOCKET`. Ten lines do not warrant a dependency.

use std::io;
use std::os::unix::net::UnixDatagram;

/// Tells systemd the daemon is ready, if it was started as a `Type=notify` unit; does nothing
/// otherwise.
pub fn notify_ready() -> io::Result<()> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(path) => notify_to(&path.to_string_lossy(), "READY=1"),
        None => Ok(()),
    }
}

/// Sends `state` to a notification socket: a path, or an abstract name written `@name`.
pub fn notify_to(socket: &str, state: &str) -> io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sender.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            sender.send_to(state.as_bytes(), socket)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reaches_the_socket() {
        let path = std::env::temp_dir().join(format!("halite-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let receiver = UnixDatagram::bind(&path).unwrap();
        notify_to(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_file(&path);
    }
}
