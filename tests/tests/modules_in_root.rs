//! Execution modules against the real tools, inside a debootstrapped Debian root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use halite_tests::testroot::TestRoot;
use serde_json::json;

#[test]
fn pkg_installs_upgrades_and_removes_a_deb_through_apt_idempotently() {
    let root = TestRoot::get();
    root.sh("apt-get remove -y -q halite-hello >/dev/null 2>&1; true");
    root.publish_deb("halite-hello", "1.0");
    root.publish_deb("halite-hello", "2.0");
    let (refreshed, ok) = root.call("pkg.refresh", &["provider=apt"]);
    assert!(ok, "{refreshed}");

    let (preview, ok) = root.call("pkg.install", &["halite-hello", "version=1.0", "test=true"]);
    assert!(ok && preview["changed"] == true, "{preview}");
    assert!(!root.join("/usr/share/halite-hello/VERSION").exists(), "test=true installed it");

    let (first, ok) = root.call("pkg.install", &["halite-hello", "version=1.0"]);
    assert!(ok, "{first}");
    assert_eq!(first["changed"], true);
    assert_eq!(first["details"]["halite-hello"], json!({"old": "", "new": "1.0"}));
    let (second, _) = root.call("pkg.install", &["halite-hello", "version=1.0"]);
    assert_eq!(second["changed"], false, "{second}");
    let (version, _) = root.call("pkg.version", &["halite-hello"]);
    assert_eq!(version, json!({"halite-hello": "1.0"}));

    let (upgrade, _) = root.call("pkg.install", &["halite-hello", "version=2.0"]);
    assert_eq!(upgrade["details"]["halite-hello"], json!({"old": "1.0", "new": "2.0"}), "{upgrade}");
    assert_eq!(std::fs::read_to_string(root.join("/usr/share/halite-hello/VERSION")).unwrap(), "2.0\n");
    let (list, _) = root.call("pkg.list", &[]);
    assert_eq!(list["halite-hello"], "2.0");
    assert!(list["dpkg"].is_string(), "the base system is listed too");

    let (removed, ok) = root.call("pkg.remove", &["halite-hello"]);
    assert!(ok && removed["changed"] == true, "{removed}");
    let (again, _) = root.call("pkg.remove", &["halite-hello"]);
    assert_eq!(again["changed"], false);
    let (missing, ok) = root.call("pkg.install", &["halite-no-such-package"]);
    assert!(!ok && missing["error"].as_str().unwrap().contains("halite-no-such-package"), "{missing}");
}

