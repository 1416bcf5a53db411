//! What the store answered to each ask, with what the ask goes on with ([`Answer`]): the driver
//! makes the call an [`Ask`](crate::outputs::asks::Ask) names and hands this back
//! ([`Core::answered`]), which gives it to the continuation of the handler that asked, before
//! anything else happens. The driver names no handler. What joins or leaves the job table is
//! heard first, so a rollout hears only what is published after its job is here.

use std::collections::HashMap;

use halite_protocol::message::{JobDetail, JobReturn, JobSummary, MinionJobState, ResponseBody, RolloutStatus, Value};
use halite_transport::PeerId;

use crate::calls::admin::{AdminDone, RequestFrom};
use crate::calls::deploy::{DeployDone, DeploymentEnd, DeploymentWrite, EndToRecord, Requester};
use crate::calls::group::GroupDone;
use crate::cluster_jobs::StoredJob;
use crate::core::registry::AcceptedKeys;
use crate::deploy::ending::DeploymentEnding;
use crate::keys::Decision;
use crate::outputs::asks::{Admitting, ClientRequest, PreparedJob, RolloutChange, TokenGrant};
use crate::relay_requests::RelayDone;
use crate::request_error::RequestError;
use crate::store::{ApiTokenGrant, DeploymentRecord, MinionRecord, PrincipalRecord, StoreError, UnfinishedJob};

use super::Core;

/// One ask, answered (variants in the order of [`Ask`](crate::outputs::asks::Ask)'s).
pub enum Answer {
    JobInserted {
        job: Box<PreparedJob>,
        stored: Result<(), StoreError>,
    },
    KeyDecided {
        admitting: Box<Admitting>,
        decided: Result<Decision, StoreError>,
    },
    TokenProblem {
        admitting: Box<Admitting>,
        problem: Result<Option<String>, StoreError>,
    },
    TokenGranted {
        grant: Box<TokenGrant>,
        granted: Result<Option<ApiTokenGrant>, StoreError>,
    },
    RolloutSet {
        change: Box<RolloutChange>,
        stored: Result<(), StoreError>,
    },
    RolloutReread {
        jid: String,
        stored: Result<Option<RolloutStatus>, StoreError>,
    },
    /// A client's request, once the step's writes so far are stored.
    RequestReady(Box<ClientRequest>),
    AdminDone {
        from: RequestFrom,
        done: AdminDone,
    },
    JobsListed {
        from: RequestFrom,
        read: Result<Vec<JobSummary>, StoreError>,
    },
    DeployDone {
        from: Requester,
        done: DeployDone,
    },
    DeploymentJobInserted {
        job: Box<PreparedJob>,
        from: Requester,
        write: Box<DeploymentWrite>,
        stored: Result<(), StoreError>,
    },
    GroupDone {
        id: String,
        done: GroupDone,
    },
    KeysRead {
        ids: Option<Vec<String>>,
        read: Result<AcceptedKeys, StoreError>,
    },
    PrincipalsRead {
        name: String,
        read: Result<Vec<PrincipalRecord>, StoreError>,
    },
    TokensRechecked(Result<Vec<PeerId>, StoreError>),
    JobLoaded {
        jid: String,
        loaded: Result<Option<StoredJob>, StoreError>,
    },
    ReturnsRead {
        jid: String,
        states: Vec<(String, MinionJobState)>,
        returns: Result<HashMap<String, JobReturn>, StoreError>,
    },
    SharedEventRead(Result<Option<(String, Value)>, StoreError>),
    MinionsRead(Result<Vec<MinionRecord>, StoreError>),
    LiveJobsRead(Result<Vec<String>, StoreError>),
    JobReread {
        jid: String,
        read: Result<Option<UnfinishedJob>, StoreError>,
    },
    MissedJobsRead(Result<(Vec<String>, bool), StoreError>),
    DeploymentEndRead {
        end: Box<DeploymentEnd>,
        read: Result<Option<DeploymentEnding>, StoreError>,
    },
    DeploymentEndReread {
        retry: Box<EndToRecord>,
        read: Result<Option<JobDetail>, StoreError>,
    },
    DeploymentFinished {
        end: Box<DeploymentEnd>,
        record: Box<DeploymentRecord>,
        stored: Result<bool, StoreError>,
    },
    RelayedRead {
        done: Box<RelayDone>,
        read: Result<Option<DeploymentRecord>, StoreError>,
    },
    RelayRecorded {
        record: Box<DeploymentRecord>,
        done: Box<RelayDone>,
        stored: Result<bool, StoreError>,
    },
}

