//! End-to-end: a minion keeps its own secrets from every function, runs no executable a
//! caller chose, is never wedged by a read, and never starts a job the master may already have
//! given up; `cmd.script` fetches `halite://` scripts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use halite_tests::{wait_for, Cluster};
use nix::sys::signal::Signal;
use serde_json::Value;

/// `halite run --out json <args>`: the minion's result for `id`.
fn result_of(cluster: &Cluster, id: &str, args: &[&str]) -> Value {
    let mut full = vec!["run", "--out", "json"];
    full.extend_from_slice(args);
    let run = cluster.cli(&full);
    assert!(!run.stdout.trim().is_empty(), "run {args:?}: {}", run.stderr);
    run.json()["minions"][id].clone()
}

#[test]
fn no_function_reads_the_minions_own_secrets_or_runs_a_chosen_binary() {
    let mut cluster = Cluster::start("");
    let open = cluster.dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::write(open.join("note"), "hello").unwrap();
    cluster.prepare_minion("m1", true, "");
    cluster.start_minion("m1");
    cluster.wait_connected(&["m1"]);
    let state = cluster.minion_dir("m1").join("state");
    let key = state.join("minion.key");
    assert!(key.exists());
    std::os::unix::fs::symlink(&key, open.join("key-link")).unwrap();
    std::os::unix::fs::symlink(&state, open.join("state-link")).unwrap();
    std::fs::hard_link(&key, open.join("hard-link")).unwrap();
    let secret = std::fs::read(&key).unwrap();

    let note = result_of(&cluster, "m1", &["m1", "file.read", open.join("note").to_str().unwrap()]);
    assert_eq!(note["state"], "returned", "{note}");
    let targets = [
        key.clone(),
        state.join("journal"),
        cluster.minion_dir("m1").join("enrollment.toml"),
        cluster.minion_dir("m1").join("minion.toml"),
        open.join("key-link"),
        open.join("state-link/minion.key"),
        open.join("../open/state-link/../state/minion.key"),
        open.join("hard-link"),
    ];
    for target in &targets {
        let name = format!("name={}", target.display());
        for function in ["file.read", "file.stat"] {
            let result = result_of(&cluster, "m1", &["m1", function, &name]);
            let text = result.to_string();
            assert_ne!(result["state"], "returned", "{function} {}: {text}", target.display());
            assert!(text.contains("the minion's own"), "{function} {}: {text}", target.display());
        }
    }
    // Nothing beneath the state directory is written or removed either.
    let write = result_of(
        &cluster,
        "m1",
        &["m1", "file.managed", &format!("name={}", state.join("x").display()), "contents=x"],
    );
    assert!(write.to_string().contains("the minion's own"), "{write}");
    let remove =
        result_of(&cluster, "m1", &["m1", "file.absent", &format!("name={}", cluster.minion_dir("m1").display())]);
    assert!(remove.to_string().contains("the minion's own"), "{remove}");
    assert_eq!(std::fs::read(&key).unwrap(), secret, "the key is untouched");

    // pkg.*'s bin_env names only interpreters the minion's config lists.
    let marker = cluster.dir.join("ran-as-root");
    let evil = cluster.dir.join("evil");
    std::fs::write(&evil, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&evil, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for function in ["pkg.list", "pkg.version"] {
        let args = ["m1", function, "provider=pip", &format!("bin_env={}", evil.display())];
        let mut args = args.to_vec();
        if function == "pkg.version" {
            args.push("name=x");
        }
        let result = result_of(&cluster, "m1", &args);
        assert!(result.to_string().contains("pip_bin_envs"), "{function}: {result}");
    }
    assert!(!marker.exists(), "a caller's bin_env ran");
}

#[test]
fn read_paths_confine_reads() {
    let mut cluster = Cluster::start("");
    let open = cluster.dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::write(open.join("note"), "hello").unwrap();
    let policy = format!("[policy]\nallow = [\"*\"]\nread_paths = [{open:?}]\n");
    cluster.prepare_minion_with("m1", true, "", &policy);
    cluster.start_minion("m1");
    cluster.wait_connected(&["m1"]);
    let inside = result_of(&cluster, "m1", &["m1", "file.read", open.join("note").to_str().unwrap()]);
    assert_eq!(inside["state"], "returned", "{inside}");
    let outside = result_of(&cluster, "m1", &["m1", "file.read", "/etc/hostname"]);
    assert!(outside.to_string().contains("read_paths"), "{outside}");
}

#[test]
fn a_fifo_read_fails_at_once_and_the_minion_keeps_answering() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion("m1", true, "");
    cluster.start_minion("m1");
    cluster.wait_connected(&["m1"]);
    let fifo = cluster.dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Several at once, as a caller wedging the runtime's threads would.
    let reads: Vec<String> = (0..8)
        .map(|_| {
            let run =
                cluster.cli(&["run", "--async", "--job-timeout", "20s", "m1", "file.read", fifo.to_str().unwrap()]);
            run.stdout.trim().to_owned()
        })
        .collect();
    let ping = result_of(&cluster, "m1", &["--job-timeout", "5s", "m1", "test.ping"]);
    assert_eq!(ping["state"], "returned", "{ping}");
    for jid in &reads {
        let states = wait_for("the FIFO read's end", Duration::from_secs(10), || {
            let states = cluster.job_states(jid);
            (states[0].1 != "sent" && states[0].1 != "running").then_some(states)
        });
        assert_eq!(states[0].1, "failed", "a FIFO is refused, not waited on");
    }
}

