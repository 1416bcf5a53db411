//! Grains: facts about the host, read once at start-up from the kernel and /etc.

use std::collections::BTreeMap;
use std::fs;

use halite_protocol::message::Value;
use serde_json::json;

/// Collects the host's grains, then overlays `static_grains` (from the minion config).
pub fn collect(static_grains: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut grains = BTreeMap::new();
    let os_release = fs::read_to_string("/etc/os-release").or_else(|_| fs::read_to_string("/usr/lib/os-release"));
    let os_release = parse_os_release(&os_release.unwrap_or_default());
    let os = os_release.get("NAME").cloned().unwrap_or_else(|| std::env::consts::OS.to_owned());
    let id = os_release.get("ID").cloned().unwrap_or_default();
    let like = os_release.get("ID_LIKE").cloned().unwrap_or_default();
    grains.insert("os".into(), json!(os.split_whitespace().next().unwrap_or(&os)));
    grains.insert("os_family".into(), json!(os_family(&id, &like)));
    grains.insert("osrelease".into(), json!(os_release.get("VERSION_ID").cloned().unwrap_or_default()));
    grains.insert("kernel".into(), json!(read_trimmed("/proc/sys/kernel/ostype").unwrap_or_else(|| "Linux".into())));
    grains.insert("kernelrelease".into(), json!(read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default()));
    let hostname = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
    let domain = read_trimmed("/proc/sys/kernel/domainname").filter(|d| !d.is_empty() && d != "(none)");
    grains.insert("fqdn".into(), json!(domain.map_or(hostname.clone(), |d| format!("{hostname}.{d}"))));
    grains.insert("hostname".into(), json!(hostname));
    let (ipv4, ipv6) = addresses();
    grains.insert("ipv4".into(), json!(ipv4));
    grains.insert("ipv6".into(), json!(ipv6));
    grains.insert("num_cpus".into(), json!(std::thread::available_parallelism().map_or(1, |n| n.get())));
    grains.insert("mem_total".into(), json!(mem_total_mib()));
    grains.insert("machine_id".into(), json!(read_trimmed("/etc/machine-id").unwrap_or_default()));
    // The cloud instance this host is, where cloud-init ran (its instance-id: a Nova server's
    // UUID on OpenStack): how an orchestrator tells the guest of one server from another's.
    if let Some(instance) = read_trimmed("/var/lib/cloud/data/instance-id").filter(|id| !id.is_empty()) {
        grains.insert("cloud_instance_id".into(), json!(instance));
    }
    grains.insert("cpuarch".into(), json!(std::env::consts::ARCH));
    grains.insert("init".into(), json!(init_system()));
    for (key, value) in static_grains {
        grains.insert(key.clone(), value.clone());
    }
    grains
}

/// The init system: `systemd` when it is PID 1, `openrc` when OpenRC is installed, else
/// `sysvinit`.
pub fn init_system() -> &'static str {
    if std::path::Path::new("/run/systemd/system").is_dir() {
        "systemd"
    } else if std::path::Path::new("/sbin/openrc").exists() || std::path::Path::new("/sbin/rc-service").exists() {
        "openrc"
    } else {
        "sysvinit"
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('"').trim_matches('\'').to_owned()))
        .collect()
}

/// Salt's os_family names.
fn os_family(id: &str, like: &str) -> &'static str {
    let ids: Vec<&str> = std::iter::once(id).chain(like.split_whitespace()).collect();
    let has = |name: &str| ids.contains(&name);
    if has("debian") || has("ubuntu") {
        "Debian"
    } else if has("rhel") || has("fedora") || has("centos") {
        "RedHat"
    } else if has("alpine") {
        "Alpine"
    } else if has("suse") || has("opensuse") {
        "Suse"
    } else if has("arch") {
        "Arch"
    } else {
        "Linux"
    }
}

fn addresses() -> (Vec<String>, Vec<String>) {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for ifaddr in addrs {
            let Some(address) = ifaddr.address else { continue };
            if let Some(a) = address.as_sockaddr_in() {
                v4.push(a.ip().to_string());
            } else if let Some(a) = address.as_sockaddr_in6() {
                v6.push(a.ip().to_string());
            }
        }
    }
    v4.sort();
    v4.dedup();
    v6.sort();
    v6.dedup();
    (v4, v6)
}

fn mem_total_mib() -> u64 {
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grains_describe_this_host_and_static_grains_win() {
        let grains = collect(&BTreeMap::from([("role".into(), json!("web")), ("os".into(), json!("Custom"))]));
        assert_eq!(grains["role"], "web");
        assert_eq!(grains["os"], "Custom");
        assert_eq!(grains["kernel"], "Linux");
        assert!(grains["num_cpus"].as_u64().unwrap() >= 1);
        assert!(grains["mem_total"].as_u64().unwrap() > 0);
        assert!(grains["ipv4"].as_array().unwrap().iter().any(|ip| ip == "127.0.0.1"));
    }

    #[test]
    fn os_family_follows_id_like() {
        assert_eq!(os_family("ubuntu", "debian"), "Debian");
        assert_eq!(os_family("rocky", "rhel centos fedora"), "RedHat");
        assert_eq!(os_family("alpine", ""), "Alpine");
    }
}
