//! `GET /metrics` and `GET /healthz` for the minion's opt-in metrics: a few lines of HTTP/1.0
//! rather than an HTTP stack, to keep the minion small. One short request per connection,
//! headers within 8 KiB and 5 s, at most 8 connections at once; anything else is answered
//! 400, 404 or 405 and closed.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::debug;

use crate::metrics::MinionMetrics;

const MAX_HEADER: usize = 8 * 1024;
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_CONNECTIONS: usize = 8;

/// Serves the figures on `listener` for as long as the task lives.
pub(crate) async fn serve(listener: TcpListener, metrics: MinionMetrics) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        // Past the cap, new connections are closed at once.
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if let Err(error) = answer(stream, &metrics).await {
                debug!(%error, "metrics request");
            }
            drop(slot);
        });
    }
}

async fn answer(mut stream: TcpStream, metrics: &MinionMetrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(HEADER_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEADER {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return Ok(());
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (status, body) = match (words.next(), words.next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", metrics.encode()),
        (Some("GET"), Some("/healthz")) => ("200 OK", "ok\n".to_owned()),
        (Some("GET"), Some(_)) => ("404 Not Found", "not found: /metrics or /healthz\n".to_owned()),
        (Some(_), Some(_)) => ("405 Method Not Allowed", "only GET\n".to_owned()),
        _ => ("400 Bad Request", "not an HTTP request\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
