//! The router's queues are bounded in bytes: received messages wait in the peer's connection
//! (which stops reading) once `event_queue_bytes` are queued for the owner, and a peer's send
//! queue refuses more than `send_queue_bytes`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::connected;

use std::time::Duration;

use halite_protocol::zmtp::Limits;
use halite_transport::{Dealer, DealerConfig, Router, RouterConfig, RouterEvent, SendError};
use tokio::time::timeout;

/// A message of 512 KiB, in frames of 64 KiB (the largest frame a connection takes).
const MESSAGE: usize = 512 * 1024;
const FRAME: usize = 64 * 1024;

fn message(byte: u8) -> Vec<Vec<u8>> {
    vec![vec![byte; FRAME]; MESSAGE / FRAME]
}

#[tokio::test]
async fn received_bytes_wait_in_the_connection_until_the_owner_takes_them() {
    let config = RouterConfig { event_queue_bytes: 2 * MESSAGE, ..RouterConfig::default() };
    let mut router = Router::bind("127.0.0.1:0", config).await.unwrap();
    let dealer = Dealer::connect(router.local_addr().to_string(), DealerConfig::default());
    connected(&mut router).await;
    for _ in 0..8 {
        dealer.send(message(7)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Taken without yielding, so nothing new can arrive meanwhile: what the budget let through.
    let mut queued = 0;
    while let Some(RouterEvent::Message { .. }) = router.try_recv() {
        queued += 1;
    }
    assert_eq!(queued, 2, "two messages fill the 1 MiB budget");
    let mut total = queued;
    while total < 8 {
        match timeout(Duration::from_secs(5), router.recv()).await.unwrap() {
            Some(RouterEvent::Message { parts, .. }) => {
                assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), MESSAGE);
                total += 1;
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_peers_send_queue_is_bounded_in_bytes() {
    let config = RouterConfig { send_queue_bytes: 2 * MESSAGE, ..RouterConfig::default() };
    let mut router = Router::bind("127.0.0.1:0", config).await.unwrap();
    // A peer that does not read: once its small queue and the socket buffers are full, what the
    // router queues for it stays queued.
    // Its limits take whole messages from the start: this test is about the router's queue.
    let limits = Limits { max_parts_pre_auth: 1024, max_message_size_pre_auth: 16 << 20, ..Limits::default() };
    let _dealer = Dealer::connect(
        router.local_addr().to_string(),
        DealerConfig { event_queue: 1, limits, ..DealerConfig::default() },
    );
    let peer = connected(&mut router).await;
    let mut accepted = 0usize;
    let refused = loop {
        match router.send(peer, message(1)) {
            Ok(()) => accepted += 1,
            Err(error) => break error,
        }
        // The connection drains into the socket meanwhile.
        tokio::task::yield_now().await;
        assert!(accepted < 1_000, "never refused");
    };
    assert_eq!(refused, SendError::Full, "after {accepted} messages");
    // The socket buffers and the peer take some; the router's queue itself holds two at most.
    assert!(accepted < 64, "{accepted} messages of 512 KiB accepted");
}
