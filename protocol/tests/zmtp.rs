//! ZMTP state machine tests: two connections stepped in memory with simulated time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use halite_protocol::zmtp::{Connection, Event, Heartbeat, Limits, SocketType, TimeoutKind, ZmtpError};

fn conn(socket_type: SocketType, limits: Limits, heartbeat: Option<Heartbeat>, now: Instant) -> Connection {
    Connection::new(socket_type, Vec::new(), limits, heartbeat, now)
}

/// Moves bytes both ways until neither side has anything to send; returns each side's events.
fn pump(a: &mut Connection, b: &mut Connection, now: Instant) -> (Vec<Event>, Vec<Event>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    loop {
        let mut moved = false;
        if let Some(bytes) = a.poll_transmit() {
            b.handle_input(&bytes, now);
            moved = true;
        }
        if let Some(bytes) = b.poll_transmit() {
            a.handle_input(&bytes, now);
            moved = true;
        }
        ea.extend(std::iter::from_fn(|| a.poll_event()));
        eb.extend(std::iter::from_fn(|| b.poll_event()));
        if !moved {
            return (ea, eb);
        }
    }
}

fn ready_pair(limits: Limits, heartbeat: Option<Heartbeat>, now: Instant) -> (Connection, Connection) {
    let mut dealer = conn(SocketType::Dealer, limits.clone(), heartbeat.clone(), now);
    let mut router = conn(SocketType::Router, limits, heartbeat, now);
    let (ed, er) = pump(&mut dealer, &mut router, now);
    assert!(matches!(&ed[..], [Event::Ready(info)] if info.socket_type == SocketType::Router));
    assert!(
        matches!(&er[..], [Event::Ready(info)] if info.socket_type == SocketType::Dealer && info.minor_version == 1)
    );
    (dealer, router)
}

#[test]
fn handshake_and_multipart_messages_both_ways() {
    let now = Instant::now();
    let (mut dealer, mut router) = ready_pair(Limits::default(), None, now);
    let big = vec![7u8; 300];
    dealer.send(&[&b"a"[..], &b""[..], &big[..]]).unwrap();
    router.send(&[b"reply"]).unwrap();
    let (ed, er) = pump(&mut dealer, &mut router, now);
    assert_eq!(er, vec![Event::Message(vec![b"a".to_vec(), vec![], big])]);
    assert_eq!(ed, vec![Event::Message(vec![b"reply".to_vec()])]);
}

#[test]
fn bytes_fed_one_at_a_time_decode_the_same() {
    let now = Instant::now();
    let (mut dealer, mut router) = ready_pair(Limits::default(), None, now);
    dealer.send(&[vec![1u8; 1000], vec![2u8; 3]]).unwrap();
    let bytes = dealer.poll_transmit().unwrap();
    for b in &bytes {
        router.handle_input(std::slice::from_ref(b), now);
    }
    assert_eq!(router.poll_event(), Some(Event::Message(vec![vec![1u8; 1000], vec![2u8; 3]])));
}

#[test]
fn sending_before_ready_is_an_error() {
    let now = Instant::now();
    let mut dealer = conn(SocketType::Dealer, Limits::default(), None, now);
    assert_eq!(dealer.send(&[b"x"]), Err(ZmtpError::NotReady));
}

/// Feeds raw bytes from a hostile peer into a fresh router after a valid greeting and READY.
fn hostile(limits: Limits, authenticated: bool, now: Instant) -> Connection {
    let (_, mut router) = ready_pair(limits, None, now);
    if authenticated {
        router.set_authenticated();
    }
    router
}

fn closed_with(router: &mut Connection) -> Option<ZmtpError> {
    std::iter::from_fn(|| router.poll_event()).find_map(|e| match e {
        Event::Closed(error) => Some(error),
        _ => None,
    })
}

#[test]
fn a_frame_claiming_a_terabyte_is_refused_before_allocation() {
    let now = Instant::now();
    let mut router = hostile(Limits::default(), true, now);
    let mut header = vec![0x02];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    router.handle_input(&header, now);
    assert_eq!(
        closed_with(&mut router),
        Some(ZmtpError::FrameTooLarge { size: 1 << 40, limit: Limits::default().max_frame_size })
    );
    assert!(router.is_closed());
    // The peer is told why, in an ERROR command.
    let out = router.poll_transmit().unwrap();
    assert!(out.windows(5).any(|w| w == b"ERROR"));
}

