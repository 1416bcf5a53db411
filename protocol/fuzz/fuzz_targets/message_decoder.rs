//! Arbitrary bytes into the message decoder and the job verifier.
#![no_main]

use halite_protocol::identity::IdentityKey;
use halite_protocol::message::{self, Message, SignedJob};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Message::Job(job)) = message::decode(data) {
        let _ = job.verify(&IdentityKey::from_seed(&[1; 32]).public());
    }
    let job = SignedJob { body: data.to_vec(), signature: vec![0; 64], start_by_ms: None };
    let _ = job.verify(&IdentityKey::from_seed(&[1; 32]).public());
});
