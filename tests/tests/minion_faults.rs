//! The minion under pressure and faults, on real processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::time::Duration;

use halite_client::{Client, ClientConfig, PublishSpec};
use halite_protocol::message::{RequestBody, ResponseBody, Target, TargetKind};
use halite_tests::{libfaketime, wait_for, Cluster};
use tokio::time::timeout;

/// A burst of jobs far larger than the minion's queues (its loop used to wait on a full send
/// queue while being the only reader of the connection, and stalled for good): 10,000 jobs wait
/// for an offline minion and all arrive the moment it connects; every one runs and returns, and
/// the minion still answers afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_jobs_never_stalls_the_minion() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    cluster.stop_minion("web1", false);
    let config = ClientConfig::from_master_config(&cluster.config).unwrap();
    const CLIENTS: usize = 10;
    const EACH: usize = 1000;
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let config = config.clone();
        tasks.push(tokio::spawn(async move {
            let client = Client::connect(config).await.unwrap();
            let mut jids = Vec::new();
            for _ in 0..EACH {
                let mut spec = PublishSpec::new(Target { kind: TargetKind::List, expr: "web1".into() }, "test.ping");
                spec.timeout_ms = 300_000;
                spec.ttl_ms = 300_000;
                jids.push(client.publish(spec).await.unwrap().jid);
            }
            jids
        }));
    }
    let mut jids = Vec::new();
    for task in tasks {
        jids.extend(task.await.unwrap());
    }
    assert_eq!(jids.len(), CLIENTS * EACH);
    cluster.start_minion("web1");
    let client = Client::connect(config).await.unwrap();
    let finished = timeout(Duration::from_secs(180), async {
        loop {
            let ResponseBody::Jobs(jobs) =
                client.request(RequestBody::JobList { limit: 10_000, filter: Default::default() }).await.unwrap()
            else {
                panic!("a job list")
            };
            let pending: u32 =
                jobs.iter().flat_map(|j| j.states.iter()).filter(|(state, _)| !state.is_final()).map(|(_, n)| *n).sum();
            if pending == 0 {
                return jobs;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .expect("every job of the burst ends");
    assert!(finished.iter().all(|j| j.states.keys().all(|s| s.as_str() == "returned")), "all returned");
    // Every one of them, not only the newest the listing shows.
    for jid in &jids {
        let ResponseBody::Job(detail) = client.request(RequestBody::JobShow { jid: jid.clone() }).await.unwrap() else {
            panic!("job {jid}")
        };
        assert_eq!(detail.minions[0].state.as_str(), "returned", "{jid}");
    }
    let last = cluster.cli(&["run", "--out", "json", "web1", "test.ping"]);
    assert_eq!(last.json()["minions"]["web1"]["state"], "returned", "{}", last.stdout);
}

/// One state directory serves one minion: a second process on it exits at once with a clear
/// error. Two processes sharing one key and id (a cloned image) do not flap ten times a second:
/// the master warns, and each backs off when the other takes the session.
#[test]
fn a_second_minion_on_one_state_directory_or_key_neither_starts_nor_flaps() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let dir = cluster.minion_dir("web1");
    let second = std::process::Command::new(cluster.bins().join("halite-minion"))
        .arg("--config")
        .arg(dir.join("minion.toml"))
        .output()
        .unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another halite-minion is running"), "{stderr}");

    // The clone: the same key and id in another directory.
    let clone = cluster.dir.join("clone");
    std::fs::create_dir_all(clone.join("state")).unwrap();
    std::fs::copy(dir.join("state/minion.key"), clone.join("state/minion.key")).unwrap();
    let config = std::fs::read_to_string(dir.join("minion.toml"))
        .unwrap()
        .replace(&format!("state_dir = {:?}", dir.join("state")), &format!("state_dir = {:?}", clone.join("state")));
    std::fs::write(clone.join("minion.toml"), config).unwrap();
    let log = std::fs::File::create(clone.join("minion.log")).unwrap();
    let mut twin = std::process::Command::new(cluster.bins().join("halite-minion"))
        .arg("--config")
        .arg(clone.join("minion.toml"))
        .stderr(log)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(6));
    let _ = twin.kill();
    let _ = twin.wait();
    let master_log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap();
    let sessions = master_log.lines().filter(|l| l.contains("minion authenticated") && l.contains("web1")).count();
    assert!(sessions < 15, "{sessions} sessions in 6 s: the two processes flap");
    assert!(master_log.contains("a second session for this minion replaces the first"), "{master_log}");
    let twin_log = std::fs::read_to_string(clone.join("minion.log")).unwrap()
        + &std::fs::read_to_string(dir.join("minion.log")).unwrap();
    assert!(twin_log.contains("backing off"), "{twin_log}");
}

/// A return too large for one message (16 MiB of invalid UTF-8 read as text is 48 MiB) used to
/// fail sealing, look like a lost session and be resent forever: it is cut to fit, marked
/// truncated, and the minion goes on answering.
#[test]
fn a_return_too_large_for_a_message_is_cut_and_the_minion_goes_on() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let big = cluster.dir.join("big.bin");
    std::fs::write(&big, vec![0xffu8; 16 << 20]).unwrap();
    let name = format!("name={}", big.display());
    let read = cluster.cli(&["run", "--out", "json", "web1", "file.read", &name, "max_bytes=16777216"]);
    let doc = read.json();
    let web1 = &doc["minions"]["web1"];
    assert_eq!(web1["state"], "returned", "{doc}");
    assert_eq!(web1["truncated"], true);
    let ping = cluster.cli(&["run", "--out", "json", "web1", "test.ping"]);
    assert_eq!(ping.json()["minions"]["web1"]["state"], "returned", "{}", ping.stderr);
}

