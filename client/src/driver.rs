//! The task behind a client: it owns the connection, sends what the handles ask, and routes
//! what the master sends (answers to their waiters by request id, job updates to the jobs
//! followed, events to the subscribers whose patterns match).
//!
//! Reconnect policy: when the connection drops, every request in flight fails with
//! `ClientError::Disconnected` (a publish may or may not have been carried out: read back
//! before retrying); then the masters are tried again, in order, with jittered exponential
//! backoff (0.1 s doubling to 5 s), for as long as a handle lives. Once connected again the
//! subscription (the union of the subscribers' patterns) is renewed after the last event received and every followed job that had not
//! ended is watched again (`job_watch`), so its updates and end still arrive. Requests made
//! meanwhile wait for the connection within their own timeout. With `reconnect` off, or once
//! `reconnect_for` has passed without a master answering, the client ends instead.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use halite_protocol::message::{
    Cancel, ClientHello, ErrorKind, ErrorMessage, Event, JobDetail, Message, PublishRequest, Published, Request,
    RequestBody, ResponseBody, Subscribe,
};
use halite_transport::Backoff;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::connection::Connection;
use crate::events::EVENT_QUEUE;
use crate::follow::Follows;
use crate::{ClientConfig, ClientError};

/// What a handle asks of the driver.
pub(crate) enum Command {
    /// An administrative request.
    Request { body: RequestBody, reply: oneshot::Sender<Result<ResponseBody, ClientError>> },
    /// A publish (its request id is the driver's).
    Publish { request: PublishRequest, reply: oneshot::Sender<Result<Published, ClientError>> },
    /// Cancel a job, answered with the job as the cancel left it.
    Cancel { jid: String, reply: oneshot::Sender<Result<JobDetail, ClientError>> },
    /// Follow a job from now on, answered with the job as it is.
    Watch { jid: String, reply: oneshot::Sender<Result<JobDetail, ClientError>> },
    /// Add a subscriber, resuming after an event id if given.
    Subscribe {
        patterns: Vec<String>,
        after: Option<String>,
        reply: oneshot::Sender<Result<mpsc::Receiver<Result<Event, ClientError>>, ClientError>>,
    },
}

/// Someone waiting for an answer, by request id.
enum Waiter {
    Request {
        so_far: Option<Box<ResponseBody>>,
        reply: oneshot::Sender<Result<ResponseBody, ClientError>>,
    },
    Publish(oneshot::Sender<Result<Published, ClientError>>),
    /// The `job_show` sent after a cancel; the cancel's refusal, if one came first.
    Cancel {
        jid: String,
        refusal: Option<ClientError>,
        started: bool,
        reply: Reply<JobDetail>,
    },
    /// A `job_watch` from a handle (`reply`) or after a reconnect (none).
    Watch {
        jid: String,
        started: bool,
        reply: Option<Reply<JobDetail>>,
    },
}

type Reply<T> = oneshot::Sender<Result<T, ClientError>>;
type SubscribeReply = oneshot::Sender<Result<mpsc::Receiver<Result<Event, ClientError>>, ClientError>>;

/// One subscriber: its patterns and where its events go.
struct Subscriber {
    /// Which one it is, for the subscription sent on its behalf ([`Driver::in_flight`]).
    key: u64,
    /// The master took a subscription with its patterns.
    taken: bool,
    patterns: Vec<String>,
    events: mpsc::Sender<Result<Event, ClientError>>,
    /// Events with this id or older are not for it (it subscribed after them, or had them).
    floor: Option<EventId>,
    /// Events it had no room for, not yet reported.
    dropped: u64,
}

/// An event id as the master writes it, `<epoch>-<sequence>`; ids of one epoch are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EventId {
    epoch: u64,
    seq: u64,
}

impl EventId {
    fn parse(id: &str) -> Option<EventId> {
        let (epoch, seq) = id.split_once('-')?;
        Some(EventId { epoch: epoch.parse().ok()?, seq: seq.parse().ok()? })
    }

    /// Whether an event with this id is new to a subscriber whose floor is `floor`.
    fn after(self, floor: Option<EventId>) -> bool {
        floor.is_none_or(|floor| floor.epoch != self.epoch || self.seq > floor.seq)
    }
}

