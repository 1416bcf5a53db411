//! The engine SDK's handle on real processes: shared by many tasks at once, several event
//! streams on one connection, typed requests, bounded waits, and a connection that comes
//! back by itself after the master restarts (subscription and followed jobs included).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use halite_client::{Client, ClientConfig, ClientError, EventStream, JobEvent, PublishSpec};
use halite_protocol::message::{Event, KeyState, MinionJobState, Target, TargetKind};
use halite_tests::Cluster;
use serde_json::json;
use tokio::time::timeout;

fn glob(expr: &str) -> Target {
    Target { kind: TargetKind::Glob, expr: expr.into() }
}

/// Follows a job to its end: each minion's final state.
async fn finals(client: &Client, jid: &str) -> Vec<(String, MinionJobState)> {
    let mut finals = Vec::new();
    loop {
        match timeout(Duration::from_secs(30), client.next_job_event(jid)).await.expect("job events").unwrap() {
            JobEvent::Update(u) if u.state.is_final() => finals.push((u.minion, u.state)),
            JobEvent::Update(_) => {}
            JobEvent::Done => {
                finals.sort();
                return finals;
            }
        }
    }
}

async fn next(events: &mut EventStream) -> Event {
    timeout(Duration::from_secs(30), events.next_event()).await.expect("an event").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_handle_serves_many_tasks_and_streams_at_once() {
    let mut cluster = Cluster::start("");
    for id in ["w1", "w2"] {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&["w1", "w2"]);
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    // Two streams on the one connection, each with its own patterns.
    let mut news = client.subscribe(vec!["halite/job/*/new".into()]).await.unwrap();
    let mut ends = client.subscribe(vec!["halite/job/*/done".into()]).await.unwrap();

    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut spec = PublishSpec::new(glob("w*"), "test.echo");
                spec.args = vec![json!(format!("task {i}"))];
                let published = client.publish(spec).await.unwrap();
                let finals = finals(&client, &published.jid).await;
                // A typed request in the middle of other tasks' traffic.
                let minions = client.minions("w*").await.unwrap();
                (published.jid, finals, minions.len())
            })
        })
        .collect();
    let mut jids = BTreeSet::new();
    for task in tasks {
        let (jid, finals, minions) = task.await.unwrap();
        assert_eq!(finals, [("w1".into(), MinionJobState::Returned), ("w2".into(), MinionJobState::Returned)]);
        assert_eq!(minions, 2);
        jids.insert(jid);
    }
    assert_eq!(jids.len(), 16, "every task got its own job");
    let mut new_jids = BTreeSet::new();
    let mut done_jids = BTreeSet::new();
    for _ in 0..16 {
        let event = next(&mut news).await;
        assert!(event.tag.ends_with("/new"), "{}", event.tag);
        new_jids.insert(event.tag.split('/').nth(2).unwrap().to_owned());
        let event = next(&mut ends).await;
        assert!(event.tag.ends_with("/done"), "{}", event.tag);
        done_jids.insert(event.tag.split('/').nth(2).unwrap().to_owned());
    }
    assert_eq!(new_jids, jids);
    assert_eq!(done_jids, jids);

    // Typed helpers answer typed values.
    let keys = client.keys("*").await.unwrap();
    assert!(keys.iter().all(|k| k.state == KeyState::Accepted) && keys.len() == 2, "{keys:?}");
    let token = client.create_enrollment_token("w3", Duration::from_secs(600), false).await.unwrap();
    assert_eq!(token.minion, "w3");
    let listed = client.enrollment_tokens().await.unwrap();
    let id = listed.iter().find(|t| t.minion == "w3").map(|t| t.id.clone()).expect("the token is listed");
    client.revoke_enrollment_token(&id).await.unwrap();
    assert!(client.enrollment_tokens().await.unwrap().iter().all(|t| t.minion != "w3"));
    let Err(ClientError::Master { kind, .. }) = client.revoke_enrollment_token(&id).await else {
        panic!("revoking twice must fail")
    };
    assert_eq!(kind, halite_protocol::message::ErrorKind::NotFound);
    assert!(client.jobs(100).await.unwrap().len() >= 16);
    // A job this client did not publish can be followed too.
    let other = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let published = other.publish(PublishSpec::new(glob("w1"), "test.ping")).await.unwrap();
    assert_eq!(finals(&client, &published.jid).await, [("w1".into(), MinionJobState::Returned)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_to_a_stopped_master_times_out_and_the_client_goes_on() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("w1", "");
    cluster.wait_connected(&["w1"]);
    let mut config = ClientConfig::from_master_config(&cluster.config).unwrap();
    config.request_timeout = Duration::from_secs(1);
    let client = Client::connect(config).await.unwrap();
    let pid = cluster.master_pid().unwrap();
    halite_tests::freeze(pid);
    let stopped = client.minions("*").await;
    halite_tests::thaw(pid);
    assert!(matches!(stopped, Err(ClientError::Timeout(limit)) if limit == Duration::from_secs(1)), "{stopped:?}");
    // The late answer to the timed-out request is dropped; the next one is answered.
    let minions = client.minions("*").await.unwrap();
    assert_eq!(minions.len(), 1);
    let published = client.publish(PublishSpec::new(glob("w1"), "test.ping")).await.unwrap();
    assert_eq!(finals(&client, &published.jid).await, [("w1".into(), MinionJobState::Returned)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reconnects_resubscribes_and_follows_its_job_across_a_master_restart() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("w1", "");
    cluster.wait_connected(&["w1"]);
    let mut config = ClientConfig::from_master_config(&cluster.config).unwrap();
    // A request made while the client reconnects waits for the connection within this.
    config.request_timeout = Duration::from_secs(5);
    let client = Client::connect(config).await.unwrap();
    let mut events = client.subscribe(vec!["halite/job/*/new".into()]).await.unwrap();
    let mut spec = PublishSpec::new(glob("w1"), "cmd.run");
    spec.args = vec![json!("sleep 3; echo slept")];
    spec.kwargs.insert("shell".into(), json!(true));
    let published = client.publish(spec).await.unwrap();
    assert!(next(&mut events).await.tag.contains(&published.jid));

    // The master dies while the job runs, and comes back.
    cluster.kill_master();
    let lost = client.minions("*").await;
    assert!(matches!(lost, Err(ClientError::Disconnected(_) | ClientError::Timeout(_))), "{lost:?}");
    cluster.start_master();

    // The followed job's end still arrives: the minion's return reaches the new master and
    // the client, connected again, watches the job again.
    let ended = finals(&client, &published.jid).await;
    assert_eq!(ended, [("w1".into(), MinionJobState::Returned)]);
    let detail = client.job(&published.jid).await.unwrap();
    let ret = detail.minions[0].ret.as_ref().unwrap();
    assert!(ret.success && ret.outputs.to_string().contains("slept"), "{ret:?}");

    // The stream goes on: it says what it may have missed, then carries new events.
    let gap = next(&mut events).await;
    assert_eq!(gap.tag, "halite/bus/gap", "{gap:?}");
    assert!(gap.data["reason"].as_str().unwrap().contains("restarted"), "{gap:?}");
    cluster.wait_connected(&["w1"]);
    let again = client.publish(PublishSpec::new(glob("w1"), "test.ping")).await.unwrap();
    let event = next(&mut events).await;
    assert_eq!(event.tag, format!("halite/job/{}/new", again.jid));
}

/// `halite events` goes on streaming across a master restart (it used to exit).
#[test]
fn the_events_command_survives_a_master_restart() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("w1", "");
    cluster.wait_connected(&["w1"]);
    let mut events = Command::new(cluster.bins().join("halite"))
        .args(["--config", cluster.config.to_str().unwrap(), "--out", "ndjson", "events", "--count", "2"])
        .arg("halite/job/*/new")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = events.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Publishes until the stream shows a line (it subscribes once connected).
    let publish_until_a_line = |cluster: &Cluster| {
        for _ in 0..40 {
            let run = cluster.cli(&["run", "--async", "w1", "test.ping"]);
            assert_eq!(run.code, 0, "{}", run.stderr);
            if let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
                return line;
            }
        }
        panic!("halite events printed nothing");
    };
    let first: serde_json::Value = serde_json::from_str(&publish_until_a_line(&cluster)).unwrap();
    assert!(first["tag"].as_str().unwrap().starts_with("halite/job/"), "{first}");
    cluster.kill_master();
    cluster.start_master();
    cluster.wait_connected(&["w1"]);
    let second: serde_json::Value = serde_json::from_str(&publish_until_a_line(&cluster)).unwrap();
    // A new job's event, or first the notice that events may have been missed meanwhile.
    let tag = second["tag"].as_str().unwrap();
    assert!(tag.starts_with("halite/job/") || tag == "halite/bus/gap", "{second}");
    let status = events.wait().unwrap();
    assert!(status.success(), "halite events ended with {status}");
}

/// A stream the principal may not open is refused, and only it: opened right before an allowed
/// one, the refusal reaches the stream that asked, and the allowed one goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_stream_is_told_and_the_allowed_one_opened_after_it_goes_on() {
    let cluster = Cluster::start("");
    let keys = cluster.dir.join("keys");
    cluster.add_principal("narrow", &keys, &["--target", "w*", "--function", "test.*", "--event", "engine/*"]);
    let master = halite_transport::keyfile::read_public(&cluster.dir.join("master/master.pub")).unwrap();
    let key = halite_transport::keyfile::read_secret(&keys.join("narrow.key")).unwrap();
    let (addr, _, _) = ClientConfig::locate_master(&cluster.config).unwrap();
    let client = Client::connect(ClientConfig::principal(vec![addr], master, key, "narrow")).await.unwrap();
    // Both asked before either is answered.
    let (forbidden, allowed) =
        tokio::join!(client.subscribe(vec!["halite/key/*".into()]), client.subscribe(vec!["engine/*".into()]));
    let (mut forbidden, mut allowed) = (forbidden.unwrap(), allowed.unwrap());
    let refused = timeout(Duration::from_secs(10), forbidden.next_event()).await.expect("an answer");
    assert!(matches!(refused, Err(ClientError::Master { .. })), "{refused:?}");
    let tag = client.fire_event("after", json!({"n": 1})).await.unwrap();
    let event = next(&mut allowed).await;
    assert_eq!(event.tag, tag, "the allowed stream still receives");
}

/// A fleet larger than one page is listed whole, in id order, each minion once: the SDK asks for
/// it a page at a time (`minion_page`), and the CLI lists the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_larger_than_a_page_is_listed_whole() {
    let cluster = Cluster::start("");
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let ids: Vec<String> = (0..2_345).map(|i| format!("node-{i:05}")).collect();
    for id in &ids {
        let key = halite_protocol::identity::IdentityKey::generate_os();
        client.preseed_key(id, *key.public().as_bytes()).await.unwrap();
    }
    let listed: Vec<String> = client.minions("node-*").await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(listed, ids);
    let first = client.minion_page("node-*", None, 1_000).await.unwrap();
    assert_eq!(first.len(), 1_000);
    let last = client.minion_page("node-*", Some("node-01999".into()), 1_000).await.unwrap();
    assert_eq!(last.len(), 345, "the last page is short");
    let out = cluster.cli(&["--out", "json", "minions", "list", "node-*"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let printed: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(printed.len(), ids.len());
}
