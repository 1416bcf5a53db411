//! The CLI's man pages: `halite man` prints halite(1), `halite man --dir DIR` writes it and a
//! page for every command under it (`halite-run.1`, `halite-key-token-create.1`, ...), as the
//! packages install them. The pages are the clap definition plus what is here: which exit
//! status each command gives (the codes of `main.rs`), the files it reads, the variables clap
//! does not read, and examples, each parsed against the arguments by the tests below.

mod render;

use std::path::Path;

use clap::CommandFactory;

use self::render::{Entry, Example, Manual, Scope};
use crate::Cli;

/// Commands that report on targets: 0 only when every one succeeded.
const TARGETED: &[&str] = &["run", "apply", "deployment wait", "deployment group-wait", "demo"];

/// Commands that read no master config and connect to no master.
const OFFLINE: &[&str] = &["demo", "completions"];

const EXIT_STATUS: &[Entry] = &[
    Entry { name: "0", scope: Scope::Except(TARGETED), text: "Success." },
    Entry {
        name: "0",
        scope: Scope::Only(&["run"]),
        text: "Every targeted minion returned successfully before -t ran out; with --async, the job was \
               published and every id its target names is a minion's.",
    },
    Entry {
        name: "0",
        scope: Scope::Only(&["apply"]),
        text: "Every targeted minion applied its plans (with --test: ran them changing nothing) before -t \
               ran out; with --async, the job was published.",
    },
    Entry {
        name: "0",
        scope: Scope::Only(&["deployment wait", "deployment group-wait"]),
        text: "The deployment (every deployment of the group) is COMPLETE.",
    },
    Entry { name: "0", scope: Scope::Only(&["demo"]), text: "Every command of the demo succeeded." },
    Entry {
        name: "1",
        scope: Scope::Except(OFFLINE),
        text: "An error, said on standard error: bad input, a file that cannot be read, the master \
               unreachable, or the request refused (not allowed, no such job, key or principal).",
    },
    Entry { name: "1", scope: Scope::Only(&["run", "apply"]), text: "No minion matched the target." },
    Entry {
        name: "1",
        scope: Scope::Only(&["key accept", "key reject", "key delete"]),
        text: "No key matches the pattern (keys already in the state asked for are no error).",
    },
    Entry {
        name: "1",
        scope: Scope::Only(&["deployment wait", "deployment group-wait"]),
        text: "--timeout ran out first.",
    },
    Entry {
        name: "1",
        scope: Scope::Only(&["demo"]),
        text: "The master or a minion did not start, or a command of the demo failed.",
    },
    Entry { name: "1", scope: Scope::Only(&["completions"]), text: "Standard output could not be written." },
    Entry {
        name: "2",
        scope: Scope::All,
        text: "Invalid command-line usage: an unknown command or option, a missing or malformed argument \
               (the message says which).",
    },
    Entry {
        name: "3",
        scope: Scope::Only(&["run"]),
        text: "At least one targeted minion did not return successfully: failed, timed out, offline, \
               cancelled, expired, denied, skipped, unknown (no such minion), or still running when -t \
               ran out (the job goes on). With --async: an id the target names is no minion's.",
    },
    Entry {
        name: "3",
        scope: Scope::Only(&["apply"]),
        text: "At least one targeted minion failed its plans, or had not returned when -t ran out or the \
               command was interrupted (the job goes on).",
    },
    Entry {
        name: "3",
        scope: Scope::Only(&["deployment create", "deployment group"]),
        text: "With --wait: the deployment (a deployment of the group) ended FAILED.",
    },
    Entry {
        name: "3",
        scope: Scope::Only(&["deployment wait", "deployment group-wait"]),
        text: "The deployment (a deployment of the group) ended FAILED.",
    },
    Entry {
        name: "130",
        scope: Scope::Only(&["run"]),
        text: "Interrupted (Ctrl-C) while waiting for returns; the job goes on without the command \
               (halite jobs show JID follows it).",
    },
];

