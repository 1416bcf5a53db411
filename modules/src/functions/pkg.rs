//! `pkg.*`: packages through apt/dpkg, dnf/yum/rpm, apk, or pip.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[cfg(feature = "packages")]
use crate::Command;
use crate::{Context, ModuleError, Output, Typed};

/// A package manager.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Backend {
    Apt,
    /// dnf, or yum where dnf is missing.
    Dnf(&'static str),
    Apk,
    /// pip of this interpreter.
    Pip(PathBuf),
}

/// Options every `pkg.*` function takes.
#[derive(Deserialize, JsonSchema, Default)]
pub(crate) struct Select {
    /// Package manager: apt, dnf, yum, apk or pip (default: from the os_family grain).
    #[serde(default)]
    provider: Option<String>,
    /// For pip: a virtualenv directory or a Python interpreter (default python3), one of those
    /// the minion's `[policy] pip_bin_envs` lists: the caller never picks what runs.
    #[serde(default)]
    bin_env: Option<PathBuf>,
}

impl Select {
    fn backend(&self, cx: &Context) -> Result<Backend, ModuleError> {
        let family = cx.grains.get("os_family").and_then(|v| v.as_str()).unwrap_or("");
        let provider = self.provider.clone().unwrap_or_else(|| {
            match family {
                "Debian" => "apt",
                "RedHat" | "Suse" => "dnf",
                "Alpine" => "apk",
                _ => "",
            }
            .to_owned()
        });
        Ok(match provider.as_str() {
            "apt" => Backend::Apt,
            "dnf" | "yum" => Backend::Dnf(if provider == "dnf" && cx.runner.exists("dnf") { "dnf" } else { "yum" }),
            "apk" => Backend::Apk,
            "pip" => Backend::Pip(match &self.bin_env {
                Some(env) => {
                    let listed = cx.dispatcher.as_ref().is_some_and(|d| d.policy.pip_bin_envs.contains(env));
                    if !listed {
                        return Err(ModuleError::Denied(format!(
                            "bin_env {} is not one of the minion's [policy] pip_bin_envs",
                            env.display()
                        )));
                    }
                    if env.is_dir() {
                        env.join("bin/python")
                    } else {
                        env.clone()
                    }
                }
                None => PathBuf::from("python3"),
            }),
            "" => {
                return Err(ModuleError::Failed(format!(
                    "no package manager known for os_family {family:?}; pass provider="
                )))
            }
            other => {
                return Err(ModuleError::BadArguments(format!(
                    "unknown provider {other:?} (apt, dnf, yum, apk or pip)"
                )))
            }
        })
    }
}

#[cfg(feature = "packages")]
fn apt_env(argv: &[&str]) -> Command {
    let mut c = Command::new(argv);
    c.env.insert("DEBIAN_FRONTEND".into(), "noninteractive".into());
    c
}

impl Backend {
    async fn list(&self, cx: &Context) -> Result<BTreeMap<String, String>, ModuleError> {
        let mut out = BTreeMap::new();
        match self {
            Backend::Apt => {
                let text = cx
                    .runner
                    .check(&["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Status}\n"])
                    .await?;
                for line in text.lines() {
                    let f: Vec<&str> = line.split('\t').collect();
                    if f.len() == 3 && f[2] == "installed" {
                        out.insert(f[0].to_owned(), f[1].to_owned());
                    }
                }
            }
            Backend::Dnf(_) => {
                let text =
                    cx.runner.check(&["rpm", "-qa", "--qf", "%{NAME}\t%{EPOCH}:%{VERSION}-%{RELEASE}\n"]).await?;
                for line in text.lines() {
                    if let Some((name, version)) = line.split_once('\t') {
                        out.insert(name.to_owned(), version.trim_start_matches("(none):").to_owned());
                    }
                }
            }
            Backend::Apk => {
                let text = cx.runner.check(&["apk", "info", "-v"]).await?;
                let re = regex_lite::Regex::new(r"^(.+)-([0-9][^-]*-r[0-9]+)$")
                    .map_err(|e| ModuleError::Failed(e.to_string()))?;
                for line in text.lines() {
                    if let Some(c) = re.captures(line.trim()) {
                        out.insert(c[1].to_owned(), c[2].to_owned());
                    }
                }
            }
            Backend::Pip(python) => {
                let text = cx
                    .runner
                    .check(&[
                        python.display().to_string().as_str(),
                        "-m",
                        "pip",
                        "list",
                        "--format=json",
                        "--disable-pip-version-check",
                    ])
                    .await?;
                let list: Vec<serde_json::Value> =
                    serde_json::from_str(&text).map_err(|e| ModuleError::Failed(format!("pip list: {e}")))?;
                for p in list {
                    if let (Some(n), Some(v)) = (p["name"].as_str(), p["version"].as_str()) {
                        out.insert(self.key(n), v.to_owned());
                    }
                }
            }
        }
        Ok(out)
    }

