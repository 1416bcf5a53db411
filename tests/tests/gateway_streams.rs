//! A gateway event stream lives only as long as its token's authorisation: revoking the
//! token, its expiry, or a change of its principal ends the stream (after an `error` event
//! saying why), and a subscription the principal may not make is refused before any `200`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use halite_tests::http::{self, EventStream, StreamEvent};
use halite_tests::{wait_for, Cluster};
use serde_json::{json, Value};

/// How long an ended authorisation may take to end a stream: the master checks within a
/// second; the rest is slack for a loaded machine.
const CUT_WITHIN: Duration = Duration::from_secs(3);

fn gateway(cluster: &Cluster) -> String {
    let addr_file = cluster.dir.join("master/gateway.addr");
    wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok()).trim().to_owned()
}

/// `ops`, who may read `engine/*` events (and fire its own).
fn add_ops(cluster: &Cluster, keys: &str, events: &str) {
    let dir = cluster.dir.join(keys);
    cluster.add_principal("ops", &dir, &["--target", "*", "--function", "test.ping", "--event", events]);
}

fn token(cluster: &Cluster, args: &[&str]) -> String {
    let mut all = vec!["principal", "token", "ops"];
    all.extend_from_slice(args);
    let run = cluster.cli(&all);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout.trim().to_owned()
}

/// Opens a stream on `engine/*` and proves it live: an event fired with the token arrives.
fn live_stream(addr: &str, token: &str) -> EventStream {
    let mut stream = EventStream::open(addr, "/v1/events?tag=engine/*", token);
    assert_eq!(stream.status, 200);
    let fired = http::request("POST", addr, "/v1/events", Some(token), Some(r#"{"tag":"ping"}"#));
    assert_eq!(fired.status, 200, "{}", fired.body);
    assert_eq!(stream.next_data()["tag"], "engine/ops/ping");
    stream
}

/// Reads the stream to its end within [`CUT_WITHIN`]; returns its last event.
fn ended(stream: &mut EventStream) -> StreamEvent {
    let start = Instant::now();
    let events = stream.read_to_end(CUT_WITHIN);
    let last = events.last().cloned().unwrap_or_else(|| panic!("the stream ended without saying why"));
    assert!(start.elapsed() < CUT_WITHIN);
    last
}

fn assert_ended_because(event: &StreamEvent, why: &str) {
    assert_eq!(event.name, "error", "{event:?}");
    assert_eq!(event.data, json!({ "error": { "kind": "unauthorized", "message": why } }));
}

fn newest_token_id(cluster: &Cluster) -> String {
    let listed = cluster.cli(&["--out", "json", "principal", "tokens"]).json();
    listed[0]["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_revoked_or_expired_token_ends_its_event_streams() {
    let cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr = gateway(&cluster);
    add_ops(&cluster, "keys", "engine/*");

    // Revoked through the CLI: both of its streams end, another token's goes on.
    let doomed = token(&cluster, &[]);
    let id = newest_token_id(&cluster);
    let kept = token(&cluster, &[]);
    let mut first = live_stream(&addr, &doomed);
    let mut second = live_stream(&addr, &doomed);
    let mut other = live_stream(&addr, &kept);
    let revoked = cluster.cli(&["principal", "revoke-token", &id]);
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    assert_ended_because(&ended(&mut first), "token revoked");
    assert_ended_because(&ended(&mut second), "token revoked");
    let fired = http::request("POST", &addr, "/v1/events", Some(&kept), Some(r#"{"tag":"after"}"#));
    assert_eq!(fired.status, 200, "{}", fired.body);
    assert_eq!(other.next_data()["tag"], "engine/ops/after");
    assert_eq!(EventStream::open(&addr, "/v1/events", &doomed).status, 401);

    // Expired: the stream has a deadline, not only a check when it opened.
    let brief = token(&cluster, &["--ttl", "3s"]);
    let mut stream = live_stream(&addr, &brief);
    let start = Instant::now();
    let events = stream.read_to_end(Duration::from_secs(3) + CUT_WITHIN);
    assert!(start.elapsed() < Duration::from_secs(3) + CUT_WITHIN);
    assert_ended_because(events.last().expect("a last event"), "token expired");
    assert_eq!(EventStream::open(&addr, "/v1/events", &brief).status, 401);
}

#[test]
fn a_changed_or_removed_principal_ends_its_event_streams() {
    let cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr = gateway(&cluster);
    add_ops(&cluster, "keys", "engine/*");
    let token = token(&cluster, &[]);

    // Re-added with a narrower ACL through this very master: the stream opened under the
    // wider one ends, and the token now gets only what the new ACL allows.
    let mut wide = live_stream(&addr, &token);
    add_ops(&cluster, "narrower-keys", "engine/ops/*");
    assert_ended_because(&ended(&mut wide), "principal changed");
    assert_eq!(EventStream::open(&addr, "/v1/events?tag=engine/*", &token).status, 403);
    let mut narrow = EventStream::open(&addr, "/v1/events?tag=engine/ops/*", &token);
    assert_eq!(narrow.status, 200);

    // Removed: its stream ends.
    assert_eq!(cluster.cli(&["principal", "remove", "ops"]).code, 0);
    assert_ended_because(&ended(&mut narrow), "principal removed");
}

/// The body of a refused subscription (the error arrives before any `200`, so the response
/// is finite).
fn refused(addr: &str, path: &str, token: &str) -> (u16, Value) {
    let head = EventStream::open(addr, path, token);
    assert_ne!(head.status, 200, "{path}: a refused subscription must not get a 200 and a silent stream");
    let response = http::request("GET", addr, path, Some(token), None);
    (response.status, response.json())
}

#[test]
fn a_subscription_the_principal_may_not_make_is_refused_with_a_json_error() {
    let cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr = gateway(&cluster);
    add_ops(&cluster, "keys", "engine/*");
    let token = token(&cluster, &[]);

    for path in ["/v1/events?tag=minion/*", "/v1/events?tag=engine/*,halite/*", "/v1/events"] {
        let (status, body) = refused(&addr, path, &token);
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["error"]["kind"], "forbidden", "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("not allowed to subscribe"), "{path}: {message}");
    }
    let long = format!("/v1/events?tag=engine/{}", "x".repeat(300));
    for path in ["/v1/events?tag=,", long.as_str()] {
        let (status, body) = refused(&addr, path, &token);
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["kind"], "bad_request", "{path}: {body}");
    }
    // What the ACL covers is served.
    assert_eq!(EventStream::open(&addr, "/v1/events?tag=engine/ops/*", &token).status, 200);
}
