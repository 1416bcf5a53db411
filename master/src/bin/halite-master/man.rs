//! halite-master(8) and a page for each of its commands (`halite-master-cluster-init.8`, ...):
//! `halite-master man` prints the first, `halite-master man --dir DIR` writes them all, as the
//! packages install them. The clap definition plus what is here, rendered by the renderer the
//! three programs share (`cli/src/man/render.rs`).

#[path = "../../../../cli/src/man/render.rs"]
mod render;

use std::path::Path;

use clap::CommandFactory;

use self::render::{Entry, Example, Manual, Scope};
use crate::Cli;

/// Commands that read no config and start no master.
const KEY_ONLY: &[&str] = &["cluster init", "cluster revoke"];

const EXIT_STATUS: &[Entry] = &[
    Entry { name: "0", scope: Scope::Only(&[""]), text: "Stopped cleanly, on SIGTERM or SIGINT." },
    Entry { name: "0", scope: Scope::Except(&[""]), text: "Success." },
    Entry {
        name: "1",
        scope: Scope::All,
        text: "An error, said on standard error: a config that does not read (the message names the key \
               and line), a key file readable by others, a state directory or database the master will \
               not trust (see --accept-wal-loss and --init), an address in use, a store that cannot be \
               reached.",
    },
    Entry { name: "1", scope: Scope::Only(&["cluster init"]), text: "DIR already holds a cluster.key." },
    Entry {
        name: "1",
        scope: Scope::Only(&["migrate-store"]),
        text: "No master.db to copy, a target that is not a postgres:// URL, already holds data or cannot \
               be reached.",
    },
    Entry { name: "2", scope: Scope::All, text: render::USAGE_ERROR },
];

const ENVIRONMENT: &[Entry] = &[
    Entry { name: "RUST_LOG", scope: Scope::Except(KEY_ONLY), text: render::RUST_LOG },
    Entry { name: "NO_COLOR", scope: Scope::Except(KEY_ONLY), text: render::NO_COLOR },
    Entry {
        name: "NOTIFY_SOCKET",
        scope: Scope::Only(&[""]),
        text: "Set by systemd for a Type=notify unit: the master sends READY=1 there once it listens.",
    },
    Entry {
        name: "PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, PGSSLMODE, PGSSLROOTCERT, PGPASSFILE",
        scope: Scope::Only(&["", "migrate-store"]),
        text: "For a PostgreSQL store ([store] url, or --to): what the URL leaves out, as libpq reads \
               them (and ~/.pgpass).",
    },
];

const FILES: &[Entry] = &[
    Entry {
        name: "/etc/halite/master.toml",
        scope: Scope::Except(KEY_ONLY),
        text: "The configuration (--config): listen address, state_dir, [store], [gateway], [metrics], \
               nodegroups, events and peers rules. SIGHUP makes a running master read its rules \
               again; other settings need a restart.",
    },
    Entry {
        name: "/var/lib/halite/master/",
        scope: Scope::Except(KEY_ONLY),
        text: "The state directory (state_dir; mode 0700, owned by the master's user, halite).",
    },
    Entry {
        name: "/var/lib/halite/master/master.key",
        scope: Scope::Only(&["", "cluster certify"]),
        text: "The master's identity key (mode 0600), made at its first start; refused if group or \
               others can read it.",
    },
    Entry {
        name: "/var/lib/halite/master/master.pub",
        scope: Scope::Only(&[""]),
        text: "Its public key, which minions and clients pin.",
    },
    Entry {
        name: "/var/lib/halite/master/root.key",
        scope: Scope::Only(&[""]),
        text: "The root client principal's key (mode 0600): halite(1) on this host acts as root with it.",
    },
    Entry {
        name: "/var/lib/halite/master/master.addr",
        scope: Scope::Only(&[""]),
        text: "The address bound, written at start (gateway.addr and metrics.addr likewise, when those \
               are on).",
    },
    Entry {
        name: "/var/lib/halite/master/master.cert",
        scope: Scope::Only(&["", "cluster certify"]),
        text: "This master's key and id certified by the cluster key: written by cluster certify, shown \
               to minions and clients, which pin the cluster key.",
    },
    Entry {
        name: "/var/lib/halite/master/master.db",
        scope: Scope::Only(&["", "migrate-store"]),
        text: "The SQLite store, with its write-ahead log master.db-wal, unless [store] url names a \
               PostgreSQL database; what migrate-store copies.",
    },
    Entry {
        name: "DIR/cluster.key, DIR/cluster.pub",
        scope: Scope::Only(&["cluster init"]),
        text: "The cluster's secret key, written with mode 0600 (keep it offline), and its public key, \
               which minions and clients pin as master_key.",
    },
    Entry {
        name: "cluster.key",
        scope: Scope::Only(&["cluster certify", "cluster revoke"]),
        text: "The cluster's secret key (--cluster-key), read only.",
    },
    Entry {
        name: "/usr/share/doc/halite-master/operations.md",
        scope: Scope::All,
        text: "The operations guide: every config key, the store, clusters, upgrades.",
    },
];