    /// Package names are normalised the way the manager compares them.
    fn key(&self, name: &str) -> String {
        match self {
            Backend::Pip(_) => name.to_ascii_lowercase().replace('_', "-"),
            _ => name.to_owned(),
        }
    }

    #[cfg(feature = "packages")]
    fn pinned(&self, name: &str, version: &str) -> String {
        match self {
            Backend::Apt | Backend::Apk => format!("{name}={version}"),
            Backend::Dnf(_) => format!("{name}-{version}"),
            Backend::Pip(_) => format!("{name}=={version}"),
        }
    }

    #[cfg(feature = "packages")]
    fn install_command(&self, specs: &[String]) -> Command {
        let mut c = match self {
            Backend::Apt => apt_env(&["apt-get", "install", "-y", "-q", "--no-install-recommends"]),
            Backend::Dnf(tool) => Command::new(&[*tool, "install", "-y"]),
            Backend::Apk => Command::new(&["apk", "add"]),
            Backend::Pip(python) => Command::new(&[
                python.display().to_string().as_str(),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
            ]),
        };
        c.argv.extend(specs.iter().cloned());
        c
    }

    #[cfg(feature = "packages")]
    fn remove_command(&self, names: &[String]) -> Command {
        let mut c = match self {
            Backend::Apt => apt_env(&["apt-get", "remove", "-y", "-q"]),
            Backend::Dnf(tool) => Command::new(&[*tool, "remove", "-y"]),
            Backend::Apk => Command::new(&["apk", "del"]),
            Backend::Pip(python) => {
                Command::new(&[python.display().to_string().as_str(), "-m", "pip", "uninstall", "-y"])
            }
        };
        c.argv.extend(names.iter().cloned());
        c
    }

    #[cfg(feature = "packages")]
    fn refresh_command(&self) -> Option<Command> {
        match self {
            Backend::Apt => Some(apt_env(&["apt-get", "update", "-q"])),
            Backend::Dnf(tool) => Some(Command::new(&[*tool, "makecache"])),
            Backend::Apk => Some(Command::new(&["apk", "update"])),
            Backend::Pip(_) => None,
        }
    }
}

fn names(name: Option<String>, pkgs: Vec<String>) -> Result<Vec<String>, ModuleError> {
    let all: Vec<String> = name.into_iter().chain(pkgs).collect();
    if all.is_empty() {
        return Err(ModuleError::BadArguments("give name or pkgs".into()));
    }
    if let Some(bad) = all.iter().find(|n| !is_repository_name(n)) {
        return Err(ModuleError::BadArguments(format!(
            "{bad:?} is not a package name (a package from the configured repositories; never a file, a directory \
             or a URL: installing one runs code the caller chose)"
        )));
    }
    Ok(all)
}

/// Whether `name` names a package of the manager's repositories (with a version or extras as
/// the manager writes them), never something the manager would take as a local file, a
/// directory or a URL (apt and dnf install a local `.deb`/`.rpm` given its path, pip a local
/// project or a URL, each running the package's scripts as root).
fn is_repository_name(name: &str) -> bool {
    const ARCHIVES: [&str; 20] = [
        ".deb",
        ".udeb",
        ".ddeb",
        ".rpm",
        ".apk",
        ".whl",
        ".zip",
        ".egg",
        ".tar",
        ".tar.gz",
        ".tgz",
        ".tar.bz2",
        ".tbz",
        ".tbz2",
        ".tar.xz",
        ".txz",
        ".tar.lz",
        ".tlz",
        ".tar.lzma",
        ".pybundle",
    ];
    let lower = name.to_ascii_lowercase();
    !name.is_empty()
        // A file or directory by that name (managers look in the working directory too).
        && std::fs::symlink_metadata(name).is_err()
        && !name.starts_with(['-', '.', '/', '~'])
        && !name.contains(|c: char| c.is_whitespace() || c == '/' || c == '\\')
        && !name.contains(":/")
        && !ARCHIVES.iter().any(|suffix| lower.ends_with(suffix))
}

