//! When the loop wakes and what it does then: [`Master::next_timeout`] over every owner's
//! deadlines, and [`Master::on_tick`], which does what came due (handshakes, refusals, tokens,
//! job deadlines, the other masters, the periodic duties).

use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::core::timers::Timer;
use crate::net::Net;
use crate::store::Store;

use halite_master_core::machine::cluster_reads::StoreDuty;

use super::Master;

/// How often the wall clock reached is recorded (TTLs resume from it after a restart).
const WALL_MARK_EVERY: Duration = Duration::from_secs(5);
/// How often old jobs are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

impl<S: Store, N: Net> Master<S, N> {
    /// Does what has come due: closes handshakes and refusals past their time, ends sessions
    /// whose token expired, decides job slots past their deadline, and the periodic duties.
    pub(crate) async fn on_tick(&mut self) {
        self.observe();
        let now = self.core.now().at;
        self.core.tick_due();
        self.follow_the_store(now).await;
        self.observe();
        self.core.expire_deadlines(now);
        if self.core.periodic_due(Timer::WallMark, now, WALL_MARK_EVERY) {
            if let Err(error) = self.store.set_wall_mark(self.clock.wall_ms()).await {
                warn!(%error, "recording the wall clock failed");
            }
        }
        if self.core.periodic_due(Timer::Purge, now, PURGE_EVERY) {
            self.purge().await;
        }
    }

    /// With other masters on the store: after any gap in what this master heard, it rereads the
    /// store every 100 ms until that succeeds (so its views converge within 100 ms of the
    /// store answering again); and every few seconds it compares the jobs it holds with the
    /// store's live ones.
    async fn follow_the_store(&mut self, now: Instant) {
        match self.core.store_duty(now) {
            StoreDuty::Nothing => {}
            StoreDuty::Resync => {
                if let Err(error) = self.resync().await {
                    self.core.resync_failed(&error, now);
                }
            }
            StoreDuty::Sweep => {
                // Slots this master ended are written first: a job it finished must not look live.
                self.flush().await;
                self.core.sweep_jobs();
                // What the sweep finds is taken before any deadline here is judged.
                self.answer_asks().await;
            }
        }
    }

    /// Retention: deletes finished jobs older than `keep_jobs_hours` by the wall clock. A job
    /// with any minion not yet in a final state is never deleted, whatever the clock says.
    pub(crate) async fn purge(&mut self) {
        let config = &self.core.config();
        let before = self.clock.wall_ms().saturating_sub(config.keep_jobs_hours * 3_600_000);
        match self.store.purge_jobs(before).await {
            Ok(0) => {}
            Ok(n) => info!(jobs = n, "purged jobs past retention"),
            Err(error) => warn!(%error, "purging old jobs failed"),
        }
        let keep = &config.audit;
        let before = (keep.keep_days > 0).then(|| self.clock.wall_ms().saturating_sub(keep.keep_days * 86_400_000));
        let records = (keep.keep_records > 0).then_some(keep.keep_records);
        match self.store.prune_audit(&config.id, before, records).await {
            Ok(0) => {}
            Ok(n) => info!(
                records = n,
                "pruned audit records past retention (a signed checkpoint marks where the chain starts)"
            ),
            Err(error) => warn!(%error, "pruning the audit trail failed"),
        }
    }
}