pub(crate) struct Driver {
    config: ClientConfig,
    connection: Connection,
    next_request: u64,
    waiters: BTreeMap<u64, Waiter>,
    follows: Arc<Follows>,
    /// Every subscriber; the master is subscribed to the union of their patterns.
    subscribers: Vec<Subscriber>,
    /// The union the master was last sent.
    subscribed: Vec<String>,
    /// A subscription sent and not yet answered, with the new subscriber it tries (if any).
    /// The master refuses a subscription with an error and takes one silently; a
    /// `client_hello` sent right after it is answered in order (`welcome`). One is in flight
    /// at a time, each trying one new subscriber's patterns beside those taken, so a refusal
    /// is told to the subscriber that asked, not to whichever came last.
    in_flight: Option<Option<u64>>,
    /// New subscribers not tried yet, with the event id each resumes after.
    waiting: std::collections::VecDeque<(u64, Option<String>)>,
    /// The handles of new subscribers waiting for their stream: given it once their patterns
    /// are on their way to the master (so what the handle asks next is answered after the
    /// subscription is in place), or already taken.
    opening: BTreeMap<u64, (SubscribeReply, mpsc::Receiver<Result<Event, ClientError>>)>,
    /// After a reconnect: the event id the taken subscribers resume after.
    resume_after: Option<String>,
    /// The key of the next subscriber.
    next_subscriber: u64,
    /// The id of the last event received on any connection, to resume after.
    last_event: Option<String>,
    /// The address of the master connected to, for the handles.
    addr: Arc<Mutex<String>>,
}

impl Driver {
    pub(crate) fn new(
        config: ClientConfig,
        connection: Connection,
        follows: Arc<Follows>,
        addr: Arc<Mutex<String>>,
    ) -> Self {
        Driver {
            config,
            connection,
            next_request: 1,
            waiters: BTreeMap::new(),
            follows,
            subscribers: Vec::new(),
            subscribed: Vec::new(),
            in_flight: None,
            waiting: std::collections::VecDeque::new(),
            opening: BTreeMap::new(),
            resume_after: None,
            next_subscriber: 0,
            last_event: None,
            addr,
        }
    }

