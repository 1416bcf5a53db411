//! The gateway's connections: accepted under a cap, each served over HTTP/1.1 with a deadline
//! for a request's headers and one for silence, so clients that open connections and send
//! nothing (or send headers a byte at a time) cannot hold the master's descriptors.
//!
//! The cap stays well below the process's open-file limit, so the gateway can never take the
//! descriptors the master's own listener needs for minions and clients.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Semaphore;
use tracing::warn;

/// How many connections, and for how long.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Connections served at once; more are closed as they arrive.
    pub(super) max_connections: usize,
    /// Time a client has to send a request's headers (and, with TLS, its handshake).
    pub(super) header_timeout: Duration,
    /// A connection with nothing read or written for this long is closed (an event stream
    /// writes a keep-alive every 15 s, so it stays open).
    pub(super) idle_timeout: Duration,
}

impl Limits {
    /// `configured` connections at most, and never more than a quarter of `open_files` (the
    /// rest stays for the master's minions, clients and store).
    pub(super) fn new(configured: usize, open_files: Option<u64>, header_secs: u64, idle_secs: u64) -> Self {
        let share = open_files.map_or(usize::MAX, |n| usize::try_from(n / 4).unwrap_or(usize::MAX));
        Limits {
            max_connections: configured.min(share).max(1),
            header_timeout: Duration::from_secs(header_secs.max(1)),
            idle_timeout: Duration::from_secs(idle_secs.max(1)),
        }
    }
}

/// Accepts connections for as long as the listener lives, serving each with `serve`.
pub(super) async fn accept<F, Fut>(listener: tokio::net::TcpListener, limits: Limits, serve: F)
where
    F: Fn(tokio::net::TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut last_warning: Option<Instant> = None;
    let mut warn_once_a_minute = |what: &str| {
        let now = SystemClock.now();
        if last_warning.is_none_or(|at| now.saturating_duration_since(at) > Duration::from_secs(60)) {
            last_warning = Some(now);
            warn!(max_connections = limits.max_connections, "gateway: {what}");
        }
    };
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors, most likely: wait for some to be given back.
                warn_once_a_minute(&format!("accepting a connection failed: {error}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn_once_a_minute("connection cap reached; new connections are closed until some end");
            drop(stream);
            continue;
        };
        let served = serve(stream);
        tokio::spawn(async move {
            served.await;
            drop(slot);
        });
    }
}

/// The address of the connection a request came on (what the audit trail records of a
/// gateway session).
#[derive(Debug, Clone, Copy)]
pub(super) struct ClientAddr(pub(super) std::net::SocketAddr);

/// Serves HTTP/1.1 on one connection from `peer` until it ends, its headers come too slowly,
/// or it falls silent.
pub(super) async fn serve_http<IO>(io: IO, peer: Option<std::net::SocketAddr>, app: axum::Router, limits: Limits)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Activity::new();
    let io = Watched { inner: io, activity: activity.clone() };
    let app = tower::ServiceExt::map_request(app, move |mut request: hyper::Request<hyper::body::Incoming>| {
        if let Some(peer) = peer {
            request.extensions_mut().insert(ClientAddr(peer));
        }
        request
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(app));
    tokio::pin!(connection);
    let mut check = tokio::time::interval((limits.idle_timeout / 4).max(Duration::from_millis(250)));
    loop {
        tokio::select! {
            _ = &mut connection => return,
            _ = check.tick() => {
                if activity.quiet_for() >= limits.idle_timeout {
                    // Dropping the connection closes it.
                    return;
                }
            }
        }
    }
}

/// When a connection last moved a byte either way.
#[derive(Clone)]
struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Self {
        Activity { start: SystemClock.now(), last_ms: Arc::new(AtomicU64::new(0)) }
    }

    fn since_start(&self) -> Duration {
        SystemClock.now().saturating_duration_since(self.start)
    }

    fn touch(&self) {
        let now = u64::try_from(self.since_start().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        self.since_start().saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// A stream that records its activity.
struct Watched<IO> {
    inner: IO,
    activity: Activity,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_below_a_quarter_of_the_open_file_limit() {
        assert_eq!(Limits::new(512, Some(1024), 10, 30).max_connections, 256);
        assert_eq!(Limits::new(512, Some(65_536), 10, 30).max_connections, 512);
        assert_eq!(Limits::new(512, None, 10, 30).max_connections, 512);
        assert_eq!(Limits::new(0, Some(2), 0, 0).max_connections, 1);
        assert_eq!(Limits::new(1, None, 0, 0).header_timeout, Duration::from_secs(1));
    }
}
