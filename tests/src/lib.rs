//! A harness for end-to-end tests: a master and minions as real processes (the binaries built
//! by `cargo build`), each cluster in its own temporary directory, driven through the real
//! `halite` CLI. The tests themselves live in `tests/tests/`.

pub mod bench;
pub mod floor;
pub mod http;
pub mod link;
pub mod postgres;
pub mod probe;
pub mod swarm;
pub mod testroot;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// Where the binaries are: `$HALITE_BIN_DIR`, or the workspace's `target/debug`.
pub fn bin_dir() -> PathBuf {
    let dir = std::env::var_os("HALITE_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug"));
    for name in ["halite", "halite-master", "halite-minion"] {
        assert!(
            dir.join(name).exists(),
            "{} missing in {}: run `cargo build --bins` first (scripts/test.sh does)",
            name,
            dir.display()
        );
    }
    dir
}

/// Polls `probe` every 50 ms until it returns `Some`, for at most `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(started.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// libfaketime's library, where Debian puts it. Tests preload it themselves rather than run
/// the `faketime` wrapper: the wrapper keeps a semaphore and shared memory named by its pid in
/// `/dev/shm`, which a killed wrapper leaves behind and a later wrapper given the same pid
/// refuses to start on ("sem_open: File exists").
pub fn libfaketime() -> String {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|arch| arch.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists());
    match found {
        Some(path) => path.display().to_string(),
        None => panic!("libfaketime is not installed (Debian package faketime)"),
    }
}

/// Stops process `pid` with SIGSTOP and returns once every one of its threads is stopped:
/// `kill` returns before a thread running on another CPU has stopped, and meanwhile it could
/// still answer a request sent after.
pub fn freeze(pid: u32) {
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap_or_else(|e| panic!("SIGSTOP {pid}: {e}"));
    let state = |stat: String| stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    wait_for("every thread to stop", Duration::from_secs(10), || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let stopped = tasks.filter_map(Result::ok).all(|task| {
            std::fs::read_to_string(task.path().join("stat")).ok().and_then(state).is_some_and(|s| s == 'T')
        });
        stopped.then_some(())
    });
}

/// Lets a process [`freeze`] stopped go on.
pub fn thaw(pid: u32) {
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap_or_else(|e| panic!("SIGCONT {pid}: {e}"));
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A master (and minions) in a temporary directory, removed on drop with every process.
pub struct Cluster {
    /// The cluster's directory.
    pub dir: PathBuf,
    /// The master's config file.
    pub config: PathBuf,
    /// The master's port.
    pub port: u16,
    bins: PathBuf,
    master: Option<Child>,
    minions: Vec<(String, Child)>,
    /// More masters of the same cluster (same store, same identity), by port.
    peers: Vec<PeerMaster>,
    /// The master's open-file limit (soft and hard), when the test sets one.
    open_files: Option<u64>,
}

/// Another master of a [`Cluster`]: its own port, state directory and config, the first
/// master's keys.
struct PeerMaster {
    port: u16,
    config: PathBuf,
    child: Option<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut master) = self.master.take() {
            let _ = master.kill();
            let _ = master.wait();
        }
        for (_, child) in &mut self.minions {
            let _ = child.kill();
            let _ = child.wait();
        }
        for peer in &mut self.peers {
            if let Some(mut child) = peer.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("logs kept in {}", self.dir.display());
        }
    }
}

/// The result of a CLI call.
pub struct Run {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    fn from(output: Output) -> Self {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Stdout as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }
}

impl Cluster {
    /// Starts a master with `extra` appended to its config.
    pub fn start(extra: &str) -> Cluster {
        Cluster::start_with(extra, "info")
    }

