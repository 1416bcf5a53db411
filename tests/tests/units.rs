//! The systemd units shipped in `dist/systemd`: reloadable, and the master confined as far as
//! `systemd-analyze security` measures (the minion, a root agent that manages the host, as far
//! as that allows; each choice is commented in its unit).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn unit(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/systemd").join(name)
}

/// `systemd-analyze security`'s overall exposure of a unit file (0 safest, 10 most exposed).
fn exposure(name: &str) -> f64 {
    let output = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(unit(name))
        .output()
        .expect("systemd-analyze (Debian's systemd package) runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_else(|| panic!("{text}"));
    let after = line.split(": ").nth(1).unwrap_or_default();
    after.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn both_units_reload_on_sighup_and_the_master_is_confined() {
    for name in ["halite-master.service", "halite-minion.service"] {
        let text = std::fs::read_to_string(unit(name)).unwrap();
        assert!(text.contains("ExecReload=/bin/kill -HUP $MAINPID"), "{name}: no ExecReload");
    }
    let master = exposure("halite-master.service");
    assert!(master <= 3.0, "halite-master.service is exposed {master} (at most 3.0)");
    let minion = exposure("halite-minion.service");
    assert!(minion < 9.6, "halite-minion.service is exposed {minion}: confined no more than with no settings");
}
