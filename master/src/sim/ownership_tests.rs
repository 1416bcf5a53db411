//! Everything an engine creates is owned, in simulated time: configs, deployments, groups and
//! enrollment tokens are seen and acted on by their creator, root and administrators only;
//! another principal's is answered exactly like an id never used.

#![cfg(test)]

use halite_protocol::message::{
    PrincipalAcl, RequestBody, ResponseBody, SoftwareConfig, SoftwareDeployment, TokenInfo,
};
use serde_json::json;

use super::relay_trust_tests::{events, subscribe};
use super::{Sim, SimPeer};
use crate::store::DeployStore;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// Connects an administrator with no rules of its own.
async fn admin(sim: &mut Sim, name: &str) -> SimPeer {
    let acl = PrincipalAcl { admin: true, ..PrincipalAcl::default() };
    sim.principal_with(name, acl).await
}

/// A tenant allowed `deploy.apply` on `targets`.
async fn tenant(sim: &mut Sim, name: &str, targets: &str) -> SimPeer {
    sim.principal(name, targets, &["deploy.apply"]).await
}

async fn create_config(sim: &mut Sim, client: &mut SimPeer) -> SoftwareConfig {
    let new = serde_json::from_value(json!({
        "name": "db", "group": "script", "config": "#!/bin/sh\necho $db_password",
        "inputs": [{"name": "db_password", "type": "String", "default": "s3cret"}],
    }))
    .expect("config");
    match sim.request(client, RequestBody::ConfigCreate(new)).await {
        Ok(ResponseBody::Config(config)) => config,
        other => panic!("a config, not {other:?}"),
    }
}

async fn deploy(sim: &mut Sim, client: &mut SimPeer, config: &str, server: &str) -> Result<SoftwareDeployment, String> {
    let spec = serde_json::from_value(json!({"config_id": config, "server_id": server})).expect("spec");
    match sim.request(client, RequestBody::DeploymentCreate(spec)).await? {
        ResponseBody::Deployment(deployment) => Ok(deployment),
        other => panic!("a deployment, not {other:?}"),
    }
}

/// A deployment group of `config` on shared-1.
async fn shared_group(sim: &mut Sim, client: &mut SimPeer, config: &str) -> halite_protocol::message::DeploymentGroup {
    let group = serde_json::from_value(json!({"config_id": config, "servers": ["shared-1"]})).expect("group");
    match sim.request(client, RequestBody::DeploymentGroupCreate(group)).await {
        Ok(ResponseBody::DeploymentGroup(group)) => group,
        other => panic!("a group, not {other:?}"),
    }
}

async fn config_ids(sim: &mut Sim, client: &mut SimPeer) -> Vec<String> {
    match sim.request(client, RequestBody::ConfigList { limit: 100 }).await {
        Ok(ResponseBody::Configs(configs)) => configs.into_iter().map(|c| c.id).collect(),
        other => panic!("a listing, not {other:?}"),
    }
}

async fn deployment_ids(sim: &mut Sim, client: &mut SimPeer) -> Vec<String> {
    match sim.request(client, RequestBody::DeploymentList { server_id: None }).await {
        Ok(ResponseBody::Deployments(deployments)) => deployments.into_iter().map(|d| d.id).collect(),
        other => panic!("a listing, not {other:?}"),
    }
}

async fn token_ids(sim: &mut Sim, client: &mut SimPeer) -> Vec<String> {
    match sim.request(client, RequestBody::TokenList).await {
        Ok(ResponseBody::Tokens(tokens)) => tokens.into_iter().map(|t| t.id).collect(),
        other => panic!("a listing, not {other:?}"),
    }
}

#[test]
fn another_principals_config_is_neither_listed_shown_deleted_nor_deployed() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut a = tenant(&mut sim, "tenanta", "a-*").await;
        let mut b = tenant(&mut sim, "tenantb", "b-*").await;
        let mut ops = admin(&mut sim, "ops").await;
        let mut root = sim.root().await;
        let secret = create_config(&mut sim, &mut a).await;
        let theirs = create_config(&mut sim, &mut b).await;
        let id = secret.id.clone();
        let never = "00000000-0000-0000-0000-000000000000";

        assert_eq!(config_ids(&mut sim, &mut a).await, std::slice::from_ref(&id));
        assert_eq!(config_ids(&mut sim, &mut b).await, std::slice::from_ref(&theirs.id), "listing filters");
        for everyone in [&mut ops, &mut root] {
            let seen = config_ids(&mut sim, everyone).await;
            assert!(seen.contains(&id) && seen.contains(&theirs.id), "{seen:?}");
        }
        // Answered exactly like an id never used: nothing to probe.
        for body in [RequestBody::ConfigShow { id: id.clone() }, RequestBody::ConfigDelete { id: id.clone() }] {
            assert_eq!(sim.request(&mut b, body).await, Err(format!("no software config {id}")));
        }
        let unknown = sim.request(&mut b, RequestBody::ConfigShow { id: never.into() }).await;
        assert_eq!(unknown, Err(format!("no software config {never}")));
        // Nor referenced by a deployment or a group of its own servers.
        let error = deploy(&mut sim, &mut b, &id, "b-1").await.expect_err("refused");
        assert_eq!(error, format!("no software config {id}"));
        let group = serde_json::from_value(json!({"config_id": id, "servers": ["b-1", "b-2"]})).expect("group");
        let error = sim.request(&mut b, RequestBody::DeploymentGroupCreate(group)).await;
        assert_eq!(error, Err(format!("no software config {id}")));
        assert!(sim.store().deployments(None).await.expect("store").is_empty(), "nothing was deployed");

        // Still there, secret and all, for its creator and for administrators.
        for owner in [&mut a, &mut ops] {
            let shown = sim.request(owner, RequestBody::ConfigShow { id: id.clone() }).await;
            assert_eq!(shown, Ok(ResponseBody::Config(secret.clone())));
        }
        let deployed = deploy(&mut sim, &mut root, &id, "a-1").await.expect("root references any config");
        assert_eq!(deployed.config_id, id);
        let deleted = sim.request(&mut ops, RequestBody::ConfigDelete { id: theirs.id.clone() }).await;
        assert_eq!(deleted, Ok(ResponseBody::Deleted(theirs.id.clone())), "an administrator acts on all");
        let deleted = sim.request(&mut a, RequestBody::ConfigDelete { id: id.clone() }).await;
        assert_eq!(deleted, Ok(ResponseBody::Deleted(id)));
    });
}

