//! Clients' requests in simulated time: decided without the store, their store calls made by
//! the loop, and memory brought in line with what was stored, even when the store fails part
//! way (`admin/`, `deploy/`).

use halite_protocol::message::{status, Message, RequestBody, ResponseBody, RolloutState, SoftwareConfig, Subscribe};
use serde_json::json;

use super::rollout_tests::one_at_a_time;
use super::{ret, Sim, SimPeer};
use crate::store::{DeployStore, Store};

/// Makes the store refuse a write from now on: a trigger `name` run `when`
/// (`BEFORE DELETE ON keys WHEN old.id = 'b1'`, say), until dropped.
async fn refuse(sim: &Sim, name: &str, when: &str) {
    let sql = format!("CREATE TRIGGER {name} {when} BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
    sim.store().execute_for_test(&sql).await;
}

/// A master with minion `vm-1` (what it was sent so far read), root, and a config root made.
async fn vm_root_and_config() -> (Sim, SimPeer, SimPeer, SoftwareConfig) {
    let mut sim = Sim::new().await;
    let mut vm = sim.minion("vm-1").await;
    vm.recv(&sim);
    let mut root = sim.root().await;
    let new =
        serde_json::from_value(json!({"name": "c", "group": "script", "config": "#!/bin/sh\ntrue"})).expect("config");
    let Ok(ResponseBody::Config(config)) = sim.request(&mut root, RequestBody::ConfigCreate(new)).await else {
        panic!("a config")
    };
    (sim, vm, root, config)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// A key delete the store refuses part way: the keys deleted before the refusal are gone from
/// memory too (announced, their minions cut off and forgotten), the refused one and those
/// after it stay, and the client is told why.
#[test]
fn a_key_delete_refused_part_way_acts_on_what_was_deleted_and_says_why() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut a1 = sim.minion("a1").await;
        let mut b1 = sim.minion("b1").await;
        let mut c1 = sim.minion("c1").await;
        let mut root = sim.root().await;
        let mut watcher = sim.root().await;
        let subscribe = Subscribe { patterns: vec!["halite/key/*".into()], after: None };
        watcher.send(&mut sim, &Message::Subscribe(subscribe)).await;
        for peer in [&mut a1, &mut b1, &mut c1, &mut watcher] {
            peer.recv(&sim);
        }
        // Keys are deleted in id order: a1's goes, b1's is refused, c1's is never tried.
        refuse(&sim, "refuse_b1", "BEFORE DELETE ON keys WHEN old.id = 'b1'").await;

        let refused = sim.request(&mut root, RequestBody::KeyDelete { pattern: "*1".into() }).await;
        let why = refused.expect_err("the delete failed part way");
        assert!(why.contains("could not complete"), "{why}");
        assert_eq!(watcher.event_tags(&sim), ["halite/key/a1/deleted"], "only what was deleted is told");
        assert!(sim.net.closed(a1.peer).is_some(), "a1 lost its key: cut off");
        assert_eq!(sim.net.closed(b1.peer), None, "b1 keeps its key and its session");
        assert_eq!(sim.net.closed(c1.peer), None);
        assert!(!sim.master.core.registry().accepted_ids().contains("a1"), "a1's key is gone from memory");
        assert!(sim.master.core.registry().accepted_ids().contains("b1"));
        let Ok(ResponseBody::Minions(left)) =
            sim.request(&mut root, RequestBody::MinionList { pattern: "*".into(), after: None, limit: None }).await
        else {
            panic!("a minion list")
        };
        let ids: Vec<&str> = left.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["b1", "c1"]);
    });
}

/// A pause the store cannot take changes nothing and says so; once the store is back, a
/// pause is stored and answered with the job as paused.
#[test]
fn a_pause_the_store_cannot_take_changes_nothing_and_a_stored_one_is_answered_paused() {
    rt().block_on(async {
        let (mut sim, _web, mut root, jid) = one_at_a_time().await;
        let away = sim.store().take_away().await.expect("open");
        let refused = sim.request(&mut root, RequestBody::JobPause { jid: jid.clone() }).await;
        assert!(refused.is_err(), "{refused:?}");
        let live = sim.master.core.jobs().get(&jid).and_then(|job| job.rollout.as_ref()).map(|run| run.status.state);
        assert_eq!(live, Some(RolloutState::Running), "nothing changed in memory");
        sim.store().give_back(away).await;

        let paused = sim.request(&mut root, RequestBody::JobPause { jid: jid.clone() }).await;
        let Ok(ResponseBody::Job(detail)) = paused else { panic!("the job: {paused:?}") };
        assert_eq!(detail.summary.rollout.map(|r| r.state), Some(RolloutState::Paused));
        let stored = sim.store().job(&jid).await.expect("read").expect("the job");
        assert_eq!(stored.summary.rollout.map(|r| r.state), Some(RolloutState::Paused), "stored");
    });
}