/// With one slot, jobs start in the order the master issued them; jobs still queued at a
/// graceful stop were never started, so after the restart they run (only the one that was
/// running is reported interrupted); a job that waited past its timeout is not started.
#[test]
fn queued_jobs_start_in_jid_order_survive_a_restart_and_never_start_late() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion_with("web1", true, "", "max_concurrent_jobs = 1\n[policy]\nallow = [\"*\"]\n");
    cluster.start_minion("web1");
    cluster.wait_connected(&["web1"]);
    let order = cluster.dir.join("order");
    let mut jids = Vec::new();
    for n in 0..12 {
        let command = format!("echo {n} >> {}", order.display());
        let run = cluster.cli(&["run", "--async", "--job-timeout", "60s", "web1", "cmd.run", &command, "shell=true"]);
        jids.push(run.stdout.trim().to_owned());
    }
    wait_for("the twelve jobs", Duration::from_secs(30), || {
        jids.iter().all(|jid| cluster.job_states(jid) == [("web1".to_owned(), "returned".to_owned())]).then_some(())
    });
    let lines: Vec<String> = std::fs::read_to_string(&order).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines, (0..12).map(|n| n.to_string()).collect::<Vec<_>>(), "started in jid order");

    // One long job running, three queued behind it; the minion is stopped gracefully.
    let long = cluster.cli(&["run", "--async", "--job-timeout", "60s", "--ttl", "60s", "web1", "test.sleep", "30"]);
    let long = long.stdout.trim().to_owned();
    let queued: Vec<String> = (0..3)
        .map(|_| {
            let run = cluster.cli(&["run", "--async", "--job-timeout", "60s", "--ttl", "60s", "web1", "test.ping"]);
            run.stdout.trim().to_owned()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    cluster.stop_minion("web1", false);
    cluster.start_minion("web1");
    for jid in &queued {
        wait_for("a queued job after the restart", Duration::from_secs(30), || {
            (cluster.job_states(jid) == [("web1".to_owned(), "returned".to_owned())]).then_some(())
        });
    }
    wait_for("the long job's end", Duration::from_secs(30), || {
        let states = cluster.job_states(&long);
        (states[0].1 != "running" && states[0].1 != "sent").then_some(states)
    });

    // Behind a 3 s job, a 1 s job waits past its timeout: it is not started.
    let blocker = cluster.cli(&["run", "--async", "--job-timeout", "10s", "web1", "test.sleep", "3"]);
    let late = cluster.dir.join("late");
    let command = format!("touch {}", late.display());
    let starved =
        cluster.cli(&["run", "--out", "json", "--job-timeout", "1s", "web1", "cmd.run", &command, "shell=true"]);
    let doc = starved.json();
    assert_eq!(doc["minions"]["web1"]["state"], "timed_out", "{doc}");
    wait_for("the blocker", Duration::from_secs(20), || {
        (cluster.job_states(blocker.stdout.trim())[0].1 == "returned").then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert!(!late.exists(), "a job past its timeout never started");
}

/// A job's process does not outlive a minion killed with SIGKILL (it used to run on with no
/// timeout and nobody to report it).
#[test]
fn a_jobs_process_dies_with_a_killed_minion() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let pidfile = cluster.dir.join("job.pid");
    let command = format!("echo $$ > {}; exec sleep 300", pidfile.display());
    let run = cluster.cli(&["run", "--async", "--job-timeout", "600s", "web1", "cmd.run", &command, "shell=true"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let pid = wait_for("the job's process", Duration::from_secs(10), || {
        std::fs::read_to_string(&pidfile).ok().and_then(|p| p.trim().parse::<u32>().ok())
    });
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    cluster.stop_minion("web1", true);
    wait_for("the orphan to die", Duration::from_secs(5), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for its new parent to reap it.
        (stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z")).then_some(())
    });
}

/// The state directory on a full disk: a return that cannot be written to the outbox is kept in
/// memory and delivered (never reported as a restart, no temporary file left); with no inode
/// left for a run-once marker, the job is reported failed with the real reason; both recover
/// by themselves when space returns. Needs root (mounts a small tmpfs), as the module tests do.
#[test]
fn a_full_disk_loses_no_result_and_says_why() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion("web1", true, "");
    let state = cluster.minion_dir("web1").join("state");
    let mount = |options: &str| {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(&state)
            .status()
            .unwrap();
        assert!(status.success(), "mounting a tmpfs on the state directory needs root");
    };
    mount("size=4m,nr_inodes=64,mode=0700");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(state.clone());
    cluster.start_minion("web1");
    cluster.wait_connected(&["web1"]);

    // No inode left: jobs still run, the journal needs none.
    let mut n = 0;
    while std::fs::File::create(state.join(format!("inode{n}"))).is_ok() {
        n += 1;
    }
    let run = cluster.cli(&["run", "--out", "json", "web1", "cmd.run", "echo no inode"]);
    let doc = run.json();
    assert_eq!(doc["minions"]["web1"]["state"], "returned", "{doc}");
    assert_eq!(doc["minions"]["web1"]["return"]["stdout"], "no inode\n", "{doc}");
    for i in 0..n {
        let _ = std::fs::remove_file(state.join(format!("inode{i}")));
    }

    // No space: jobs run while their records fit in the journal's last page (a return that
    // does not is kept in memory and still delivered); then the run-once marker cannot be
    // written, so the next job does not start, and says why.
    let filler = state.join("filler");
    let _ = std::process::Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", filler.display()))
        .arg("bs=4k")
        .output();
    let mut refused = None;
    for attempt in 0..400 {
        let run = cluster.cli(&["run", "--out", "json", "web1", "cmd.run", "echo still here"]);
        let doc = run.json();
        if doc["minions"]["web1"]["state"] == "returned" {
            assert_eq!(doc["minions"]["web1"]["return"]["stdout"], "still here\n", "{doc}");
            continue;
        }
        assert_eq!(doc["minions"]["web1"]["state"], "failed", "{doc}");
        refused = Some((attempt, doc));
        break;
    }
    let (attempt, doc) = refused.expect("a job refused once the journal could not grow");
    let why = doc["minions"]["web1"]["return"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(why.contains("run-once marker could not be written"), "after {attempt} jobs: {doc}");
    let log = std::fs::read_to_string(cluster.minion_dir("web1").join("minion.log")).unwrap();
    assert!(log.contains("keeping it in memory"), "the refusal itself could not be stored: {log}");
    assert!(
        std::fs::read_dir(&state).unwrap().all(|e| e.unwrap().file_name() != "journal.new"),
        "no half-written journal left"
    );
    std::fs::remove_file(&filler).unwrap();

    let run = cluster.cli(&["run", "--out", "json", "web1", "test.ping"]);
    assert_eq!(run.json()["minions"]["web1"]["state"], "returned", "recovered by itself");
    cluster.stop_minion("web1", false);
}

/// A guest whose clock is a month off: jobs still run (their freshness is judged by the
/// master's clock), and a job interrupted by a kill and redelivered after a restart with the
/// clock 31 days ahead is not run a second time (run-once markers are not pruned by the local
/// clock). Uses libfaketime (Debian's `faketime`), preloaded.
#[test]
fn a_minion_whose_clock_jumps_runs_fresh_jobs_and_never_runs_a_jid_twice() {
    let cluster = Cluster::start("");
    cluster.prepare_minion("web1", true, "");
    let dir = cluster.minion_dir("web1");
    let preload = libfaketime();
    let start_with_clock = |offset: &str| {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("minion.log")).unwrap();
        // Only the wall clock is off, as on a guest whose clock is wrong; its process group
        // (the minion and the job it runs) is killed whole.
        std::process::Command::new(cluster.bins().join("halite-minion"))
            .process_group(0)
            .env("LD_PRELOAD", &preload)
            .env("FAKETIME", offset)
            .env("DONT_FAKE_MONOTONIC", "1")
            .arg("--config")
            .arg(dir.join("minion.toml"))
            .stderr(log)
            .spawn()
            .expect("the minion starts")
    };
    let mut minion = start_with_clock("-40d");
    cluster.wait_connected(&["web1"]);
    let ping = cluster.cli(&["run", "--out", "json", "web1", "test.ping"]);
    assert_eq!(ping.json()["minions"]["web1"]["state"], "returned", "a clock 40 days behind: {}", ping.stdout);

    // A job with a side effect, interrupted by kill -9.
    let count = cluster.dir.join("count");
    let command = format!("echo ran >> {}; sleep 30", count.display());
    let run = cluster.cli(&["run", "--async", "--job-timeout", "120s", "web1", "cmd.run", &command, "shell=true"]);
    let jid = run.stdout.trim().to_owned();
    wait_for("the job to start", Duration::from_secs(10), || count.exists().then_some(()));
    kill_group(&mut minion);

    // Back with the clock 31 days ahead: the master redelivers the job; it is reported, not rerun.
    let mut minion = start_with_clock("+31d");
    wait_for("the interrupted job's report", Duration::from_secs(30), || {
        let states = cluster.job_states(&jid);
        (states[0].1 == "failed").then_some(())
    });
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1, "the jid ran twice");
    let ping = cluster.cli(&["run", "--out", "json", "web1", "test.ping"]);
    assert_eq!(ping.json()["minions"]["web1"]["state"], "returned", "a clock 31 days ahead: {}", ping.stdout);
    kill_group(&mut minion);
}

/// SIGKILL to a child's whole process group, then reaps the child.
fn kill_group(child: &mut std::process::Child) {
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
}

/// A libzmq peer (pyzmq) receives the master's verdict before the connection closes, 20 times
/// out of 20, whether it is told to wait (an unknown key) or refused (another key for an
/// accepted id). The handshake itself is computed by `noise-probe`; pyzmq carries it.
#[test]
fn a_pyzmq_peer_receives_its_verdict_every_time() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let python = std::env::var_os("HALITE_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"));
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/verdict_probe.py");
    let probe = cluster.bins().join("noise-probe");
    let addr = format!("127.0.0.1:{}", cluster.port);
    for (id, seed, expected) in [("probe-{n}", "100", "pending"), ("web1", "200", "refused")] {
        let out = std::process::Command::new(&python)
            .arg(&script)
            .args([&addr, &cluster.master_key(), probe.to_str().unwrap(), id, seed, "20"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 20, "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(lines.iter().all(|l| l.starts_with(expected)), "{expected}: {stdout}");
    }
}

/// A rogue master holding the real master key sends path-like jids in every message a minion
/// takes one from: no file is created, changed or deleted through them, no job run, and the
/// minion keeps its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rogue_master_cannot_reach_files_through_jids() {
    use halite_protocol::identity::IdentityKey;
    use halite_protocol::message::{self as msg, Cancel, Job, Message, ReturnAck, SignedJob};
    use halite_protocol::noise::{Claim, LocalIdentity, Responder, SessionConfig};
    use halite_transport::{Router, RouterConfig, RouterEvent};

    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let key = halite_transport::keyfile::read_secret(&cluster.dir.join("master/master.key")).unwrap();
    let state = cluster.minion_dir("web1").join("state");
    let victim = state.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let files_before = files_in(&state);
    cluster.kill_master();

    // The rogue takes the master's address and completes the handshake with the real key.
    let mut router = Router::bind(format!("127.0.0.1:{}", cluster.port), RouterConfig::default()).await.unwrap();
    let identity = LocalIdentity::new(IdentityKey::from_seed(key.seed())).unwrap();
    let peer = loop {
        if let RouterEvent::Connected { peer, .. } = next(&mut router).await {
            break peer;
        }
    };
    let RouterEvent::Message { parts, .. } = next(&mut router).await else { panic!("message 1") };
    let responder = Responder::new(&identity, Claim::new("master", None).unwrap(), SessionConfig::default()).unwrap();
    let (awaiting, msg2) = responder.read_hello(&parts[0]).unwrap();
    router.send(peer, vec![msg2]).unwrap();
    let RouterEvent::Message { parts, .. } = next(&mut router).await else { panic!("message 3") };
    let (mut session, verdict) = awaiting.read_identity(&parts[0]).unwrap().accept(std::time::Instant::now()).unwrap();
    router.send(peer, verdict).unwrap();
    router.mark_authenticated(peer, halite_transport::Lane::Bulk).unwrap();
    let mut send = |message: &Message| {
        let parts = session.seal(&msg::encode(message), std::time::Instant::now()).unwrap();
        router.send(peer, parts).unwrap();
    };
    let sneaky = ["../victim", "../jobs/20261122000000000001", "/etc/hostname", ".."];
    for jid in sneaky {
        send(&Message::ReturnAck(ReturnAck { jid: jid.into() }));
        send(&Message::Cancel(Cancel { jid: jid.into() }));
        let job = Job {
            jid: jid.into(),
            function: "cmd.run".into(),
            args: vec![serde_json::json!(format!("touch {}", state.join("ran").display()))],
            kwargs: Default::default(),
            timeout_ms: 10_000,
            issued_at_ms: 0,
            ttl_ms: 0,
            caller: "root".into(),
            reach: None,
        };
        send(&Message::Job(SignedJob::sign(&job, &key)));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(files_in(&state), files_before, "a file was created or deleted through a jid");
    assert!(!state.join("ran").exists(), "a job with a path-like jid ran");
    assert!(std::path::Path::new("/etc/hostname").exists());
    // Still in session: the minion answers what it may (refusals), and did not hang up.
    let mut answers = 0;
    while let Ok(Some(RouterEvent::Message { .. })) = timeout(Duration::from_millis(300), router.recv()).await {
        answers += 1;
    }
    assert!(answers > 0, "the minion went quiet");
    assert!(!matches!(router.try_recv(), Some(RouterEvent::Disconnected { .. })));
}

/// The names in `dir`.
fn files_in(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

/// The router's next event, within 20 s.
async fn next(router: &mut halite_transport::Router) -> halite_transport::RouterEvent {
    timeout(Duration::from_secs(20), router.recv()).await.expect("the minion comes").expect("router up")
}

/// A damaged return in a real minion's journal: reported to the master as a failed return for
/// its job (a copy of the damaged journal kept beside it), and acknowledged like any other.
#[test]
fn a_damaged_stored_return_is_reported_and_the_journal_kept() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let run = cluster.cli(&["run", "--async", "--job-timeout", "60s", "--ttl", "60s", "web1", "test.sleep", "2"]);
    let jid = run.stdout.trim().to_owned();
    wait_for("the job to run", Duration::from_secs(10), || (cluster.job_states(&jid)[0].1 == "running").then_some(()));
    // The job ends with no master to take its return: the return stays in the journal.
    cluster.kill_master();
    let state = cluster.minion_dir("web1").join("state");
    let journal = state.join("journal");
    let mentions = |bytes: &[u8]| bytes.windows(jid.len()).filter(|w| *w == jid.as_bytes()).count();
    // Its marker names the jid once, its return twice (the record's header and the return).
    wait_for("the return to be stored", Duration::from_secs(20), || {
        (mentions(&std::fs::read(&journal).ok()?) >= 3).then_some(())
    });
    cluster.stop_minion("web1", true);
    // What a bad disk block leaves: the return's bytes, changed.
    let mut bytes = std::fs::read(&journal).unwrap();
    let last = bytes.windows(jid.len()).rposition(|w| w == jid.as_bytes()).unwrap();
    bytes[last + jid.len() + 4] ^= 0x20;
    std::fs::write(&journal, &bytes).unwrap();
    cluster.start_master();
    cluster.start_minion("web1");
    wait_for("the damaged return's report", Duration::from_secs(20), || {
        (cluster.job_states(&jid)[0].1 == "failed").then_some(())
    });
    let shown = cluster.cli(&["jobs", "show", &jid, "--out", "json"]).json();
    let error = shown["minions"]["web1"]["return"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains("damaged"), "{shown}");
    assert!(files_in(&state).iter().any(|name| name.starts_with("journal.damaged-")), "{:?}", files_in(&state));
    // Acknowledged: the journal's last record says so (kind 3, then the jid).
    let acked: Vec<u8> = [3, jid.len() as u8].into_iter().chain(jid.bytes()).collect();
    wait_for("the acknowledgement", Duration::from_secs(10), || {
        std::fs::read(&journal).ok()?.ends_with(&acked).then_some(())
    });
}

/// A minion that cannot reach its master says so at warn, with when it tries again (it used to
/// log "connecting" and then nothing).
#[test]
fn a_minion_that_cannot_reach_its_master_says_so() {
    let mut cluster = Cluster::start("");
    cluster.prepare_minion("web1", true, "");
    cluster.kill_master();
    cluster.start_minion("web1");
    let log = cluster.minion_dir("web1").join("minion.log");
    wait_for("the warning", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines()
            .find(|l| l.contains("WARN") && l.contains("cannot connect") && l.contains("retry_in"))
            .map(str::to_owned)
    });
}

/// A minion stopped in the middle of a job: `run`, `jobs show` and the job's detail show it
/// offline, with what becomes of its part (its return is taken when it comes back, until the
/// job's timeout), not as still running; `minions list` shows when it was last in contact.
#[test]
fn a_minion_stopped_mid_job_is_shown_offline_with_what_the_job_does_next() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("mid1", "");
    cluster.wait_connected(&["mid1"]);
    std::thread::sleep(Duration::from_millis(1500));
    // Connected: its last contact is now, not when it connected.
    let listed = cluster.cli(&["minions", "list", "--out", "json"]).json();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let seen = listed[0]["last_seen_ms"].as_i64().unwrap();
    assert!((now_ms - seen).abs() < 1000, "last contact {seen}, now {now_ms}: {listed}");

    let run = cluster.cli(&["run", "--async", "--job-timeout", "10m", "mid1", "cmd.run", "sleep 30"]);
    let jid = run.stdout.trim().to_owned();
    wait_for("the job running", Duration::from_secs(20), || {
        (cluster.job_states(&jid) == [("mid1".to_owned(), "running".to_owned())]).then_some(())
    });
    cluster.stop_minion("mid1", false);
    wait_for("mid1 gone", Duration::from_secs(20), || {
        (!cluster.connected().contains(&"mid1".to_owned())).then_some(())
    });
    let shown = cluster.cli(&["jobs", "show", &jid, "--out", "json"]).json();
    let detail = shown["minions"]["mid1"]["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.starts_with("offline: the minion left while the job was running"), "{shown}");
    assert!(detail.contains("its return is taken when it comes back") && detail.contains("600 s"), "{detail}");
    let text = cluster.cli(&["jobs", "show", &jid]).stdout;
    assert!(text.contains("offline: the minion left") && !text.contains("no return yet"), "{text}");

    // A run waiting on a minion that leaves says the same when it stops waiting.
    cluster.enroll_minion("mid2", "");
    cluster.wait_connected(&["mid2"]);
    let waiting = std::process::Command::new(cluster.bins().join("halite"))
        .arg("--config")
        .arg(&cluster.config)
        .args(["run", "-t", "6s", "mid2", "cmd.run", "sleep 30"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("mid2 running", Duration::from_secs(20), || {
        let jobs = cluster.cli(&["jobs", "list", "--out", "json", "--state", "running"]).json();
        jobs.as_array().is_some_and(|jobs| jobs.iter().any(|j| j["target"]["expr"] == "mid2")).then_some(())
    });
    cluster.stop_minion("mid2", false);
    let out = waiting.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("mid2") && said.contains("offline: the minion left while the job was running"), "{said}");
}
