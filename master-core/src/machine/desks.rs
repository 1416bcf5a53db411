//! Where the loop lends each handler its desk: the state it owns, to change, and what it
//! decides with, read-only. A desk is a struct of borrows of the master's fields, so what a
//! handler may touch is written in one place; what else it decides comes back as effects,
//! carried out at once (`effects.rs`), in order, before anything else happens.

use crate::admin::AdminDesk;
use crate::admission::AdmissionDesk;
use crate::authz::Access;
use crate::cluster::ClusterDesk;
use crate::cluster_jobs::ClusterJobsDesk;
use crate::deploy::groups::GroupDesk;
use crate::deploy::DeployDesk;
use crate::minion_messages::MinionDesk;
use crate::outputs::effects::Effects;
use crate::publishing::{JobIssuer, PublishDesk};

use super::Core;

/// The master's job issuer, borrowed field by field (a macro, so its borrows stay apart from
/// those of the desk that holds it).
macro_rules! job_issuer {
    ($master:expr) => {
        JobIssuer {
            jids: &mut $master.jids,
            identity: &$master.identity,
            config: &$master.config,
            sessions: &$master.sessions,
            cluster: &$master.cluster,
            now: $master.now,
        }
    };
}

impl Core {
    /// Lends configs and deployments their desk for `work`, then carries out what it decided.
    pub fn with_deploy_desk<R>(&mut self, work: impl FnOnce(&mut DeployDesk<'_>) -> R) -> R {
        let mut desk = DeployDesk {
            config: &self.config,
            registry: &self.registry,
            jobs: &self.jobs,
            deploy_jobs: &mut self.deploy_jobs,
            hearing: &mut self.hearing,
            notices: &mut self.notices,
            metrics: &self.metrics,
            issuer: job_issuer!(self),
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends administrative requests their desk for `work`, then carries out what it decided.
    pub fn with_admin_desk<R>(&mut self, work: impl FnOnce(&mut AdminDesk<'_>) -> R) -> R {
        let mut desk = AdminDesk {
            config: &self.config,
            registry: &mut self.registry,
            jobs: &mut self.jobs,
            rollout_queue: &mut self.rollout_queue,
            pending: &mut self.pending,
            event_gate: &mut self.event_gate,
            sessions: &self.sessions,
            cluster: &self.cluster,
            now: self.now,
            audit_head: self.audit.head(),
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends connections on their way to a session their desk for `work`, then carries out
    /// what it decided.
    pub fn with_admission_desk<R>(&mut self, work: impl FnOnce(&mut AdmissionDesk<'_>) -> R) -> R {
        let mut desk = AdmissionDesk {
            config: &self.config,
            identity: &self.identity,
            root: &self.root,
            sessions: &mut self.sessions,
            registry: &mut self.registry,
            notices: &mut self.notices,
            keys_refused: &mut self.keys_refused,
            metrics: &self.metrics,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends publishing and cancelling their desk for `work`, then carries out what it
    /// decided.
    pub fn with_publish_desk<R>(&mut self, work: impl FnOnce(&mut PublishDesk<'_>) -> R) -> R {
        let mut desk = PublishDesk {
            config: &self.config,
            registry: &self.registry,
            sessions: &self.sessions,
            cluster: &self.cluster,
            jobs: &mut self.jobs,
            hearing: &mut self.hearing,
            rollout_queue: &mut self.rollout_queue,
            metrics: &self.metrics,
            issuer: job_issuer!(self),
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends a minion's messages their desk for `work`, then carries out what it decided.
    pub fn with_minion_desk<R>(&mut self, work: impl FnOnce(&mut MinionDesk<'_>) -> R) -> R {
        let store_in_doubt = self.store_in_doubt();
        let mut desk = MinionDesk {
            config: &self.config,
            registry: &mut self.registry,
            jobs: &self.jobs,
            pending: &mut self.pending,
            event_gate: &mut self.event_gate,
            notices: &mut self.notices,
            files: &mut self.files,
            metrics: &self.metrics,
            store_in_doubt,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends the other masters' announcements their desk for `work`, then carries out what it
    /// decided.
    pub fn with_cluster_desk<R>(&mut self, work: impl FnOnce(&mut ClusterDesk<'_>) -> R) -> R {
        let mut desk = ClusterDesk {
            config: &self.config,
            cluster: &mut self.cluster,
            registry: &mut self.registry,
            pending: &mut self.pending,
            notices: &mut self.notices,
            sessions: &self.sessions,
            jobs: &self.jobs,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends the jobs followed across the masters their desk for `work`, then carries out what
    /// it decided.
    pub fn with_cluster_jobs<R>(&mut self, work: impl FnOnce(&mut ClusterJobsDesk<'_>) -> R) -> R {
        let mut desk = ClusterJobsDesk {
            config: &self.config,
            jobs: &mut self.jobs,
            hearing: &mut self.hearing,
            rollout_queue: &mut self.rollout_queue,
            watchers: &mut self.watchers,
            registry: &mut self.registry,
            cluster: &mut self.cluster,
            notices: &mut self.notices,
            sessions: &self.sessions,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }

    /// Lends the deployment groups their desk for `work`, then carries out what it decided.
    pub fn with_groups<R>(&mut self, work: impl FnOnce(&mut GroupDesk<'_>) -> R) -> R {
        let mut desk = GroupDesk {
            runs: &mut self.groups,
            access: Access::of(&self.config, &self.registry, &self.jobs),
            config: &self.config,
            now: self.now,
            out: Effects::default(),
        };
        let (done, effects) = (work(&mut desk), desk.out);
        self.apply(effects);
        done
    }
}
