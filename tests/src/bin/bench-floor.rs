//! The floor of a sequential job on this machine (see `halite_tests::floor`): client → master
//! → minion → master → client over loopback TCP with one signature, one verification, one
//! SQLite commit and one synced journal append, nothing else.
//!
//! `cargo build --release --bins && HALITE_BIN_DIR=target/release ./target/release/bench-floor [--jobs 5000]`
//! Prints the median and spread of 5 runs and writes `target/bench-floor.json`.

// A benchmark binary: any failure is a broken run, reported by the panic message.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use halite_tests::bench::percentile;
use serde_json::json;

const RUNS: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--role") {
        return halite_tests::floor::serve_role(&args);
    }
    let jobs: u32 = match args.iter().position(|a| a == "--jobs") {
        Some(i) => args.get(i + 1).and_then(|n| n.parse().ok()).expect("--jobs N"),
        None => 5_000,
    };
    let bins = halite_tests::bin_dir();
    let dir = std::env::temp_dir().join(format!("halite-floor-{}", std::process::id()));
    let mut rates: Vec<f64> = (0..RUNS).map(|_| halite_tests::floor::measure(&bins, &dir, jobs)).collect();
    let _ = std::fs::remove_dir_all(&dir);
    let (low, median, high) = (percentile(&mut rates, 0.0), percentile(&mut rates, 0.5), percentile(&mut rates, 1.0));
    println!("floor: sequential jobs/s {median:.0} (median of {RUNS} runs of {jobs}; {low:.0}–{high:.0})");
    let report = json!({ "jobs_per_run": jobs, "runs": rates, "median_jobs_per_s": median });
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-floor.json");
    std::fs::write(out, serde_json::to_string_pretty(&report).unwrap()).unwrap();
}
