//! Sends a deployment's signal to the engine's `deploy_signal_id` URL, as heat-config-notify
//! does: the JSON body (trimmed to 950,000 bytes), `content-type: application/json`, POST or
//! PUT, retried on connection errors and 5xx.
//!
//! The master relays (not the minion): the minion stays small and needs no route to the
//! engine's API, and a relay still pending when the master stops is resumed at its next start.

use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{debug, warn};

/// heat-config-notify's limit: Heat refuses bodies over `max_json_body_size` (1 MiB).
pub(crate) const MAX_BODY: usize = 950_000;
/// Retries after the first attempt, as heat-config-notify's urllib3 `Retry(total=10)`.
const RETRIES: u32 = 10;

/// What a relay asks for.
#[derive(Debug, Clone)]
pub(crate) struct RelayRequest {
    /// The deployment.
    pub(crate) deployment_id: String,
    /// The derived config whose signal this is (a newer one supersedes it).
    pub(crate) derived_config_id: String,
    /// Where to.
    pub(crate) url: String,
    /// `POST` or `PUT`.
    pub(crate) verb: &'static str,
    /// The JSON body.
    pub(crate) body: Vec<u8>,
}

/// How a relay ended.
#[derive(Debug, Clone)]
pub(crate) struct RelayDone {
    /// The request.
    pub(crate) request: RelayRequest,
    /// The final HTTP status, or why no response came.
    pub(crate) result: Result<u16, String>,
}

/// Starts a relay in the background; the outcome comes back on `done`.
pub(crate) fn spawn(client: reqwest::Client, request: RelayRequest, done: mpsc::UnboundedSender<RelayDone>) {
    tokio::spawn(async move {
        let result = send(&client, &request).await;
        let _ = done.send(RelayDone { request, result });
    });
}

async fn send(client: &reqwest::Client, request: &RelayRequest) -> Result<u16, String> {
    let mut last = String::new();
    for attempt in 0..=RETRIES {
        if attempt > 0 {
            // 0.5 s, 1 s, 2 s, ... as urllib3's backoff_factor=0.5, at most 30 s apart.
            let delay =
                Duration::from_millis(500u64.saturating_mul(1 << (attempt - 1).min(6))).min(Duration::from_secs(30));
            tokio::time::sleep(delay).await;
        }
        let builder = if request.verb == "PUT" { client.put(&request.url) } else { client.post(&request.url) };
        let response = builder.header("content-type", "application/json").body(request.body.clone()).send().await;
        match response {
            Ok(r) if r.status().is_server_error() => {
                last = format!("HTTP {}", r.status().as_u16());
                debug!(deployment = %request.deployment_id, attempt, status = r.status().as_u16(), "signal relay retried");
            }
            Ok(r) => return Ok(r.status().as_u16()),
            Err(error) => {
                // The URL is a credential (a signed or temporary URL): never logged.
                last = without_url(&error);
                debug!(deployment = %request.deployment_id, attempt, error = %last, "signal relay retried");
            }
        }
    }
    warn!(deployment = %request.deployment_id, error = %last, "signal relay gave up");
    Err(last)
}

fn without_url(error: &reqwest::Error) -> String {
    let kind = if error.is_connect() {
        "connection failed"
    } else if error.is_timeout() {
        "timed out"
    } else if error.is_request() {
        "request failed"
    } else {
        "failed"
    };
    let mut source = std::error::Error::source(error);
    let mut detail = String::new();
    while let Some(cause) = source {
        detail = cause.to_string();
        source = cause.source();
    }
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {detail}")
    }
}

/// The HTTP client relays use: bounded connect and request times.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_default()
}
