//! Typed helpers for the administrative requests: keys, enrollment and gateway tokens,
//! minions, jobs and principals. Each is one [`Client::request`] whose answer is checked
//! to be of the kind the request is answered with.

use std::time::Duration;

use halite_protocol::enrollment;
use halite_protocol::message::{
    ApiTokenInfo, JobFilter, JobSummary, KeyInfo, MinionInfo, MinionPages, PrincipalAcl, PrincipalInfo, RequestBody,
    ResponseBody, TokenInfo, TokenSummary,
};

use crate::{Client, ClientError};

/// How many minions [`Client::minions`] asks for at a time: a page the master builds in about a
/// millisecond, a few hundred kilobytes on the wire.
const MINION_PAGE: u32 = 1_000;

/// An enrollment token with what a new server boots with: [`Client::create_enrollment`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Enrollment {
    /// The one-time token (shown once; the master keeps its hash).
    pub token: String,
    /// The minion id it enrolls.
    pub minion: String,
    /// When it stops enrolling, Unix milliseconds.
    pub expires_at_ms: u64,
    /// The masters the enrollment file names.
    pub masters: Vec<String>,
    /// The master key (hex) the new minion pins.
    pub master_key: String,
    /// The enrollment file, `/etc/halite/enrollment.toml`.
    pub enrollment: String,
    /// A `#cloud-config` document that writes it: a server's user_data.
    pub user_data: String,
}

pub(crate) fn unexpected(what: &str, body: &ResponseBody) -> ClientError {
    ClientError::Protocol(format!("expected {what}, got {body:?}"))
}

