//! Protocol micro-benchmarks: handshake, seal+open, job encode/decode, ZMTP framing.
//!
//! `cargo bench -p halite-protocol` prints a table (median and p99 of 41 samples, each the mean
//! of a batch sized to take about 10 ms) and writes `target/bench-protocol.json`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use halite_protocol::audit::{chain_records, record_hash, record_signed_by, AuditEntry};
use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{self, Job, Message, SignedJob, Value};
use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Responder, Role, Session, SessionConfig};
use halite_protocol::zmtp::{Connection, Event, Limits, SocketType};

const SAMPLES: usize = 41;

struct Figure {
    name: &'static str,
    median_ns: f64,
    p99_ns: f64,
}

fn measure(name: &'static str, mut op: impl FnMut()) -> Figure {
    // Size a batch to about 10 ms so timer resolution does not matter.
    let start = Instant::now();
    let mut calibration = 0u64;
    while start.elapsed() < Duration::from_millis(20) {
        op();
        calibration += 1;
    }
    let per_op = start.elapsed().as_nanos() as f64 / calibration as f64;
    let batch = ((10_000_000.0 / per_op) as u64).max(1);
    let mut samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                op();
            }
            t.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    let p99_index = ((SAMPLES as f64) * 0.99).ceil() as usize - 1;
    Figure { name, median_ns: samples[SAMPLES / 2], p99_ns: samples[p99_index.min(SAMPLES - 1)] }
}

fn session_pair(master: &LocalIdentity, minion: &LocalIdentity) -> (Session, Session) {
    let now = Instant::now();
    let config = SessionConfig::default();
    let (initiator, msg1) = Initiator::start(
        minion,
        Role::Minion,
        Claim::new("minion", None).unwrap(),
        MasterPin::Key(master.public()),
        config.clone(),
    )
    .unwrap();
    let (responder, msg2) =
        Responder::new(master, Claim::new("master", None).unwrap(), config).unwrap().read_hello(&msg1).unwrap();
    let (awaiting, msg3) = initiator.read_response(&msg2).unwrap();
    let (m, verdict) = responder.read_identity(&msg3).unwrap().accept(now).unwrap();
    let n = awaiting.read_verdict(&verdict, now).unwrap();
    (m, n)
}

fn typical_job() -> Job {
    Job {
        jid: "20261121063522123456".into(),
        function: "test.ping".into(),
        args: vec![],
        kwargs: BTreeMap::from([("name".into(), Value::from("nginx"))]),
        timeout_ms: 30_000,
        issued_at_ms: 1_795_243_659_935,
        ttl_ms: 3_600_000,
        caller: "root".into(),
        reach: None,
    }
}

