//! The PostgreSQL store: the same [`Store`] on a database server, so several masters can share
//! one state (`[store] url = "postgres://…"`).
//!
//! Hot paths are one statement whatever their size: a job's minions and a batch of state changes
//! go in as arrays (`UNNEST`), so a job to 10,000 minions is one round trip, not 10,000.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::MinionJobState;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::Row;
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use super::records::db_int;
use super::records::{job_state, job_state_name, return_from_json, return_json, target_kind_name, to_json};
use super::{JobRecord, MinionRecord, StateChange, Store, StoreError, UnfinishedJob};

/// Schema migrations: versioned SQL files in `store/migrations/postgres`, embedded at build
/// time. sqlx takes an advisory lock while migrating, so masters starting together take turns.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The migration that added signatures to key and principal rows.
const SIGNED_ROWS: i64 = 7;
/// The migration that added signatures to enrollment and gateway token rows.
const SIGNED_TOKENS: i64 = 10;

/// Connections per master: the core serialises most writes; reads for clients and the
/// cluster's listeners use the rest.
const POOL_SIZE: u32 = 8;

/// How long a call waits for a connection before it fails as unavailable: the bound on a call
/// made in the moment between the database going away and the probe noticing (the core makes
/// its calls one at a time, so it never waits behind itself for a connection).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long connecting to the database may take at start before the attempt counts as failed
/// (and is logged, and tried again).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the probe asks the database whether it answers, and how long it waits: a
/// database that stops answering (frozen, its link silent) is noticed within half a second,
/// and every call waiting on it then fails as unavailable ([`PostgresStore::bounded`]).
const PROBE_EVERY: Duration = Duration::from_millis(200);
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);
/// Every how many probes the other masters' readiness addresses are read again (5 s): a master
/// started since is asked if this one loses the database later.
const PEERS_READ_EVERY: u32 = 25;
/// The most readiness addresses kept (the freshest): each is asked at every handover attempt.
const PEERS_READY_KEPT: i64 = 64;
/// How recently a master must have recorded its readiness address to be asked: a master gone
/// (or cut off itself) stops refreshing it.
const PEERS_READY_FRESH_MS: i64 = 60_000;

/// The longest one statement may run, on the server (`statement_timeout`) and in the master
/// (a call still waiting after this long fails as unavailable, whatever the probe says).
pub(crate) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest a statement of the masters' pool waits for a lock another session holds.
const LOCK_TIMEOUT: Duration = Duration::from_millis(500);

/// How often the listening connection shows it still carries something (a silent link would
/// otherwise keep a master deaf to the others until TCP gives up), and how long it may take.
const LISTENER_PING_EVERY: Duration = Duration::from_secs(2);
const LISTENER_PING_TIMEOUT: Duration = Duration::from_secs(1);
/// How long connecting the listener and starting to listen may take.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);

/// A store on a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// This process among the cluster's masters, to skip its own announcements.
    instance: String,
    /// Whether the database answered the probe last time (watched by the calls in flight).
    reachable: Arc<tokio::sync::watch::Sender<bool>>,
    /// How many times the database was found not answering (see `Store::interruptions`).
    interruptions: Arc<AtomicU64>,
    /// The database's clock minus this host's, in milliseconds, as the probe last measured it.
    clock_offset_ms: Arc<AtomicI64>,
    /// The other masters' readiness addresses, as the probe last read them (`master_readiness`)
    /// (kept when the database stops answering: that is when they are asked).
    peers_ready: Arc<tokio::sync::watch::Sender<Vec<String>>>,
    /// Announcements on their way out, in order (see [`notify`]).
    announcements: tokio::sync::mpsc::Sender<String>,
    /// A connection set aside for the core's hot writes (jobs, their states, presence), see
    /// [`PostgresStore::hot`].
    hot: Arc<Mutex<Option<PgConnection>>>,
    /// Whose rows and announcements it signs and trusts.
    pub trust: Arc<super::trust::TrustSlot>,
    /// The number of this process's last announcement (see `cluster_seal.rs`); held while one
    /// is queued, so they are queued in the order of their numbers.
    announced: Arc<std::sync::Mutex<u64>>,
    /// What this process announced lately, to know it when heard back (see `cluster_seal.rs`).
    own: Arc<super::cluster_seal::OwnAnnouncements>,
}

