//! Files the master serves (`[files] root`, `file.managed source=halite://...`), on real
//! processes: a file larger than one message arrives whole and checked, an unchanged file is
//! not fetched again, and wrong digests, escapes and missing files are refused clearly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use halite_tests::Cluster;
use sha2::{Digest, Sha256};

/// More than the 16 MiB a message may carry, in bytes that do not compress.
fn big_content() -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..17 * 1024 * 1024 + 123)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn a_minion_copies_a_file_larger_than_a_message_from_the_master_and_checks_it() {
    let root = std::env::temp_dir().join(format!("halite-file-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("app")).unwrap();
    let big = big_content();
    std::fs::write(root.join("app/big.bin"), &big).unwrap();
    std::fs::write(root.join("app/site.conf"), "listen 80;\n").unwrap();
    std::fs::write(root.with_extension("secret"), "not served").unwrap();

    let mut cluster = Cluster::start(&format!("[files]\nroot = {root:?}\n"));
    cluster.enroll_minion("f1", "");
    cluster.wait_connected(&["f1"]);
    let out = cluster.dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let managed = |dest: &str, extra: &[&str]| {
        let name = format!("name={}", out.join(dest).display());
        let mut args = vec!["run", "--out", "json", "f1", "file.managed", name.as_str()];
        args.extend_from_slice(extra);
        let run = cluster.cli(&args);
        let doc = run.json();
        (run.code, doc["minions"]["f1"].clone())
    };

    let (code, minion) = managed("big.bin", &["source=halite://app/big.bin"]);
    assert_eq!(code, 0, "{minion}");
    assert_eq!(minion["state"], "returned", "{minion}");
    let written = std::fs::read(out.join("big.bin")).unwrap();
    assert!(written == big, "the copy differs: {} of {} bytes", written.len(), big.len());
    let digest = halite_protocol::hex::encode(&Sha256::digest(&big));
    assert!(minion.to_string().contains(&digest), "the digest is reported: {minion}");

    // The same file again: compared by digest, nothing to change.
    let (code, minion) = managed("big.bin", &["source=halite://app/big.bin", &format!("source_hash=sha256:{digest}")]);
    assert_eq!(code, 0, "{minion}");
    assert!(minion.to_string().contains("already in the correct state"), "{minion}");

    // A digest that is not the master's file's: refused, nothing written.
    let wrong = format!("source_hash=sha256:{}", "0".repeat(64));
    let (code, minion) = managed("site.conf", &["source=halite://app/site.conf", &wrong]);
    assert_ne!(code, 0);
    assert!(minion.to_string().contains("not the source_hash"), "{minion}");
    assert!(!out.join("site.conf").exists(), "nothing is written on a digest mismatch");
    let (code, minion) = managed("site.conf", &["source=halite://app/site.conf"]);
    assert_eq!(code, 0, "{minion}");
    assert_eq!(std::fs::read_to_string(out.join("site.conf")).unwrap(), "listen 80;\n");
    assert!(minion["return"]["details"]["diff"].as_str().unwrap().contains("+listen 80;"), "{minion}");

    // A served text that changed, with test=true: its diff, line by line, and nothing written.
    std::fs::write(root.join("app/site.conf"), "listen 8080;\n").unwrap();
    let (code, minion) = managed("site.conf", &["source=halite://app/site.conf", "test=true"]);
    assert_eq!(code, 0, "{minion}");
    let diff = minion["return"]["details"]["diff"].as_str().unwrap();
    assert!(diff.contains("-listen 80;\n+listen 8080;"), "a diff of the text, not of digests: {diff}");
    assert_eq!(std::fs::read_to_string(out.join("site.conf")).unwrap(), "listen 80;\n", "test=true writes nothing");
    let (code, minion) = managed("site.conf", &["source=halite://app/site.conf"]);
    assert_eq!(code, 0, "{minion}");
    assert_eq!(std::fs::read_to_string(out.join("site.conf")).unwrap(), "listen 8080;\n");

    // Nothing outside the root, nothing that is not there.
    for (source, why) in [
        ("source=halite://../halite-file-root.secret", "may not contain '..'"),
        ("source=halite://app/missing", "no such file on the master"),
        ("source=halite://app", "not a regular file"),
    ] {
        let (code, minion) = managed("other", &[source]);
        assert_ne!(code, 0, "{source}");
        assert!(minion.to_string().contains(why), "{source}: {minion}");
    }
    assert!(!out.join("other").exists());
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(root.with_extension("secret"));
}

#[test]
fn a_master_without_a_file_root_says_so() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("f2", "");
    cluster.wait_connected(&["f2"]);
    let name = format!("name={}", cluster.dir.join("x").display());
    let run = cluster.cli(&["run", "--out", "json", "f2", "file.managed", &name, "source=halite://x"]);
    assert_ne!(run.code, 0);
    assert!(run.stdout.contains("[files] root is not set"), "{}", run.stdout);
}

/// The race from the issue, on real processes: a directory under the root is swapped for a
/// link to the master's state directory (where `root.key` lives) and back, as fast as the
/// kernel allows, while a minion fetches `halite://d/root.key` over and over. The master
/// checks and opens the same thing (one walk beneath the root's descriptor), so the key is
/// never served: every fetch gets the decoy or a refusal.
#[test]
fn a_directory_swapped_for_a_link_to_the_state_directory_never_serves_the_masters_key() {
    use nix::fcntl::{renameat2, RenameFlags};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let root = std::env::temp_dir().join(format!("halite-file-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(root.join("d/root.key"), "decoy\n").unwrap();
    let mut cluster = Cluster::start(&format!("[files]\nroot = {root:?}\n"));
    cluster.enroll_minion("race1", "");
    cluster.wait_connected(&["race1"]);
    let state_dir = cluster.dir.join("master");
    let key = std::fs::read(state_dir.join("root.key")).unwrap();
    assert!(!key.is_empty());
    std::os::unix::fs::symlink(&state_dir, root.join("d.link")).unwrap();

    // `d` is the directory or the link, by turns; each exchange is one atomic rename.
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, root) = (stop.clone(), swaps.clone(), root.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                renameat2(None, &root.join("d"), None, &root.join("d.link"), RenameFlags::RENAME_EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let out = cluster.dir.join("race-out");
    std::fs::create_dir_all(&out).unwrap();
    const STEPS: usize = 100;
    let steps: Vec<String> = (0..STEPS)
        .map(|i| {
            let name = out.join(i.to_string());
            format!(
                r#"{{"id":"f{i}","function":"file.managed","kwargs":{{"name":{name:?},"source":"halite://d/root.key"}}}}"#
            )
        })
        .collect();
    let plan = format!("steps=[{}]", steps.join(","));
    let key_text = String::from_utf8_lossy(&key).into_owned();
    let secret_lines: Vec<&str> = key_text.lines().filter(|l| l.len() >= 20 && !l.starts_with('#')).collect();
    assert!(!secret_lines.is_empty(), "{key_text}");
    let (mut fetches, mut decoys, mut refused, mut leaked) = (0, 0, 0, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let run = cluster.cli(&["run", "--out", "json", "race1", "plan.run", &plan]);
        let doc = run.json();
        let ret = &doc["minions"]["race1"]["return"];
        assert!(ret["steps"].is_array(), "{doc}");
        fetches += STEPS;
        refused += ret["failed"].as_u64().unwrap_or(0) as usize;
        let text = doc.to_string();
        assert!(!secret_lines.iter().any(|line| text.contains(line)), "the key in a return: {text}");
        for i in 0..STEPS {
            let Ok(written) = std::fs::read(out.join(i.to_string())) else { continue };
            if written == key {
                leaked += 1;
            } else {
                assert_eq!(written, b"decoy\n");
                decoys += 1;
            }
            std::fs::remove_file(out.join(i.to_string())).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!("{fetches} fetches: {decoys} decoys, {refused} refused, {leaked} keys; {swaps} swaps");
    assert_eq!(leaked, 0, "the master served its root.key {leaked} times out of {fetches}");
    assert!(decoys > 0 && refused > 0, "both sides of the swap were fetched: {decoys} decoys, {refused} refused");
    let _ = std::fs::remove_dir_all(&root);
}

/// A file root holding the master's state directory would hand `root.key` to every minion:
/// the master refuses to start with it, says why and what to change, and creates no keys.
#[test]
fn a_master_whose_file_root_holds_its_state_directory_refuses_to_start() {
    use std::time::{Duration, Instant};

    let dir = std::env::temp_dir().join(format!("halite-file-root-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state_dir = dir.join("state");
    let config = dir.join("master.toml");
    std::fs::write(&config, format!("listen = \"127.0.0.1:0\"\nstate_dir = {state_dir:?}\n[files]\nroot = {dir:?}\n"))
        .unwrap();
    let log = std::fs::File::create(dir.join("stderr")).unwrap();
    let mut master = std::process::Command::new(halite_tests::bin_dir().join("halite-master"))
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = master.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = master.kill();
            let _ = master.wait();
            panic!("the master started with its state directory under its file root");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap();
    assert!(!status.success(), "{stderr}");
    for words in ["[files] root", "state directory", &state_dir.display().to_string(), "outside"] {
        assert!(stderr.contains(words), "{words:?} missing from: {stderr}");
    }
    assert!(!state_dir.join("root.key").exists(), "refused before any key is made");
    let _ = std::fs::remove_dir_all(&dir);
}
