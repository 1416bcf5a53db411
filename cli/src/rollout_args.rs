//! The rollout options `halite run` and `halite deployment group` share.

use clap::Args;
use halite_protocol::message::{Amount, Rollout};

use crate::duration;

#[derive(Args, Default)]
#[command(next_help_heading = "Rollout")]
pub(crate) struct RolloutArgs {
    /// Roll out in a sliding window: at most N (or N% of the targets) run at once.
    #[arg(short = 'b', long, value_parser = batch_size)]
    pub(crate) batch: Option<Amount>,
    /// After a target finishes, wait this long before starting the next.
    #[arg(long, value_parser = duration::parse)]
    pub(crate) batch_wait: Option<std::time::Duration>,
    /// Once more than K (or K%) targets have failed, start no more; the rest end skipped.
    /// `--max-errors 0` stops at the first failure.
    #[arg(long, value_parser = Amount::parse)]
    pub(crate) max_errors: Option<Amount>,
    /// The first N targets run alone; the rest start only if all of them succeeded.
    #[arg(long, default_value_t = 0)]
    pub(crate) canary: u32,
    /// Stop starting targets when an event whose tag matches this glob is published
    /// (repeatable), e.g. 'minion/*/alarm/*'.
    #[arg(long)]
    pub(crate) abort_on: Vec<String>,
}

/// A window size: a count of at least one, or a percentage (a usage error otherwise, as any
/// other malformed option).
fn batch_size(text: &str) -> Result<Amount, String> {
    match Amount::parse(text).map_err(|e| e.to_string())? {
        Amount::Count(0) => Err(format!("{text:?}: a batch of 0 starts nothing; give 1 or more, or a percentage")),
        amount => Ok(amount),
    }
}

impl RolloutArgs {
    /// The rollout asked for, if any of its options was given.
    pub(crate) fn rollout(&self) -> Option<Rollout> {
        let asked = self.batch.is_some()
            || self.batch_wait.is_some()
            || self.max_errors.is_some()
            || self.canary > 0
            || !self.abort_on.is_empty();
        asked.then(|| Rollout {
            batch: self.batch,
            batch_wait_ms: self.batch_wait.map_or(0, |w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
            max_errors: self.max_errors,
            canary: self.canary,
            abort_on: self.abort_on.clone(),
        })
    }
}