/// Beyond the `env = ...` of the clap definition.
const ENVIRONMENT: &[Entry] = &[
    Entry {
        name: "NO_COLOR",
        scope: Scope::Except(&["completions"]),
        text: "When set, output is never coloured (it is coloured only on a terminal anyway).",
    },
    Entry { name: "TMPDIR", scope: Scope::Only(&["demo"]), text: "Where the demo makes its directory (default /tmp)." },
];

const FILES: &[Entry] = &[
    Entry {
        name: "/etc/halite/master.toml",
        scope: Scope::Except(OFFLINE),
        text: "The master's config (--config, HALITE_CONFIG), for its state_dir and listen settings: \
               where to find the master and root's key. Not read when --master, --master-key, \
               --principal and --key are all given.",
    },
    Entry {
        name: "/var/lib/halite/master/master.addr",
        scope: Scope::Except(OFFLINE),
        text: "The address the master bound, written at its start (the state directory is the \
               config's state_dir, /var/lib/halite/master by default). Without it: the config's listen \
               address, 0.0.0.0 as 127.0.0.1. --master overrides both.",
    },
    Entry {
        name: "/var/lib/halite/master/master.pub",
        scope: Scope::Except(OFFLINE),
        text: "The master's public key, pinned: a master presenting another key is refused. \
               --master-key overrides it.",
    },
    Entry {
        name: "/var/lib/halite/master/master.cert",
        scope: Scope::Except(OFFLINE),
        text: "On a master certified by a cluster key (halite-master cluster certify): the cluster key \
               it names is pinned instead of master.pub, so any master of the cluster is accepted.",
    },
    Entry {
        name: "/var/lib/halite/master/root.key",
        scope: Scope::Except(OFFLINE),
        text: "The root principal's secret key, used unless --principal and --key name another \
               principal: whoever can read it administers the master. Run halite as the master's \
               user.",
    },
    Entry {
        name: "DIR/ID.key, DIR/ID.pub",
        scope: Scope::Only(&["key gen"]),
        text: "The minion's secret key, written with mode 0600 (install it as the minion's \
               state_dir/minion.key), and its public key.",
    },
    Entry {
        name: "DIR/NAME.key, DIR/NAME.pub",
        scope: Scope::Only(&["principal add"]),
        text: "With --generate DIR: the principal's secret key, written with mode 0600 (its --key), and \
               its public key.",
    },
    Entry {
        name: "$TMPDIR/halite-demo-PID/",
        scope: Scope::Only(&["demo"]),
        text: "The demo's master and minions: their configs, state and logs (master.log, \
               ID/minion.log). Removed at the end unless --keep.",
    },
    Entry {
        name: "halite-master, halite-minion",
        scope: Scope::Only(&["demo"]),
        text: "The programs the demo starts, from the directory the halite program is in.",
    },
    Entry {
        name: "/usr/share/bash-completion/completions/halite",
        scope: Scope::Only(&["completions"]),
        text: "Where the packages install the bash script.",
    },
    Entry {
        name: "/usr/share/zsh/vendor-completions/_halite",
        scope: Scope::Only(&["completions"]),
        text: "The zsh script (the .deb's; the .rpm installs it in /usr/share/zsh/site-functions).",
    },
    Entry {
        name: "/usr/share/fish/vendor_completions.d/halite.fish",
        scope: Scope::Only(&["completions"]),
        text: "The fish script.",
    },
];

/// A job id, a config's and a deployment's, for the examples that need one.
macro_rules! jid {
    () => {
        "20261126171446982150"
    };
}
macro_rules! config_id {
    () => {
        "1e21cc27-ed71-4c05-9aef-8babc9f30826"
    };
}
macro_rules! deployment_id {
    () => {
        "7c0f5a52-8d3e-4b6a-9f57-2a1de3c4b9e0"
    };
}

const fn example(command: &'static str, text: &'static str, line: &'static str) -> Example {
    Example { command, text, line }
}

