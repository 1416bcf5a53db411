//! What the benchmark binaries (`src/bin/bench-*.rs`) share: percentiles, process memory, and
//! finding and restarting minion processes.

use std::process::Command;
use std::time::Duration;

use crate::{wait_for, Cluster};

/// The `p` quantile (0.5 for the median, 0.99 for p99) of samples, nearest-rank.
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[index]
}

/// A process's resident set size in KiB (0 when it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time a process has used so far (user and system), from `/proc/<pid>/stat`; zero when it
/// is gone. Clock-tick resolution (usually 10 ms): measure over many operations.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count after its end.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok())).sum();
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100).max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / per_second)
}

/// The pids of the cluster's minion processes.
pub fn minion_pids(cluster: &Cluster) -> Vec<u32> {
    let out = Command::new("pgrep").args(["-f", &format!("{}/", cluster.dir.display())]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default().contains("minion.toml")
        })
        .collect()
}

/// Stops a minion and waits until the master has seen it go, so a restart is a cold start.
pub fn stop_and_wait_offline(cluster: &mut Cluster, id: &str) {
    cluster.stop_minion(id, false);
    wait_for(&format!("{id} offline"), Duration::from_secs(10), || {
        (!cluster.connected().iter().any(|c| c == id)).then_some(())
    });
}

/// How many minions one master can hold a connection to, for `wanted`: each connection is a
/// descriptor, and a process may not open more than its hard limit. The hard limit is raised to
/// what `wanted` needs when this process may (root with `CAP_SYS_RESOURCE`); what it is is
/// returned beside the answer. The master keeps 512 descriptors for itself and refuses
/// connections past the rest; 512 more are left for clients and reconnections in flight.
pub fn minions_per_process(wanted: usize) -> (usize, u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    const ROOM: u64 = 1024;
    let needed = wanted as u64 + ROOM;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    if hard < needed && setrlimit(Resource::RLIMIT_NOFILE, soft.max(needed), needed).is_ok() {
        return (wanted, needed);
    }
    (wanted.min(hard.saturating_sub(ROOM) as usize), hard)
}
