//! `user.*` and `group.*`: local accounts through the shadow tools (useradd, usermod, userdel,
//! groupadd, groupmod, groupdel, gpasswd), reading the account databases from /etc.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::{Context, ModuleError, Output, Typed};

#[derive(Debug, Clone, PartialEq, Eq)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
    home: String,
    shell: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupEntry {
    name: String,
    gid: u32,
    members: BTreeSet<String>,
}

fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f.len() >= 7).then(|| PasswdEntry {
                name: f[0].to_owned(),
                uid: f[2].parse().unwrap_or(u32::MAX),
                gid: f[3].parse().unwrap_or(u32::MAX),
                home: f[5].to_owned(),
                shell: f[6].to_owned(),
            })
        })
        .collect()
}

fn parse_group(text: &str) -> Vec<GroupEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f.len() >= 4).then(|| GroupEntry {
                name: f[0].to_owned(),
                gid: f[2].parse().unwrap_or(u32::MAX),
                members: f[3].split(',').filter(|m| !m.is_empty()).map(str::to_owned).collect(),
            })
        })
        .collect()
}

fn read_db(path: &str) -> Result<String, ModuleError> {
    std::fs::read_to_string(path).map_err(|e| ModuleError::Failed(format!("{path}: {e}")))
}

fn user(name: &str) -> Result<Option<PasswdEntry>, ModuleError> {
    Ok(parse_passwd(&read_db("/etc/passwd")?).into_iter().find(|u| u.name == name))
}

fn groups() -> Result<Vec<GroupEntry>, ModuleError> {
    Ok(parse_group(&read_db("/etc/group")?))
}

fn check_name(name: &str) -> Result<(), ModuleError> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ModuleError::BadArguments(format!("{name:?} is not a valid account name")))
    }
}

/// Runs the tools (unless testing) and reports.
async fn apply(
    cx: &Context,
    name: &str,
    commands: Vec<Vec<String>>,
    changes: Vec<String>,
) -> Result<Output, ModuleError> {
    if changes.is_empty() {
        return Ok(Output::change(false, format!("{name} is already in the correct state"), json!({})));
    }
    let details = json!({ "changes": changes, "commands": commands });
    if cx.test {
        return Ok(Output::change(true, format!("{name} would change: {}", changes.join(", ")), details));
    }
    for argv in &commands {
        cx.runner.check(argv).await?;
    }
    Ok(Output::change(true, format!("{name}: {}", changes.join(", ")), details))
}

pub(crate) struct UserPresent;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserPresentArgs {
    /// Login name.
    name: String,
    /// User id.
    #[serde(default)]
    uid: Option<u32>,
    /// Primary group (name or gid); by default a group named after the user.
    #[serde(default)]
    gid: Option<String>,
    /// The complete list of supplementary groups (omit to leave membership alone).
    #[serde(default)]
    groups: Option<Vec<String>>,
    /// Home directory.
    #[serde(default)]
    home: Option<String>,
    /// Login shell.
    #[serde(default)]
    shell: Option<String>,
    /// Create a system account (new accounts only).
    #[serde(default)]
    system: bool,
    /// Create the home directory for new accounts (default true; false for system accounts).
    #[serde(default)]
    createhome: Option<bool>,
}

impl Typed for UserPresent {
    const NAME: &'static str = "user.present";
    const DOC: &'static str = "Makes sure a local user exists with these properties (useradd or usermod).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = UserPresentArgs;
    async fn run(&self, a: UserPresentArgs, cx: &Context) -> Result<Output, ModuleError> {
        check_name(&a.name)?;
        let all_groups = groups()?;
        let gid_number = match &a.gid {
            None => None,
            Some(g) => Some(match g.parse::<u32>() {
                Ok(n) => n,
                Err(_) => all_groups
                    .iter()
                    .find(|e| &e.name == g)
                    .map(|e| e.gid)
                    .ok_or_else(|| ModuleError::Failed(format!("primary group {g:?} does not exist")))?,
            }),
        };
        if let Some(wanted) = &a.groups {
            if let Some(missing) = wanted.iter().find(|g| !all_groups.iter().any(|e| &&e.name == g)) {
                return Err(ModuleError::Failed(format!("group {missing:?} does not exist")));
            }
        }
        let mut changes = Vec::new();
        let mut argv: Vec<String>;
        match user(&a.name)? {
            None => {
                argv = vec!["useradd".into()];
                if let Some(uid) = a.uid {
                    argv.extend(["-u".into(), uid.to_string()]);
                }
                if let Some(gid) = &a.gid {
                    argv.extend(["-g".into(), gid.clone()]);
                } else {
                    argv.push("-U".into());
                }
                if let Some(groups) = &a.groups {
                    if !groups.is_empty() {
                        argv.extend(["-G".into(), groups.join(",")]);
                    }
                }
                if let Some(home) = &a.home {
                    argv.extend(["-d".into(), home.clone()]);
                }
                if let Some(shell) = &a.shell {
                    argv.extend(["-s".into(), shell.clone()]);
                }
                if a.system {
                    argv.push("-r".into());
                }
                argv.push(if a.createhome.unwrap_or(!a.system) { "-m".into() } else { "-M".into() });
                argv.push(a.name.clone());
                changes.push("created".into());
            }
            Some(current) => {
                argv = vec!["usermod".into()];
                if let Some(uid) = a.uid.filter(|u| *u != current.uid) {
                    argv.extend(["-u".into(), uid.to_string()]);
                    changes.push(format!("uid {} → {uid}", current.uid));
                }
                if let Some(gid) = gid_number.filter(|g| *g != current.gid) {
                    argv.extend(["-g".into(), gid.to_string()]);
                    changes.push(format!("gid {} → {gid}", current.gid));
                }
                if let Some(home) = a.home.as_ref().filter(|h| **h != current.home) {
                    argv.extend(["-d".into(), home.clone()]);
                    changes.push(format!("home {} → {home}", current.home));
                }
                if let Some(shell) = a.shell.as_ref().filter(|s| **s != current.shell) {
                    argv.extend(["-s".into(), shell.clone()]);
                    changes.push(format!("shell {} → {shell}", current.shell));
                }
                if let Some(wanted) = &a.groups {
                    let wanted: BTreeSet<&str> = wanted.iter().map(String::as_str).collect();
                    let have: BTreeSet<&str> =
                        all_groups.iter().filter(|g| g.members.contains(&a.name)).map(|g| g.name.as_str()).collect();
                    if wanted != have {
                        argv.extend(["-G".into(), wanted.iter().copied().collect::<Vec<_>>().join(",")]);
                        changes.push(format!("groups {:?} → {:?}", have, wanted));
                    }
                }
                argv.push(a.name.clone());
            }
        }
        let commands = if changes.is_empty() { vec![] } else { vec![argv] };
        apply(cx, &a.name, commands, changes).await
    }
}