/// Announcements queued at most; past it one is dropped with a warning (the database is then
/// not keeping up, and the other masters reread everything when their listening connection
/// recovers).
const ANNOUNCEMENTS_QUEUED: usize = 65_536;

/// Sends the queued announcements in order, several per statement: the core queues them after
/// its writes and goes on, instead of waiting a round trip per announcement.
async fn notify(pool: PgPool, mut queue: tokio::sync::mpsc::Receiver<String>) {
    const PER_STATEMENT: usize = 64;
    const GATHER: Duration = Duration::from_millis(2);
    const ATTEMPTS: u32 = 3;
    // Its own connection, out of the pool (see `PostgresStore::hot`); a fresh one after an error.
    let mut own: Option<PgConnection> = None;
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        // What else comes within GATHER goes in the same statement: a busy master sends a few
        // hundred statements a second instead of one per announcement, and the others hear of
        // a change at most GATHER later.
        let gathered = tokio::time::sleep(GATHER);
        tokio::pin!(gathered);
        while batch.len() < PER_STATEMENT {
            tokio::select! {
                next = queue.recv() => match next {
                    Some(next) => batch.push(next),
                    None => break,
                },
                () = &mut gathered => break,
            }
        }
        let calls: Vec<String> = (0..batch.len()).map(|i| format!("pg_notify($1, ${})", i + 2)).collect();
        let sql = format!("SELECT {}", calls.join(", "));
        for attempt in 1..=ATTEMPTS {
            let mut query = sqlx::query(&sql).bind(super::cluster::CHANNEL);
            for payload in &batch {
                query = query.bind(payload);
            }
            let sent = match own.as_mut() {
                Some(conn) => query.execute(conn).await,
                None => match pool.acquire().await {
                    Ok(conn) => query.execute(own.insert(conn.detach())).await,
                    Err(error) => Err(error),
                },
            };
            if sent.is_err() {
                own = None;
            }
            match sent {
                Ok(_) => break,
                Err(error) if attempt == ATTEMPTS => {
                    tracing::warn!(%error, announcements = batch.len(), "could not tell the other masters of changes")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

impl PostgresStore {
    /// Whether other masters share this store: it is made for that.
    const SHARED: bool = true;

    /// Binds a job's thirteen columns, in the order of the `jobs` table.
    fn bind_job<'q>(
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        job: &'q JobRecord,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        query
            .bind(&job.jid)
            .bind(&job.function)
            .bind(target_kind_name(job.target.kind))
            .bind(&job.target.expr)
            .bind(to_json(&job.args))
            .bind(to_json(&job.kwargs))
            .bind(&job.caller)
            .bind(db_int(job.created_at_ms))
            .bind(db_int(job.timeout_ms))
            .bind(db_int(job.ttl_ms))
            .bind(&job.signed.body)
            .bind(&job.signed.signature)
            .bind(job.rollout.as_ref().map(to_json))
    }

    /// Returns that came after their slot ended, written after the batch's states (a late
    /// return in the same batch as its slot's end lands beside it).
    async fn record_late_returns(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        late: &[&StateChange],
    ) -> Result<(), StoreError> {
        for change in late {
            sqlx::query(&super::common_sql::postgres_sql(super::common_sql::LATE_RETURN))
                .bind(change.ret.as_ref().map(return_json))
                .bind(db_int(change.at_ms))
                .bind(&change.jid)
                .bind(&change.minion)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Connects with `options` and brings the schema up to date.
    pub async fn connect(options: PgConnectOptions) -> Result<Self, StoreError> {
        // Every statement of every connection (the pool's, the core's own, the listener's) has
        // a deadline on the server too.
        let timeout = format!("{}", STATEMENT_TIMEOUT.as_millis());
        let options = options.options([("statement_timeout", timeout.as_str())]);
        // The schema first, on a connection of its own: masters starting together wait for each
        // other's migration (an advisory lock), which the lock timeout below would cut short.
        // Opened directly, not through a pool: a failure comes at once and says why (refused,
        // unknown host, TLS, authentication), where a pool retries silently until its timeout.
        let mut migrating = tokio::time::timeout(CONNECT_TIMEOUT, sqlx::ConnectOptions::connect(&options))
            .await
            .map_err(|_| StoreError::Unavailable(format!("no connection within {CONNECT_TIMEOUT:?}")))??;
        let signed = Self::applied(&mut migrating, SIGNED_ROWS).await;
        let signed_tokens = Self::applied(&mut migrating, SIGNED_TOKENS).await;
        MIGRATOR.run(&mut migrating).await.map_err(|error| match error {
            sqlx::migrate::MigrateError::Execute(error) => StoreError::from(error),
            other => StoreError::Corrupt(format!("schema migration: {other}")),
        })?;
        let _ = sqlx::Connection::close(migrating).await;
        // A statement waiting for a lock (an operator's LOCK TABLE, VACUUM FULL, ALTER) gives up
        // after LOCK_TIMEOUT, so the core is not held behind it while the database answers.
        let lock_timeout = format!("{}", LOCK_TIMEOUT.as_millis());
        let options = options.options([("lock_timeout", lock_timeout.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        let mut bytes = [0u8; 8];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut bytes);
        let instance = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let (announcements, queue) = tokio::sync::mpsc::channel(ANNOUNCEMENTS_QUEUED);
        tokio::spawn(notify(pool.clone(), queue));
        let store = PostgresStore {
            pool,
            instance,
            reachable: Arc::new(tokio::sync::watch::Sender::new(true)),
            interruptions: Arc::default(),
            clock_offset_ms: Arc::default(),
            peers_ready: Arc::new(tokio::sync::watch::Sender::new(Vec::new())),
            announcements,
            hot: Arc::new(Mutex::new(None)),
            trust: Arc::default(),
            announced: Arc::default(),
            own: Arc::default(),
        };
        if signed.is_none() {
            store.trust.found_legacy_rows();
        }
        if signed_tokens.is_none() {
            store.trust.found_legacy_tokens();
        }
        let mut conn = store.pool.acquire().await?.detach();
        store.clock_offset_ms.store(clock_offset(&mut conn).await?, Ordering::Relaxed);
        tokio::spawn(probe(store.clone(), options_of(&store.pool), Some(conn)));
        Ok(store)
    }

    /// The version of migration `version` if it was applied before (none on a new database).
    async fn applied(conn: &mut PgConnection, version: i64) -> Option<i64> {
        sqlx::query_scalar::<_, i64>("SELECT version FROM _sqlx_migrations WHERE version = $1")
            .bind(version)
            .fetch_optional(conn)
            .await
            .unwrap_or(None)
    }

    /// The connection set aside for the core's hot writes, opened (taken out of the pool) if
    /// there is none. sqlx's pool pings every connection it gets back, a second round trip per
    /// call; the core makes these calls one at a time, so one connection of its own serves them
    /// without it. After a failed call, [`PostgresStore::after_hot`] drops it.
    async fn hot(&self) -> Result<MappedMutexGuard<'_, PgConnection>, StoreError> {
        let pool = self.pool()?;
        let mut slot = self.hot.lock().await;
        if slot.is_none() {
            *slot = Some(pool.acquire().await?.detach());
        }
        MutexGuard::try_map(slot, Option::as_mut)
            .map_err(|_| StoreError::Unavailable("no connection to the database".into()))
    }

    /// Drops the hot connection after a failed call (it may be broken, or inside an aborted
    /// transaction); the next call opens a fresh one.
    async fn after_hot<T>(&self, result: Result<T, sqlx::Error>) -> Result<T, StoreError> {
        if result.is_err() {
            self.hot.lock().await.take();
        }
        Ok(result?)
    }

    /// A connection of the pool, for the SQL both backends share.
    pub async fn conn(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, StoreError> {
        Ok(self.pool()?.acquire().await?)
    }

    /// The pool while the database answers; while it does not, every call fails at once as
    /// unavailable instead of waiting for a connection (the master's core must not stall),
    /// and a background probe notices when it is back.
    pub fn pool(&self) -> Result<&PgPool, StoreError> {
        if *self.reachable.borrow() {
            Ok(&self.pool)
        } else {
            Err(StoreError::Unavailable("the database does not answer; retrying in the background".into()))
        }
    }

    /// Runs one call of the store with a deadline: it fails as unavailable at once while the
    /// database is known not to answer, as soon as the probe finds it not answering while the
    /// call waits, and after [`STATEMENT_TIMEOUT`] whatever happens. The master's core awaits
    /// its calls one at a time, so this is what keeps a frozen or silent database from
    /// stalling it. The core's own connection is dropped after an abandoned call (it may still
    /// carry the answer).
    pub async fn bounded<T>(&self, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        let mut reachable = self.reachable.subscribe();
        if !*reachable.borrow_and_update() {
            return Err(StoreError::Unavailable("the database does not answer; retrying in the background".into()));
        }
        let outcome = tokio::select! {
            result = tokio::time::timeout(STATEMENT_TIMEOUT, call) => match result {
                Ok(result) => return result,
                Err(_) => {
                    self.set_reachable(false);
                    format!("the database did not answer within {} s", STATEMENT_TIMEOUT.as_secs())
                }
            },
            () = until(&mut reachable, false) => "the database stopped answering during the call".to_owned(),
        };
        if let Ok(mut hot) = self.hot.try_lock() {
            hot.take();
        }
        Err(StoreError::Indeterminate(outcome))
    }

    /// Records whether the database answers; a change is logged, and a loss counted.
    fn set_reachable(&self, answered: bool) {
        let was = self.reachable.send_replace(answered);
        match (was, answered) {
            (true, false) => {
                self.interruptions.fetch_add(1, Ordering::AcqRel);
                tracing::warn!("the database does not answer; store calls fail until it does")
            }
            (false, true) => tracing::info!("the database answers again"),
            _ => {}
        }
    }

    /// The database's time now, in Unix milliseconds (this host's clock corrected by the
    /// offset last measured): the one time the masters sharing it agree on.
    fn database_ms(&self) -> u64 {
        u64::try_from(wall_ms().saturating_add(self.clock_offset_ms.load(Ordering::Relaxed))).unwrap_or(0)
    }

    /// Every merged change in one statement (arrays, so one round trip whatever the batch).
    fn states_query(
        &self,
        merged: &[StateChange],
    ) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
        const UNFINISHED: [&str; 4] = ["waiting", "sent", "running", "queued"];
        if let [change] = merged {
            // One slot (a sequential job's return): a statement PostgreSQL plans once, as a
            // primary-key lookup, where the batch's join of arrays is planned again for every
            // execution (measured: 120 µs of planning against 59 µs of execution per return).
            return sqlx::query(
                "UPDATE job_minions SET state = $3, ret = COALESCE($4, ret), updated_at = $5 \
                 WHERE jid = $1 AND minion = $2 AND state = ANY($6::text[])",
            )
            .bind(change.jid.clone())
            .bind(change.minion.clone())
            .bind(job_state_name(change.state))
            .bind(change.ret.as_ref().map(return_json))
            .bind(db_int(change.at_ms))
            .bind(UNFINISHED.as_slice());
        }
        let rets: Vec<Option<String>> = merged.iter().map(|c| c.ret.as_ref().map(return_json)).collect();
        // The unfinished states are a parameter, not literals: with literals, the generic plan
        // PostgreSQL settles on for a prepared statement scans the whole partial index of
        // unfinished slots (dead entries included, until vacuum) for every batch; with a
        // parameter it cannot use that index and looks each slot up by its primary key.
        sqlx::query(
            "UPDATE job_minions j SET state = v.state, ret = COALESCE(v.ret, j.ret), updated_at = v.at \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[]) AS v(jid, minion, state, ret, at) \
             WHERE j.jid = v.jid AND j.minion = v.minion AND j.state = ANY($6::text[])",
        )
        .bind(merged.iter().map(|c| c.jid.clone()).collect::<Vec<_>>())
        .bind(merged.iter().map(|c| c.minion.clone()).collect::<Vec<_>>())
        .bind(merged.iter().map(|c| job_state_name(c.state)).collect::<Vec<_>>())
        .bind(rets)
        .bind(merged.iter().map(|c| db_int(c.at_ms)).collect::<Vec<_>>())
        .bind(UNFINISHED.as_slice())
    }
}

fn options_of(pool: &PgPool) -> PgConnectOptions {
    pool.connect_options().as_ref().clone()
}

/// Asks the database every [`PROBE_EVERY`] whether it answers, on a connection of its own (so
/// it never waits behind the pool), and keeps `reachable` up to date until the pool is closed.
/// Each answer also measures the database's clock against this host's.
async fn probe(store: PostgresStore, options: PgConnectOptions, mut conn: Option<PgConnection>) {
    use sqlx::ConnectOptions;
    // Read at once, then every PEERS_READ_EVERY probes while the database answers.
    let mut peers_read_in = 0;
    while !store.pool.is_closed() {
        tokio::time::sleep(PROBE_EVERY).await;
        let answered = match conn.as_mut() {
            Some(c) => match tokio::time::timeout(PROBE_TIMEOUT, clock_offset(c)).await {
                Ok(Ok(offset)) => {
                    store.clock_offset_ms.store(offset, Ordering::Relaxed);
                    if peers_read_in == 0 {
                        peers_read_in = PEERS_READ_EVERY;
                        if let Ok(Ok(peers)) = tokio::time::timeout(PROBE_TIMEOUT, store.read_peers_ready(c)).await {
                            store
                                .peers_ready
                                .send_if_modified(|known| std::mem::replace(known, peers.clone()) != peers);
                        }
                    }
                    peers_read_in -= 1;
                    true
                }
                _ => false,
            },
            None => match tokio::time::timeout(PROBE_TIMEOUT, options.connect()).await {
                Ok(Ok(c)) => {
                    conn = Some(c);
                    true
                }
                _ => false,
            },
        };
        if !answered {
            conn = None;
        }
        store.set_reachable(answered);
    }
}

impl PostgresStore {
    /// Records where this master answers its readiness (if it does), then reads where the
    /// other masters do: those that recorded theirs in the last [`PEERS_READY_FRESH_MS`] (by
    /// the database's clock), signed up with a key this master trusts.
    async fn read_peers_ready(&self, conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
        const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
        let trust = self.trust.get();
        let own = trust.ready_url().map(str::to_owned);
        if let Some(url) = &own {
            sqlx::query(&format!(
                "INSERT INTO master_readiness (ready_url, master_id, public_key, updated_at) VALUES ($1, $2, $3, {NOW_MS}) \
                 ON CONFLICT (ready_url) DO UPDATE SET master_id = excluded.master_id, \
                 public_key = excluded.public_key, updated_at = excluded.updated_at"
            ))
            .bind(url)
            .bind(trust.registration().id)
            .bind(&trust.public().as_bytes()[..])
            .execute(&mut *conn)
            .await?;
        }
        let rows = sqlx::query(&format!(
            "SELECT r.ready_url, m.public_key, m.id, m.certificate \
             FROM master_readiness r JOIN masters m ON m.public_key = r.public_key \
             WHERE r.updated_at > {NOW_MS} - $1 ORDER BY r.updated_at DESC LIMIT $2"
        ))
        .bind(PEERS_READY_FRESH_MS)
        .bind(PEERS_READY_KEPT)
        .fetch_all(conn)
        .await?;
        let mut peers = Vec::new();
        for row in rows {
            let Ok(key) = PublicIdentity::from_bytes(&row.try_get::<Vec<u8>, _>("public_key")?) else { continue };
            let registration =
                super::trust::Registration { id: row.try_get("id")?, certificate: row.try_get("certificate")? };
            let url: String = row.try_get("ready_url")?;
            if Some(&url) != own.as_ref() && trust.admit(&key, Some(&registration)).is_ok() && !peers.contains(&url) {
                peers.push(url);
            }
        }
        Ok(peers)
    }
}

/// Waits until the database is found answering (`up`) or not; forever once the store is gone.
async fn until(reachable: &mut tokio::sync::watch::Receiver<bool>, up: bool) {
    if reachable.wait_for(|answers| *answers == up).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The database's clock minus this host's, in milliseconds, measured at the middle of one
/// round trip.
async fn clock_offset(conn: &mut PgConnection) -> Result<i64, StoreError> {
    let before = wall_ms();
    let database: i64 =
        sqlx::query_scalar("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::int8").fetch_one(&mut *conn).await?;
    let after = wall_ms();
    Ok(database - (before + after) / 2)
}

fn wall_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Forwards the other masters' announcements to `tx` until its receiver is gone, those signed
/// by a master this one trusts and not replayed (`cluster_seal.rs`); the others are dropped,
/// logged and counted. A lost connection is made again, followed by a `Resync` (what was
/// announced meanwhile is lost).
async fn listen(store: PostgresStore, tx: tokio::sync::mpsc::Sender<super::Heard>) {
    use super::cluster::CHANNEL;
    const RETRY: Duration = Duration::from_millis(500);
    let (pool, me) = (store.pool.clone(), store.instance.clone());
    let mut guard = super::cluster_seal::ReplayGuard::default();
    let mut refusals = Refusals::default();
    let mut first = true;
    while !tx.is_closed() {
        // Not while the database does not answer (the probe says when it does again).
        until(&mut store.reachable.subscribe(), true).await;
        // Each step has a deadline: a silent link must not keep this task waiting for good.
        let opened = tokio::time::timeout(LISTEN_TIMEOUT, async {
            let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
            listener.listen(CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        })
        .await;
        let mut listener = match opened {
            Ok(Ok(listener)) => listener,
            Ok(Err(error)) => {
                tracing::warn!(%error, retry_in = ?RETRY, "cannot listen for the other masters' changes");
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(_) => {
                tracing::warn!(retry_in = ?RETRY, "cannot listen for the other masters' changes: the database did not answer");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let resync = super::Heard::new(me.clone(), super::ClusterChange::Resync);
        if !std::mem::take(&mut first) && tx.send(resync).await.is_err() {
            return;
        }
        let mut reachable = store.reachable.subscribe();
        let mut ping = tokio::time::interval(LISTENER_PING_EVERY);
        ping.tick().await;
        loop {
            // `try_recv` is cancel-safe: a notification is never lost to the other branches.
            let received = tokio::select! {
                received = listener.try_recv() => received,
                () = until(&mut reachable, false) => {
                    tracing::warn!("the database does not answer; listening again once it does");
                    break;
                }
                _ = ping.tick() => {
                    let pinged = tokio::time::timeout(LISTENER_PING_TIMEOUT, sqlx::query("SELECT 1").execute(&mut listener)).await;
                    if !matches!(pinged, Ok(Ok(_))) {
                        tracing::warn!("the connection carrying the other masters' changes went silent; listening again");
                        break;
                    }
                    continue;
                }
            };
            match received {
                Ok(Some(notification)) => match store.open(notification.payload(), &me, &mut guard).await {
                    Ok(None) => {}
                    // The store's own notice, never another master's word.
                    Ok(Some((announcement, _))) if announcement.change == super::ClusterChange::ListenerLost => {}
                    Ok(Some((announcement, signer))) => {
                        let heard =
                            super::Heard { from: announcement.from, signer: Some(signer), change: announcement.change };
                        if tx.send(heard).await.is_err() {
                            return;
                        }
                    }
                    Err(refused) => refusals.note(&store.trust.get(), refused),
                },
                Ok(None) => {
                    tracing::warn!("lost the connection carrying the other masters' changes; listening again");
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, "lost the connection carrying the other masters' changes; listening again");
                    break;
                }
            }
        }
        // Until the `Resync` of the next connection, the other masters' silence is not theirs.
        let lost = super::Heard::new(me.clone(), super::ClusterChange::ListenerLost);
        if tx.send(lost).await.is_err() {
            return;
        }
    }
}

/// Announcements dropped, logged at most once a second (anyone who may connect can send them).
#[derive(Default)]
struct Refusals {
    last_logged: Option<std::time::Instant>,
    unlogged: u64,
}

impl Refusals {
    fn note(&mut self, trust: &super::trust::Trust, refused: super::cluster_seal::Refused) {
        trust.announcements_refused.inc();
        self.unlogged += 1;
        let now = std::time::Instant::now();
        if self.last_logged.is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1)) {
            tracing::warn!(why = %refused, dropped = self.unlogged, "dropped an announcement no trusted master sent (forged or replayed?)");
            self.last_logged = Some(now);
            self.unlogged = 0;
        }
    }
}

impl PostgresStore {
    /// An announcement heard on the channel, if it is from a master this one trusts, fresh and
    /// not heard before; `None` for this process's own.
    async fn open(
        &self,
        payload: &str,
        me: &str,
        guard: &mut super::cluster_seal::ReplayGuard,
    ) -> Result<Option<(super::Announcement, halite_protocol::identity::PublicIdentity)>, super::cluster_seal::Refused>
    {
        use super::cluster_seal::{envelope, open, Refused};
        if self.own.heard(payload) {
            return Ok(None);
        }
        let sealed = envelope(payload)?;
        let trust = self.trust.get();
        let signer = match self.trusted_signer(&trust, Some(sealed.signer.as_slice())).await {
            Ok(signer) => signer?,
            // The database did not answer: not the sender's fault, but nothing to act on.
            Err(error) => {
                tracing::warn!(%error, "could not read a master's registration; its announcement is dropped");
                return Err(Refused::Unreadable);
            }
        };
        let announcement = open(&signer, &sealed)?;
        if announcement.from == me {
            return Ok(None);
        }
        // The database's time, as every master stamps its announcements with.
        let now = self.database_ms();
        guard.take(&signer, &announcement, now)?;
        Ok(Some((announcement, signer)))
    }
}

super::common_sql::common_helpers!(PostgresStore, PgRow, super::common_sql::postgres_sql);
super::signed_rows::signed_row_helpers!(PostgresStore, PgRow, super::common_sql::postgres_sql);

impl Store for PostgresStore {
    super::common_sql::common_store_methods!(super::common_sql::postgres_sql);

    async fn put_minions(&self, minions: &[MinionRecord]) -> Result<(), StoreError> {
        self.bounded(async move {
            // One row per id (the last wins, as with separate writes): ON CONFLICT may not touch a
            // row twice in one statement.
            let mut last: HashMap<&str, &MinionRecord> = HashMap::with_capacity(minions.len());
            for minion in minions {
                last.insert(&minion.id, minion);
            }
            if last.is_empty() {
                return Ok(());
            }
            let (mut ids, mut grains, mut functions, mut seen) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for minion in last.values() {
                ids.push(minion.id.clone());
                grains.push(to_json(&minion.grains));
                functions.push(to_json(&minion.functions));
                seen.push(db_int(minion.last_seen_ms));
            }
            let query = sqlx::query(
                "INSERT INTO minions (id, grains, functions, last_seen) \
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[]) \
                 ON CONFLICT (id) DO UPDATE SET grains = excluded.grains, functions = excluded.functions, \
                 last_seen = excluded.last_seen",
            )
            .bind(ids)
            .bind(grains)
            .bind(functions)
            .bind(seen);
            let result = query.execute(&mut *self.hot().await?).await;
            self.after_hot(result).await?;
            Ok(())
        })
        .await
    }

    async fn insert_job(&self, job: &JobRecord, states: &[(String, MinionJobState)]) -> Result<(), StoreError> {
        self.bounded(async move {
            let minions: Vec<&str> = states.iter().map(|(m, _)| m.as_str()).collect();
            let names: Vec<&str> = states.iter().map(|(_, s)| job_state_name(*s)).collect();
            // One statement, so one round trip and atomic on its own: the job and every minion's
            // first state.
            let query = Self::bind_job(
                sqlx::query(
                    "WITH job AS (INSERT INTO jobs (jid, function, target_kind, target_expr, args, kwargs, caller, \
                   created_at, timeout_ms, ttl_ms, body, signature, rollout) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING jid) \
                 INSERT INTO job_minions (jid, minion, state, updated_at) \
                 SELECT job.jid, m.minion, m.state, $8 FROM job, UNNEST($14::text[], $15::text[]) AS m(minion, state)",
                ),
                job,
            )
            .bind(&minions)
            .bind(&names);
            let result = query.execute(&mut *self.hot().await?).await;
            self.after_hot(result).await?;
            Ok(())
        })
        .await
    }

    async fn set_states(&self, changes: &[StateChange]) -> Result<(), StoreError> {
        self.bounded(async move {
            let merged = super::common_sql::merge_changes(changes.iter().filter(|c| !c.late));
            let late: Vec<&StateChange> = changes.iter().filter(|c| c.late).collect();
            let states = self.states_query(&merged);
            if late.is_empty() {
                if !merged.is_empty() {
                    let result = states.execute(&mut *self.hot().await?).await;
                    self.after_hot(result).await?;
                }
                return Ok(());
            }
            let mut tx = self.pool()?.begin().await?;
            if !merged.is_empty() {
                states.execute(&mut *tx).await?;
            }
            Self::record_late_returns(&mut tx, &late).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    async fn unfinished_jobs(&self) -> Result<Vec<UnfinishedJob>, StoreError> {
        self.bounded(async move {
            let rows = sqlx::query(
                "SELECT * FROM jobs WHERE jid IN (SELECT jid FROM job_minions WHERE state IN ('waiting', 'sent', 'running', 'queued')) \
                 ORDER BY created_at, jid",
            )
            .fetch_all(self.pool()?)
            .await?;
            let mut out: Vec<UnfinishedJob> = Vec::with_capacity(rows.len());
            let mut index = HashMap::with_capacity(rows.len());
            for row in &rows {
                let job = job_from_row(row)?;
                index.insert(job.jid.clone(), out.len());
                out.push((job, Vec::new()));
            }
            // Every minion of every unfinished job in one query.
            let jids: Vec<String> = index.keys().cloned().collect();
            let states = sqlx::query("SELECT jid, minion, state FROM job_minions WHERE jid = ANY($1)")
                .bind(&jids)
                .fetch_all(self.pool()?)
                .await?;
            for row in states {
                let jid: String = row.try_get("jid")?;
                if let Some(&i) = index.get(&jid) {
                    out[i].1.push((row.try_get("minion")?, job_state(&row.try_get::<String, _>("state")?)?));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn check(&self) -> Result<(), StoreError> {
        self.bounded(async move {
            // The server keeps its own files consistent; what the master can check is that the
            // schema is the one it knows (no migration newer than this build).
            let newest: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(self.pool()?)
                .await?;
            let known = MIGRATOR.iter().map(|m| m.version).max();
            match (newest, known) {
                (Some(newest), Some(known)) if newest > known => Err(corrupt(format!(
                    "the database's schema is version {newest}, newer than this master's {known}: upgrade the master"
                ))),
                _ => Ok(()),
            }
        })
        .await
    }

    async fn close(&self) {
        if let Some(conn) = self.hot.lock().await.take() {
            let _ = sqlx::Connection::close(conn).await;
        }
        self.pool.close().await;
    }

    async fn put_shared_event(
        &self,
        tag: &str,
        data: &halite_protocol::message::Value,
        now_ms: u64,
    ) -> Result<i64, StoreError> {
        self.bounded(async move {
            const KEEP_MS: u64 = 3_600_000;
            let mut tx = self.pool()?.begin().await?;
            sqlx::query("DELETE FROM cluster_events WHERE created_at < $1")
                .bind(db_int(now_ms.saturating_sub(KEEP_MS)))
                .execute(&mut *tx)
                .await?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO cluster_events (tag, data, created_at) VALUES ($1, $2, $3) RETURNING id",
            )
            .bind(tag)
            .bind(to_json(data))
            .bind(db_int(now_ms))
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(id)
        })
        .await
    }

    async fn shared_event(
        &self,
        id: i64,
        digest: &str,
    ) -> Result<Option<(String, halite_protocol::message::Value)>, StoreError> {
        self.bounded(async move {
            let row = sqlx::query("SELECT tag, data FROM cluster_events WHERE id = $1")
                .bind(id)
                .fetch_optional(self.pool()?)
                .await?;
            let Some(row) = row else { return Ok(None) };
            let (tag, data): (String, String) = (row.try_get("tag")?, row.try_get("data")?);
            if super::event_digest(&tag, &data) != digest {
                self.trust.get().rows_refused.inc();
                tracing::error!(id, %tag, "a stored event does not match its announcement: ignored (changed past the masters?)");
                return Ok(None);
            }
            Ok(Some((tag, super::records::json(&data)?)))
        })
        .await
    }

    fn instance(&self) -> &str {
        &self.instance
    }

    async fn announce(&self, change: &super::ClusterChange) -> Result<(), StoreError> {
        self.bounded(async move {
            let trust = self.trust.get();
            let at = self.database_ms();
            let mut seq = self.announced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let body = super::cluster::Announcement::payload(&self.instance, *seq + 1, at, change);
            let payload = super::cluster_seal::seal(&trust, &body);
            self.own.sent(&payload);
            self.announcements
                .try_send(payload)
                .map_err(|_| StoreError::Unavailable("too many announcements waiting to be sent".into()))?;
            *seq += 1;
            Ok(())
        })
        .await
    }

    fn interruptions(&self) -> u64 {
        self.interruptions.load(Ordering::Acquire)
    }

    fn reachability(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        Some(self.reachable.subscribe())
    }

    fn clock_offset(&self) -> Option<Arc<AtomicI64>> {
        Some(self.clock_offset_ms.clone())
    }

    fn peers_ready(&self) -> Option<tokio::sync::watch::Receiver<Vec<String>>> {
        Some(self.peers_ready.subscribe())
    }

    fn changes(&self) -> Option<tokio::sync::mpsc::Receiver<super::Heard>> {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(listen(self.clone(), tx));
        Some(rx)
    }
}

// Configs, deployments and gateway tokens: the SQL both backends share.
super::deploy_sql::deploy_store!(PostgresStore, super::common_sql::postgres_sql);
super::audit_sql::audit_helpers!(PostgresStore);
super::audit_sql::audit_store!(PostgresStore, super::common_sql::postgres_sql);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::conformance_suite;
    use crate::test_postgres::fresh_database;

    conformance_suite!(async { PostgresStore::connect(fresh_database().await).await.expect("postgres store") });
}
