//! A stored job goes live: it joins the table, is sent to its targets online here, and its
//! publisher is answered before any update of it. One that could not be stored was sent to
//! nobody, and its publisher is told so: it must never wait for a reply.

use std::time::Duration;

use halite_protocol::message::{ErrorKind, Message, MinionJobState, Published};
use serde_json::json;
use tracing::{info, warn};

use crate::core::hearing::SlotChange;
use crate::core::jobs::LiveJob;
use crate::outputs::asks::{JobPublisher, PreparedJob};
use crate::store::{ClusterChange, StoreError};

use super::Core;

impl Core {
    /// A new job's row, written (or not); its jid, or why it was not stored.
    pub fn job_stored(&mut self, job: PreparedJob, stored: Result<(), StoreError>) -> Result<String, StoreError> {
        let PreparedJob { record, states, slots, run_deadline, targets, unknown, publisher } = job;
        let jid = record.jid.clone();
        if let Err(error) = stored {
            warn!(%jid, %error, "storing a new job failed");
            if let Some(publisher) = &publisher {
                let why = if error.is_indeterminate() {
                    // The statement was on its way when the database stopped answering: it may
                    // still commit, and the job then runs (found by the masters' sweep).
                    format!(
                        "the database stopped answering while job {jid} was being stored: it may still be \
                         stored and run once the database answers; look with `halite jobs show {jid}` before \
                         publishing it again"
                    )
                } else {
                    format!("the job could not be stored ({}); nothing was sent", error.class())
                };
                self.send_error(publisher.peer, ErrorKind::Internal, why, Some(publisher.request_id.to_string()));
            }
            return Err(error);
        }
        // The job joins the table: its rollout hears only what is published after.
        self.hear_events();
        let rolled_out = record.rollout.is_some();
        let caller = record.caller.clone();
        info!(%jid, function = %record.function, minions = targets.len(), %caller, "job published");
        self.metrics.get().jobs_published.inc();
        let new_event =
            json!({ "function": record.function, "target": record.target, "caller": caller, "minions": targets });
        let grace = Duration::from_secs(self.config.timeout_grace_secs);
        let job_message =
            crate::core::jobs::job_message(&record.signed, run_deadline, grace, self.now.at, self.now.wall_ms);
        let (watchers, answer) = match publisher {
            Some(JobPublisher { peer, request_id, watchers, received }) => {
                let published = Published { request_id, jid: jid.clone(), minions: targets, unknown };
                (watchers, Some((peer, published, received)))
            }
            None => (Vec::new(), None),
        };
        self.jobs.insert(LiveJob::new(record, slots, watchers));
        self.tell_masters(ClusterChange::Job { jid: jid.clone() });
        // Announced once live, so the bus can tell who may see it.
        self.emit(format!("halite/job/{jid}/new"), new_event);
        for (id, state) in states {
            if let (MinionJobState::Sent, Some(peer)) = (state, self.sessions.peer_of(&id)) {
                self.send_job(peer, &id, &jid, &job_message);
            }
            // Told to the job's watchers; offline or unknown at publish, its final state on the
            // bus here as on every master.
            self.hearing.slot_changed(SlotChange { jid: jid.clone(), minion: id, state, ret: None });
        }
        if rolled_out {
            self.rollout_queue.due(&jid);
        }
        // Over at once when no target is live.
        self.hearing.job_may_end(&jid);
        // Then the publisher's answer, still before any update of the job (those leave when
        // the step ends), and after the jobs: they are on their way before it is.
        if let Some((peer, published, received)) = answer {
            self.send(peer, &Message::Published(published));
            let took = self.now.at.saturating_duration_since(received);
            self.metrics.get().dispatch_seconds.observe(took.as_secs_f64());
        }
        Ok(jid)
    }
}