#[test]
fn a_deployment_on_a_shared_server_is_its_creators_alone() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        // Both may deploy to shared-1: only ownership tells their deployments apart.
        let mut a = tenant(&mut sim, "tenanta", "a-* or shared-1").await;
        let mut b = tenant(&mut sim, "tenantb", "b-* or shared-1").await;
        let mut ops = admin(&mut sim, "ops").await;
        let config = create_config(&mut sim, &mut a).await;
        let mine = deploy(&mut sim, &mut a, &config.id, "shared-1").await.expect("deployed");
        let group = shared_group(&mut sim, &mut a, &config.id).await;
        let id = mine.id.clone();

        let hidden = format!("no deployment {id}");
        assert_eq!(sim.request(&mut b, RequestBody::DeploymentShow { id: id.clone() }).await, Err(hidden.clone()));
        assert_eq!(sim.request(&mut b, RequestBody::DeploymentDelete { id: id.clone() }).await, Err(hidden.clone()));
        let update = serde_json::from_value(json!({"action": "UPDATE"})).expect("update");
        let updated = sim.request(&mut b, RequestBody::DeploymentUpdate { id: id.clone(), update }).await;
        assert_eq!(updated, Err(hidden));
        assert!(deployment_ids(&mut sim, &mut b).await.is_empty(), "listing filters");
        let server = sim.request(&mut b, RequestBody::ServerConfigs { server_id: "shared-1".into() }).await;
        assert_eq!(server, Ok(ResponseBody::Items(Vec::new())), "nor its derived configs, inputs and all");
        let shown = sim.request(&mut b, RequestBody::DeploymentGroupShow { id: group.id.clone() }).await;
        assert_eq!(shown, Err(format!("no deployment group {}", group.id)));

        // Its creator and administrators see it (and the group's member).
        let seen = deployment_ids(&mut sim, &mut a).await;
        assert!(seen.contains(&id) && seen.len() == 2, "{seen:?}");
        assert_eq!(deployment_ids(&mut sim, &mut ops).await.len(), 2);
        assert!(sim.request(&mut a, RequestBody::DeploymentGroupShow { id: group.id.clone() }).await.is_ok());
        assert!(sim.request(&mut ops, RequestBody::DeploymentShow { id: id.clone() }).await.is_ok());
        // An update may switch only to a config its creator may read.
        let others = create_config(&mut sim, &mut b).await;
        let update = serde_json::from_value(json!({"config_id": others.id})).expect("update");
        let updated = sim.request(&mut a, RequestBody::DeploymentUpdate { id: id.clone(), update }).await;
        assert_eq!(updated, Err(format!("no software config {}", others.id)));
        let deleted = sim.request(&mut a, RequestBody::DeploymentDelete { id: id.clone() }).await;
        assert_eq!(deleted, Ok(ResponseBody::Deleted(id)));
    });
}