#[test]
fn users_and_groups_are_created_changed_and_removed_idempotently() {
    let root = TestRoot::get();
    root.sh("userdel -r alice >/dev/null 2>&1; groupdel webteam >/dev/null 2>&1; groupdel ops >/dev/null 2>&1; true");

    let (group, ok) = root.call("group.present", &["webteam", "gid=2300"]);
    assert!(ok && group["changed"] == true, "{group}");
    assert!(std::fs::read_to_string(root.join("/etc/group")).unwrap().contains("webteam:x:2300:"));
    assert_eq!(root.call("group.present", &["webteam", "gid=2300"]).0["changed"], false);
    root.call("group.present", &["ops"]);

    let (user, ok) = root.call("user.present", &["alice", "uid=2301", "groups=[\"webteam\"]", "shell=/bin/sh"]);
    assert!(ok && user["changed"] == true, "{user}");
    let passwd = std::fs::read_to_string(root.join("/etc/passwd")).unwrap();
    assert!(passwd.contains("alice:x:2301:"), "{passwd}");
    assert!(root.join("/home/alice").is_dir(), "home created");
    assert_eq!(
        root.call("user.present", &["alice", "uid=2301", "groups=[\"webteam\"]", "shell=/bin/sh"]).0["changed"],
        false
    );

    let (changed, _) = root.call("user.present", &["alice", "groups=[\"ops\"]", "shell=/bin/bash", "test=true"]);
    assert_eq!(changed["changed"], true);
    let line = std::fs::read_to_string(root.join("/etc/passwd"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("alice:"))
        .unwrap()
        .to_owned();
    assert!(line.starts_with("alice:x:2301:") && line.ends_with(":/home/alice:/bin/sh"), "{line}");
    let (changed, ok) = root.call("user.present", &["alice", "groups=[\"ops\"]", "shell=/bin/bash"]);
    assert!(ok, "{changed}");
    let groups = std::fs::read_to_string(root.join("/etc/group")).unwrap();
    assert!(
        groups.contains("ops:x:") && groups.lines().any(|l| l.starts_with("ops:") && l.ends_with("alice")),
        "{groups}"
    );
    assert!(groups.lines().any(|l| l == "webteam:x:2300:"), "{groups}");

    let (sys, ok) = root.call("user.present", &["svc-halite", "system=true"]);
    assert!(ok, "{sys}");
    assert!(!root.join("/home/svc-halite").exists(), "system accounts get no home by default");
    root.call("user.absent", &["svc-halite"]);

    // file.managed with an owner that exists only inside the root.
    let (file, ok) =
        root.call("file.managed", &["/srv/alice.conf", "contents=hi", "user=alice", "group=webteam", "mode=0640"]);
    assert!(ok, "{file}");
    let (stat, _) = root.call("file.stat", &["/srv/alice.conf"]);
    assert_eq!(
        (stat["user"].as_str(), stat["group"].as_str(), stat["mode"].as_str()),
        (Some("alice"), Some("webteam"), Some("0640"))
    );

    let (gone, _) = root.call("user.absent", &["alice", "purge=true"]);
    assert_eq!(gone["changed"], true);
    assert!(!root.join("/home/alice").exists());
    assert_eq!(root.call("user.absent", &["alice"]).0["changed"], false);
    assert_eq!(root.call("group.absent", &["webteam"]).0["changed"], true);
    assert_eq!(root.call("group.absent", &["webteam"]).0["changed"], false);
    root.call("group.absent", &["ops"]);
}

const INIT_SCRIPT: &str = r#"#!/bin/sh
### BEGIN INIT INFO
# Provides:          halite-demo
# Required-Start:
# Required-Stop:
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: halite test service
### END INIT INFO
PIDFILE=/run/halite-demo.pid
case "$1" in
  start) sleep 1000 >/dev/null 2>&1 & echo $! > $PIDFILE ;;
  stop) [ -f $PIDFILE ] && kill "$(cat $PIDFILE)"; rm -f $PIDFILE ;;
  restart|reload) "$0" stop; "$0" start ;;
  status) [ -f $PIDFILE ] && kill -0 "$(cat $PIDFILE)" 2>/dev/null ;;
  *) exit 2 ;;
esac
"#;

#[test]
fn a_sysvinit_script_starts_stops_and_is_enabled_with_update_rc_d() {
    let root = TestRoot::get();
    std::fs::create_dir_all(root.join("/run")).unwrap();
    let script = root.join("/etc/init.d/halite-demo");
    std::fs::write(&script, INIT_SCRIPT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    root.sh("/etc/init.d/halite-demo stop; update-rc.d -f halite-demo remove >/dev/null 2>&1; true");

    let p = "provider=sysvinit";
    assert_eq!(root.call("service.status", &["halite-demo", p]).0, json!({"running": false}));
    // One not installed is not running, as Salt's service.status answers (False).
    let (absent, ok) = root.call("service.status", &["halite-nosuch", p]);
    assert!(ok && absent == json!({"running": false}), "{absent}");
    let (started, ok) = root.call("service.start", &["halite-demo", p]);
    assert!(ok && started["changed"] == true, "{started}");
    assert_eq!(root.call("service.status", &["halite-demo", p]).0, json!({"running": true}));
    assert_eq!(root.call("service.start", &["halite-demo", p]).0["changed"], false);
    assert_eq!(root.call("service.restart", &["halite-demo", p]).0["changed"], true);
    assert_eq!(root.call("service.stop", &["halite-demo", p]).0["changed"], true);
    assert_eq!(root.call("service.status", &["halite-demo", p]).0, json!({"running": false}));
    assert_eq!(root.call("service.stop", &["halite-demo", p]).0["changed"], false);

    assert_eq!(root.call("service.enabled", &["halite-demo", p]).0, json!({"enabled": false}));
    let (enabled, ok) = root.call("service.enable", &["halite-demo", p]);
    assert!(ok && enabled["changed"] == true, "{enabled}");
    assert!(root.join("/etc/rc2.d").read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with("halite-demo")));
    assert_eq!(root.call("service.enabled", &["halite-demo", p]).0, json!({"enabled": true}));
    assert_eq!(root.call("service.enable", &["halite-demo", p]).0["changed"], false);
    assert_eq!(root.call("service.disable", &["halite-demo", p]).0["changed"], true);
    assert_eq!(root.call("service.enabled", &["halite-demo", p]).0, json!({"enabled": false}));
    let (missing, ok) = root.call("service.start", &["no-such-service", p]);
    assert!(!ok && missing["error"].as_str().unwrap().contains("/etc/init.d/no-such-service"), "{missing}");
}

