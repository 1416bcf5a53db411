//! Noise session tests: in-memory pairs with simulated time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use halite_protocol::identity::IdentityKey;
use halite_protocol::noise::{
    Claim, HandshakeError, IdentifiedPeer, Initiator, LocalIdentity, MasterPin, Responder, Role, Session,
    SessionConfig, SessionError,
};

fn identity(seed: u8) -> LocalIdentity {
    LocalIdentity::new(IdentityKey::from_seed(&[seed; 32])).unwrap()
}

/// Runs messages 1–3 and returns the master's view of the initiator plus the initiator state.
fn handshake(
    master: &LocalIdentity,
    minion: &LocalIdentity,
    pin: MasterPin,
    config: SessionConfig,
) -> Result<(IdentifiedPeer, halite_protocol::noise::AwaitingVerdict), HandshakeError> {
    let (initiator, msg1) =
        Initiator::start(minion, Role::Minion, Claim::new("minion", None).unwrap(), pin, config.clone())?;
    let (responder, msg2) = Responder::new(master, Claim::new("master", None).unwrap(), config)?.read_hello(&msg1)?;
    let (awaiting, msg3) = initiator.read_response(&msg2)?;
    Ok((responder.read_identity(&msg3)?, awaiting))
}

fn established(config: SessionConfig, now: Instant) -> (Session, Session) {
    let (master, minion) = (identity(1), identity(2));
    let (identified, awaiting) = handshake(&master, &minion, MasterPin::Key(master.public()), config).unwrap();
    let (master_session, verdict) = identified.accept(now).unwrap();
    let minion_session = awaiting.read_verdict(&verdict, now).unwrap();
    (master_session, minion_session)
}

#[test]
fn handshake_authenticates_both_sides_and_carries_the_role() {
    let now = Instant::now();
    let (master, minion) = (identity(1), identity(2));
    let (identified, awaiting) =
        handshake(&master, &minion, MasterPin::Key(master.public()), SessionConfig::default()).unwrap();
    assert_eq!(identified.peer().identity, minion.public());
    assert_eq!(identified.peer().role, Role::Minion);
    assert_eq!(awaiting.master().identity, master.public());
    let (mut m, verdict) = identified.accept(now).unwrap();
    let mut n = awaiting.read_verdict(&verdict, now).unwrap();
    let sealed = n.seal(b"ping", now).unwrap();
    assert_eq!(m.open(&sealed, now).unwrap(), b"ping");
    let sealed = m.seal(b"pong", now).unwrap();
    assert_eq!(n.open(&sealed, now).unwrap(), b"pong");
}

#[test]
fn a_master_with_the_wrong_key_is_refused_by_the_pin() {
    let (master, impostor, minion) = (identity(1), identity(3), identity(2));
    let err = handshake(&impostor, &minion, MasterPin::Key(master.public()), SessionConfig::default()).err();
    assert_eq!(
        err,
        Some(HandshakeError::UnexpectedPeer {
            expected: master.public().fingerprint(),
            got: impostor.public().fingerprint()
        })
    );
}

#[test]
fn trust_on_first_use_reports_the_master_key() {
    let (master, minion) = (identity(1), identity(2));
    let (_, awaiting) = handshake(&master, &minion, MasterPin::TrustOnFirstUse, SessionConfig::default()).unwrap();
    assert_eq!(awaiting.master().identity, master.public());
}

#[test]
fn an_unknown_key_is_held_pending_or_rejected_before_any_data() {
    let now = Instant::now();
    let (master, minion) = (identity(1), identity(2));
    let (identified, awaiting) =
        handshake(&master, &minion, MasterPin::Key(master.public()), SessionConfig::default()).unwrap();
    let verdict = identified.defer("key pending acceptance", now).unwrap();
    assert_eq!(
        awaiting.read_verdict(&verdict, now).err(),
        Some(HandshakeError::Pending("key pending acceptance".into()))
    );

    let (identified, awaiting) =
        handshake(&master, &minion, MasterPin::Key(master.public()), SessionConfig::default()).unwrap();
    let verdict = identified.reject("key rejected", now).unwrap();
    assert_eq!(awaiting.read_verdict(&verdict, now).err(), Some(HandshakeError::Rejected("key rejected".into())));
}

