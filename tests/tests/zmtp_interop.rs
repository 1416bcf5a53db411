//! ZMTP interoperability and hostile-peer tests over real TCP on loopback:
//! libzmq (through pyzmq) and the pure-Rust `zeromq` crate against our ROUTER and DEALER, and raw
//! TCP peers that try to exhaust the router.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use halite_protocol::zmtp::{Connection, Heartbeat, Limits, SocketType};
use halite_transport::{Dealer, DealerConfig, DealerEvent, Router, RouterConfig, RouterEvent};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;
use tokio::time::timeout;

const MESSAGES: &[&[&[u8]]] = &[&[b"hello"], &[b"multi", b"", b"part", &[b'x'; 300]]];

fn python() -> PathBuf {
    let path = std::env::var_os("HALITE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"));
    assert!(path.exists(), "{} not found: run scripts/test.sh, which creates the venv with pyzmq", path.display());
    path
}

fn peer_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/zmq_peer.py")
}

fn fast_heartbeat() -> Heartbeat {
    Heartbeat { interval: Duration::from_millis(100), timeout: Duration::from_millis(300), ttl: Duration::from_secs(1) }
}

/// Raw ZMTP has no authentication step, so these tests raise the pre-authentication caps
/// enough for their messages: the Python peer's 10 KiB message, and echoes of five parts.
fn interop_limits() -> Limits {
    Limits { max_message_size_pre_auth: 64 * 1024, max_parts_pre_auth: 8, ..Limits::default() }
}

/// Starts a router that echoes every message back with `echo` prepended; returns its address and
/// a receiver of disconnect reasons.
async fn echo_router(config: RouterConfig) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut router = Router::bind("127.0.0.1:0", config).await.unwrap();
    let addr = router.local_addr().to_string();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = router.recv().await {
            match event {
                RouterEvent::Message { peer, mut parts } => {
                    parts.insert(0, b"echo".to_vec());
                    router.send(peer, parts).unwrap();
                }
                RouterEvent::Disconnected { reason, .. } => {
                    let _ = tx.send(reason.to_string());
                }
                RouterEvent::Connected { .. } => {}
            }
        }
    });
    (addr, rx)
}

