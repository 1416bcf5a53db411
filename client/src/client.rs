//! A client session with the master.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use halite_protocol::message::{
    self, Cancel, ClientHello, Event, JobDetail, JobUpdate, Message, PublishRequest, Published, Request, RequestBody,
    ResponseBody, Subscribe, Target, Value,
};
use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Role, Session, SessionConfig};
use halite_transport::{Dealer, DealerConfig, DealerEvent};

use crate::{ClientConfig, ClientError};

/// What to publish.
#[derive(Debug, Clone)]
pub struct PublishSpec {
    /// Which minions.
    pub target: Target,
    /// Function.
    pub function: String,
    /// Positional arguments.
    pub args: Vec<Value>,
    /// Keyword arguments.
    pub kwargs: BTreeMap<String, Value>,
    /// Per-minion timeout, milliseconds.
    pub timeout_ms: u64,
    /// How long offline minions are waited for, milliseconds (0: they are reported offline).
    pub ttl_ms: u64,
    /// How the job reaches its targets over time (batches, error budget, canaries, abort
    /// events); `None`: every target at once.
    pub rollout: Option<halite_protocol::message::Rollout>,
}

impl PublishSpec {
    /// A job with no arguments, a 30 s timeout and no TTL.
    pub fn new(target: Target, function: &str) -> Self {
        PublishSpec {
            target,
            function: function.to_owned(),
            args: Vec::new(),
            kwargs: BTreeMap::new(),
            timeout_ms: halite_protocol::message::DEFAULT_JOB_TIMEOUT_MS,
            ttl_ms: 0,
            rollout: None,
        }
    }
}

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

/// An authenticated session with the master.
pub struct Client {
    dealer: Dealer,
    session: Session,
    addr: String,
    next_request: u64,
    /// Messages received while waiting for something else.
    inbox: VecDeque<Message>,
    /// Per job being followed, the minions whose final state was handed out.
    finals: HashMap<String, HashSet<String>>,
    /// How long a request waits for its answer.
    request_timeout: Duration,
}

