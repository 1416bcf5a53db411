//! Administrative requests from clients: principals, keys, tokens, minions, jobs.
//!
//! A request is decided here without the store: who may make it, whether its input is valid
//! (`validate.rs`), what it changes in memory at once. What it then needs of the store is
//! asked (`calls.rs`); the loop makes the calls (`store_calls/requests.rs`), and
//! [`AdminDesk::admin_answered`] brings memory in line with what was stored and answers the
//! client. Deployments' requests are `deploy/`'s.
//!
//! Nothing here acts on the master: the loop lends an [`AdminDesk`] (the registry, the live
//! jobs' watchers and rollouts, what the next commit writes, the engine events' rates; the
//! sessions, the other masters' view and the config, read-only) and carries out the [`Effect`]s
//! it returns: answers, store calls, events, announcements, sessions ended
//! (`Core::with_admin_desk`).

pub mod validate;

use halite_protocol::hex;
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{
    AuditFilter, ErrorKind, JobFilter, KeyInfo, KeyState, MinionInfo, PrincipalAcl, PrincipalInfo, RequestBody,
    ResponseBody, RolloutState, TokenInfo, MINION_LIST_PAGE_MAX,
};
use rand_core::RngCore;
use tracing::{info, warn};

use crate::authz::{Access, Action, Asker, Granted, JobAccess, RequestKind, Who};
use crate::calls::admin::{
    AdminAsk, AdminCall, AdminDone, Checked, JobRead, JobReadDone, JobsAsk, NewToken, RequestFrom, Secret,
};
use crate::clock::Now;
use crate::config::MasterConfig;
use crate::core::cluster_view::ClusterView;
use crate::core::event_gate::EventGate;
use crate::core::jobs::JobTable;
use crate::core::registry::Registry;
use crate::core::rollout_queue::RolloutQueue;
use crate::core::sessions::Sessions;
use crate::core::writes::PendingWrites;
use crate::outputs::asks::{Ask, ClientRequest};
use crate::outputs::effects::{Effect, Effects};
use crate::request_error::{Reply, RequestError};
use crate::rollouts::Rollouts;
use crate::store::{ClusterChange, JobListing, KeyRecord};
use crate::target::glob;

/// Most jobs one listing returns.
const MAX_JOB_LIST: u32 = 1000;

/// Most audit records one listing returns.
const MAX_AUDIT_LIST: u32 = 1000;

/// An audit listing's filter narrowed to what the decision grants: a tenant's principal reads
/// only its tenant's records, another principal only its own (a filter asking for others'
/// then finds nothing, as if there were none).
fn audit_filter_for(filter: AuditFilter, granted: Granted) -> AuditFilter {
    let Granted::AuditOf { tenant, principal } = granted else { return filter };
    let narrowed = |asked: Option<String>, only: Option<String>| match (asked, only) {
        (_, None) => Ok(None),
        (None, Some(only)) => Ok(Some(only)),
        (Some(asked), Some(only)) if asked == only => Ok(Some(only)),
        (Some(_), Some(_)) => Err(()),
    };
    match (narrowed(filter.tenant.clone(), tenant), narrowed(filter.principal.clone(), principal)) {
        (Ok(tenant), Ok(principal)) => {
            AuditFilter { tenant: tenant.or(filter.tenant), principal: principal.or(filter.principal), ..filter }
        }
        // Another tenant's or principal's: a filter nothing matches.
        _ => AuditFilter { action: Some(String::new()), ..filter },
    }
}

/// What a request decided without the store leads to.
enum Decided {
    /// Its answer.
    Answer(Box<ResponseBody>),
    /// The store calls it needs.
    Call(AdminCall),
    /// A job listing (read with the master's view of who sees which job).
    ListJobs { limit: u32, filter: JobFilter },
}

/// What administrative requests are decided with: what they change, and what they read.
pub struct AdminDesk<'a> {
    pub config: &'a MasterConfig,
    pub registry: &'a mut Registry,
    pub jobs: &'a mut JobTable,
    pub rollout_queue: &'a mut RolloutQueue,
    pub pending: &'a mut PendingWrites,
    pub event_gate: &'a mut EventGate,
    pub sessions: &'a Sessions,
    pub cluster: &'a ClusterView,
    /// The time, read when a decision needs it.
    pub now: Now,
    /// The last record of this master's audit chain it appended (0: none yet).
    pub audit_head: u64,
    pub out: Effects,
}

