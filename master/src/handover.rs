//! Handing minions over when this master alone cannot reach the store: a task that, once the
//! store has been unreachable for `[cluster] handover_after_secs`, asks the other masters'
//! readiness every second, and tells the loop while one answers ready. The loop then closes
//! its minions' sessions a batch at a time (`Master::hand_over`).
//!
//! A master cannot tell from the store whether the others reach it (it cannot read it), so it
//! asks them directly: where each registered its readiness in the store (`masters.ready_url`,
//! as last read while the store answered), and the `[cluster] peers_ready` of its config. When
//! the database is down for everyone, no peer is ready, nothing is told, and no minion moves.

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::config::ClusterConfig;

/// How often the peers are asked, once the store has been unreachable long enough.
const ASK_EVERY: Duration = Duration::from_secs(1);
/// How long a peer has to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Starts the task, on a store shared with other masters (one that says when it is
/// unreachable); `registered` are the addresses the other masters recorded in it.
pub(crate) fn spawn(
    config: &ClusterConfig,
    reachable: Option<watch::Receiver<bool>>,
    registered: Option<watch::Receiver<Vec<String>>>,
) -> Option<mpsc::Receiver<()>> {
    let reachable = reachable?;
    let client =
        match reqwest::Client::builder().timeout(ANSWER_WITHIN).redirect(reqwest::redirect::Policy::none()).build() {
            Ok(client) => client,
            Err(error) => {
                warn!(%error, "cannot ask the other masters' readiness; minions stay here if the store is lost");
                return None;
            }
        };
    let (tx, rx) = mpsc::channel(1);
    let peers = Peers { configured: config.peers_ready.clone(), registered };
    tokio::spawn(watch_store(client, peers, Duration::from_secs(config.handover_after_secs), reachable, tx));
    Some(rx)
}

/// The readiness addresses to ask.
struct Peers {
    configured: Vec<String>,
    registered: Option<watch::Receiver<Vec<String>>>,
}

impl Peers {
    fn now(&self) -> Vec<String> {
        let mut peers = self.configured.clone();
        if let Some(registered) = &self.registered {
            peers.extend(registered.borrow().iter().filter(|url| !self.configured.contains(url)).cloned());
        }
        peers
    }
}

async fn watch_store(
    client: reqwest::Client,
    peers: Peers,
    after: Duration,
    mut reachable: watch::Receiver<bool>,
    tx: mpsc::Sender<()>,
) {
    let now = || crate::clock::Clock::now(&crate::clock::SystemClock);
    let mut lost_since = (!*reachable.borrow()).then(now);
    let mut told = false;
    loop {
        tokio::select! {
            changed = reachable.changed() => {
                if changed.is_err() {
                    return;
                }
                let up = *reachable.borrow_and_update();
                if up {
                    lost_since = None;
                    told = false;
                } else {
                    lost_since = lost_since.or(Some(now()));
                }
            }
            () = tokio::time::sleep(ASK_EVERY) => {}
        }
        let Some(since) = lost_since else { continue };
        if now().saturating_duration_since(since) < after {
            continue;
        }
        match ready_peer(&client, peers.now()).await {
            Some(peer) => {
                if !told {
                    info!(%peer, "the store has been unreachable here while another master reaches it; handing the minions over");
                    told = true;
                }
                if tx.try_send(()).is_err() && tx.is_closed() {
                    return;
                }
            }
            None if told => {
                info!("no other master is ready either; the minions left stay");
                told = false;
            }
            None => {}
        }
    }
}

/// A peer that answers ready (HTTP 200), if any: all are asked at once, so masters long gone
/// (their rows stay in the store) cost one timeout, not one each.
async fn ready_peer(client: &reqwest::Client, peers: Vec<String>) -> Option<String> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let mut asked: FuturesUnordered<_> = peers
        .into_iter()
        .map(|peer| async move {
            let ready = client.get(&peer).send().await.is_ok_and(|answer| answer.status() == reqwest::StatusCode::OK);
            ready.then_some(peer)
        })
        .collect();
    while let Some(answer) = asked.next().await {
        if answer.is_some() {
            return answer;
        }
    }
    None
}