impl Client {
    /// Connects and authenticates, to the first of the configured masters that answers.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        let mut failures = Vec::new();
        for addr in &config.masters {
            let timeout = config.connect_timeout;
            let attempt = tokio::time::timeout(timeout, Self::handshake(config.clone(), addr.clone())).await;
            match attempt {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(ClientError::Connect { reason, .. })) => failures.push(format!("{addr}: {reason}")),
                Ok(Err(other)) => return Err(other),
                Err(_) => failures.push(format!("{addr}: no answer within {} s", timeout.as_secs())),
            }
        }
        let addr = config.masters.join(", ");
        let reason = if failures.is_empty() { "no master address given".to_owned() } else { failures.join("; ") };
        Err(ClientError::Connect { addr, reason })
    }

    async fn handshake(config: ClientConfig, addr: String) -> Result<Client, ClientError> {
        let fail = |reason: String| ClientError::Connect { addr: addr.clone(), reason };
        let identity = LocalIdentity::new(config.key).map_err(|e| fail(e.to_string()))?;
        // A master that is down refuses at once: say so at once, instead of letting the
        // socket retry quietly until the connect timeout.
        drop(tokio::net::TcpStream::connect(&addr).await.map_err(|e| fail(e.to_string()))?);
        let mut dealer = Dealer::connect(addr.clone(), DealerConfig::default());
        loop {
            match dealer.recv().await {
                Some(DealerEvent::Connected(_)) => break,
                Some(DealerEvent::Disconnected(reason)) => return Err(fail(reason.to_string())),
                Some(DealerEvent::Message(_)) => {}
                None => return Err(fail("connection closed".into())),
            }
        }
        let claim = Claim::new(&config.principal, None).map_err(|e| fail(e.to_string()))?;
        let (initiator, msg1) = Initiator::start(
            &identity,
            Role::Client,
            claim,
            MasterPin::Key(config.master_key),
            SessionConfig::default(),
        )
        .map_err(|e| fail(e.to_string()))?;
        dealer.send_on(1, vec![msg1]).await.map_err(|e| fail(e.to_string()))?;
        let msg2 = next_raw(&mut dealer).await.map_err(|e| fail(e.to_string()))?;
        let (awaiting, msg3) =
            initiator.read_response(msg2.first().map_or(&[][..], Vec::as_slice)).map_err(|e| fail(e.to_string()))?;
        dealer.send_on(1, vec![msg3]).await.map_err(|e| fail(e.to_string()))?;
        let verdict = next_raw(&mut dealer).await.map_err(|e| fail(e.to_string()))?;
        let session = awaiting.read_verdict(&verdict, Instant::now()).map_err(|e| fail(e.to_string()))?;
        dealer.mark_authenticated().await.map_err(|e| fail(e.to_string()))?;
        let mut client = Client {
            dealer,
            session,
            addr,
            next_request: 1,
            inbox: VecDeque::new(),
            finals: HashMap::new(),
            request_timeout: config.request_timeout,
        };
        let hello = ClientHello { principal: config.principal, version: env!("CARGO_PKG_VERSION").into() };
        client.send(&Message::ClientHello(hello)).await?;
        match client.recv().await? {
            Message::Welcome(_) => Ok(client),
            other => Err(ClientError::Protocol(format!("expected welcome, got {other:?}"))),
        }
    }

    /// The master's address.
    pub fn master_addr(&self) -> &str {
        &self.addr
    }

    async fn send(&mut self, msg: &Message) -> Result<(), ClientError> {
        let parts = self
            .session
            .seal(&message::encode(msg), Instant::now())
            .map_err(|e| ClientError::Disconnected(e.to_string()))?;
        self.dealer.send_on(1, parts).await.map_err(|e| ClientError::Disconnected(e.to_string()))
    }

    /// The next message from the master, buffered ones first.
    async fn recv(&mut self) -> Result<Message, ClientError> {
        loop {
            if let Some(msg) = self.inbox.pop_front() {
                return Ok(msg);
            }
            self.read_into_inbox().await?;
        }
    }

    /// Reads, opens and decodes one message from the connection into the inbox; batched job
    /// updates are unpacked in order.
    async fn read_into_inbox(&mut self) -> Result<(), ClientError> {
        let parts = next_raw(&mut self.dealer).await?;
        let bytes = self.session.open(&parts, Instant::now()).map_err(|e| ClientError::Protocol(e.to_string()))?;
        match message::decode(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))? {
            Message::JobUpdates(batch) => self.inbox.extend(batch.updates.into_iter().map(Message::JobUpdate)),
            msg => self.inbox.push_back(msg),
        }
        Ok(())
    }

    /// [`Client::recv_matching`] for the answer to a request: bounded by the configured
    /// `request_timeout`.
    async fn answer<T>(&mut self, pick: impl FnMut(&Message) -> Option<T>) -> Result<T, ClientError> {
        let limit = self.request_timeout;
        tokio::time::timeout(limit, self.recv_matching(pick)).await.map_err(|_| ClientError::Timeout(limit))?
    }

    /// Receives until `pick` accepts a message; others are kept, in order, for later calls.
    async fn recv_matching<T>(&mut self, mut pick: impl FnMut(&Message) -> Option<T>) -> Result<T, ClientError> {
        let mut scanned = 0;
        loop {
            if let Some(offset) = self.inbox.iter().skip(scanned).position(|m| pick(m).is_some()) {
                if let Some(found) = self.inbox.remove(scanned + offset).and_then(|msg| pick(&msg)) {
                    return Ok(found);
                }
            }
            scanned = self.inbox.len();
            self.read_into_inbox().await?;
        }
    }

    /// Sends an administrative request and waits for its answer.
    pub async fn request(&mut self, body: RequestBody) -> Result<ResponseBody, ClientError> {
        let request_id = self.next_request;
        self.next_request += 1;
        self.send(&Message::Request(Request { request_id, body })).await?;
        let id = request_id.to_string();
        // A listing too large for one message comes in parts, joined here in order.
        let mut answer: Option<ResponseBody> = None;
        loop {
            let (part, more) = self
                .answer(|msg| match msg {
                    Message::Response(r) if r.request_id == request_id => Some(Ok((r.body.clone(), r.more))),
                    Message::Error(e) if e.request.is_none() || e.request.as_deref() == Some(&id) => {
                        Some(Err(ClientError::Master { kind: e.kind, message: e.message.clone() }))
                    }
                    _ => None,
                })
                .await??;
            match &mut answer {
                None => answer = Some(part),
                Some(so_far) => so_far
                    .append(part)
                    .map_err(|_| ClientError::Protocol("an answer's parts are of different kinds".into()))?,
            }
            if !more {
                return answer.ok_or_else(|| ClientError::Protocol("empty answer".into()));
            }
        }
    }

    /// Publishes a job; the master answers with its jid and the minions expected to answer.
    /// Then follow it with [`Client::next_job_event`].
    pub async fn publish(&mut self, spec: PublishSpec) -> Result<Published, ClientError> {
        let request_id = self.next_request;
        self.next_request += 1;
        let request = PublishRequest {
            request_id,
            target: spec.target,
            function: spec.function,
            args: spec.args,
            kwargs: spec.kwargs,
            timeout_ms: spec.timeout_ms,
            ttl_ms: spec.ttl_ms,
            rollout: spec.rollout,
            on_behalf_of: None,
        };
        self.send(&Message::Publish(request)).await?;
        let id = request_id.to_string();
        self.answer(|msg| match msg {
            Message::Published(p) if p.request_id == request_id => Some(Ok(p.clone())),
            Message::Error(e) if e.request.is_none() || e.request.as_deref() == Some(&id) => {
                Some(Err(ClientError::Master { kind: e.kind, message: e.message.clone() }))
            }
            _ => None,
        })
        .await?
    }

    /// The next state change of job `jid` (published by this client or cancelled by it).
    /// Every minion's final state is handed out before [`JobEvent::Done`]: when the master
    /// reports updates this client was too slow to receive, they are read back from the job.
    pub async fn next_job_event(&mut self, jid: &str) -> Result<JobEvent, ClientError> {
        let event = self
            .recv_matching(|msg| match msg {
                Message::JobUpdate(u) if u.jid == jid => Some(Ok(Ok(u.clone()))),
                Message::JobDone(d) if d.jid == jid => Some(Ok(Err(d.missed))),
                Message::Error(e) if e.request.as_deref() == Some(jid) => {
                    Some(Err(ClientError::Master { kind: e.kind, message: e.message.clone() }))
                }
                _ => None,
            })
            .await??;
        match event {
            Ok(update) => {
                if update.state.is_final() {
                    self.finals.entry(jid.to_owned()).or_default().insert(update.minion.clone());
                }
                Ok(JobEvent::Update(update))
            }
            Err(0) => {
                self.finals.remove(jid);
                Ok(JobEvent::Done)
            }
            Err(_missed) => {
                let ResponseBody::Job(detail) = self.request(RequestBody::JobShow { jid: jid.to_owned() }).await?
                else {
                    return Err(ClientError::Protocol("unexpected answer to job_show".into()));
                };
                let seen = self.finals.remove(jid).unwrap_or_default();
                let mut replay: Vec<Message> = detail
                    .minions
                    .into_iter()
                    .filter(|m| m.state.is_final() && !seen.contains(&m.minion))
                    .map(|m| {
                        Message::JobUpdate(JobUpdate {
                            jid: jid.to_owned(),
                            minion: m.minion,
                            state: m.state,
                            ret: m.ret,
                        })
                    })
                    .collect();
                replay.push(Message::JobDone(message::JobDone { jid: jid.to_owned(), missed: 0 }));
                for msg in replay.into_iter().rev() {
                    self.inbox.push_front(msg);
                }
                Box::pin(self.next_job_event(jid)).await
            }
        }
    }

    /// Subscribes to bus events whose tags match any of these globs (replacing earlier
    /// patterns). Events then arrive through [`Client::next_event`], pushed by the master.
    pub async fn subscribe(&mut self, patterns: Vec<String>) -> Result<(), ClientError> {
        self.send(&Message::Subscribe(Subscribe { patterns, after: None })).await
    }

    /// [`Client::subscribe`], resuming after the event whose `id` is `after` (the last one
    /// received before a reconnect): the master first sends the events it still holds that came
    /// after it, with a `halite/bus/gap` event first if it no longer holds them all.
    pub async fn subscribe_after(&mut self, patterns: Vec<String>, after: &str) -> Result<(), ClientError> {
        self.send(&Message::Subscribe(Subscribe { patterns, after: Some(after.to_owned()) })).await
    }

    /// The next bus event, or the master's refusal of the subscription.
    pub async fn next_event(&mut self) -> Result<Event, ClientError> {
        self.recv_matching(|msg| match msg {
            Message::Event(e) => Some(Ok(e.clone())),
            Message::Error(e) if e.request.as_deref() == Some("subscribe") => {
                Some(Err(ClientError::Master { kind: e.kind, message: e.message.clone() }))
            }
            _ => None,
        })
        .await?
    }

    /// One job with every targeted minion's state and return (and its rollout, if any).
    pub async fn job(&mut self, jid: &str) -> Result<JobDetail, ClientError> {
        match self.request(RequestBody::JobShow { jid: jid.to_owned() }).await? {
            ResponseBody::Job(detail) => Ok(detail),
            other => Err(ClientError::Protocol(format!("expected a job, got {other:?}"))),
        }
    }

    /// Pauses a job's rollout: running targets finish, no new one starts. The job as it now is.
    pub async fn pause(&mut self, jid: &str) -> Result<JobDetail, ClientError> {
        match self.request(RequestBody::JobPause { jid: jid.to_owned() }).await? {
            ResponseBody::Job(detail) => Ok(detail),
            other => Err(ClientError::Protocol(format!("expected a job, got {other:?}"))),
        }
    }

    /// Resumes a paused rollout. The job as it now is.
    pub async fn resume(&mut self, jid: &str) -> Result<JobDetail, ClientError> {
        match self.request(RequestBody::JobResume { jid: jid.to_owned() }).await? {
            ResponseBody::Job(detail) => Ok(detail),
            other => Err(ClientError::Protocol(format!("expected a job, got {other:?}"))),
        }
    }

    /// Asks the master to cancel a job; the job as the cancel left it. Minions not yet started
    /// end `cancelled` at once, running ones report `cancelled` as they stop (or finish first);
    /// the job's updates stream to this client as for a job it published. A job that has
    /// already finished, or that this principal may not see, is `ClientError::Master` with
    /// kind `not_found`.
    pub async fn cancel(&mut self, jid: &str) -> Result<JobDetail, ClientError> {
        self.send(&Message::Cancel(Cancel { jid: jid.to_owned() })).await?;
        // Answered in order: the master has handled the cancel when it answers this, and
        // refuses a cancel of a job it does not run by an error naming the jid.
        let detail = self.job(jid).await;
        // The cancel's own refusal says it best ("no running job"), whatever the read found.
        let refused =
            self.inbox.iter().position(|m| matches!(m, Message::Error(e) if e.request.as_deref() == Some(jid)));
        if let Some(Message::Error(e)) = refused.and_then(|i| self.inbox.remove(i)) {
            return Err(ClientError::Master { kind: e.kind, message: e.message });
        }
        detail
    }
}

async fn next_raw(dealer: &mut Dealer) -> Result<Vec<Vec<u8>>, ClientError> {
    loop {
        match dealer.recv().await {
            Some(DealerEvent::Message(parts)) => return Ok(parts),
            Some(DealerEvent::Connected(_)) => {}
            Some(DealerEvent::Disconnected(reason)) => return Err(ClientError::Disconnected(reason.to_string())),
            None => return Err(ClientError::Disconnected("connection closed".into())),
        }
    }
}
