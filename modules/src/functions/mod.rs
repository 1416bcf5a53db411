//! The built-in functions, one module per `module.` prefix.

#[cfg(feature = "accounts")]
mod accounts;
#[cfg(feature = "archive")]
mod archive;
#[cfg(feature = "cmd")]
mod cmd;
#[cfg(feature = "deploy")]
pub(crate) mod deploy;
pub(crate) mod deploy_settings;
mod event;
mod file;
mod grains;
#[cfg(feature = "peer")]
mod peer;
mod pkg;
mod plan;
mod service;
mod sys;
mod test;

use crate::function::Function;

/// A function of a cargo feature: `None` in a build without that feature.
macro_rules! gated {
    ($feature:literal, $function:path) => {{
        #[cfg(feature = $feature)]
        let function: Option<Box<dyn Function>> = Some(Box::new($function));
        #[cfg(not(feature = $feature))]
        let function: Option<Box<dyn Function>> = None;
        function
    }};
}

/// Every built-in function this build has (the cargo features choose; see Cargo.toml). The
/// registry and its tests are built from this one list.
pub(crate) fn all() -> Vec<Box<dyn Function>> {
    let all: Vec<Option<Box<dyn Function>>> = vec![
        Some(Box::new(test::Ping)),
        Some(Box::new(test::Echo)),
        Some(Box::new(test::Sleep)),
        Some(Box::new(test::Version)),
        Some(Box::new(grains::Items)),
        Some(Box::new(grains::Get)),
        Some(Box::new(sys::ListFunctions)),
        Some(Box::new(sys::Doc)),
        gated!("cmd", cmd::Run),
        gated!("cmd", cmd::Script),
        gated!("files", file::Managed),
        gated!("files", file::Absent),
        gated!("files", file::Directory),
        Some(Box::new(file::Read)),
        Some(Box::new(file::Stat)),
        gated!("archive", archive::Extract),
        gated!("accounts", accounts::UserPresent),
        gated!("accounts", accounts::UserAbsent),
        gated!("accounts", accounts::GroupPresent),
        gated!("accounts", accounts::GroupAbsent),
        gated!("packages", pkg::Install),
        gated!("packages", pkg::Remove),
        Some(Box::new(pkg::List)),
        Some(Box::new(pkg::Version)),
        gated!("packages", pkg::Refresh),
        gated!("services", service::Start),
        gated!("services", service::Stop),
        gated!("services", service::Restart),
        gated!("services", service::Reload),
        Some(Box::new(service::Status)),
        Some(Box::new(service::Enabled)),
        gated!("services", service::Enable),
        gated!("services", service::Disable),
        Some(Box::new(event::Send)),
        gated!("peer", peer::Publish),
        Some(Box::new(plan::Run)),
        Some(Box::new(plan::Apply)),
        gated!("deploy", deploy::Apply),
    ];
    all.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    /// Each feature's functions: those that run caller-supplied code, write caller-supplied
    /// files, or change packages, services, accounts or other minions.
    fn gated() -> Vec<(&'static str, bool, &'static [&'static str])> {
        vec![
            ("cmd", cfg!(feature = "cmd"), &["cmd.run", "cmd.script"]),
            ("files", cfg!(feature = "files"), &["file.managed", "file.absent", "file.directory"]),
            ("archive", cfg!(feature = "archive"), &["archive.extract"]),
            ("packages", cfg!(feature = "packages"), &["pkg.install", "pkg.remove", "pkg.refresh"]),
            (
                "services",
                cfg!(feature = "services"),
                &[
                    "service.start",
                    "service.stop",
                    "service.restart",
                    "service.reload",
                    "service.enable",
                    "service.disable",
                ],
            ),
            ("accounts", cfg!(feature = "accounts"), &["user.present", "user.absent", "group.present", "group.absent"]),
            ("peer", cfg!(feature = "peer"), &["peer.publish"]),
            ("deploy", cfg!(feature = "deploy"), &["deploy.apply"]),
        ]
    }

    /// What every build has: introspection, events, plans.
    const ALWAYS: &[&str] = &[
        "test.ping",
        "test.echo",
        "test.sleep",
        "test.version",
        "grains.items",
        "grains.get",
        "sys.list_functions",
        "sys.doc",
        "file.read",
        "file.stat",
        "pkg.list",
        "pkg.version",
        "service.status",
        "service.enabled",
        "event.send",
        "plan.run",
        "plan.apply",
    ];

    /// Run in both builds by CI: the default one, and the locked-down one
    /// (`cargo test -p halite-modules --no-default-features`), where every gated function must
    /// be absent from the registry itself, not merely denied by policy.
    #[test]
    fn the_registry_holds_exactly_what_the_build_features_choose() {
        let registry = crate::Registry::standard();
        let mut expected: Vec<&str> = ALWAYS.to_vec();
        for (feature, on, names) in gated() {
            for name in names {
                assert_eq!(
                    registry.get(name).is_some(),
                    on,
                    "{name} with feature {feature} {}",
                    if on { "on" } else { "off" }
                );
            }
            if on {
                expected.extend_from_slice(names);
            }
        }
        let all = super::all();
        let mut names: Vec<&str> = all.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        expected.sort_unstable();
        assert_eq!(names, expected);
    }
}
