//! Databases on the throwaway PostgreSQL server `scripts/test.sh` starts
//! (`HALITE_TEST_POSTGRES`), made with the server's own `psql`.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The server's admin URL.
pub fn server_url() -> String {
    std::env::var("HALITE_TEST_POSTGRES").unwrap_or_else(|_| {
        panic!(
            "PostgreSQL tests need a server: run scripts/test.sh, or `scripts/postgres.sh start DIR` \
             and export HALITE_TEST_POSTGRES=<the URL it prints>"
        )
    })
}

/// Runs one SQL command on the server (as its admin) and returns what `psql` printed.
pub fn admin_sql(sql: &str) -> String {
    sql_on(&server_url(), sql)
}

/// Runs one SQL command (or several, `;`-separated) on the database at `url` and returns what
/// `psql` printed.
pub fn sql_on(url: &str, sql: &str) -> String {
    let output = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
        .output()
        .unwrap_or_else(|e| panic!("running psql: {e}"));
    assert!(output.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Creates an empty database and returns its URL.
pub fn fresh_database() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("halite_e2e_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    admin_sql(&format!("DROP DATABASE IF EXISTS {name}"));
    admin_sql(&format!("CREATE DATABASE {name}"));
    let server = server_url();
    let base = server.rsplit_once('/').map_or(server.as_str(), |(base, _)| base);
    format!("{base}/{name}")
}

/// `url` asking for TLS with the server's certificate checked (`sslmode=verify-full`), against
/// the certificate `scripts/postgres.sh` made (`HALITE_TEST_POSTGRES_CA`).
pub fn verified_tls(url: &str) -> String {
    let ca = std::env::var("HALITE_TEST_POSTGRES_CA")
        .unwrap_or_else(|_| panic!("HALITE_TEST_POSTGRES_CA: the test server's certificate (scripts/test.sh sets it)"));
    format!("{url}?sslmode=verify-full&sslrootcert={ca}")
}

/// A PostgreSQL server of a test's own (to stop and start again), from `scripts/postgres.sh`;
/// stopped when dropped.
pub struct OwnServer {
    dir: std::path::PathBuf,
    /// Its admin URL.
    pub url: String,
}

fn script(command: &str, dir: &std::path::Path) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres.sh");
    let output = Command::new("bash")
        .arg(script)
        .arg(command)
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("scripts/postgres.sh: {e}"));
    assert!(output.status.success(), "postgres.sh {command}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

impl OwnServer {
    /// Initialises and starts a server in `dir`.
    pub fn start(dir: &std::path::Path) -> OwnServer {
        let url = script("start", dir);
        OwnServer { dir: dir.to_owned(), url }
    }

    /// Runs one SQL command on its database (the one its URL names) and returns what `psql`
    /// printed.
    pub fn sql(&self, sql: &str) -> String {
        let output = Command::new("psql")
            .args([self.url.as_str(), "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
            .output()
            .unwrap_or_else(|e| panic!("running psql: {e}"));
        assert!(output.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Stops it (a clean, fast shutdown).
    pub fn stop(&self) {
        script("stop", &self.dir);
    }

    /// Freezes it (SIGSTOP to the server and every process of it): connections stay open and
    /// nothing answers, as with a hung host.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets a frozen server run again (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pids: Vec<String> = self.pids().iter().map(u32::to_string).collect();
        let status = Command::new("kill").arg(signal).args(&pids).status();
        assert!(status.is_ok_and(|s| s.success()), "kill {signal} {pids:?}");
    }

    /// The server's processes now: the postmaster and its children (one backend per
    /// connection, and the server's own workers).
    pub fn pids(&self) -> Vec<u32> {
        let pid_file = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).unwrap_or_default();
        let postmaster = pid_file.lines().next().unwrap_or_default().trim().to_owned();
        assert!(!postmaster.is_empty(), "no postmaster.pid in {}", self.dir.display());
        let children = Command::new("pgrep").args(["-P", &postmaster]).output().map(|o| o.stdout).unwrap_or_default();
        std::iter::once(postmaster.as_str())
            .chain(String::from_utf8_lossy(&children).split_whitespace())
            .filter_map(|pid| pid.parse().ok())
            .collect()
    }

    /// Starts it again on the same port.
    pub fn resume(&self) {
        script("resume", &self.dir);
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| script("stop", &self.dir));
    }
}
