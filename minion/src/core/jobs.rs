//! Jobs, from their delivery to their acknowledged return: the signature and the revoked keys
//! (checked again before a queued job starts), run-once (a jid whose marker is on disk never
//! runs again), freshness on the master's clock, the queue while every slot is taken, and
//! returns kept in the outbox (or in memory, when the disk refuses them) until the master
//! acknowledges them.

use std::time::{Duration, Instant};

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{ErrorKind, ErrorMessage, Job, JobAck, JobReturn, Message, Outcome, SignedJob};
use serde_json::json;
use tracing::{debug, error, info, warn};

use super::{Effect, MinionCore};
use crate::outbox::Claim;

/// An accepted job waiting for a slot: when it arrived, and by when (on this minion's clock)
/// it must start, as the master said.
pub(super) struct Queued {
    job: Job,
    arrived: Instant,
    start_by: Option<Instant>,
    /// The master key that signed it, when not the pinned one: if the cluster key revokes it
    /// while the job waits, the job never starts.
    signer: Option<PublicIdentity>,
}

impl MinionCore {
    fn refuse(&mut self, kind: ErrorKind, message: String, request: Option<String>) {
        warn!(?kind, %message, "job refused");
        self.send(&Message::Error(ErrorMessage { kind, message, request }));
    }

    pub(super) fn on_job(&mut self, signed: SignedJob) {
        if self.hello_sent_at.is_some() {
            // The welcome answering our hello, with the master's time, has not been read: a job
            // read now may have waited unread (this minion stopped) past the time it was given to
            // start, and nothing tells it from a fresh one. The master sends every unfinished job
            // again right after that welcome, dated then.
            return debug!("a job before the master's welcome: left for the delivery that follows it");
        }
        let Some(master) = self.master_key else { return };
        let verdict = match &self.verified {
            Some(cache) => cache.verify(&signed, &master),
            None => signed.verify(&master),
        };
        let job: Job = match verdict {
            Ok(job) => job,
            // Named by the jid its body claims, so the master ends the slot at once, with why,
            // rather than waiting for the job's timeout.
            Err(error) => return self.refuse(ErrorKind::BadSignature, error.to_string(), signed.claimed_jid()),
        };
        if let Err(error) = halite_protocol::id::validate(&job.jid) {
            return self.refuse(ErrorKind::BadRequest, format!("bad jid: {error}"), Some(job.jid));
        }
        if self.running.contains(&job.jid) || self.queued.contains_key(&job.jid) {
            return debug!(jid = %job.jid, "duplicate delivery of an accepted job");
        }
        if let Some(ret) = self.outbox.get(&job.jid).or_else(|| self.unsent.get(&job.jid).cloned()) {
            return self.send(&Message::JobReturn(ret));
        }
        if self.outbox.started(&job.jid) {
            // Started before, not running now, no stored return: this minion restarted while it
            // ran. Running it again could do its side effects twice.
            warn!(jid = %job.jid, "job was interrupted by a restart; not running it again");
            let why = "the minion restarted while this job ran; it is not run twice".to_owned();
            return self.on_done(not_started(&job.jid, Outcome::Interrupted, why));
        }
        // A job accepted before its master was revoked keeps its course (above: running, its
        // return sent again, interrupted; a queued one never starts, see `start_queued`); a new
        // one it signed is refused.
        let signer = signed.signer_key();
        if signer.is_some_and(|k| self.revocations.contains(&k)) {
            let why = "signed by a master whose key the cluster key revoked".to_owned();
            return self.refuse(ErrorKind::BadSignature, why, Some(job.jid));
        }
        if let Some(why) = crate::freshness::expired(&job, self.master_time, self.now) {
            warn!(jid = %job.jid, "{why}");
            return self.on_done(not_started(&job.jid, Outcome::TimedOut, why));
        }
        let start_by_ms = signed.start_by_ms.filter(|_| job.timeout_ms > 0);
        let start_by = match crate::freshness::start_deadline(start_by_ms, self.master_time, self.now) {
            Ok(start_by) => start_by,
            Err(why) => {
                warn!(jid = %job.jid, "{why}");
                return self.on_done(not_started(&job.jid, Outcome::TimedOut, why.to_string()));
            }
        };
        self.send(&Message::JobAck(JobAck { jid: job.jid.clone(), accepted: true, reason: String::new() }));
        self.queued.insert(job.jid.clone(), Queued { job, arrived: self.now, start_by, signer });
        self.start_queued();
    }

