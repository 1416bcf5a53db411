//! The order in which the loop's listeners hear a step's slot ends and events, in simulated
//! time: a rollout's next target starts in the step that stores its previous target's return,
//! after the bus told that return; the deployment riding on a `deploy.apply` job hears its end
//! once, whatever the minion sends again.

#![cfg(test)]

use halite_protocol::message::{status, Amount, Message, MinionJobState, RequestBody, ResponseBody, Rollout};
use serde_json::json;

use super::relay_trust_tests::{events, subscribe};
use super::{ret, Sim, SimPeer};
use crate::store::{DeployStore, Store};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn a_rollouts_next_target_starts_in_the_step_that_stores_the_previous_return() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut web: Vec<SimPeer> = Vec::new();
        for id in ["web0", "web1"] {
            let mut minion = sim.minion(id).await;
            minion.recv(&sim);
            web.push(minion);
        }
        let mut root = sim.root().await;
        let mut watcher = sim.root().await;
        subscribe(&mut sim, &mut watcher, "halite/job/*").await;
        let rollout = Rollout { batch: Some(Amount::Count(1)), ..Rollout::default() };
        let jid = sim.publish_rollout(&mut root, "web*", 0, rollout).await.expect("published");
        assert_eq!(web[0].jobs(&sim).len(), 1);
        assert!(web[1].jobs(&sim).is_empty(), "one at a time");
        events(&mut watcher, &sim);

        // One step: web0's return is stored, the rollout hears its end and starts web1.
        web[0].send(&mut sim, &Message::JobReturn(ret(&jid))).await;
        let detail = sim.store().job(&jid).await.expect("store").expect("stored");
        let stored: Vec<MinionJobState> = detail.minions.iter().map(|m| m.state).collect();
        assert_eq!(stored[0], MinionJobState::Returned, "web0's return is stored");
        assert_eq!(web[1].jobs(&sim).len(), 1, "web1 started in the same step");
        let tags: Vec<String> = events(&mut watcher, &sim).into_iter().map(|e| e.tag).collect();
        assert_eq!(
            tags,
            [format!("halite/job/{jid}/ret/web0"), format!("halite/job/{jid}/rollout/started")],
            "the bus tells the return before the start it caused"
        );
        assert_eq!(sim.master.metrics().get().slots_final.get_or_create(&returned()).get(), 1);
    });
}

fn returned() -> crate::metrics::State {
    crate::metrics::State { state: MinionJobState::Returned.as_str() }
}

#[test]
fn the_deployment_riding_on_a_deploy_job_hears_its_end_once() {
    rt().block_on(async {
        let Deployed { mut sim, mut vm, mut root, mut watcher, id, jid } = deployed_on_vm1().await;

        let signal = halite_protocol::message::JobReturn {
            minion: "vm-1".into(),
            outputs: json!({ "deploy_status_code": 0, "deploy_stdout": "done", "deploy_stderr": "" }),
            ..ret(&jid)
        };
        // The return, then the same again (a minion resending its outbox): one end, heard once.
        vm.send(&mut sim, &Message::JobReturn(signal.clone())).await;
        vm.send(&mut sim, &Message::JobReturn(signal)).await;
        let tags: Vec<String> = events(&mut watcher, &sim).into_iter().map(|e| e.tag).collect();
        let complete = format!("halite/deployment/{}/{}", id, status::COMPLETE);
        assert_eq!(tags, [complete], "told once, in the step that ended the job");
        let Ok(ResponseBody::Deployment(shown)) =
            sim.request(&mut root, RequestBody::DeploymentShow { id: id.clone() }).await
        else {
            panic!("a deployment")
        };
        assert_eq!(shown.status, status::COMPLETE, "{shown:?}");
    });
}

