//! A client session with the master.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use halite_protocol::message::{JobDetail, JobSpec, JobUpdate, PublishRequest, Published, RequestBody, ResponseBody};
use tokio::sync::{mpsc, oneshot};

use crate::connection::Connection;
use crate::driver::{Command, Driver};
use crate::events::EventStream;
use crate::follow::Follows;
use crate::{ClientConfig, ClientError};

/// What to publish: the protocol's one job specification, under the name this SDK gave it
/// first.
pub type PublishSpec = JobSpec;

/// Progress of a published job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// A minion changed state.
    Update(JobUpdate),
    /// Every minion reached a final state.
    Done,
}

/// How long `Client::request` and `Client::publish` wait for the master's answer.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Commands queued for the driver before callers wait for room.
const COMMAND_QUEUE: usize = 256;

/// A session with a master, as a cheap cloneable handle: every clone shares one connection,
/// and any number of tasks may use them at once (answers find their caller by request id).
/// The connection lives in a task of its own, until the last handle is dropped; it is
/// re-established when lost (see `ClientConfig::reconnect` for the policy). Every call is
/// bounded by `ClientConfig::request_timeout`.
#[derive(Clone)]
pub struct Client {
    commands: mpsc::Sender<Command>,
    follows: Arc<Follows>,
    addr: Arc<Mutex<String>>,
    request_timeout: Duration,
    master_key: halite_protocol::identity::PublicIdentity,
}