    /// Serves the handles until every one of them is dropped (or, without reconnecting, until
    /// the connection is lost).
    pub(crate) async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => {
                        if let Err(error) = self.on_command(command).await {
                            self.lost(&error);
                            if !self.reconnect(&commands).await {
                                return;
                            }
                        }
                    }
                    None => return,
                },
                received = self.connection.recv() => match received {
                    Ok(messages) => {
                        for message in messages {
                            self.route(message);
                        }
                        if let Err(error) = self.resubscribe().await {
                            self.lost(&error);
                            if !self.reconnect(&commands).await {
                                return;
                            }
                        }
                    }
                    Err(error) => {
                        self.lost(&error);
                        if !self.reconnect(&commands).await {
                            return;
                        }
                    }
                },
            }
        }
    }

    fn request_id(&mut self) -> u64 {
        let id = self.next_request;
        self.next_request += 1;
        id
    }

    /// Sends what a handle asks; an error means the connection is lost.
    async fn on_command(&mut self, command: Command) -> Result<(), ClientError> {
        match command {
            Command::Request { body, reply } => {
                let id = self.request_id();
                self.waiters.insert(id, Waiter::Request { so_far: None, reply });
                self.connection.send(&Message::Request(Request { request_id: id, body })).await
            }
            Command::Publish { mut request, reply } => {
                let id = self.request_id();
                request.request_id = id;
                self.waiters.insert(id, Waiter::Publish(reply));
                self.connection.send(&Message::Publish(request)).await
            }
            Command::Cancel { jid, reply } => {
                // The master makes the canceller a watcher: its updates must have a place.
                let started = self.follows.start(&jid);
                self.connection.send(&Message::Cancel(Cancel { jid: jid.clone() })).await?;
                // Answered in order: the cancel has been handled when this is answered.
                let id = self.request_id();
                let show = RequestBody::JobShow { jid: jid.clone() };
                self.waiters.insert(id, Waiter::Cancel { jid, refusal: None, started, reply });
                self.connection.send(&Message::Request(Request { request_id: id, body: show })).await
            }
            Command::Watch { jid, reply } => self.watch(jid, Some(reply)).await,
            Command::Subscribe { patterns, after, reply } => {
                let (events, receiver) = mpsc::channel(EVENT_QUEUE);
                let floor = after.as_deref().or(self.last_event.as_deref()).and_then(EventId::parse);
                let key = self.next_subscriber;
                self.next_subscriber += 1;
                self.subscribers.push(Subscriber { key, taken: false, patterns, events, floor, dropped: 0 });
                self.waiting.push_back((key, after));
                self.opening.insert(key, (reply, receiver));
                self.resubscribe().await
            }
        }
    }

    async fn watch(&mut self, jid: String, reply: Option<Reply<JobDetail>>) -> Result<(), ClientError> {
        let started = self.follows.start(&jid);
        let id = self.request_id();
        let body = RequestBody::JobWatch { jid: jid.clone() };
        self.waiters.insert(id, Waiter::Watch { jid, started, reply });
        self.connection.send(&Message::Request(Request { request_id: id, body })).await
    }

    /// Hands what the master sent to whoever waits for it.
    fn route(&mut self, message: Message) {
        match message {
            Message::Response(response) => self.answered(response.request_id, Ok((response.body, response.more))),
            Message::Published(published) => match self.waiters.remove(&published.request_id) {
                Some(Waiter::Publish(reply)) => {
                    self.follows.start(&published.jid);
                    let _ = reply.send(Ok(published));
                }
                Some(other) => {
                    self.waiters.insert(published.request_id, other);
                }
                None => {}
            },
            Message::Error(error) => self.refused(error),
            Message::JobUpdate(update) => {
                if let Some(follow) = self.follows.get(&update.jid) {
                    follow.update(|state| state.push(update));
                }
            }
            Message::JobDone(done) => {
                if let Some(follow) = self.follows.get(&done.jid) {
                    follow.update(|state| {
                        state.done = true;
                        state.missed |= done.missed > 0;
                    });
                    self.follows.ended(&done.jid);
                }
            }
            Message::Event(event) => self.deliver(event),
            // The subscription sent before it was taken.
            Message::Welcome(_) => {
                if let Some(Some(key)) = self.in_flight.take() {
                    if let Some(subscriber) = self.subscribers.iter_mut().find(|s| s.key == key) {
                        subscriber.taken = true;
                    }
                }
            }
            other => debug!(message = ?other, "ignored a message no client call waits for"),
        }
    }

    /// An answer (or one part of it) to request `id`.
    fn answered(&mut self, id: u64, answer: Result<(ResponseBody, bool), ClientError>) {
        let Some(waiter) = self.waiters.remove(&id) else { return };
        match waiter {
            Waiter::Request { so_far, reply } => match answer {
                Err(error) => {
                    let _ = reply.send(Err(error));
                }
                Ok((part, more)) => {
                    let joined = match so_far {
                        None => Ok(part),
                        Some(mut so_far) => so_far
                            .append(part)
                            .map(|()| *so_far)
                            .map_err(|_| ClientError::Protocol("an answer's parts are of different kinds".into())),
                    };
                    match joined {
                        Ok(body) if more => {
                            self.waiters.insert(id, Waiter::Request { so_far: Some(Box::new(body)), reply });
                        }
                        joined => {
                            let _ = reply.send(joined);
                        }
                    }
                }
            },
            Waiter::Publish(reply) => {
                let _ = reply
                    .send(answer.and_then(|_| Err(ClientError::Protocol("a publish answered as a request".into()))));
            }
            Waiter::Cancel { jid, refusal, started, reply } => {
                let result = match (refusal, answer) {
                    (Some(refusal), _) => Err(refusal),
                    (None, Ok((ResponseBody::Job(detail), _))) => Ok(detail),
                    (None, Ok((other, _))) => Err(ClientError::Protocol(format!("expected a job, got {other:?}"))),
                    (None, Err(error)) => Err(error),
                };
                if result.is_err() && started {
                    // Nothing will come for a job that was not cancelled.
                    self.follows.forget(&jid);
                }
                let _ = reply.send(result);
            }
            Waiter::Watch { jid, started, reply } => {
                let result = match answer {
                    Ok((ResponseBody::Job(detail), _)) => Ok(detail),
                    Ok((other, _)) => Err(ClientError::Protocol(format!("expected a job, got {other:?}"))),
                    Err(error) => Err(error),
                };
                match (&result, self.follows.get(&jid)) {
                    (Ok(detail), Some(follow)) => {
                        follow.update(|state| state.apply(detail.clone()));
                        if follow.lock().done {
                            self.follows.ended(&jid);
                        }
                    }
                    (Err(_), Some(_)) if started => self.follows.forget(&jid),
                    (Err(error), Some(follow)) if reply.is_none() => {
                        // A job watched again after a reconnect that can no longer be followed.
                        let error = ClientError::Master { kind: ErrorKind::NotFound, message: error.to_string() };
                        follow.update(|state| state.error = Some(error));
                    }
                    _ => {}
                }
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
        }
    }

    /// An error from the master: to the request it names, a cancel or followed job it names by
    /// jid, or the subscription.
    fn refused(&mut self, error: ErrorMessage) {
        let as_error = |e: &ErrorMessage| ClientError::Master { kind: e.kind, message: e.message.clone() };
        match error.request.as_deref() {
            Some(halite_protocol::message::SUBSCRIBE_REQUEST) => self.subscription_refused(as_error(&error)),
            Some(named) => {
                if let Ok(id) = named.parse::<u64>() {
                    if self.waiters.contains_key(&id) {
                        return self.answered(id, Err(as_error(&error)));
                    }
                }
                let cancel = self.waiters.values_mut().find_map(|w| match w {
                    Waiter::Cancel { jid, refusal, .. } if jid == named => Some(refusal),
                    _ => None,
                });
                if let Some(refusal) = cancel {
                    *refusal = Some(as_error(&error));
                } else if let Some(follow) = self.follows.get(named) {
                    follow.update(|state| state.error = Some(as_error(&error)));
                } else {
                    debug!(request = named, message = %error.message, "an error nobody waits for");
                }
            }
            // Naming nothing: the oldest request waiting takes it.
            None => match self.waiters.keys().next().copied() {
                Some(id) => self.answered(id, Err(as_error(&error))),
                None => warn!(message = %error.message, "the master reported an error"),
            },
        }
    }

    /// An event to every subscriber whose patterns match it and that has not had it; a
    /// subscriber too slow to take it loses it, and is told how many once it has room.
    fn deliver(&mut self, event: Event) {
        let id = event.id.as_deref().and_then(EventId::parse);
        if let Some(raw) = &event.id {
            self.last_event = Some(raw.clone());
        }
        // Notices about the subscription itself (`halite/bus/gap`, `halite/bus/dropped`) concern
        // every subscriber, whatever its patterns.
        let notice = event.tag.starts_with("halite/bus/");
        for subscriber in &mut self.subscribers {
            if !notice && !subscriber.patterns.iter().any(|p| halite_protocol::glob::matches(p, &event.tag)) {
                continue;
            }
            if let Some(id) = id {
                if !id.after(subscriber.floor) {
                    continue;
                }
                subscriber.floor = Some(id);
            }
            if subscriber.dropped > 0 {
                let notice = Event {
                    tag: "halite/bus/dropped".into(),
                    data: serde_json::json!({ "dropped": subscriber.dropped, "by": "client" }),
                    id: None,
                };
                if subscriber.events.try_send(Ok(notice)).is_ok() {
                    subscriber.dropped = 0;
                }
            }
            if let Err(mpsc::error::TrySendError::Full(_)) = subscriber.events.try_send(Ok(event.clone())) {
                subscriber.dropped += 1;
            }
        }
    }

    /// Gives a new subscriber's handle its stream.
    fn opened(&mut self, key: u64) {
        if let Some((reply, receiver)) = self.opening.remove(&key) {
            let _ = reply.send(Ok(receiver));
        }
    }

    /// The master refused a subscription: the subscriber it tried is told and removed (the
    /// newest, for one that tried none), and the others stay subscribed.
    fn subscription_refused(&mut self, error: ClientError) {
        let at = match self.in_flight.take().flatten() {
            Some(key) => self.subscribers.iter().position(|s| s.key == key),
            None => self.subscribers.len().checked_sub(1),
        };
        if let Some(at) = at {
            let subscriber = self.subscribers.remove(at);
            let _ = subscriber.events.try_send(Err(error));
        }
        // The master kept the subscription it had before: the union is sent again next time.
        self.subscribed.clear();
    }

    /// Brings the master's subscription up to date, one subscription in flight at a time: the
    /// patterns of the subscribers it took (those whose stream was dropped are gone), with the
    /// next new subscriber's tried beside them, resuming after its event id (or, after a
    /// reconnect, after the last event received).
    async fn resubscribe(&mut self) -> Result<(), ClientError> {
        loop {
            if self.in_flight.is_some() {
                return Ok(());
            }
            self.subscribers.retain(|s| !s.events.is_closed());
            let after_reconnect = self.resume_after.take();
            let next = match after_reconnect {
                Some(_) => None,
                None => loop {
                    match self.waiting.pop_front() {
                        Some((key, after)) if self.subscribers.iter().any(|s| s.key == key) => {
                            break Some((key, after))
                        }
                        Some(_) => continue,
                        None => break None,
                    }
                },
            };
            let trying = next.as_ref().map(|(key, _)| *key);
            let mut union: Vec<String> = self
                .subscribers
                .iter()
                .filter(|s| s.taken || Some(s.key) == trying)
                .flat_map(|s| s.patterns.iter().cloned())
                .collect();
            union.sort();
            union.dedup();
            let after = next.and_then(|(_, after)| after).or(after_reconnect);
            if union == self.subscribed && after.is_none() {
                // Nothing new to ask: its patterns are among those taken.
                match trying.and_then(|key| self.subscribers.iter_mut().find(|s| s.key == key)) {
                    Some(subscriber) => {
                        subscriber.taken = true;
                        let key = subscriber.key;
                        self.opened(key);
                        continue;
                    }
                    None => return Ok(()),
                }
            }
            self.subscribed = union.clone();
            self.connection.send(&Message::Subscribe(Subscribe { patterns: union, after })).await?;
            if let Some(key) = trying {
                self.opened(key);
            }
            self.in_flight = Some(trying);
            let hello =
                ClientHello { principal: self.config.principal.clone(), version: env!("CARGO_PKG_VERSION").into() };
            return self.connection.send(&Message::ClientHello(hello)).await;
        }
    }

    /// The connection is gone: everyone waiting for an answer is told.
    fn lost(&mut self, error: &ClientError) {
        let addr = self.connection.addr.clone();
        warn!(master = %addr, %error, "lost the connection to the master");
        let why = || ClientError::Disconnected(format!("{addr}: {error}"));
        for (_, waiter) in std::mem::take(&mut self.waiters) {
            match waiter {
                Waiter::Request { reply, .. } => drop(reply.send(Err(why()))),
                Waiter::Publish(reply) => drop(reply.send(Err(why()))),
                Waiter::Cancel { reply, .. } => drop(reply.send(Err(why()))),
                Waiter::Watch { reply: Some(reply), .. } => drop(reply.send(Err(why()))),
                Waiter::Watch { reply: None, .. } => {}
            }
        }
    }

    /// Connects again, renewing the subscription and the jobs followed; false when the client
    /// is to end (every handle dropped, or reconnecting is off).
    async fn reconnect(&mut self, commands: &mpsc::Receiver<Command>) -> bool {
        if !self.config.reconnect {
            self.end_followers("the connection to the master was lost");
            return false;
        }
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let given_up_at = self.config.reconnect_for.map(|limit| tokio::time::Instant::now() + limit);
        loop {
            if commands.is_closed() {
                return false;
            }
            if given_up_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
                self.end_followers("no master answered again in time");
                return false;
            }
            tokio::time::sleep(backoff.next_delay()).await;
            if commands.is_closed() {
                return false;
            }
            let connection = match Connection::open_any(&self.config).await {
                Ok(connection) => connection,
                Err(error) => {
                    debug!(%error, "reconnecting failed; trying again");
                    continue;
                }
            };
            self.connection = connection;
            *self.addr.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = self.connection.addr.clone();
            match self.renew().await {
                Ok(()) => {
                    warn!(master = %self.connection.addr, "connected to the master again");
                    return true;
                }
                Err(error) => self.lost(&error),
            }
        }
    }

    /// After a reconnect: the subscription resumes after the last event received, and the
    /// jobs followed are watched again.
    async fn renew(&mut self) -> Result<(), ClientError> {
        self.subscribed.clear();
        self.in_flight = None;
        if self.subscribers.iter().any(|s| s.taken) {
            self.resume_after = self.last_event.clone();
        }
        self.resubscribe().await?;
        for jid in self.follows.unfinished() {
            self.watch(jid, None).await?;
        }
        Ok(())
    }

    /// Without a reconnect, followers and the subscriber learn that nothing more will come.
    fn end_followers(&mut self, why: &str) {
        for jid in self.follows.unfinished() {
            if let Some(follow) = self.follows.get(&jid) {
                follow.update(|state| state.error = Some(ClientError::Disconnected(why.to_owned())));
            }
        }
        self.subscribers.clear();
    }
}
