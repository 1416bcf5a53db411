//! One authenticated connection to a master: the Noise handshake, the client's hello, then
//! sealed messages both ways. The driver (`driver.rs`) owns it and opens a new one when it
//! drops.

use std::time::Instant;

use halite_protocol::message::{self, ClientHello, Message};
use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Role, Session, SessionConfig};
use halite_transport::{Dealer, DealerConfig, DealerEvent};

use crate::{ClientConfig, ClientError};

/// A connection in session with a master.
pub(crate) struct Connection {
    dealer: Dealer,
    session: Session,
    /// The master's address.
    pub(crate) addr: String,
}

impl Connection {
    /// Connects to the first of the configured masters that answers, each within
    /// `connect_timeout`; the error names every master that did not.
    pub(crate) async fn open_any(config: &ClientConfig) -> Result<Connection, ClientError> {
        let mut failures = Vec::new();
        for addr in &config.masters {
            let timeout = config.connect_timeout;
            match tokio::time::timeout(timeout, Self::open(config, addr.clone())).await {
                Ok(Ok(connection)) => return Ok(connection),
                Ok(Err(ClientError::Connect { reason, .. })) => failures.push(format!("{addr}: {reason}")),
                Ok(Err(other)) => return Err(other),
                Err(_) => failures.push(format!("{addr}: no answer within {} s", timeout.as_secs())),
            }
        }
        let addr = config.masters.join(", ");
        let reason = if failures.is_empty() { "no master address given".to_owned() } else { failures.join("; ") };
        Err(ClientError::Connect { addr, reason })
    }

    async fn open(config: &ClientConfig, addr: String) -> Result<Connection, ClientError> {
        let fail = |reason: String| ClientError::Connect { addr: addr.clone(), reason };
        let identity = LocalIdentity::new(config.key.clone()).map_err(|e| fail(e.to_string()))?;
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
        let mut connection = Connection { dealer, session, addr };
        let hello = ClientHello { principal: config.principal.clone(), version: env!("CARGO_PKG_VERSION").into() };
        connection.send(&Message::ClientHello(hello)).await?;
        match connection.recv().await?.as_slice() {
            [Message::Welcome(_)] => Ok(connection),
            other => Err(ClientError::Protocol(format!("expected welcome, got {other:?}"))),
        }
    }

    /// Seals and sends one message.
    pub(crate) async fn send(&mut self, msg: &Message) -> Result<(), ClientError> {
        let parts = self
            .session
            .seal(&message::encode(msg), Instant::now())
            .map_err(|e| ClientError::Disconnected(e.to_string()))?;
        self.dealer.send_on(1, parts).await.map_err(|e| ClientError::Disconnected(e.to_string()))
    }

    /// The next message from the master, opened and decoded; a batch of job updates comes
    /// back as the updates it holds, in order. Cancel-safe: nothing is lost if the future is
    /// dropped before it completes.
    pub(crate) async fn recv(&mut self) -> Result<Vec<Message>, ClientError> {
        let parts = next_raw(&mut self.dealer).await?;
        let bytes = self.session.open(&parts, Instant::now()).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(match message::decode(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))? {
            Message::JobUpdates(batch) => batch.updates.into_iter().map(Message::JobUpdate).collect(),
            msg => vec![msg],
        })
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
