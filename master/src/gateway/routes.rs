//! The gateway's routes. Each handler is given the local session its request was
//! authenticated with (`auth.rs`), asks the core, and maps the answer to JSON and an HTTP
//! status.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use halite_protocol::message::{
    DeploymentGroupUpdate, DeploymentUpdate, ErrorKind, JobSpec, NewDeployment, NewDeploymentGroup, NewSoftwareConfig,
    PublishRequest, RequestBody, ResponseBody, Rollout, Target, TargetKind, Value, DEFAULT_JOB_TIMEOUT_MS,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::auth::Authed;
use super::local::{CallError, LocalCommand, LocalSession};

pub(super) type Commands = mpsc::Sender<LocalCommand>;

/// Every route. `openapi.rs` describes exactly these.
pub(super) fn router(
    commands: Commands,
    metrics: crate::metrics::Metrics,
    enrollment: super::fleet::Enrollment,
) -> Router {
    let figures = metrics.clone();
    Router::new()
        .merge(super::fleet::routes(enrollment))
        .merge(super::principals::routes())
        .merge(super::audit::routes())
        .route(
            "/metrics",
            get(move |session: Authed, headers: HeaderMap| async move { metrics_for(&session, &figures, &headers) }),
        )
        .merge(crate::metrics_http::health(metrics))
        .route("/v1/openapi.json", get(|| async { Json(super::openapi::document()) }))
        .route("/v1/software_configs", get(list_configs).post(create_config))
        .route("/v1/software_configs/{id}", get(show_config).delete(delete_config))
        .route("/v1/software_deployments", get(list_deployments).post(create_deployment))
        .route("/v1/software_deployments/{id}", get(show_deployment).put(update_deployment).delete(delete_deployment))
        .route("/v1/software_deployments/metadata/{server_id}", get(server_metadata))
        .route("/v1/software_deployment_groups", post(create_group))
        .route("/v1/software_deployment_groups/{id}", get(show_group).put(update_group))
        .route("/v1/jobs", get(list_jobs).post(publish_job))
        .route("/v1/run", post(run_job))
        .route("/v1/jobs/{jid}", get(show_job))
        .route("/v1/jobs/{jid}/pause", post(pause_job))
        .route("/v1/jobs/{jid}/resume", post(resume_job))
        .route("/v1/jobs/{jid}/cancel", post(cancel_job))
        .route("/v1/events", get(events).post(fire_event))
        .fallback(super::errors::no_route)
        .layer(axum::middleware::from_fn_with_state(commands.clone(), super::auth::authenticate))
        .layer(axum::middleware::map_response(super::errors::as_json))
        .with_state(commands)
}

/// `GET /metrics`: fleet-wide figures, for root's and administrators' tokens only.
fn metrics_for(session: &Authed, figures: &crate::metrics::Metrics, headers: &HeaderMap) -> Response {
    if !session.0.reads_metrics() {
        let why = "the master's metrics are for administrators (fleet-wide figures)";
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", why.into()).into_response();
    }
    crate::metrics_http::text(figures, headers)
}

/// An error as JSON: `{"error": {"kind": ..., "message": ...}}`; a 401 also carries the
/// `WWW-Authenticate: Bearer` challenge.
pub(super) struct ApiError(StatusCode, String, String);

impl ApiError {
    pub(super) fn new(status: StatusCode, kind: &str, message: String) -> Self {
        ApiError(status, kind.to_owned(), message)
    }

    /// The body it is answered with (also the data of a stream's last `error` event).
    pub(super) fn body(&self) -> serde_json::Value {
        json!({ "error": { "kind": self.1, "message": self.2 } })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(self.body());
        if self.0 == StatusCode::UNAUTHORIZED {
            return (self.0, [super::errors::challenge()], body).into_response();
        }
        (self.0, body).into_response()
    }
}