#[test]
fn a_job_delivered_after_the_master_gave_it_up_is_never_run() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion("m1", true, "");
    cluster.start_minion("m1");
    cluster.wait_connected(&["m1"]);
    let marker = cluster.dir.join("side-effect");
    cluster.signal_minion("m1", Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    let command = format!("touch {}", marker.display());
    let run = cluster.cli(&[
        "run",
        "--async",
        "--job-timeout",
        "3s",
        "--ttl",
        "300s",
        "m1",
        "cmd.run",
        &command,
        "shell=true",
    ]);
    let jid = run.stdout.trim().to_owned();
    assert!(!jid.is_empty(), "{}", run.stderr);
    wait_for("the master to give the job up", Duration::from_secs(20), || {
        (cluster.job_states(&jid)[0].1 == "timed_out").then_some(())
    });
    std::thread::sleep(Duration::from_secs(8));
    cluster.signal_minion("m1", Signal::SIGCONT);
    cluster.wait_connected(&["m1"]);
    // The minion has read the job by now: it answers a ping sent after it.
    let ping = result_of(&cluster, "m1", &["--job-timeout", "10s", "m1", "test.ping"]);
    assert_eq!(ping["state"], "returned", "{ping}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!marker.exists(), "a job the master had recorded timed out ran anyway");
    assert_eq!(cluster.job_states(&jid)[0].1, "timed_out");
}

#[test]
fn cmd_script_runs_a_script_the_master_serves() {
    let root = std::env::temp_dir().join(format!("halite-script-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("web")).unwrap();
    std::fs::write(root.join("web/s.sh"), "#!/bin/sh\necho \"served $1\"\n").unwrap();
    let mut cluster = Cluster::start(&format!("[files]\nroot = {root:?}\n"));
    cluster.prepare_minion("m1", true, "");
    cluster.start_minion("m1");
    cluster.wait_connected(&["m1"]);
    let ran = result_of(&cluster, "m1", &["m1", "cmd.script", "source=halite://web/s.sh", "args=[\"ok\"]"]);
    assert_eq!(ran["state"], "returned", "{ran}");
    assert!(ran.to_string().contains("served ok"), "{ran}");
    // Hashing a huge file the caller names happens off the runtime's threads: two at once do
    // not keep the minion from answering.
    let huge = cluster.dir.join("huge");
    std::fs::File::create(&huge).unwrap().set_len(200 << 30).unwrap();
    let name = format!("name={}", huge.display());
    for _ in 0..2 {
        cluster.cli(&[
            "run",
            "--async",
            "--job-timeout",
            "5s",
            "m1",
            "file.managed",
            &name,
            "source=halite://web/s.sh",
        ]);
    }
    let ping = result_of(&cluster, "m1", &["--job-timeout", "3s", "m1", "test.ping"]);
    assert_eq!(ping["state"], "returned", "{ping}");
    let wrong = format!("source_hash=sha256:{}", "0".repeat(64));
    let refused = result_of(&cluster, "m1", &["m1", "cmd.script", "source=halite://web/s.sh", &wrong]);
    assert!(refused.to_string().contains("not the source_hash"), "{refused}");
    let _ = std::fs::remove_dir_all(&root);
}

/// 250 deployments and 250 scripts at once on one minion: none fails to start with
/// `Text file busy` (about one in a hundred did, executing a script just written while other
/// jobs forked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_scripts_on_one_minion_all_run() {
    use halite_client::{Client, ClientConfig, JobEvent, PublishSpec};
    use halite_protocol::message::{Target, TargetKind};

    let mut cluster = Cluster::start("");
    let extra = format!("max_concurrent_jobs = 128\n{}", cluster.deploy_section("m1"));
    cluster.prepare_minion_with("m1", true, "", &extra);
    cluster.start_minion("m1");
    cluster.wait_connected(&["m1"]);
    let client = Client::connect(ClientConfig::from_master_config(&cluster.config).unwrap()).await.unwrap();
    let tasks: Vec<_> = (0..500)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move {
                let target = Target { kind: TargetKind::Glob, expr: "m1".into() };
                let script = format!("#!/bin/sh\necho run-{n}\n");
                let mut spec = if n % 2 == 0 {
                    let mut spec = PublishSpec::new(target, "deploy.apply");
                    let item = serde_json::json!({ "id": format!("00000000-0000-0000-0000-{n:012}"), "name": "s",
                        "group": "script", "config": script, "inputs": [], "outputs": [], "options": {},
                        "creation_time": "2026-11-26T00:00:00Z" });
                    spec.kwargs.insert("item".into(), item);
                    spec
                } else {
                    let mut spec = PublishSpec::new(target, "cmd.script");
                    spec.kwargs.insert("source".into(), Value::from(script));
                    spec
                };
                spec.timeout_ms = 120_000;
                let published = client.publish(spec).await.unwrap();
                loop {
                    let event = tokio::time::timeout(Duration::from_secs(180), client.next_job_event(&published.jid));
                    if matches!(event.await.expect("the job's end").unwrap(), JobEvent::Done) {
                        break;
                    }
                }
                let detail = client.job(&published.jid).await.unwrap();
                let text = serde_json::to_string(&detail.minions).unwrap();
                (!text.contains(&format!("run-{n}"))).then_some(text)
            })
        })
        .collect();
    let mut failed = Vec::new();
    for task in tasks {
        failed.extend(task.await.unwrap());
    }
    assert!(failed.is_empty(), "{} of 500 did not run: {:?}", failed.len(), &failed[..failed.len().min(3)]);
}
