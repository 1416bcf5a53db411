//! The step's stages after its input: one closed list, run in order by the driver, which
//! answers what each asked of the store before the next begins.

use super::Core;

/// The step's stages after its input, in order (see [`Core::run_stage`]): the listeners hear
/// what the step decided, in this order: each slot move (the bus and the watchers, first thing
/// in `hear_moves`), each slot that ended (the metrics, its rollout, the deployment riding on
/// it), the deployments then recorded, then each event published (rollouts, then deployment
/// groups), the deployments' announcements included. Only then do rollouts and groups act, so
/// an abort event stops them in the step that published it, and a target's end starts the
/// next in the step that ended it. The listeners await nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The input's slot moves and ends heard; the deployments they end recorded.
    HearInput,
    /// The events published so far heard (rollouts' and groups' `abort_on`, groups following
    /// their deployments).
    HearEvents,
    /// The rollouts an event aborted stop (each stop stored first).
    StopAborted,
    /// The targets they skipped heard, before any rollout is decided.
    HearStops,
    /// Rollouts go on from what the step changed (and, woken by time, those whose wait ended).
    AdvanceRollouts,
    /// What the rollouts ended (skipped, offline targets), heard.
    HearRollouts,
    /// What they announced, heard: groups hear it before they act; an abort it carries stops a
    /// rollout at the next step.
    HearRolloutEvents,
    /// Deployment groups act. The deployment jobs they start are heard at the next step's end,
    /// as the deployments always heard them.
    AdvanceGroups,
    /// What the groups announced: heard now, acted upon at the next step.
    HearGroups,
}

impl Stage {
    /// Every stage, in the order the step runs them.
    pub const ALL: [Stage; 9] = [
        Stage::HearInput,
        Stage::HearEvents,
        Stage::StopAborted,
        Stage::HearStops,
        Stage::AdvanceRollouts,
        Stage::HearRollouts,
        Stage::HearRolloutEvents,
        Stage::AdvanceGroups,
        Stage::HearGroups,
    ];

    /// Whether what the stage asked of the store is answered before the next begins. Hearing
    /// events asks nothing by itself; what it makes due is acted upon by the stage after it,
    /// whose asks are answered with its own.
    pub fn answered_after(self) -> bool {
        !matches!(self, Stage::HearEvents | Stage::HearRolloutEvents | Stage::HearGroups)
    }
}

impl Core {
    /// Runs one stage of the step (see [`Stage`]); `tick`: the step was woken by time.
    pub fn run_stage(&mut self, stage: Stage, tick: bool) {
        match stage {
            Stage::HearInput | Stage::HearStops | Stage::HearRollouts => {
                self.hear_moves();
                self.with_deploy_desk(|desk| desk.record_deployment_ends());
            }
            Stage::HearEvents | Stage::HearRolloutEvents | Stage::HearGroups => self.hear_events(),
            Stage::StopAborted => self.stop_aborted_rollouts(),
            Stage::AdvanceRollouts => self.advance_rollouts(tick),
            Stage::AdvanceGroups => self.with_groups(|groups| groups.advance_groups(tick)),
        }
    }
}