impl From<CallError> for ApiError {
    fn from(error: CallError) -> Self {
        match error {
            CallError::Unauthorized(why) => ApiError(StatusCode::UNAUTHORIZED, "unauthorized".into(), why),
            CallError::Unavailable(why) => ApiError(StatusCode::SERVICE_UNAVAILABLE, "unavailable".into(), why),
            CallError::Refused(kind, why) => {
                let status = match kind {
                    ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
                    ErrorKind::Forbidden => StatusCode::FORBIDDEN,
                    ErrorKind::NotFound => StatusCode::NOT_FOUND,
                    ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorKind::Conflict => StatusCode::CONFLICT,
                    _ => StatusCode::BAD_REQUEST,
                };
                let name = serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned));
                ApiError(status, name.unwrap_or_else(|| "error".into()), why)
            }
        }
    }
}

pub(super) type ApiResult = Result<Response, ApiError>;

pub(super) fn unexpected() -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, "internal".into(), "unexpected answer from the master".into())
}

pub(super) fn ok(key: &str, value: impl serde::Serialize) -> ApiResult {
    Ok(Json(json!({ key: value })).into_response())
}

/// `?limit=`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct Limit {
    /// At most this many (default 100).
    limit: Option<u32>,
}

async fn create_config(Authed(mut s): Authed, Json(new): Json<NewSoftwareConfig>) -> ApiResult {
    match s.request(RequestBody::ConfigCreate(new)).await? {
        ResponseBody::Config(config) => ok("software_config", config),
        _ => Err(unexpected()),
    }
}

async fn list_configs(Authed(mut s): Authed, Query(q): Query<Limit>) -> ApiResult {
    match s.request(RequestBody::ConfigList { limit: q.limit.unwrap_or(100) }).await? {
        ResponseBody::Configs(configs) => ok("software_configs", configs),
        _ => Err(unexpected()),
    }
}

async fn show_config(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    match s.request(RequestBody::ConfigShow { id }).await? {
        ResponseBody::Config(config) => ok("software_config", config),
        _ => Err(unexpected()),
    }
}

