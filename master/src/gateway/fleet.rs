//! Gateway routes for the fleet: minions (with grains and presence), keys, and enrollment
//! tokens with the cloud-init user_data a new server boots with. Each is the CLI's request,
//! under the token's principal, so the same authorisation applies (keys need an admin
//! principal; an enrollment token, an admin or `deploy.apply` on its minion id).

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use halite_protocol::enrollment;
use halite_protocol::message::{MinionPages, RequestBody, ResponseBody};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::auth::Authed;
use super::local::LocalSession;
use super::routes::{ok, unexpected, ApiError, ApiResult, Commands};

/// What enrollment documents need from the master: the key minions pin, and where it listens.
#[derive(Clone)]
pub(crate) struct Enrollment {
    /// The key minions pin (the cluster key for a certified master), in hex.
    pub(crate) master_key_hex: String,
    /// The master's `listen` address.
    pub(crate) listen: String,
}

/// The routes, with what enrollment documents need.
pub(super) fn routes(enrollment: Enrollment) -> Router<Commands> {
    Router::new()
        .route("/v1/minions", get(list_minions))
        .route("/v1/minions/{id}", get(show_minion))
        .route("/v1/keys", get(list_keys))
        .route("/v1/keys/{id}", axum::routing::delete(delete_key))
        .route("/v1/keys/{id}/accept", post(accept_key))
        .route("/v1/keys/{id}/reject", post(reject_key))
        .route("/v1/enrollment_tokens", post(move |authed, body| create_token(authed, body, enrollment.clone())))
}

/// `?pattern=` (an id glob; default every one).
#[derive(Deserialize, JsonSchema)]
pub(super) struct Pattern {
    /// Id glob.
    pattern: Option<String>,
}

/// Every match, asked for a page at a time: each page is one short step of the master's loop,
/// so listing a large fleet never holds it.
async fn list_minions(Authed(mut s): Authed, Query(q): Query<Pattern>) -> ApiResult {
    const PAGE: u32 = 1_000;
    let pattern = q.pattern.unwrap_or_else(|| "*".into());
    let mut pages = MinionPages::new();
    loop {
        let body = RequestBody::MinionList { pattern: pattern.clone(), after: pages.after(), limit: Some(PAGE) };
        let ResponseBody::Minions(page) = s.request(body).await? else {
            return Err(unexpected());
        };
        if pages.add(page, PAGE) {
            return ok("minions", pages.into_minions());
        }
    }
}

async fn show_minion(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    match s.request(RequestBody::MinionList { pattern: id.clone(), after: None, limit: None }).await? {
        ResponseBody::Minions(minions) => match minions.into_iter().find(|m| m.id == id) {
            Some(minion) => ok("minion", minion),
            None => Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no minion {id}"))),
        },
        _ => Err(unexpected()),
    }
}

async fn list_keys(Authed(mut s): Authed, Query(q): Query<Pattern>) -> ApiResult {
    match s.request(RequestBody::KeyList { pattern: q.pattern.unwrap_or_else(|| "*".into()) }).await? {
        ResponseBody::Keys(keys) => ok("keys", keys),
        _ => Err(unexpected()),
    }
}

async fn changed(s: &mut LocalSession, body: RequestBody) -> ApiResult {
    match s.request(body).await? {
        ResponseBody::Changed(ids) => ok("changed", ids),
        _ => Err(unexpected()),
    }
}

async fn accept_key(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    changed(&mut s, RequestBody::KeyAccept { pattern: literal(&id)? }).await
}

async fn reject_key(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    changed(&mut s, RequestBody::KeyReject { pattern: literal(&id)? }).await
}

async fn delete_key(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    changed(&mut s, RequestBody::KeyDelete { pattern: literal(&id)? }).await
}

/// A path names one minion: a glob there is refused, not applied to every match.
fn literal(id: &str) -> Result<String, ApiError> {
    if halite_protocol::glob::is_pattern(id) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("{id:?} is a pattern, not a minion id"),
        ));
    }
    Ok(id.to_owned())
}

/// An enrollment token to create.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenRequest {
    /// The only minion id the token enrolls.
    minion: String,
    /// Seconds it stays valid (default 3600).
    #[serde(default)]
    ttl_secs: Option<u64>,
    /// The addresses guests reach the masters at (`host:port`); default the master's `listen`
    /// address, refused when only this host could reach it.
    #[serde(default)]
    master_addresses: Vec<String>,
    /// Replace the minion's accepted key when the token is used (refused otherwise, with 409,
    /// when the id already has an accepted key).
    #[serde(default)]
    replace: bool,
}

async fn create_token(
    Authed(mut s): Authed,
    axum::Json(request): axum::Json<TokenRequest>,
    enrollment: Enrollment,
) -> ApiResult {
    let masters =
        if request.master_addresses.is_empty() { vec![enrollment.listen.clone()] } else { request.master_addresses };
    if let Some(local) = masters.iter().find(|m| enrollment::only_this_host(m)) {
        let why = format!("{local} is reachable from this host only; give master_addresses the guests can reach");
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "bad_request", why));
    }
    let ttl_ms = request.ttl_secs.unwrap_or(3600).saturating_mul(1000);
    let ResponseBody::Token(token) =
        s.request(RequestBody::TokenCreate { minion: request.minion, ttl_ms, replace: request.replace }).await?
    else {
        return Err(unexpected());
    };
    let file = enrollment::enrollment_toml(&masters, &enrollment.master_key_hex, &token.minion, &token.token);
    ok(
        "enrollment_token",
        json!({
            "token": token.token, "minion": token.minion, "expires_at_ms": token.expires_at_ms,
            "enrollment": file, "user_data": enrollment::cloud_config(&file),
        }),
    )
}
