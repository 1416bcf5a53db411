//! Protocol demo: a master (ROUTER) and a minion (DEALER) on loopback TCP run the Noise XX
//! handshake over ZMTP, the minion says hello, the master sends a signed `test.ping` job and
//! the minion verifies it and returns the result.
//!
//! Run with `cargo run -p halite-transport --example protocol-demo`.

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{self, Hello, Job, JobReturn, Message, ModuleInfo, SignedJob, Value};
use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Responder, Role, Session, SessionConfig};
use halite_transport::{Dealer, DealerConfig, DealerEvent, PeerId, Router, RouterConfig, RouterEvent};

#[tokio::main]
async fn main() -> Result<()> {
    let master_identity = LocalIdentity::new(IdentityKey::generate_os())?;
    let minion_identity = LocalIdentity::new(IdentityKey::generate_os())?;
    println!("master key  {}", master_identity.public().fingerprint());
    println!("minion key  {}", minion_identity.public().fingerprint());

    let router = Router::bind("127.0.0.1:0", RouterConfig::default()).await?;
    let addr = router.local_addr();
    println!("master listening on {addr}");
    let master_pub = master_identity.public();
    let master = tokio::spawn(run_master(router, master_identity));

    let mut dealer = Dealer::connect(addr.to_string(), DealerConfig::default());
    let mut session = minion_handshake(&mut dealer, &minion_identity, MasterPin::Key(master_pub)).await?;
    println!("minion: session established with the pinned master");

    let hello = Message::Hello(Hello {
        id: "demo-minion".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        grains: BTreeMap::from([("os".into(), Value::from(std::env::consts::OS))]),
        modules: vec![ModuleInfo { name: "test".into(), version: "1".into() }],
        functions: vec!["test.ping".into()],
        installed: vec!["test.ping".into()],
    });
    dealer.send(session.seal(&message::encode(&hello), Instant::now())?).await?;

    let parts = next_message(&mut dealer).await?;
    let Message::Job(signed) = message::decode(&session.open(&parts, Instant::now())?)? else {
        bail!("expected a job");
    };
    let job = signed.verify(&master_pub).context("job signature")?;
    println!("minion: received job {} {} (signature verified, caller {})", job.jid, job.function, job.caller);
    let ret = Message::JobReturn(JobReturn {
        jid: job.jid,
        minion: String::new(),
        success: true,
        retcode: 0,
        outputs: Value::Bool(true),
        truncated: false,
        duration_ms: 0,
        outcome: Default::default(),
    });
    dealer.send(session.seal(&message::encode(&ret), Instant::now())?).await?;
    master.await??;
    Ok(())
}

async fn next_message(dealer: &mut Dealer) -> Result<Vec<Vec<u8>>> {
    loop {
        match dealer.recv().await {
            Some(DealerEvent::Message(parts)) => return Ok(parts),
            Some(DealerEvent::Connected(_)) => {}
            Some(DealerEvent::Disconnected(reason)) => bail!("disconnected: {reason}"),
            None => bail!("dealer closed"),
        }
    }
}

async fn minion_handshake(dealer: &mut Dealer, identity: &LocalIdentity, pin: MasterPin) -> Result<Session> {
    let (initiator, msg1) =
        Initiator::start(identity, Role::Minion, Claim::new("demo-minion", None)?, pin, SessionConfig::default())?;
    dealer.send(vec![msg1]).await?;
    let msg2 = next_message(dealer).await?;
    let (awaiting, msg3) = initiator.read_response(msg2.first().context("empty message 2")?)?;
    dealer.send(vec![msg3]).await?;
    let verdict = next_message(dealer).await?;
    let session = awaiting.read_verdict(&verdict, Instant::now())?;
    dealer.mark_authenticated().await?;
    Ok(session)
}

async fn next_from(router: &mut Router) -> Result<(PeerId, Vec<Vec<u8>>)> {
    loop {
        match router.recv().await {
            Some(RouterEvent::Message { peer, parts }) => return Ok((peer, parts)),
            Some(RouterEvent::Connected { addr, .. }) => println!("master: ZMTP connection from {addr}"),
            Some(RouterEvent::Disconnected { reason, .. }) => bail!("minion disconnected: {reason}"),
            None => bail!("router closed"),
        }
    }
}

async fn run_master(mut router: Router, identity: LocalIdentity) -> Result<()> {
    let (peer, msg1) = next_from(&mut router).await?;
    let (awaiting, msg2) = Responder::new(&identity, Claim::new("master", None)?, SessionConfig::default())?
        .read_hello(msg1.first().context("empty message 1")?)?;
    router.send(peer, vec![msg2])?;
    let (_, msg3) = next_from(&mut router).await?;
    let identified = awaiting.read_identity(msg3.first().context("empty message 3")?)?;
    println!("master: peer authenticated as {:?} {}", identified.peer().role, identified.peer().identity.fingerprint());
    // A real master looks the key up in its registry here; the demo accepts it.
    let (mut session, verdict) = identified.accept(Instant::now())?;
    router.send(peer, verdict)?;
    router.mark_authenticated(peer, halite_transport::Lane::Bulk)?;

    let (_, parts) = next_from(&mut router).await?;
    let Message::Hello(hello) = message::decode(&session.open(&parts, Instant::now())?)? else {
        bail!("expected hello");
    };
    println!("master: hello from {} (version {}, functions {:?})", hello.id, hello.version, hello.functions);

    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let job = Job {
        jid: format!("{now_ms}"),
        function: "test.ping".into(),
        args: vec![],
        kwargs: BTreeMap::new(),
        timeout_ms: 5_000,
        issued_at_ms: now_ms,
        ttl_ms: 60_000,
        caller: "root".into(),
        reach: None,
    };
    let signed = Message::Job(SignedJob::sign(&job, identity.key()));
    router.send(peer, session.seal(&message::encode(&signed), Instant::now())?)?;
    println!("master: sent signed job {} test.ping", job.jid);

    let (_, parts) = next_from(&mut router).await?;
    let Message::JobReturn(ret) = message::decode(&session.open(&parts, Instant::now())?)? else {
        bail!("expected a return");
    };
    println!("master: {} returned {} (retcode {})", hello.id, ret.outputs, ret.retcode);
    Ok(())
}