async fn delete_config(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    s.request(RequestBody::ConfigDelete { id }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn create_deployment(Authed(mut s): Authed, Json(new): Json<NewDeployment>) -> ApiResult {
    match s.request(RequestBody::DeploymentCreate(new)).await? {
        ResponseBody::Deployment(deployment) => ok("software_deployment", deployment),
        _ => Err(unexpected()),
    }
}

/// `?server_id=`.
#[derive(Deserialize, JsonSchema)]
pub(super) struct ServerFilter {
    /// Only this server's deployments.
    server_id: Option<String>,
}

async fn list_deployments(Authed(mut s): Authed, Query(q): Query<ServerFilter>) -> ApiResult {
    match s.request(RequestBody::DeploymentList { server_id: q.server_id }).await? {
        ResponseBody::Deployments(deployments) => ok("software_deployments", deployments),
        _ => Err(unexpected()),
    }
}

async fn create_group(Authed(mut s): Authed, Json(new): Json<NewDeploymentGroup>) -> ApiResult {
    match s.request(RequestBody::DeploymentGroupCreate(new)).await? {
        ResponseBody::DeploymentGroup(group) => ok("software_deployment_group", group),
        _ => Err(unexpected()),
    }
}

async fn show_group(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    match s.request(RequestBody::DeploymentGroupShow { id }).await? {
        ResponseBody::DeploymentGroup(group) => ok("software_deployment_group", group),
        _ => Err(unexpected()),
    }
}

async fn update_group(
    Authed(mut s): Authed,
    Path(id): Path<String>,
    Json(update): Json<DeploymentGroupUpdate>,
) -> ApiResult {
    match s.request(RequestBody::DeploymentGroupUpdate { id, update }).await? {
        ResponseBody::DeploymentGroup(group) => ok("software_deployment_group", group),
        _ => Err(unexpected()),
    }
}

async fn show_deployment(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    match s.request(RequestBody::DeploymentShow { id }).await? {
        ResponseBody::Deployment(deployment) => ok("software_deployment", deployment),
        _ => Err(unexpected()),
    }
}

async fn update_deployment(
    Authed(mut s): Authed,
    Path(id): Path<String>,
    Json(update): Json<DeploymentUpdate>,
) -> ApiResult {
    match s.request(RequestBody::DeploymentUpdate { id, update }).await? {
        ResponseBody::Deployment(deployment) => ok("software_deployment", deployment),
        _ => Err(unexpected()),
    }
}

async fn delete_deployment(Authed(mut s): Authed, Path(id): Path<String>) -> ApiResult {
    s.request(RequestBody::DeploymentDelete { id }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn server_metadata(Authed(mut s): Authed, Path(server_id): Path<String>) -> ApiResult {
    match s.request(RequestBody::ServerConfigs { server_id }).await? {
        ResponseBody::Items(items) => ok("metadata", items),
        _ => Err(unexpected()),
    }
}

/// `GET /v1/jobs`'s query: a limit and the filter, as `halite jobs list` takes them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobQuery {
    limit: Option<u32>,
    function: Option<String>,
    target: Option<String>,
    caller: Option<String>,
    state: Option<halite_protocol::message::MinionJobState>,
    since_ms: Option<u64>,
    until_ms: Option<u64>,
}

async fn list_jobs(Authed(mut s): Authed, Query(q): Query<JobQuery>) -> ApiResult {
    let JobQuery { limit, function, target, caller, state, since_ms, until_ms } = q;
    let filter = halite_protocol::message::JobFilter { function, target, caller, state, since_ms, until_ms };
    match s.request(RequestBody::JobList { limit: limit.unwrap_or(100), filter }).await? {
        ResponseBody::Jobs(jobs) => ok("jobs", jobs),
        _ => Err(unexpected()),
    }
}

/// A request answered with a job, as `{"job": ...}`.
async fn job_answer(s: &mut LocalSession, body: RequestBody) -> ApiResult {
    match s.request(body).await? {
        ResponseBody::Job(job) => ok("job", job),
        _ => Err(unexpected()),
    }
}

async fn show_job(Authed(mut s): Authed, Path(jid): Path<String>) -> ApiResult {
    job_answer(&mut s, RequestBody::JobShow { jid }).await
}

async fn pause_job(Authed(mut s): Authed, Path(jid): Path<String>) -> ApiResult {
    job_answer(&mut s, RequestBody::JobPause { jid }).await
}

async fn resume_job(Authed(mut s): Authed, Path(jid): Path<String>) -> ApiResult {
    job_answer(&mut s, RequestBody::JobResume { jid }).await
}

/// Cancels a job the principal may see (404 like any unknown job otherwise); answers with the
/// job as it is right after (running minions report `cancelled` as they stop).
async fn cancel_job(Authed(mut s): Authed, Path(jid): Path<String>) -> ApiResult {
    let ResponseBody::Job(job) = s.request(RequestBody::JobShow { jid: jid.clone() }).await? else {
        return Err(unexpected());
    };
    if job.minions.iter().all(|m| m.state.is_final()) {
        let why = format!("job {jid} has already finished");
        return Err(ApiError(StatusCode::CONFLICT, "conflict".into(), why));
    }
    s.cancel(jid.clone()).await?;
    // Answered in order: the job as the cancel left it.
    match s.request(RequestBody::JobShow { jid }).await? {
        ResponseBody::Job(job) => ok("job", job),
        _ => Err(unexpected()),
    }
}

/// An event to fire on the bus, as `engine/<principal>/<tag>`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FiredEvent {
    /// Relative tag: 1-255 bytes of `A-Za-z0-9_.-/`, no empty or `..` segment.
    tag: String,
    /// The event's data (at most 64 KiB as JSON).
    #[serde(default)]
    data: serde_json::Value,
}

async fn fire_event(Authed(mut s): Authed, Json(event): Json<FiredEvent>) -> ApiResult {
    match s.request(RequestBody::EventFire { tag: event.tag, data: event.data }).await? {
        ResponseBody::Changed(mut tags) => ok("event", json!({ "tag": tags.pop().unwrap_or_default() })),
        _ => Err(unexpected()),
    }
}

// A `JobSpec` as the HTTP API spells it (a target expression and its kind apart, seconds rather
// than milliseconds, defaults for what is left out); this doc comment is the OpenAPI schema's
// description.
/// A job to publish.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobRequest {
    /// Target expression.
    target: String,
    /// How to read it: `glob` (default), `list`, `regex`, `grain`, `compound`, `nodegroup`.
    #[serde(default)]
    target_kind: Option<TargetKind>,
    /// `module.function`.
    function: String,
    /// Positional arguments.
    #[serde(default)]
    args: Vec<Value>,
    /// Keyword arguments.
    #[serde(default)]
    kwargs: std::collections::BTreeMap<String, Value>,
    /// Seconds each minion may run it (default 3600, as the CLI's `--job-timeout` and the SDKs').
    #[serde(default)]
    timeout_secs: Option<u64>,
    /// Seconds offline minions are waited for (default 0: not at all).
    #[serde(default)]
    ttl_secs: Option<u64>,
    /// How the job reaches its targets over time (a sliding window, an error budget,
    /// canaries, abort events); absent: every target at once.
    #[serde(default)]
    rollout: Option<Rollout>,
}

impl From<JobRequest> for JobSpec {
    /// The job the body asks for, with the HTTP API's defaults: a glob target, the SDKs'
    /// timeout, no TTL.
    fn from(job: JobRequest) -> Self {
        let JobRequest { target, target_kind, function, args, kwargs, timeout_secs, ttl_secs, rollout } = job;
        JobSpec {
            target: Target { kind: target_kind.unwrap_or(TargetKind::Glob), expr: target },
            function,
            args,
            kwargs,
            timeout_ms: timeout_secs.map_or(DEFAULT_JOB_TIMEOUT_MS, |s| s.saturating_mul(1000)),
            ttl_ms: ttl_secs.unwrap_or(0).saturating_mul(1000),
            rollout,
        }
    }
}

async fn publish_job(Authed(mut s): Authed, Json(job): Json<JobRequest>) -> ApiResult {
    let published = s.publish(PublishRequest::new(0, job.into())).await?;
    ok("job", json!({ "jid": published.jid, "minions": published.minions, "unknown": published.unknown }))
}

/// A job to run and wait for (salt-api's `client=local`): the job's fields, and how long to
/// wait for its minions.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunRequest {
    #[serde(flatten)]
    job: JobRequest,
    /// Seconds to wait for every minion to finish (default 30, at most 3600). The job goes
    /// on past it; the answer then says what is still running.
    #[serde(default)]
    wait_secs: Option<u64>,
}