/// A deployment is pushed through its asks: its config and server read, its job stored, then
/// the deployment naming it. A job the store refuses is told to the engine, and neither the
/// job nor the deployment exists; once the store takes it, the same request pushes it.
#[test]
fn a_deployment_whose_job_cannot_be_stored_is_refused_and_leaves_nothing() {
    rt().block_on(async {
        let (mut sim, mut vm, mut root, config) = vm_root_and_config().await;
        let spec = || serde_json::from_value(json!({"config_id": config.id, "server_id": "vm-1"})).expect("spec");
        refuse(&sim, "refuse_jobs", "BEFORE INSERT ON jobs").await;

        let refused = sim.request(&mut root, RequestBody::DeploymentCreate(spec())).await;
        assert!(refused.is_err(), "{refused:?}");
        assert!(vm.jobs(&sim).is_empty(), "nothing sent");
        assert!(sim.store().deployments(None).await.expect("read").is_empty(), "no deployment stored");

        sim.store().execute_for_test("DROP TRIGGER refuse_jobs").await;
        let pushed = sim.request(&mut root, RequestBody::DeploymentCreate(spec())).await;
        let Ok(ResponseBody::Deployment(deployment)) = pushed else { panic!("a deployment: {pushed:?}") };
        assert_eq!(deployment.status, status::IN_PROGRESS);
        let sent = vm.jobs(&sim);
        assert_eq!(sent.len(), 1, "its job reached the server");
        let stored = sim.store().deployment(&deployment.id).await.expect("read").expect("stored");
        let job = sent[0].verify(&sim.master_public()).expect("signed by the master");
        assert_eq!(stored.jid, job.jid, "the deployment names the job sent");
    });
}

/// A deployment group goes through asks, one piece of work at a time: created, it starts its
/// member at once; when the member's deployment completes, the group finishes; a finish the
/// store refuses is tried again a second later, and then stored and announced.
#[test]
fn a_group_finish_the_store_refuses_is_tried_again_a_second_later() {
    rt().block_on(async {
        let (mut sim, mut vm, mut root, config) = vm_root_and_config().await;
        let mut watcher = sim.root().await;
        let subscribe = Subscribe { patterns: vec!["halite/deployment_group/*".into()], after: None };
        watcher.send(&mut sim, &Message::Subscribe(subscribe)).await;
        watcher.recv(&sim);
        let spec = serde_json::from_value(json!({"config_id": config.id, "servers": ["vm-1"]})).expect("group");
        let created = sim.request(&mut root, RequestBody::DeploymentGroupCreate(spec)).await;
        let Ok(ResponseBody::DeploymentGroup(group)) = created else { panic!("a group: {created:?}") };
        assert_eq!(group.members[0].status, status::IN_PROGRESS, "started at once: {group:?}");
        let sent = vm.jobs(&sim);
        assert_eq!(sent.len(), 1, "the member's job reached its server");
        let jid = sent[0].verify(&sim.master_public()).expect("signed").jid;

        refuse(&sim, "refuse_groups", "BEFORE UPDATE ON deployment_groups").await;
        let outputs = json!({ "deploy_status_code": 0, "deploy_stdout": "done", "deploy_stderr": "" });
        let done = halite_protocol::message::JobReturn { minion: "vm-1".into(), outputs, ..ret(&jid) };
        vm.send(&mut sim, &Message::JobReturn(done)).await;
        assert!(watcher.event_tags(&sim).is_empty(), "nothing told of a finish not stored");
        let shown = sim.request(&mut root, RequestBody::DeploymentGroupShow { id: group.id.clone() }).await;
        assert!(matches!(&shown, Ok(ResponseBody::DeploymentGroup(g)) if g.status == status::IN_PROGRESS), "{shown:?}");

        sim.store().execute_for_test("DROP TRIGGER refuse_groups").await;
        sim.advance(std::time::Duration::from_secs(2)).await;
        let complete = format!("halite/deployment_group/{}/{}", group.id, status::COMPLETE);
        assert_eq!(watcher.event_tags(&sim), [complete], "stored, then told once");
        let shown = sim.request(&mut root, RequestBody::DeploymentGroupShow { id: group.id.clone() }).await;
        assert!(matches!(&shown, Ok(ResponseBody::DeploymentGroup(g)) if g.status == status::COMPLETE), "{shown:?}");
    });
}