#[cfg(feature = "packages")]
fn versions_changed(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    names: &[String],
    backend: &Backend,
) -> serde_json::Value {
    let mut changes = serde_json::Map::new();
    for name in names {
        let key = backend.key(name);
        let (old, new) = (before.get(&key), after.get(&key));
        if old != new {
            changes.insert(
                name.clone(),
                json!({ "old": old.cloned().unwrap_or_default(), "new": new.cloned().unwrap_or_default() }),
            );
        }
    }
    serde_json::Value::Object(changes)
}

#[cfg(feature = "packages")]
pub(crate) struct Install;

#[cfg(feature = "packages")]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InstallArgs {
    /// One package.
    #[serde(default)]
    name: Option<String>,
    /// Several packages.
    #[serde(default)]
    pkgs: Vec<String>,
    /// Exact version to install (with name only).
    #[serde(default, deserialize_with = "crate::args::version_string")]
    #[schemars(with = "Option<String>")]
    version: Option<String>,
    /// Exact versions by package name (with pkgs).
    #[serde(default)]
    versions: BTreeMap<String, crate::args::VersionString>,
    /// Refresh the package index first.
    #[serde(default)]
    refresh: bool,
    #[serde(flatten)]
    select: Select,
}

#[cfg(feature = "packages")]
impl Typed for Install {
    const NAME: &'static str = "pkg.install";
    const DOC: &'static str = "Installs packages, optionally at exact versions; packages already installed (at the \
         requested version) are left alone, so a second run reports changed=false. details maps each changed \
         package to {old, new}.";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = InstallArgs;
    async fn run(&self, a: InstallArgs, cx: &Context) -> Result<Output, ModuleError> {
        let backend = a.select.backend(cx)?;
        let mut wanted: BTreeMap<String, String> = a.versions.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect();
        if let (Some(name), Some(version)) = (&a.name, &a.version) {
            wanted.insert(name.clone(), version.clone());
        }
        let all = names(a.name, a.pkgs)?;
        if a.refresh && !cx.test {
            if let Some(c) = backend.refresh_command() {
                cx.runner.check_env(&c).await?;
            }
        }
        let before = backend.list(cx).await?;
        let needed: Vec<String> = all
            .iter()
            .filter(|n| match (before.get(&backend.key(n)), wanted.get(*n)) {
                (None, _) => true,
                (Some(have), Some(want)) => have != want,
                (Some(_), None) => false,
            })
            .map(|n| match wanted.get(n) {
                Some(v) => backend.pinned(n, v),
                None => n.clone(),
            })
            .collect();
        if needed.is_empty() {
            return Ok(Output::change(false, "all packages are already installed", json!({})));
        }
        if cx.test {
            return Ok(Output::change(
                true,
                format!("would install {}", needed.join(" ")),
                json!({ "install": needed }),
            ));
        }
        cx.runner.check_env(&backend.install_command(&needed)).await?;
        let after = backend.list(cx).await?;
        let changes = versions_changed(&before, &after, &all, &backend);
        Ok(Output::change(true, format!("installed {}", needed.join(" ")), changes))
    }
}

#[cfg(feature = "packages")]
pub(crate) struct Remove;

/// Packages named by `name` and/or `pkgs`, for functions that take nothing else.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PackagesArgs {
    /// One package.
    #[serde(default)]
    name: Option<String>,
    /// Several packages.
    #[serde(default)]
    pkgs: Vec<String>,
    #[serde(flatten)]
    select: Select,
}

