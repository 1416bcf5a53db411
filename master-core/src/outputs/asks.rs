//! What the step asks of the store, in the order asked.
//!
//! A handler that needs the store does not await it: it queues an [`Ask`] naming the call and
//! everything it goes on with, and returns. The loop alone awaits (`Master::answer_asks` in
//! `server/answers.rs`) and hands each answer to the handler's continuation before the next
//! input is handled, so nothing happens in between, exactly as if the handler had awaited. A
//! continuation may ask again; the loop answers until nothing is asked.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use halite_protocol::message::{MinionJobState, PrincipalAcl, Request, RolloutStatus};
use halite_protocol::noise::IdentifiedPeer;
use halite_transport::PeerId;

use crate::calls::admin::{AdminAsk, JobsAsk};
use crate::calls::deploy::DeploymentEnd;
use crate::calls::deploy::EndToRecord;
use crate::calls::deploy::{DeployAsk, DeploymentWrite, Requester};
use crate::calls::group::GroupAsk;
use crate::core::jobs::Slot;
use crate::local_sessions::LocalSender;
use crate::relay_requests::RelayDone;
use crate::store::{DeploymentRecord, JobRecord};
use crate::token_sessions::Opened;
use crate::token_sessions::TokenRefused;

/// One store call a handler waits on, with what its continuation needs.
pub enum Ask {
    /// A new job, stored before anything of it is sent (`Core::job_stored` goes on).
    InsertJob(Box<PreparedJob>),
    /// Whether a minion key not accepted here may be: enrolled with a token, pending, refused
    /// (`AdmissionDesk::key_decided` goes on).
    KeyDecision(Box<Admitting>),
    /// Why the enrollment token a pending minion presented did not enroll it
    /// (`AdmissionDesk::pending_explained` goes on).
    TokenProblem(Box<Admitting>),
    /// What a gateway token grants: the session opened for it, or why not
    /// (`Master::token_granted` goes on).
    TokenGrant(Box<TokenGrant>),
    /// Where a live rollout now is, stored before it is announced (`Master::rollout_stored`
    /// goes on).
    SetRollout(Box<RolloutChange>),
    /// Where a rollout another master changed now is, reread (`Master::rollout_reread` goes on).
    ReadRollout { jid: String },
    /// A client's request: it reads the store, so it is answered once the step's changes so
    /// far are written (`AdminDesk::answer_request`, or `deploy/`'s).
    Request(Box<ClientRequest>),
    /// An administrative request's store calls, decided and allowed (`AdminDesk::admin_answered`
    /// goes on).
    Admin(Box<AdminAsk>),
    /// A job listing, read with what the asker may see of each job (answered with it).
    ListJobs(Box<JobsAsk>),
    /// A request for configs or deployments' store calls, decided and allowed
    /// (`DeployDesk::deploy_answered` goes on).
    Deploy(Box<DeployAsk>),
    /// A pushed deployment's job, stored before the deployment that names it
    /// (`DeployDesk::deployment_job_stored` goes on).
    InsertDeploymentJob(Box<(PreparedJob, Requester, DeploymentWrite)>),
    /// A deployment group's store calls, for its work or a client's request
    /// (`GroupDesk::group_answered` goes on).
    Group(Box<GroupAsk>),
    /// Keys another master changed, reread: those of `ids`, or every key
    /// (`ClusterDesk::keys_reread` goes on).
    ReadKeys { ids: Option<Vec<String>> },
    /// Principals another master changed, reread; `name`'s sessions follow
    /// (`ClusterDesk::principals_reread` goes on).
    ReadPrincipals { name: String },
    /// Whether the tokens of these gateway sessions still grant anything
    /// (`ClusterDesk::tokens_rechecked` goes on).
    RecheckTokens { tokens: Vec<(PeerId, [u8; 32])> },
    /// A job this master does not hold, as stored, with the returns of its ended slots
    /// (`ClusterJobsDesk::job_loaded` goes on).
    LoadJob { jid: String },
    /// The returns of the slots another master ended (`ClusterJobsDesk::remote_slots_read` goes on).
    ReadReturns { jid: String, states: Vec<(String, MinionJobState)> },
    /// An event another master stored to share (`ClusterDesk::shared_event_read` goes on).
    ReadSharedEvent { id: i64, digest: String },
    /// What minions connected to another master announced there (`ClusterJobsDesk::minions_read` goes on).
    ReadMinions { ids: Vec<String> },
    /// The jobs live in the store, to compare with those held here (`ClusterJobsDesk::live_jobs_read`
    /// goes on).
    ReadLiveJobs,
    /// A job held here, reread as stored (`ClusterJobsDesk::job_reread` goes on).
    RereadJob { jid: String },
    /// The jobs published from `since_ms` (wall time) on that this master neither holds nor
    /// finished (`ClusterJobsDesk::missed_jobs_read` goes on).
    ReadMissedJobs { since_ms: u64 },
    /// The deployment a `deploy.apply` job's end is for, with what the end needs read
    /// (`DeployDesk::deployment_end_read` goes on).
    ReadDeploymentEnd(Box<DeploymentEnd>),
    /// A `deploy.apply` job's end to record again, reread from the store
    /// (`DeployDesk::deployment_end_reread` goes on).
    RereadDeploymentEnd(Box<EndToRecord>),
    /// A deployment finished by its job's end, stored unless another master finished it first
    /// (`DeployDesk::deployment_finished` goes on).
    FinishDeployment(Box<(DeploymentEnd, DeploymentRecord)>),
    /// The deployment a finished relay was for (`DeployDesk::relayed_read` goes on).
    ReadRelayed(Box<RelayDone>),
    /// A deployment whose signal was relayed, stored as no longer pending if it still was
    /// (`DeployDesk::relay_recorded` goes on).
    StoreRelayed(Box<(DeploymentRecord, RelayDone)>),
}