#[test]
fn an_endless_multipart_message_is_cut_at_the_part_limit() {
    let now = Instant::now();
    let mut router = hostile(Limits::default(), true, now);
    let frame = [&[0x01u8, 255][..], &[0u8; 255][..]].concat();
    for _ in 0..2000 {
        router.handle_input(&frame, now);
    }
    assert_eq!(closed_with(&mut router), Some(ZmtpError::TooManyParts { limit: 1024 }));
}

#[test]
fn message_limits_are_tighter_before_authentication() {
    let now = Instant::now();
    let limits = Limits::default();
    // 9 KiB in three parts: over the pre-auth byte cap, fine once authenticated.
    let message = [vec![0u8; 3 * 1024], vec![0u8; 3 * 1024], vec![0u8; 3 * 1024]];
    let (mut dealer, mut router) = ready_pair(limits.clone(), None, now);
    dealer.send(&message).unwrap();
    let (_, er) = pump(&mut dealer, &mut router, now);
    assert_eq!(er, vec![Event::Closed(ZmtpError::MessageTooLarge { limit: limits.max_message_size_pre_auth })]);

    let (mut dealer, mut router) = ready_pair(limits.clone(), None, now);
    router.set_authenticated();
    dealer.send(&message).unwrap();
    let (_, er) = pump(&mut dealer, &mut router, now);
    assert_eq!(er, vec![Event::Message(message.to_vec())]);

    let (mut dealer, mut router) = ready_pair(limits, None, now);
    dealer.send(&[b"1", b"2", b"3", b"4", b"5"]).unwrap();
    let (_, er) = pump(&mut dealer, &mut router, now);
    assert_eq!(er, vec![Event::Closed(ZmtpError::TooManyParts { limit: 4 })]);
}

#[test]
fn message_frames_before_ready_are_refused() {
    let now = Instant::now();
    let mut router = conn(SocketType::Router, Limits::default(), None, now);
    let mut dealer = conn(SocketType::Dealer, Limits::default(), None, now);
    let greeting = dealer.poll_transmit().unwrap();
    router.handle_input(&greeting[..64], now);
    router.handle_input(&[0x00, 1, b'x'], now);
    assert_eq!(closed_with(&mut router), Some(ZmtpError::MessageBeforeReady));
}

#[test]
fn a_greeting_that_never_completes_times_out() {
    let t0 = Instant::now();
    let mut router = conn(SocketType::Router, Limits::default(), None, t0);
    router.handle_input(&[0xFF, 0, 0], t0);
    let deadline = router.poll_timeout().unwrap();
    assert_eq!(deadline, t0 + Limits::default().handshake_timeout);
    router.handle_timeout(deadline - Duration::from_millis(1));
    assert!(!router.is_closed());
    router.handle_timeout(deadline);
    assert_eq!(router.poll_event(), Some(Event::TimedOut(TimeoutKind::Handshake)));
    assert!(router.is_closed());
}

#[test]
fn non_zmtp_bytes_are_refused_at_once() {
    let now = Instant::now();
    let mut router = conn(SocketType::Router, Limits::default(), None, now);
    router.handle_input(b"GET / HTTP/1.1\r\n", now);
    assert!(matches!(closed_with(&mut router), Some(ZmtpError::BadGreeting(_))));
}

#[test]
fn incompatible_socket_types_are_refused() {
    let now = Instant::now();
    let mut a = conn(SocketType::Req, Limits::default(), None, now);
    let mut b = conn(SocketType::Req, Limits::default(), None, now);
    let (ea, _) = pump(&mut a, &mut b, now);
    assert!(ea.iter().any(|e| matches!(
        e,
        Event::Closed(ZmtpError::IncompatibleSocketType { .. }) | Event::Closed(ZmtpError::PeerError(_))
    )));
}