const EXAMPLES: &[Example] = &[
    example("", "Check that every minion answers:", "halite run '*' test.ping"),
    example("", "The minions, connected or not:", "halite minions list"),
    example("", "The five newest jobs, as JSON:", "halite --out json jobs list --limit 5"),
    example(
        "",
        "From another machine, as the principal ops, trying two masters in turn (no config file is read):",
        "halite --master 10.0.0.1:4506,10.0.0.2:4506 \\\n    --master-key /etc/halite/master.pub \\\n    --principal ops --key /home/ops/.halite/ops.key \\\n    run 'web*' test.ping",
    ),
    example("", "A master and three minions in a temporary directory, to try it out:", "halite demo"),
    // run
    example("run", "Ping every minion, waiting up to 30 seconds for the returns:", "halite run '*' test.ping"),
    example("run", "A command on the minions whose ids start with web:", "halite run 'web*' cmd.run 'uname -sr'"),
    example("run", "Target by grain:", "halite run -G role:web grains.items"),
    example("run", "A list of ids:", "halite run -L web1,db1 test.version"),
    example("run", "The ids listed in a file, one per line:", "halite run -L @hosts.txt test.ping"),
    example("run", "A regular expression, matching whole ids:", "halite run -E 'web[0-9]+' test.ping"),
    example("run", "A compound expression:", "halite run -C 'G@role:web and not L@web2' test.ping"),
    example(
        "run",
        "Keyword arguments, one of them read from a local file (key=@FILE):",
        "halite run web1 file.managed /etc/motd contents=@motd.txt mode=0644",
    ),
    example(
        "run",
        "Publish and print the job id at once, to follow with halite jobs show:",
        "halite run --async '*' test.sleep 60",
    ),
    example(
        "run",
        "Restart nginx on a tenth of the web servers at a time, starting no more after the first failure:",
        "halite run -b 10% --max-errors 0 -G role:web service.restart nginx",
    ),
    example(
        "run",
        "Also deliver to minions that connect within the next hour:",
        "halite run --ttl 1h '*' test.version",
    ),
    example(
        "run",
        "One JSON object per minion as it returns, for a script:",
        "halite --out ndjson run '*' grains.get os",
    ),
    // apply
    example("apply", "Apply to every minion the plans the master's top file gives it:", "halite apply '*'"),
    example("apply", "What would change on the web servers, changing nothing:", "halite apply --test -G role:web"),
    example("apply", "Two plans by name (under plans/ beside the top file) on web1:", "halite apply web1 nginx users"),
    // key
    example("key list", "Every key and its state:", "halite key list"),
    example("key list", "The keys of the web servers:", "halite key list 'web*'"),
    example("key accept", "Accept a minion's key:", "halite key accept web1"),
    example("key accept", "Accept every pending key:", "halite key accept --all"),
    example("key reject", "Reject a key; the minion is disconnected at once:", "halite key reject db1"),
    example("key delete", "Delete the keys of retired servers:", "halite key delete 'old-*'"),
    example("key fingerprint", "The master's fingerprint, then web1's:", "halite key fingerprint web1"),
    example(
        "key gen",
        "Preseed a minion: make its key pair, accepted at once, to install as its minion.key:",
        "halite key gen --id web3 --dir /root/keys",
    ),
    example(
        "key token create",
        "A one-time token enrolling web3, valid for a day:",
        "halite key token create --minion web3 --ttl 24h",
    ),
    example(
        "key token create",
        "Cloud-init user_data for a new server, pointing it at both masters:",
        "halite key token create --minion web3 --user-data \\\n    --master-address 10.0.0.1:4506 --master-address 10.0.0.2:4506",
    ),
    example(
        "key token create",
        "Enroll a reinstalled server again, replacing its accepted key:",
        "halite key token create --minion web1 --replace",
    ),
    example("key token list", "The tokens, used and unused:", "halite key token list"),
    example("key token revoke", "Revoke a token by its id:", "halite key token revoke 7473275c48e7"),
    // minions
    example("minions list", "Every minion with an accepted key: presence, OS, addresses:", "halite minions list"),
    example("minions list", "The web servers, as YAML:", "halite --out yaml minions list 'web*'"),
    // jobs
    example("jobs list", "The 50 newest jobs:", "halite jobs list --limit 50"),
    example("jobs list", "Jobs of the last hour where a minion failed:", "halite jobs list --state failed --since 1h"),
    example(
        "jobs list",
        "Package jobs a principal published on one day (UTC):",
        "halite jobs list --function 'pkg.*' --caller heat-prod \\\n    --since 2026-11-26 --until 2026-11-27",
    ),
    example("jobs show", "A job's targets, their states and returns:", concat!("halite jobs show ", jid!())),
    example(
        "jobs cancel",
        "Cancel a running job; each minion's final state is printed:",
        concat!("halite jobs cancel ", jid!()),
    ),
    example(
        "jobs pause",
        "Pause a rollout: running targets finish, no new one starts:",
        concat!("halite jobs pause ", jid!()),
    ),
    example("jobs resume", "Go on with a paused rollout:", concat!("halite jobs resume ", jid!())),
    // events
    example("events", "Every event this principal may see, as it happens:", "halite events"),
    example("events", "Job returns only, stopping after ten:", "halite events --count 10 'halite/job/*/ret/*'"),
    example(
        "fire",
        "Fire engine/root/alarm/latency with data (a rollout run with --abort-on 'engine/*/alarm/*' stops):",
        "halite fire alarm/latency '{\"p99_ms\": 900}'",
    ),
    // principal
    example(
        "principal add",
        "An operator who may run test.* and cmd.run on the web servers, its key pair made in /root/keys:",
        "halite principal add ops --generate /root/keys \\\n    --target 'web*' --function 'test.*' --function cmd.run",
    ),
    example(
        "principal add",
        "An engine confined to the minions of one tenant (ids starting with proja-):",
        "halite principal add heat-proja \\\n    --public-key /etc/halite/heat-proja.pub --tenant proja",
    ),
    example(
        "principal add",
        "An administrator (keys, tokens, principals):",
        "halite principal add alice \\\n    --public-key /home/alice/alice.pub --admin",
    ),
    example("principal list", "The principals and what they may do:", "halite principal list"),
    // audit
    example("audit list", "What proja was refused, oldest first:", "halite audit list --by proja --decision refused"),
    example("audit list", "Everything about one minion, as JSON:", "halite audit list --minion web1 --out json"),
    example("audit export", "The whole trail with its hashes and signatures:", "halite audit export --out audit.jsonl"),
    example("audit verify", "The master checks every chain in its store (exit 1 names the first broken record):", "halite audit verify"),
    example(
        "audit verify",
        "An exported trail checked offline with the master's key:",
        "halite audit verify --file audit.jsonl \\\n    --signer /var/lib/halite/master/master.pub",
    ),
    example("principal remove", "Remove a principal, cutting its sessions:", "halite principal remove ops"),
    example("principal transfer", "Hand what root created to Heat's principal:", "halite principal transfer root heat"),
    example("principal token", "A gateway token for heat, valid for 30 days:", "halite principal token heat --ttl 30d"),
    example("principal tokens", "The gateway tokens (never the tokens themselves):", "halite principal tokens"),
    example(
        "principal revoke-token",
        "Revoke a gateway token by its id:",
        "halite principal revoke-token 8e14336f9212",
    ),
    // config
    example(
        "config create",
        "A script with an input and an output; its id is printed:",
        "halite config create hello --file hello.sh \\\n    --input name=world --output result",
    ),
    example("config create", "The script from standard input:", "halite config create motd --file - < motd.sh"),
    example(
        "config create",
        "A structured config from a JSON definition:",
        "halite config create web-setup --definition web-setup.json",
    ),
    example("config show", "A config with its script:", concat!("halite config show ", config_id!())),
    example("config list", "The ten newest configs:", "halite config list --limit 10"),
    example("config delete", "Delete a config:", concat!("halite config delete ", config_id!())),
    // deployment
    example(
        "deployment create",
        "Deploy a config to web1 with an input, waiting until it is COMPLETE (exit 0) or FAILED (exit 3):",
        concat!("halite deployment create ", config_id!(), " web1 \\\n    --input name=halite --wait"),
    ),
    example("deployment show", "A deployment with its outputs:", concat!("halite deployment show ", deployment_id!())),
    example("deployment list", "web1's deployments:", "halite deployment list --server web1"),
    example("deployment delete", "Delete a deployment:", concat!("halite deployment delete ", deployment_id!())),
    example(
        "deployment group",
        "Deploy to three servers, two at a time, and wait for the group:",
        concat!("halite deployment group ", config_id!(), " \\\n    web1 web2 db1 -b 2 --wait"),
    ),
    example(
        "deployment group-show",
        "Each server's status in a group:",
        concat!("halite deployment group-show ", deployment_id!()),
    ),
    example(
        "deployment group-wait",
        "Wait up to ten minutes for a group:",
        concat!("halite deployment group-wait ", deployment_id!(), " \\\n    --timeout 10m"),
    ),
    example(
        "deployment wait",
        "Wait for a deployment:",
        concat!("halite deployment wait ", deployment_id!(), " \\\n    --timeout 5m"),
    ),
    // demo, completions
    example("demo", "Run the demo:", "halite demo"),
    example("demo", "Keep its directory (configs, keys, logs) to look at afterwards:", "halite demo --keep"),
    example(
        "completions",
        "Install bash completion for the current user:",
        "halite completions bash \\\n    > ~/.local/share/bash-completion/completions/halite",
    ),
    example("completions", "For zsh, into a directory of fpath:", "halite completions zsh > ~/.zfunc/_halite"),
    example("completions", "For fish:", "halite completions fish > ~/.config/fish/completions/halite.fish"),
];