#[test]
fn a_tampered_handshake_message_fails() {
    let (master, minion) = (identity(1), identity(2));
    let (initiator, msg1) = Initiator::start(
        &minion,
        Role::Minion,
        Claim::new("minion", None).unwrap(),
        MasterPin::Key(master.public()),
        SessionConfig::default(),
    )
    .unwrap();
    let (_, mut msg2) = Responder::new(&master, Claim::new("master", None).unwrap(), SessionConfig::default())
        .unwrap()
        .read_hello(&msg1)
        .unwrap();
    let last = msg2.len() - 1;
    msg2[last] ^= 1;
    assert!(matches!(initiator.read_response(&msg2), Err(HandshakeError::Noise(_))));
}

#[test]
fn an_unknown_wire_version_is_named() {
    let master = identity(1);
    let err = Responder::new(&master, Claim::new("master", None).unwrap(), SessionConfig::default())
        .unwrap()
        .read_hello(&[9, 1, 2, 3])
        .err();
    assert_eq!(err, Some(HandshakeError::UnsupportedVersion(9)));
}

#[test]
fn a_tampered_frame_fails_authentication_and_the_session_survives() {
    let now = Instant::now();
    let (mut m, mut n) = established(SessionConfig::default(), now);
    let mut sealed = n.seal(b"hello", now).unwrap();
    sealed[0][12] ^= 0x80;
    assert_eq!(m.open(&sealed, now), Err(SessionError::Decrypt));
    let sealed = n.seal(b"again", now).unwrap();
    assert_eq!(m.open(&sealed, now).unwrap(), b"again");
}

#[test]
fn a_replayed_frame_is_refused() {
    let now = Instant::now();
    let (mut m, mut n) = established(SessionConfig::default(), now);
    let sealed = n.seal(b"once", now).unwrap();
    assert_eq!(m.open(&sealed, now).unwrap(), b"once");
    assert_eq!(m.open(&sealed, now), Err(SessionError::Replayed(0)));
}

#[test]
fn reordered_frames_within_the_window_are_accepted_once() {
    let now = Instant::now();
    let (mut m, mut n) = established(SessionConfig::default(), now);
    let sealed: Vec<_> = (0..10u8).map(|i| n.seal(&[i], now).unwrap()).collect();
    for i in [9usize, 3, 0, 5, 1, 2, 8, 4, 7, 6] {
        assert_eq!(m.open(&sealed[i], now).unwrap(), vec![i as u8]);
    }
    assert_eq!(m.open(&sealed[4], now), Err(SessionError::Replayed(4)));
}

#[test]
fn frames_older_than_the_window_are_refused() {
    let now = Instant::now();
    let (mut m, mut n) = established(SessionConfig::default(), now);
    let old = n.seal(b"old", now).unwrap();
    for _ in 0..200 {
        let sealed = n.seal(b"x", now).unwrap();
        m.open(&sealed, now).unwrap();
    }
    assert_eq!(m.open(&old, now), Err(SessionError::TooOld(0)));
}