/// A request from a client in session, and who asks.
pub struct ClientRequest {
    pub peer: PeerId,
    pub principal: String,
    /// `None` for root.
    pub acl: Option<Arc<PrincipalAcl>>,
    pub request: Request,
}

/// A live rollout moving to a new state, and why.
#[derive(Debug)]
pub struct RolloutChange {
    pub jid: String,
    pub status: RolloutStatus,
    pub cause: RolloutCause,
}

/// What moved a rollout, which says what follows once the move is stored (or could not be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutCause {
    /// An `abort_on` event stopped it: its queued targets are skipped.
    Aborted,
    /// It decided to stop (too many failures): its queued targets are skipped; a failed write
    /// is decided again a second later.
    Decided,
    /// Its job was cancelled: the job's cancel goes on once the stop is stored.
    Cancelled,
}

/// A job about to be created.
pub struct NewJob {
    /// What was asked.
    pub spec: halite_protocol::message::JobSpec,
    /// What the job may reach through functions that call functions (see `authz::publish`).
    pub reach: Option<Vec<String>>,
    /// Ids the target named that no minion has (sorted): final at once, as `unknown`.
    pub unknown: Vec<String>,
}

/// A job created, signed and laid out, not stored yet: nothing of it is live or sent until its
/// row is (`Core::job_stored`).
#[derive(Debug)]
pub struct PreparedJob {
    pub record: JobRecord,
    /// Each slot as first stored, targets then unknown ids.
    pub states: Vec<(String, MinionJobState)>,
    pub slots: BTreeMap<String, Slot>,
    /// When a minion sent it must have answered by.
    pub run_deadline: Option<Instant>,
    pub targets: Vec<String>,
    /// Ids the target named that no minion has, told to the publisher.
    pub unknown: Vec<String>,
    /// The client that published it, if any, answered once it is stored.
    pub publisher: Option<JobPublisher>,
}

/// Who published a job and waits on its answer.
#[derive(Debug)]
pub struct JobPublisher {
    pub peer: PeerId,
    pub request_id: u64,
    /// Who follows the job's updates (the publisher, unless a minion published it).
    pub watchers: Vec<PeerId>,
    /// When its request arrived: the dispatch time is counted once the job is sent.
    pub received: Instant,
}

/// A minion's handshake, past the Noise identity stage, waiting on the key registry's verdict.
/// Its connection has no session meanwhile: the verdict gives it one, or closes it.
pub struct Admitting {
    pub peer: PeerId,
    pub identified: IdentifiedPeer,
    /// The minion id it claims, already valid.
    pub id: String,
}

/// A gateway session asked for with a token (`LocalCommand::Connect`).
pub struct TokenGrant {
    pub token_hash: [u8; 32],
    /// The HTTP client's address, for the audit trail.
    pub addr: Option<std::net::SocketAddr>,
    pub to_client: LocalSender,
    pub reply: crate::local_sessions::Reply<Result<Opened, TokenRefused>>,
}

/// The asks not answered yet, oldest first.
#[derive(Default)]
pub struct Asks {
    waiting: VecDeque<Ask>,
}

impl Asks {
    pub fn push(&mut self, ask: Ask) {
        self.waiting.push_back(ask);
    }

    /// The oldest ask, to answer now.
    pub fn take_oldest(&mut self) -> Option<Ask> {
        self.waiting.pop_front()
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_are_answered_in_the_order_asked() {
        let mut asks = Asks::default();
        assert!(asks.is_empty());
        let grant = |byte: u8| {
            let to_client: crate::local_sessions::LocalSender = Arc::new(crate::local_sessions::Discard);
            let reply = crate::local_sessions::Reply::new(drop);
            Ask::TokenGrant(Box::new(TokenGrant { token_hash: [byte; 32], addr: None, to_client, reply }))
        };
        asks.push(grant(1));
        asks.push(grant(2));
        let hashes: Vec<u8> = std::iter::from_fn(|| asks.take_oldest())
            .map(|ask| match ask {
                Ask::TokenGrant(grant) => grant.token_hash[0],
                _ => panic!("only token grants were asked"),
            })
            .collect();
        assert_eq!(hashes, [1, 2]);
        assert!(asks.is_empty());
    }
}
