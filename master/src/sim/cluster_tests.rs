//! Changes another master made to the shared store, applied by this one: in simulated time,
//! with the other master's writes made directly in the store and its announcement fed in.

#![cfg(test)]

use halite_protocol::message::{KeyState, PrincipalAcl};

use super::Sim;
use crate::server::Input;
use crate::store::{ClusterChange, KeyRecord, PrincipalRecord, Store};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn a_key_rejected_on_another_master_cuts_the_minion_here_and_the_others_stay() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let web1 = sim.minion("web1").await;
        let web2 = sim.minion("web2").await;
        let key = sim.store().keys_for("web1").await.unwrap().remove(0);
        sim.store().put_key(&KeyRecord { state: KeyState::Rejected, ..key }, 1).await.unwrap();
        sim.step(Input::Cluster(ClusterChange::Keys { ids: Some(vec!["web1".into(), "web2".into()]) })).await;
        assert_eq!(sim.net.closed(web1.peer).as_deref(), Some("key no longer accepted"));
        assert_eq!(sim.net.closed(web2.peer), None, "web2's key did not change");
        assert!(!sim.master.registry.accepted.contains("web1"));
    });
}

#[test]
fn a_key_replaced_by_an_enrollment_elsewhere_cuts_the_old_session_after_a_resync() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let web1 = sim.minion("web1").await;
        // Elsewhere, web1 enrolled with a token under a new key: the old one is denied.
        sim.store().create_token(&[7; 32], "web1", u64::MAX).await.unwrap();
        assert!(sim.store().enroll_with_token(&[7; 32], "web1", &[9; 32], 1).await.unwrap());
        // The announcement was lost with the listening connection: the resync still finds it.
        sim.step(Input::Cluster(ClusterChange::Resync)).await;
        assert_eq!(sim.net.closed(web1.peer).as_deref(), Some("key no longer accepted"));
        assert!(sim.master.registry.is_accepted("web1", &[9; 32]));
    });
}

#[test]
fn a_principal_removed_or_narrowed_on_another_master_loses_its_sessions_here() {
    rt().block_on(async {
        let mut sim = Sim::new().await;
        let heat = sim.principal("heat", "vm-*", &["deploy.apply"]).await;
        let trove = sim.principal("trove", "db-*", &["test.ping"]).await;
        let murano = sim.principal("murano", "app-*", &["test.ping"]).await;
        sim.store().delete_principal("heat").await.unwrap();
        let mut narrowed = sim.store().principals().await.unwrap().into_iter().find(|p| p.name == "trove").unwrap();
        narrowed.acl = PrincipalAcl { admin: false, ..narrowed.acl };
        narrowed.acl.rules[0].functions = vec!["test.version".into()];
        sim.store().put_principal(&narrowed, 2).await.unwrap();
        for name in ["heat", "trove", "murano"] {
            sim.step(Input::Cluster(ClusterChange::Principal { name: name.into() })).await;
        }
        assert_eq!(sim.net.closed(heat.peer).as_deref(), Some("principal changed"));
        assert_eq!(sim.net.closed(trove.peer).as_deref(), Some("principal changed"));
        assert_eq!(sim.net.closed(murano.peer), None, "murano's record did not change");
        assert!(!sim.master.registry.principals.contains_key("heat"));
        let held: Option<&PrincipalRecord> = sim.master.registry.principals.get("trove");
        assert_eq!(held.map(|p| p.acl.rules[0].functions.clone()), Some(vec!["test.version".to_owned()]));
    });
}