#[cfg(feature = "packages")]
impl Typed for Remove {
    const NAME: &'static str = "pkg.remove";
    const DOC: &'static str = "Removes installed packages; packages not installed are left alone (changed=false).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = PackagesArgs;
    async fn run(&self, a: PackagesArgs, cx: &Context) -> Result<Output, ModuleError> {
        let backend = a.select.backend(cx)?;
        let all = names(a.name, a.pkgs)?;
        let before = backend.list(cx).await?;
        let present: Vec<String> = all.iter().filter(|n| before.contains_key(&backend.key(n))).cloned().collect();
        if present.is_empty() {
            return Ok(Output::change(false, "none of the packages is installed", json!({})));
        }
        if cx.test {
            return Ok(Output::change(
                true,
                format!("would remove {}", present.join(" ")),
                json!({ "remove": present }),
            ));
        }
        cx.runner.check_env(&backend.remove_command(&present)).await?;
        let after = backend.list(cx).await?;
        Ok(Output::change(
            true,
            format!("removed {}", present.join(" ")),
            versions_changed(&before, &after, &all, &backend),
        ))
    }
}

pub(crate) struct List;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListArgs {
    #[serde(flatten)]
    select: Select,
}

impl Typed for List {
    const NAME: &'static str = "pkg.list";
    const DOC: &'static str = "Returns every installed package with its version.";
    type Args = ListArgs;
    async fn run(&self, a: ListArgs, cx: &Context) -> Result<Output, ModuleError> {
        Ok(Output::ok(json!(a.select.backend(cx)?.list(cx).await?)))
    }
}

pub(crate) struct Version;

impl Typed for Version {
    const NAME: &'static str = "pkg.version";
    const DOC: &'static str = "Returns the installed version of each package (an empty string when not installed).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = PackagesArgs;
    async fn run(&self, a: PackagesArgs, cx: &Context) -> Result<Output, ModuleError> {
        let backend = a.select.backend(cx)?;
        let installed = backend.list(cx).await?;
        let versions: BTreeMap<String, String> = names(a.name, a.pkgs)?
            .into_iter()
            .map(|n| {
                let version = installed.get(&backend.key(&n)).cloned().unwrap_or_default();
                (n, version)
            })
            .collect();
        Ok(Output::ok(json!(versions)))
    }
}

#[cfg(feature = "packages")]
pub(crate) struct Refresh;

#[cfg(feature = "packages")]
impl Typed for Refresh {
    const NAME: &'static str = "pkg.refresh";
    const DOC: &'static str =
        "Refreshes the package index (apt-get update, dnf makecache, apk update; nothing for pip).";
    type Args = ListArgs;
    async fn run(&self, a: ListArgs, cx: &Context) -> Result<Output, ModuleError> {
        let backend = a.select.backend(cx)?;
        let Some(command) = backend.refresh_command() else {
            return Ok(Output::change(false, "pip has no index to refresh", json!({})));
        };
        if cx.test {
            return Ok(Output::change(true, "would refresh the package index", json!({ "command": command.argv })));
        }
        cx.runner.check_env(&command).await?;
        Ok(Output::change(true, "package index refreshed", json!({ "command": command.argv })))
    }
}

#[cfg(test)]
#[cfg(feature = "packages")]
mod tests {
    use super::*;

    #[test]
    fn specs_are_written_the_way_each_manager_reads_them() {
        assert_eq!(Backend::Apt.pinned("nginx", "1.22-1"), "nginx=1.22-1");
        assert_eq!(Backend::Dnf("dnf").pinned("nginx", "1.22-1.el9"), "nginx-1.22-1.el9");
        assert_eq!(Backend::Pip("python3".into()).pinned("requests", "2.31.0"), "requests==2.31.0");
        assert_eq!(Backend::Pip("python3".into()).key("My_Pkg"), "my-pkg");
        assert!(names(None, vec![]).is_err());
        assert!(names(Some("-o".into()), vec![]).is_err());
        for local in ["/tmp/evil.deb", "./pkg", "evil.rpm", "dir/pkg", "pkg @ https://x/y.whl", "git+https://x", "~/p"]
        {
            assert!(names(Some(local.into()), vec![]).is_err(), "{local}");
        }
        for package in ["nginx", "nginx=1.22-1", "requests==2.31.0", "requests[socks]>=2", "libc6:amd64", "py3-yaml"] {
            assert!(names(Some(package.into()), vec![]).is_ok(), "{package}");
        }
        let cx = Context::default();
        assert!(Select { provider: Some("brew".into()), bin_env: None }
            .backend(&cx)
            .unwrap_err()
            .to_string()
            .contains("brew"));
    }
}
