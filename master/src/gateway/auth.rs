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
        let addr = request.extensions().get::<super::connections::ClientAddr>().map(|client| client.0);
        match open(&commands, request.headers(), addr).await {
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
async fn open(
    commands: &Commands,
    headers: &HeaderMap,
    addr: Option<std::net::SocketAddr>,
) -> Result<LocalSession, ApiError> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| CallError::Unauthorized("missing Authorization: Bearer token".into()))?;
    Ok(LocalSession::open(commands, token, addr).await?)
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};

    use axum::body::Body;
    use halite_protocol::message::{Message, Response as Answer, ResponseBody};
    use halite_transport::PeerId;
    use tokio::sync::mpsc;
    use tower::ServiceExt;

    use super::super::fleet::Enrollment;
    use super::super::local::LocalCommand;
    use super::*;
    use crate::token_sessions::Opened;

    /// A stand-in core: opens a session for every token (counting them) and answers every
    /// request with an empty minion list.
    fn fake_core(mut commands: mpsc::Receiver<LocalCommand>, opened: Arc<AtomicU64>) {
        tokio::spawn(async move {
            let mut sessions = HashMap::new();
            while let Some(command) = commands.recv().await {
                match command {
                    LocalCommand::Connect { to_client, reply, .. } => {
                        let peer = PeerId(opened.fetch_add(1, Ordering::SeqCst));
                        sessions.insert(peer, to_client);
                        reply.send(Ok(Opened { peer, principal: "ops".into(), reads_metrics: false }));
                    }
                    LocalCommand::Message { peer, msg } => {
                        if let (Message::Request(request), Some(to)) = (*msg, sessions.get(&peer)) {
                            let body = ResponseBody::Minions(Vec::new());
                            let answer = Answer { request_id: request.request_id, body, more: false };
                            let _ = to.try_send(Message::Response(answer));
                        }
                    }
                    LocalCommand::Disconnect { peer } => {
                        sessions.remove(&peer);
                    }
                }
            }
        });
    }

    #[test]
    fn a_request_is_authenticated_once_and_its_handler_uses_that_session() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let (commands, to_core) = mpsc::channel(16);
            let opened = Arc::new(AtomicU64::new(0));
            fake_core(to_core, opened.clone());
            let enrollment = Enrollment { master_key_hex: String::new(), listen: "10.0.0.1:4506".into() };
            let app = super::super::routes::router(
                commands,
                crate::metrics::Metrics::new(std::time::Instant::now()),
                enrollment,
            );
            let request = Request::builder()
                .uri("/v1/minions")
                .header("authorization", "Bearer hal_test")
                .body(Body::empty())
                .expect("request");
            let response = app.clone().oneshot(request).await.expect("response");
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(opened.load(Ordering::SeqCst), 1, "one session per request");

            // No token: refused before any session is opened.
            let request = Request::builder().uri("/v1/minions").body(Body::empty()).expect("request");
            let response = app.oneshot(request).await.expect("response");
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            assert_eq!(opened.load(Ordering::SeqCst), 1);
        });
    }
}
