//! Administrative requests from clients: keys, tokens, minions, jobs.

use halite_protocol::hex;
use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{
    ErrorKind, KeyInfo, KeyState, MinionInfo, PrincipalAcl, PrincipalInfo, RequestBody, ResponseBody, TokenInfo,
    MINION_LIST_PAGE_MAX,
};
use rand_core::RngCore;
use tracing::{info, warn};

use crate::authz::{Action, Asker, JobAccess, RequestKind, Who};
use crate::core::asks::ClientRequest;
use crate::keys::token_hash;
use crate::net::Net;
use crate::request_error::{Reply, RequestError};
use crate::server::Master;
use crate::store::{ClusterChange, KeyRecord, PrincipalRecord, Store, StoreError};
use crate::target::glob;
use halite_protocol::message::{JobFilter, JobSummary, MinionJobState, RolloutState};
use halite_transport::PeerId;

/// Most jobs one listing returns.
const MAX_JOB_LIST: u32 = 1000;

impl<S: Store, N: Net> Master<S, N> {
    /// Replaces stored states with live ones for a job still in flight (`running` is not
    /// written, and the latest changes may still be in the batch).
    pub(crate) fn overlay_live(
        &mut self,
        summary: &mut halite_protocol::message::JobSummary,
        minions: Option<&mut Vec<halite_protocol::message::MinionJob>>,
    ) {
        let Some(job) = self.jobs.get_mut(&summary.jid) else { return };
        summary.states.clear();
        for slot in job.slots().values() {
            *summary.states.entry(slot.state).or_default() += 1;
        }
        for minion in minions.into_iter().flatten() {
            if let Some(slot) = job.slots().get(&minion.minion) {
                if !minion.state.is_final() {
                    minion.state = slot.state;
                }
            }
        }
    }

    /// Answers a client's request (or says why not), in parts when large. The handlers here
    /// still await the store inline.
    pub(crate) async fn answer_request(&mut self, asked: ClientRequest) {
        let ClientRequest { peer, principal, acl, request } = asked;
        let id = request.request_id;
        let answer = match request.body {
            RequestBody::JobWatch { jid } => {
                let who = Who { name: &principal, acl: acl.as_deref() };
                self.watch(peer, &jid, who).await
            }
            body => self.handle_request(body, &principal, acl.as_deref()).await,
        };
        match answer {
            Ok(body) => self.respond(peer, id, body),
            Err(error) => self.send_error(peer, error.kind, error.message, Some(id.to_string())),
        }
    }

    /// Pauses or resumes a job's rollout; the job as it then is.
    async fn pause_then_show(&mut self, jid: &str, pause: bool, who: Who<'_>) -> Reply {
        if self.jobs.get(jid).is_none() {
            // Finished, or unknown (or another principal's: answered as unknown).
            self.show_job(jid, who).await?;
            return Err(RequestError::bad_request(format!("job {jid} has finished: nothing to pause or resume")));
        }
        let access = self.access().job_access(who, jid);
        self.pause_or_resume(jid, pause, access).await?;
        self.show_job(jid, who).await
    }

