//! Arbitrary and hostile bytes into every decoder: no panic, and peak heap use stays within the
//! configured limits. A counting global allocator measures the peak; everything runs in one
//! test function so no other test's allocations pollute the count.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use halite_protocol::identity::IdentityKey;
use halite_protocol::message;
use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Responder, Role, SessionConfig};
use halite_protocol::zmtp::{Connection, Limits, SocketType};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let now = CURRENT.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns how far the heap grew above where it started.
fn peak_growth(f: impl FnOnce()) -> usize {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

/// A greeting and READY from a well-behaved DEALER, so hostile bytes reach the frame decoder.
fn dealer_preamble(now: Instant) -> Vec<u8> {
    let mut dealer = Connection::new(SocketType::Dealer, Vec::new(), Limits::default(), None, now);
    let mut router = Connection::new(SocketType::Router, Vec::new(), Limits::default(), None, now);
    let greeting = router.poll_transmit().unwrap_or_default();
    dealer.handle_input(&greeting, now);
    dealer.poll_transmit().unwrap_or_default()
}

fn feed_router(preamble: &[u8], hostile: &[u8], authenticated: bool, now: Instant) -> Connection {
    let mut router = Connection::new(SocketType::Router, Vec::new(), Limits::default(), None, now);
    router.handle_input(preamble, now);
    if authenticated {
        router.set_authenticated();
    }
    router.handle_input(hostile, now);
    while let Some(event) = router.poll_event() {
        drop(event);
    }
    router
}

#[test]
fn decoders_stay_within_their_limits() {
    let now = Instant::now();
    let limits = Limits::default();
    let preamble = dealer_preamble(now);

    // A long-frame header claiming 2^40 bytes.
    let mut header = vec![0x02];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    let grew = peak_growth(|| drop(feed_router(&preamble, &header, true, now)));
    assert!(grew < 64 * 1024, "2^40 header grew the heap by {grew} bytes");

    // An endless multipart message, 64 MiB of 255-byte frames with MORE set, in 64 KiB reads.
    let frame = [&[0x01u8, 255][..], &[0u8; 255][..]].concat();
    let chunk: Vec<u8> = frame.iter().copied().cycle().take(frame.len() * 256).collect();
    let grew = peak_growth(|| {
        let mut router = feed_router(&preamble, &[], true, now);
        for _ in 0..1024 {
            router.handle_input(&chunk, now);
            while router.poll_event().is_some() {}
            if router.is_closed() {
                break;
            }
        }
        assert!(router.is_closed());
    });
    assert!(grew as u64 <= 2 * limits.max_message_size, "endless multipart grew the heap by {grew} bytes");

    // Before authentication the same attack is cut at the small pre-auth cap.
    let grew = peak_growth(|| drop(feed_router(&preamble, &chunk, false, now)));
    assert!(grew < 256 * 1024, "pre-auth multipart grew the heap by {grew} bytes");

    // 16 MiB of MessagePack nils in an event's data would decode into 16 M values (over a
    // gigabyte): refused before anything is built.
    let template = message::encode(&message::Message::Event(message::Event {
        tag: "x".into(),
        data: serde_json::json!([null, null, null]),
        id: None,
    }));
    assert!(template.ends_with(&[0x93, 0xc0, 0xc0, 0xc0]));
    let mut nils = template[..template.len() - 4].to_vec();
    let count = 16u32 << 20;
    nils.push(0xdd);
    nils.extend_from_slice(&count.to_be_bytes());
    nils.resize(nils.len() + count as usize, 0xc0);
    let grew = peak_growth(|| assert_eq!(message::decode(&nils).err(), Some(message::CodecError::TooManyValues)));
    assert!(grew < 64 * 1024, "16 MiB of nils grew the heap by {grew} bytes");

    // Arbitrary bytes, at every stage: raw, after the preamble, into the session and codec.
    let master = LocalIdentity::new(IdentityKey::from_seed(&[1; 32])).unwrap_or_else(|e| panic!("{e}"));
    let mut runner = TestRunner::new(Config { cases: 512, ..Config::default() });
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..4096), |bytes| {
            let grew = peak_growth(|| {
                drop(feed_router(&[], &bytes, false, now));
                drop(feed_router(&preamble, &bytes, false, now));
                let router = feed_router(&preamble, &bytes, true, now);
                assert!(router.pending_transmit() < 1024);
                let _ = message::decode(&bytes);
                if let Ok(responder) =
                    Responder::new(&master, Claim::new("master", None).unwrap(), SessionConfig::default())
                {
                    let _ = responder.read_hello(&bytes);
                }
            });
            prop_assert!(grew < 512 * 1024, "arbitrary input grew the heap by {} bytes", grew);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));

    // Arbitrary parts into an established session's `open`.
    let minion = LocalIdentity::new(IdentityKey::from_seed(&[2; 32])).unwrap_or_else(|e| panic!("{e}"));
    let (initiator, msg1) = Initiator::start(
        &minion,
        Role::Minion,
        Claim::new("minion", None).unwrap(),
        MasterPin::Key(master.public()),
        SessionConfig::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (responder, msg2) = Responder::new(&master, Claim::new("master", None).unwrap(), SessionConfig::default())
        .and_then(|r| r.read_hello(&msg1))
        .unwrap_or_else(|e| panic!("{e}"));
    let (_, msg3) = initiator.read_response(&msg2).unwrap_or_else(|e| panic!("{e}"));
    let (session, _) = responder.read_identity(&msg3).and_then(|p| p.accept(now)).unwrap_or_else(|e| panic!("{e}"));
    let session = std::cell::RefCell::new(session);
    runner
        .run(&prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..8), |parts| {
            let grew = peak_growth(|| {
                let _ = session.borrow_mut().open(&parts, now);
            });
            prop_assert!(grew < 128 * 1024, "session open grew the heap by {} bytes", grew);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}