pub(crate) struct UserAbsent;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserAbsentArgs {
    /// Login name.
    name: String,
    /// Also remove the home directory and mail spool.
    #[serde(default)]
    purge: bool,
}

impl Typed for UserAbsent {
    const NAME: &'static str = "user.absent";
    const DOC: &'static str = "Makes sure a local user does not exist (userdel).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = UserAbsentArgs;
    async fn run(&self, a: UserAbsentArgs, cx: &Context) -> Result<Output, ModuleError> {
        check_name(&a.name)?;
        if user(&a.name)?.is_none() {
            return apply(cx, &a.name, vec![], vec![]).await;
        }
        let mut argv = vec!["userdel".to_owned()];
        if a.purge {
            argv.push("-r".into());
        }
        argv.push(a.name.clone());
        apply(cx, &a.name, vec![argv], vec!["removed".into()]).await
    }
}

pub(crate) struct GroupPresent;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupPresentArgs {
    /// Group name.
    name: String,
    /// Group id.
    #[serde(default)]
    gid: Option<u32>,
    /// Create a system group (new groups only).
    #[serde(default)]
    system: bool,
    /// The complete list of members (omit to leave membership alone).
    #[serde(default)]
    members: Option<Vec<String>>,
}

impl Typed for GroupPresent {
    const NAME: &'static str = "group.present";
    const DOC: &'static str =
        "Makes sure a local group exists with this gid and members (groupadd, groupmod, gpasswd).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = GroupPresentArgs;
    async fn run(&self, a: GroupPresentArgs, cx: &Context) -> Result<Output, ModuleError> {
        check_name(&a.name)?;
        let current = groups()?.into_iter().find(|g| g.name == a.name);
        let mut commands = Vec::new();
        let mut changes = Vec::new();
        let have_members = match &current {
            None => {
                let mut argv = vec!["groupadd".to_owned()];
                if let Some(gid) = a.gid {
                    argv.extend(["-g".into(), gid.to_string()]);
                }
                if a.system {
                    argv.push("-r".into());
                }
                argv.push(a.name.clone());
                commands.push(argv);
                changes.push("created".to_owned());
                BTreeSet::new()
            }
            Some(g) => {
                if let Some(gid) = a.gid.filter(|gid| *gid != g.gid) {
                    commands.push(vec!["groupmod".into(), "-g".into(), gid.to_string(), a.name.clone()]);
                    changes.push(format!("gid {} → {gid}", g.gid));
                }
                g.members.clone()
            }
        };
        if let Some(members) = &a.members {
            let wanted: BTreeSet<String> = members.iter().cloned().collect();
            if wanted != have_members {
                let list = wanted.iter().cloned().collect::<Vec<_>>().join(",");
                commands.push(vec!["gpasswd".into(), "-M".into(), list, a.name.clone()]);
                changes.push(format!("members {:?} → {:?}", have_members, wanted));
            }
        }
        apply(cx, &a.name, commands, changes).await
    }
}

pub(crate) struct GroupAbsent;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupAbsentArgs {
    /// Group name.
    name: String,
}

impl Typed for GroupAbsent {
    const NAME: &'static str = "group.absent";
    const DOC: &'static str = "Makes sure a local group does not exist (groupdel).";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = GroupAbsentArgs;
    async fn run(&self, a: GroupAbsentArgs, cx: &Context) -> Result<Output, ModuleError> {
        check_name(&a.name)?;
        if !groups()?.iter().any(|g| g.name == a.name) {
            return apply(cx, &a.name, vec![], vec![]).await;
        }
        apply(cx, &a.name, vec![vec!["groupdel".into(), a.name.clone()]], vec!["removed".into()]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_databases_parse() {
        let users = parse_passwd("root:x:0:0:root:/root:/bin/bash\nbroken\nweb:x:1001:1001::/home/web:/bin/sh\n");
        assert_eq!(users.len(), 2);
        assert_eq!(
            users[1],
            PasswdEntry { name: "web".into(), uid: 1001, gid: 1001, home: "/home/web".into(), shell: "/bin/sh".into() }
        );
        let groups = parse_group("adm:x:4:syslog,web\nweb:x:1001:\n");
        assert_eq!(groups[0].members, BTreeSet::from(["syslog".to_owned(), "web".to_owned()]));
        assert!(groups[1].members.is_empty());
        assert!(check_name("-rf").is_err());
        assert!(check_name("web-1").is_ok());
    }
}
