//! The operations guide, run. Every ```sh block of `docs/operations.md` is marked, on the line
//! before it, `<!-- tested -->` or `<!-- untested: why -->`; each tested block runs here as one
//! shell script against a real master and minions, and each of its commands must exit as the
//! guide says: 0, or the `(exit N)` ending the comment line right after it, whose other words
//! (`…` standing for what varies) must be in what the command printed. A renamed flag or
//! subcommand, a changed exit status or message, fails here before an operator meets it.
//!
//! What the commands find, without being rewritten beyond this mapping (also summarised at the
//! top of the guide):
//! - `halite`, `halite-master` and `halite-minion` on `PATH`, from this build, and
//!   `HALITE_CONFIG` naming the test master's config: `halite` works as on the master's host;
//! - paths under `/etc/` and `/root/` taken under a scratch directory, whose
//!   `etc/halite/master.toml` and `etc/halite/master.pub` are the test master's; `~` (`HOME`) is
//!   that directory, and relative paths are in a directory of its own;
//! - `10.0.0.N:4506` is the test master;
//! - connected minions `web1` and `web2` (grain `role = "web"`), `vm-1`, `proja-web1` and
//!   `projb-db1`, every function allowed; `db1` running without a token, so its key is pending;
//! - while a `halite events` command runs, a job is published every 200 ms, so it has events to
//!   show.
//!
//! Blocks run in the guide's order, on one master: what a block leaves (a principal, a key)
//! is there for the next.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use halite_tests::{wait_for, Cluster};

/// The guide.
const GUIDE: &str = "docs/operations.md";

/// How long one block may run.
const BLOCK_LIMIT: Duration = Duration::from_secs(120);

/// One command of a block and what the guide says it does.
struct Step {
    /// The command as written (continuation lines included).
    text: String,
    /// Its line in the guide.
    line: usize,
    /// The exit status the guide shows (0 unless a `(exit N)` line follows).
    exit: i32,
    /// Words the guide shows it printing, `…` for what varies.
    says: Option<String>,
}

/// A tested block: its first line in the guide, and its commands.
struct Block {
    line: usize,
    steps: Vec<Step>,
}

/// The tested blocks of `markdown`; panics on a shell block marked neither way.
fn tested_blocks(markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        let Some(language) = fence.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - fence.len();
        let start = i + 1;
        let end = (start..lines.len()).find(|&j| lines[j].trim() == "```").expect("a fence that does not close");
        if matches!(language.trim(), "sh" | "bash" | "shell") {
            let marker = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).map_or("", |l| l.trim());
            let line = i + 1;
            if marker == "<!-- tested -->" {
                let body: Vec<&str> = lines[start..end].iter().map(|l| l.get(indent..).unwrap_or("")).collect();
                blocks.push(Block { line, steps: steps(&body, start + 1) });
            } else {
                assert!(
                    marker.starts_with("<!-- untested: ") && marker.ends_with("-->"),
                    "{GUIDE}:{line}: a shell block marked neither `<!-- tested -->` nor `<!-- untested: why -->`"
                );
            }
        }
        i = end + 1;
    }
    blocks
}

/// The commands of a block whose first line is line `first` of the guide.
fn steps(body: &[&str], first: usize) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i].trim_end();
        if let Some(comment) = line.trim_start().strip_prefix('#') {
            if let Some((says, exit)) = exit_note(comment) {
                let step =
                    steps.last_mut().unwrap_or_else(|| panic!("{GUIDE}:{}: `(exit N)` after no command", first + i));
                step.exit = exit;
                step.says = (!says.is_empty()).then(|| says.to_owned());
            }
            i += 1;
            continue;
        }
        if line.trim().is_empty() {
            i += 1;
            continue;
        }
        let mut text = line.to_owned();
        let at = first + i;
        while text.ends_with('\\') && i + 1 < body.len() {
            i += 1;
            text.push('\n');
            text.push_str(body[i].trim_end());
        }
        steps.push(Step { text, line: at, exit: 0, says: None });
        i += 1;
    }
    steps
}

