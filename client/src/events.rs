//! Bus events as a stream: what [`crate::Client::subscribe`] returns.

use std::pin::Pin;
use std::task::{Context, Poll};

use halite_protocol::message::Event;
use tokio::sync::mpsc;

use crate::ClientError;

/// Events held for a subscriber that is not reading: past this, events are dropped, counted,
/// and reported by a `halite/bus/dropped` event once there is room (as the master does).
pub(crate) const EVENT_QUEUE: usize = 4_096;

/// The events of one subscription, pushed by the master, in order. A client may hold several
/// at once (from any of its handles): the master is subscribed to the union of their
/// patterns and each stream gets the events its own patterns match. Dropping the stream ends
/// the subscription. It survives reconnects: the client resubscribes after the last event
/// received, and the master sends what came meanwhile (or a `halite/bus/gap` event first if
/// it no longer holds all of it).
///
/// Use [`EventStream::next_event`], or it as a [`futures_core::Stream`]. It ends (`None`, or
/// `ClientError::Disconnected`) when every handle of its client is dropped, or when the
/// connection is lost and the client does not reconnect.
pub struct EventStream {
    pub(crate) events: mpsc::Receiver<Result<Event, ClientError>>,
}

impl EventStream {
    /// The next event, or the master's refusal of the subscription.
    pub async fn next_event(&mut self) -> Result<Event, ClientError> {
        match self.events.recv().await {
            Some(event) => event,
            None => Err(ClientError::Disconnected("the subscription ended".into())),
        }
    }
}

impl futures_core::Stream for EventStream {
    type Item = Result<Event, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}
