//! A Debian root directory built once with debootstrap, in which module tests run the real
//! tools (apt, dpkg, useradd, init scripts, systemctl) without touching the host: the minion
//! binary is copied in and run under `chroot`.
//!
//! The root is cached under `target/testroot/` (or `$HALITE_TESTROOT`); tests that use it take
//! an exclusive lock, because nextest runs tests in parallel processes and apt and the account
//! tools do not like company.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nix::fcntl::{Flock, FlockArg};

/// Packages added to the minimal base: systemctl for offline unit enabling.
const EXTRA_PACKAGES: &str = "systemd";

/// The shared root, locked for the lifetime of this value.
pub struct TestRoot {
    /// The root directory.
    pub path: PathBuf,
    _lock: Flock<File>,
}

fn base_dir() -> PathBuf {
    std::env::var_os("HALITE_TESTROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/testroot"))
}

/// Runs `command`, failing the test with its output unless it succeeds.
pub fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

impl TestRoot {
    /// Builds the root on first use (about a minute) and locks it.
    pub fn get() -> TestRoot {
        let base = base_dir();
        fs::create_dir_all(&base).unwrap_or_else(|e| panic!("{}: {e}", base.display()));
        let lock_file = File::create(base.join("lock")).unwrap_or_else(|e| panic!("lock: {e}"));
        let lock = Flock::lock(lock_file, FlockArg::LockExclusive).unwrap_or_else(|(_, e)| panic!("flock: {e}"));
        let path = base.join("bookworm");
        if !path.join(".complete").exists() {
            let _ = fs::remove_dir_all(&path);
            run(Command::new("debootstrap").args([
                "--variant=minbase",
                &format!("--include={EXTRA_PACKAGES}"),
                "bookworm",
                path.to_str().unwrap_or_default(),
                "http://deb.debian.org/debian",
            ]));
            fs::write(path.join(".complete"), "").unwrap_or_else(|e| panic!("{e}"));
        }
        let root = TestRoot { path, _lock: lock };
        root.install_minion();
        root
    }

    /// Copies the freshly built minion binary in, with a config that allows every function.
    fn install_minion(&self) {
        let binary = crate::bin_dir().join("halite-minion");
        let target = self.path.join("usr/local/bin/halite-minion");
        fs::copy(&binary, &target).unwrap_or_else(|e| panic!("copying the minion into the root: {e}"));
        fs::create_dir_all(self.path.join("etc/halite/actions.d")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(
            self.path.join("etc/halite/minion.toml"),
            "state_dir = \"/var/lib/halite/minion\"\nlog = \"warn\"\n[policy]\nallow = [\"*\"]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// A path inside the root.
    pub fn join(&self, inner: &str) -> PathBuf {
        self.path.join(inner.trim_start_matches('/'))
    }

    /// Runs a command inside the root.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("chroot")
            .arg(&self.path)
            .args(["/bin/sh", "-c", script])
            .output()
            .unwrap_or_else(|e| panic!("chroot: {e}"))
    }

    /// `halite-minion call` inside the root; returns the JSON result and the exit status.
    pub fn call(&self, function: &str, args: &[&str]) -> (serde_json::Value, bool) {
        let output = Command::new("chroot")
            .arg(&self.path)
            .args(["/usr/local/bin/halite-minion", "--config", "/etc/halite/minion.toml", "call", function])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("chroot: {e}"));
        let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "{function} {args:?}: not JSON ({e}):\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (value["local"].clone(), output.status.success())
    }

    /// Builds a `.deb` named `name` at `version` (one file, no scripts) into the root's local
    /// apt repository at /srv/repo and refreshes its index.
    pub fn publish_deb(&self, name: &str, version: &str) {
        let work = self.join("/srv/build").join(format!("{name}-{version}"));
        let _ = fs::remove_dir_all(&work);
        fs::create_dir_all(work.join("DEBIAN")).unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(work.join(format!("usr/share/{name}"))).unwrap_or_else(|e| panic!("{e}"));
        fs::write(work.join(format!("usr/share/{name}/VERSION")), format!("{version}\n"))
            .unwrap_or_else(|e| panic!("{e}"));
        fs::write(
            work.join("DEBIAN/control"),
            format!("Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: halite tests <tests@halite.invalid>\nDescription: test package\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let repo = self.join("/srv/repo");
        fs::create_dir_all(&repo).unwrap_or_else(|e| panic!("{e}"));
        run(Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group"])
            .arg(&work)
            .arg(repo.join(format!("{name}_{version}_all.deb"))));
        let packages = run(Command::new("dpkg-scanpackages").args(["--multiversion", "."]).current_dir(&repo));
        fs::write(repo.join("Packages"), packages.stdout).unwrap_or_else(|e| panic!("{e}"));
        fs::write(self.join("/etc/apt/sources.list.d/halite-test.list"), "deb [trusted=yes] file:/srv/repo ./\n")
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
