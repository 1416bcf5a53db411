//! Messages queued for a peer together leave the connection in shared writes (up to a batch of
//! bytes each): every message still arrives whole and in order, across batch boundaries, and a
//! close queued behind them is delivered after them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::connected;

use std::time::Duration;

use halite_protocol::zmtp::Limits;
use halite_transport::{CloseReason, Dealer, DealerConfig, DealerEvent, Router, RouterConfig};
use tokio::time::timeout;

/// Message `n`: its number, then `n * 997 % 20_000` bytes, so sizes straddle any batch size.
fn message(n: u32) -> Vec<Vec<u8>> {
    vec![n.to_be_bytes().to_vec(), vec![(n % 251) as u8; (n as usize * 997) % 20_000]]
}

async fn next(dealer: &mut Dealer) -> DealerEvent {
    timeout(Duration::from_secs(10), dealer.recv()).await.expect("an event in time").expect("dealer open")
}

#[tokio::test]
async fn messages_queued_together_arrive_whole_in_order_and_before_the_close_behind_them() {
    let config = RouterConfig { send_queue_bytes: 64 << 20, ..RouterConfig::default() };
    let mut router = Router::bind("127.0.0.1:0", config).await.unwrap();
    // The dealer takes messages past its pre-authentication size from the start: this test is
    // about the router's writes.
    let limits = Limits { max_message_size_pre_auth: 1 << 20, ..Limits::default() };
    let mut dealer =
        Dealer::connect(router.local_addr().to_string(), DealerConfig { limits, ..DealerConfig::default() });
    let peer = connected(&mut router).await;
    assert!(matches!(next(&mut dealer).await, DealerEvent::Connected(_)));

    // Queued without yielding: the connection task finds them all waiting at once.
    const COUNT: u32 = 300;
    for n in 0..COUNT {
        router.send(peer, message(n)).unwrap();
    }
    router.disconnect(peer, "bye after the batch");

    for n in 0..COUNT {
        match next(&mut dealer).await {
            DealerEvent::Message(parts) => assert_eq!(parts, message(n), "message {n}"),
            other => panic!("message {n}: {other:?}"),
        }
    }
    match next(&mut dealer).await {
        DealerEvent::Disconnected(CloseReason::Protocol(error)) => {
            assert!(error.to_string().contains("bye after the batch"), "{error}");
        }
        other => panic!("expected the close after every message: {other:?}"),
    }
}
