//! `GET /metrics` (Prometheus' text format), `/healthz` (the process answers) and `/readyz`
//! (its core is stepping and its store took the last write), on `[metrics] listen` and, behind
//! a gateway token for `/metrics`, on the gateway.

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;

/// The content types of the two formats.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `/metrics`, `/healthz` and `/readyz`, unauthenticated (for `[metrics] listen`).
pub(crate) fn router(metrics: Metrics) -> Router {
    let figures = metrics.clone();
    Router::new()
        .route("/metrics", get(move |headers: HeaderMap| async move { text(&figures, &headers) }))
        .merge(health(metrics))
}

/// `/healthz` and `/readyz` alone.
pub(crate) fn health<S: Clone + Send + Sync + 'static>(metrics: Metrics) -> Router<S> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(move || async move { ready(&metrics) }))
}

/// The figures as a response: OpenMetrics to a reader that asks for it (Prometheus does),
/// the classic text format otherwise.
pub(crate) fn text(metrics: &Metrics, headers: &HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if accept.contains("application/openmetrics-text") {
        ([(header::CONTENT_TYPE, OPENMETRICS)], metrics.encode()).into_response()
    } else {
        ([(header::CONTENT_TYPE, CLASSIC)], metrics.encode_classic()).into_response()
    }
}

fn ready(metrics: &Metrics) -> Response {
    match metrics.not_ready(crate::clock::Clock::now(&crate::clock::SystemClock)) {
        None => (StatusCode::OK, "ready\n".to_owned()).into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
    }
}
