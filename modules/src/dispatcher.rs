//! Calls a function by name through the policy and the job's reach: the minion's executor and
//! `plan.run` both call through here, so a plan cannot reach a function the policy forbids or
//! its caller may not call directly (Salt CVE-2013-4435's class).

use std::sync::Arc;

use crate::{Args, Context, ModuleError, Output, Policy, Registry};

/// The registry and the policy together.
#[derive(Debug)]
pub struct Dispatcher {
    /// Every function.
    pub registry: Arc<Registry>,
    /// What may run.
    pub policy: Policy,
    /// Where stored plans live (`plan.run name=...`).
    pub plans_dir: std::path::PathBuf,
    /// Where `deploy.apply` keeps markers and finds hooks.
    pub deploy: crate::DeploySettings,
    /// The paths no function touches (the minion's secrets) and where reads may go.
    pub paths: crate::PathGuard,
}

impl Dispatcher {
    /// Checks the policy and the reach for `cx.caller`, then calls `function`.
    pub async fn call(&self, function: &str, args: Args, cx: &Context) -> Result<Output, ModuleError> {
        let Some(f) = self.registry.get(function) else { return Err(self.registry.unknown(function)) };
        self.permit(function, cx)?;
        f.call(args, cx).await
    }

    /// Whether `cx.caller` may have `function` run here: this minion's policy allows it, and
    /// the master signed it into the job's reach. Also for what runs without a function call
    /// (a plan's shell guards count as `cmd.run`).
    pub fn permit(&self, function: &str, cx: &Context) -> Result<(), ModuleError> {
        self.policy
            .check(function, &cx.caller, self.registry.is_action(function))
            .map_err(|refusal| ModuleError::Denied(refusal.to_string()))?;
        match &cx.reach {
            Some(reach) if !reach.iter().any(|g| halite_protocol::glob::matches(g, function)) => {
                Err(ModuleError::Denied(format!("{function} is beyond what {} may call on this minion", cx.caller)))
            }
            _ => Ok(()),
        }
    }
}
