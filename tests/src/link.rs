//! A TCP link the tests control, between a process and a server (a master and its database):
//! it forwards bytes both ways until told to go silent (connections stay open, nothing passes:
//! a link whose far end is frozen, or a network that drops everything), to reset every
//! connection, or to be cut (every connection reset, new ones closed at once, until restored).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The link; dropped, it stops accepting (the connections it carries are reset).
pub struct Link {
    /// Where to connect instead of the server.
    pub port: u16,
    silent: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    stopped: Arc<AtomicBool>,
}

impl Link {
    /// A link to `127.0.0.1:target`.
    pub fn to(target: u16) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("link: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let link = Link {
            port,
            silent: Arc::default(),
            cut: Arc::default(),
            streams: Arc::default(),
            stopped: Arc::default(),
        };
        let (silent, cut, streams, stopped) =
            (link.silent.clone(), link.cut.clone(), link.streams.clone(), link.stopped.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                if cut.load(Ordering::Acquire) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else { continue };
                for stream in [&client, &server] {
                    if let Ok(copy) = stream.try_clone() {
                        streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(copy);
                    }
                }
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else { continue };
                    let silent = silent.clone();
                    std::thread::spawn(move || pump(from, to, &silent));
                }
            }
        });
        link
    }

    /// From now on nothing passes either way; the connections stay open.
    pub fn silence(&self) {
        self.silent.store(true, Ordering::Release);
    }

    /// Bytes pass again (what was held back first), and connections are carried again.
    pub fn restore(&self) {
        self.silent.store(false, Ordering::Release);
        self.cut.store(false, Ordering::Release);
    }

    /// Cuts the link: every connection is reset, and new ones are closed at once until
    /// [`Link::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.reset();
    }

    /// Resets every connection carried so far (new ones are made as usual).
    pub fn reset(&self) {
        for stream in self.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Release);
        self.reset();
        // Wakes the accepting thread so it sees it is stopped.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` until either closes; while `silent`, reads nothing (what is sent
/// waits in the kernel's buffers, as on a link that carries nothing).
fn pump(mut from: TcpStream, mut to: TcpStream, silent: &AtomicBool) {
    let mut buffer = [0u8; 16 * 1024];
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    loop {
        if silent.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
