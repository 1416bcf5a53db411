//! A dealer given several peers (a cluster's masters) stays with a live peer that closed its
//! session, and moves to the next only when the peer cannot be reached again, said to go
//! elsewhere, or this side moves on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::connected;

use std::time::Duration;

use halite_transport::{Dealer, DealerConfig, DealerEvent, PeerId, Router, RouterConfig, RouterEvent};
use tokio::time::timeout;

/// Waits for the dealer's next connection and says which router took it, and as which peer.
/// Other events on the routers (the disconnection of the session before) are passed over.
async fn next_connection(dealer: &mut Dealer, a: &mut Router, b: &mut Router) -> (char, PeerId) {
    loop {
        match timeout(Duration::from_secs(10), dealer.recv()).await.expect("an event in time") {
            Some(DealerEvent::Connected(_)) => break,
            Some(_) => continue,
            None => panic!("the dealer stopped"),
        }
    }
    let taken = async {
        loop {
            tokio::select! {
                event = a.recv() => match event {
                    Some(RouterEvent::Connected { peer, .. }) => return ('a', peer),
                    Some(_) => continue,
                    None => panic!("router a stopped"),
                },
                event = b.recv() => match event {
                    Some(RouterEvent::Connected { peer, .. }) => return ('b', peer),
                    Some(_) => continue,
                    None => panic!("router b stopped"),
                },
            }
        }
    };
    timeout(Duration::from_secs(10), taken).await.expect("a router sees the connection in time")
}

#[tokio::test]
async fn a_session_closed_by_a_live_peer_reconnects_to_it_and_a_dead_peer_is_left() {
    let mut a = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    let mut b = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    let config = DealerConfig { reconnect_initial: Duration::from_millis(20), ..DealerConfig::default() };
    let mut dealer = Dealer::connect_any(vec![a.local_addr().to_string(), b.local_addr().to_string()], config);
    let peer = connected(&mut a).await;
    // A closes the session (as a master asking for returns again does): back to A.
    a.disconnect(peer, "send your returns again");
    assert_eq!(next_connection(&mut dealer, &mut a, &mut b).await.0, 'a');
    // This side moves on (a refused or revoked master): to B.
    dealer.move_on("not this one").await.unwrap();
    let (taken, peer) = next_connection(&mut dealer, &mut a, &mut b).await;
    assert_eq!(taken, 'b');
    // B says to go elsewhere (it cannot reach its database): on to A.
    b.mark_authenticated(peer, halite_transport::Lane::Bulk).expect("connected");
    tokio::time::sleep(Duration::from_millis(100)).await;
    b.disconnect(peer, halite_protocol::noise::GO_ELSEWHERE_REASON);
    assert_eq!(next_connection(&mut dealer, &mut a, &mut b).await.0, 'a');
    dealer.move_on("back to b").await.unwrap();
    assert_eq!(next_connection(&mut dealer, &mut a, &mut b).await.0, 'b');
    // B goes away altogether: back round to A.
    drop(b);
    let mut b = Router::bind("127.0.0.1:0", RouterConfig::default()).await.unwrap();
    assert_eq!(next_connection(&mut dealer, &mut a, &mut b).await.0, 'a');
}