/// The longest `POST /v1/run` waits.
const RUN_WAIT_MAX_SECS: u64 = 3600;

/// Publishes a job and answers once every minion has finished, or when `wait_secs` passes:
/// the job with every minion's state and return, whether it is done, and which minions are
/// still going.
async fn run_job(Authed(mut s): Authed, Json(run): Json<RunRequest>) -> ApiResult {
    let wait = std::time::Duration::from_secs(run.wait_secs.unwrap_or(30).min(RUN_WAIT_MAX_SECS));
    let published = s.publish(PublishRequest::new(0, run.job.into())).await?;
    let jid = published.jid;
    // The core is in this process: asking again is a message, not a round trip over a network.
    let finished = tokio::time::timeout(wait, async {
        let mut pause = std::time::Duration::from_millis(20);
        loop {
            let job = shown_job(&mut s, &jid).await?;
            if job.minions.iter().all(|m| m.state.is_final()) {
                return Ok::<_, ApiError>(job);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    })
    .await;
    let job = match finished {
        Ok(job) => job?,
        Err(_) => shown_job(&mut s, &jid).await?,
    };
    let still_going: Vec<&str> =
        job.minions.iter().filter(|m| !m.state.is_final()).map(|m| m.minion.as_str()).collect();
    let done = still_going.is_empty();
    Ok(Json(json!({ "jid": jid, "done": done, "still_going": still_going, "job": job })).into_response())
}

async fn shown_job(s: &mut LocalSession, jid: &str) -> Result<halite_protocol::message::JobDetail, ApiError> {
    match s.request(RequestBody::JobShow { jid: jid.to_owned() }).await? {
        ResponseBody::Job(job) => Ok(job),
        _ => Err(unexpected()),
    }
}

/// `?tag=` (repeatable, globs; default everything the principal may see).
#[derive(Deserialize, JsonSchema)]
pub(super) struct TagFilter {
    /// Tag globs, comma-separated.
    tag: Option<String>,
}

/// The bus as server-sent events. A subscription the core refuses (not covered by the
/// principal's `events` rules: 403; malformed: 400) is answered as an error before any `200`.
/// The stream lasts as long as the session: when the core ends it (the token revoked or
/// expired, the principal changed), a last `error` event says why and the body ends.
async fn events(Authed(mut s): Authed, h: HeaderMap, Query(q): Query<TagFilter>) -> ApiResult {
    let patterns: Vec<String> = match q.tag {
        Some(tags) => tags.split(',').map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect(),
        None => vec!["*".into()],
    };
    if patterns.is_empty() {
        return Err(ApiError(StatusCode::BAD_REQUEST, "bad_request".into(), "tag: no tag pattern given".into()));
    }
    // A reconnecting EventSource sends the last id it saw: it gets what it missed first.
    let after = h.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    s.subscribe(patterns, after).await?;
    let stream = futures_util::stream::unfold(Some(s), |session| async move {
        let mut session = session?;
        let sse = match session.next_event().await? {
            Ok(event) => {
                let data = serde_json::to_string(&json!({ "tag": event.tag, "data": event.data })).unwrap_or_default();
                // The id first, so a reader has it when the data line ends the event.
                let mut sse = SseEvent::default();
                if let Some(id) = event.id {
                    sse = sse.id(id);
                }
                return Some((Ok::<_, Infallible>(sse.event("halite").data(data)), Some(session)));
            }
            Err(ended) => SseEvent::default().event("error").data(ApiError::from(ended).body().to_string()),
        };
        // The last event: the stream ends after it.
        Some((Ok(sse), None))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_of(body: serde_json::Value) -> JobSpec {
        serde_json::from_value::<JobRequest>(body).expect("a job body").into()
    }

    #[test]
    fn a_job_body_maps_to_the_job_it_always_asked_for() {
        // Only what must be said: a glob, the SDKs' timeout, no TTL, no rollout.
        let glob = Target { kind: TargetKind::Glob, expr: "web*".into() };
        assert_eq!(spec_of(json!({ "target": "web*", "function": "test.ping" })), JobSpec::new(glob, "test.ping"));
        assert_eq!(
            spec_of(json!({ "target": "web*", "function": "test.ping", "target_kind": null, "timeout_secs": null,
                            "ttl_secs": null, "rollout": null })),
            JobSpec {
                target: Target { kind: TargetKind::Glob, expr: "web*".into() },
                function: "test.ping".into(),
                args: Vec::new(),
                kwargs: std::collections::BTreeMap::new(),
                timeout_ms: 3_600_000,
                ttl_ms: 0,
                rollout: None,
            }
        );
        // Everything said: seconds become milliseconds.
        let full = spec_of(json!({
            "target": "web1,web2", "target_kind": "list", "function": "pkg.install",
            "args": ["nginx", 2], "kwargs": { "refresh": true }, "timeout_secs": 60, "ttl_secs": 5,
            "rollout": { "batch": { "percent": 25 }, "batch_wait_ms": 100, "canary": 1 },
        }));
        assert_eq!(
            full,
            JobSpec {
                target: Target { kind: TargetKind::List, expr: "web1,web2".into() },
                function: "pkg.install".into(),
                args: vec![json!("nginx"), json!(2)],
                kwargs: std::collections::BTreeMap::from([("refresh".to_owned(), json!(true))]),
                timeout_ms: 60_000,
                ttl_ms: 5_000,
                rollout: Some(Rollout {
                    batch: Some(halite_protocol::message::Amount::Percent(25)),
                    batch_wait_ms: 100,
                    canary: 1,
                    ..Rollout::default()
                }),
            }
        );
        // A huge timeout saturates rather than wrapping; an unknown field is refused.
        let huge = spec_of(json!({ "target": "*", "function": "test.ping", "timeout_secs": u64::MAX }));
        assert_eq!(huge.timeout_ms, u64::MAX);
        assert!(
            serde_json::from_value::<JobRequest>(json!({ "target": "*", "function": "f.g", "timeout_ms": 1 })).is_err()
        );
    }
}