    /// Starts queued jobs, lowest jid first, while slots are free. A job that waited past its
    /// timeout is not started (the master counts its timeout from delivery); one that starts
    /// gets only the time it has left, and its run-once marker is written (and synced) first.
    fn start_queued(&mut self) {
        while self.free_slots > 0 {
            let Some((jid, Queued { mut job, arrived, start_by, signer })) = self.queued.pop_first() else { return };
            // Nothing has run yet: a job whose master was revoked while it waited is denied, not
            // started on that master's word.
            if signer.is_some_and(|k| self.revocations.contains(&k)) {
                let why =
                    "not started: the master that signed it was revoked by the cluster key while it waited for a slot";
                warn!(%jid, "{why}");
                self.finish(not_started(&jid, Outcome::Denied, why.to_owned()));
                continue;
            }
            if let Some(late) = start_by.and_then(|by| self.now.checked_duration_since(by)) {
                let why = format!(
                    "not started: it waited for a free slot until {} ms past the time the master gave to start it \
                     (the master may already have recorded it timed out)",
                    late.as_millis()
                );
                warn!(%jid, "{why}");
                self.finish(not_started(&jid, Outcome::TimedOut, why));
                continue;
            }
            let waited = self.now.saturating_duration_since(arrived);
            let timeout = Duration::from_millis(job.timeout_ms);
            if job.timeout_ms > 0 && waited >= timeout {
                let why = format!(
                    "not started: it waited {} ms for a free slot, past its {} ms timeout",
                    waited.as_millis(),
                    job.timeout_ms
                );
                warn!(%jid, "{why}");
                self.finish(not_started(&jid, Outcome::TimedOut, why));
                continue;
            }
            match self.outbox.claim(&jid) {
                // The marker's sync took every return written before it along.
                Ok(Claim::New) => self.sync_at = self.sync_at.filter(|_| self.outbox.unsynced()),
                Ok(Claim::Seen) => {
                    let why = "the minion restarted while this job ran; it is not run twice".to_owned();
                    self.finish(not_started(&jid, Outcome::Interrupted, why));
                    continue;
                }
                Err(error) => {
                    let why = format!("not started: the run-once marker could not be written ({error})");
                    error!(%jid, "{why}");
                    self.finish(not_started(&jid, Outcome::Refused, why));
                    continue;
                }
            }
            if job.timeout_ms > 0 {
                job.timeout_ms = (timeout - waited).as_millis().max(1) as u64;
            }
            info!(%jid, function = %job.function, caller = %job.caller, "running job");
            self.running.insert(jid);
            if let Some(metrics) = &self.metrics {
                metrics.running(self.running.len());
            }
            self.free_slots -= 1;
            self.effects.push(Effect::Run(job));
        }
    }

    /// A job ended (ran, or never started): its return is outboxed (durably) first, then sent,
    /// and the queue moves.
    pub(super) fn on_done(&mut self, ret: JobReturn) {
        self.finish(ret);
        self.start_queued();
    }

    /// Keeps and sends a job's return, freeing its slot if it ran. Moves no queue: a queued
    /// job that ends unstarted is finished here from `start_queued`'s loop, never recursing
    /// once per job however many end that way.
    fn finish(&mut self, ret: JobReturn) {
        // Cut to what a message may carry before it is stored: a return that cannot be sealed
        // would never leave the outbox.
        let ret = crate::fit::fit(ret);
        if self.running.remove(&ret.jid) {
            self.free_slots += 1;
        }
        if let Some(metrics) = &self.metrics {
            metrics.running(self.running.len());
            metrics.finished(ret.outcome);
            metrics.return_kept();
        }
        info!(jid = %ret.jid, success = ret.success, outcome = ?ret.outcome, "job finished");
        // Returns kept in memory by an earlier failure are stored once the disk takes them.
        let stored: Vec<String> =
            self.unsent.values().filter(|kept| self.outbox.store(kept).is_ok()).map(|kept| kept.jid.clone()).collect();
        for jid in stored {
            self.unsent.remove(&jid);
        }
        if let Err(error) = self.outbox.store(&ret) {
            error!(jid = %ret.jid, %error, "could not write the return to the outbox; keeping it in memory until acknowledged");
            self.unsent.insert(ret.jid.clone(), ret.clone());
        }
        self.send(&Message::JobReturn(ret));
        // Synced once it is on its way (see `outbox`).
        if self.outbox.unsynced() && self.sync_at.is_none() {
            self.sync_at = Some(self.now + crate::outbox::RETURN_SYNC_DELAY);
        }
    }

    /// The master stored `jid`'s return: it leaves memory and the disk.
    pub(super) fn acknowledged(&mut self, jid: &str) {
        let in_memory = self.unsent.remove(jid).is_some();
        let on_disk = self.outbox.remove(jid).unwrap_or_else(|error| {
            warn!(%jid, %error, "could not delete an acknowledged return");
            false
        });
        if let (Some(metrics), true) = (&self.metrics, in_memory || on_disk) {
            metrics.return_acknowledged();
        }
    }
}

/// The return of a job that never started (interrupted before, timed out in the queue,
/// cancelled while queued, or refused).
pub(super) fn not_started(jid: &str, outcome: Outcome, why: String) -> JobReturn {
    JobReturn {
        jid: jid.to_owned(),
        minion: String::new(),
        success: false,
        retcode: 1,
        outputs: json!({ "error": why }),
        truncated: false,
        duration_ms: 0,
        outcome,
    }
}