#[test]
fn a_10_mib_message_is_chunked_and_reassembled() {
    let now = Instant::now();
    let (mut m, mut n) = established(SessionConfig::default(), now);
    let message: Vec<u8> = (0..10 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let sealed = n.seal(&message, now).unwrap();
    assert_eq!(sealed.len(), 161);
    assert!(sealed.iter().all(|p| p.len() <= 8 + 65_535));
    assert_eq!(m.open(&sealed, now).unwrap(), message);
}

#[test]
fn parts_cannot_be_dropped_reordered_or_spliced() {
    let now = Instant::now();
    let (mut m, mut n) = established(SessionConfig::default(), now);
    let big = vec![1u8; 200_000];
    let a = n.seal(&big, now).unwrap();
    let b = n.seal(&big, now).unwrap();
    assert!(matches!(m.open(&a[..3], now), Err(SessionError::Malformed(_))));
    let swapped = vec![a[1].clone(), a[0].clone(), a[2].clone(), a[3].clone()];
    assert!(matches!(m.open(&swapped, now), Err(SessionError::Malformed(_))));
    let spliced = vec![a[0].clone(), a[1].clone(), a[2].clone(), b[0].clone()];
    assert!(matches!(m.open(&spliced, now), Err(SessionError::Malformed(_))));
    assert_eq!(m.open(&a, now).unwrap(), big);
    assert_eq!(m.open(&b, now).unwrap(), big);
}

#[test]
fn a_message_over_the_cap_is_refused_on_both_ends() {
    let now = Instant::now();
    let small = SessionConfig { max_message_size: 1024 * 1024, ..SessionConfig::default() };
    let (master, minion) = (identity(1), identity(2));
    let (identified, _) = handshake(&master, &minion, MasterPin::Key(master.public()), small.clone()).unwrap();
    let (mut m, _) = identified.accept(now).unwrap();
    // The sender's own cap is larger; the receiver's is 1 MiB.
    let (_, mut n) = established(SessionConfig::default(), now);
    let sealed = n.seal(&vec![0u8; 2 * 1024 * 1024], now).unwrap();
    assert!(matches!(m.open(&sealed, now), Err(SessionError::MessageTooLarge { limit: 1_048_576, .. })));

    let (_, mut n) = established(small, now);
    assert!(matches!(n.seal(&vec![0u8; 2 * 1024 * 1024], now), Err(SessionError::MessageTooLarge { .. })));
}

#[test]
fn sessions_rekey_after_a_message_count_and_stay_in_step() {
    let now = Instant::now();
    let config = SessionConfig { rekey_after_messages: 3, ..SessionConfig::default() };
    let (mut m, mut n) = established(config, now);
    for i in 0..20u8 {
        let sealed = n.seal(&[i], now).unwrap();
        assert_eq!(m.open(&sealed, now).unwrap(), vec![i]);
    }
}

#[test]
fn after_a_rekey_the_old_key_no_longer_opens_anything() {
    let t0 = Instant::now();
    let config = SessionConfig { rekey_after: Duration::from_secs(60), ..SessionConfig::default() };
    let (mut m, mut n) = established(config, t0);
    let before = n.seal(b"before", t0).unwrap();
    // This message is sealed after the time limit: it carries the rekey flag.
    let t1 = t0 + Duration::from_secs(61);
    let flagged = n.seal(b"flagged", t1).unwrap();
    let after = n.seal(b"after", t1).unwrap();
    assert_eq!(m.open(&flagged, t1).unwrap(), b"flagged");
    assert_eq!(m.open(&after, t1).unwrap(), b"after");
    // `before` is inside the replay window but was sealed under the previous key.
    assert_eq!(m.open(&before, t1), Err(SessionError::Decrypt));
}

#[test]
fn sessions_expire_after_max_age() {
    let t0 = Instant::now();
    let config = SessionConfig { max_age: Some(Duration::from_secs(100)), ..SessionConfig::default() };
    let (mut m, mut n) = established(config, t0);
    let sealed = n.seal(b"x", t0 + Duration::from_secs(99)).unwrap();
    assert_eq!(m.open(&sealed, t0 + Duration::from_secs(100)), Err(SessionError::Expired));
    assert_eq!(n.seal(b"x", t0 + Duration::from_secs(100)), Err(SessionError::Expired));
}

#[test]
fn a_minion_cannot_read_another_minions_session() {
    let now = Instant::now();
    let (mut m1, mut n1) = established(SessionConfig::default(), now);
    let (_, mut n2) = established(SessionConfig::default(), now);
    let for_n1 = m1.seal(b"secret job", now).unwrap();
    assert_eq!(n2.open(&for_n1, now), Err(SessionError::Decrypt));
    assert_eq!(n1.open(&for_n1, now).unwrap(), b"secret job");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// open(seal(m)) == m for messages on both sides of the chunk boundary.
        #[test]
        fn any_message_round_trips(len in prop_oneof![0usize..300, 65_400usize..65_700, 130_000usize..132_000], byte in any::<u8>()) {
            let now = Instant::now();
            let (mut m, mut n) = established(SessionConfig::default(), now);
            let message = vec![byte; len];
            let sealed = n.seal(&message, now).unwrap();
            prop_assert_eq!(m.open(&sealed, now).unwrap(), message);
        }
    }
}

#[test]
fn the_master_learns_the_claimed_name_and_enrollment_token() {
    let (master, minion) = (identity(1), identity(2));
    let claim = Claim::new("web1", Some("3f2a")).unwrap();
    let (initiator, msg1) =
        Initiator::start(&minion, Role::Minion, claim, MasterPin::Key(master.public()), SessionConfig::default())
            .unwrap();
    let (responder, msg2) = Responder::new(&master, Claim::new("master", None).unwrap(), SessionConfig::default())
        .unwrap()
        .read_hello(&msg1)
        .unwrap();
    let (awaiting, msg3) = initiator.read_response(&msg2).unwrap();
    assert_eq!(awaiting.master().name, "master");
    let identified = responder.read_identity(&msg3).unwrap();
    assert_eq!(identified.peer().name, "web1");
    assert_eq!(identified.enrollment_token(), Some("3f2a"));
    assert!(Claim::new(&"x".repeat(256), None).is_err());
    assert!(Claim::new("web1", Some("")).is_err());
}