#[test]
fn heartbeats_ping_pong_and_time_out_a_silent_peer() {
    let t0 = Instant::now();
    let hb =
        Heartbeat { interval: Duration::from_secs(1), timeout: Duration::from_secs(3), ttl: Duration::from_secs(10) };
    let (mut dealer, mut router) = ready_pair(Limits::default(), Some(hb.clone()), t0);
    let t1 = t0 + hb.interval;
    assert_eq!(dealer.poll_timeout(), Some(t1));
    dealer.handle_timeout(t1);
    assert_eq!(dealer.poll_event(), Some(Event::HeartbeatDue));
    // The router answers PONG, which keeps the dealer's deadline from firing.
    let ping = dealer.poll_transmit().unwrap();
    router.handle_input(&ping, t1);
    let pong = router.poll_transmit().unwrap();
    assert!(pong.windows(4).any(|w| w == b"PONG"));
    dealer.handle_input(&pong, t1);
    dealer.handle_timeout(t1 + hb.timeout);
    assert!(!dealer.is_closed());

    // Now the router goes silent: the next PING's deadline closes the connection.
    let t2 = t1 + hb.timeout;
    let _ = dealer.poll_transmit();
    dealer.handle_timeout(t2 + hb.timeout);
    let events: Vec<_> = std::iter::from_fn(|| dealer.poll_event()).collect();
    assert!(events.contains(&Event::TimedOut(TimeoutKind::Heartbeat)), "{events:?}");
    assert!(dealer.is_closed());
}

#[test]
fn the_ttl_a_peer_announces_closes_when_it_goes_silent() {
    let t0 = Instant::now();
    let hb =
        Heartbeat { interval: Duration::from_secs(1), timeout: Duration::from_secs(60), ttl: Duration::from_secs(5) };
    // Only the dealer heartbeats; the router learns the TTL from its PING.
    let mut dealer = conn(SocketType::Dealer, Limits::default(), Some(hb), t0);
    let mut router = conn(SocketType::Router, Limits::default(), None, t0);
    pump(&mut dealer, &mut router, t0);
    assert_eq!(router.poll_timeout(), None);
    let t1 = t0 + Duration::from_secs(1);
    dealer.handle_timeout(t1);
    pump(&mut dealer, &mut router, t1);
    assert_eq!(router.poll_timeout(), Some(t1 + Duration::from_secs(5)));
    router.handle_timeout(t1 + Duration::from_secs(5));
    assert_eq!(router.poll_event(), Some(Event::TimedOut(TimeoutKind::PeerTtl)));
}

#[test]
fn a_zmtp_3_0_peer_gets_no_pings() {
    let t0 = Instant::now();
    let hb = Heartbeat::default();
    let mut dealer = conn(SocketType::Dealer, Limits::default(), Some(hb), t0);
    let mut router = conn(SocketType::Router, Limits::default(), None, t0);
    let mut greeting = router.poll_transmit().unwrap();
    greeting[11] = 0;
    dealer.handle_input(&greeting, t0);
    pump(&mut dealer, &mut router, t0);
    assert!(dealer.is_ready());
    assert_eq!(dealer.poll_timeout(), None);
}

#[test]
fn a_peer_error_command_closes_without_answering() {
    let now = Instant::now();
    let (mut dealer, mut router) = ready_pair(Limits::default(), None, now);
    router.close("go away");
    let (ed, _) = pump(&mut dealer, &mut router, now);
    assert_eq!(ed, vec![Event::Closed(ZmtpError::PeerError("go away".into()))]);
    assert_eq!(dealer.poll_transmit(), None);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// decode(encode(m)) == m for any multipart message, however the bytes are split into reads.
        #[test]
        fn any_multipart_message_round_trips_across_any_read_split(
            parts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..600), 1..6),
            split in any::<prop::sample::Index>(),
        ) {
            let now = Instant::now();
            let (mut dealer, mut router) = ready_pair(Limits::default(), None, now);
            router.set_authenticated();
            dealer.send(&parts).unwrap();
            let bytes = dealer.poll_transmit().unwrap();
            let at = split.index(bytes.len() + 1);
            router.handle_input(&bytes[..at], now);
            router.handle_input(&bytes[at..], now);
            prop_assert_eq!(router.poll_event(), Some(Event::Message(parts)));
        }
    }
}
