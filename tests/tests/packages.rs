//! The .deb and .rpm packages (`scripts/package.sh`): built from this tree's binaries, checked
//! by lintian, and installed, upgraded, removed and purged with dpkg in the debootstrapped
//! Debian root; the .rpm's files, config files and scripts read back with rpm.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use halite_tests::testroot::{run, TestRoot};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds the packages of `kind` at `version` into `out`.
fn package(kind: &str, version: &str, out: &Path) {
    run(Command::new("bash")
        // gzip: these packages hold debug builds, which xz takes long to compress.
        .env("DEB_COMPRESSION", "gzip")
        .arg(repo().join("scripts/package.sh"))
        .arg(kind)
        .arg("--bin-dir")
        .arg(halite_tests::bin_dir())
        .args(["--version", version, "--out"])
        .arg(out));
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("halite-packages-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sh(root: &TestRoot, script: &str) -> String {
    let output = root.sh(script);
    assert!(
        output.status.success(),
        "{script}:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every man page the programs of this build make (`PROGRAM man --dir`), as the packages
/// install them, sorted: `man1/halite-run.1.gz`, `man8/halite-minion-call.8.gz`, ... (`test`
/// names the scratch directories.)
fn man_pages(test: &str) -> Vec<String> {
    let mut pages = Vec::new();
    for (program, section) in [("halite", "1"), ("halite-master", "8"), ("halite-minion", "8")] {
        let dir = scratch(&format!("{test}-man-{program}"));
        run(Command::new(halite_tests::bin_dir().join(program)).arg("man").arg("--dir").arg(&dir));
        for entry in std::fs::read_dir(&dir).unwrap() {
            pages.push(format!("man{section}/{}.gz", entry.unwrap().file_name().to_string_lossy()));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    pages.sort();
    for page in
        ["man1/halite.1.gz", "man1/halite-run.1.gz", "man1/halite-key-accept.1.gz", "man1/halite-jobs-list.1.gz"]
            .into_iter()
            .chain(["man8/halite-master.8.gz", "man8/halite-master-cluster-init.8.gz", "man8/halite-minion-call.8.gz"])
    {
        assert!(pages.iter().any(|p| p == page), "{page} not among {pages:?}");
    }
    pages
}

/// What man-db says rendering `page` with warnings on, as lintian runs it
/// (`manpage-has-errors-from-man`): nothing for a good page.
fn man_warnings(page: &Path) -> String {
    let output = Command::new("man")
        .args(["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z"])
        .arg(page)
        .env("LC_ALL", "C.UTF-8")
        .env("MANROFFSEQ", "")
        .env("MANWIDTH", "80")
        .output()
        .expect("man is missing: apt-get install man-db (lintian depends on it)");
    assert!(output.status.success(), "man -l {}: {}", page.display(), String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

#[test]
fn the_debs_pass_lintian_and_install_upgrade_remove_and_purge_with_dpkg() {
    let out = scratch("deb");
    package("deb", "0.1.0", &out);
    package("deb", "0.1.1", &out);
    let debs: Vec<PathBuf> =
        ["halite-minion_0.1.0", "halite-master_0.1.0", "halite-minion_0.1.1", "halite-master_0.1.1"]
            .iter()
            .map(|name| out.join(format!("{name}_amd64.deb")))
            .collect();

    // lintian: no error and no warning.
    let lint = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--tag-display-limit", "0"])
        .args(&debs[..2])
        .output()
        .expect("lintian is missing: apt-get install lintian (scripts/test.sh does)");
    let report = String::from_utf8_lossy(&lint.stdout);
    assert!(lint.status.success(), "lintian:\n{report}\n{}", String::from_utf8_lossy(&lint.stderr));
    assert!(!report.lines().any(|l| l.starts_with("E:") || l.starts_with("W:")), "{report}");

    let root = TestRoot::get();
    // The shared root's own minion config is not the package's: out of the way while the
    // packages own /etc/halite (TestRoot writes it again for the next test).
    sh(&root, "dpkg --purge halite-minion halite-master >/dev/null 2>&1; rm -f /etc/halite/minion.toml /etc/halite/master.toml");
    let pkgs = root.join("/srv/pkgs");
    let _ = std::fs::remove_dir_all(&pkgs);
    std::fs::create_dir_all(&pkgs).unwrap();
    for deb in &debs {
        std::fs::copy(deb, pkgs.join(deb.file_name().unwrap())).unwrap();
    }

    // Install.
    sh(&root, "dpkg -i /srv/pkgs/halite-minion_0.1.0_amd64.deb /srv/pkgs/halite-master_0.1.0_amd64.deb");
    for (path, want) in [
        ("/usr/bin/halite-minion", 0o755),
        ("/usr/bin/halite-master", 0o755),
        ("/usr/bin/halite", 0o755),
        ("/etc/halite/minion.toml", 0o644),
        ("/etc/halite/master.toml", 0o644),
        ("/lib/systemd/system/halite-minion.service", 0o644),
        ("/lib/systemd/system/halite-master.service", 0o644),
        ("/usr/share/man/man8/halite-minion.8.gz", 0o644),
        ("/usr/share/man/man8/halite-master.8.gz", 0o644),
        ("/usr/share/man/man1/halite.1.gz", 0o644),
        ("/usr/share/bash-completion/completions/halite", 0o644),
        ("/usr/share/zsh/vendor-completions/_halite", 0o644),
        ("/usr/share/fish/vendor_completions.d/halite.fish", 0o644),
        ("/usr/share/doc/halite-minion/copyright", 0o644),
        ("/usr/share/doc/halite-master/operations.md", 0o644),
        ("/usr/share/doc/halite-master/engine-guide.md", 0o644),
        ("/var/lib/halite/minion", 0o700),
        ("/var/lib/halite/master", 0o700),
    ] {
        assert_eq!(mode(&root.join(path)), want, "{path}");
    }
    // The units point at what the packages install.
    let unit = std::fs::read_to_string(root.join("/lib/systemd/system/halite-master.service")).unwrap();
    assert!(
        unit.contains("file:///usr/share/doc/halite-master/operations.md") && unit.contains("User=halite"),
        "{unit}"
    );
    // The master's system user, owning its state directory; the minion's stays root's.
    let user = sh(&root, "getent passwd halite");
    assert!(user.ends_with(":/var/lib/halite:/usr/sbin/nologin\n"), "{user}");
    let uid: u32 = user.split(':').nth(2).unwrap().parse().unwrap();
    assert_eq!(std::fs::metadata(root.join("/var/lib/halite/master")).unwrap().uid(), uid);
    assert_eq!(std::fs::metadata(root.join("/var/lib/halite/minion")).unwrap().uid(), 0);
    // Enabled, so an image boots into a running minion (the link is absolute: read, not followed).
    let wants = root.join("/etc/systemd/system/multi-user.target.wants/halite-minion.service");
    assert_eq!(std::fs::read_link(&wants).unwrap(), Path::new("/lib/systemd/system/halite-minion.service"));
    // A man page for every program and every command, each rendering without a warning, with
    // the sections an operator looks for, and naming under SEE ALSO only pages installed here.
    let pages = man_pages("deb");
    let installed = sh(&root, "cd /usr/share/man && ls -d man1/halite*.gz man8/halite*.gz");
    let mut installed: Vec<&str> = installed.lines().collect();
    installed.sort_unstable();
    assert_eq!(installed, pages, "the pages installed are the pages the programs make");
    for page in &pages {
        let path = root.join(&format!("/usr/share/man/{page}"));
        assert_eq!(mode(&path), 0o644, "{page}");
        assert_eq!(man_warnings(&path), "", "{page}");
        let text = sh(&root, &format!("zcat /usr/share/man/{page}"));
        for section in [".SH NAME", ".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH FILES", ".SH EXAMPLES"] {
            assert!(text.contains(section), "{page} has no {section}");
        }
        let see_also = &text[text.find(".SH \"SEE ALSO\"").unwrap_or_else(|| panic!("{page} has no SEE ALSO"))..];
        for named in see_also.split("\\fB").skip(1) {
            let (name, rest) = named.split_once("\\fR(").unwrap();
            let name = name.replace("\\-", "-");
            let section = &rest[..rest.find(')').unwrap()];
            let target = format!("man{section}/{name}.{section}.gz");
            assert!(pages.contains(&target), "{page} names {name}({section}) under SEE ALSO: not installed");
        }
    }
    // The packaged example config is one the minion runs with.
    assert!(sh(&root, "halite-minion --config /etc/halite/minion.toml call test.ping").contains("true"));
    assert!(sh(&root, "halite --version").contains("halite 0.1.0"));

    // Upgrade, with the admin's change to a config file kept without a question.
    sh(&root, "printf 'role = \"edited\"\\n' >> /etc/halite/minion.toml");
    sh(&root, "dpkg -i /srv/pkgs/halite-minion_0.1.1_amd64.deb /srv/pkgs/halite-master_0.1.1_amd64.deb </dev/null");
    let versions = sh(&root, "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' halite-minion halite-master");
    assert_eq!(versions, "halite-master 0.1.1 install ok installed\nhalite-minion 0.1.1 install ok installed\n");
    assert!(std::fs::read_to_string(root.join("/etc/halite/minion.toml")).unwrap().ends_with("role = \"edited\"\n"));

    // Remove: the programs go, the config files and the state stay.
    sh(&root, "dpkg -r halite-minion halite-master");
    assert!(!root.join("/usr/bin/halite-minion").exists() && !root.join("/usr/bin/halite").exists());
    assert!(root.join("/etc/halite/minion.toml").exists() && root.join("/etc/halite/master.toml").exists());
    let status = sh(&root, "dpkg-query -W -f '${db:Status-Abbrev}\\n' halite-minion halite-master");
    assert_eq!(status, "rc \nrc \n");

    // Purge: the config files go too; the state directories stay (keys, undelivered returns).
    sh(&root, "dpkg -P halite-minion halite-master");
    assert!(!root.join("/etc/halite/minion.toml").exists() && !root.join("/etc/halite/master.toml").exists());
    assert!(root.join("/var/lib/halite/master").exists());
    assert!(std::fs::symlink_metadata(&wants).is_err(), "purge left the unit enabled");
    let _ = std::fs::remove_dir_all(&pkgs);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_rpms_carry_the_same_files_config_files_and_the_halite_user() {
    let out = scratch("rpm");
    package("rpm", "0.1.0", &out);
    let master = out.join("halite-master-0.1.0-1.x86_64.rpm");
    let minion = out.join("halite-minion-0.1.0-1.x86_64.rpm");
    let query = |args: &[&str], rpm: &Path| {
        String::from_utf8_lossy(&run(Command::new("rpm").args(args).arg(rpm)).stdout).into_owned()
    };
    let files = query(&["-qlp"], &master);
    for path in [
        "/usr/bin/halite-master",
        "/usr/bin/halite",
        "/usr/lib/systemd/system/halite-master.service",
        "/usr/share/bash-completion/completions/halite",
        "/usr/share/doc/halite-master/operations.md",
        "/var/lib/halite/master",
    ] {
        assert!(files.lines().any(|l| l == path), "{path} not in the master rpm:\n{files}");
    }
    // The same man pages as the .debs: every program's and every command's.
    let minion_files = query(&["-qlp"], &minion);
    let mut shipped: Vec<&str> = files
        .lines()
        .chain(minion_files.lines())
        .filter_map(|l| l.strip_prefix("/usr/share/man/"))
        .filter(|l| l.ends_with(".gz"))
        .collect();
    shipped.sort_unstable();
    assert_eq!(shipped, man_pages("rpm"), "the rpms' man pages");
    assert!(minion_files.lines().any(|l| l == "/usr/share/man/man8/halite-minion-call.8.gz"), "{minion_files}");
    assert!(files.lines().any(|l| l == "/usr/share/man/man1/halite-run.1.gz"), "{files}");
    assert_eq!(query(&["-qcp"], &master), "/etc/halite/master.toml\n");
    assert_eq!(query(&["-qcp"], &minion), "/etc/halite/minion.toml\n");
    assert!(query(&["-qp", "--scripts"], &master).contains("useradd --system --gid halite"));
    let owners = query(&["-qlvp"], &master);
    assert!(
        owners.lines().any(|l| l.starts_with("drwx------")
            && l.contains("halite   halite")
            && l.ends_with("/var/lib/halite/master")),
        "{owners}"
    );

    // Installed into an empty root (files only: its scripts are for an RPM-based system).
    let root = out.join("root");
    run(Command::new("rpm").arg("--root").arg(&root).arg("--initdb"));
    run(Command::new("rpm").arg("--root").arg(&root).args(["-i", "--nodeps", "--noscripts"]).arg(&minion));
    assert_eq!(mode(&root.join("usr/bin/halite-minion")), 0o755);
    assert_eq!(mode(&root.join("var/lib/halite/minion")), 0o700);
    let installed = run(Command::new(root.join("usr/bin/halite-minion"))
        .args(["--config"])
        .arg(root.join("etc/halite/minion.toml"))
        .args(["call", "test.ping"]));
    assert!(String::from_utf8_lossy(&installed.stdout).contains("true"));
    let _ = std::fs::remove_dir_all(&out);
}