/// A client's request, as the loop hands it over.
pub fn request_from(asked: ClientRequest) -> (RequestFrom, RequestBody) {
    let ClientRequest { peer, principal, acl, request } = asked;
    (RequestFrom { peer, request_id: request.request_id, principal, acl }, request.body)
}

impl AdminDesk<'_> {
    fn access(&self) -> Access<'_> {
        Access::of(self.config, self.registry, self.jobs)
    }

    fn rollouts(&mut self) -> Rollouts<'_> {
        Rollouts::new(self.jobs, self.rollout_queue, self.now.at)
    }

    /// Answers an administrative request (or says why not), or asks the store what it needs:
    /// the answer then comes from [`AdminDesk::admin_answered`].
    pub fn answer_request(&mut self, from: RequestFrom, body: RequestBody) {
        match self.decide_request(&from, body) {
            Ok(Decided::Answer(body)) => self.out.reply(from.peer, from.request_id, Ok(*body)),
            Ok(Decided::Call(call)) => {
                self.out.ask(Ask::Admin(Box::new(AdminAsk { from, call, at_ms: self.now.wall_ms })))
            }
            Ok(Decided::ListJobs { limit, filter }) => {
                self.out.ask(Ask::ListJobs(Box::new(JobsAsk { from, limit, filter })));
            }
            Err(error) => self.out.reply(from.peer, from.request_id, Err(error)),
        }
    }

    /// Who may make the request and whether it is valid; its answer, or what it needs of the
    /// store.
    fn decide_request(&mut self, from: &RequestFrom, body: RequestBody) -> Result<Decided, RequestError> {
        let (principal, acl) = (from.principal.as_str(), from.acl.as_deref());
        let who = from.who();
        let asker = Asker::client(principal, acl);
        match RequestKind::of(&body) {
            RequestKind::Administer => drop(self.access().decide(&asker, &Action::Administer)?),
            RequestKind::List => drop(self.access().decide(&asker, &Action::List)?),
            RequestKind::FireEvent => drop(self.access().decide(&asker, &Action::FireEvent)?),
            // Decided with the token's id (its minion, whether it replaces a key).
            RequestKind::Enroll => {}
            // Decided once the job is loaded.
            RequestKind::SeeJob | RequestKind::ControlJob => {}
            // The deployments' handler decides them.
            RequestKind::Configs | RequestKind::Deployment => {}
            // Narrowed to what the asker may read, below.
            RequestKind::ReadAudit => {}
        }
        if let RequestBody::KeyList { pattern }
        | RequestBody::KeyAccept { pattern }
        | RequestBody::KeyReject { pattern }
        | RequestBody::KeyDelete { pattern }
        | RequestBody::MinionList { pattern, .. } = &body
        {
            // Ids are at most 128 bytes: a glob past 255 matches nothing, and would only cost time
            // for every id it is tried on.
            if pattern.len() > crate::authz::MAX_PATTERN_LEN {
                let why = format!("id pattern longer than {} bytes", crate::authz::MAX_PATTERN_LEN);
                return Err(RequestError::bad_request(why));
            }
        }
        let owner = || self.access().owned_by(who).map(str::to_owned);
        let call = match body {
            RequestBody::PrincipalAdd { name, public_key, acl } => {
                let tenants: Vec<&str> = self.registry.tenants().collect();
                let (record, _) = validate::new_principal(name, &public_key, acl, &self.config.nodegroups, &tenants)?;
                AdminCall::PutPrincipal(record)
            }
            RequestBody::PrincipalList => {
                let principals = self.registry.principals().map(|p| PrincipalInfo {
                    name: p.name.clone(),
                    fingerprint: fingerprint(&p.public_key),
                    acl: p.acl.clone(),
                });
                return Ok(Decided::Answer(Box::new(ResponseBody::Principals(principals.collect()))));
            }
            RequestBody::PrincipalRemove { name } => AdminCall::RemovePrincipal { name },
            RequestBody::OwnerTransfer { from, to } => {
                if to != "root" && self.registry.principal(&to).is_none() {
                    return Err(RequestError::not_found(format!("no principal {to} to hand {from}'s objects to")));
                }
                AdminCall::TransferOwner { from, to }
            }
            RequestBody::KeyList { pattern } => AdminCall::ListKeys { pattern },
            RequestBody::KeyAccept { pattern } => {
                let from = vec![KeyState::Pending, KeyState::Rejected];
                AdminCall::ChangeKeys { pattern, from, to: Some(KeyState::Accepted) }
            }
            RequestBody::KeyReject { pattern } => {
                let from = vec![KeyState::Pending, KeyState::Accepted];
                AdminCall::ChangeKeys { pattern, from, to: Some(KeyState::Rejected) }
            }
            RequestBody::KeyDelete { pattern } => {
                let from = vec![KeyState::Pending, KeyState::Accepted, KeyState::Rejected, KeyState::Denied];
                AdminCall::ChangeKeys { pattern, from, to: None }
            }
            RequestBody::KeyPreseed { id, public_key } => {
                let key = validate::minion_key(&id, &public_key)?;
                AdminCall::PreseedKey(KeyRecord { id, public_key: *key.as_bytes(), state: KeyState::Accepted })
            }
            RequestBody::TokenCreate { minion, ttl_ms, replace } => {
                halite_protocol::id::validate(&minion).map_err(|e| RequestError::bad_request(e.to_string()))?;
                let enroll = Action::Enroll { minion: Some(&minion), replace };
                self.access().decide(&asker, &enroll)?;
                if ttl_ms == 0 {
                    return Err(RequestError::bad_request("token ttl must be positive"));
                }
                let expires_at_ms = self.now.wall_ms.saturating_add(ttl_ms);
                let owner = principal.to_owned();
                let token = Secret(new_secret());
                AdminCall::CreateToken(NewToken { token, minion, expires_at_ms, replace, owner })
            }
            RequestBody::MinionList { pattern, after, limit } => {
                let minions = self.list_minions(acl, &pattern, after.as_deref(), limit);
                return Ok(Decided::Answer(Box::new(ResponseBody::Minions(minions))));
            }
            RequestBody::JobList { limit, filter } => {
                return Ok(Decided::ListJobs { limit: limit.min(MAX_JOB_LIST), filter });
            }
            RequestBody::JobPause { jid } => self.pause_or_resume(jid, true, who)?,
            RequestBody::JobResume { jid } => self.pause_or_resume(jid, false, who)?,
            RequestBody::JobShow { jid } => AdminCall::ReadJob { jid, then: JobRead::Show, change: None },
            RequestBody::JobWatch { jid } => {
                self.watch(from.peer, &jid, who);
                AdminCall::ReadJob { jid, then: JobRead::Show, change: None }
            }
            RequestBody::EventFire { tag, data } => {
                return self.fire_event(principal, &tag, data).map(|body| Decided::Answer(Box::new(body)))
            }
            RequestBody::ApiTokenCreate { principal: acting_as, ttl_ms } => {
                if acting_as != "root" && self.registry.principal(&acting_as).is_none() {
                    return Err(RequestError::not_found(format!("no principal {acting_as}")));
                }
                // 0 (given, or as the configured default) means a token that never expires.
                let ttl_ms = ttl_ms.unwrap_or(self.config.gateway.token_ttl_days.saturating_mul(86_400_000));
                let expires_at_ms = (ttl_ms > 0).then(|| self.now.wall_ms.saturating_add(ttl_ms));
                let (token, owner) = (Secret(format!("hal_{}", new_secret())), principal.to_owned());
                AdminCall::CreateApiToken { token, acting_as, owner, expires_at_ms }
            }
            RequestBody::ApiTokenList => AdminCall::ListApiTokens { owner: owner() },
            RequestBody::ApiTokenRevoke { id } => AdminCall::RevokeApiToken { id, owner: owner() },
            RequestBody::TokenList => AdminCall::ListTokens { owner: owner() },
            RequestBody::TokenRevoke { id } => AdminCall::RevokeToken { id, owner: owner() },
            RequestBody::AuditList { filter, after, limit } => {
                let granted = self.access().decide(&asker, &Action::ReadAudit)?;
                let filter = audit_filter_for(filter, granted);
                AdminCall::AuditList { filter, after, limit: limit.clamp(1, MAX_AUDIT_LIST) }
            }
            RequestBody::AuditVerify => {
                let known_heads =
                    [(self.config.id.clone(), self.audit_head)].into_iter().filter(|(_, h)| *h > 0).collect();
                AdminCall::AuditVerify { known_heads }
            }
            RequestBody::AuditHeader => AdminCall::AuditHeader,
            _ => return Err(RequestError::bad_request("not an administrative request")),
        };
        Ok(Decided::Call(call))
    }

    /// What the store answered an administrative request: memory follows what was stored,
    /// and the client is answered.
    pub fn admin_answered(&mut self, from: RequestFrom, done: AdminDone) {
        let answer = self.admin_answer(&from, done);
        self.out.reply(from.peer, from.request_id, answer);
    }

    fn admin_answer(&mut self, from: &RequestFrom, done: AdminDone) -> Reply {
        match done {
            AdminDone::PrincipalPut { record, principals } => {
                self.registry.set_principals(principals?);
                let name = record.name;
                // Sessions opened under the old key or ACL end here at once, as on the other
                // masters (they reconnect under the new ACL).
                crate::cluster::drop_clients_if_changed(self.registry, self.sessions, &name, &mut self.out);
                self.out.tell(ClusterChange::Principal { name: name.clone() });
                info!(principal = %name, fingerprint = %fingerprint(&record.public_key), "principal registered");
                Ok(ResponseBody::Changed(vec![name]))
            }
            AdminDone::PrincipalRemoved { name, principals } => {
                let Some(principals) = principals? else {
                    return Err(RequestError::not_found(format!("no principal {name}")));
                };
                self.registry.set_principals(principals);
                for peer in self.sessions.clients_of(&name) {
                    self.out.forget(peer, "principal removed");
                }
                self.out.tell(ClusterChange::Principal { name: name.clone() });
                Ok(ResponseBody::Changed(vec![name]))
            }
            AdminDone::OwnerTransferred { from: owner, to, moved } => {
                let moved = moved?;
                warn!(from = %owner, %to, rows = moved, by = %from.principal, "ownership transferred");
                Ok(ResponseBody::Changed(vec![moved.to_string()]))
            }
            AdminDone::Keys { pattern, keys } => Ok(ResponseBody::Keys(
                keys?
                    .into_iter()
                    .filter(|k| glob::matches(&pattern, &k.id))
                    .map(|k| KeyInfo { fingerprint: fingerprint(&k.public_key), id: k.id, state: k.state })
                    .collect(),
            )),
            AdminDone::KeysChanged { to, changed, accepted } => self.keys_changed(to, changed, accepted),
            AdminDone::KeyPreseeded { record, stored } => {
                if stored? == Checked::OtherKey {
                    return Err(RequestError::bad_request(format!(
                        "{} already has another key; delete it first",
                        record.id
                    )));
                }
                // One id changed: no need to reread every key (preseeding thousands stays linear).
                self.registry.accept(&record.id, record.public_key);
                self.out.push(Effect::ReleaseParked);
                self.out.tell(ClusterChange::Keys { ids: Some(vec![record.id.clone()]) });
                info!(minion = %record.id, fingerprint = %fingerprint(&record.public_key), "preseeded key accepted");
                Ok(ResponseBody::Changed(vec![record.id]))
            }
            AdminDone::TokenCreated { token, stored } => {
                let NewToken { token, minion, expires_at_ms, replace, .. } = token;
                if stored? == Checked::OtherKey {
                    return Err(RequestError::conflict(format!(
                        "{minion} already has an accepted key: a token would replace it; to replace the \
                         key, create the token with --replace (replace: true)"
                    )));
                }
                if replace {
                    warn!(%minion, "enrollment token created that replaces the accepted key when used");
                } else {
                    info!(%minion, "enrollment token created");
                }
                Ok(ResponseBody::Token(TokenInfo { token: token.0, minion, expires_at_ms }))
            }
            AdminDone::JobRead(done) => {
                let JobReadDone { jid, then, changed, read } = *done;
                if let Some((status, stored)) = changed {
                    stored?;
                    let effects = self.rollouts().changed(&jid, status);
                    self.out.extend(effects);
                }
                let shown = self.job_shown(&jid, read?, from.who());
                match then {
                    JobRead::Show => shown,
                    JobRead::Finished => {
                        shown?;
                        Err(RequestError::bad_request(format!("job {jid} has finished: nothing to pause or resume")))
                    }
                }
            }
            AdminDone::ApiTokenCreated { token, acting_as, owner, expires_at_ms, stored } => {
                stored?;
                info!(principal = %acting_as, created_by = %owner, ?expires_at_ms, "gateway token created");
                Ok(ResponseBody::ApiToken(token.0))
            }
            AdminDone::ApiTokens(tokens) => Ok(ResponseBody::ApiTokens(tokens?)),
            AdminDone::ApiTokenRevoked { id, acting_as, revoked } => {
                if !revoked? {
                    return Err(RequestError::not_found(format!("no gateway token {id}")));
                }
                for peer in self.sessions.opened_with_token(&id) {
                    info!(peer = peer.0, why = "token revoked", "ending a gateway session");
                    self.out.forget(peer, "token revoked");
                }
                if let Some(name) = acting_as {
                    self.out.tell(ClusterChange::Principal { name });
                }
                info!(token = %id, "gateway token revoked");
                Ok(ResponseBody::Changed(vec![id]))
            }
            AdminDone::Tokens(tokens) => Ok(ResponseBody::Tokens(tokens?)),
            AdminDone::Audit(records) => Ok(ResponseBody::Audit(records?)),
            AdminDone::AuditVerified(verified) => Ok(ResponseBody::AuditVerified(verified?)),
            AdminDone::AuditHeader(header) => Ok(ResponseBody::AuditHeader(Box::new(header?))),
            AdminDone::TokenRevoked { id, revoked } => {
                if !revoked? {
                    return Err(RequestError::not_found(format!("no enrollment token {id}")));
                }
                info!(token = %id, "enrollment token revoked");
                Ok(ResponseBody::Changed(vec![id]))
            }
        }
    }

    /// Keys moved (or deleted) as stored, in order: each is announced on the bus, a deleted
    /// one's minion forgotten, and a minion that lost its accepted key cut off and no longer
    /// admitted. The other masters hear of every key that changed, even when a later change
    /// failed.
    fn keys_changed(
        &mut self,
        to: Option<KeyState>,
        changed: Vec<KeyRecord>,
        accepted: Result<crate::core::registry::AcceptedKeys, crate::store::StoreError>,
    ) -> Reply {
        let event_state = to.map_or("deleted", |s| s.as_str());
        let mut ids = Vec::with_capacity(changed.len());
        for key in changed {
            // Memory follows each stored change at once: after a later failure there is no
            // reread, and a deleted or rejected key must not go on admitting its minion.
            match to {
                Some(KeyState::Accepted) => self.registry.accept(&key.id, key.public_key),
                _ if key.state == KeyState::Accepted => self.registry.set_accepted_of(&key.id, None),
                _ => {}
            }
            self.out.emit_shared(format!("halite/key/{}/{event_state}", key.id), serde_json::json!({}));
            if to.is_none() {
                self.pending.drop_minion(&key.id);
                self.registry.forget_minion(&key.id);
            }
            if to != Some(KeyState::Accepted) {
                self.out.push(Effect::CutMinion { id: key.id.clone() });
            }
            ids.push(key.id);
        }
        ids.sort();
        ids.dedup();
        let accepted = match accepted {
            Ok(keys) => {
                self.registry.take_accepted(keys);
                self.out.push(Effect::ReleaseParked);
                Ok(())
            }
            Err(error) => {
                // `take_accepted` lets parked minions knock again; without the reread, so do we.
                if to == Some(KeyState::Accepted) && !ids.is_empty() {
                    self.out.push(Effect::ReleaseParked);
                }
                Err(error)
            }
        };
        if !ids.is_empty() {
            self.out.tell(ClusterChange::Keys { ids: Some(ids.clone()) });
        }
        accepted?;
        Ok(ResponseBody::Changed(ids))
    }

    /// A client's pause or resume of a job it may control: the rollout's change to store
    /// first, if any, then the job read to answer with.
    fn pause_or_resume(&mut self, jid: String, pause: bool, who: Who<'_>) -> Result<AdminCall, RequestError> {
        if self.jobs.get(&jid).is_none() {
            // Finished, or unknown (or another principal's: answered as unknown).
            return Ok(AdminCall::ReadJob { jid, then: JobRead::Finished, change: None });
        }
        let job = match self.access().job_access(who, &jid) {
            JobAccess::None => None,
            JobAccess::See => {
                let verb = if pause { "pause" } else { "resume" };
                return Err(RequestError::forbidden(format!(
                    "not allowed to {verb} job {jid}: only its publisher, an administrator or rules allowing its function on every target may"
                )));
            }
            JobAccess::Control => self.jobs.get(&jid),
        };
        let Some(job) = job else {
            // Answered as a job that does not exist: another principal's live job is not told
            // apart from one there never was.
            return Err(RequestError::not_found(format!("no job {jid}")));
        };
        let Some(run) = &job.rollout else {
            return Err(RequestError::bad_request(format!(
                "job {jid} has no rollout to pause or resume (it was sent to every target at once)"
            )));
        };
        if run.status.state == RolloutState::Stopped {
            let why = run.status.reason.clone().unwrap_or_default();
            return Err(RequestError::bad_request(format!("the rollout of job {jid} has stopped: {why}")));
        }
        let (state, reason) = if pause {
            (RolloutState::Paused, Some("paused by a client".to_owned()))
        } else {
            (RolloutState::Running, None)
        };
        // Applied once stored (`admin_answered`) without deciding again: the asks are answered
        // before any other input, so nothing changes the rollout in between.
        let change = self.rollouts().change(&jid, state, reason);
        Ok(AdminCall::ReadJob { jid, then: JobRead::Show, change })
    }

    /// A principal's own event on the bus, under `engine/<principal>/`: any principal may fire
    /// in its namespace (it cannot forge a minion's or the master's events), within a size cap
    /// and a rate per principal.
    fn fire_event(&mut self, principal: &str, tag: &str, data: halite_protocol::message::Value) -> Reply {
        const MAX_BYTES: usize = 64 * 1024;
        const RATE_PER_SEC: f64 = 100.0;
        const BURST: f64 = 200.0;
        if !crate::acl::valid_tag(tag) {
            return Err(RequestError::bad_request(format!(
                "event tag {tag:?} must be 1-255 bytes of A-Za-z0-9_.-/ without empty or '..' segments"
            )));
        }
        if serde_json::to_vec(&data).map_or(usize::MAX, |b| b.len()) > MAX_BYTES {
            return Err(RequestError::bad_request(format!("event data larger than {MAX_BYTES} bytes as JSON")));
        }
        let now = self.now.at;
        if !self.event_gate.engine_event(principal, RATE_PER_SEC, BURST, now) {
            return Err(RequestError::new(
                ErrorKind::LimitExceeded,
                format!("more than {RATE_PER_SEC} events a second from {principal}; try again shortly"),
            ));
        }
        let full = format!("engine/{principal}/{tag}");
        self.out.emit_shared(full.clone(), serde_json::json!({ "principal": principal, "data": data }));
        Ok(ResponseBody::Changed(vec![full]))
    }

    /// A client follows a job it may see: while the job lives, its updates go to `peer` too.
    fn watch(&mut self, peer: halite_transport::PeerId, jid: &str, who: Who<'_>) {
        if self.access().may_see_live_job(who, jid) {
            if let Some(job) = self.jobs.get_mut(jid) {
                if !job.watchers.contains(&peer) {
                    job.watchers.push(peer);
                }
            }
        }
    }

    /// One job as read, as `who` may see it; another principal's job is answered like a job
    /// that does not exist.
    fn job_shown(&self, jid: &str, read: Option<halite_protocol::message::JobDetail>, who: Who<'_>) -> Reply {
        let detail = read.filter(|detail| {
            let minions: Vec<&str> = detail
                .minions
                .iter()
                .filter(|m| m.state != halite_protocol::message::MinionJobState::Unknown)
                .map(|m| m.minion.as_str())
                .collect();
            self.access().may_see_job(who, &detail.summary.caller, &detail.summary.function, &minions)
        });
        match detail {
            Some(mut detail) => {
                self.jobs.overlay_live(&mut detail.summary, Some(&mut detail.minions));
                self.mark_away(&mut detail);
                Ok(ResponseBody::Job(detail))
            }
            None => Err(RequestError::not_found(format!("no job {jid}"))),
        }
    }

    /// Marks the minions a live job was sent to that are connected to no master now (stopped,
    /// cut off mid-job) with what becomes of them: their return is taken when they come back
    /// (a minion keeps its jobs and returns across a restart), until the job's timeout.
    fn mark_away(&self, detail: &mut halite_protocol::message::JobDetail) {
        use halite_protocol::message::MinionJobState::{Running, Sent};
        let now = self.now.at;
        let Some(live) = self.jobs.get(&detail.summary.jid) else { return };
        let timeout_ms = live.record.timeout_ms;
        for minion in &mut detail.minions {
            let here = self.sessions.is_online(&minion.minion);
            if !matches!(minion.state, Sent | Running)
                || here
                || self.cluster.serves_elsewhere(&minion.minion, self.sessions, now)
            {
                continue;
            }
            let until = match timeout_ms {
                0 => "the job has no timeout: it waits until the minion returns or the job is cancelled".to_owned(),
                ms => {
                    format!("it is timed_out {} s after it was sent if it has not returned by then", ms.div_ceil(1000))
                }
            };
            minion.away = Some(format!(
                "offline: the minion left while the job was {}; its return is taken when it comes back ({until})",
                minion.state.as_str()
            ));
        }
    }

    /// The minions matching `pattern` that `acl` can target, in id order: the page of at most
    /// `limit` (capped at [`MINION_LIST_PAGE_MAX`]) after the id `after`, or every one without
    /// `limit`.
    fn list_minions(
        &self,
        acl: Option<&PrincipalAcl>,
        pattern: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Vec<MinionInfo> {
        use std::ops::Bound;
        // A principal lists only the minions its rules can target.
        let view = crate::authz::TargetView::of_principal(acl, &self.config.nodegroups);
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let limit = limit.map_or(usize::MAX, |n| n.min(MINION_LIST_PAGE_MAX) as usize);
        self.registry
            .accepted_ids()
            .range::<str, _>((start, Bound::Unbounded))
            .filter(|id| glob::matches(pattern, id))
            .filter(|id| view.contains(id, self.registry.grains(id)))
            .take(limit)
            .map(|id| {
                let entry = self.registry.minion(id).cloned().unwrap_or_default();
                let connected = self.sessions.is_online(id);
                let connected_elsewhere = self.cluster.serves_elsewhere(id, self.sessions, self.now.at);
                MinionInfo {
                    id: id.clone(),
                    connected,
                    connected_elsewhere,
                    // The last contact: now for one whose session is live (its heartbeats keep
                    // it so), else when its last session ended.
                    last_seen_ms: if connected || connected_elsewhere { self.now.wall_ms } else { entry.last_seen_ms },
                    grains: entry.grains,
                    functions: entry.functions,
                }
            })
            .collect()
    }
}

/// Whether a job is shown to `who` in a listing that keeps what passes `filter`: a job it may
/// see, its live states laid over first (the filter judges those).
pub fn listed(
    access: &Access<'_>,
    jobs: &JobTable,
    who: Who<'_>,
    filter: &JobFilter,
    listing: &mut JobListing,
) -> bool {
    let (summary, minions) = (&mut listing.summary, &listing.minions);
    let minions: Vec<&str> = minions.iter().map(String::as_str).collect();
    if !who.sees_all() && !access.may_see_job(who, &summary.caller, &summary.function, &minions) {
        return false;
    }
    jobs.overlay_live(summary, None);
    filter.keeps(summary)
}

/// 32 random bytes as hex: enrollment and gateway tokens (only their hashes are stored).
fn new_secret() -> String {
    let mut secret = [0u8; 32];
    rand_core::OsRng.fill_bytes(&mut secret);
    hex::encode(&secret)
}

fn fingerprint(public_key: &[u8; 32]) -> String {
    PublicIdentity::from_bytes(public_key).map(|k| k.fingerprint()).unwrap_or_else(|_| hex::encode(public_key))
}
