//! A deployment's DELETE when its server is gone or silent, in simulated time: skipped at once
//! for a server without an accepted key, failed with the reason after
//! `deployment_delete_wait_secs` for one that has a key but does not connect.

#![cfg(test)]

use std::time::Duration;

use halite_protocol::message::{status, DeploymentUpdate, RequestBody, ResponseBody, SoftwareDeployment};
use serde_json::json;

use super::{Sim, SimPeer};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

async fn deployed(sim: &mut Sim, root: &mut SimPeer, server: &str) -> SoftwareDeployment {
    let new =
        serde_json::from_value(json!({"name": "c", "group": "script", "config": "#!/bin/sh\ntrue"})).expect("config");
    let Ok(ResponseBody::Config(config)) = sim.request(root, RequestBody::ConfigCreate(new)).await else {
        panic!("a config")
    };
    let spec = serde_json::from_value(json!({"config_id": config.id, "server_id": server})).expect("spec");
    match sim.request(root, RequestBody::DeploymentCreate(spec)).await {
        Ok(ResponseBody::Deployment(deployment)) => deployment,
        other => panic!("a deployment, not {other:?}"),
    }
}

async fn delete(sim: &mut Sim, root: &mut SimPeer, id: &str) -> SoftwareDeployment {
    let update = DeploymentUpdate { action: Some("DELETE".into()), ..DeploymentUpdate::default() };
    match sim.request(root, RequestBody::DeploymentUpdate { id: id.into(), update }).await {
        Ok(ResponseBody::Deployment(deployment)) => deployment,
        other => panic!("a deployment, not {other:?}"),
    }
}

async fn show(sim: &mut Sim, root: &mut SimPeer, id: &str) -> SoftwareDeployment {
    match sim.request(root, RequestBody::DeploymentShow { id: id.into() }).await {
        Ok(ResponseBody::Deployment(deployment)) => deployment,
        other => panic!("a deployment, not {other:?}"),
    }
}

#[test]
fn the_delete_of_a_deployment_whose_server_has_no_key_finishes_at_once() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        let created = deployed(&mut sim, &mut root, "gone-1").await;
        assert_eq!(created.status, status::IN_PROGRESS, "waits for a server that may still enroll");
        let deleted = delete(&mut sim, &mut root, &created.id).await;
        assert_eq!(deleted.status, status::COMPLETE, "{deleted:?}");
        assert!(deleted.status_reason.contains("gone-1 has no accepted key"), "{}", deleted.status_reason);
        assert!(sim.master.core.jobs().len() <= 1, "no job left waiting for gone-1");
    });
}

#[test]
fn the_delete_of_a_deployment_whose_server_stays_away_fails_after_the_bound() {
    rt().block_on(async {
        let mut sim = Sim::with_config(|config| config.deployment_delete_wait_secs = 60).await;
        let web1 = sim.minion("web1").await;
        let mut root = sim.root().await;
        let created = deployed(&mut sim, &mut root, "web1").await;
        web1.disconnect(&mut sim).await;
        let deleted = delete(&mut sim, &mut root, &created.id).await;
        assert_eq!(deleted.status, status::IN_PROGRESS, "its server may come back");
        sim.advance(Duration::from_secs(61)).await;
        let failed = show(&mut sim, &mut root, &created.id).await;
        assert_eq!(failed.status, status::FAILED, "{failed:?}");
        assert!(failed.status_reason.contains("did not connect within 60 s of the DELETE"), "{}", failed.status_reason);
    });
}

#[test]
fn a_deployment_to_a_server_nobody_enrolls_as_fails_with_the_reason_after_its_own_bound() {
    rt().block_on(async {
        let mut sim = Sim::with_config(|config| {
            config.deployment_unenrolled_wait_secs = 60;
            config.deployment_ttl_secs = 300;
        })
        .await;
        let mut root = sim.root().await;
        // One server is about to enroll (its token is out); the other is a name nobody enrolls
        // as (a Nova server named unlike its enrollment's server_name).
        let token = RequestBody::TokenCreate { minion: "app-web1".into(), ttl_ms: 3_600_000, replace: false };
        assert!(matches!(sim.request(&mut root, token).await, Ok(ResponseBody::Token(_))));
        let expected = deployed(&mut sim, &mut root, "app-web1").await;
        let misnamed = deployed(&mut sim, &mut root, "app-web1-x7k2").await;
        sim.advance(Duration::from_secs(61)).await;
        let failed = show(&mut sim, &mut root, &misnamed.id).await;
        assert_eq!(failed.status, status::FAILED, "{failed:?}");
        assert!(failed.status_reason.contains("app-web1-x7k2 never enrolled"), "{}", failed.status_reason);
        assert!(failed.status_reason.contains("server_name"), "names the fix: {}", failed.status_reason);
        let waiting = show(&mut sim, &mut root, &expected.id).await;
        assert_eq!(waiting.status, status::IN_PROGRESS, "its server has a token: it may still boot");
        // When that one's own wait runs out, its reason is the plain one: a token was out.
        sim.advance(Duration::from_secs(300)).await;
        let expired = show(&mut sim, &mut root, &expected.id).await;
        assert_eq!(expired.status, status::FAILED, "{expired:?}");
        assert!(expired.status_reason.contains("did not connect within"), "{}", expired.status_reason);
    });
}
