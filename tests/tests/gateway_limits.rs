//! The HTTP gateway under clients that hold connections: slow headers, silence, and more
//! connections than the master has descriptors to spare. They are cut, and the master goes on
//! serving its own clients.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use halite_tests::{http, wait_for, Cluster};

/// Whether the server has closed `stream` (a read sees the end, or an error).
fn closed(mut stream: &TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

#[test]
fn slow_silent_and_surplus_gateway_connections_are_cut_and_the_master_keeps_serving() {
    halite_transport::raise_open_files(Some(4096)).ok();
    // 256 descriptors: the gateway keeps at most 64 connections.
    let config = "[gateway]\nlisten = \"127.0.0.1:0\"\nheader_timeout_secs = 2\nidle_timeout_secs = 3\n";
    let cluster = Cluster::start_with_open_files(config, 256);
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();

    // Slow loris: headers a byte at a time, never finished.
    let mut slow: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    for stream in &mut slow {
        stream.write_all(b"GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\n").unwrap();
    }
    // Silent: 300 connections that send nothing, far more than the cap.
    let silent: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(&addr).ok()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let open = silent.iter().filter(|s| !closed(s)).count();
    assert!(open <= 64, "{open} silent connections kept; the cap is 64");
    assert!(open > 0, "some are served");
    // The master's own listener still has descriptors: the CLI works.
    let run = cluster.cli(&["key", "list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    // The slow headers are cut after header_timeout_secs though they keep trickling in.
    let started = Instant::now();
    let mut cut = vec![false; slow.len()];
    while started.elapsed() < Duration::from_secs(6) && cut.iter().any(|c| !c) {
        for (i, stream) in slow.iter_mut().enumerate() {
            if !cut[i] && (stream.write_all(b"X").is_err() || closed(stream)) {
                cut[i] = true;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(cut.iter().all(|c| *c), "slow-header connections still open after {:?}", started.elapsed());
    // The silent ones are cut after idle_timeout_secs.
    wait_for("the silent connections to be closed", Duration::from_secs(8), || silent.iter().all(closed).then_some(()));
    // And the gateway serves again.
    let answer = http::request("GET", &addr, "/v1/openapi.json", None, None);
    assert_eq!(answer.status, 200);
}
