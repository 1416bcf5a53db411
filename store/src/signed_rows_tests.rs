//! Signed rows through the stores: what a master wrote reads back; a row changed or written
//! past the masters is not honoured; rows from before signatures are signed once, at the
//! upgrade.

#![cfg(test)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{KeyState, PrincipalAcl};

use super::trust::Trust;
use super::{KeyRecord, PostgresStore, PrincipalRecord, SqliteStore, Store};

fn trust(seed: u8) -> Trust {
    Trust::new(IdentityKey::from_seed(&[seed; 32]), None, &format!("m{seed}"), Vec::new())
}

fn key(id: &str, state: KeyState) -> KeyRecord {
    KeyRecord { id: id.into(), public_key: [7; 32], state }
}

fn principal(name: &str) -> PrincipalRecord {
    PrincipalRecord { name: name.into(), public_key: [5; 32], acl: PrincipalAcl::default() }
}

/// A database file of its own (removed by the next run of the same test).
async fn sqlite() -> (std::path::PathBuf, std::path::PathBuf, SqliteStore) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("halite-signed-rows-{n}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("master.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store.set_trust(trust(1), 1).await.unwrap();
    (dir, path, store)
}

async fn sql(store: &SqliteStore, statement: &str) {
    sqlx::raw_sql(statement).execute(&mut *store.conn().await.unwrap()).await.unwrap();
}

