//! `halite demo`: a master and three minions on loopback in a temporary directory, enrolled with
//! tokens; runs test.ping, grains.items and cmd.run; shuts everything down.
//!
//! It runs the real `halite-master` and `halite-minion` binaries from the directory this binary
//! is in (`cargo build --release` builds all three).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use halite_client::{Client, ClientConfig};
use halite_protocol::message::{RequestBody, ResponseBody};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::output::{paint, Format};
use crate::run::{self, RunArgs};

const MINIONS: [(&str, &str); 3] = [("web1", "web"), ("web2", "web"), ("db1", "db")];

/// Children that are stopped (SIGTERM, then SIGKILL) whatever happens.
struct Processes(Vec<(String, Child)>);

impl Processes {
    async fn stop(&mut self) {
        for (_, child) in &self.0 {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        for (name, child) in &mut self.0 {
            match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    eprintln!("{name} did not stop on SIGTERM; killing it");
                    let _ = child.kill().await;
                }
            }
        }
        self.0.clear();
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.start_kill();
        }
    }
}

fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!("{} not found next to {}; build all binaries first (cargo build --release)", name, exe.display());
    }
    Ok(path)
}

fn step(text: &str) {
    println!("\n{}", paint(&format!("$ {text}"), "1;36"));
}

pub(crate) async fn run(keep: bool) -> anyhow::Result<ExitCode> {
    let (master_bin, minion_bin) = (sibling("halite-master")?, sibling("halite-minion")?);
    let dir = std::env::temp_dir().join(format!("halite-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut processes = Processes(Vec::new());
    let result = demo(&dir, &master_bin, &minion_bin, &mut processes).await;
    processes.stop().await;
    println!("\nmaster and minions stopped");
    if keep {
        println!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut probe: impl FnMut() -> F,
) -> anyhow::Result<T> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("timed out waiting for {what}")
}

async fn demo(dir: &Path, master_bin: &Path, minion_bin: &Path, processes: &mut Processes) -> anyhow::Result<ExitCode> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let master_dir = dir.join("master");
    let config_path = dir.join("master.toml");
    std::fs::write(
        &config_path,
        format!("id = \"demo-master\"\nlisten = \"127.0.0.1:{port}\"\nstate_dir = {:?}\nlog = \"warn\"\n", master_dir),
    )?;
    println!("demo directory {}", dir.display());
    let log = std::fs::File::create(dir.join("master.log"))?;
    let child = Command::new(master_bin)
        .arg("--config")
        .arg(&config_path)
        .stderr(log)
        .spawn()
        .context("starting the master")?;
    processes.0.push(("halite-master".into(), child));
    println!("started halite-master on 127.0.0.1:{port}");

    let config = wait_for("the master to start", || {
        let path = config_path.clone();
        let ready = master_dir.join("master.addr").exists();
        async move { ready.then(|| ClientConfig::from_master_config(&path).ok()).flatten() }
    })
    .await?;
    let client = Client::connect(config).await?;

    for (id, role) in MINIONS {
        let body = RequestBody::TokenCreate { minion: id.into(), ttl_ms: 600_000, replace: false };
        let ResponseBody::Token(token) = client.request(body).await? else { bail!("unexpected answer") };
        let minion_dir = dir.join(id);
        std::fs::create_dir_all(&minion_dir)?;
        let master_key = std::fs::read_to_string(master_dir.join("master.pub"))?;
        let master_key = master_key.lines().filter(|l| !l.starts_with('#')).collect::<String>();
        let master_key = master_key.split_whitespace().nth(1).unwrap_or_default().to_owned();
        std::fs::write(
            minion_dir.join("enrollment.toml"),
            format!(
                "master = \"127.0.0.1:{port}\"\nmaster_key = {master_key:?}\nid = {id:?}\ntoken = {:?}\n",
                token.token
            ),
        )?;
        std::fs::write(
            minion_dir.join("minion.toml"),
            format!(
                "state_dir = {:?}\nenrollment_file = {:?}\nlog = \"warn\"\n[policy]\nallow = [\"test.*\", \"grains.*\", \"sys.*\", \"cmd.run\"]\n[grains]\nrole = {role:?}\n",
                minion_dir.join("state"),
                minion_dir.join("enrollment.toml")
            ),
        )?;
        let log = std::fs::File::create(minion_dir.join("minion.log"))?;
        let child = Command::new(minion_bin)
            .arg("--config")
            .arg(minion_dir.join("minion.toml"))
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting minion {id}"))?;
        processes.0.push((id.into(), child));
        println!("started halite-minion {id} with a one-time enrollment token");
    }

    let client_ref = &client;
    let mut connected = 0;
    let started = Instant::now();
    while connected < MINIONS.len() {
        if started.elapsed() > Duration::from_secs(20) {
            bail!("only {connected} of {} minions connected within 20 s", MINIONS.len());
        }
        let ResponseBody::Minions(list) =
            client_ref.request(RequestBody::MinionList { pattern: "*".into(), after: None, limit: None }).await?
        else {
            bail!("unexpected answer")
        };
        connected = list.iter().filter(|m| m.connected).count();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("all minions enrolled and connected in {} ms", started.elapsed().as_millis());

    let mut code = ExitCode::SUCCESS;
    let commands: [(&str, RunArgs); 3] = [
        ("halite run '*' test.ping", RunArgs::glob("*", "test.ping", &[])),
        ("halite run 'web*' grains.items", RunArgs::glob("web*", "grains.items", &[])),
        ("halite run '*' cmd.run 'uname -sr'", RunArgs::glob("*", "cmd.run", &["uname -sr"])),
    ];
    step("halite key list");
    crate::admin::key(
        &client,
        crate::admin::KeyCommand::List { pattern: "*".into(), state: Vec::new() },
        Format::Table,
    )
    .await?;
    for (text, args) in commands {
        step(text);
        if run::run(&client, args, Format::Table).await? != ExitCode::SUCCESS {
            code = ExitCode::FAILURE;
        }
    }
    step("halite minions list");
    crate::admin::minions(&client, crate::admin::MinionsCommand::List { pattern: "*".into() }, Format::Table).await?;
    Ok(code)
}
