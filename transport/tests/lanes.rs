//! The router's two lanes: what a peer on the priority lane sends is read before a backlog of
//! bulk, one peer's messages keep their order across its move to bulk, and a full priority lane
//! still lets bulk through, a peer never admitted gets no more priority than its handshake, and a
//! disconnection comes after what the peer sent. And its door: no more connections than
//! `max_connections`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_transport::{Dealer, DealerConfig, Lane, PeerId, Router, RouterConfig, RouterEvent};
use tokio::time::timeout;

async fn next(router: &mut Router) -> RouterEvent {
    timeout(Duration::from_secs(5), router.recv()).await.expect("an event in time").expect("the router runs")
}

/// Waits for one peer to connect; its handle.
async fn connected(router: &mut Router) -> PeerId {
    loop {
        if let RouterEvent::Connected { peer, .. } = next(router).await {
            return peer;
        }
    }
}

/// A dealer connected to `router`, its handle there, and (with `lane`) admitted to that lane.
async fn dealer(router: &mut Router, lane: Option<Lane>) -> (Dealer, PeerId) {
    let dealer = Dealer::connect(router.local_addr().to_string(), DealerConfig::default());
    let peer = connected(router).await;
    if let Some(lane) = lane {
        router.mark_authenticated(peer, lane).unwrap();
    }
    (dealer, peer)
}

/// Lets what was sent reach the router's queues (it takes none meanwhile).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test]
async fn a_priority_peers_message_passes_a_bulk_backlog_and_each_peer_keeps_its_order() {
    let mut router = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    let (minion, minion_peer) = dealer(&mut router, None).await;
    // Sent before the move: these stay on the priority lane.
    minion.send(vec![b"before-1".to_vec()]).await.unwrap();
    minion.send(vec![b"before-2".to_vec()]).await.unwrap();
    settle().await;
    router.mark_authenticated(minion_peer, Lane::Bulk).unwrap();
    settle().await;
    for i in 0..200u32 {
        minion.send(vec![format!("bulk-{i}").into_bytes()]).await.unwrap();
    }
    let admin = Dealer::connect(router.local_addr().to_string(), DealerConfig::default());
    settle().await;
    admin.send(vec![b"request".to_vec()]).await.unwrap();
    settle().await;

    let mut seen = Vec::new();
    while seen.len() < 204 {
        match next(&mut router).await {
            RouterEvent::Message { parts, .. } => seen.push(String::from_utf8(parts.concat()).unwrap()),
            RouterEvent::Connected { .. } => seen.push("connected".into()),
            other => panic!("{other:?}"),
        }
    }
    let at = |what: &str| seen.iter().position(|s| s == what).unwrap_or_else(|| panic!("{what} missing"));
    assert!(at("before-1") < at("before-2") && at("before-2") < at("bulk-0"), "{seen:?}");
    assert!(at("request") < at("bulk-0"), "the administrator waited behind the bulk: {seen:?}");
    let bulk: Vec<&String> = seen.iter().filter(|s| s.starts_with("bulk-")).collect();
    let expected: Vec<String> = (0..200).map(|i| format!("bulk-{i}")).collect();
    assert_eq!(bulk, expected.iter().collect::<Vec<_>>(), "a peer's messages keep their order");
}

