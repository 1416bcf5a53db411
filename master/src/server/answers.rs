//! Where the driver makes the store calls the core asks for (`outputs/asks.rs`) and hands each
//! answer back (`Core::answered`, `machine/answered.rs` in the core) before anything else happens: the one
//! place a handler's store call is awaited. It names no handler. The gateway's commands are
//! handed to the core here too, each followed by its asks' answers.

use crate::calls::admin::{AdminAsk, JobsAsk};
use crate::calls::deploy::DeployAsk;
use crate::calls::group::GroupAsk;
use crate::gateway::local::LocalCommand;
use crate::net::Net;
use crate::outputs::asks::{Ask, PreparedJob};
use crate::store::{Store, StoreError};
use crate::store_calls::reads;

use super::{Answer, Master, BATCH};

impl<S: Store, N: Net> Master<S, N> {
    /// Answers one gateway request.
    pub(super) async fn answer_local(&mut self, command: LocalCommand) {
        self.observe();
        self.core.on_local(command);
        self.answer_asks().await;
        self.core.tell_moves();
    }

    /// Answers what the handlers asked of the store, oldest first: makes each call and hands
    /// its answer back to the core before the next (which the answer may have asked for): the
    /// one place a handler's store call is awaited. Called right after each input's handler and
    /// each stage of the step, so nothing else happens in between.
    pub(crate) async fn answer_asks(&mut self) {
        while let Some(ask) = self.core.take_ask() {
            let answer = self.call(ask).await;
            self.observe();
            self.core.answered(answer);
        }
    }

