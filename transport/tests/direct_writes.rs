//! A router writes each message to the socket on the sender's thread, and leaves only what the
//! socket does not take to the connection's task: messages sent from several threads at once
//! still arrive whole and in each sender's order, and a peer that stops reading is cut off once
//! bytes have waited for it longer than the write timeout. Held messages wait for their release.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::connected;

use std::time::Duration;

use halite_protocol::zmtp::Limits;
use halite_transport::{CloseReason, Dealer, DealerConfig, DealerEvent, Router, RouterConfig, RouterEvent, SendError};
use tokio::time::timeout;

/// Message `seq` of sender `from`: both numbers, then a size that varies widely, so writes
/// are cut at every place of a frame.
fn message(from: u32, seq: u32) -> Vec<Vec<u8>> {
    let size = (seq as usize * 7_919 + from as usize * 104_729) % 30_000;
    vec![from.to_be_bytes().to_vec(), seq.to_be_bytes().to_vec(), vec![(seq % 251) as u8; size]]
}

fn big_messages() -> Limits {
    Limits { max_message_size_pre_auth: 1 << 20, max_parts_pre_auth: 1024, ..Limits::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_from_several_threads_arrive_whole_and_in_each_senders_order() {
    const SENDERS: u32 = 4;
    const EACH: u32 = 400;
    let config = RouterConfig { send_queue_bytes: 256 << 20, ..RouterConfig::default() };
    let mut router = Router::bind("127.0.0.1:0", config).await.unwrap();
    let mut dealer = Dealer::connect(
        router.local_addr().to_string(),
        DealerConfig { limits: big_messages(), ..DealerConfig::default() },
    );
    let peer = connected(&mut router).await;
    assert!(matches!(timeout(Duration::from_secs(10), dealer.recv()).await, Ok(Some(DealerEvent::Connected(_)))));

    let router = &router;
    std::thread::scope(|scope| {
        for from in 0..SENDERS {
            scope.spawn(move || {
                for seq in 0..EACH {
                    router.send(peer, message(from, seq)).unwrap();
                }
            });
        }
    });
    let mut next = [0u32; SENDERS as usize];
    for _ in 0..SENDERS * EACH {
        let event = timeout(Duration::from_secs(20), dealer.recv()).await.expect("a message in time");
        let Some(DealerEvent::Message(parts)) = event else { panic!("expected a message: {event:?}") };
        let from = u32::from_be_bytes(parts[0].clone().try_into().unwrap());
        let seq = u32::from_be_bytes(parts[1].clone().try_into().unwrap());
        assert_eq!(seq, next[from as usize], "sender {from} out of order");
        assert_eq!(parts, message(from, seq), "sender {from}, message {seq} damaged");
        next[from as usize] += 1;
    }
}

#[tokio::test]
async fn a_peer_that_stops_reading_is_cut_off_after_the_write_timeout() {
    let write_timeout = Duration::from_millis(300);
    let config = RouterConfig { write_timeout, send_queue_bytes: 64 << 20, ..RouterConfig::default() };
    let mut router = Router::bind("127.0.0.1:0", config).await.unwrap();
    // Its connection hands one event up and then waits for this test, which never takes it: the
    // dealer stops reading, and the socket buffers fill.
    let _dealer = Dealer::connect(
        router.local_addr().to_string(),
        DealerConfig { event_queue: 1, limits: big_messages(), ..DealerConfig::default() },
    );
    let peer = connected(&mut router).await;
    let chunk = vec![vec![7u8; 64 * 1024]; 8];
    let mut sent = 0usize;
    while sent < 32 << 20 {
        match router.send(peer, chunk.clone()) {
            Ok(()) => sent += 512 * 1024,
            Err(SendError::Full) => break,
            Err(error) => panic!("after {sent} bytes: {error}"),
        }
    }
    let closed = timeout(Duration::from_secs(10), async {
        loop {
            match router.recv().await {
                Some(RouterEvent::Disconnected { reason, .. }) => break reason,
                Some(_) => {}
                None => panic!("router gone"),
            }
        }
    })
    .await
    .expect("cut off in time");
    assert_eq!(closed, CloseReason::WriteStalled);
    assert_eq!(router.send(peer, chunk), Err(SendError::NotConnected));
}

#[tokio::test]
async fn held_messages_wait_for_their_release_and_a_large_one_goes_at_once() {
    let mut router = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    let mut dealer = Dealer::connect(
        router.local_addr().to_string(),
        DealerConfig { limits: big_messages(), ..DealerConfig::default() },
    );
    let peer = connected(&mut router).await;
    assert!(matches!(timeout(Duration::from_secs(10), dealer.recv()).await, Ok(Some(DealerEvent::Connected(_)))));
    let small = |seq: u32| vec![seq.to_be_bytes().to_vec()];
    router.send_held(peer, small(0)).unwrap();
    router.send_held(peer, small(1)).unwrap();
    // A message sent directly meanwhile goes behind the held ones.
    router.send(peer, small(2)).unwrap();
    assert!(timeout(Duration::from_millis(300), dealer.recv()).await.is_err(), "nothing leaves before the release");
    router.release_held();
    for seq in 0..3 {
        let event = timeout(Duration::from_secs(5), dealer.recv()).await.expect("released in time");
        assert!(matches!(event, Some(DealerEvent::Message(parts)) if parts == small(seq)), "message {seq}");
    }
    // Past the hold limit, what is held is written without waiting for a release.
    router.send_held(peer, small(3)).unwrap();
    router.send_held(peer, vec![vec![9u8; 20_000]]).unwrap();
    let event = timeout(Duration::from_secs(5), dealer.recv()).await.expect("written at once");
    assert!(matches!(event, Some(DealerEvent::Message(parts)) if parts == small(3)));
    let event = timeout(Duration::from_secs(5), dealer.recv()).await.expect("written at once");
    assert!(matches!(event, Some(DealerEvent::Message(parts)) if parts[0].len() == 20_000));
    router.release_held();
}
