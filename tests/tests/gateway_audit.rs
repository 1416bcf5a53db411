//! `GET /v1/audit` on a real master: pages that follow one another, each token reading only
//! what its principal may (a tenant its tenant's records), and the trail as server-sent
//! events that resume with `Last-Event-ID`, show each new record, never another tenant's,
//! and end when the token is revoked; following the trail does not grow it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::http::{self, EventStream};
use halite_tests::{wait_for, Cluster};
use serde_json::{json, Value};

fn gateway(cluster: &Cluster) -> String {
    let addr_file = cluster.dir.join("master/gateway.addr");
    wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok()).trim().to_owned()
}

fn token(cluster: &Cluster, principal: &str) -> String {
    let run = cluster.cli(&["principal", "token", principal]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout.trim().to_owned()
}

/// A page: its records' entries (with their ids) and the cursor after it.
fn page(addr: &str, token: &str, query: &str) -> (Vec<(i64, Value)>, Option<i64>) {
    let got = http::request("GET", addr, &format!("/v1/audit{query}"), Some(token), None);
    assert_eq!(got.status, 200, "{}", got.body);
    let body = got.json();
    let records = body["records"].as_array().unwrap().iter().map(|r| (r["id"].as_i64().unwrap(), entry(r))).collect();
    (records, body["next"].as_i64())
}

/// The entry a record holds.
fn entry(record: &Value) -> Value {
    serde_json::from_str(record["body"].as_str().unwrap()).unwrap()
}

fn publish(addr: &str, token: &str, target: &str) {
    let body = json!({ "target": target, "function": "test.ping" }).to_string();
    let published = http::request("POST", addr, "/v1/jobs", Some(token), Some(&body));
    assert_eq!(published.status, 200, "{}", published.body);
}

#[test]
fn the_gateway_pages_and_streams_the_trail_each_token_reading_its_own() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let addr = gateway(&cluster);
    let keys = cluster.dir.join("keys");
    cluster.two_tenants(&keys);
    let (root, proja, projb) = (token(&cluster, "root"), token(&cluster, "proja"), token(&cluster, "projb"));
    publish(&addr, &proja, "proja-web1");
    publish(&addr, &projb, "projb-web1");

    // Root pages through everything: in store order, no record twice, the cursor at the end.
    let (all, end) = page(&addr, &root, "?limit=1000");
    assert!(all.iter().any(|(_, e)| e["principal"] == "projb" && e["action"] == "publish"), "{all:?}");
    let mut paged = Vec::new();
    let mut after = String::new();
    loop {
        let (records, next) = page(&addr, &root, &format!("?limit=3{after}"));
        if records.is_empty() {
            assert_eq!(
                next.map(|n| format!("&after={n}")).unwrap_or_default(),
                after,
                "an empty page keeps the cursor"
            );
            break;
        }
        paged.extend(records.into_iter().map(|(id, _)| id));
        after = format!("&after={}", next.unwrap());
    }
    let ids: Vec<i64> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(paged[..ids.len()], ids[..]);
    assert!(paged.windows(2).all(|w| w[0] < w[1]), "{paged:?}");
    assert_eq!(ids.last().copied(), end);
    // Filters, as the CLI's.
    let (refusals, _) = page(&addr, &root, "?principal=projb&action=publish");
    assert!(!refusals.is_empty() && refusals.iter().all(|(_, e)| e["principal"] == "projb"));

    // A tenant's token reads its tenant's records alone, whatever it asks for.
    let (mine, _) = page(&addr, &proja, "?limit=1000");
    let published = mine.iter().find(|(_, e)| e["action"] == "publish").map(|(_, e)| e).unwrap();
    // Who, from where: the HTTP client's address.
    assert!(published["detail"]["address"].as_str().unwrap().starts_with("127.0.0.1:"), "{published}");
    assert!(mine.iter().all(|(_, e)| e["tenant"] == "proja"), "{mine:?}");
    assert!(page(&addr, &proja, "?tenant=projb").0.is_empty());
    assert!(page(&addr, &proja, "?principal=projb").0.iter().all(|(_, e)| e["tenant"] == "proja"));
    let bad = http::request("GET", &addr, "/v1/audit?chain=x", Some(&proja), None);
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(http::request("GET", &addr, "/v1/audit", None, None).status, 401);

    // The trail as a stream: from the cursor on, then each record as it is appended, never
    // another tenant's.
    let (_, cursor) = page(&addr, &proja, "?limit=1000");
    let cursor = cursor.unwrap();
    let (_, head) = page(&addr, &root, "?limit=1000&reads=true");
    let head = head.unwrap();
    let mut stream = EventStream::open(&addr, &format!("/v1/audit?after={cursor}"), &proja);
    assert_eq!(stream.status, 200);
    publish(&addr, &projb, "projb-web1");
    publish(&addr, &proja, "proja-web1");
    let (id, record) = loop {
        let (id, record) = stream.next_event();
        let e = entry(&record);
        assert_eq!(e["tenant"], "proja", "{e}");
        if e["action"] == "publish" {
            break (id.unwrap(), record);
        }
    };
    assert!(id.parse::<i64>().unwrap() > cursor);
    assert_eq!(record["id"].as_i64().unwrap().to_string(), id);
    // Resumed with the last id seen: the stream goes on after it.
    publish(&addr, &proja, "proja-web1");
    let mut resumed = EventStream::open_after(&addr, "/v1/audit", &proja, Some(&id));
    assert_eq!(resumed.status, 200);
    let (next, _) = resumed.next_event();
    assert!(next.unwrap().parse::<i64>().unwrap() > id.parse::<i64>().unwrap());
    drop(resumed);

    // Following the trail for seconds records each stream's reading once, not once per poll;
    // a listing shows reads of the trail only when asked.
    std::thread::sleep(Duration::from_secs(3));
    let (reads, _) = page(&addr, &root, &format!("?principal=proja&action=audit_list&after={head}"));
    // The stream and the resumed stream.
    assert_eq!(reads.len(), 2, "{reads:?}");
    assert!(page(&addr, &root, &format!("?principal=proja&after={head}"))
        .0
        .iter()
        .all(|(_, e)| e["action"] != "audit_list"));
    let (with_reads, _) = page(&addr, &root, &format!("?principal=proja&reads=true&after={head}"));
    assert!(with_reads.iter().any(|(_, e)| e["action"] == "audit_list"), "{with_reads:?}");

    // Revoked, the token's stream ends with a last error event.
    let tokens = cluster.cli(&["--out", "json", "principal", "tokens"]).json();
    let id = tokens.as_array().unwrap().iter().find(|t| t["principal"] == "proja").unwrap()["id"].clone();
    assert_eq!(cluster.cli(&["principal", "revoke-token", id.as_str().unwrap()]).code, 0);
    let events = stream.read_to_end(Duration::from_secs(10));
    let last = events.last().unwrap();
    assert_eq!(last.name, "error", "{events:?}");
    assert_eq!(last.data["error"]["kind"], "unauthorized");
}
