//! The CLI as an operator meets it: pipes closed early, a master that is down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use halite_tests::Cluster;

/// `halite … | head`: the CLI ends quietly when its reader goes away (it used to panic and exit
/// 101 on the broken pipe).
#[test]
fn a_closed_pipe_ends_the_cli_quietly() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let big = "x".repeat(100 * 1024);
    let mut child = Command::new(cluster.bins().join("halite"))
        .arg("--config")
        .arg(&cluster.config)
        .args(["run", "--out", "json", "web1", "test.echo", &big])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The reader is gone (stdout dropped above); the rest of the output has nowhere to go.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
    assert!(out.status.success() || out.status.signal() == Some(13), "{:?}: {stderr}", out.status);
}

/// A master that is down is reported at once, as refused, instead of after the connect timeout.
#[test]
fn a_master_that_is_down_is_reported_as_refused() {
    let mut cluster = Cluster::start("");
    cluster.kill_master();
    let run = cluster.cli(&["key", "list"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.to_lowercase().contains("refused"), "{}", run.stderr);
}
