//! The engine SDK, used the way docs/engine-guide.md shows: an engine enrolls a server it
//! boots with a one-time token and waits, without polling, for it to come up and report.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_client::{Client, ClientConfig, JobEvent, PublishSpec};
use halite_protocol::message::{MinionJobState, RequestBody, ResponseBody, Target, TargetKind};
use halite_tests::Cluster;
use serde_json::json;
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_boots_a_minion_with_a_token_and_waits_for_its_first_event() {
    let mut cluster = Cluster::start("[[events]]\nminions = [\"vm-*\"]\nallow = [\"boot/*\"]\n");
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();

    // 1. The engine creates a token bound to the server's future minion id.
    let ResponseBody::Token(token) = client
        .request(RequestBody::TokenCreate { minion: "vm-1".into(), ttl_ms: 600_000, replace: false })
        .await
        .unwrap()
    else {
        panic!("expected a token")
    };
    // 2. It subscribes before booting, so nothing is missed.
    let mut events = client.subscribe(vec!["halite/minion/vm-1/*".into(), "minion/vm-1/*".into()]).await.unwrap();

    // 3. "Boot": what cloud-init's user_data does — write the enrollment file, start the minion.
    cluster.prepare_minion("vm-1", false, "");
    let enrollment = cluster.minion_dir("vm-1").join("enrollment.toml");
    let text = std::fs::read_to_string(&enrollment).unwrap();
    std::fs::write(&enrollment, format!("{text}token = {:?}\n", token.token)).unwrap();
    cluster.start_minion("vm-1");

    // 4. The master pushes the connection event.
    let connected = timeout(Duration::from_secs(20), events.next_event()).await.unwrap().unwrap();
    assert_eq!(connected.tag, "halite/minion/vm-1/connected");

    // 5. The engine runs a job and follows it to the end with explicit states.
    let mut spec = PublishSpec::new(Target { kind: TargetKind::List, expr: "vm-1".into() }, "event.send");
    spec.args = vec![json!("boot/ready"), json!({"services": ["web"]})];
    let published = client.publish(spec).await.unwrap();
    assert_eq!(published.minions, ["vm-1"]);
    let mut finals = Vec::new();
    loop {
        match timeout(Duration::from_secs(20), client.next_job_event(&published.jid)).await.unwrap().unwrap() {
            JobEvent::Update(u) if u.state.is_final() => finals.push(u.state),
            JobEvent::Update(_) => {}
            JobEvent::Done => break,
        }
    }
    assert_eq!(finals, [MinionJobState::Returned]);

    // 6. The minion's own event arrives, namespaced under its authenticated id.
    let ready = timeout(Duration::from_secs(10), events.next_event()).await.unwrap().unwrap();
    assert_eq!(ready.tag, "minion/vm-1/boot/ready");
    assert_eq!(ready.data, json!({"minion": "vm-1", "data": {"services": ["web"]}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_lifecycle_events_are_published() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("w1", "");
    cluster.wait_connected(&["w1"]);
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let mut events = client.subscribe(vec!["halite/job/*".into(), "halite/key/*".into()]).await.unwrap();
    let published = client
        .publish(PublishSpec::new(Target { kind: TargetKind::Glob, expr: "w1".into() }, "test.ping"))
        .await
        .unwrap();
    let jid = &published.jid;
    let mut tags = Vec::new();
    while tags.len() < 3 {
        tags.push(timeout(Duration::from_secs(10), events.next_event()).await.unwrap().unwrap().tag);
    }
    assert_eq!(
        tags,
        [format!("halite/job/{jid}/new"), format!("halite/job/{jid}/ret/w1"), format!("halite/job/{jid}/done")]
    );
    let admin = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    admin.request(RequestBody::KeyReject { pattern: "w1".into() }).await.unwrap();
    let key_event = loop {
        let e = timeout(Duration::from_secs(10), events.next_event()).await.unwrap().unwrap();
        if e.tag.starts_with("halite/key/") {
            break e;
        }
    };
    assert_eq!(key_event.tag, "halite/key/w1/rejected");
}

/// A request the master does not answer in time ends in `Timeout` after the configured
/// `request_timeout`, and the client works again once the master answers; a cancel reports
/// what it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_time_out_as_configured_and_cancel_reports_its_outcome() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("c1", "");
    cluster.wait_connected(&["c1"]);
    let mut config = ClientConfig::from_master_config(&cluster.config).unwrap();
    config.request_timeout = Duration::from_millis(500);
    let client = Client::connect(config).await.unwrap();

    let pid = cluster.master_pid().unwrap();
    halite_tests::freeze(pid);
    let started = std::time::Instant::now();
    let stalled = client.request(RequestBody::JobList { limit: 1, filter: Default::default() }).await;
    halite_tests::thaw(pid);
    assert!(matches!(stalled, Err(halite_client::ClientError::Timeout(limit)) if limit == Duration::from_millis(500)));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(
        client.request(RequestBody::JobList { limit: 1, filter: Default::default() }).await.is_ok(),
        "usable again"
    );

    // A running job: cancelled, and the answer shows it.
    let mut spec = PublishSpec::new(Target { kind: TargetKind::Glob, expr: "c1".into() }, "cmd.run");
    spec.args = vec![json!("sleep 30")];
    spec.kwargs.insert("shell".into(), json!(true));
    let published = client.publish(spec).await.unwrap();
    let detail = client.cancel(&published.jid).await.unwrap();
    assert_eq!(detail.summary.jid, published.jid);
    let mut state = MinionJobState::Sent;
    while let JobEvent::Update(update) = client.next_job_event(&published.jid).await.unwrap() {
        state = update.state;
    }
    assert_eq!(state, MinionJobState::Cancelled);
    // Cancelling it again, or a job that never was: not found.
    let again = client.cancel(&published.jid).await.unwrap_err().to_string();
    assert!(again.contains("no running job"), "{again}");
}
