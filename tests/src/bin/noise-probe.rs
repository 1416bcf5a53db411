//! A minion's side of the Noise handshake driven over stdin/stdout, so a foreign ZMTP stack
//! (pyzmq in `tests/interop/verdict_probe.py`) can carry a real handshake to the master:
//! prints message 1 (hex), reads message 2, prints message 3, reads the verdict's parts
//! (comma-separated hex) and prints what it says: `accepted`, `pending: …` or `refused: …`.
//!
//! `noise-probe <master public key hex> <minion id> <key seed byte>`

use std::io::BufRead;

use halite_protocol::hex;
use halite_protocol::identity::{IdentityKey, PublicIdentity};
use halite_protocol::noise::{Claim, HandshakeError, Initiator, LocalIdentity, MasterPin, Role, SessionConfig};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let [_, master, id, seed] = args.as_slice() else {
        return Err("usage: noise-probe <master key hex> <id> <seed byte>".into());
    };
    let master = hex::decode(master).ok_or("master key: not hex")?;
    let master = PublicIdentity::from_bytes(&master).map_err(|e| e.to_string())?;
    let seed: u8 = seed.parse().map_err(|_| "seed: a byte")?;
    let local = LocalIdentity::new(IdentityKey::from_seed(&[seed; 32])).map_err(|e| e.to_string())?;
    let claim = Claim::new(id, None).map_err(|e| e.to_string())?;
    let (initiator, msg1) =
        Initiator::start(&local, Role::Minion, claim, MasterPin::Key(master), SessionConfig::default())
            .map_err(|e| e.to_string())?;
    println!("{}", hex::encode(&msg1));
    let mut lines = std::io::stdin().lock().lines();
    let mut next = || lines.next().and_then(Result::ok).ok_or_else(|| "stdin closed".to_owned());
    let msg2 = hex::decode(next()?.trim()).ok_or("message 2: not hex")?;
    let (awaiting, msg3) = initiator.read_response(&msg2).map_err(|e| e.to_string())?;
    println!("{}", hex::encode(&msg3));
    let parts: Option<Vec<Vec<u8>>> = next()?.trim().split(',').map(hex::decode).collect();
    let parts = parts.ok_or("verdict: not hex")?;
    match awaiting.read_verdict(&parts, std::time::Instant::now()) {
        Ok(_) => println!("accepted"),
        Err(HandshakeError::Pending(reason)) => println!("pending: {reason}"),
        Err(error) => println!("refused: {error}"),
    }
    Ok(())
}