fn main() {
    let master = LocalIdentity::new(IdentityKey::generate_os()).unwrap();
    let minion = LocalIdentity::new(IdentityKey::generate_os()).unwrap();
    let mut figures = vec![measure("noise handshake, both sides (XX + identity binding + verdict)", || {
        black_box(session_pair(&master, &minion));
    })];

    let (mut m, mut n) = session_pair(&master, &minion);
    let now = Instant::now();
    for (name, size) in [("seal+open 64 B", 64usize), ("seal+open 1 KiB", 1024), ("seal+open 64 KiB", 64 * 1024)] {
        let payload = vec![0x5a; size];
        figures.push(measure(name, || {
            let parts = n.seal(&payload, now).unwrap();
            black_box(m.open(&parts, now).unwrap());
        }));
    }
    let payload = vec![0x5a; 1024];
    figures.push(measure("seal 1 KiB", || {
        black_box(n.seal(&payload, now).unwrap());
    }));

    let key = master.key().clone();
    let job = typical_job();
    let signed = Message::Job(SignedJob::sign(&job, &key));
    let encoded = message::encode(&signed);
    figures.push(measure("encode+decode a typical signed job message", || {
        let bytes = message::encode(black_box(&signed));
        black_box(message::decode(&bytes).unwrap());
    }));
    figures.push(measure("decode a typical signed job message", || {
        black_box(message::decode(black_box(&encoded)).unwrap());
    }));
    figures.push(measure("sign a job (encode + ed25519)", || {
        black_box(SignedJob::sign(black_box(&job), &key));
    }));
    let Message::Job(signed_job) = &signed else { unreachable!() };
    let public = master.public();
    figures.push(measure("verify a job (strict ed25519 + decode)", || {
        black_box(signed_job.verify(&public).unwrap());
    }));

    // What the master adds to the trail for each request: the entry's JSON, its hash and
    // signature, and the check of both (`halite audit verify`).
    let entry = typical_audit_entry();
    figures.push(measure("audit record: JSON + hash + ed25519 signature", || {
        black_box(chain_records(&key, "m1", 41, [7; 32], std::slice::from_ref(black_box(&entry))));
    }));
    let record = chain_records(&key, "m1", 41, [7; 32], std::slice::from_ref(&entry)).remove(0);
    figures.push(measure("audit record: check hash + signature", || {
        let hash = record_hash(&record.chain, record.seq, &[7; 32], black_box(&record.body));
        let signature = halite_protocol::hex::decode(&record.signature).unwrap();
        black_box(record_signed_by(&public, &hash, &signature));
    }));

    let (mut dealer, mut router) = zmtp_pair();
    let frame = vec![0u8; 1024];
    figures.push(measure("zmtp send+receive, 1 KiB single-part", || {
        dealer.send(&[&frame]).unwrap();
        let bytes = dealer.poll_transmit().unwrap();
        router.handle_input(&bytes, now);
        black_box(router.poll_event().unwrap());
    }));

    println!("{:<64} {:>12} {:>12}", "operation", "median", "p99");
    for f in &figures {
        println!("{:<64} {:>12} {:>12}", f.name, human(f.median_ns), human(f.p99_ns));
    }
    let json: Vec<String> = figures
        .iter()
        .map(|f| {
            format!("  {{\"name\": {:?}, \"median_ns\": {:.0}, \"p99_ns\": {:.0}}}", f.name, f.median_ns, f.p99_ns)
        })
        .collect();
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-protocol.json");
    std::fs::write(&out, format!("[\n{}\n]\n", json.join(",\n"))).unwrap();
    println!("wrote {}", out.display());
}

/// A publish as the trail records it: who, from where, what, on which minions.
fn typical_audit_entry() -> AuditEntry {
    AuditEntry {
        at_ms: 1_764_000_000_000,
        kind: "request".into(),
        principal: "heat-proja".into(),
        tenant: Some("proja".into()),
        action: "publish".into(),
        decision: "granted".into(),
        reason: None,
        minions: vec!["proja-web1".into(), "proja-web2".into()],
        detail: serde_json::json!({
            "session": 42, "address": "10.0.0.7:53122", "jid": "20261202054200000001",
            "args": { "target": { "kind": "glob", "expr": "proja-web*" }, "function": "cmd.run",
                      "args": ["systemctl restart nginx"], "kwargs": {}, "rollout": false, "on_behalf_of": null },
        }),
    }
}

fn zmtp_pair() -> (Connection, Connection) {
    let now = Instant::now();
    let mut dealer = Connection::new(SocketType::Dealer, Vec::new(), Limits::default(), None, now);
    let mut router = Connection::new(SocketType::Router, Vec::new(), Limits::default(), None, now);
    for _ in 0..4 {
        if let Some(b) = dealer.poll_transmit() {
            router.handle_input(&b, now);
        }
        if let Some(b) = router.poll_transmit() {
            dealer.handle_input(&b, now);
        }
    }
    assert!(matches!(router.poll_event(), Some(Event::Ready(_))));
    assert!(matches!(dealer.poll_event(), Some(Event::Ready(_))));
    router.set_authenticated();
    (dealer, router)
}

fn human(ns: f64) -> String {
    if ns >= 1_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else if ns >= 1_000.0 {
        format!("{:.2} µs", ns / 1_000.0)
    } else {
        format!("{ns:.0} ns")
    }
}
