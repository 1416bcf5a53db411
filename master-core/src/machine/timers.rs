//! When the loop wakes and what it does then: [`Master::next_timeout`] over every owner's
//! deadlines, and [`Master::on_tick`], which does what came due (handshakes, refusals, tokens,
//! job deadlines, the other masters, the periodic duties).

use std::time::{Duration, Instant};

use halite_protocol::message::MinionJobState;
use tracing::warn;

use crate::core::timers::Timer;
use crate::store::ClusterChange;

use super::Core;
use super::RETRY_EVERY;

/// How often the figures that are counted rather than kept are counted.
const GAUGES_EVERY: Duration = Duration::from_secs(1);

impl Core {
    /// Sessions by role, live jobs and the clock's offset, for `/metrics` (counted every
    /// [`GAUGES_EVERY`]); an offset past `max_clock_offset_secs` is logged.
    fn count_sessions(&mut self) {
        let clients = self.sessions.client_count();
        let metrics = self.metrics.get();
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        metrics
            .sessions
            .get_or_create(&crate::metrics::Role { role: "minion" })
            .set(gauge(self.sessions.online_count()));
        metrics.sessions.get_or_create(&crate::metrics::Role { role: "client" }).set(gauge(clients));
        metrics.jobs_live.set(gauge(self.jobs.len()));
        let offset = self.now.offset_ms;
        metrics.clock_offset_seconds.set(offset as f64 / 1000.0);
        let bound = self.config.max_clock_offset_secs.saturating_mul(1000);
        if offset.unsigned_abs() > bound && self.notices.ready("clock:offset", Duration::from_secs(60), self.now.at) {
            warn!(
                offset_ms = offset,
                max_clock_offset_secs = self.config.max_clock_offset_secs,
                "this host's clock differs from the database's; the master uses the database's time (fix NTP here)"
            );
        }
    }

    /// What comes due at a wake, before the store is followed: the figures counted, handshakes
    /// and refusals past their time closed, sessions whose token expired ended, backlogs sent,
    /// the other masters told this one is alive.
    pub fn tick_due(&mut self) {
        let now = self.now.at;
        if self.timers.expired(Timer::Gauges, now) {
            self.count_sessions();
            self.timers.set(Timer::Gauges, now + GAUGES_EVERY);
        }
        let due = self.sessions.due(now, self.config.handshake_timeout());
        for peer in due.stale_handshakes {
            self.drop_peer(peer, "handshake timed out");
        }
        for peer in due.lingered {
            self.forget(peer, Some("not accepted"));
        }
        // A live event stream has a deadline, not only a check when it opens: the loop wakes
        // when the first token expires.
        self.end_gateway_sessions(self.sessions.expired_tokens(self.now.wall_ms), "token expired");
        self.send_backlogs();
        if self.cluster.alive_due(now) {
            self.tell_masters(ClusterChange::Alive);
        }
    }

    /// Decides the job slots past their deadline as of `now` (the wake's time).
    pub fn expire_deadlines(&mut self, now: Instant) {
        let deadlines_wait = self.pending.deadlines_wait(self.store_in_doubt(), now);
        for (jid, minion, state) in self.jobs.expired(now) {
            // A master that cannot write decides nothing: another master may be storing this
            // slot's return meanwhile, and the store keeps the first final state. Once it can,
            // the returns minions kept meanwhile come first.
            if deadlines_wait {
                self.jobs.set_deadline(&jid, &minion, Some(now + RETRY_EVERY));
                continue;
            }
            if self.cluster.serves_elsewhere(&minion, &self.sessions, now) {
                // Its master decides the slot; looked at again once it may have gone.
                self.jobs.set_deadline(&jid, &minion, Some(now + crate::core::cluster_view::ALIVE_EVERY));
                continue;
            }
            let new = match state {
                // Waiting only for this master to place the minion (no TTL): offline, once it
                // can say that no master serves it.
                MinionJobState::Waiting if self.jobs.get(&jid).is_some_and(|job| job.record.ttl_ms == 0) => {
                    if let Some(settles) = self.cluster.placement_settles_at(now) {
                        self.jobs.set_deadline(&jid, &minion, Some(settles));
                        continue;
                    }
                    MinionJobState::Offline
                }
                MinionJobState::Waiting => MinionJobState::Expired,
                _ => MinionJobState::TimedOut,
            };
            self.slots().set(&jid, &minion, new, None);
        }
    }

    /// Whether the periodic `timer` is due at `now`; if so, it is set for `every` later.
    pub fn periodic_due(&mut self, timer: Timer, now: Instant, every: Duration) -> bool {
        let due = self.timers.expired(timer, now);
        if due {
            self.timers.set(timer, now + every);
        }
        due
    }

    /// When the loop must next wake, whatever arrives meanwhile: the earliest of the master's
    /// own timers, the owners' deadlines (job slots, handshakes and refusals, tokens, rollout
    /// and group waits, the other masters), now when the last step left work for the next, and,
    /// while something is being retried, the retry.
    pub fn next_timeout(&self) -> Option<Instant> {
        let now = self.now.at;
        let token_expiry = self.sessions.next_token_expiry_ms().map(|at_ms| {
            // Tokens expire by the wall clock; the loop sleeps on the monotonic one. Recomputed
            // at every wake, so a step of the wall clock is followed.
            now + Duration::from_millis(at_ms.saturating_sub(self.now.wall_ms))
        });
        let rollout_wait = self.jobs.rollout_jobs().filter_map(|job| job.rollout.as_ref()?.not_before).min();
        let group_wait = self.groups.next_wait();
        let deployment_retry = self.deploy_jobs.next_retry();
        let retry = self.retrying().then_some(now + RETRY_EVERY);
        let left_for_next_step = self.left_for_next_step().then_some(now);
        [
            self.timers.next_timeout(),
            self.jobs.next_deadline(),
            self.sessions.next_timeout(),
            token_expiry,
            rollout_wait,
            group_wait,
            deployment_retry,
            self.cluster.next_due(now),
            self.pending.deadlines_resume_at(),
            self.audit.next_due(),
            retry,
            left_for_next_step,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether something failed or could not be done yet, and is tried again at each wake: the
    /// store's writes, jobs waiting for room in a send queue, a store to reread, minions owed
    /// a request to send their returns again, final states to tell once stored.
    fn retrying(&self) -> bool {
        self.pending.retrying() || !self.undelivered.is_empty() || self.store_in_doubt()
    }

    /// Whether the step left work for the next one: slot ends and events its last part made,
    /// not heard yet, and rollouts or groups that hearing made due (see [`Master::step`]).
    fn left_for_next_step(&self) -> bool {
        !self.hearing.is_empty() || !self.rollout_queue.is_empty() || self.groups.has_work()
    }

    /// Whether the store may not hold what this master would decide now: its last write of job
    /// states failed, or the store was found not answering and has not been reread since.
    pub fn store_in_doubt(&self) -> bool {
        self.pending.write_failed()
            || self.cluster.needs_resync()
            || self.cluster.missed_interruptions(self.store_interruptions)
    }
}