    /// A client's pause or resume of a job it may see: stored, then announced.
    async fn pause_or_resume(&mut self, jid: &str, pause: bool, access: JobAccess) -> Result<(), RequestError> {
        let job = match access {
            JobAccess::None => None,
            JobAccess::See => {
                let verb = if pause { "pause" } else { "resume" };
                return Err(RequestError::forbidden(format!(
                    "not allowed to {verb} job {jid}: only its publisher, an administrator or rules allowing its function on every target may"
                )));
            }
            JobAccess::Control => self.jobs.get(jid),
        };
        let Some(job) = job else {
            return Err(RequestError::not_found(format!("no running job {jid}")));
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
        if let Some(status) = self.rollouts().change(jid, state, reason) {
            self.store.set_rollout(jid, &status).await.map_err(RequestError::from)?;
            let effects = self.rollouts().changed(jid, status);
            self.apply(effects);
        }
        Ok(())
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
        let now = self.clock.now();
        if !self.event_gate.engine_event(principal, RATE_PER_SEC, BURST, now) {
            return Err(RequestError::new(
                ErrorKind::LimitExceeded,
                format!("more than {RATE_PER_SEC} events a second from {principal}; try again shortly"),
            ));
        }
        let full = format!("engine/{principal}/{tag}");
        self.emit_shared(full.clone(), serde_json::json!({ "principal": principal, "data": data }));
        Ok(ResponseBody::Changed(vec![full]))
    }

    /// A client follows a job it may see: while the job lives, its updates go to `peer` too;
    /// answered with the job as it is.
    pub(crate) async fn watch(&mut self, peer: PeerId, jid: &str, who: Who<'_>) -> Reply {
        if self.access().may_see_live_job(who, jid) {
            if let Some(job) = self.jobs.get_mut(jid) {
                if !job.watchers.contains(&peer) {
                    job.watchers.push(peer);
                }
            }
        }
        self.show_job(jid, who).await
    }

    /// One job as `who` may see it; another principal's job is answered like a job that does
    /// not exist.
    pub(crate) async fn show_job(&mut self, jid: &str, who: Who<'_>) -> Reply {
        let detail = self.store.job(jid).await.map_err(RequestError::from)?.filter(|detail| {
            let minions: Vec<&str> = detail
                .minions
                .iter()
                .filter(|m| m.state != MinionJobState::Unknown)
                .map(|m| m.minion.as_str())
                .collect();
            self.access().may_see_job(who, &detail.summary.caller, &detail.summary.function, &minions)
        });
        match detail {
            Some(mut detail) => {
                self.overlay_live(&mut detail.summary, Some(&mut detail.minions));
                Ok(ResponseBody::Job(detail))
            }
            None => Err(RequestError::not_found(format!("no job {jid}"))),
        }
    }

    pub(crate) async fn handle_request(
        &mut self,
        body: RequestBody,
        principal: &str,
        acl: Option<&PrincipalAcl>,
    ) -> Reply {
        if crate::deploy::is_deploy_request(&body) {
            return self.handle_deploy_request(body, principal, acl).await;
        }
        let asker = Asker::client(principal, acl);
        match RequestKind::of(&body) {
            RequestKind::Administer => drop(self.access().decide(&asker, &Action::Administer)?),
            RequestKind::List => drop(self.access().decide(&asker, &Action::List)?),
            RequestKind::FireEvent => drop(self.access().decide(&asker, &Action::FireEvent)?),
            // Decided with the token's id (its minion, whether it replaces a key).
            RequestKind::Enroll => {}
            // Decided once the job is loaded.
            RequestKind::SeeJob | RequestKind::ControlJob => {}
            // Handled above.
            RequestKind::Configs | RequestKind::Deployment => {}
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
        match body {
            RequestBody::PrincipalAdd { name, public_key, acl } => {
                halite_protocol::id::validate(&name).map_err(|e| RequestError::bad_request(e.to_string()))?;
                if name == "root" {
                    return Err(RequestError::bad_request("root is built in; its key is root.key"));
                }
                let key =
                    PublicIdentity::from_bytes(&public_key).map_err(|e| RequestError::bad_request(e.to_string()))?;
                if let Some(tenant) = &acl.tenant {
                    halite_protocol::id::validate(tenant)
                        .map_err(|e| RequestError::bad_request(format!("tenant {tenant:?}: {e}")))?;
                    if acl.admin {
                        return Err(RequestError::bad_request(
                            "a tenant's principal cannot be an administrator (administrators see every tenant)",
                        ));
                    }
                }
                for rule in &acl.rules {
                    crate::target::Expr::parse(
                        halite_protocol::message::TargetKind::Compound,
                        &rule.targets,
                        &self.config.nodegroups,
                    )
                    .map_err(|e| RequestError::bad_request(format!("targets {:?}: {e}", rule.targets)))?;
                    for pattern in rule.args.values() {
                        regex::Regex::new(pattern)
                            .map_err(|e| RequestError::bad_request(format!("args pattern {pattern:?}: {e}")))?;
                    }
                }
                let record = PrincipalRecord { name: name.clone(), public_key: *key.as_bytes(), acl };
                self.store.put_principal(&record, self.clock.wall_ms()).await.map_err(RequestError::from)?;
                self.reload_principals().await.map_err(RequestError::from)?;
                // Sessions opened under the old key or ACL end here at once, as on the other
                // masters (they reconnect under the new ACL).
                self.drop_clients_if_changed(&name);
                self.tell_masters(ClusterChange::Principal { name: name.clone() });
                info!(principal = %name, fingerprint = %key.fingerprint(), "principal registered");
                Ok(ResponseBody::Changed(vec![name]))
            }
            RequestBody::PrincipalList => Ok(ResponseBody::Principals(
                self.registry
                    .principals()
                    .map(|p| PrincipalInfo {
                        name: p.name.clone(),
                        fingerprint: fingerprint(&p.public_key),
                        acl: p.acl.clone(),
                    })
                    .collect(),
            )),
            RequestBody::PrincipalRemove { name } => {
                if !self.store.delete_principal(&name).await.map_err(RequestError::from)? {
                    return Err(RequestError::not_found(format!("no principal {name}")));
                }
                self.reload_principals().await.map_err(RequestError::from)?;
                self.cut_clients(&name);
                self.tell_masters(ClusterChange::Principal { name: name.clone() });
                Ok(ResponseBody::Changed(vec![name]))
            }
            RequestBody::OwnerTransfer { from, to } => {
                if to != "root" && self.registry.principal(&to).is_none() {
                    return Err(RequestError::not_found(format!("no principal {to} to hand {from}'s objects to")));
                }
                let moved = self.store.transfer_owner(&from, &to).await.map_err(RequestError::from)?;
                warn!(%from, %to, rows = moved, by = %principal, "ownership transferred");
                Ok(ResponseBody::Changed(vec![moved.to_string()]))
            }
            RequestBody::KeyList { pattern } => {
                let keys = self.store.keys().await.map_err(RequestError::from)?;
                Ok(ResponseBody::Keys(
                    keys.into_iter()
                        .filter(|k| glob::matches(&pattern, &k.id))
                        .map(|k| KeyInfo { fingerprint: fingerprint(&k.public_key), id: k.id, state: k.state })
                        .collect(),
                ))
            }
            RequestBody::KeyAccept { pattern } => {
                self.change_keys(&pattern, &[KeyState::Pending, KeyState::Rejected], Some(KeyState::Accepted)).await
            }
            RequestBody::KeyReject { pattern } => {
                self.change_keys(&pattern, &[KeyState::Pending, KeyState::Accepted], Some(KeyState::Rejected)).await
            }
            RequestBody::KeyDelete { pattern } => {
                let all = [KeyState::Pending, KeyState::Accepted, KeyState::Rejected, KeyState::Denied];
                self.change_keys(&pattern, &all, None).await
            }
            RequestBody::KeyPreseed { id, public_key } => {
                halite_protocol::id::validate(&id).map_err(|e| RequestError::bad_request(e.to_string()))?;
                let key =
                    PublicIdentity::from_bytes(&public_key).map_err(|e| RequestError::bad_request(e.to_string()))?;
                let existing = self.store.keys_for(&id).await.map_err(RequestError::from)?;
                if existing.iter().any(|k| k.public_key != *key.as_bytes() && k.state != KeyState::Denied) {
                    return Err(RequestError::bad_request(format!("{id} already has another key; delete it first")));
                }
                let record = KeyRecord { id: id.clone(), public_key: *key.as_bytes(), state: KeyState::Accepted };
                self.store.put_key(&record, self.clock.wall_ms()).await.map_err(RequestError::from)?;
                // One id changed: no need to reread every key (preseeding thousands stays linear).
                self.registry.accept(&id, *key.as_bytes());
                self.release_parked();
                self.tell_masters(ClusterChange::Keys { ids: Some(vec![id.clone()]) });
                info!(minion = %id, fingerprint = %key.fingerprint(), "preseeded key accepted");
                Ok(ResponseBody::Changed(vec![id]))
            }
            RequestBody::TokenCreate { minion, ttl_ms, replace } => {
                halite_protocol::id::validate(&minion).map_err(|e| RequestError::bad_request(e.to_string()))?;
                let enroll = Action::Enroll { minion: Some(&minion), replace };
                self.access().decide(&Asker::client(principal, acl), &enroll)?;
                if ttl_ms == 0 {
                    return Err(RequestError::bad_request("token ttl must be positive"));
                }
                // A token enrolls whoever holds it: for an id that already has an accepted key,
                // it would take that identity over, so only when asked for by name.
                let keys = self.store.keys_for(&minion).await.map_err(RequestError::from)?;
                if !replace && keys.iter().any(|k| k.state == KeyState::Accepted) {
                    return Err(RequestError::conflict(format!(
                        "{minion} already has an accepted key: a token would replace it; to replace the \
                         key, create the token with --replace (replace: true)"
                    )));
                }
                let token = new_secret();
                let expires_at_ms = self.clock.wall_ms().saturating_add(ttl_ms);
                self.store
                    .create_token(&token_hash(&token), &minion, expires_at_ms, replace, principal)
                    .await
                    .map_err(RequestError::from)?;
                if replace {
                    warn!(%minion, "enrollment token created that replaces the accepted key when used");
                } else {
                    info!(%minion, "enrollment token created");
                }
                Ok(ResponseBody::Token(TokenInfo { token, minion, expires_at_ms }))
            }
            RequestBody::MinionList { pattern, after, limit } => {
                Ok(ResponseBody::Minions(self.list_minions(acl, &pattern, after.as_deref(), limit)))
            }
            RequestBody::JobList { limit, filter } => {
                let who = Who { name: principal, acl };
                let jobs =
                    self.visible_jobs(who, limit.min(MAX_JOB_LIST), &filter).await.map_err(RequestError::from)?;
                Ok(ResponseBody::Jobs(jobs))
            }
            RequestBody::JobPause { jid } => self.pause_then_show(&jid, true, Who { name: principal, acl }).await,
            RequestBody::JobResume { jid } => self.pause_then_show(&jid, false, Who { name: principal, acl }).await,
            RequestBody::JobShow { jid } => self.show_job(&jid, Who { name: principal, acl }).await,
            RequestBody::EventFire { tag, data } => self.fire_event(principal, &tag, data),
            RequestBody::ApiTokenCreate { principal: acting_as, ttl_ms } => {
                if acting_as != "root" && self.registry.principal(&acting_as).is_none() {
                    return Err(RequestError::not_found(format!("no principal {acting_as}")));
                }
                let token = format!("hal_{}", new_secret());
                let now = self.clock.wall_ms();
                // 0 (given, or as the configured default) means a token that never expires.
                let ttl_ms = ttl_ms.unwrap_or(self.config.gateway.token_ttl_days.saturating_mul(86_400_000));
                let expires = (ttl_ms > 0).then(|| now.saturating_add(ttl_ms));
                self.store
                    .create_api_token(&token_hash(&token), &acting_as, principal, now, expires)
                    .await
                    .map_err(RequestError::from)?;
                info!(principal = %acting_as, created_by = %principal, expires_at_ms = ?expires, "gateway token created");
                Ok(ResponseBody::ApiToken(token))
            }
            RequestBody::ApiTokenList => {
                let owner = self.access().owned_by(Who { name: principal, acl });
                Ok(ResponseBody::ApiTokens(self.store.api_tokens(owner).await.map_err(RequestError::from)?))
            }
            RequestBody::ApiTokenRevoke { id } => {
                // Whose it is, so the other masters recheck that principal's sessions.
                let tokens = self.store.api_tokens(None).await.map_err(RequestError::from)?;
                let acting_as = tokens.into_iter().find(|t| t.id == id).map(|t| t.principal);
                let owner = self.access().owned_by(Who { name: principal, acl });
                if !self.store.delete_api_token(&id, owner).await.map_err(RequestError::from)? {
                    return Err(RequestError::not_found(format!("no gateway token {id}")));
                }
                self.end_gateway_sessions(self.sessions.opened_with_token(&id), "token revoked");
                if let Some(name) = acting_as {
                    self.tell_masters(ClusterChange::Principal { name });
                }
                info!(token = %id, "gateway token revoked");
                Ok(ResponseBody::Changed(vec![id]))
            }
            RequestBody::TokenList => {
                let owner = self.access().owned_by(Who { name: principal, acl });
                Ok(ResponseBody::Tokens(self.store.tokens(owner).await.map_err(RequestError::from)?))
            }
            RequestBody::TokenRevoke { id } => {
                let owner = self.access().owned_by(Who { name: principal, acl });
                if !self.store.delete_token(&id, owner).await.map_err(RequestError::from)? {
                    return Err(RequestError::not_found(format!("no enrollment token {id}")));
                }
                info!(token = %id, "enrollment token revoked");
                Ok(ResponseBody::Changed(vec![id]))
            }
            _ => Err(RequestError::bad_request("not an administrative request")),
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
                MinionInfo {
                    id: id.clone(),
                    connected: self.sessions.is_online(id),
                    connected_elsewhere: self.served_elsewhere(id),
                    last_seen_ms: entry.last_seen_ms,
                    grains: entry.grains,
                    functions: entry.functions,
                }
            })
            .collect()
    }

    /// The newest `limit` jobs `who` may see that pass `filter`, with their live states.
    async fn visible_jobs(
        &mut self,
        who: Who<'_>,
        limit: u32,
        filter: &JobFilter,
    ) -> Result<Vec<JobSummary>, StoreError> {
        if who.sees_all() && filter.is_empty() {
            let mut jobs: Vec<JobSummary> =
                self.store.jobs(None, limit, false).await?.into_iter().map(|l| l.summary).collect();
            for summary in &mut jobs {
                self.overlay_live(summary, None);
            }
            return Ok(jobs);
        }
        self.jobs_kept(who, limit, filter).await
    }

    /// For a principal that does not see everything, or a filter: read page by page until
    /// `limit` jobs are kept, the jobs grow older than `filter.since_ms`, or a bounded number
    /// of pages is read (a principal that sees few jobs gets fewer, not a stall).
    async fn jobs_kept(&mut self, who: Who<'_>, limit: u32, filter: &JobFilter) -> Result<Vec<JobSummary>, StoreError> {
        const PAGE: u32 = 500;
        const MAX_PAGES: usize = 20;
        let mut out = Vec::new();
        // Jids begin with their publication time: the newest job published before `until` is
        // the first one below that time's jid.
        let mut before: Option<String> =
            filter.until_ms.map(|until| halite_protocol::time::compact_utc(until.saturating_mul(1000)));
        let sees_all = who.sees_all();
        for _ in 0..MAX_PAGES {
            let page = self.store.jobs(before.as_deref(), PAGE, !sees_all).await?;
            let full = page.len() == PAGE as usize;
            before = page.last().map(|l| l.summary.jid.clone());
            for mut listing in page {
                if filter.since_ms.is_some_and(|since| listing.summary.created_at_ms < since) {
                    return Ok(out);
                }
                let minions: Vec<&str> = listing.minions.iter().map(String::as_str).collect();
                if !sees_all
                    && !self.access().may_see_job(who, &listing.summary.caller, &listing.summary.function, &minions)
                {
                    continue;
                }
                self.overlay_live(&mut listing.summary, None);
                if filter.keeps(&listing.summary) {
                    out.push(listing.summary);
                    if out.len() == limit as usize {
                        return Ok(out);
                    }
                }
            }
            if !full {
                break;
            }
        }
        Ok(out)
    }

    /// Moves keys matching `pattern` whose state is in `from` to `to` (or deletes them), and
    /// cuts the live sessions of minions that lost their accepted key.
    async fn change_keys(&mut self, pattern: &str, from: &[KeyState], to: Option<KeyState>) -> Reply {
        let keys = self.store.keys().await.map_err(RequestError::from)?;
        let mut changed = Vec::new();
        for key in keys.into_iter().filter(|k| from.contains(&k.state) && glob::matches(pattern, &k.id)) {
            match to {
                Some(state) => self.store.put_key(&KeyRecord { state, ..key.clone() }, self.clock.wall_ms()).await,
                None => self.store.delete_key(&key.id, &key.public_key).await,
            }
            .map_err(RequestError::from)?;
            let event_state = to.map_or("deleted", |s| s.as_str());
            self.emit_shared(format!("halite/key/{}/{event_state}", key.id), serde_json::json!({}));
            if to.is_none() {
                self.pending.drop_minion(&key.id);
                self.store.delete_minion(&key.id).await.map_err(RequestError::from)?;
                self.registry.forget_minion(&key.id);
            }
            if to != Some(KeyState::Accepted) {
                self.cut_minion(&key.id);
            }
            changed.push(key.id);
        }
        changed.sort();
        changed.dedup();
        self.reload_accepted().await.map_err(RequestError::from)?;
        if !changed.is_empty() {
            self.tell_masters(ClusterChange::Keys { ids: Some(changed.clone()) });
        }
        Ok(ResponseBody::Changed(changed))
    }
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
