//! Sends a deployment's signal to the engine's `deploy_signal_id` URL, as heat-config-notify
//! does: the JSON body (trimmed to 950,000 bytes), `content-type: application/json`, POST or
//! PUT, retried on connection errors and 5xx.
//!
//! The master relays (not the minion): the minion stays small and needs no route to the
//! engine's API, and a relay still pending when the master stops is resumed at its next start.
//! It contacts only what `[deploy] signal_hosts` allows ([`crate::config::signal_hosts`]), connects
//! only to addresses it checked, and follows no redirects.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::config::signal_hosts::SignalHosts;
use crate::relay_requests::{Failure, RelayDone, RelayRequest};

/// Retries after the first attempt, as heat-config-notify's urllib3 `Retry(total=10)`.
const RETRIES: u32 = 10;

/// Starts a relay in the background; the outcome comes back on `done`.
pub(crate) fn spawn(hosts: SignalHosts, request: RelayRequest, done: mpsc::UnboundedSender<RelayDone>) {
    tokio::spawn(async move {
        let result = send(&hosts, &request).await;
        let _ = done.send(RelayDone { request, result, written_in_doubt: false });
    });
}

pub(crate) async fn send(hosts: &SignalHosts, request: &RelayRequest) -> Result<u16, Failure> {
    let mut last = String::new();
    for attempt in 0..=RETRIES {
        if attempt > 0 {
            // 0.5 s, 1 s, 2 s, ... as urllib3's backoff_factor=0.5, at most 30 s apart.
            let delay =
                Duration::from_millis(500u64.saturating_mul(1 << (attempt - 1).min(6))).min(Duration::from_secs(30));
            tokio::time::sleep(delay).await;
        }
        // Checked again at every attempt: the config may have changed, and a name is resolved
        // afresh (each time checked, and connected to only as checked).
        let client = match pinned_client(hosts, &request.url).await {
            Ok(client) => client,
            Err(Failure::NoAnswer(why)) => {
                last = why;
                debug!(deployment = %request.deployment_id, attempt, error = %last, "signal relay retried");
                continue;
            }
            Err(refused) => {
                warn!(deployment = %request.deployment_id, error = %refused, "signal relay refused");
                return Err(refused);
            }
        };
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
    Err(Failure::NoAnswer(last))
}

/// An HTTP client for one attempt that connects only to the URL's checked addresses: the
/// host is resolved once, every address checked against the allowlist, and the client's
/// resolver answers with exactly those. No redirects are followed (a listed host could send
/// the relay anywhere) and no proxy from the environment is used (it would connect instead).
async fn pinned_client(hosts: &SignalHosts, url: &str) -> Result<reqwest::Client, Failure> {
    let destination = hosts.admit_url(url)?;
    let addrs: Vec<SocketAddr> = match destination.literal {
        Some(ip) => vec![SocketAddr::new(ip, destination.port)],
        None => tokio::net::lookup_host((destination.host.as_str(), destination.port))
            .await
            .map_err(|e| Failure::NoAnswer(format!("resolving {} failed: {e}", destination.host)))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(Failure::NoAnswer(format!("{} has no addresses", destination.host)));
    }
    for addr in &addrs {
        hosts.admit_address(&destination.host, addr.ip())?;
    }
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(Pinned(addrs)))
        .build()
        .map_err(|e| Failure::NoAnswer(format!("building the HTTP client failed: {e}")))
}

/// A resolver that answers every name with the addresses already checked.
struct Pinned(Vec<SocketAddr>);

impl Resolve for Pinned {
    fn resolve(&self, _name: Name) -> Resolving {
        let addrs: Addrs = Box::new(self.0.clone().into_iter());
        Box::pin(std::future::ready(Ok(addrs)))
    }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::config::signal_hosts::Refused;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// An HTTP server on loopback answering every request with `response`; counts requests.
    async fn server(response: String) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut buf = vec![0; 65536];
                let _ = stream.read(&mut buf).await;
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        (url, hits)
    }

    fn answer(status: &str, extra: &str) -> String {
        format!("HTTP/1.1 {status}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n")
    }

    fn request(url: String) -> RelayRequest {
        RelayRequest {
            deployment_id: "d1".into(),
            derived_config_id: "c1".into(),
            url,
            verb: "PUT",
            body: b"{}".to_vec(),
        }
    }

    fn hosts(list: &[&str]) -> SignalHosts {
        SignalHosts::parse(&list.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>()).expect("list")
    }

    #[tokio::test]
    async fn loopback_is_contacted_only_when_listed() {
        let (url, hits) = server(answer("200 OK", "")).await;
        let target = request(format!("{url}/admin"));
        let refused = send(&hosts(&[]), &target).await.expect_err("no list, no relay");
        assert_eq!(refused, Failure::Refused(Refused::Off));
        let refused = send(&hosts(&["heat.example.com"]), &target).await.expect_err("not listed");
        assert!(matches!(refused, Failure::Refused(Refused::NotListed(_))), "{refused:?}");
        assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
        assert_eq!(send(&hosts(&["127.0.0.1"]), &target).await, Ok(200));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_listed_name_that_resolves_to_loopback_is_refused_unless_its_address_is_listed() {
        let (url, hits) = server(answer("200 OK", "")).await;
        let port = url.rsplit(':').next().expect("port");
        let target = request(format!("http://localhost:{port}/signal"));
        let refused = send(&hosts(&["localhost"]), &target).await.expect_err("resolves to loopback");
        assert!(matches!(refused, Failure::Refused(Refused::SpecialAddress { .. })), "{refused:?}");
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        // Listing the loopback ranges lets it through (an operator's explicit choice). Only the
        // checked addresses are connected to: ::1 has no server, 127.0.0.1 does.
        let listed = hosts(&["localhost", "127.0.0.0/8", "::1"]);
        assert_eq!(send(&listed, &target).await, Ok(200));
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let (elsewhere, elsewhere_hits) = server(answer("200 OK", "")).await;
        let location = format!("Location: {elsewhere}/admin\r\n");
        let (url, hits) = server(answer("302 Found", &location)).await;
        assert_eq!(send(&hosts(&["127.0.0.1"]), &request(format!("{url}/signal"))).await, Ok(302));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert_eq!(elsewhere_hits.load(Ordering::SeqCst), 0, "the redirect went nowhere");
    }
}