#[tokio::test]
async fn rows_a_master_wrote_read_back_and_changed_rows_do_not() {
    let (_dir, _, store) = sqlite().await;
    store.put_key(&key("web1", KeyState::Accepted), 1).await.unwrap();
    store.put_key(&key("web2", KeyState::Pending), 1).await.unwrap();
    store.put_principal(&principal("ops"), 1).await.unwrap();
    assert_eq!(store.keys_for("web1").await.unwrap()[0].state, KeyState::Accepted);
    assert_eq!(store.principals().await.unwrap(), vec![principal("ops")]);

    // Accepted in the table alone; an ACL widened in the table; a row copied under another name.
    sql(&store, "UPDATE keys SET state = 'accepted' WHERE id = 'web2'").await;
    sql(
        &store,
        "INSERT INTO principals SELECT 'mallory', public_key, acl, updated_at, signer, signature FROM principals",
    )
    .await;
    sql(&store, r#"UPDATE principals SET acl = replace(acl, '"admin":false', '"admin":true') WHERE name = 'ops'"#)
        .await;
    sql(&store, "INSERT INTO keys (id, public_key, state, updated_at) VALUES ('web3', x'0707070707070707070707070707070707070707070707070707070707070707', 'accepted', 1)").await;
    let states: Vec<(String, KeyState)> = store.keys().await.unwrap().into_iter().map(|k| (k.id, k.state)).collect();
    assert_eq!(
        states,
        vec![
            ("web1".into(), KeyState::Accepted),
            ("web2".into(), KeyState::Pending),
            ("web3".into(), KeyState::Pending)
        ]
    );
    assert!(store.principals().await.unwrap().is_empty(), "neither the widened nor the copied principal");
    // An admin accepting it again signs it.
    store.put_key(&key("web3", KeyState::Accepted), 2).await.unwrap();
    assert_eq!(store.keys_for("web3").await.unwrap()[0].state, KeyState::Accepted);
}

#[tokio::test]
async fn a_store_one_master_uses_alone_trusts_no_other_key_even_registered() {
    let (_dir, path, store) = sqlite().await;
    // Another master's key writes (as a tool holding it would), and registers itself.
    store.set_trust(trust(2), 1).await.unwrap();
    store.put_key(&key("web1", KeyState::Accepted), 1).await.unwrap();
    store.put_principal(&principal("ops"), 1).await.unwrap();
    store.close().await;
    let store = SqliteStore::open(&path).await.unwrap();
    store.set_trust(trust(1), 1).await.unwrap();
    assert_eq!(store.keys_for("web1").await.unwrap()[0].state, KeyState::Pending);
    assert!(store.principals().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_denied_key_loses_its_signature() {
    let (_dir, _, store) = sqlite().await;
    store.put_key(&key("web1", KeyState::Accepted), 1).await.unwrap();
    store.create_token(&[1; 32], "web1", u64::MAX / 2, true, "root").await.unwrap();
    let used = store.enroll_with_token(&[1; 32], "web1", &[8; 32], 2).await.unwrap();
    assert_eq!(used, crate::TokenUse::Enrolled { replaced: true });
    // The old key's row, put back to accepted in the table, has no signature to show.
    sql(&store, "UPDATE keys SET state = 'accepted' WHERE public_key = x'0707070707070707070707070707070707070707070707070707070707070707'").await;
    let mut keys = store.keys_for("web1").await.unwrap();
    keys.sort_by_key(|k| k.public_key);
    assert_eq!(keys.iter().map(|k| k.state).collect::<Vec<_>>(), vec![KeyState::Pending, KeyState::Accepted]);
}

#[tokio::test]
async fn rows_from_before_signatures_are_signed_once_at_the_upgrade() {
    let (_dir, path, store) = sqlite().await;
    // The database as it was before the migration that added signatures, with its rows.
    sql(
        &store,
        "DROP TABLE masters; ALTER TABLE keys DROP COLUMN signer; ALTER TABLE keys DROP COLUMN signature; \
         ALTER TABLE principals DROP COLUMN signer; ALTER TABLE principals DROP COLUMN signature; \
         DELETE FROM _sqlx_migrations WHERE version = 9; \
         INSERT INTO keys VALUES ('old1', x'0707070707070707070707070707070707070707070707070707070707070707', 'accepted', 1); \
         INSERT INTO principals VALUES ('ops', x'0505050505050505050505050505050505050505050505050505050505050505', \
           '{\"rules\":[],\"events\":[],\"admin\":false}', 1)",
    )
    .await;
    store.close().await;
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.set_trust(trust(1), 2).await.unwrap(), 2, "both rows signed");
    assert_eq!(store.keys_for("old1").await.unwrap()[0].state, KeyState::Accepted);
    assert_eq!(store.principals().await.unwrap(), vec![principal("ops")]);
    // Once: a row written unsigned later is not signed by the next start.
    sql(&store, "INSERT INTO keys (id, public_key, state, updated_at) VALUES ('late1', x'0707070707070707070707070707070707070707070707070707070707070707', 'accepted', 3)").await;
    store.close().await;
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.set_trust(trust(1), 3).await.unwrap(), 0);
    assert_eq!(store.keys_for("late1").await.unwrap()[0].state, KeyState::Pending);
}

#[tokio::test]
async fn on_a_shared_store_a_registered_master_is_trusted_and_an_unregistered_one_is_not() {
    let options = super::test_postgres::fresh_database().await;
    let first = PostgresStore::connect(options.clone()).await.unwrap();
    first.set_trust(trust(1), 1).await.unwrap();
    let second = PostgresStore::connect(options.clone()).await.unwrap();
    second.set_trust(trust(2), 1).await.unwrap();
    second.put_key(&key("web1", KeyState::Accepted), 1).await.unwrap();
    second.put_principal(&principal("ops"), 1).await.unwrap();
    assert_eq!(first.keys_for("web1").await.unwrap()[0].state, KeyState::Accepted, "registered: trusted");
    assert_eq!(first.principals().await.unwrap(), vec![principal("ops")]);

    // A key nobody registered (a tool, or a role that may write the rows but not `masters`).
    let third = PostgresStore::connect(options).await.unwrap();
    third.set_trust(trust(3), 1).await.unwrap();
    sqlx::query("DELETE FROM masters WHERE id = 'm3'").execute(&mut *third.conn().await.unwrap()).await.unwrap();
    third.put_key(&key("web2", KeyState::Accepted), 1).await.unwrap();
    assert_eq!(first.keys_for("web2").await.unwrap()[0].state, KeyState::Pending);
    for store in [first, second, third] {
        store.close().await;
    }
}

#[tokio::test]
async fn token_rows_a_master_wrote_work_and_rows_written_or_changed_past_it_do_not() {
    use super::DeployStore;
    let (_dir, _, store) = sqlite().await;
    let far = u64::MAX / 2;
    store.create_api_token(&[1; 32], "heat", "root", 1, None).await.unwrap();
    store.create_api_token(&[2; 32], "ops", "root", 1, Some(far)).await.unwrap();
    assert_eq!(store.api_token_grant(&[1; 32], 2).await.unwrap().map(|g| g.principal).as_deref(), Some("heat"));
    // A narrow token turned into root's, one given a longer life, one written in the table.
    sql(&store, "UPDATE api_tokens SET principal = 'root' WHERE token_hash = x'0101010101010101010101010101010101010101010101010101010101010101'").await;
    sql(&store, "UPDATE api_tokens SET expires_at = NULL WHERE principal = 'ops'").await;
    sql(&store, "INSERT INTO api_tokens (token_hash, principal, created_at, id, owner) VALUES (x'0303030303030303030303030303030303030303030303030303030303030303', 'root', 1, '030303030303', 'root')").await;
    for hash in [[1; 32], [2; 32], [3; 32]] {
        assert_eq!(store.api_token_grant(&hash, 2).await.unwrap(), None, "{hash:?}");
    }

    // Enrollment: a token written in the table, and a signed one widened to replace a key.
    store.put_key(&key("web1", KeyState::Accepted), 1).await.unwrap();
    sql(&store, "INSERT INTO tokens (token_hash, minion, expires_at, id, owner) VALUES (x'0404040404040404040404040404040404040404040404040404040404040404', 'web9', 9999999999999, '040404040404', 'root')").await;
    let forged = store.enroll_with_token(&[4; 32], "web9", &[9; 32], 2).await.unwrap();
    assert_eq!(forged, crate::TokenUse::Invalid);
    assert!(store.keys_for("web9").await.unwrap().is_empty(), "no key recorded for a forged token");
    store.create_token(&[5; 32], "web1", far, false, "root").await.unwrap();
    sql(&store, "UPDATE tokens SET replaces_key = 1, replaced_key = x'0707070707070707070707070707070707070707070707070707070707070707' WHERE minion = 'web1'").await;
    let widened = store.enroll_with_token(&[5; 32], "web1", &[9; 32], 2).await.unwrap();
    assert_eq!(widened, crate::TokenUse::Invalid);
    assert_eq!(store.keys_for("web1").await.unwrap(), vec![key("web1", KeyState::Accepted)], "the key stays");
    // A token a master made enrolls, once.
    store.create_token(&[6; 32], "web2", far, false, "heat").await.unwrap();
    let used = store.enroll_with_token(&[6; 32], "web2", &[9; 32], 2).await.unwrap();
    assert_eq!(used, crate::TokenUse::Enrolled { replaced: false });
    let again = store.enroll_with_token(&[6; 32], "web2", &[8; 32], 3).await.unwrap();
    assert_eq!(again, crate::TokenUse::Invalid);
}

#[tokio::test]
async fn token_rows_from_before_their_signatures_are_signed_once_at_the_upgrade() {
    use super::DeployStore;
    let (_dir, path, store) = sqlite().await;
    sql(
        &store,
        "ALTER TABLE tokens DROP COLUMN signer; ALTER TABLE tokens DROP COLUMN signature; \
         ALTER TABLE tokens DROP COLUMN replaced_key; \
         ALTER TABLE api_tokens DROP COLUMN signer; ALTER TABLE api_tokens DROP COLUMN signature; \
         DELETE FROM _sqlx_migrations WHERE version = 12; \
         INSERT INTO api_tokens (token_hash, principal, created_at, id, owner) VALUES (x'0101010101010101010101010101010101010101010101010101010101010101', 'heat', 1, '010101010101', 'root'); \
         INSERT INTO tokens (token_hash, minion, expires_at, id, owner) VALUES (x'0202020202020202020202020202020202020202020202020202020202020202', 'web2', 9999999999999, '020202020202', 'root')",
    )
    .await;
    store.close().await;
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.set_trust(trust(1), 2).await.unwrap(), 2, "both token rows signed");
    assert_eq!(store.api_token_grant(&[1; 32], 2).await.unwrap().map(|g| g.principal).as_deref(), Some("heat"));
    // Once: a row written unsigned later is not signed by the next start.
    sql(&store, "INSERT INTO api_tokens (token_hash, principal, created_at, id, owner) VALUES (x'0303030303030303030303030303030303030303030303030303030303030303', 'root', 1, '030303030303', 'root')").await;
    store.close().await;
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.set_trust(trust(1), 3).await.unwrap(), 0);
    assert_eq!(store.api_token_grant(&[3; 32], 3).await.unwrap(), None);
    let used = store.enroll_with_token(&[2; 32], "web2", &[9; 32], 3).await.unwrap();
    assert_eq!(used, crate::TokenUse::Enrolled { replaced: false });
}

#[tokio::test]
async fn a_replacing_token_put_back_unused_replaces_nothing() {
    let (_dir, _, store) = sqlite().await;
    store.put_key(&key("web1", KeyState::Accepted), 1).await.unwrap();
    store.create_token(&[1; 32], "web1", u64::MAX / 2, true, "root").await.unwrap();
    let used = store.enroll_with_token(&[1; 32], "web1", &[8; 32], 2).await.unwrap();
    assert_eq!(used, crate::TokenUse::Enrolled { replaced: true });
    // A role that may write the table re-arms it, for a key of its own.
    sql(&store, "UPDATE tokens SET used_at = NULL").await;
    let again = store.enroll_with_token(&[1; 32], "web1", &[9; 32], 3).await.unwrap();
    assert_eq!(again, crate::TokenUse::Refused, "the key it was made to replace is gone");
    let accepted: Vec<[u8; 32]> = store
        .keys_for("web1")
        .await
        .unwrap()
        .into_iter()
        .filter(|k| k.state == KeyState::Accepted)
        .map(|k| k.public_key)
        .collect();
    assert_eq!(accepted, vec![[8; 32]], "the replacement stays the minion");
}
