//! Where the loop hands inputs to their handlers and answers what the handlers asked of the
//! store (`outputs/asks.rs`): the one place a handler's store call is awaited. Each answer goes to
//! the handler's synchronous continuation before anything else happens.
//!
//! What clients send once in session (over the network or in-process through the gateway) is
//! handed out here too: subscriptions, publishes, cancels and requests. A request is asked of
//! the loop, which answers it once the step's changes so far are written
//! (`AdminDesk::answer_request`, or `deploy/`'s, in parts when large).

use halite_protocol::message::ResponseBody;
use halite_transport::RouterEvent;

use crate::calls::admin::{AdminAsk, JobsAsk};
use crate::calls::deploy::DeployAsk;
use crate::calls::group::GroupAsk;
use crate::gateway::local::LocalCommand;
use crate::net::Net;
use crate::outputs::asks::{Ask, PreparedJob};
use crate::request_error::RequestError;
use crate::store::{Store, StoreError};
use crate::store_calls::reads;

use super::{Master, BATCH};

impl<S: Store, N: Net> Master<S, N> {
    /// Answers one gateway request.
    pub(super) async fn answer_local(&mut self, command: LocalCommand) {
        self.observe();
        self.core.on_local(command);
        self.answer_asks().await;
        self.core.tell_moves();
    }

