//! Where `deploy.apply` keeps its markers and finds its hooks.

use std::path::PathBuf;

use serde::Deserialize;

/// `[deploy]` in the minion config. Defaults are heat-agents' own paths, and its environment
/// variables override them the same way, so images built for heat-agents work unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeploySettings {
    /// Applied configs are recorded here as `<id>.json` (and their signals as
    /// `<id>.notify.json`); `$HEAT_CONFIG_DEPLOYED`, else `/var/lib/heat-config/deployed`.
    pub deployed_dir: PathBuf,
    /// Directories searched, in order, for a hook named after the config's group:
    /// `$HEAT_CONFIG_HOOKS`, `/usr/libexec/heat-config/hooks`, `/var/lib/heat-config/hooks`.
    pub hooks_dirs: Vec<PathBuf>,
    /// The built-in script hook's working directory (scripts are written here);
    /// `$HEAT_SCRIPT_WORKING`, else `/var/lib/heat-config/heat-config-script`.
    pub script_working_dir: PathBuf,
    /// Where scripts write their outputs (`$heat_outputs_path.<name>`);
    /// `$HEAT_SCRIPT_OUTPUTS`, else `/var/run/heat-config/heat-config-script`.
    pub script_outputs_dir: PathBuf,
    /// Seconds after which a hook is killed when the call gives no timeout; 0 for none.
    pub default_timeout_secs: u64,
}

impl Default for DeploySettings {
    fn default() -> Self {
        let env = |name: &str, fallback: &str| {
            std::env::var_os(name).filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from(fallback), PathBuf::from)
        };
        let mut hooks_dirs: Vec<PathBuf> =
            std::env::var_os("HEAT_CONFIG_HOOKS").filter(|v| !v.is_empty()).map(PathBuf::from).into_iter().collect();
        hooks_dirs.push("/usr/libexec/heat-config/hooks".into());
        hooks_dirs.push("/var/lib/heat-config/hooks".into());
        DeploySettings {
            deployed_dir: env("HEAT_CONFIG_DEPLOYED", "/var/lib/heat-config/deployed"),
            hooks_dirs,
            script_working_dir: env("HEAT_SCRIPT_WORKING", "/var/lib/heat-config/heat-config-script"),
            script_outputs_dir: env("HEAT_SCRIPT_OUTPUTS", "/var/run/heat-config/heat-config-script"),
            default_timeout_secs: 0,
        }
    }
}