impl Core {
    /// Hands `answer` to the handler that asked for it.
    pub fn answered(&mut self, answer: Answer) {
        match answer {
            Answer::JobInserted { job, stored } => {
                // A failure is logged and told to the publisher by the continuation.
                let _ = self.job_stored(*job, stored);
            }
            Answer::KeyDecided { admitting, decided } => {
                self.with_admission_desk(|desk| desk.key_decided(*admitting, decided))
            }
            Answer::TokenProblem { admitting, problem } => {
                self.with_admission_desk(|desk| desk.pending_explained(*admitting, problem))
            }
            Answer::TokenGranted { grant, granted } => self.token_granted(*grant, granted),
            Answer::RolloutSet { change, stored } => self.rollout_stored(*change, stored),
            Answer::RolloutReread { jid, stored } => self.rollout_reread(&jid, stored),
            Answer::RequestReady(asked) => {
                let (from, body) = crate::admin::request_from(*asked);
                if crate::deploy::is_group_request(&body) {
                    self.with_groups(|groups| groups.answer_group_request(from, body));
                } else if crate::deploy::is_deploy_request(&body) {
                    self.with_deploy_desk(|desk| desk.answer_deploy_request(from, body));
                } else {
                    self.with_admin_desk(|desk| desk.answer_request(from, body));
                }
            }
            Answer::AdminDone { from, done } => self.with_admin_desk(|desk| desk.admin_answered(from, done)),
            Answer::JobsListed { from, read } => {
                let answer = read.map(ResponseBody::Jobs).map_err(RequestError::from);
                self.reply(from.peer, from.request_id, answer);
            }
            Answer::DeployDone { from, done } => self.with_deploy_desk(|desk| desk.deploy_answered(from, done)),
            Answer::DeploymentJobInserted { job, from, write, stored } => {
                let stored = self.job_stored(*job, stored);
                self.with_deploy_desk(|desk| desk.deployment_job_stored(from, *write, stored));
            }
            Answer::GroupDone { id, done } => {
                if done.starts_listening() {
                    self.hear_events();
                }
                self.with_groups(|groups| groups.group_answered(id, done));
            }
            Answer::KeysRead { ids, read } => self.with_cluster_desk(|desk| desk.keys_reread(ids, read)),
            Answer::PrincipalsRead { name, read } => self.with_cluster_desk(|desk| desk.principals_reread(&name, read)),
            Answer::TokensRechecked(gone) => self.with_cluster_desk(|desk| desk.tokens_rechecked(gone)),
            Answer::JobLoaded { jid, loaded } => {
                if matches!(loaded, Ok(Some(_))) {
                    // The job joins the table: its rollout hears only what is published after.
                    self.hear_events();
                }
                self.with_cluster_jobs(|desk| desk.job_loaded(&jid, loaded));
            }
            Answer::ReturnsRead { jid, states, returns } => {
                self.with_cluster_jobs(|desk| desk.remote_slots_read(&jid, states, returns))
            }
            Answer::SharedEventRead(read) => self.with_cluster_desk(|desk| desk.shared_event_read(read)),
            Answer::MinionsRead(read) => self.with_cluster_jobs(|desk| desk.minions_read(read)),
            Answer::LiveJobsRead(read) => self.with_cluster_jobs(|desk| desk.live_jobs_read(read)),
            Answer::JobReread { jid, read } => {
                if matches!(read, Ok(None)) {
                    // Purged: the job leaves the table, and its events are judged while it lives.
                    self.hear_events();
                }
                self.with_cluster_jobs(|desk| desk.job_reread(&jid, read));
            }
            Answer::MissedJobsRead(read) => self.with_cluster_jobs(|desk| desk.missed_jobs_read(read)),
            Answer::DeploymentEndRead { end, read } => {
                self.with_deploy_desk(|desk| desk.deployment_end_read(*end, read))
            }
            Answer::DeploymentEndReread { retry, read } => {
                self.with_deploy_desk(|desk| desk.deployment_end_reread(*retry, read))
            }
            Answer::DeploymentFinished { end, record, stored } => {
                self.with_deploy_desk(|desk| desk.deployment_finished(*end, *record, stored))
            }
            Answer::RelayedRead { done, read } => self.with_deploy_desk(|desk| desk.relayed_read(*done, read)),
            Answer::RelayRecorded { record, done, stored } => {
                self.with_deploy_desk(|desk| desk.relay_recorded(*record, *done, stored))
            }
        }
    }

    /// Whether a job the store holds was published by a master revoked since: it is refused
    /// before anything more of it is read.
    pub fn revoked_signer(&self, record: &crate::store::JobRecord) -> bool {
        record.signed.signer_key().is_some_and(|key| self.config.revokes(&key))
    }

    /// Whether a job published meanwhile is one this master neither holds nor finished.
    pub fn missed(&self, jid: &str) -> bool {
        self.jobs.get(jid).is_none() && !self.jobs.finished_lately(jid)
    }

    /// Whether a job listing's row is shown to its asker (and what of it).
    pub fn listed(
        &self,
        from: &crate::calls::admin::RequestFrom,
        filter: &halite_protocol::message::JobFilter,
        listing: &mut crate::store::JobListing,
    ) -> bool {
        crate::admin::listed(&self.access(), &self.jobs, from.who(), filter, listing)
    }
}
