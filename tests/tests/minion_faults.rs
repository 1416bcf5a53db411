//! The minion under pressure and faults, on real processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_client::{Client, ClientConfig, PublishSpec};
use halite_protocol::message::{RequestBody, ResponseBody, Target, TargetKind};
use halite_tests::Cluster;
use tokio::time::timeout;

/// A burst of jobs far larger than the minion's queues (its loop used to wait on a full send
/// queue while being the only reader of the connection, and stalled for good): 3,000 jobs wait
/// for an offline minion and all arrive the moment it connects; every one runs and returns, and
/// the minion still answers afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_jobs_never_stalls_the_minion() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    cluster.stop_minion("web1", false);
    let config = ClientConfig::from_master_config(&cluster.config).unwrap();
    const CLIENTS: usize = 6;
    const EACH: usize = 500;
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let config = config.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(config).await.unwrap();
            let mut jids = Vec::new();
            for _ in 0..EACH {
                let mut spec = PublishSpec::new(Target { kind: TargetKind::List, expr: "web1".into() }, "test.ping");
                spec.timeout_ms = 300_000;
                spec.ttl_ms = 300_000;
                jids.push(client.publish(spec).await.unwrap().jid);
            }
            jids
        }));
    }
    let mut jids = Vec::new();
    for task in tasks {
        jids.extend(task.await.unwrap());
    }
    assert_eq!(jids.len(), CLIENTS * EACH);
    cluster.start_minion("web1");
    let mut client = Client::connect(config).await.unwrap();
    let finished = timeout(Duration::from_secs(120), async {
        loop {
            let ResponseBody::Jobs(jobs) = client.request(RequestBody::JobList { limit: 1000 }).await.unwrap() else {
                panic!("a job list")
            };
            let pending: u32 =
                jobs.iter().flat_map(|j| j.states.iter()).filter(|(state, _)| !state.is_final()).map(|(_, n)| *n).sum();
            if pending == 0 {
                return jobs;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .expect("every job of the burst ends");
    assert!(finished.iter().all(|j| j.states.keys().all(|s| s.as_str() == "returned")), "all returned");
    let last = cluster.cli(&["run", "--out", "json", "web1", "test.ping"]);
    assert_eq!(last.json()["minions"]["web1"]["state"], "returned", "{}", last.stdout);
}