/// A deployment whose job ends while the store is away is recorded once the store answers
/// again: not left in progress, and told once.
#[test]
fn a_deployment_whose_job_ends_while_the_store_is_away_is_recorded_once_it_answers() {
    rt().block_on(async {
        let Deployed { mut sim, mut vm, mut root, mut watcher, id, jid } = deployed_on_vm1().await;

        let away = sim.store().take_away().await.expect("open");
        let signal = halite_protocol::message::JobReturn {
            minion: "vm-1".into(),
            outputs: json!({ "deploy_status_code": 0, "deploy_stdout": "done", "deploy_stderr": "" }),
            ..ret(&jid)
        };
        vm.send(&mut sim, &Message::JobReturn(signal)).await;
        assert!(events(&mut watcher, &sim).is_empty(), "nothing told while nothing is stored");
        sim.advance(std::time::Duration::from_secs(2)).await;
        sim.store().give_back(away).await;
        sim.advance(std::time::Duration::from_secs(2)).await;

        let tags: Vec<String> = events(&mut watcher, &sim).into_iter().map(|e| e.tag).collect();
        let complete = format!("halite/deployment/{}/{}", id, status::COMPLETE);
        assert_eq!(tags, [complete], "told once, once stored");
        let Ok(ResponseBody::Deployment(shown)) =
            sim.request(&mut root, RequestBody::DeploymentShow { id: id.clone() }).await
        else {
            panic!("a deployment")
        };
        assert_eq!(shown.status, status::COMPLETE, "{shown:?}");
    });
}

/// A master with minion `vm-1`, root, a watcher of deployment events, and a deployment to
/// `vm-1` whose `deploy.apply` job was sent (its events so far read).
struct Deployed {
    sim: Sim,
    vm: SimPeer,
    root: SimPeer,
    watcher: SimPeer,
    id: String,
    jid: String,
}

async fn deployed_on_vm1() -> Deployed {
    let mut sim = Sim::new().await;
    let mut vm = sim.minion("vm-1").await;
    vm.recv(&sim);
    let mut root = sim.root().await;
    let mut watcher = sim.root().await;
    subscribe(&mut sim, &mut watcher, "halite/deployment/*").await;
    let new =
        serde_json::from_value(json!({"name": "c", "group": "script", "config": "#!/bin/sh\ntrue"})).expect("config");
    let Ok(ResponseBody::Config(config)) = sim.request(&mut root, RequestBody::ConfigCreate(new)).await else {
        panic!("a config")
    };
    let spec = serde_json::from_value(json!({"config_id": config.id, "server_id": "vm-1"})).expect("spec");
    let Ok(ResponseBody::Deployment(created)) = sim.request(&mut root, RequestBody::DeploymentCreate(spec)).await
    else {
        panic!("a deployment")
    };
    let sent = vm.jobs(&sim);
    assert_eq!(sent.len(), 1, "the deploy.apply job is sent to its server");
    let jid = sent[0].verify(&sim.master_public()).expect("signed").jid;
    events(&mut watcher, &sim);
    Deployed { sim, vm, root, watcher, id: created.id, jid }
}

/// A master stopped after its deployment's job ended but before it recorded the deployment
/// (killed, or the store failing at that moment) records it once it starts again.
#[test]
fn a_deployment_whose_job_ended_unrecorded_is_recorded_when_the_master_starts_again() {
    rt().block_on(async {
        let Deployed { sim, id, jid, .. } = deployed_on_vm1().await;
        let signal = halite_protocol::message::JobReturn {
            minion: "vm-1".into(),
            outputs: json!({ "deploy_status_code": 0, "deploy_stdout": "done", "deploy_stderr": "" }),
            ..ret(&jid)
        };
        // The return is stored, then the master is gone before it records the deployment.
        let change = crate::store::StateChange {
            jid: jid.clone(),
            minion: "vm-1".into(),
            state: MinionJobState::Returned,
            ret: Some(signal),
            at_ms: 5,
            late: false,
        };
        sim.store().set_states(&[change]).await.expect("stored");
        let (store, clock) = (sim.store().clone(), sim.clock.clone());
        drop(sim);

        let mut sim = Sim::with_store(store, clock, |_| {}).await;
        sim.advance(std::time::Duration::from_millis(10)).await;
        let stored = sim.store().deployment(&id).await.expect("read").expect("stored");
        assert_eq!(stored.deployment.status, status::COMPLETE, "{stored:?}");
        assert_eq!(stored.deployment.output_values["deploy_stdout"], json!("done"));
    });
}