    /// Makes the store call `ask` names; its answer, with what the ask goes on with.
    async fn call(&mut self, ask: Ask) -> Answer {
        let store = &self.store;
        let wall_ms = self.clock.wall_ms();
        match ask {
            Ask::InsertJob(job) => {
                let stored = self.insert_job(&job).await;
                Answer::JobInserted { job, stored }
            }
            Ask::KeyDecision(admitting) => {
                let who = admitting.identified.peer();
                let (key, token) = (*who.identity.as_bytes(), admitting.identified.enrollment_token());
                let at = (wall_ms, self.clock.now());
                let limits = self.core.pending_limits();
                let decided = crate::store_calls::keys::decide(store, &admitting.id, &key, token, at, limits).await;
                Answer::KeyDecided { admitting, decided }
            }
            Ask::TokenProblem(admitting) => {
                let token = admitting.identified.enrollment_token().unwrap_or_default();
                let problem = crate::store_calls::keys::token_problem(store, token, &admitting.id, wall_ms).await;
                Answer::TokenProblem { admitting, problem }
            }
            Ask::TokenGrant(grant) => {
                let granted = store.api_token_grant(&grant.token_hash, wall_ms).await;
                Answer::TokenGranted { grant, granted }
            }
            Ask::SetRollout(change) => {
                let stored = store.set_rollout(&change.jid, &change.status).await;
                Answer::RolloutSet { change, stored }
            }
            Ask::ReadRollout { jid } => {
                let stored = store.job(&jid).await.map(|job| job.and_then(|job| job.summary.rollout));
                Answer::RolloutReread { jid, stored }
            }
            Ask::Request(asked) => {
                // Requests read the store: they see every state change and audit record made
                // before them.
                self.core.audit_now();
                self.flush().await;
                Answer::RequestReady(asked)
            }
            Ask::Admin(asked) => {
                let AdminAsk { from, call, at_ms } = *asked;
                let done = crate::store_calls::requests::run(store, call, at_ms).await;
                Answer::AdminDone { from, done }
            }
            Ask::ListJobs(asked) => {
                let JobsAsk { from, limit, filter } = *asked;
                let core = &self.core;
                let shown = |listing: &mut crate::store::JobListing| core.listed(&from, &filter, listing);
                let read = reads::jobs_shown(store, limit, &filter, from.who().sees_all(), shown).await;
                Answer::JobsListed { from, read }
            }
            Ask::Deploy(asked) => {
                let DeployAsk { from, call } = *asked;
                let done = crate::store_calls::requests::run_deploy(store, call, wall_ms).await;
                Answer::DeployDone { from, done }
            }
            Ask::InsertDeploymentJob(pushed) => {
                let (job, from, write) = *pushed;
                let stored = self.insert_job(&job).await;
                Answer::DeploymentJobInserted { job: Box::new(job), from, write: Box::new(write), stored }
            }
            Ask::Group(asked) => {
                let GroupAsk { id, call } = *asked;
                let done = crate::store_calls::requests::run_group(store, &id, call, wall_ms).await;
                Answer::GroupDone { id, done }
            }
            Ask::ReadKeys { ids } => {
                let read = reads::accepted_keys(store, crate::cluster::keys_to_read(ids.as_deref())).await;
                Answer::KeysRead { ids, read }
            }
            Ask::ReadPrincipals { name } => Answer::PrincipalsRead { name, read: store.principals().await },
            Ask::RecheckTokens { tokens } => Answer::TokensRechecked(reads::tokens_gone(store, &tokens, wall_ms).await),
            Ask::LoadJob { jid } => {
                // A revoked master's job is refused before anything more of it is read.
                let core = &self.core;
                let loaded = reads::job_with_returns(store, &jid, |record| core.revoked_signer(record)).await;
                Answer::JobLoaded { jid, loaded }
            }
            Ask::ReadReturns { jid, states } => {
                let ended: Vec<String> = states.iter().filter(|(_, s)| s.is_final()).map(|(m, _)| m.clone()).collect();
                let returns = reads::returns_of(store, &jid, &ended).await;
                Answer::ReturnsRead { jid, states, returns }
            }
            Ask::ReadSharedEvent { id, digest } => Answer::SharedEventRead(store.shared_event(id, &digest).await),
            Ask::ReadMinions { ids } => Answer::MinionsRead(store.minions_named(&ids).await),
            Ask::ReadLiveJobs => Answer::LiveJobsRead(store.unfinished_jids().await),
            Ask::RereadJob { jid } => {
                let read = store.live_job(&jid).await;
                Answer::JobReread { jid, read }
            }
            Ask::ReadMissedJobs { since_ms } => {
                let core = &self.core;
                let max = crate::core::cluster_view::GAP_JOBS_MAX;
                Answer::MissedJobsRead(reads::jobs_missed(store, since_ms, max, |jid| core.missed(jid)).await)
            }
            Ask::ReadDeploymentEnd(end) => {
                let (jid, id) = (&end.jid, end.id.as_deref());
                let read = reads::deployment_ending(store, jid, id, end.signal.is_some(), end.short_wait_ms).await;
                Answer::DeploymentEndRead { end, read }
            }
            Ask::RereadDeploymentEnd(retry) => {
                let read = store.job(&retry.jid).await;
                Answer::DeploymentEndReread { retry, read }
            }
            Ask::FinishDeployment(finishing) => {
                let (end, record) = *finishing;
                let stored = store.finish_deployment(&record, wall_ms).await;
                Answer::DeploymentFinished { end: Box::new(end), record: Box::new(record), stored }
            }
            Ask::ReadRelayed(done) => {
                let read = store.deployment(&done.request.deployment_id).await;
                Answer::RelayedRead { done, read }
            }
            Ask::StoreRelayed(relayed) => {
                let (record, done) = *relayed;
                let stored = store.record_relayed(&record, wall_ms).await;
                Answer::RelayRecorded { record: Box::new(record), done: Box::new(done), stored }
            }
        }
    }

    /// Stores a new job's row, counting the call.
    async fn insert_job(&mut self, job: &PreparedJob) -> Result<(), StoreError> {
        let started = self.clock.now();
        let stored = self.store.insert_job(&job.record, &job.states).await;
        self.count_call("insert_job", started, stored.is_ok());
        stored
    }

    /// Answers the gateway's requests already waiting, a batch at most.
    pub(super) async fn answer_waiting_locals(&mut self) {
        for _ in 0..BATCH {
            let Some(command) = self.local_rx.as_mut().and_then(|rx| rx.try_recv().ok()) else { return };
            self.answer_local(command).await;
        }
    }
}
