//! Software configs and deployments (OpenStack Heat's model) through the SDK.

use std::time::Duration;

use halite_protocol::message::{
    status, DeploymentGroup, DeploymentUpdate, NewDeployment, NewDeploymentGroup, NewSoftwareConfig, RequestBody,
    ResponseBody, SoftwareConfig, SoftwareDeployment, Value,
};

use crate::admin::unexpected;
use crate::{Client, ClientError};

/// `wait` bounded by `timeout` (`None`: for ever); past it, a `timeout` error saying that
/// `what` is still in progress.
async fn within<T>(
    timeout: Option<Duration>,
    wait: impl std::future::Future<Output = Result<T, ClientError>>,
    what: impl FnOnce() -> String,
) -> Result<T, ClientError> {
    let Some(limit) = timeout else { return wait.await };
    tokio::time::timeout(limit, wait).await.map_err(|_| ClientError::Master {
        kind: halite_protocol::message::ErrorKind::Timeout,
        message: format!("{} still IN_PROGRESS after {} s", what(), limit.as_secs()),
    })?
}

/// The events about one deployment or group, for a wait. Every wait of a client shares one
/// subscription, to all of that kind's events (`halite/deployment/*`), however many waits there
/// are (the master allows 64 patterns per subscription), and wakes only for events about its own
/// object or a gap in the stream; a principal not allowed that pattern gets its object's alone.
struct ObjectEvents {
    events: crate::EventStream,
    /// `halite/deployment/<id>/`: the tags about the object.
    prefix: String,
    /// Whether `events` is the shared subscription (or already the object's own).
    shared: bool,
}

impl ObjectEvents {
    async fn open(client: &Client, kind: &str, id: &str) -> Result<ObjectEvents, ClientError> {
        let events = client.subscribe(vec![format!("{kind}/*")]).await?;
        Ok(ObjectEvents { events, prefix: format!("{kind}/{id}/"), shared: true })
    }

    /// Waits for an event about the object (or a notice that events were missed).
    async fn next_change(&mut self, client: &Client) -> Result<(), ClientError> {
        loop {
            match self.events.next_event().await {
                Ok(event) if event.tag.starts_with(&self.prefix) || event.tag.starts_with("halite/bus/") => {
                    return Ok(())
                }
                Ok(_) => {}
                Err(ClientError::Master { kind: halite_protocol::message::ErrorKind::Forbidden, .. })
                    if self.shared =>
                {
                    self.shared = false;
                    self.events = client.subscribe(vec![format!("{}*", self.prefix)]).await?;
                    // Subscribed anew: look again, in case it changed meanwhile.
                    return Ok(());
                }
                Err(error) => return Err(error),
            }
        }
    }
}

impl Client {
    /// Stores an immutable config.
    pub async fn create_config(&self, config: NewSoftwareConfig) -> Result<SoftwareConfig, ClientError> {
        match self.request(RequestBody::ConfigCreate(config)).await? {
            ResponseBody::Config(config) => Ok(config),
            other => Err(unexpected("a config", &other)),
        }
    }

    /// One config.
    pub async fn show_config(&self, id: &str) -> Result<SoftwareConfig, ClientError> {
        match self.request(RequestBody::ConfigShow { id: id.into() }).await? {
            ResponseBody::Config(config) => Ok(config),
            other => Err(unexpected("a config", &other)),
        }
    }

    /// The newest configs.
    pub async fn list_configs(&self, limit: u32) -> Result<Vec<SoftwareConfig>, ClientError> {
        match self.request(RequestBody::ConfigList { limit }).await? {
            ResponseBody::Configs(configs) => Ok(configs),
            other => Err(unexpected("configs", &other)),
        }
    }

    /// Deletes a config.
    pub async fn delete_config(&self, id: &str) -> Result<(), ClientError> {
        self.request(RequestBody::ConfigDelete { id: id.into() }).await.map(drop)
    }

    /// Deploys a config to a server; the master pushes it at once, or when the minion connects.
    pub async fn create_deployment(&self, spec: NewDeployment) -> Result<SoftwareDeployment, ClientError> {
        match self.request(RequestBody::DeploymentCreate(spec)).await? {
            ResponseBody::Deployment(deployment) => Ok(deployment),
            other => Err(unexpected("a deployment", &other)),
        }
    }

    /// Changes a deployment's config, inputs or action; a new derived config is pushed.
    pub async fn update_deployment(
        &self,
        id: &str,
        update: DeploymentUpdate,
    ) -> Result<SoftwareDeployment, ClientError> {
        match self.request(RequestBody::DeploymentUpdate { id: id.into(), update }).await? {
            ResponseBody::Deployment(deployment) => Ok(deployment),
            other => Err(unexpected("a deployment", &other)),
        }
    }