const SEE_ALSO: &[(&str, &[&str])] = &[
    ("", &["halite-master(8)", "halite-minion(8)"]),
    ("run", &["halite-jobs-show(1)", "halite-jobs-cancel(1)", "halite-events(1)", "halite-minion(8)"]),
    ("apply", &["halite-run(1)", "halite-jobs-show(1)"]),
    ("key", &["halite-minion(8)"]),
    ("jobs show", &["halite-run(1)"]),
    ("events", &["halite-fire(1)"]),
    ("fire", &["halite-events(1)", "halite-run(1)"]),
    ("deployment", &["halite-config(1)"]),
    ("config", &["halite-deployment(1)"]),
    ("demo", &["halite-master(8)", "halite-minion(8)"]),
];

const MANUAL: Manual = Manual {
    section: "1",
    exit_status: EXIT_STATUS,
    environment: ENVIRONMENT,
    files: FILES,
    examples: EXAMPLES,
    see_also: SEE_ALSO,
};

/// `halite man`: halite(1) on standard output, or with `dir` every page written there.
pub(crate) fn run(dir: Option<&Path>) -> anyhow::Result<()> {
    Ok(MANUAL.print_or_write(Cli::command(), dir)?)
}

/// Writes every page where `man` looks for this program's: `share/man/man1` beside the
/// directory it runs from (man-db maps each `X/bin` of PATH to `X/share/man`).
pub(crate) fn install() -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let prefix = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow::anyhow!("{}: no directory above the program's", exe.display()))?;
    let dir = prefix.join("share/man/man1");
    std::fs::create_dir_all(&dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    MANUAL.write_to(Cli::command(), &dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_a_page_with_every_section_and_examples_that_parse() {
        let problems = render::check(&MANUAL, Cli::command(), &["halite-master(8)", "halite-minion(8)"]);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn a_link_planted_under_a_pages_name_is_replaced_not_followed() {
        let dir = std::env::temp_dir().join(format!("halite-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "kept").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("halite.1")).unwrap();
        MANUAL.write_to(Cli::command(), &dir).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "kept");
        let page = std::fs::symlink_metadata(dir.join("halite.1")).unwrap();
        assert!(page.is_file(), "the page is a file of its own");
        assert!(std::fs::read_to_string(dir.join("halite-run.1")).unwrap().contains(".TH halite-run 1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pages_are_named_after_their_commands_and_the_top_page_is_halite_1() {
        let pages = MANUAL.pages(Cli::command());
        let names: Vec<String> = pages.iter().map(|p| p.file_name("1")).collect();
        for name in ["halite.1", "halite-run.1", "halite-key.1", "halite-key-accept.1", "halite-key-token-create.1"] {
            assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
        }
        assert_eq!(names[0], "halite.1");
        assert!(!names.iter().any(|n| n.contains("help") || n.contains("-man.")), "{names:?}");
        assert!(pages[0].roff.starts_with(".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n.TH halite 1 "), "{}", pages[0].roff);
        // The top page lists the commands' pages, and never a `help` one.
        assert!(pages[0].roff.contains("halite\\-run(1)") && !pages[0].roff.contains("halite\\-help"));
    }

    #[test]
    fn the_check_finds_examples_pages_and_commands_that_are_wrong() {
        use clap::{Arg, Command};
        const WRONG: &[Example] = &[
            example("a", "Runs b instead:", "prog b"),
            example("b", "An option b does not have:", "prog b --n 3"),
            example("b", "Left to the shell:", "prog b $HOME"),
            example("", "Another program:", "ls prog"),
            example(
                "b",
                "Too wide for a terminal:",
                "prog b                                                                b",
            ),
        ];
        let program = Command::new("prog")
            .version("1")
            .arg(Arg::new("token").long("token").env("PROG_TOKEN"))
            .subcommand(Command::new("a").arg(Arg::new("n").long("n")))
            .subcommand(Command::new("b"));
        let manual = Manual {
            section: "1",
            exit_status: &[Entry { name: "0", scope: Scope::Only(&["c"]), text: "Success." }],
            environment: &[],
            files: &[],
            examples: WRONG,
            see_also: &[("a", &["prog-z(1)"])],
        };
        let problems = render::check(&manual, program, &[]).join("\n");
        for expected in [
            "example \"prog b\" runs \"b\", but is shown for \"a\"",
            "example \"prog b --n 3\": error: unexpected argument '--n'",
            "example \"prog b $HOME\": '$' unquoted",
            "example \"ls prog\": it does not run prog",
            "prog-a: SEE ALSO names prog-z(1), which is not a page",
            "the manual speaks of \"c\", which is not a command",
            "prog: FILES is empty",
            "prog-a: EXIT STATUS is empty",
            "longer than 69 columns",
        ] {
            assert!(problems.contains(expected), "{expected:?} not in:\n{problems}");
        }
        // The variable clap reads is on the page of the command that has it.
        let top = &manual.pages(Command::new("prog").arg(Arg::new("t").long("t").env("PROG_TOKEN")))[0].roff;
        assert!(render::section(top, "ENVIRONMENT").unwrap_or_default().contains("\\fBPROG_TOKEN\\fR"), "{top}");
    }

    #[test]
    fn exit_statuses_are_the_commands_own() {
        let page = |name: &str| {
            MANUAL.pages(Cli::command()).into_iter().find(|p| p.name == name).map(|p| p.roff).unwrap_or_default()
        };
        let status = |roff: &str| render::section(roff, "EXIT STATUS").unwrap_or_default().to_owned();
        let run = status(&page("halite-run"));
        assert!(
            run.contains("\\fB3\\fR") && run.contains("\\fB130\\fR") && !run.contains("\\fBhalite run\\fR"),
            "{run}"
        );
        assert!(!run.contains("Success."), "run says what success is: {run}");
        let list = status(&page("halite-key-list"));
        assert!(!list.contains("\\fB3\\fR") && list.contains("Success."), "{list}");
        // A page above a command names it with its own statuses.
        let top = status(&page("halite"));
        assert!(top.contains("\\fBhalite run\\fR: at least one targeted minion"), "{top}");
        let completions = page("halite-completions");
        let files = render::section(&completions, "FILES").unwrap_or_default();
        assert!(!files.contains("master.toml") && !completions.contains("NO_COLOR"), "{completions}");
        assert!(page("halite-run").contains("HALITE_MASTER_KEY"));
    }
}
