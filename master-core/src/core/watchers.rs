//! What each watching client is to be told at the end of a step: its jobs' updates and which of
//! them finished, and how many updates it could not take (reported in `job_done.missed`, so a
//! client never believes a partial result complete).

use std::collections::HashMap;

use halite_protocol::message::JobUpdate;
use halite_transport::PeerId;

/// What one client is sent at the end of a step.
#[derive(Default)]
pub struct WatcherBatch {
    pub updates: Vec<JobUpdate>,
    pub done: Vec<String>,
}

/// Batches for every watcher, and the updates each missed.
#[derive(Default)]
pub struct Watchers {
    out: HashMap<PeerId, WatcherBatch>,
    missed: HashMap<(PeerId, String), u32>,
}

impl Watchers {
    /// Queues an update for every watcher of its job.
    pub fn update(&mut self, watchers: &[PeerId], update: JobUpdate) {
        if let Some((last, others)) = watchers.split_last() {
            for watcher in others {
                self.out.entry(*watcher).or_default().updates.push(update.clone());
            }
            // The last watcher takes the update itself: returns can be large.
            self.out.entry(*last).or_default().updates.push(update);
        }
    }

    /// Queues the end of a job for its watchers.
    pub fn done(&mut self, watchers: impl IntoIterator<Item = PeerId>, jid: &str) {
        for watcher in watchers {
            self.out.entry(watcher).or_default().done.push(jid.to_owned());
        }
    }

    /// Takes every batch, to send.
    pub fn take(&mut self) -> HashMap<PeerId, WatcherBatch> {
        std::mem::take(&mut self.out)
    }

    /// Counts updates a watcher's queue could not take.
    pub fn missed(&mut self, peer: PeerId, lost: Vec<JobUpdate>) {
        for update in lost {
            *self.missed.entry((peer, update.jid)).or_default() += 1;
        }
    }

    /// How many updates of `jid` the watcher missed (forgotten once read, at `job_done`).
    pub fn take_missed(&mut self, peer: PeerId, jid: &str) -> u32 {
        self.missed.remove(&(peer, jid.to_owned())).unwrap_or(0)
    }

    /// Forgets a watcher that went away.
    pub fn forget(&mut self, peer: PeerId) {
        self.missed.retain(|(p, _), _| *p != peer);
        self.out.remove(&peer);
    }
}
