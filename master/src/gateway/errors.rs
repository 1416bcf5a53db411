//! Every answer the gateway gives is either its JSON document or the documented error body
//! `{"error": {"kind", "message"}}`: requests are authenticated before their bodies are read
//! (`auth.rs`), and what axum itself answers (a body that does not parse, an unknown route, a wrong method)
//! is rewritten into that shape.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::routes::ApiError;

/// The largest error text kept from a rewritten answer.
const MAX_ERROR_TEXT: usize = 4096;

/// Rewrites an error answer that is not JSON (axum's own rejections) into the documented body.
pub(super) async fn as_json(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (_, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_TEXT).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("error").to_lowercase() } else { text };
    let kind = match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::UNSUPPORTED_MEDIA_TYPE | StatusCode::UNPROCESSABLE_ENTITY | StatusCode::BAD_REQUEST => {
            "bad_request"
        }
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        // Not ready (`/readyz`), as the core's own 503s say it.
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "error",
    };
    ApiError::new(status, kind, message).into_response()
}

/// What an unknown route answers.
pub(super) async fn no_route() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route; /v1/openapi.json lists them".into())
        .into_response()
}

/// The challenge a 401 carries.
pub(super) fn challenge() -> (header::HeaderName, HeaderValue) {
    (header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"halite\""))
}
