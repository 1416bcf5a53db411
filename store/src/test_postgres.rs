//! A fresh PostgreSQL database per test, on the server `HALITE_TEST_POSTGRES` names
//! (`scripts/test.sh` starts one with `scripts/postgres.sh`).

#![cfg(test)]

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// Creates an empty database and returns options that connect to it.
pub(crate) async fn fresh_database() -> PgConnectOptions {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let url = std::env::var("HALITE_TEST_POSTGRES").expect(
        "PostgreSQL tests need a server: run scripts/test.sh, or `scripts/postgres.sh start DIR` \
         and export HALITE_TEST_POSTGRES=<the URL it prints>",
    );
    let admin = PgConnectOptions::from_str(&url).expect("HALITE_TEST_POSTGRES is a postgres:// URL");
    let name = format!("halite_unit_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let mut conn = admin.connect().await.expect("connecting to HALITE_TEST_POSTGRES");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name}")).execute(&mut conn).await.expect("drop");
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("create database");
    conn.close().await.ok();
    admin.database(&name)
}
