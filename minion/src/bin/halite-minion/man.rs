//! halite-minion(8) and a page for each of its commands (`halite-minion-call.8`, ...):
//! `halite-minion man` prints the first, `halite-minion man --dir DIR` writes them all, as the
//! packages install them. The clap definition plus what is here, rendered by the renderer the
//! three programs share (`cli/src/man/render.rs`).

#[path = "../../../../cli/src/man/render.rs"]
mod render;

use std::path::Path;

use clap::CommandFactory;

use self::render::{Entry, Example, Manual, Scope};
use crate::Cli;

/// The daemon: the program run bare, or `run`.
const DAEMON: &[&str] = &["", "run"];

const EXIT_STATUS: &[Entry] = &[
    Entry { name: "0", scope: Scope::Only(DAEMON), text: "Stopped cleanly, on SIGTERM or SIGINT." },
    Entry { name: "0", scope: Scope::Only(&["call"]), text: "The function succeeded; its result is printed." },
    Entry { name: "0", scope: Scope::Only(&["doc"]), text: "Success." },
    Entry {
        name: "1",
        scope: Scope::All,
        text: "An error, said on standard error: a config that does not read (the message names the key \
               and line), a state directory that another halite-minion holds or that cannot be written, \
               a master key that is not 64 hex digits.",
    },
    Entry {
        name: "1",
        scope: Scope::Only(&["call"]),
        text: "The function failed, is unknown, or the policy does not allow it: the printed result says \
               which.",
    },
    Entry { name: "2", scope: Scope::All, text: render::USAGE_ERROR },
];

const ENVIRONMENT: &[Entry] = &[
    Entry { name: "RUST_LOG", scope: Scope::Only(DAEMON), text: render::RUST_LOG },
    Entry { name: "NO_COLOR", scope: Scope::Only(DAEMON), text: render::NO_COLOR },
    Entry {
        name: "NOTIFY_SOCKET",
        scope: Scope::Only(DAEMON),
        text: "Set by systemd for a Type=notify unit: the minion sends READY=1 there once it has started.",
    },
    Entry {
        name: "HEAT_CONFIG_DEPLOYED, HEAT_CONFIG_HOOKS, HEAT_SCRIPT_WORKING, HEAT_SCRIPT_OUTPUTS",
        scope: Scope::Except(&["doc"]),
        text: "Defaults of the [deploy] settings of deploy.apply, read as heat-agents reads them: where \
               applied configs are recorded, a hooks directory searched first, the script hook's working \
               and outputs directories.",
    },
];

const FILES: &[Entry] = &[
    Entry {
        name: "/etc/halite/minion.toml",
        scope: Scope::Except(&["doc"]),
        text: "The configuration (--config; without it, a missing file means every default): id, \
               masters, state_dir, [policy], [grains], [deploy]. SIGHUP makes a running minion read its \
               policy, custom actions, plans and deploy settings again.",
    },
    Entry {
        name: "/etc/halite/enrollment.toml",
        scope: Scope::Only(DAEMON),
        text: "Written at first boot (cloud-init user_data from halite key token create --user-data): the \
               masters, the master key, the id and a one-time token the minion enrolls with \
               (enrollment_file).",
    },
    Entry {
        name: "/etc/halite/actions.d/",
        scope: Scope::Except(&["doc"]),
        text: "Custom actions, one *.toml each (actions_dir).",
    },
    Entry {
        name: "/etc/halite/plans/",
        scope: Scope::Except(&["doc"]),
        text: "Plans (*.toml) that plan.run runs (plans_dir).",
    },
    Entry {
        name: "/var/lib/halite/minion/",
        scope: Scope::Only(DAEMON),
        text: "The state directory (state_dir), mode 0700.",
    },
    Entry {
        name: "/var/lib/halite/minion/lock",
        scope: Scope::Only(DAEMON),
        text: "Held while the minion runs: a second halite-minion on the same directory exits at once.",
    },
    Entry {
        name: "/var/lib/halite/minion/minion.key",
        scope: Scope::Only(DAEMON),
        text: "The minion's identity (mode 0600), made at its first start, or installed (halite key gen).",
    },
    Entry {
        name: "/var/lib/halite/minion/master.pub",
        scope: Scope::Only(DAEMON),
        text: "A master key pinned on first use (with trust_on_first_use only).",
    },
    Entry {
        name: "/var/lib/halite/minion/revoked_masters",
        scope: Scope::Only(DAEMON),
        text: "Master keys the cluster key revoked, as masters told this minion: refused from then on.",
    },
    Entry {
        name: "/var/lib/halite/minion/journal",
        scope: Scope::Only(DAEMON),
        text: "At-most-once markers and the returns a master has not acknowledged yet: a job never runs \
               twice, and no return is lost when the minion stops.",
    },
    Entry {
        name: "/var/lib/heat-config/deployed/",
        scope: Scope::Except(&["doc"]),
        text: "Where deploy.apply records the configs it applied ([deploy] deployed_dir); hooks are \
               looked for in /usr/libexec/heat-config/hooks and /var/lib/heat-config/hooks.",
    },
    Entry {
        name: "/usr/share/doc/halite-minion/modules.md",
        scope: Scope::All,
        text: "Every built-in function and its arguments: what doc prints.",
    },
    Entry {
        name: "/usr/share/doc/halite-minion/operations.md",
        scope: Scope::All,
        text: "The operations guide: the config keys, the policy, enrollment, the state directory.",
    },
];

const EXAMPLES: &[Example] = &[
    Example {
        command: "",
        text: "Run the minion as its systemd unit does:",
        line: "halite-minion --config /etc/halite/minion.toml",
    },
    Example { command: "", text: "With debug logging:", line: "halite-minion --log-level debug" },
    Example {
        command: "run",
        text: "The same, naming the command (options of the program come before it):",
        line: "halite-minion --config /etc/halite/minion.toml run",
    },
    Example {
        command: "call",
        text: "Check a function locally, as salt-call does:",
        line: "halite-minion call test.ping",
    },
    Example {
        command: "call",
        text: "One grain's value alone, for a shell script:",
        line: "halite-minion call --out txt grains.get os",
    },
    Example {
        command: "call",
        text: "A function with keyword arguments, under the policy of the packaged config:",
        line: "halite-minion --config /etc/halite/minion.toml \\\n    call cmd.run 'ls -l' cwd=/var/log",
    },
    Example { command: "call", text: "The functions this minion has:", line: "halite-minion call sys.list_functions" },
    Example { command: "doc", text: "The function reference, as Markdown:", line: "halite-minion doc > modules.md" },
];

const SEE_ALSO: &[(&str, &[&str])] = &[("", &["halite(1)", "halite-master(8)"])];

const MANUAL: Manual = Manual {
    section: "8",
    exit_status: EXIT_STATUS,
    environment: ENVIRONMENT,
    files: FILES,
    examples: EXAMPLES,
    see_also: SEE_ALSO,
};

/// `halite-minion man`: the page on standard output, or with `dir` every page written there.
pub(crate) fn run(dir: Option<&Path>) -> anyhow::Result<()> {
    Ok(MANUAL.print_or_write(Cli::command(), dir)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_a_page_with_every_section_and_examples_that_parse() {
        let problems = render::check(&MANUAL, Cli::command(), &["halite(1)", "halite-master(8)"]);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        let names: Vec<String> = MANUAL.pages(Cli::command()).iter().map(|p| p.file_name("8")).collect();
        assert_eq!(names, ["halite-minion.8", "halite-minion-run.8", "halite-minion-call.8", "halite-minion-doc.8"]);
    }
}