    /// One deployment.
    pub async fn show_deployment(&self, id: &str) -> Result<SoftwareDeployment, ClientError> {
        match self.request(RequestBody::DeploymentShow { id: id.into() }).await? {
            ResponseBody::Deployment(deployment) => Ok(deployment),
            other => Err(unexpected("a deployment", &other)),
        }
    }

    /// Deployments, all or one server's.
    pub async fn list_deployments(&self, server_id: Option<&str>) -> Result<Vec<SoftwareDeployment>, ClientError> {
        match self.request(RequestBody::DeploymentList { server_id: server_id.map(str::to_owned) }).await? {
            ResponseBody::Deployments(deployments) => Ok(deployments),
            other => Err(unexpected("deployments", &other)),
        }
    }

    /// Deletes a deployment.
    pub async fn delete_deployment(&self, id: &str) -> Result<(), ClientError> {
        self.request(RequestBody::DeploymentDelete { id: id.into() }).await.map(drop)
    }

    /// Every derived config of a server (Heat's per-server metadata).
    pub async fn server_configs(&self, server_id: &str) -> Result<Vec<Value>, ClientError> {
        match self.request(RequestBody::ServerConfigs { server_id: server_id.into() }).await? {
            ResponseBody::Items(items) => Ok(items),
            other => Err(unexpected("items", &other)),
        }
    }

    /// Waits until a deployment is COMPLETE or FAILED, without polling: it subscribes to the
    /// deployment's events, then reads its state once, then waits for the event. `None` as
    /// timeout waits for ever. Any number of waits share one client: they share one
    /// subscription (`halite/deployment/*`, or each its deployment's own where the principal's
    /// events ACL is narrower).
    pub async fn wait_for_deployment(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<SoftwareDeployment, ClientError> {
        let mut events = ObjectEvents::open(self, "halite/deployment", id).await?;
        let wait = async {
            loop {
                let deployment = self.show_deployment(id).await?;
                if deployment.status != status::IN_PROGRESS {
                    return Ok(deployment);
                }
                // Any event for it (a new status, or a relay report) means: look again.
                events.next_change(self).await?;
            }
        };
        within(timeout, wait, || format!("deployment {id}")).await
    }

    /// Deploys a config to several servers, rolled out as `spec.rollout` says (Heat's
    /// `SoftwareDeploymentGroup`); the group as it is once its first deployments started.
    pub async fn create_deployment_group(&self, spec: NewDeploymentGroup) -> Result<DeploymentGroup, ClientError> {
        match self.request(RequestBody::DeploymentGroupCreate(spec)).await? {
            ResponseBody::DeploymentGroup(group) => Ok(group),
            other => Err(unexpected("a deployment group", &other)),
        }
    }

    /// Changes a group in place, rolled out (Heat's group update): the servers it keeps run
    /// the action (`UPDATE` by default) with the new config and inputs, new servers `CREATE`;
    /// servers left out leave the group (delete their deployments yourself, after their
    /// `DELETE`, as Heat does). The group as it is once the update started.
    pub async fn update_deployment_group(
        &self,
        id: &str,
        update: halite_protocol::message::DeploymentGroupUpdate,
    ) -> Result<DeploymentGroup, ClientError> {
        match self.request(RequestBody::DeploymentGroupUpdate { id: id.into(), update }).await? {
            ResponseBody::DeploymentGroup(group) => Ok(group),
            other => Err(unexpected("a deployment group", &other)),
        }
    }

    /// One deployment group.
    pub async fn show_deployment_group(&self, id: &str) -> Result<DeploymentGroup, ClientError> {
        match self.request(RequestBody::DeploymentGroupShow { id: id.into() }).await? {
            ResponseBody::DeploymentGroup(group) => Ok(group),
            other => Err(unexpected("a deployment group", &other)),
        }
    }

    /// Waits until a group is COMPLETE or FAILED, without polling (as
    /// [`Client::wait_for_deployment`], on `halite/deployment_group/*`).
    pub async fn wait_for_deployment_group(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<DeploymentGroup, ClientError> {
        let mut events = ObjectEvents::open(self, "halite/deployment_group", id).await?;
        let wait = async {
            loop {
                let group = self.show_deployment_group(id).await?;
                if group.status != status::IN_PROGRESS {
                    return Ok(group);
                }
                events.next_change(self).await?;
            }
        };
        within(timeout, wait, || format!("deployment group {id}")).await
    }
}