const EXAMPLES: &[Example] = &[
    Example {
        command: "",
        text: "Run the master as its systemd unit does:",
        line: "halite-master --config /etc/halite/master.toml",
    },
    Example { command: "", text: "With debug logging:", line: "halite-master --log-level debug" },
    Example {
        command: "",
        text: "Start after an unclean stop lost the database's write-ahead log, keeping what SQLite can read:",
        line: "halite-master --accept-wal-loss",
    },
    Example {
        command: "migrate-store",
        text: "Copy the SQLite store into an empty PostgreSQL database (the master stopped), the password \
               read from a file of mode 0600:",
        line: "halite-master migrate-store \\\n    --to postgres://halite@db.example.org/halite \\\n    --password-file /etc/halite/db.password",
    },
    Example {
        command: "tenant rename",
        text: "Give a tenant whose name overlaps another's (acme-dev beside acme) a name without '-', the \
               masters stopped:",
        line: "halite-master tenant rename acme-dev acmedev",
    },
    Example {
        command: "cluster init",
        text: "Make a cluster key, on an offline machine if you can:",
        line: "halite-master cluster init /root/halite-cluster",
    },
    Example {
        command: "cluster certify",
        text: "Certify this master's key with it (restart the master to present the certificate):",
        line: "halite-master --config /etc/halite/master.toml cluster certify \\\n    --cluster-key /root/halite-cluster/cluster.key",
    },
    Example {
        command: "cluster revoke",
        text: "The revocation of a retired master's key, to add to every other master's revoked_masters:",
        line: "halite-master cluster revoke \\\n    --cluster-key /root/halite-cluster/cluster.key old-master.pub",
    },
];

const SEE_ALSO: &[(&str, &[&str])] = &[("", &["halite(1)", "halite-minion(8)"])];

const MANUAL: Manual = Manual {
    section: "8",
    exit_status: EXIT_STATUS,
    environment: ENVIRONMENT,
    files: FILES,
    examples: EXAMPLES,
    see_also: SEE_ALSO,
};

/// `halite-master man`: the page on standard output, or with `dir` every page written there.
pub(crate) fn run(dir: Option<&Path>) -> anyhow::Result<()> {
    Ok(MANUAL.print_or_write(Cli::command(), dir)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_a_page_with_every_section_and_examples_that_parse() {
        let problems = render::check(&MANUAL, Cli::command(), &["halite(1)", "halite-minion(8)"]);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        let names: Vec<String> = MANUAL.pages(Cli::command()).iter().map(|p| p.file_name("8")).collect();
        assert_eq!(
            names,
            [
                "halite-master.8",
                "halite-master-migrate-store.8",
                "halite-master-cluster.8",
                "halite-master-cluster-init.8",
                "halite-master-cluster-certify.8",
                "halite-master-cluster-revoke.8",
                "halite-master-tenant.8",
                "halite-master-tenant-rename.8"
            ]
        );
    }
}