#[test]
fn enrollment_tokens_are_made_for_ones_own_servers_and_seen_by_their_creator() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let _a1 = sim.minion("a-1").await;
        let mut a = tenant(&mut sim, "tenanta", "a-*").await;
        let mut b = tenant(&mut sim, "tenantb", "b-*").await;
        let mut root = sim.root().await;
        let create = |minion: &str| RequestBody::TokenCreate { minion: minion.into(), ttl_ms: 60_000, replace: false };
        let Ok(ResponseBody::Token(TokenInfo { minion, .. })) = sim.request(&mut a, create("a-9")).await else {
            panic!("a token for a server of its own");
        };
        assert_eq!(minion, "a-9");
        let error = sim.request(&mut a, create("b-9")).await.expect_err("not its server");
        assert!(error.contains("not allowed to enroll b-9"), "{error}");
        let error = sim.request(&mut a, create("a-1")).await.expect_err("a-1 is enrolled");
        assert!(error.contains("a-1 already has an accepted key"), "{error}");
        let Ok(ResponseBody::Token(_)) = sim.request(&mut root, create("b-5")).await else { panic!("root's token") };

        let mine = token_ids(&mut sim, &mut a).await;
        assert_eq!(mine.len(), 1);
        let id = mine[0].clone();
        assert!(token_ids(&mut sim, &mut b).await.is_empty(), "listing filters");
        assert_eq!(token_ids(&mut sim, &mut root).await.len(), 2);
        let revoked = sim.request(&mut b, RequestBody::TokenRevoke { id: id.clone() }).await;
        assert_eq!(revoked, Err(format!("no enrollment token {id}")));
        let revoked = sim.request(&mut a, RequestBody::TokenRevoke { id: id.clone() }).await;
        assert_eq!(revoked, Ok(ResponseBody::Changed(vec![id])));
        assert_eq!(token_ids(&mut sim, &mut root).await.len(), 1, "root's own is left");
    });
}

#[test]
fn a_deployments_events_reach_its_creator_alone() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        // Both may deploy to shared-1 and read every deployment event their globs cover.
        let events_acl = || PrincipalAcl {
            rules: vec![halite_protocol::message::PrincipalRule {
                targets: "shared-1".into(),
                functions: vec!["deploy.apply".into()],
                args: std::collections::BTreeMap::new(),
            }],
            events: vec!["halite/deployment/*".into(), "halite/deployment_group/*".into()],
            admin: false,
            tenant: None,
        };
        let mut a = sim.principal_with("tenanta", events_acl()).await;
        let mut b = sim.principal_with("tenantb", events_acl()).await;
        let mut ops = sim
            .principal_with("ops", PrincipalAcl { admin: true, events: vec!["*".into()], ..PrincipalAcl::default() })
            .await;
        // A second session of the creator's listens (the first one's requests read its own).
        let mut a_watch = sim.principal_with("tenanta", events_acl()).await;
        for client in [&mut a_watch, &mut b] {
            subscribe(&mut sim, client, "halite/deployment/*").await;
        }
        subscribe(&mut sim, &mut ops, "halite/**").await;
        let config = create_config(&mut sim, &mut a).await;
        let mine = deploy(&mut sim, &mut a, &config.id, "shared-1").await.expect("deployed");
        let group = shared_group(&mut sim, &mut a, &config.id).await;
        let deleted = sim.request(&mut a, RequestBody::DeploymentDelete { id: mine.id.clone() }).await;
        assert_eq!(deleted, Ok(ResponseBody::Deleted(mine.id.clone())));
        sim.advance(std::time::Duration::from_millis(200)).await;

        let tags = |events: Vec<halite_protocol::message::Event>| -> Vec<String> {
            events.into_iter().map(|e| e.tag).collect()
        };
        let theirs = tags(events(&mut a_watch, &sim));
        let created = format!("halite/deployment/{}/IN_PROGRESS", mine.id);
        let gone = format!("halite/deployment/{}/DELETED", mine.id);
        assert!(theirs.contains(&created) && theirs.contains(&gone), "the creator hears its own: {theirs:?}");
        let others = tags(events(&mut b, &sim));
        assert!(others.is_empty(), "another principal that may deploy there heard {others:?}");
        let all = tags(events(&mut ops, &sim));
        assert!(all.contains(&created) && all.contains(&gone), "an administrator hears all: {all:?}");
        assert!(
            all.iter().any(|t| group.members[0].deployment_id.as_ref().is_some_and(|id| t.contains(id.as_str()))),
            "{all:?}"
        );
    });
}

#[test]
fn an_administrator_hands_what_root_owns_to_an_engine() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let mut root = sim.root().await;
        let mut heat = tenant(&mut sim, "heat", "vm-*").await;
        let mut ops = admin(&mut sim, "ops").await;
        // Rows from before owners existed are root's: heat cannot see its own old config.
        let old = create_config(&mut sim, &mut root).await;
        assert!(config_ids(&mut sim, &mut heat).await.is_empty());

        let transfer = |from: &str, to: &str| RequestBody::OwnerTransfer { from: from.into(), to: to.into() };
        let refused = sim.request(&mut heat, transfer("root", "heat")).await.expect_err("not an administrator");
        assert!(refused.contains("may not administer"), "{refused}");
        let unknown = sim.request(&mut ops, transfer("root", "nobody")).await.expect_err("no such principal");
        assert!(unknown.contains("no principal nobody"), "{unknown}");
        assert_eq!(sim.request(&mut ops, transfer("root", "heat")).await, Ok(ResponseBody::Changed(vec!["1".into()])));
        assert_eq!(config_ids(&mut sim, &mut heat).await, vec![old.id.clone()], "heat's now");
        let shown = sim.request(&mut heat, RequestBody::ConfigShow { id: old.id.clone() }).await;
        assert_eq!(shown, Ok(ResponseBody::Config(old)));
        assert_eq!(sim.request(&mut ops, transfer("root", "heat")).await, Ok(ResponseBody::Changed(vec!["0".into()])));
    });
}