/// Members are recorded as starting before their starts are sent: when the write after the
/// start fails and the advance is retried, the member's deployment is found and followed,
/// never started a second time; the group then finishes once.
#[test]
fn a_group_retried_after_its_write_failed_starts_no_server_twice() {
    rt().block_on(async {
        let (mut sim, mut vm, mut root, config) = vm_root_and_config().await;
        // Every group write that no longer records a start is refused: the one after the start.
        refuse(
            &sim,
            "refuse_after_start",
            "BEFORE UPDATE ON deployment_groups WHEN NEW.body NOT LIKE '%\"starting\"%'",
        )
        .await;
        let spec = serde_json::from_value(json!({"config_id": config.id, "servers": ["vm-1"]})).expect("group");
        let created = sim.request(&mut root, RequestBody::DeploymentGroupCreate(spec)).await;
        assert!(created.is_err(), "the write after the start failed, and the creator is told: {created:?}");
        let sent = vm.jobs(&sim);
        assert_eq!(sent.len(), 1, "the member started");
        // Retried every second while the store refuses, then once it takes the write.
        sim.advance(std::time::Duration::from_secs(3)).await;
        sim.store().execute_for_test("DROP TRIGGER refuse_after_start").await;
        sim.advance(std::time::Duration::from_secs(2)).await;
        assert!(vm.jobs(&sim).is_empty(), "never started again");
        let deployments = sim.store().deployments(Some("vm-1")).await.expect("read");
        assert_eq!(deployments.len(), 1, "one deployment for the server");
        let jid = sent[0].verify(&sim.master_public()).expect("signed").jid;
        let outputs = json!({ "deploy_status_code": 0, "deploy_stdout": "done", "deploy_stderr": "" });
        vm.send(
            &mut sim,
            &Message::JobReturn(halite_protocol::message::JobReturn { minion: "vm-1".into(), outputs, ..ret(&jid) }),
        )
        .await;
        sim.advance(std::time::Duration::from_secs(2)).await;
        let groups = sim.store().open_groups().await.expect("read");
        assert!(groups.is_empty(), "finished: {groups:?}");
        assert!(vm.jobs(&sim).is_empty(), "still never started again");
    });
}

/// Another principal's live job is not told apart from a job there never was: a pause or
/// resume of either is answered alike.
#[test]
fn a_pause_of_another_principals_live_job_is_answered_as_of_no_job() {
    rt().block_on(async {
        let (mut sim, _web, _root, jid) = one_at_a_time().await;
        let mut other = sim.principal("other", "db*", &["test.ping"]).await;
        let hidden = sim.request(&mut other, RequestBody::JobPause { jid: jid.clone() }).await;
        assert_eq!(hidden, Err(format!("no job {jid}")));
        let unknown = "20200101000000000000".to_owned();
        let never = sim.request(&mut other, RequestBody::JobResume { jid: unknown.clone() }).await;
        assert_eq!(never, Err(format!("no job {unknown}")));
    });
}

/// A key deleted whose minion's entry the store then refuses to delete is still gone from
/// memory: its minion is cut off and told of, though the request fails.
#[test]
fn a_key_deleted_whose_minion_entry_stays_still_cuts_its_minion() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut a1 = sim.minion("a1").await;
        let mut root = sim.root().await;
        a1.recv(&sim);
        refuse(&sim, "refuse_a1", "BEFORE DELETE ON minions WHEN old.id = 'a1'").await;
        let refused = sim.request(&mut root, RequestBody::KeyDelete { pattern: "a1".into() }).await;
        assert!(refused.is_err(), "{refused:?}");
        assert!(sim.net.closed(a1.peer).is_some(), "a1 lost its key: cut off");
        assert!(!sim.master.core.registry().accepted_ids().contains("a1"), "a1's key is gone from memory");
    });
}

/// An update whose deployment another master deletes while it is pushed (here, a trigger
/// deleting the row as the update's job is stored) does not bring the deployment back: the
/// engine is told, and the job pushed for it is cancelled.
#[test]
fn an_update_of_a_deployment_deleted_meanwhile_brings_it_not_back() {
    rt().block_on(async {
        let (mut sim, mut vm, mut root, config) = vm_root_and_config().await;
        let spec = serde_json::from_value(json!({"config_id": config.id, "server_id": "vm-1"})).expect("spec");
        let created = sim.request(&mut root, RequestBody::DeploymentCreate(spec)).await;
        let Ok(ResponseBody::Deployment(deployment)) = created else { panic!("a deployment: {created:?}") };
        vm.recv(&sim);
        let id = deployment.id.clone();
        let sql =
            format!("CREATE TRIGGER gone AFTER INSERT ON jobs BEGIN DELETE FROM deployments WHERE id = '{id}'; END");
        sim.store().execute_for_test(&sql).await;

        let update = serde_json::from_value(json!({"action": "UPDATE"})).expect("update");
        let refused = sim.request(&mut root, RequestBody::DeploymentUpdate { id: id.clone(), update }).await;
        let why = refused.expect_err("deleted meanwhile");
        assert!(why.contains("deleted or updated meanwhile"), "{why}");
        assert_eq!(sim.store().deployment(&id).await.expect("read"), None, "not brought back");
        let got = vm.recv(&sim);
        let new_jid = got.iter().find_map(|m| match m {
            Message::Job(job) => Some(job.verify(&sim.master_public()).expect("signed").jid),
            _ => None,
        });
        let new_jid = new_jid.expect("the update's job was sent before the deployment was stored");
        let cancelled = got.iter().any(|m| matches!(m, Message::Cancel(c) if c.jid == new_jid));
        assert!(cancelled, "the job pushed for it is cancelled: {got:?}");
    });
}
