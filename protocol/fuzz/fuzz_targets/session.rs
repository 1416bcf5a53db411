//! Arbitrary bytes into every handshake step and into an established session's `open`.
#![no_main]

use std::sync::OnceLock;
use std::time::Instant;

use halite_protocol::identity::IdentityKey;
use halite_protocol::noise::{Claim, Initiator, LocalIdentity, MasterPin, Responder, Role, SessionConfig};
use libfuzzer_sys::fuzz_target;

fn identities() -> &'static (LocalIdentity, LocalIdentity) {
    static IDS: OnceLock<(LocalIdentity, LocalIdentity)> = OnceLock::new();
    IDS.get_or_init(|| {
        let id = |seed| LocalIdentity::new(IdentityKey::from_seed(&[seed; 32])).unwrap_or_else(|e| panic!("{e}"));
        (id(1), id(2))
    })
}

fuzz_target!(|data: &[u8]| {
    let (master, minion) = identities();
    let now = Instant::now();
    let config = SessionConfig::default();

    if let Ok(responder) = Responder::new(master, Claim::new("master", None).unwrap(), config.clone()) {
        let _ = responder.read_hello(data);
    }
    let Ok((initiator, msg1)) = Initiator::start(minion, Role::Minion, Claim::new("minion", None).unwrap(), MasterPin::Key(master.public()), config.clone())
    else {
        return;
    };
    let _ = Initiator::start(minion, Role::Minion, Claim::new("minion", None).unwrap(), MasterPin::TrustOnFirstUse, config.clone())
        .map(|(i, _)| i.read_response(data));
    let Ok((awaiting_identity, msg2)) = Responder::new(master, Claim::new("master", None).unwrap(), config.clone()).and_then(|r| r.read_hello(&msg1)) else {
        return;
    };
    let Ok((awaiting_verdict, msg3)) = initiator.read_response(&msg2) else { return };
    let _ = Responder::new(master, Claim::new("master", None).unwrap(), config.clone())
        .and_then(|r| r.read_hello(&msg1))
        .map(|(a, _)| a.read_identity(data));
    let Ok(identified) = awaiting_identity.read_identity(&msg3) else { return };
    let Ok((mut session, _)) = identified.accept(now) else { return };

    // Interpret the input as parts: a length byte, then that many bytes, repeated.
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        parts.push(tail[..n].to_vec());
        rest = &tail[n..];
    }
    let _ = session.open(&parts, now);
    let _ = awaiting_verdict.read_verdict(&parts, now);
});