    /// [`Cluster::start`] with the master's log filter (`warn` for benchmarks).
    pub fn start_with(extra: &str, log: &str) -> Cluster {
        let bins = bin_dir();
        let dir = std::env::temp_dir().join(format!(
            "halite-e2e-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
        let config = dir.join("master.toml");
        let text = format!(
            "listen = \"127.0.0.1:{port}\"\nstate_dir = {:?}\nlog = {log:?}\ntimeout_grace_secs = 2\n{extra}\n",
            dir.join("master")
        );
        std::fs::write(&config, text).unwrap_or_else(|e| panic!("{e}"));
        let mut cluster =
            Cluster { dir, config, port, bins, master: None, minions: Vec::new(), peers: Vec::new(), open_files: None };
        cluster.start_master();
        cluster
    }

    /// [`Cluster::start`] with the master limited to `open_files` descriptors (util-linux's
    /// `prlimit`, soft and hard).
    pub fn start_with_open_files(extra: &str, open_files: u64) -> Cluster {
        let mut cluster = Cluster::start(extra);
        cluster.kill_master();
        cluster.open_files = Some(open_files);
        cluster.start_master();
        cluster
    }

    /// (Re)starts the master process and waits until the CLI can talk to it.
    pub fn start_master(&mut self) {
        let _ = std::fs::remove_file(self.dir.join("master/master.addr"));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("master.log")).ok();
        let mut command = match self.open_files {
            Some(n) => {
                let mut prlimit = Command::new("prlimit");
                prlimit.arg(format!("--nofile={n}:{n}")).arg("--").arg(self.bins.join("halite-master"));
                prlimit
            }
            None => Command::new(self.bins.join("halite-master")),
        };
        let child = command
            .arg("--config")
            .arg(&self.config)
            .stderr(log.map_or(Stdio::null(), Stdio::from))
            .spawn()
            .unwrap_or_else(|e| panic!("starting halite-master: {e}"));
        self.master = Some(child);
        wait_for("the master", Duration::from_secs(15), || {
            (self.dir.join("master/master.addr").exists() && self.cli(&["key", "list"]).code == 0).then_some(())
        });
    }

    /// Starts another master of this cluster: the first one's config (so its `[store]`) with
    /// its own port and state directory, and a copy of the first one's keys (a cluster shares
    /// one identity). Returns its port.
    pub fn start_peer_master(&mut self) -> u16 {
        let port = self.add_peer_master(true);
        self.restart_peer_master(port);
        port
    }

    /// Prepares another master of this cluster without starting it: the first one's config with
    /// its own port and state directory, and the first one's keys when `same_identity` (else
    /// it makes its own at first start). Returns its port.
    pub fn add_peer_master(&mut self, same_identity: bool) -> u16 {
        let n = self.peers.len() + 1;
        let state = self.dir.join(format!("master-{n}"));
        std::fs::create_dir_all(&state).unwrap_or_else(|e| panic!("{e}"));
        if same_identity {
            for file in ["master.key", "master.pub", "root.key"] {
                std::fs::copy(self.dir.join("master").join(file), state.join(file))
                    .unwrap_or_else(|e| panic!("{file}: {e}"));
            }
        }
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
        let text = std::fs::read_to_string(&self.config).unwrap_or_default();
        let text = text
            .replace(&format!("127.0.0.1:{}", self.port), &format!("127.0.0.1:{port}"))
            .replace(&format!("{:?}", self.dir.join("master")), &format!("{state:?}"));
        let config = self.dir.join(format!("master-{n}.toml"));
        std::fs::write(&config, text).unwrap_or_else(|e| panic!("{e}"));
        self.peers.push(PeerMaster { port, config, child: None });
        port
    }

    /// (Re)starts a peer master by port (a running one is killed first) and waits until the CLI
    /// can talk to it.
    pub fn restart_peer_master(&mut self, port: u16) {
        self.restart_peer_master_with_env(port, &[]);
    }

    /// [`Cluster::restart_peer_master`] with these environment variables (libfaketime's, say).
    pub fn restart_peer_master_with_env(&mut self, port: u16, env: &[(&str, &str)]) {
        let bins = self.bins.clone();
        let dir = self.dir.clone();
        let peer = self.peers.iter_mut().find(|p| p.port == port).unwrap_or_else(|| panic!("no master on {port}"));
        // A restart of a running master stops it first: left running, it would keep the port
        // (the new one could not listen) and outlive the test.
        if let Some(mut running) = peer.child.take() {
            let _ = running.kill();
            let _ = running.wait();
        }
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("master-{port}.log"))).ok();
        let child = Command::new(bins.join("halite-master"))
            .arg("--config")
            .arg(&peer.config)
            .envs(env.iter().copied())
            .stderr(log.map_or(Stdio::null(), Stdio::from))
            .spawn()
            .unwrap_or_else(|e| panic!("starting halite-master: {e}"));
        peer.child = Some(child);
        wait_for("the peer master", Duration::from_secs(15), || {
            (self.cli_at(port, &["key", "list"]).code == 0).then_some(())
        });
    }

    /// Kills a peer master with SIGKILL.
    pub fn kill_peer_master(&mut self, port: u16) {
        if let Some(mut child) = self.peers.iter_mut().find(|p| p.port == port).and_then(|p| p.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The config file of the master on `port` (this cluster's first or a peer).
    pub fn config_of(&self, port: u16) -> &Path {
        self.peers.iter().find(|p| p.port == port).map_or(&self.config, |p| &p.config)
    }

    /// Runs the `halite` CLI against the master on `port` (this cluster's first or a peer).
    pub fn cli_at(&self, port: u16, args: &[&str]) -> Run {
        let config = self.config_of(port);
        let output = Command::new(self.bins.join("halite"))
            .arg("--config")
            .arg(config)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running halite: {e}"));
        Run::from(output)
    }

    /// The ids the master on `port` lists as connected (to it, or to another master of its
    /// cluster); empty while it does not answer.
    pub fn connected_at(&self, port: u16) -> Vec<String> {
        let run = self.cli_at(port, &["minions", "list", "--out", "json"]);
        if run.code != 0 {
            return Vec::new();
        }
        run.json()
            .as_array()
            .map(|list| {
                list.iter()
                    .filter(|m| m["connected"] == true)
                    .filter_map(|m| m["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until a `test.ping` through the master at `port` reaches every minion in `ids`,
    /// wherever each is connected: the masters have heard where the others' minions are.
    pub fn wait_reachable_through(&self, port: u16, ids: &[&str]) {
        let list = ids.join(",");
        wait_for(&format!("{list} reachable through {port}"), Duration::from_secs(20), || {
            let run = self.cli_at(port, &["run", "-L", &list, "test.ping", "--out", "json"]);
            (run.code == 0).then_some(())
        });
    }

    /// Points a prepared minion at these masters (`master = [...]` in its enrollment file).
    pub fn set_minion_masters(&self, id: &str, ports: &[u16]) {
        let path = self.minion_dir(id).join("enrollment.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let list: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
        let text =
            text.replace(&format!("master = \"127.0.0.1:{}\"", self.port), &format!("master = [{}]", list.join(", ")));
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The master's process id.
    pub fn master_pid(&self) -> Option<u32> {
        self.master.as_ref().map(Child::id)
    }

    /// The directory the binaries are taken from.
    pub fn bins(&self) -> &Path {
        &self.bins
    }

    /// Kills the master with SIGKILL.
    pub fn kill_master(&mut self) {
        if let Some(mut master) = self.master.take() {
            let _ = master.kill();
            let _ = master.wait();
        }
    }

    /// Stops the first master gracefully (SIGTERM): it closes its store cleanly.
    pub fn stop_master(&mut self) {
        if let Some(mut master) = self.master.take() {
            if let Ok(pid) = i32::try_from(master.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            let _ = master.wait();
        }
    }

    /// Registers principal `name` with a key generated into `dir` (`dir/<name>.key`) and the
    /// ACL flags `acl` (`--target`, `--function`, ...); panics unless the CLI succeeds.
    pub fn add_principal(&self, name: &str, dir: &Path, acl: &[&str]) {
        let dir = dir.to_string_lossy();
        let mut args = vec!["principal", "add", name, "--generate", dir.as_ref()];
        args.extend_from_slice(acl);
        let run = self.cli(&args);
        assert_eq!(run.code, 0, "principal add {name}: {}", run.stderr);
    }

    /// Tenants `proja` and `projb`, each a principal of that name (keys in `dir`) that may run
    /// `test.*` on its tenant's minions, and one connected minion each: `proja-web1`,
    /// `projb-web1`.
    pub fn two_tenants(&mut self, dir: &Path) {
        for tenant in ["proja", "projb"] {
            self.add_principal(tenant, dir, &["--tenant", tenant, "--target", "*", "--function", "test.*"]);
            self.enroll_minion(&format!("{tenant}-web1"), "");
        }
        self.wait_connected(&["proja-web1", "projb-web1"]);
    }

    /// Makes a cluster key (in `<dir>/cluster`) and certifies the masters on `ports` with it
    /// (their configs; they take it at their next start). Returns the key's directory.
    pub fn certify(&self, ports: &[u16]) -> PathBuf {
        let keys = self.dir.join("cluster");
        let init = self.bin("halite-master", &["cluster", "init", keys.to_str().unwrap_or_default()]);
        assert_eq!(init.code, 0, "{}", init.stderr);
        let cluster_key = keys.join("cluster.key");
        for &port in ports {
            let config = self.config_of(port).to_str().unwrap_or_default().to_owned();
            let run = self.bin(
                "halite-master",
                &["--config", &config, "cluster", "certify", "--cluster-key", cluster_key.to_str().unwrap_or_default()],
            );
            assert_eq!(run.code, 0, "{}", run.stderr);
        }
        keys
    }

    /// Runs the `halite` CLI against this master.
    pub fn cli(&self, args: &[&str]) -> Run {
        self.cli_at(self.port, args)
    }

    /// Runs any binary of the build with arguments.
    pub fn bin(&self, name: &str, args: &[&str]) -> Run {
        Run::from(Command::new(self.bins.join(name)).args(args).output().unwrap_or_else(|e| panic!("{name}: {e}")))
    }

    /// The master's public key as hex.
    pub fn master_key(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("master/master.pub")).unwrap_or_default();
        text.lines()
            .find(|l| !l.starts_with('#'))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_default()
            .to_owned()
    }

    /// A minion's directory.
    pub fn minion_dir(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Writes a minion's config and enrollment file (with a fresh token if `token`), without
    /// starting it. Its policy allows every function.
    pub fn prepare_minion(&self, id: &str, token: bool, grains: &str) {
        self.prepare_minion_with(id, token, grains, "[policy]\nallow = [\"*\"]\n");
    }

    /// A minion config section that keeps `deploy.apply`'s directories inside the minion's
    /// own directory (instead of heat-agents' system paths), with every function allowed.
    pub fn deploy_section(&self, id: &str) -> String {
        let dir = self.minion_dir(id).join("heat");
        format!(
            "[policy]\nallow = [\"*\"]\n[deploy]\ndeployed_dir = {:?}\nhooks_dirs = [{:?}]\nscript_working_dir = {:?}\nscript_outputs_dir = {:?}\n",
            dir.join("deployed"),
            dir.join("hooks"),
            dir.join("working"),
            dir.join("outputs"),
        )
    }

    /// [`Cluster::prepare_minion`] with `extra` TOML appended to the minion config.
    pub fn prepare_minion_with(&self, id: &str, token: bool, grains: &str, extra: &str) {
        let dir = self.minion_dir(id);
        std::fs::create_dir_all(dir.join("state")).unwrap_or_else(|e| panic!("{e}"));
        let token_line = if token {
            let run = self.cli(&["key", "token", "create", "--minion", id, "--ttl", "10m"]);
            assert_eq!(run.code, 0, "token create: {}", run.stderr);
            format!("token = {:?}\n", run.stdout.trim())
        } else {
            String::new()
        };
        let enrollment = format!(
            "master = \"127.0.0.1:{}\"\nmaster_key = {:?}\nid = {id:?}\n{token_line}",
            self.port,
            self.master_key()
        );
        std::fs::write(dir.join("enrollment.toml"), enrollment).unwrap_or_else(|e| panic!("{e}"));
        let config = format!(
            "state_dir = {:?}\nenrollment_file = {:?}\nactions_dir = {:?}\nplans_dir = {:?}\nlog = \"info\"\n{extra}\n[grains]\n{grains}\n",
            dir.join("state"),
            dir.join("enrollment.toml"),
            dir.join("actions.d"),
            dir.join("plans"),
        );
        std::fs::write(dir.join("minion.toml"), config).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts (or restarts) a prepared minion.
    pub fn start_minion(&mut self, id: &str) {
        self.start_minion_with_env(id, &[]);
    }

    /// Starts a prepared minion with these environment variables set (its commands inherit
    /// them: a way to make one minion of a fleet behave differently).
    pub fn start_minion_with_env(&mut self, id: &str, env: &[(&str, &str)]) {
        let dir = self.minion_dir(id);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("minion.log")).ok();
        let child = Command::new(self.bins.join("halite-minion"))
            .envs(env.iter().copied())
            .arg("--config")
            .arg(dir.join("minion.toml"))
            .stderr(log.map_or(Stdio::null(), Stdio::from))
            .spawn()
            .unwrap_or_else(|e| panic!("starting halite-minion: {e}"));
        self.minions.push((id.to_owned(), child));
    }

    /// Enrolls a minion that runs inside `root` (under chroot) with `extra` config; its files
    /// live in the root's `/etc/halite/<id>/`.
    pub fn start_minion_in_root(&mut self, root: &Path, id: &str, extra: &str) {
        let run = self.cli(&["key", "token", "create", "--minion", id, "--ttl", "10m"]);
        assert_eq!(run.code, 0, "token create: {}", run.stderr);
        let inner = format!("/etc/halite/{id}");
        let dir = root.join(inner.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let enrollment = format!(
            "master = \"127.0.0.1:{}\"\nmaster_key = {:?}\nid = {id:?}\ntoken = {:?}\n",
            self.port,
            self.master_key(),
            run.stdout.trim()
        );
        std::fs::write(dir.join("enrollment.toml"), enrollment).unwrap_or_else(|e| panic!("{e}"));
        let config = format!(
            "state_dir = \"/var/lib/halite/{id}\"\nenrollment_file = \"{inner}/enrollment.toml\"\nactions_dir = \"{inner}/actions.d\"\nlog = \"info\"\n{extra}\n"
        );
        std::fs::write(dir.join("minion.toml"), config).unwrap_or_else(|e| panic!("{e}"));
        let _ = std::fs::remove_dir_all(root.join(format!("var/lib/halite/{id}")));
        let log = std::fs::File::create(self.dir.join(format!("{id}.log"))).ok();
        let child = Command::new("chroot")
            .arg(root)
            .args(["/usr/local/bin/halite-minion", "--config", &format!("{inner}/minion.toml")])
            .stderr(log.map_or(Stdio::null(), Stdio::from))
            .spawn()
            .unwrap_or_else(|e| panic!("starting a minion in the root: {e}"));
        self.minions.push((id.to_owned(), child));
    }

    /// Prepares with a token and starts.
    pub fn enroll_minion(&mut self, id: &str, grains: &str) {
        self.prepare_minion(id, true, grains);
        self.start_minion(id);
    }

    /// Sends a signal to a running minion process.
    pub fn signal_minion(&self, id: &str, signal: Signal) {
        let child = self.minions.iter().find(|(m, _)| m == id).map(|(_, c)| c);
        let pid = child.and_then(|c| i32::try_from(c.id()).ok()).unwrap_or_else(|| panic!("no minion {id}"));
        let _ = kill(Pid::from_raw(pid), signal);
    }

    /// Stops a minion: SIGTERM (graceful) or SIGKILL.
    pub fn stop_minion(&mut self, id: &str, hard: bool) {
        let Some(index) = self.minions.iter().position(|(m, _)| m == id) else { return };
        let (_, mut child) = self.minions.remove(index);
        if hard {
            let _ = child.kill();
        } else if let Ok(pid) = i32::try_from(child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        let _ = child.wait();
    }

    /// The ids the master lists as connected.
    pub fn connected(&self) -> Vec<String> {
        self.connected_at(self.port)
    }

    /// Waits until exactly these minions (and maybe others) are connected.
    pub fn wait_connected(&self, ids: &[&str]) {
        wait_for(&format!("minions {ids:?} to connect"), Duration::from_secs(20), || {
            let connected = self.connected();
            ids.iter().all(|id| connected.iter().any(|c| c == id)).then_some(())
        });
    }

    /// Every minion's state for a job, from `halite jobs show --out json`.
    pub fn job_states(&self, jid: &str) -> Vec<(String, String)> {
        let run = self.cli(&["jobs", "show", jid, "--out", "json"]);
        assert_eq!(run.code, 0, "jobs show: {}", run.stderr);
        let doc = run.json();
        let mut states: Vec<(String, String)> = doc["minions"]
            .as_object()
            .map(|m| m.iter().map(|(id, v)| (id.clone(), v["state"].as_str().unwrap_or_default().to_owned())).collect())
            .unwrap_or_default();
        states.sort();
        states
    }
}
