//! `service.*`: services through systemd, sysvinit (`/etc/init.d` with update-rc.d or chkconfig)
//! or OpenRC.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::{Context, ModuleError, Output, Typed};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Init {
    Systemd,
    Sysvinit,
    OpenRc,
}

/// Arguments every `service.*` function takes.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServiceArgs {
    /// Service name (a systemd unit name without .service, or an init script name).
    name: String,
    /// Init system: systemd, sysvinit or openrc (default: the `init` grain).
    #[serde(default)]
    provider: Option<String>,
}

impl ServiceArgs {
    fn init(&self, cx: &Context) -> Result<Init, ModuleError> {
        let valid = !self.name.is_empty()
            && !self.name.starts_with('-')
            && self.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@' | b':'));
        if !valid {
            return Err(ModuleError::BadArguments(format!("{:?} is not a service name", self.name)));
        }
        let provider = self
            .provider
            .clone()
            .or_else(|| cx.grains.get("init").and_then(|v| v.as_str()).map(str::to_owned))
            .unwrap_or_else(|| crate::grains::init_system().to_owned());
        match provider.as_str() {
            "systemd" => Ok(Init::Systemd),
            "sysvinit" => Ok(Init::Sysvinit),
            "openrc" => Ok(Init::OpenRc),
            other => {
                Err(ModuleError::BadArguments(format!("unknown provider {other:?} (systemd, sysvinit or openrc)")))
            }
        }
    }
}

fn script(name: &str) -> String {
    format!("/etc/init.d/{name}")
}

async fn succeeds(cx: &Context, argv: &[&str]) -> Result<bool, ModuleError> {
    Ok(cx.runner.run(&crate::Command::new(argv)).await?.retcode == 0)
}

async fn running(cx: &Context, init: Init, name: &str) -> Result<bool, ModuleError> {
    match init {
        Init::Systemd => succeeds(cx, &["systemctl", "is-active", "--quiet", name]).await,
        // A service that is not installed is not running (Salt's service.status says False),
        // as systemctl and rc-service answer for one they do not know.
        Init::Sysvinit if !Path::new(&script(name)).exists() => Ok(false),
        Init::Sysvinit => succeeds(cx, &[script(name).as_str(), "status"]).await,
        Init::OpenRc => succeeds(cx, &["rc-service", name, "status"]).await,
    }
}

async fn enabled(cx: &Context, init: Init, name: &str) -> Result<bool, ModuleError> {
    match init {
        Init::Systemd => succeeds(cx, &["systemctl", "is-enabled", "--quiet", name]).await,
        Init::Sysvinit => Ok((2..=5).any(|level| {
            std::fs::read_dir(format!("/etc/rc{level}.d")).is_ok_and(|entries| {
                entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).any(|f| {
                    f.starts_with('S') && f.trim_start_matches(|c: char| c == 'S' || c.is_ascii_digit()) == name
                })
            })
        })),
        Init::OpenRc => {
            let out = cx.runner.check(&["rc-update", "show", "default"]).await?;
            Ok(out.lines().any(|l| l.split('|').next().map(str::trim) == Some(name)))
        }
    }
}

#[cfg(feature = "services")]
fn action_argv(init: Init, name: &str, action: &str) -> Vec<String> {
    match init {
        Init::Systemd => vec!["systemctl".into(), action.into(), name.into()],
        Init::Sysvinit => vec![script(name), action.into()],
        Init::OpenRc => vec!["rc-service".into(), name.into(), action.into()],
    }
}

