//! End-to-end: plans kept on the master. A top file and plans under `[files] root`, two
//! minions, `halite apply` through the CLI: each minion runs the plans its entries give it,
//! shown as a step table with Salt's summary line; `--test` shows diffs and changes nothing; a
//! narrow principal's steps stay within its reach; a bad plan names its file and line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use halite_tests::{Cluster, Run};

/// A master serving `files/` and two minions: web1, and db1 with the grain `role: db`.
struct Fleet {
    cluster: Cluster,
    files: PathBuf,
    out: PathBuf,
}

impl Fleet {
    /// `name` keeps each test's files apart.
    fn start(name: &str) -> Fleet {
        let base = std::env::temp_dir().join(format!("halite-central-plans-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (files, out) = (base.join("files"), base.join("out"));
        std::fs::create_dir_all(files.join("plans")).unwrap();
        std::fs::create_dir_all(files.join("empty")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        let write = |path: &str, text: &str| std::fs::write(files.join(path), text).unwrap();
        write("top.yaml", "# Which plans each minion runs.\n'web*': [common, web]\n'G@role:db':\n  - common\n  - db\n");
        write("empty/top.yaml", "'nobody*': [common]\n");
        write("plans/common.yaml", "steps:\n  - id: hello\n    function: test.echo\n    args: [hello]\n");
        write(
            "plans/web.yaml",
            &format!(
                "steps:\n  - id: conf\n    function: file.managed\n    kwargs:\n      name: {}\n      contents: \"listen 80\\n\"\n  - id: reload\n    function: cmd.run\n    args: [\"echo reloaded\"]\n    onchanges: [conf]\n",
                out.join("web.conf").display()
            ),
        );
        write(
            "plans/db.toml",
            &format!(
                "[[steps]]\nid = \"conf\"\nfunction = \"file.managed\"\nkwargs = {{ name = {:?}, contents = \"port 5432\\n\" }}\nrequire = [\"common:hello\"]\n",
                out.join("db.conf").display().to_string()
            ),
        );
        write("plans/bad.yaml", "steps:\n  - id: a\n    function: test.ping\n    funtion: test.ping\n");
        let mut cluster = Cluster::start(&format!("[files]\nroot = {files:?}\n"));
        cluster.prepare_minion("web1", true, "");
        cluster.prepare_minion("db1", true, "role = \"db\"");
        cluster.start_minion("web1");
        cluster.start_minion("db1");
        cluster.wait_connected(&["web1", "db1"]);
        Fleet { cluster, files, out }
    }

    fn apply(&self, args: &[&str]) -> Run {
        let mut full = vec!["apply"];
        full.extend_from_slice(args);
        self.cluster.cli(&full)
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(self.files.parent().unwrap_or(Path::new("/nonexistent")));
        }
    }
}

/// The rows of `minion`'s step table in `halite apply`'s output: (step, function, result).
fn rows(stdout: &str, minion: &str) -> Vec<(String, String, String)> {
    let section: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{minion}  ")))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .collect();
    section
        .iter()
        .skip_while(|l| !l.trim_start().starts_with("STEP"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let result = if words[2] == "would" { "would change".to_owned() } else { words[2].to_owned() };
            (words[0].to_owned(), words[1].to_owned(), result)
        })
        .collect()
}

/// Asserts the rows of `minion`'s step table, each as [step, function, result].
fn assert_rows(run: &Run, minion: &str, expected: &[[&str; 3]]) {
    let expected: Vec<(String, String, String)> =
        expected.iter().map(|[a, b, c]| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned())).collect();
    assert_eq!(rows(&run.stdout, minion), expected, "{}\n{}", run.stdout, run.stderr);
}

#[test]
fn apply_runs_each_minions_plans_from_the_top_file() {
    let fleet = Fleet::start("apply");
    let web_conf = fleet.out.join("web.conf");
    let db_conf = fleet.out.join("db.conf");

    // Only web1 is targeted; it runs common then web, as the top file lists them.
    let run = fleet.apply(&["web*"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_rows(
        &run,
        "web1",
        &[
            ["common:hello", "test.echo", "ok"],
            ["web:conf", "file.managed", "changed"],
            ["web:reload", "cmd.run", "ok"],
        ],
    );
    assert!(
        run.stdout.contains("Succeeded: 3 (changed=1)  Failed: 0  Skipped: 0  Total: 3  Duration: "),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("reloaded"), "the comment column shows a command's first line: {}", run.stdout);
    assert!(!run.stdout.contains("db1"), "{}", run.stdout);
    assert_eq!(std::fs::read_to_string(&web_conf).unwrap(), "listen 80\n");
    assert!(!db_conf.exists(), "db1 was not targeted");

    // Everyone: web1 has nothing left to change (the reload waits for a change); db1 matches by
    // its grain and runs common then db (a TOML plan requiring a step of common).
    let run = fleet.apply(&["*"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_rows(
        &run,
        "web1",
        &[
            ["common:hello", "test.echo", "ok"],
            ["web:conf", "file.managed", "ok"],
            ["web:reload", "cmd.run", "skipped"],
        ],
    );
    assert_rows(&run, "db1", &[["common:hello", "test.echo", "ok"], ["db:conf", "file.managed", "changed"]]);
    assert!(run.stdout.contains("Succeeded: 2 (changed=0)  Failed: 0  Skipped: 1  Total: 3"), "{}", run.stdout);
    assert_eq!(std::fs::read_to_string(&db_conf).unwrap(), "port 5432\n");

    // --test: the drift is shown as a diff, and nothing is changed.
    std::fs::write(&web_conf, "listen 8080\n").unwrap();
    let run = fleet.apply(&["web1", "--test"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(rows(&run.stdout, "web1")[1].2, "would change", "{}", run.stdout);
    assert!(run.stdout.contains("diff of web:conf:"), "{}", run.stdout);
    assert!(run.stdout.contains("-listen 8080") && run.stdout.contains("+listen 80"), "{}", run.stdout);
    assert!(run.stdout.contains("(would change=1)"), "{}", run.stdout);
    assert_eq!(std::fs::read_to_string(&web_conf).unwrap(), "listen 8080\n", "--test changed the file");
    // Salt's spelling says the same.
    let run = fleet.apply(&["web1", "test=True"]);
    assert_eq!(rows(&run.stdout, "web1")[1].2, "would change", "{}\n{}", run.stdout, run.stderr);
    assert_eq!(std::fs::read_to_string(&web_conf).unwrap(), "listen 8080\n", "test=True changed the file");
    let run = fleet.apply(&["web1", "saltenv=base"]);
    assert!(run.code == 1 && run.stderr.contains("saltenv= is no argument"), "{}", run.stderr);

    // --out json keeps the structured result.
    let doc = fleet.apply(&["--out", "json", "db1"]).json();
    let ret = &doc["minions"]["db1"]["return"];
    assert_eq!(ret["plans"], serde_json::json!(["common", "db"]), "{doc}");
    assert_eq!(ret["steps"][1]["id"], "db:conf", "{doc}");
    assert_eq!(ret["top"], "halite://top.yaml", "{doc}");

    // Named plans instead of the top file's; a top with nothing for this minion is no failure.
    let run = fleet.apply(&["db1", "common"]);
    assert_rows(&run, "db1", &[["common:hello", "test.echo", "ok"]]);
    let run = fleet.apply(&["db1", "--top", "halite://empty/top.yaml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("no plans for db1 in halite://empty/top.yaml"), "{}", run.stdout);

    // One plan by its URL through plan.run, as any function.
    let run = fleet.cluster.cli(&["run", "--out", "json", "web1", "plan.run", "source=halite://plans/common.yaml"]);
    assert_eq!(run.json()["minions"]["web1"]["return"]["steps"][0]["return"], "hello", "{}", run.stdout);
}

#[test]
fn a_bad_plan_names_its_file_and_line_and_fails_the_minion() {
    let fleet = Fleet::start("bad");
    let run = fleet.apply(&["web1", "bad"]);
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("halite://plans/bad.yaml line 4: unknown step field `funtion`"), "{}", run.stdout);
    let run = fleet.apply(&["web1", "missing"]);
    assert_eq!(run.code, 3);
    assert!(run.stdout.contains("no plan missing on the master"), "{}", run.stdout);
}

/// A principal allowed `plan.apply` (and `test.*`) gets nothing more through the master's
/// plans: the file and shell steps are refused on the minion, and nothing is written.
#[test]
fn a_narrow_principal_reaches_only_its_own_functions_through_central_plans() {
    let fleet = Fleet::start("narrow");
    let keys = fleet.cluster.dir.join("principals");
    fleet.cluster.add_principal(
        "ops",
        &keys,
        &["--target", "web*", "--function", "plan.apply", "--function", "test.*"],
    );
    let key = keys.join("ops.key");
    let key = key.to_str().unwrap();
    let run = fleet.cluster.cli(&["--principal", "ops", "--key", key, "apply", "--out", "json", "web1"]);
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let doc = run.json();
    let steps = doc["minions"]["web1"]["return"]["steps"].as_array().unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(steps[0]["result"], "succeeded", "{doc}");
    assert_eq!(steps[1]["result"], "failed", "{doc}");
    assert!(steps[1]["error"].as_str().unwrap().contains("file.managed is beyond what ops may call"), "{doc}");
    assert_eq!(steps[2]["result"], "skipped", "the reload had no change to follow: {doc}");
    assert!(!fleet.out.join("web.conf").exists(), "a step outside the principal's reach ran");
    // Its ACL does not cover plan.run: the master refuses that outright.
    let run = fleet.cluster.cli(&[
        "--principal",
        "ops",
        "--key",
        key,
        "run",
        "web1",
        "plan.run",
        "source=halite://plans/web.yaml",
    ]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    // The table shows the refusal in the step's row.
    let run = fleet.cluster.cli(&["--principal", "ops", "--key", key, "apply", "web1"]);
    assert_eq!(rows(&run.stdout, "web1")[1].2, "failed", "{}", run.stdout);
    assert!(run.stdout.contains("Succeeded: 1 (changed=0)  Failed: 1  Skipped: 1  Total: 3"), "{}", run.stdout);
}