/// `halite: no such thing (exit 1)` → the words and the status.
fn exit_note(comment: &str) -> Option<(&str, i32)> {
    let body = comment.trim().strip_suffix(')')?;
    let (says, status) = body.rsplit_once("(exit ")?;
    Some((says.trim(), status.parse().ok()?))
}

/// `text` with the guide's paths and addresses mapped to the test's (see the module's doc).
fn mapped(text: &str, scratch: &Path, master: &str) -> String {
    let mut out = text.to_owned();
    for prefix in ["/etc/", "/root/"] {
        let within = format!("{}{prefix}", scratch.display());
        let mut mapped = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(prefix) {
            mapped.push_str(&rest[..at]);
            // Only a path's start: at the beginning, or after a space, `=`, a quote or `(`.
            let starts = mapped.chars().last().is_none_or(|c| " ='\"(\n".contains(c));
            mapped.push_str(if starts { &within } else { prefix });
            rest = &rest[at + prefix.len()..];
        }
        mapped.push_str(rest);
        out = mapped;
    }
    for n in 1..=9 {
        out = out.replace(&format!("10.0.0.{n}:4506"), master);
    }
    out
}

/// Whether `printed` holds the words the guide shows, in order, `…` standing for anything.
fn shows(printed: &str, says: &str) -> bool {
    let mut rest = printed;
    for part in says.split('…').map(str::trim).filter(|p| !p.is_empty()) {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// A `halite events` command, which needs events to see.
fn follows_events(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.first() == Some(&"halite") && words.contains(&"events")
}

/// The script of one block: each command's output kept apart, its status checked in order.
fn script(block: &Block, scratch: &Path, master: &str, out: &Path) -> String {
    let mut script = String::from("cd work || exit 101\n");
    for (n, step) in block.steps.iter().enumerate() {
        let command = mapped(&step.text, scratch, master);
        // The command may end in a comment: the closing brace goes on a line of its own.
        let run = format!("{{ {command}\n}} >'{out}/{n}.out' 2>'{out}/{n}.err'", out = out.display());
        if follows_events(&step.text) {
            script.push_str(
                "( while :; do halite run --async web1 test.ping >/dev/null 2>&1; sleep 0.2; done ) &\n__tick=$!\n",
            );
            script.push_str(&format!("{run}\n__status=$?\nkill $__tick; wait $__tick 2>/dev/null\n"));
        } else {
            script.push_str(&format!("{run}\n__status=$?\n"));
        }
        script.push_str(&format!(
            "echo $__status >'{out}/{n}.status'\n[ $__status -eq {exit} ] || exit 100\n",
            out = out.display(),
            exit = step.exit
        ));
    }
    script
}

/// Runs one block; panics naming the first command that did not do what the guide says.
fn run_block(block: &Block, scratch: &Path, master: &str, bins: &Path, number: usize) {
    let out = scratch.join(format!("block-{number}"));
    std::fs::create_dir_all(&out).unwrap();
    let path = format!("{}:{}", bins.display(), std::env::var("PATH").unwrap_or_default());
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script(block, scratch, master, &out))
        .current_dir(scratch)
        .env("PATH", path)
        .env("HOME", scratch)
        .env("HALITE_CONFIG", scratch.join("etc/halite/master.toml"))
        .env_remove("HALITE_MASTER")
        .env_remove("HALITE_MASTER_KEY")
        .env_remove("HALITE_PRINCIPAL")
        .env_remove("HALITE_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group, so a block that overruns is stopped whole.
        .process_group(0)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > BLOCK_LIMIT {
            let group = nix::unistd::Pid::from_raw(-i32::try_from(child.id()).unwrap());
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            break std::process::ExitStatus::default();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |n: usize, what: &str| std::fs::read_to_string(out.join(format!("{n}.{what}"))).unwrap_or_default();
    for (n, step) in block.steps.iter().enumerate() {
        let printed = format!("{}{}", read(n, "out"), read(n, "err"));
        let got = read(n, "status");
        let got = got.trim();
        let context = format!("{GUIDE}:{}: `{}`", step.line, step.text);
        assert!(!got.is_empty(), "{context} did not finish within {BLOCK_LIMIT:?} (the block ran {status})\n{printed}");
        let want = step.exit.to_string();
        assert_eq!(got, want, "{context} exited {got}, the guide says {want}:\n{printed}");
        if let Some(says) = &step.says {
            assert!(shows(&printed, says), "{context} printed no `{says}`:\n{printed}");
        }
    }
}

/// A master and the minions the guide's commands name.
fn fleet() -> Cluster {
    let mut cluster = Cluster::start("");
    let connected = ["web1", "web2", "vm-1", "proja-web1", "projb-db1"];
    for id in connected {
        let grains = if id.starts_with("web") { "role = \"web\"" } else { "" };
        let section = cluster.deploy_section(id);
        cluster.prepare_minion_with(id, true, grains, &section);
        cluster.start_minion(id);
    }
    // Without a token: its key waits for `halite key accept`.
    cluster.prepare_minion("db1", false, "");
    cluster.start_minion("db1");
    cluster.wait_connected(&connected);
    wait_for("db1's key to be pending", Duration::from_secs(20), || {
        let keys = cluster.cli(&["key", "list", "db1", "--out", "json"]).json();
        (keys[0]["state"] == "pending").then_some(())
    });
    cluster
}

#[test]
fn every_tested_command_of_the_operations_guide_exits_as_the_guide_says() {
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(GUIDE)).unwrap();
    let blocks = tested_blocks(&guide);
    let commands: usize = blocks.iter().map(|b| b.steps.len()).sum();
    assert!(blocks.len() >= 8 && commands >= 40, "only {} tested blocks, {commands} commands", blocks.len());

    let cluster = fleet();
    let scratch = cluster.dir.join("docs");
    std::fs::create_dir_all(scratch.join("etc/halite")).unwrap();
    std::fs::create_dir_all(scratch.join("work")).unwrap();
    std::os::unix::fs::symlink(&cluster.config, scratch.join("etc/halite/master.toml")).unwrap();
    std::os::unix::fs::symlink(cluster.dir.join("master/master.pub"), scratch.join("etc/halite/master.pub")).unwrap();
    let master = format!("127.0.0.1:{}", cluster.port);
    for (number, block) in blocks.iter().enumerate() {
        eprintln!("{GUIDE}:{}: {} command(s)", block.line, block.steps.len());
        run_block(block, &scratch, &master, cluster.bins(), number);
    }
}

#[test]
fn the_guide_reader_takes_commands_continuations_and_exit_notes() {
    let markdown = "text\n<!-- tested -->\n```sh\nhalite run a \\\n    test.ping   # a comment\n\
                    # shown output\nhalite run b test.pong\n# halite: test.pong is not … (exit 1)\n```\n\
                    <!-- untested: needs systemd -->\n```sh\nsystemctl stop x\n```\n```toml\nx = 1\n```\n";
    let blocks = tested_blocks(markdown);
    assert_eq!(blocks.len(), 1);
    let steps = &blocks[0].steps;
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].text, "halite run a \\\n    test.ping   # a comment");
    assert_eq!((steps[0].exit, steps[0].line), (0, 4));
    assert_eq!((steps[1].exit, steps[1].says.as_deref()), (1, Some("halite: test.pong is not …")));
    assert!(shows("halite: test.pong is not a function", "halite: test.pong is not …"));
    assert!(!shows("halite: no minions matched", "halite: test.pong is not …"));

    let unmarked = std::panic::catch_unwind(|| tested_blocks("```sh\nhalite key list\n```\n"));
    assert!(unmarked.is_err(), "a shell block must say whether it is tested");

    let scratch = Path::new("/tmp/s");
    assert_eq!(
        mapped("export K=/etc/halite/master.pub M=10.0.0.2:4506 # not /usr/etc/x", scratch, "127.0.0.1:9"),
        "export K=/tmp/s/etc/halite/master.pub M=127.0.0.1:9 # not /usr/etc/x"
    );
    assert_eq!(mapped("/root/c init", scratch, "m"), "/tmp/s/root/c init");
}