fn changed(body: ResponseBody) -> Result<Vec<String>, ClientError> {
    match body {
        ResponseBody::Changed(ids) => Ok(ids),
        other => Err(unexpected("the ids changed", &other)),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Client {
    /// Keys whose minion id matches the glob `pattern`, in every state.
    pub async fn keys(&self, pattern: &str) -> Result<Vec<KeyInfo>, ClientError> {
        match self.request(RequestBody::KeyList { pattern: pattern.into() }).await? {
            ResponseBody::Keys(keys) => Ok(keys),
            other => Err(unexpected("keys", &other)),
        }
    }

    /// Accepts the pending and rejected keys matching `pattern`; the ids accepted.
    pub async fn accept_keys(&self, pattern: &str) -> Result<Vec<String>, ClientError> {
        changed(self.request(RequestBody::KeyAccept { pattern: pattern.into() }).await?)
    }

    /// Rejects the keys matching `pattern` (their live sessions are cut); the ids rejected.
    pub async fn reject_keys(&self, pattern: &str) -> Result<Vec<String>, ClientError> {
        changed(self.request(RequestBody::KeyReject { pattern: pattern.into() }).await?)
    }

    /// Deletes the keys matching `pattern` (their live sessions are cut); the ids deleted.
    pub async fn delete_keys(&self, pattern: &str) -> Result<Vec<String>, ClientError> {
        changed(self.request(RequestBody::KeyDelete { pattern: pattern.into() }).await?)
    }

    /// Registers a key generated elsewhere as accepted for minion `id` (preseeding).
    pub async fn preseed_key(&self, id: &str, public_key: [u8; 32]) -> Result<(), ClientError> {
        let body = RequestBody::KeyPreseed { id: id.into(), public_key: public_key.to_vec() };
        changed(self.request(body).await?).map(drop)
    }

    /// A one-time enrollment token bound to `minion`, valid for `ttl`. For an id whose key
    /// is already accepted the master refuses it (`conflict`) unless `replace`: then using the
    /// token replaces that key (administrators only).
    pub async fn create_enrollment_token(
        &self,
        minion: &str,
        ttl: Duration,
        replace: bool,
    ) -> Result<TokenInfo, ClientError> {
        match self.request(RequestBody::TokenCreate { minion: minion.into(), ttl_ms: millis(ttl), replace }).await? {
            ResponseBody::Token(token) => Ok(token),
            other => Err(unexpected("a token", &other)),
        }
    }

    /// A one-time enrollment token for a new server whose minion will be `minion`, with the
    /// enrollment file it reads and the cloud-init user_data that writes it (what `halite key
    /// token create --user-data` prints). The file names `masters`, or, when empty, the master
    /// this client is connected to; it pins the key this client pins. `replace`: as for
    /// [`Client::create_enrollment_token`].
    pub async fn create_enrollment(
        &self,
        minion: &str,
        ttl: Duration,
        masters: &[String],
        replace: bool,
    ) -> Result<Enrollment, ClientError> {
        let token = self.create_enrollment_token(minion, ttl, replace).await?;
        let masters = if masters.is_empty() { vec![self.master_addr()] } else { masters.to_vec() };
        let master_key = halite_protocol::hex::encode(self.master_key().as_bytes());
        let enrollment = enrollment::enrollment_toml(&masters, &master_key, &token.minion, &token.token);
        let user_data = enrollment::cloud_config(&enrollment);
        Ok(Enrollment {
            token: token.token,
            minion: token.minion,
            expires_at_ms: token.expires_at_ms,
            masters,
            master_key,
            enrollment,
            user_data,
        })
    }

    /// The enrollment tokens (by id, never the tokens themselves).
    pub async fn enrollment_tokens(&self) -> Result<Vec<TokenSummary>, ClientError> {
        match self.request(RequestBody::TokenList).await? {
            ResponseBody::Tokens(tokens) => Ok(tokens),
            other => Err(unexpected("enrollment tokens", &other)),
        }
    }

    /// Revokes an enrollment token by its id: it enrolls nobody after this.
    pub async fn revoke_enrollment_token(&self, id: &str) -> Result<(), ClientError> {
        changed(self.request(RequestBody::TokenRevoke { id: id.into() }).await?).map(drop)
    }

    /// Minions (accepted keys) matching `pattern` that this principal may target, with
    /// presence, grains and functions, in id order. Asked for a page at a time
    /// ([`Client::minion_page`]), so a large fleet never holds the master's loop for long.
    pub async fn minions(&self, pattern: &str) -> Result<Vec<MinionInfo>, ClientError> {
        let mut pages = MinionPages::new();
        loop {
            let page = self.minion_page(pattern, pages.after(), MINION_PAGE).await?;
            if pages.add(page, MINION_PAGE) {
                return Ok(pages.into_minions());
            }
        }
    }

    /// One page of [`Client::minions`]: at most `limit` (the master caps it at
    /// [`MINION_LIST_PAGE_MAX`](halite_protocol::message::MINION_LIST_PAGE_MAX)) after the id
    /// `after`, in id order; [`MinionPages`] tells when the list is whole (a master from before
    /// pages ignores `after` and `limit`). [`Client::minions`] pages through them all.
    pub async fn minion_page(
        &self,
        pattern: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<MinionInfo>, ClientError> {
        let body = RequestBody::MinionList { pattern: pattern.into(), after, limit: Some(limit) };
        match self.request(body).await? {
            ResponseBody::Minions(minions) => Ok(minions),
            other => Err(unexpected("minions", &other)),
        }
    }

    /// The newest `limit` jobs this principal may see.
    pub async fn jobs(&self, limit: u32) -> Result<Vec<JobSummary>, ClientError> {
        self.jobs_filtered(limit, JobFilter::default()).await
    }

    /// The newest `limit` jobs this principal may see that pass `filter`.
    pub async fn jobs_filtered(&self, limit: u32, filter: JobFilter) -> Result<Vec<JobSummary>, ClientError> {
        match self.request(RequestBody::JobList { limit, filter }).await? {
            ResponseBody::Jobs(jobs) => Ok(jobs),
            other => Err(unexpected("jobs", &other)),
        }
    }

    /// Registers (or changes) a principal: its name, ed25519 public key and ACL.
    pub async fn add_principal(&self, name: &str, public_key: [u8; 32], acl: PrincipalAcl) -> Result<(), ClientError> {
        let body = RequestBody::PrincipalAdd { name: name.into(), public_key: public_key.to_vec(), acl };
        changed(self.request(body).await?).map(drop)
    }

    /// The registered principals.
    pub async fn principals(&self) -> Result<Vec<PrincipalInfo>, ClientError> {
        match self.request(RequestBody::PrincipalList).await? {
            ResponseBody::Principals(principals) => Ok(principals),
            other => Err(unexpected("principals", &other)),
        }
    }

    /// Removes a principal; its sessions and gateway tokens go with it.
    pub async fn remove_principal(&self, name: &str) -> Result<(), ClientError> {
        changed(self.request(RequestBody::PrincipalRemove { name: name.into() }).await?).map(drop)
    }

    /// Hands everything `from` created (configs, deployments, enrollment and gateway tokens) to
    /// `to`; how many objects moved.
    pub async fn transfer_ownership(&self, from: &str, to: &str) -> Result<u64, ClientError> {
        let body = RequestBody::OwnerTransfer { from: from.into(), to: to.into() };
        let moved = changed(self.request(body).await?)?;
        Ok(moved.first().and_then(|n| n.parse().ok()).unwrap_or(0))
    }

    /// A bearer token for the HTTP gateway acting as `principal`, valid for `ttl` (`None`: the
    /// master's default). Shown once; the master keeps only its hash.
    pub async fn create_api_token(&self, principal: &str, ttl: Option<Duration>) -> Result<String, ClientError> {
        let body = RequestBody::ApiTokenCreate { principal: principal.into(), ttl_ms: ttl.map(millis) };
        match self.request(body).await? {
            ResponseBody::ApiToken(token) => Ok(token),
            other => Err(unexpected("a token", &other)),
        }
    }

    /// Fires an event on the master's bus, as `engine/<principal>/<tag>` with data
    /// `{"principal", "data"}` (an alarm that rollouts abort on, a step of the engine's own
    /// workflow): what every subscriber allowed to see it receives. The full tag.
    pub async fn fire_event(&self, tag: &str, data: halite_protocol::message::Value) -> Result<String, ClientError> {
        let mut changed = changed(self.request(RequestBody::EventFire { tag: tag.into(), data }).await?)?;
        changed.pop().ok_or_else(|| ClientError::Protocol("an event fired without its tag".into()))
    }

    /// The gateway tokens (by id, never the tokens themselves).
    pub async fn api_tokens(&self) -> Result<Vec<ApiTokenInfo>, ClientError> {
        match self.request(RequestBody::ApiTokenList).await? {
            ResponseBody::ApiTokens(tokens) => Ok(tokens),
            other => Err(unexpected("gateway tokens", &other)),
        }
    }

    /// Revokes a gateway token by its id, at once.
    pub async fn revoke_api_token(&self, id: &str) -> Result<(), ClientError> {
        changed(self.request(RequestBody::ApiTokenRevoke { id: id.into() }).await?).map(drop)
    }
}