#[test]
fn a_systemd_unit_is_enabled_and_disabled_offline() {
    let root = TestRoot::get();
    std::fs::write(
        root.join("/etc/systemd/system/halite-unit.service"),
        "[Unit]\nDescription=halite test unit\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
    )
    .unwrap();
    root.sh("systemctl disable halite-unit >/dev/null 2>&1; true");
    let p = "provider=systemd";
    assert_eq!(root.call("service.enabled", &["halite-unit", p]).0, json!({"enabled": false}));
    let (enabled, ok) = root.call("service.enable", &["halite-unit", p]);
    assert!(ok && enabled["changed"] == true, "{enabled}");
    // The link is absolute inside the root, so look at the link itself, not its target.
    let link = root.join("/etc/systemd/system/multi-user.target.wants/halite-unit.service");
    assert!(link.symlink_metadata().is_ok());
    assert_eq!(root.call("service.enable", &["halite-unit", p]).0["changed"], false);
    assert_eq!(root.call("service.disable", &["halite-unit", p]).0["changed"], true);
    assert!(link.symlink_metadata().is_err());
}

#[test]
fn pip_installs_into_a_virtualenv_idempotently() {
    // pip runs on the host, into a throwaway virtualenv, from a local package index (a
    // find-links directory holding a wheel: no network). A caller names packages, never files.
    let dir = std::env::temp_dir().join(format!("halite-pip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let links = dir.join("links");
    std::fs::create_dir_all(&links).unwrap();
    let wheel = r#"
import sys, zipfile
out = sys.argv[1] + "/halite_pipdemo-1.2-py3-none-any.whl"
info = "halite_pipdemo-1.2.dist-info/"
files = {
    "halite_pipdemo/__init__.py": "",
    info + "METADATA": "Metadata-Version: 2.1\nName: halite-pipdemo\nVersion: 1.2\n",
    info + "WHEEL": "Wheel-Version: 1.0\nGenerator: halite-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
with zipfile.ZipFile(out, "w") as whl:
    for name, text in files.items():
        whl.writestr(name, text)
    whl.writestr(info + "RECORD", "".join(f"{name},,\n" for name in files) + info + "RECORD,,\n")
"#;
    let made = std::process::Command::new("python3").args(["-c", wheel]).arg(&links).status().unwrap();
    assert!(made.success());
    let venv = dir.join("venv");
    let status = std::process::Command::new("python3").args(["-m", "venv"]).arg(&venv).status().unwrap();
    assert!(status.success());
    let bin = halite_tests::bin_dir().join("halite-minion");
    let config = dir.join("minion.toml");
    // The minion's config names the virtualenv a caller may pick (a caller never chooses what runs).
    let policy = format!("[policy]\nallow = [\"*\"]\npip_bin_envs = [{venv:?}]\n");
    std::fs::write(&config, format!("state_dir = {:?}\n{policy}", dir.join("state"))).unwrap();
    let call = |args: &[&str]| {
        let out = std::process::Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .arg("call")
            .args(args)
            .env("PIP_FIND_LINKS", &links)
            .env("PIP_NO_INDEX", "1")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        v["local"].clone()
    };
    let env = format!("bin_env={}", venv.display());
    let installed = call(&["pkg.install", "halite-pipdemo", "provider=pip", &env]);
    assert_eq!(installed["changed"], true, "{installed}");
    let version = call(&["pkg.version", "halite-pipdemo", "provider=pip", &env]);
    assert_eq!(version, json!({"halite-pipdemo": "1.2"}));
    let again = call(&["pkg.install", "halite_pipdemo", "provider=pip", &env]);
    assert_eq!(again["changed"], false, "{again}");
    let removed = call(&["pkg.remove", "halite-pipdemo", "provider=pip", &env]);
    assert_eq!(removed["changed"], true, "{removed}");
    // A local project or file is no package name: installing it would run the caller's code.
    let local = call(&["pkg.install", links.to_str().unwrap(), "provider=pip", &env]);
    assert!(local.to_string().contains("is not a package name"), "{local}");
    // A virtualenv the config does not list is refused.
    let other = format!("bin_env={}", links.display());
    let refused = call(&["pkg.list", "provider=pip", &other]);
    assert!(refused.to_string().contains("pip_bin_envs"), "{refused}");
}

#[test]
fn cli_to_master_to_a_minion_in_the_root_for_commands_files_packages_and_custom_actions() {
    let root = TestRoot::get();
    root.sh("apt-get remove -y -q halite-e2e >/dev/null 2>&1; rm -f /srv/e2e.conf; true");
    root.publish_deb("halite-e2e", "1.0");
    root.sh("apt-get update -q >/dev/null");
    let actions = root.join("/etc/halite/rooted/actions.d");
    std::fs::create_dir_all(&actions).unwrap();
    std::fs::write(
        actions.join("greet.toml"),
        "name = \"site.greet\"\ndoc = \"Greets.\"\ncommand = [\"/bin/sh\", \"-c\", \"read x; echo \\\"{\\\\\\\"hello\\\\\\\": $x}\\\"\"]\npositional = [\"who\"]\n[args.who]\ntype = \"string\"\nrequired = true\n",
    )
    .unwrap();
    std::fs::write(actions.join("broken.toml"), "name = \"Bad Name\"\n").unwrap();

    let mut cluster = halite_tests::Cluster::start("");
    cluster.start_minion_in_root(
        &root.path,
        "rooted",
        "[policy]\nallow = [\"test.*\", \"cmd.run\", \"file.*\", \"pkg.*\", \"sys.*\"]\ndeny = [\"pkg.remove\"]",
    );
    cluster.wait_connected(&["rooted"]);

    let json = |args: &[&str]| {
        let mut full = vec!["run", "--out", "json", "rooted"];
        full.extend_from_slice(args);
        let run = cluster.cli(&full);
        (run.code, run.json()["minions"]["rooted"].clone())
    };
    // cmd.run sees the root's filesystem.
    let (code, out) = json(&["cmd.run", "cat /etc/debian_version"]);
    assert_eq!(code, 0, "{out}");
    assert!(out["return"]["stdout"].as_str().unwrap().starts_with("12"), "{out}");

    let (code, out) = json(&["file.managed", "/srv/e2e.conf", "contents=managed by halite", "mode=0600"]);
    assert_eq!((code, out["return"]["changed"].clone()), (0, json!(true)), "{out}");
    assert_eq!(std::fs::read_to_string(root.join("/srv/e2e.conf")).unwrap(), "managed by halite");
    assert_eq!(
        json(&["file.managed", "/srv/e2e.conf", "contents=managed by halite", "mode=0600"]).1["return"]["changed"],
        false
    );

    let (code, out) = json(&["pkg.install", "halite-e2e"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["return"]["details"]["halite-e2e"]["new"], "1.0");
    assert_eq!(json(&["pkg.install", "halite-e2e"]).1["return"]["changed"], false);

    let (code, out) = json(&["site.greet", "world"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["return"], json!({"hello": {"who": "world"}}));

    // Denied by the minion's own policy: explicit deny, and not in the allow list.
    let (code, out) = json(&["pkg.remove", "halite-e2e"]);
    assert_eq!((code, out["state"].as_str()), (3, Some("denied")), "{out}");
    let (code, out) = json(&["user.present", "mallory"]);
    assert_eq!((code, out["state"].as_str()), (3, Some("denied")), "{out}");
    assert!(!std::fs::read_to_string(root.join("/etc/passwd")).unwrap().contains("mallory"));

    // The minion lists only what its policy allows, custom actions included; the broken
    // definition was skipped, not fatal.
    let (_, out) = json(&["sys.list_functions"]);
    let names: Vec<&str> = out["return"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(names.contains(&"site.greet") && names.contains(&"pkg.install"));
    root.sh("apt-get remove -y -q halite-e2e >/dev/null 2>&1; true");
}