    /// Answers what the handlers asked of the store, oldest first, handing each answer to its
    /// continuation before the next (which may ask again): the one place a handler's store call
    /// is awaited. Called right after each input's handler and each stage of the step, so nothing
    /// else happens in between.
    pub(crate) async fn answer_asks(&mut self) {
        while let Some(ask) = self.core.asks.take_oldest() {
            match ask {
                Ask::InsertJob(job) => {
                    // A failure is logged and told to the publisher by the continuation.
                    let _ = self.store_job(*job).await;
                    self.observe();
                }
                Ask::KeyDecision(admitting) => {
                    let who = admitting.identified.peer();
                    let (key, token) = (*who.identity.as_bytes(), admitting.identified.enrollment_token());
                    let at = (self.clock.wall_ms(), self.clock.now());
                    let decided = crate::store_calls::keys::decide(
                        &self.store,
                        &admitting.id,
                        &key,
                        token,
                        at,
                        &mut self.core.pending_limits,
                    )
                    .await;
                    self.observe();
                    self.core.with_admission_desk(|desk| desk.key_decided(*admitting, decided));
                }
                Ask::TokenProblem(admitting) => {
                    let token = admitting.identified.enrollment_token().unwrap_or_default();
                    let problem = crate::store_calls::keys::token_problem(
                        &self.store,
                        token,
                        &admitting.id,
                        self.clock.wall_ms(),
                    )
                    .await;
                    self.observe();
                    self.core.with_admission_desk(|desk| desk.pending_explained(*admitting, problem));
                }
                Ask::TokenGrant(grant) => {
                    let granted = self.store.api_token_grant(&grant.token_hash, self.clock.wall_ms()).await;
                    self.observe();
                    self.core.token_granted(*grant, granted);
                }
                Ask::SetRollout(change) => {
                    let stored = self.store.set_rollout(&change.jid, &change.status).await;
                    self.observe();
                    self.core.rollout_stored(*change, stored);
                }
                Ask::ReadKeys { ids } => {
                    let read = reads::accepted_keys(&self.store, crate::cluster::keys_to_read(ids.as_deref())).await;
                    self.observe();
                    self.core.with_cluster_desk(|desk| desk.keys_reread(ids, read));
                }
                Ask::ReadPrincipals { name } => {
                    let read = self.store.principals().await;
                    self.observe();
                    self.core.with_cluster_desk(|desk| desk.principals_reread(&name, read));
                }
                Ask::RecheckTokens { tokens } => {
                    let gone = reads::tokens_gone(&self.store, &tokens, self.clock.wall_ms()).await;
                    self.observe();
                    self.core.with_cluster_desk(|desk| desk.tokens_rechecked(gone));
                }
                Ask::LoadJob { jid } => {
                    // A revoked master's job is refused before anything more of it is read.
                    let revoked = |record: &crate::store::JobRecord| {
                        record.signed.signer_key().is_some_and(|key| self.core.config.revokes(&key))
                    };
                    let loaded = reads::job_with_returns(&self.store, &jid, revoked).await;
                    self.observe();
                    if matches!(loaded, Ok(Some(_))) {
                        // The job joins the table: its rollout hears only what is published after.
                        self.core.hear_events();
                    }
                    self.core.with_cluster_jobs(|desk| desk.job_loaded(&jid, loaded));
                }
                Ask::ReadReturns { jid, states } => {
                    let ended: Vec<String> =
                        states.iter().filter(|(_, s)| s.is_final()).map(|(m, _)| m.clone()).collect();
                    let returns = reads::returns_of(&self.store, &jid, &ended).await;
                    self.observe();
                    self.core.with_cluster_jobs(|desk| desk.remote_slots_read(&jid, states, returns));
                }
                Ask::ReadSharedEvent { id, digest } => {
                    let read = self.store.shared_event(id, &digest).await;
                    self.observe();
                    self.core.with_cluster_desk(|desk| desk.shared_event_read(read));
                }
                Ask::ReadMinions { ids } => {
                    let read = self.store.minions_named(&ids).await;
                    self.observe();
                    self.core.with_cluster_jobs(|desk| desk.minions_read(read));
                }
                Ask::ReadLiveJobs => {
                    let read = self.store.unfinished_jids().await;
                    self.observe();
                    self.core.with_cluster_jobs(|desk| desk.live_jobs_read(read));
                }
                Ask::RereadJob { jid } => {
                    let read = self.store.live_job(&jid).await;
                    self.observe();
                    if matches!(read, Ok(None)) {
                        // Purged: the job leaves the table, and its events are judged while it lives.
                        self.core.hear_events();
                    }
                    self.core.with_cluster_jobs(|desk| desk.job_reread(&jid, read));
                }
                Ask::ReadMissedJobs { since_ms } => {
                    let jobs = &self.core.jobs;
                    let missed = |jid: &str| jobs.get(jid).is_none() && !jobs.finished_lately(jid);
                    let max = crate::core::cluster_view::GAP_JOBS_MAX;
                    let read = reads::jobs_missed(&self.store, since_ms, max, missed).await;
                    self.observe();
                    self.core.with_cluster_jobs(|desk| desk.missed_jobs_read(read));
                }
                Ask::Request(asked) => {
                    // Requests read the store: they see every state change and audit record
                    // made before them.
                    self.core.audit.force();
                    self.flush().await;
                    let (from, body) = crate::admin::request_from(*asked);
                    if crate::deploy::is_group_request(&body) {
                        self.core.with_groups(|groups| groups.answer_group_request(from, body));
                    } else if crate::deploy::is_deploy_request(&body) {
                        self.core.with_deploy_desk(|desk| desk.answer_deploy_request(from, body));
                    } else {
                        self.core.with_admin_desk(|desk| desk.answer_request(from, body));
                    }
                }
                Ask::Admin(asked) => {
                    let AdminAsk { from, call, at_ms } = *asked;
                    let done = crate::store_calls::requests::run(&self.store, call, at_ms).await;
                    self.observe();
                    self.core.with_admin_desk(|desk| desk.admin_answered(from, done));
                }
                Ask::ListJobs(asked) => {
                    let JobsAsk { from, limit, filter } = *asked;
                    let (who, access, jobs) = (from.who(), self.core.access(), &self.core.jobs);
                    let shown = |listing: &mut crate::store::JobListing| {
                        crate::admin::listed(&access, jobs, who, &filter, listing)
                    };
                    let read = reads::jobs_shown(&self.store, limit, &filter, who.sees_all(), shown).await;
                    self.observe();
                    let answer = read.map(ResponseBody::Jobs).map_err(RequestError::from);
                    self.core.reply(from.peer, from.request_id, answer);
                }
                Ask::Deploy(asked) => {
                    let DeployAsk { from, call } = *asked;
                    let done = crate::store_calls::requests::run_deploy(&self.store, call, self.clock.wall_ms()).await;
                    self.observe();
                    self.core.with_deploy_desk(|desk| desk.deploy_answered(from, done));
                }
                Ask::InsertDeploymentJob(pushed) => {
                    let (job, from, write) = *pushed;
                    let stored = self.store_job(job).await;
                    self.observe();
                    self.core.with_deploy_desk(|desk| desk.deployment_job_stored(from, write, stored));
                }
                Ask::Group(asked) => {
                    let GroupAsk { id, call } = *asked;
                    let done =
                        crate::store_calls::requests::run_group(&self.store, &id, call, self.clock.wall_ms()).await;
                    self.observe();
                    if done.starts_listening() {
                        self.core.hear_events();
                    }
                    self.core.with_groups(|groups| groups.group_answered(id, done));
                }
                Ask::RereadDeploymentEnd(retry) => {
                    let read = self.store.job(&retry.jid).await;
                    self.observe();
                    self.core.with_deploy_desk(|desk| desk.deployment_end_reread(*retry, read));
                }
                Ask::ReadDeploymentEnd(end) => {
                    let (jid, id) = (&end.jid, end.id.as_deref());
                    let read =
                        reads::deployment_ending(&self.store, jid, id, end.signal.is_some(), end.short_wait_ms).await;
                    self.observe();
                    self.core.with_deploy_desk(|desk| desk.deployment_end_read(*end, read));
                }
                Ask::FinishDeployment(finishing) => {
                    let (end, record) = *finishing;
                    let stored = self.store.finish_deployment(&record, self.clock.wall_ms()).await;
                    self.observe();
                    self.core.with_deploy_desk(|desk| desk.deployment_finished(end, record, stored));
                }
                Ask::ReadRelayed(done) => {
                    let read = self.store.deployment(&done.request.deployment_id).await;
                    self.observe();
                    self.core.with_deploy_desk(|desk| desk.relayed_read(*done, read));
                }
                Ask::StoreRelayed(relayed) => {
                    let (record, done) = *relayed;
                    let stored = self.store.record_relayed(&record, self.clock.wall_ms()).await;
                    self.observe();
                    self.core.with_deploy_desk(|desk| desk.relay_recorded(record, done, stored));
                }
                Ask::ReadRollout { jid } => {
                    let stored = self.store.job(&jid).await.map(|job| job.and_then(|job| job.summary.rollout));
                    self.core.rollout_reread(&jid, stored);
                }
            }
        }
    }

