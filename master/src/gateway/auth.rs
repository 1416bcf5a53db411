//! One authentication per request: before anything else of a request is looked at, its bearer
//! token opens the local session the handler then works in (the [`Authed`] extractor takes it
//! from the request). The core keeps that session bound to its token for as long as it lives.

use std::sync::{Arc, Mutex};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::debug;

use super::local::{CallError, LocalSession};
use super::routes::{ApiError, Commands};

/// The session a request was authenticated with, for its handler.
pub(super) struct Authed(pub(super) LocalSession);

/// Where the middleware leaves the session (request extensions must be `Clone`; the handler
/// takes the one session out).
#[derive(Clone)]
struct Slot(Arc<Mutex<Option<LocalSession>>>);

/// Paths served without a token: the OpenAPI document and the health checks (`/metrics`
/// needs one).
fn is_public(path: &str) -> bool {
    matches!(path, "/v1/openapi.json" | "/healthz" | "/readyz")
}

/// Authenticates a request (a body that does not parse is never the answer to a request
/// without a valid token) and hands its session on.
pub(super) async fn authenticate(State(commands): State<Commands>, mut request: Request, next: Next) -> Response {
    if !is_public(request.uri().path()) {
        match open(&commands, request.headers()).await {
            Ok(session) => {
                debug!(principal = session.principal(), path = request.uri().path(), "gateway request");
                request.extensions_mut().insert(Slot(Arc::new(Mutex::new(Some(session)))));
            }
            Err(error) => return error.into_response(),
        }
    }
    next.run(request).await
}

/// Opens the session of a request's bearer token.
async fn open(commands: &Commands, headers: &HeaderMap) -> Result<LocalSession, ApiError> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| CallError::Unauthorized("missing Authorization: Bearer token".into()))?;
    Ok(LocalSession::open(commands, token).await?)
}

impl<S: Send + Sync> FromRequestParts<S> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let session = parts.extensions.get::<Slot>().and_then(|slot| slot.0.lock().ok()?.take());
        // Every route but the public ones goes through `authenticate` first.
        session.map(Authed).ok_or_else(|| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the request was not authenticated".into())
        })
    }
}
