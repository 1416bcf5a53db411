//! Arbitrary bytes into a ZMTP router connection: raw, after a valid handshake, and after
//! authentication. Must never panic; limits bound every allocation.
#![no_main]

use std::time::{Duration, Instant};

use halite_protocol::zmtp::{Connection, Limits, SocketType};
use libfuzzer_sys::fuzz_target;

fn preamble(now: Instant) -> Vec<u8> {
    let mut dealer = Connection::new(SocketType::Dealer, Vec::new(), Limits::default(), None, now);
    let mut router = Connection::new(SocketType::Router, Vec::new(), Limits::default(), None, now);
    let greeting = router.poll_transmit().unwrap_or_default();
    dealer.handle_input(&greeting, now);
    dealer.poll_transmit().unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let now = Instant::now();
    let preamble = preamble(now);
    for (prefix, authenticated) in [(&[][..], false), (&preamble[..], false), (&preamble[..], true)] {
        let mut router = Connection::new(SocketType::Router, Vec::new(), Limits::default(), None, now);
        router.handle_input(prefix, now);
        if authenticated {
            router.set_authenticated();
        }
        // Split the input at a data-chosen point to exercise resumption across reads.
        let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
        router.handle_input(&data[..split], now);
        router.handle_input(&data[split..], now);
        router.handle_timeout(now + Duration::from_secs(3600));
        while router.poll_event().is_some() {}
        let _ = router.poll_transmit();
    }
});
