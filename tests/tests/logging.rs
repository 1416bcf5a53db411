//! The daemons' logs: Salt's level names, unknown levels refused, no colour codes in files,
//! JSON lines on request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use halite_tests::Cluster;

#[test]
fn logs_take_salts_level_names_refuse_unknown_ones_and_write_plain_or_json_lines() {
    // `warning`, Salt's spelling, is accepted: the master starts and logs no info lines.
    let cluster = Cluster::start_with("", "warning");
    let log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap();
    assert!(!log.contains("INFO"), "{log}");
    drop(cluster);

    // JSON lines, and no colour codes in a file.
    let cluster = Cluster::start_with("log_format = \"json\"\n", "info");
    let log = std::fs::read_to_string(cluster.dir.join("master.log")).unwrap();
    assert!(!log.contains('\u{1b}'), "colour codes in a log file");
    let lines: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert!(
        lines.iter().any(|l| l["level"] == "info" && l["message"] == "master listening" && l["addr"].is_string()),
        "{log}"
    );
    // Timestamps to the microsecond: events of one second keep their order and spacing.
    let ts = lines[0]["ts"].as_str().unwrap();
    assert!(ts.len() == "2026-11-26T15:28:42.123456Z".len() && ts.as_bytes()[19] == b'.', "{ts}");
    drop(cluster);

    // An unknown level is refused at start, naming the key and the valid names.
    let dir = std::env::temp_dir().join(format!("halite-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("master.toml");
    std::fs::write(&config, format!("listen = \"127.0.0.1:0\"\nstate_dir = {:?}\nlog = \"loud\"\n", dir.join("state")))
        .unwrap();
    let bins = halite_tests::bin_dir();
    let out = std::process::Command::new(bins.join("halite-master")).arg("--config").arg(&config).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("log: unknown log level \"loud\"") && stderr.contains("warning"), "{stderr}");
    // The same for the minion, and a bad --log-level.
    let minion_config = dir.join("minion.toml");
    std::fs::write(&minion_config, format!("state_dir = {:?}\nlog = \"chatty\"\n", dir.join("minion"))).unwrap();
    let out =
        std::process::Command::new(bins.join("halite-minion")).arg("--config").arg(&minion_config).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown log level \"chatty\""));
    let valid = dir.join("valid.toml");
    std::fs::write(&valid, format!("listen = \"127.0.0.1:0\"\nstate_dir = {:?}\n", dir.join("state2"))).unwrap();
    let mut master = std::process::Command::new(bins.join("halite-master"))
        .args(["--log-level", "verbose", "--config"])
        .arg(&valid)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = master.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = master.kill();
            panic!("a bad --log-level was ignored: the master started");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!status.success());
}
