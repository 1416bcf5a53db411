//! What the transport's integration tests share.

use std::time::Duration;

use halite_transport::{PeerId, Router, RouterEvent};
use tokio::time::timeout;

/// Waits for a peer to connect, marks it authenticated and lets its connection apply the
/// post-authentication limits.
pub(crate) async fn connected(router: &mut Router) -> PeerId {
    loop {
        if let Some(RouterEvent::Connected { peer, .. }) =
            timeout(Duration::from_secs(5), router.recv()).await.expect("a connection in time")
        {
            router.mark_authenticated(peer, halite_transport::Lane::Bulk).expect("peer still connected");
            tokio::time::sleep(Duration::from_millis(100)).await;
            return peer;
        }
    }
}