impl Client {
    /// Connects and authenticates, to the first of the configured masters that answers.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        let connection = Connection::open_any(&config).await?;
        let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
        let follows = Arc::new(Follows::default());
        let addr = Arc::new(Mutex::new(connection.addr.clone()));
        let request_timeout = config.request_timeout;
        let master_key = config.master_key;
        let driver = Driver::new(config, connection, follows.clone(), addr.clone());
        tokio::spawn(driver.run(receiver));
        Ok(Client { commands, follows, addr, request_timeout, master_key })
    }

    /// The address of the master this client is connected to (it changes on failover).
    pub fn master_addr(&self) -> String {
        self.addr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The master key this client pins (a cluster's key, for a cluster): what new minions pin.
    pub fn master_key(&self) -> halite_protocol::identity::PublicIdentity {
        self.master_key
    }

    /// Sends `command` (made with the reply channel) and waits for its answer, within the
    /// request timeout.
    async fn ask<T>(
        &self,
        command: impl FnOnce(oneshot::Sender<Result<T, ClientError>>) -> Command,
    ) -> Result<T, ClientError> {
        let limit = self.request_timeout;
        let asked = async {
            let (reply, answer) = oneshot::channel();
            self.commands
                .send(command(reply))
                .await
                .map_err(|_| ClientError::Disconnected("the client has ended".into()))?;
            answer.await.map_err(|_| ClientError::Disconnected("the client has ended".into()))?
        };
        tokio::time::timeout(limit, asked).await.map_err(|_| ClientError::Timeout(limit))?
    }

    /// Sends an administrative request and waits for its answer (a listing too large for one
    /// message comes in parts, joined here in order). The typed helpers (`keys`, `minions`,
    /// `jobs`, ...) are built on it.
    pub async fn request(&self, body: RequestBody) -> Result<ResponseBody, ClientError> {
        self.ask(|reply| Command::Request { body, reply }).await
    }

    /// Publishes a job; the master answers with its jid and the minions expected to answer.
    /// Then follow it with [`Client::next_job_event`].
    pub async fn publish(&self, spec: JobSpec) -> Result<Published, ClientError> {
        // The driver sets the request id.
        let request = PublishRequest::new(0, spec);
        self.ask(|reply| Command::Publish { request, reply }).await
    }

    /// Follows job `jid` from now on (one this client did not publish, or one to follow again):
    /// its updates then come through [`Client::next_job_event`]. The job as it is; a job that
    /// has finished can still be read to its end.
    pub async fn watch(&self, jid: &str) -> Result<JobDetail, ClientError> {
        let jid = jid.to_owned();
        self.ask(|reply| Command::Watch { jid, reply }).await
    }

    /// Stops following job `jid`: what was received of it and not read is dropped.
    pub fn forget(&self, jid: &str) {
        self.follows.forget(jid);
    }

    /// The next state change of job `jid`. Jobs this client published or cancelled are
    /// followed from the start; any other job is watched from the first call. Every minion's
    /// final state is handed out once, before [`JobEvent::Done`]: updates missed on the way
    /// (a slow reader, a reconnect) are read back from the job. One task should read a job.
    pub async fn next_job_event(&self, jid: &str) -> Result<JobEvent, ClientError> {
        let follow = match self.follows.get(jid) {
            Some(follow) => follow,
            None => {
                self.watch(jid).await?;
                self.follows.get(jid).ok_or_else(|| ClientError::Protocol(format!("job {jid} was not followed")))?
            }
        };
        loop {
            let changed = follow.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let read_back = {
                let mut state = follow.lock();
                if let Some(update) = state.queue.pop_front() {
                    if update.state.is_final() {
                        state.finals_handed.insert(update.minion.clone());
                    }
                    return Ok(JobEvent::Update(update));
                }
                if let Some(error) = state.error.take() {
                    return Err(error);
                }
                if state.done && !state.missed {
                    drop(state);
                    self.follows.forget(jid);
                    return Ok(JobEvent::Done);
                }
                state.done
            };
            if read_back {
                let detail = self.job(jid).await?;
                follow.update(|state| {
                    state.missed = false;
                    state.apply(detail);
                });
                continue;
            }
            changed.await;
        }
    }

    /// Subscribes to bus events whose tags match any of these globs: a stream of them, pushed
    /// by the master, until it is dropped. Other subscriptions of this client go on.
    pub async fn subscribe(&self, patterns: Vec<String>) -> Result<EventStream, ClientError> {
        self.subscribe_from(patterns, None).await
    }

    /// [`Client::subscribe`], resuming after the event whose `id` is `after` (the last one a
    /// previous subscriber received, on this connection or an earlier one): the master first
    /// sends the events it still holds that came after it, with a `halite/bus/gap` event first
    /// if it no longer holds them all.
    pub async fn subscribe_after(&self, patterns: Vec<String>, after: &str) -> Result<EventStream, ClientError> {
        self.subscribe_from(patterns, Some(after.to_owned())).await
    }

    async fn subscribe_from(&self, patterns: Vec<String>, after: Option<String>) -> Result<EventStream, ClientError> {
        let events = self.ask(|reply| Command::Subscribe { patterns, after, reply }).await?;
        Ok(EventStream { events })
    }

    /// One job with every targeted minion's state and return (and its rollout, if any).
    pub async fn job(&self, jid: &str) -> Result<JobDetail, ClientError> {
        job_detail(self.request(RequestBody::JobShow { jid: jid.to_owned() }).await?)
    }

    /// Pauses a job's rollout: running targets finish, no new one starts. The job as it now is.
    pub async fn pause(&self, jid: &str) -> Result<JobDetail, ClientError> {
        job_detail(self.request(RequestBody::JobPause { jid: jid.to_owned() }).await?)
    }

    /// Resumes a paused rollout. The job as it now is.
    pub async fn resume(&self, jid: &str) -> Result<JobDetail, ClientError> {
        job_detail(self.request(RequestBody::JobResume { jid: jid.to_owned() }).await?)
    }

    /// Asks the master to cancel a job; the job as the cancel left it. Minions not yet started
    /// end `cancelled` at once, running ones report `cancelled` as they stop (or finish first);
    /// the job's updates come through [`Client::next_job_event`] as for a job it published. A
    /// job that has already finished, or that this principal may not see, is
    /// `ClientError::Master` with kind `not_found`.
    pub async fn cancel(&self, jid: &str) -> Result<JobDetail, ClientError> {
        let jid = jid.to_owned();
        self.ask(|reply| Command::Cancel { jid, reply }).await
    }
}

pub(crate) fn job_detail(body: ResponseBody) -> Result<JobDetail, ClientError> {
    match body {
        ResponseBody::Job(detail) => Ok(detail),
        other => Err(ClientError::Protocol(format!("expected a job, got {other:?}"))),
    }
}