async fn run_python_dealer(addr: &str, extra: &[&str]) {
    let output = timeout(
        Duration::from_secs(30),
        Command::new(python()).arg(peer_script()).arg("dealer").arg(format!("tcp://{addr}")).args(extra).output(),
    )
    .await
    .expect("python dealer finished in time")
    .unwrap();
    assert!(
        output.status.success(),
        "python dealer failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn pyzmq_dealer_exchanges_multipart_messages_with_our_router() {
    let (addr, _) = echo_router(RouterConfig { limits: interop_limits(), ..RouterConfig::default() }).await;
    run_python_dealer(&addr, &[]).await;
}

#[tokio::test]
async fn pyzmq_dealer_with_heartbeats_stays_connected_to_our_heartbeating_router() {
    let config =
        RouterConfig { limits: interop_limits(), heartbeat: Some(fast_heartbeat()), ..RouterConfig::default() };
    let (addr, mut disconnects) = echo_router(config).await;
    run_python_dealer(&addr, &["--heartbeat-ms", "100", "--idle-ms", "1500"]).await;
    // The only disconnect is the dealer leaving at the end, never a heartbeat timeout.
    while let Ok(reason) = disconnects.try_recv() {
        assert!(!reason.contains("timed out"), "{reason}");
    }
}

async fn exchange(dealer: &mut Dealer, messages: &[&[&[u8]]]) {
    for msg in messages {
        let parts: Vec<Vec<u8>> = msg.iter().map(|p| p.to_vec()).collect();
        dealer.send(parts.clone()).await.unwrap();
        loop {
            match timeout(Duration::from_secs(10), dealer.recv()).await.expect("echo in time") {
                Some(DealerEvent::Message(reply)) => {
                    let mut expected = vec![b"echo".to_vec()];
                    expected.extend(parts);
                    assert_eq!(reply, expected);
                    break;
                }
                Some(DealerEvent::Connected(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn our_dealer_exchanges_with_a_pyzmq_router_and_heartbeats_both_ways() {
    let mut child = Command::new(python())
        .arg(peer_script())
        .args(["router", "--heartbeat-ms", "100", "--count", "4"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = timeout(Duration::from_secs(20), stdout.next_line()).await.unwrap().unwrap().unwrap();
    let config =
        DealerConfig { heartbeat: Some(fast_heartbeat()), limits: interop_limits(), ..DealerConfig::default() };
    let mut dealer = Dealer::connect(format!("127.0.0.1:{port}"), config);
    exchange(&mut dealer, MESSAGES).await;
    // Idle long enough for many heartbeats each way; neither side may drop the other.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    exchange(&mut dealer, MESSAGES).await;
    let done = timeout(Duration::from_secs(10), stdout.next_line()).await.unwrap().unwrap();
    assert_eq!(done.as_deref(), Some("ok"));
    assert!(child.wait().await.unwrap().success());
}

#[tokio::test]
async fn the_zeromq_crate_dealer_talks_to_our_router() {
    use zeromq::{Socket, SocketRecv, SocketSend};
    let (addr, _) = echo_router(RouterConfig::default()).await;
    let mut socket = zeromq::DealerSocket::new();
    socket.connect(&format!("tcp://{addr}")).await.unwrap();
    for msg in MESSAGES {
        let mut message = zeromq::ZmqMessage::from(msg[0].to_vec());
        for part in &msg[1..] {
            message.push_back(part.to_vec().into());
        }
        socket.send(message).await.unwrap();
        let reply = timeout(Duration::from_secs(10), socket.recv()).await.unwrap().unwrap();
        let reply: Vec<Vec<u8>> = reply.into_vec().into_iter().map(|b| b.to_vec()).collect();
        let mut expected = vec![b"echo".to_vec()];
        expected.extend(msg.iter().map(|p| p.to_vec()));
        assert_eq!(reply, expected);
    }
}

#[tokio::test]
async fn our_dealer_talks_to_a_zeromq_crate_router() {
    use zeromq::{Socket, SocketRecv, SocketSend};
    let mut router = zeromq::RouterSocket::new();
    let endpoint = router.bind("tcp://127.0.0.1:0").await.unwrap();
    let port = match endpoint {
        zeromq::Endpoint::Tcp(_, port) => port,
        other => panic!("unexpected endpoint {other:?}"),
    };
    tokio::spawn(async move {
        while let Ok(message) = router.recv().await {
            let mut parts = message.into_vec();
            parts.insert(1, b"echo".to_vec().into());
            let reply = zeromq::ZmqMessage::try_from(parts).unwrap();
            router.send(reply).await.unwrap();
        }
    });
    // zeromq 0.7 treats ZMTP PING as an unknown command, so no heartbeats towards it.
    let config = DealerConfig { heartbeat: None, limits: interop_limits(), ..DealerConfig::default() };
    let mut dealer = Dealer::connect(format!("127.0.0.1:{port}"), config);
    exchange(&mut dealer, MESSAGES).await;
}

/// Opens a raw TCP connection and completes a valid ZMTP handshake as a DEALER.
async fn raw_peer(addr: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let now = std::time::Instant::now();
    let mut conn = Connection::new(SocketType::Dealer, Vec::new(), Limits::default(), None, now);
    stream.write_all(&conn.poll_transmit().unwrap()).await.unwrap();
    let mut greeting = [0u8; 64];
    stream.read_exact(&mut greeting).await.unwrap();
    conn.handle_input(&greeting, now);
    stream.write_all(&conn.poll_transmit().unwrap()).await.unwrap();
    stream
}

/// Reads until the router closes the connection; returns everything it sent.
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    timeout(Duration::from_secs(10), stream.read_to_end(&mut received))
        .await
        .expect("router closed the connection")
        .ok();
    received
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peers_are_dropped_while_memory_stays_bounded_and_others_keep_working() {
    let config = RouterConfig {
        limits: Limits { handshake_timeout: Duration::from_secs(1), ..Limits::default() },
        ..RouterConfig::default()
    };
    let (addr, _) = echo_router(config).await;
    let mut good = Dealer::connect(addr.clone(), DealerConfig { limits: interop_limits(), ..DealerConfig::default() });
    exchange(&mut good, &MESSAGES[..1]).await;
    let rss_before = rss_bytes();

    // 1. A long-frame header claiming 2^40 bytes: refused with an ERROR, connection closed.
    let mut terabyte = raw_peer(&addr).await;
    let mut header = vec![0x02];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    terabyte.write_all(&header).await.unwrap();
    let said = until_closed(&mut terabyte).await;
    assert!(said.windows(5).any(|w| w == b"ERROR"), "no ERROR command before closing");

    // 2. An endless multipart message of 255-byte frames with MORE set.
    let endless = tokio::spawn({
        let addr = addr.clone();
        async move {
            let mut stream = raw_peer(&addr).await;
            let frame = [&[0x01u8, 255][..], &[0u8; 255][..]].concat();
            let burst: Vec<u8> = frame.iter().copied().cycle().take(frame.len() * 64).collect();
            let mut sent = 0usize;
            // Keep sending until the router hangs up; give up after 256 MiB.
            while sent < 256 << 20 {
                if stream.write_all(&burst).await.is_err() {
                    return sent;
                }
                sent += burst.len();
            }
            panic!("router accepted 256 MiB of one message");
        }
    });
    let sent = timeout(Duration::from_secs(20), endless).await.unwrap().unwrap();
    assert!(sent < 64 << 20, "router read {sent} bytes of one message before hanging up");

    // 3. A greeting that never completes: closed at the handshake deadline.
    let started = Instant::now();
    let mut stalled = TcpStream::connect(&addr).await.unwrap();
    stalled.write_all(&[0xFF, 0, 0, 0]).await.unwrap();
    until_closed(&mut stalled).await;
    assert!(started.elapsed() >= Duration::from_millis(900));

    // The well-behaved peer never noticed, and memory did not balloon.
    exchange(&mut good, MESSAGES).await;
    let grown = rss_bytes().saturating_sub(rss_before);
    assert!(grown < 32 << 20, "RSS grew by {grown} bytes");
}

#[tokio::test]
async fn pre_auth_connections_beyond_the_per_ip_limit_are_refused() {
    let config = RouterConfig { max_pending_per_ip: 2, ..RouterConfig::default() };
    let (addr, _) = echo_router(config).await;
    let _a = raw_peer(&addr).await;
    let _b = raw_peer(&addr).await;
    let mut c = TcpStream::connect(&addr).await.unwrap();
    let mut buf = [0u8; 64];
    // The third connection is closed without a greeting.
    let n = timeout(Duration::from_secs(5), c.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert_eq!(n, 0);
}
