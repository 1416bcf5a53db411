//! The CLI as an operator meets it: pipes closed early, a master that is down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use halite_tests::Cluster;

/// Runs `command` with its output piped to a reader that takes 10 bytes and goes away (as `|
/// head` does): the rest of the output has nowhere to go.
fn read_a_little_then_go_away(command: &mut Command) -> std::process::Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    child.wait_with_output().unwrap()
}

/// `halite … | head`: the CLI ends quietly when its reader goes away (it used to panic and exit
/// 101 on the broken pipe).
#[test]
fn a_closed_pipe_ends_the_cli_quietly() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("web1", "");
    cluster.wait_connected(&["web1"]);
    let big = "x".repeat(100 * 1024);
    let mut command = Command::new(cluster.bins().join("halite"));
    command.arg("--config").arg(&cluster.config).args(["run", "--out", "json", "web1", "test.echo", &big]);
    let out = read_a_little_then_go_away(&mut command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
    assert!(out.status.success() || out.status.signal() == Some(13), "{:?}: {stderr}", out.status);
}

/// `halite-minion call … | head` and `halite-minion doc | head`: the minion ends quietly too.
#[test]
fn a_closed_pipe_ends_a_local_minion_call_quietly() {
    for args in [&["call", "test.echo", &"y".repeat(100 * 1024)][..], &["doc"][..]] {
        let mut command = Command::new(halite_tests::bin_dir().join("halite-minion"));
        command.args(["--config", "/dev/null"]).args(args);
        let out = read_a_little_then_go_away(&mut command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.status.success(), "{args:?}: {:?}: {stderr}", out.status);
    }
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

/// `key list --state` filters as `salt-key -l` does; `key delete` on a terminal lists the
/// keys and asks first (as `salt-key -d`), `-y` does not ask, and neither does a script.
#[test]
fn key_list_filters_by_state_and_key_delete_asks_on_a_terminal() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("kd1", "");
    cluster.wait_connected(&["kd1"]);
    let listed = |states: &[&str]| {
        let mut args = vec!["key", "list", "--out", "json"];
        for state in states {
            args.extend(["--state", state]);
        }
        let run = cluster.cli(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json().as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(listed(&["accepted"]), ["kd1"]);
    assert!(listed(&["pending", "rejected"]).is_empty());
    assert!(cluster.cli(&["key", "list", "--state", "bogus"]).stderr.contains("invalid value 'bogus'"));

    // On a terminal (script(1) gives it one), "n" deletes nothing.
    let on_terminal = |answer: &str| {
        let line =
            format!("{} --config {} key delete kd1", cluster.bins().join("halite").display(), cluster.config.display());
        let mut child = std::process::Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), answer.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = on_terminal("n\n");
    assert!(said.contains("kd1 (accepted)") && said.contains("Proceed? [y/N]"), "{said}");
    assert!(said.contains("nothing deleted"), "{said}");
    assert_eq!(listed(&[]), ["kd1"], "still there");
    // Salt's -y is taken by accept too (which never asks).
    assert_eq!(cluster.cli(&["key", "accept", "-y", "kd1"]).code, 0);
    // Not on a terminal (a script, CI): no question.
    let run = cluster.cli(&["key", "delete", "kd1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(listed(&[]).is_empty());
}

#[test]
fn listed_ids_the_master_does_not_know_are_reported_and_fail_the_run() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("known1", "");
    cluster.wait_connected(&["known1"]);
    let run = cluster.cli(&["run", "-L", "known1,ghost", "test.ping"]);
    assert_eq!(run.code, 3, "an unknown id is a failure: {}", run.stdout);
    let ghost = run.stdout.lines().find(|l| l.starts_with("ghost")).unwrap_or_default();
    assert!(ghost.contains("unknown") && ghost.contains("no such minion"), "{}", run.stdout);
    assert!(run.stdout.contains("1 returned, 1 unknown"), "{}", run.stdout);
    let run = cluster.cli(&["run", "--out", "json", "-L", "known1, ghost", "test.ping"]);
    assert_eq!(run.code, 3);
    let doc = run.json();
    assert_eq!(doc["minions"]["ghost"]["state"], "unknown", "{doc}");
    assert_eq!(doc["minions"]["known1"]["state"], "returned", "{doc}");
    let run = cluster.cli(&["run", "-L", "known1", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn a_long_list_target_comes_from_a_file_or_standard_input() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("known1", "");
    cluster.enroll_minion("known2", "");
    cluster.wait_connected(&["known1", "known2"]);
    // A thousand names, one per line: far past what a command line holds comfortably.
    let mut names: Vec<String> = (0..1_000).map(|i| format!("absent{i}.example.com")).collect();
    names.push("known1".into());
    let file = cluster.dir.join("hosts.txt");
    std::fs::write(&file, names.join("\n")).unwrap();
    let at_file = format!("@{}", file.display());
    let run = cluster.cli(&["run", "--out", "json", "-L", &at_file, "test.ping"]);
    let doc = run.json();
    assert_eq!(doc["minions"]["known1"]["state"], "returned", "{}", run.stderr);
    assert_eq!(doc["minions"]["absent999.example.com"]["state"], "unknown");
    assert!(doc["minions"].get("known2").is_none(), "only the listed ids");
    let mut child = Command::new(cluster.bins().join("halite"))
        .args(["--config", cluster.config.to_str().unwrap(), "run", "--out", "json", "-L", "@-", "test.ping"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"known1\nknown2\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["minions"]["known2"]["state"], "returned", "{doc}");
    let missing = cluster.cli(&["run", "-L", "@/nonexistent/hosts", "test.ping"]);
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("-L @/nonexistent/hosts"), "{}", missing.stderr);
}

#[test]
fn ctrl_c_during_a_run_tells_the_jid_and_how_to_follow_it() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("slow1", "");
    cluster.wait_connected(&["slow1"]);
    let child = std::process::Command::new(cluster.bins().join("halite"))
        .arg("--config")
        .arg(&cluster.config)
        .args(["run", "slow1", "test.sleep", "20"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    let jid = stderr.split("job ").nth(1).and_then(|rest| rest.split_whitespace().next()).unwrap_or_default();
    assert_eq!(jid.len(), 20, "{stderr}");
    assert!(stderr.contains(&format!("halite jobs show {jid}")), "{stderr}");
    // The job goes on: it is live on the master.
    let shown = cluster.cli(&["jobs", "show", jid, "--out", "json"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
}

#[test]
fn jobs_show_reads_like_run() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("show1", "");
    cluster.wait_connected(&["show1"]);
    let run = cluster.cli(&["run", "--out", "json", "show1", "cmd.run", "echo hi", "shell=true", "timeout=5"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let jid = run.json()["jid"].as_str().unwrap().to_owned();
    let shown = cluster.cli(&["jobs", "show", &jid]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let text = shown.stdout;
    assert!(text.contains("call:     cmd.run 'echo hi' shell=true timeout=5"), "{text}");
    assert!(text.contains("target:   (glob) show1"), "{text}");
    assert!(text.contains("show1") && text.contains("returned") && text.contains("hi"), "{text}");
    assert!(text.contains(&format!("1 minion(s), job {jid}: 1 returned")), "{text}");
    assert!(!text.contains("String(") && !text.contains("Object {"), "no Rust debug text: {text}");
}

/// Shell syntax without a shell is refused at the master, once, before anything is sent (every
/// minion would refuse it alike); Salt's `python_shell=True` means `shell=true`.
#[test]
fn shell_syntax_without_a_shell_is_refused_before_it_is_sent_and_python_shell_is_salts_shell() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("sh1", "");
    cluster.wait_connected(&["sh1"]);
    let before = cluster.cli(&["jobs", "list", "--out", "json"]).stdout;
    let run = cluster.cli(&["run", "sh1", "cmd.run", "df -h | tail -1"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(run.stderr.contains("add shell=true") && run.stderr.contains("nothing was sent"), "{}", run.stderr);
    assert_eq!(cluster.cli(&["jobs", "list", "--out", "json"]).stdout, before, "no job was made");
    let run = cluster.cli(&["run", "--out", "json", "sh1", "cmd.run", "echo a | tr a b", "python_shell=True"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["minions"]["sh1"]["return"]["stdout"], "b\n", "{}", run.stdout);
}

/// Salt's `--static` (every return together, at the end) and `--out txt` (`minion: value`).
#[test]
fn run_takes_salts_static_and_txt_output() {
    let mut cluster = Cluster::start("");
    for id in ["txt1", "txt2"] {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&["txt1", "txt2"]);
    let run = cluster.cli(&["run", "--out", "txt", "txt*", "test.echo", "hello world"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "txt1: hello world\ntxt2: hello world\n");
    let run = cluster.cli(&["run", "--out", "txt", "txt1", "grains.get", "ipv4"]);
    assert!(run.stdout.starts_with("txt1: [\"") && run.stdout.ends_with("]\n"), "{}", run.stdout);
    let run = cluster.cli(&["run", "--static", "txt1", "test.ping"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("txt1") && run.stdout.contains("true"), "{}", run.stdout);
    let run = cluster.cli(&["run", "--out", "text", "txt1", "test.ping"]);
    assert!(run.code != 0 && run.stderr.contains("expected table, json, yaml, ndjson or txt"), "{}", run.stderr);
}

/// After a source install (`cargo install`: the program in `PREFIX/bin`), `halite man
/// --install` puts the pages in `PREFIX/share/man/man1`, where man looks through PATH.
#[test]
fn man_install_writes_the_pages_where_man_finds_them() {
    let prefix = std::env::temp_dir().join(format!("halite-man-install-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    let program = prefix.join("bin/halite");
    std::fs::copy(halite_tests::bin_dir().join("halite"), &program).unwrap();
    let out = std::process::Command::new(&program).args(["man", "--install"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pages = prefix.join("share/man/man1");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&pages.display().to_string()));
    for page in ["halite.1", "halite-run.1", "halite-key-delete.1"] {
        let text = std::fs::read_to_string(pages.join(page)).unwrap_or_default();
        assert!(text.contains(".TH"), "{page}");
    }
    std::fs::remove_dir_all(&prefix).unwrap();
}

#[test]
fn a_large_argument_comes_from_a_file_or_standard_input() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("files1", "");
    cluster.wait_connected(&["files1"]);
    // 140 KB: more than one command-line argument may hold on Linux (128 KiB).
    let content: String = (0..7000).map(|i| format!("line {i:05} of the file\n")).collect();
    let source = cluster.dir.join("source.txt");
    std::fs::write(&source, &content).unwrap();
    let target = cluster.dir.join("written.txt");
    let name = format!("name={}", target.display());
    let contents = format!("contents=@{}", source.display());
    let run = cluster.cli(&["run", "files1", "file.managed", &name, &contents]);
    assert_eq!(run.code, 0, "{} {}", run.stdout, run.stderr);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), content);
    // From standard input, and a literal @ with @@.
    let mut child = Command::new(cluster.bins().join("halite"))
        .arg("--config")
        .arg(&cluster.config)
        .args(["run", "--out", "json", "files1", "test.echo", "text=@-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"from stdin\n").unwrap();
    let output = child.wait_with_output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["minions"]["files1"]["return"], "from stdin\n", "{doc}");
    let missing = cluster.cli(&["run", "files1", "test.echo", "text=@/nonexistent/file"]);
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("text=@/nonexistent/file"), "{}", missing.stderr);
    let literal = cluster.cli(&["run", "--out", "json", "files1", "test.echo", "text=@@home"]);
    assert_eq!(literal.json()["minions"]["files1"]["return"], "@home");
}

#[test]
fn a_remote_admin_registers_rekeys_and_removes_a_principal_with_its_own_key_set() {
    use halite_protocol::identity::IdentityKey;
    use halite_transport::keyfile;
    let cluster = Cluster::start("");
    let keys = cluster.dir.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    cluster.add_principal("ops", &keys, &["--admin"]);
    // The new principal's key pair, made on its own machine: only the public half is given.
    let first = IdentityKey::from_seed(&[7; 32]);
    let public_file = keys.join("deploy.pub");
    keyfile::write_public(&public_file, &first.public()).unwrap();
    let second = IdentityKey::from_seed(&[8; 32]);
    let hex: String = second.public().as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    // As the remote admin would: its own identity in the environment (HALITE_KEY), and
    // `--key` given as well; the new principal's key under its own flag.
    let admin = |args: &[&str]| {
        let output = Command::new(cluster.bins().join("halite"))
            .args(["--master", &format!("127.0.0.1:{}", cluster.port), "--key"])
            .arg(keys.join("ops.key"))
            .args(args)
            .env("HALITE_MASTER_KEY", cluster.dir.join("master/master.pub"))
            .env("HALITE_PRINCIPAL", "ops")
            .env("HALITE_KEY", keys.join("ops.key"))
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let public = public_file.to_str().unwrap();
    let (code, _, stderr) =
        admin(&["principal", "add", "deploy", "--public-key", public, "--target", "web*", "--function", "test.*"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, listed, _) = admin(&["--out", "json", "principal", "list"]);
    assert!(listed.contains("\"deploy\""), "{listed}");
    // Re-keyed with 64 hex digits.
    let (code, _, stderr) =
        admin(&["principal", "add", "deploy", "--public-key", &hex, "--target", "web*", "--function", "test.*"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, listed, _) = admin(&["--out", "json", "principal", "list"]);
    assert!(listed.contains(&second.public().fingerprint()), "the new key is listed: {listed}");
    let (code, _, stderr) = admin(&["principal", "add", "deploy", "--public-key", "abcd"]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("--public-key \"abcd\": not 64 hex digits"), "{stderr}");
    let (code, _, stderr) = admin(&["principal", "remove", "deploy"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, listed, _) = admin(&["--out", "json", "principal", "list"]);
    assert!(!listed.contains("\"deploy\""), "{listed}");
}

#[test]
fn halite_config_names_the_master_config_and_a_key_pattern_that_matches_nothing_fails() {
    let cluster = Cluster::start("");
    let output = Command::new(cluster.bins().join("halite"))
        .args(["key", "accept", "nosuch"])
        .env("HALITE_CONFIG", &cluster.config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "as salt-key: nothing matched is an error: {stderr}");
    assert!(stderr.contains("no key matches \"nosuch\""), "{stderr}");
}

#[test]
fn an_argument_that_does_not_fit_is_named_with_its_type_and_an_example() {
    let mut cluster = Cluster::start("");
    cluster.enroll_minion("m1", "");
    cluster.wait_connected(&["m1"]);
    let error_of = |args: &[&str]| {
        let mut all = vec!["--out", "json", "run", "m1"];
        all.extend_from_slice(args);
        let run = cluster.cli(&all);
        assert_eq!(run.code, 3, "{}", run.stdout);
        run.json()["minions"]["m1"]["return"]["error"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(
        error_of(&["test.sleep", "soon"]),
        r#"bad arguments: length: "soon" is not a number; length takes a number, e.g. length=30"#
    );
    assert_eq!(
        error_of(&["cmd.run", "date", "env=LANG=C"]),
        r#"bad arguments: env: "LANG=C" is not an object; env takes an object, e.g. env='{"KEY":"value"}'"#
    );
}

#[test]
fn an_error_says_its_cause_once() {
    for (program, args) in [
        ("halite-master", &["-c", "/nonexistent/x.toml"][..]),
        ("halite-minion", &["-c", "/nonexistent/x.toml"]),
        ("halite", &["-c", "/nonexistent/x.toml", "key", "list"]),
    ] {
        let output = Command::new(halite_tests::bin_dir().join(program)).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "{program}: {stderr}");
        assert_eq!(stderr.matches("No such file or directory").count(), 1, "{program}: {stderr}");
    }
}

/// The bash completion script completes `run`'s target with the master's minion ids and its
/// function with the functions they have; clap's completion answers everywhere else.
#[test]
fn bash_completion_offers_minion_ids_and_function_names_from_the_master() {
    let mut cluster = Cluster::start("");
    for id in ["comp-web1", "comp-db1"] {
        cluster.enroll_minion(id, "");
    }
    cluster.wait_connected(&["comp-web1", "comp-db1"]);
    let script = cluster.cli(&["completions", "bash"]).stdout;
    let file = cluster.dir.join("halite.bash");
    std::fs::write(&file, script).unwrap();
    let complete = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let array = words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" ");
        let program = format!(
            "source {}; COMP_WORDS=({array}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; \
             _halite_dynamic halite '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display(),
            words.len() - 1,
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &program])
            .env("PATH", format!("{}:{}", cluster.bins().display(), std::env::var("PATH").unwrap_or_default()))
            .env(
                "HALITE_CONFIG",
                if line.contains(" -c ") { "/nonexistent/master.toml".as_ref() } else { cluster.config.as_path() },
            )
            .output()
            .unwrap();
        let mut words: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        words.sort();
        words
    };
    assert_eq!(complete("halite run comp-"), ["comp-db1", "comp-web1"]);
    assert_eq!(complete("halite run -t 5s comp-w"), ["comp-web1"]);
    // The config the line names is the one asked.
    let config = cluster.config.display().to_string();
    assert_eq!(complete(&format!("halite -c {config} run comp-d")), ["comp-db1"]);
    let functions = complete("halite run comp-web1 test.p");
    assert!(functions.contains(&"test.ping".to_owned()), "{functions:?}");
    assert!(functions.iter().all(|f| f.starts_with("test.p")), "{functions:?}");
    // Elsewhere, clap's own: subcommands.
    let subcommands = complete("halite ru");
    assert_eq!(subcommands, ["run"], "{subcommands:?}");
}