#[tokio::test]
async fn a_full_priority_lane_still_lets_bulk_through() {
    let mut router = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    let (minion, minion_peer) = dealer(&mut router, Some(Lane::Bulk)).await;
    let (flooder, _) = dealer(&mut router, Some(Lane::Priority)).await;
    settle().await;
    minion.send(vec![b"return".to_vec()]).await.unwrap();
    for _ in 0..1_000 {
        flooder.send(vec![b"flood".to_vec()]).await.unwrap();
    }
    settle().await;
    let mut taken = 0;
    loop {
        match next(&mut router).await {
            RouterEvent::Message { peer, .. } if peer == minion_peer => break,
            RouterEvent::Message { .. } => taken += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(taken <= 64, "the bulk return waited behind {taken} priority messages");
}

/// Past `max_connections` a new connection is closed as soon as it is accepted: the owner's
/// descriptors are never all taken by peers.
#[tokio::test]
async fn connections_past_the_cap_are_closed_at_the_door() {
    use tokio::io::AsyncReadExt;
    let config = RouterConfig { max_connections: 3, ..RouterConfig::default() };
    let router = Router::bind("127.0.0.1:0", config).await.unwrap();
    let mut streams = Vec::new();
    for _ in 0..6 {
        streams.push(tokio::net::TcpStream::connect(router.local_addr()).await.unwrap());
        settle().await;
    }
    assert_eq!(router.connection_count(), 3);
    let mut closed = 0;
    for stream in &mut streams {
        let mut greeting = [0u8; 64];
        // A kept connection sends its ZMTP greeting; a refused one is closed at once.
        match timeout(Duration::from_secs(2), stream.read(&mut greeting)).await {
            Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
            Ok(Ok(_)) => {}
            Err(_) => panic!("neither greeted nor closed"),
        }
    }
    assert_eq!(closed, 3, "the three past the cap are closed");
    // One kept connection goes: there is room for one more.
    streams.remove(0);
    settle().await;
    let mut another = tokio::net::TcpStream::connect(router.local_addr()).await.unwrap();
    let mut greeting = [0u8; 64];
    let read = timeout(Duration::from_secs(2), another.read(&mut greeting)).await.expect("greeted in time");
    assert!(read.is_ok_and(|n| n > 0), "the connection after one went is kept and greeted");
    assert_eq!(router.connection_count(), 3);
}

/// A peer the owner has not admitted gets the priority lane for its handshake only: past a few
/// messages the rest of what it sends waits behind the bulk already queued.
#[tokio::test]
async fn an_unadmitted_peer_gets_no_more_priority_than_a_handshake_needs() {
    let mut router = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    let (minion, minion_peer) = dealer(&mut router, Some(Lane::Bulk)).await;
    let (stranger, stranger_peer) = dealer(&mut router, None).await;
    settle().await;
    minion.send(vec![b"return".to_vec()]).await.unwrap();
    settle().await;
    for _ in 0..40 {
        stranger.send(vec![b"noise".to_vec()]).await.unwrap();
    }
    settle().await;
    let mut before = 0;
    loop {
        match next(&mut router).await {
            RouterEvent::Message { peer, .. } if peer == minion_peer => break,
            RouterEvent::Message { peer, .. } if peer == stranger_peer => before += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(before <= 8, "{before} messages of a peer never admitted were read before a minion's return");
}

/// A client's disconnection is read after what it sent, even when the priority lane is long
/// enough that bulk takes its turn before the client's messages are reached.
#[tokio::test]
async fn a_clients_disconnection_comes_after_its_messages() {
    let mut router = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    let (busy, _) = dealer(&mut router, Some(Lane::Priority)).await;
    let (client, client_peer) = dealer(&mut router, Some(Lane::Priority)).await;
    settle().await;
    for _ in 0..100u32 {
        busy.send(vec![b"busy".to_vec()]).await.unwrap();
    }
    settle().await;
    for i in 0..3u32 {
        client.send(vec![format!("request-{i}").into_bytes()]).await.unwrap();
    }
    settle().await;
    drop(client);
    settle().await;
    let mut from_client = Vec::new();
    while from_client.last().map(String::as_str) != Some("gone") {
        match next(&mut router).await {
            RouterEvent::Message { peer, parts } if peer == client_peer => {
                from_client.push(String::from_utf8(parts.concat()).unwrap())
            }
            RouterEvent::Disconnected { peer, .. } if peer == client_peer => from_client.push("gone".into()),
            _ => {}
        }
    }
    assert_eq!(from_client, ["request-0", "request-1", "request-2", "gone"]);
}