#[cfg(feature = "services")]
fn enable_argv(cx: &Context, init: Init, name: &str, on: bool) -> Vec<String> {
    let word = if on { "enable" } else { "disable" };
    match init {
        Init::Systemd => vec!["systemctl".into(), word.into(), name.into()],
        Init::Sysvinit if cx.runner.exists("update-rc.d") => {
            let has_links = (0..=6).any(|l| {
                std::fs::read_dir(format!("/etc/rc{l}.d")).is_ok_and(|mut e| {
                    e.any(|f| f.ok().and_then(|f| f.file_name().into_string().ok()).is_some_and(|f| f.ends_with(name)))
                })
            });
            // update-rc.d creates the links with `defaults`; enable/disable flip existing ones.
            let verb = if on && !has_links { "defaults" } else { word };
            vec!["update-rc.d".into(), name.into(), verb.into()]
        }
        Init::Sysvinit => vec!["chkconfig".into(), name.into(), if on { "on" } else { "off" }.into()],
        Init::OpenRc => vec!["rc-update".into(), if on { "add" } else { "del" }.into(), name.into(), "default".into()],
    }
}

#[cfg(feature = "services")]
async fn act(cx: &Context, name: &str, argv: Vec<String>, changed_comment: String) -> Result<Output, ModuleError> {
    if cx.test {
        return Ok(Output::change(true, format!("would run {}", argv.join(" ")), json!({ "command": argv })));
    }
    cx.runner.check(&argv).await?;
    Ok(Output::change(true, changed_comment, json!({ "command": argv, "service": name })))
}

macro_rules! service_fn {
    ($type:ident, $name:literal, $doc:literal, |$a:ident, $cx:ident, $init:ident| $body:expr) => {
        pub(crate) struct $type;

        impl Typed for $type {
            const NAME: &'static str = $name;
            const DOC: &'static str = $doc;
            const POSITIONAL: &'static [&'static str] = &["name"];
            type Args = ServiceArgs;
            async fn run(&self, $a: ServiceArgs, $cx: &Context) -> Result<Output, ModuleError> {
                let $init = $a.init($cx)?;
                $body
            }
        }
    };
}

#[cfg(feature = "services")]
service_fn!(Start, "service.start", "Starts a service unless it is running.", |a, cx, init| {
    if running(cx, init, &a.name).await? {
        return Ok(Output::change(false, format!("{} is already running", a.name), json!({})));
    }
    act(cx, &a.name, action_argv(init, &a.name, "start"), format!("{} started", a.name)).await
});

#[cfg(feature = "services")]
service_fn!(Stop, "service.stop", "Stops a service if it is running.", |a, cx, init| {
    if !running(cx, init, &a.name).await? {
        return Ok(Output::change(false, format!("{} is already stopped", a.name), json!({})));
    }
    act(cx, &a.name, action_argv(init, &a.name, "stop"), format!("{} stopped", a.name)).await
});

#[cfg(feature = "services")]
service_fn!(Restart, "service.restart", "Restarts a service (always reports a change).", |a, cx, init| {
    act(cx, &a.name, action_argv(init, &a.name, "restart"), format!("{} restarted", a.name)).await
});

#[cfg(feature = "services")]
service_fn!(Reload, "service.reload", "Asks a service to reload its configuration.", |a, cx, init| {
    act(cx, &a.name, action_argv(init, &a.name, "reload"), format!("{} reloaded", a.name)).await
});

service_fn!(Status, "service.status", "Returns {running} for a service.", |a, cx, init| {
    Ok(Output::ok(json!({ "running": running(cx, init, &a.name).await? })))
});

service_fn!(Enabled, "service.enabled", "Returns {enabled}: whether a service starts at boot.", |a, cx, init| {
    Ok(Output::ok(json!({ "enabled": enabled(cx, init, &a.name).await? })))
});

#[cfg(feature = "services")]
service_fn!(Enable, "service.enable", "Makes a service start at boot.", |a, cx, init| {
    if enabled(cx, init, &a.name).await? {
        return Ok(Output::change(false, format!("{} is already enabled", a.name), json!({})));
    }
    act(cx, &a.name, enable_argv(cx, init, &a.name, true), format!("{} enabled", a.name)).await
});

#[cfg(feature = "services")]
service_fn!(Disable, "service.disable", "Stops a service from starting at boot.", |a, cx, init| {
    if !enabled(cx, init, &a.name).await? {
        return Ok(Output::change(false, format!("{} is already disabled", a.name), json!({})));
    }
    act(cx, &a.name, enable_argv(cx, init, &a.name, false), format!("{} disabled", a.name)).await
});