    /// Stores a new job's row (counting the call), then hands it to the publishing desk: stored,
    /// it goes live (`PublishDesk::job_stored`); its jid, or why not.
    async fn store_job(&mut self, job: PreparedJob) -> Result<String, StoreError> {
        let started = self.clock.now();
        let stored = self.store.insert_job(&job.record, &job.states).await;
        self.observe();
        self.core.metrics.store_call("insert_job", self.clock.now().saturating_duration_since(started), stored.is_ok());
        if stored.is_ok() {
            // The job joins the table: its rollout hears only what is published after.
            self.core.hear_events();
        }
        self.core.with_publish_desk(|desk| desk.job_stored(job, stored))
    }

    /// Answers the gateway's requests already waiting, a batch at most.
    pub(super) async fn answer_waiting_locals(&mut self) {
        for _ in 0..BATCH {
            let Some(command) = self.local_rx.as_mut().and_then(|rx| rx.try_recv().ok()) else { return };
            self.answer_local(command).await;
        }
    }

    /// Handles up to `limit` network events that are already waiting; how many it handled.
    pub(crate) async fn drain_net(&mut self, limit: usize) -> usize {
        for handled in 0..limit {
            let Some(event) = self.net.try_recv() else { return handled };
            self.on_router_event(event).await;
        }
        limit
    }

    /// Handles one network event, then tells the slot moves it made (`Master::tell_moves`):
    /// the bus and the watchers hear of each input's moves before the next input.
    pub(crate) async fn on_router_event(&mut self, event: RouterEvent) {
        self.observe();
        self.core.on_network(event);
        self.answer_asks().await;
        self.core.tell_moves();
    }
}
