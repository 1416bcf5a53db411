//! Calls a function by name through the policy: the minion's executor and `plan.run` both call
//! through here, so a plan cannot reach a function the policy forbids.

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
}

impl Dispatcher {
    /// Checks the policy for `cx.caller`, then calls `function`.
    pub async fn call(&self, function: &str, args: Args, cx: &Context) -> Result<Output, ModuleError> {
        let Some(f) = self.registry.get(function) else {
            return Err(ModuleError::UnknownFunction(function.to_owned()));
        };
        self.policy.check(function, &cx.caller, self.registry.is_action(function)).map_err(ModuleError::Denied)?;
        f.call(args, cx).await
    }
}
