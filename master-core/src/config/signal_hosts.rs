//! Where the signal relay may send: the operator's `[deploy] signal_hosts` allowlist.
//!
//! A deployment's `signal_id` URL comes from whoever may deploy to one server; without a
//! limit, the master would send requests for them from its own network position (to a
//! loopback admin API, a cloud metadata service, anything on the private network). So:
//!
//! - the URL's host must be listed: a host name or IP address, optionally with `:port`, or an
//!   IP address inside a listed CIDR range (`10.0.0.0/24`, `fd00::/8`);
//! - every address the host resolves to must be public, or explicitly listed (an IP entry or a
//!   CIDR range covering it): a listed name that resolves to loopback, link-local, private,
//!   unspecified, multicast or other special addresses is refused unless that address is
//!   listed too;
//! - the addresses checked are the ones connected to (see `halite-master`'s `relay.rs`), so a name that
//!   resolves differently a moment later (DNS rebinding) reaches nothing unchecked.
//!
//! An empty list (the default) relays nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

/// The parsed allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignalHosts {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A host name (lower case), any port unless one is given.
    Name { host: String, port: Option<u16> },
    /// One address, any port unless one is given.
    Ip { ip: IpAddr, port: Option<u16> },
    /// A CIDR range, any port.
    Net { ip: IpAddr, prefix: u8 },
}

/// A signal URL the allowlist admits: where to connect, before resolving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The URL's host (a name, or an address without brackets).
    pub host: String,
    /// The URL's port, or its scheme's default.
    pub port: u16,
    /// The address when the host is one (nothing to resolve).
    pub literal: Option<IpAddr>,
}

/// Why the relay refuses a URL or an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No allowlist: the relay is off.
    #[error("the signal relay is off: [deploy] signal_hosts in the master's config lists no hosts")]
    Off,
    /// Not an http(s) URL with a host.
    #[error("signal_id is not an http:// or https:// URL with a host")]
    BadUrl,
    /// The host (and port) is not listed.
    #[error("{0} is not listed in [deploy] signal_hosts in the master's config")]
    NotListed(String),
    /// The host resolves to an address that is special (loopback, private, ...) and unlisted.
    #[error("{host} resolves to {ip}, a loopback, link-local, private or otherwise special address not listed in [deploy] signal_hosts")]
    SpecialAddress {
        /// The host as named.
        host: String,
        /// What it resolved to.
        ip: IpAddr,
    },
}

impl SignalHosts {
    /// Parses the config list; the error names the entry (`signal_hosts[i]`).
    pub fn parse(list: &[String]) -> Result<Self, BadSignalHost> {
        let entries = list
            .iter()
            .enumerate()
            .map(|(index, text)| {
                Entry::parse(text.trim()).map_err(|why| BadSignalHost { index, text: text.clone(), why })
            })
            .collect::<Result<_, _>>()?;
        Ok(SignalHosts { entries })
    }

    /// Whether a URL's host and port are listed: where to connect if so.
    pub fn admit_url(&self, url: &str) -> Result<Destination, Refused> {
        if self.entries.is_empty() {
            return Err(Refused::Off);
        }
        let url = Url::parse(url).map_err(|_| Refused::BadUrl)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused::BadUrl);
        }
        let port = url.port_or_known_default().ok_or(Refused::BadUrl)?;
        // The URL parser already wrote every IPv4 spelling (`127.1`, `2130706433`) as a dotted
        // quad and put IPv6 addresses in brackets.
        let raw = url.host_str().filter(|h| !h.is_empty()).ok_or(Refused::BadUrl)?;
        let (host, literal) = match raw.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => (ip.to_string(), Some(unmapped(ip))),
            Err(_) => (raw.trim_end_matches('.').to_ascii_lowercase(), None),
        };
        let listed = self.entries.iter().any(|entry| match (entry, literal) {
            (Entry::Name { host: listed, port: p }, None) => *listed == host && p.is_none_or(|p| p == port),
            (Entry::Ip { ip, port: p }, Some(literal)) => *ip == literal && p.is_none_or(|p| p == port),
            (Entry::Net { ip, prefix }, Some(literal)) => in_net(literal, *ip, *prefix),
            _ => false,
        });
        if !listed {
            let shown = if literal.is_some_and(|ip| ip.is_ipv6()) {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            return Err(Refused::NotListed(shown));
        }
        if let Some(ip) = literal {
            self.admit_address(&host, ip)?;
        }
        Ok(Destination { host, port, literal })
    }

    /// Whether the relay may connect to `ip` (one of `host`'s addresses): a public address,
    /// or one the list names explicitly.
    pub fn admit_address(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        let ip = unmapped(ip);
        let listed = self.entries.iter().any(|entry| match entry {
            Entry::Ip { ip: listed, .. } => *listed == ip,
            Entry::Net { ip: net, prefix } => in_net(ip, *net, *prefix),
            Entry::Name { .. } => false,
        });
        if listed || !special(ip) {
            Ok(())
        } else {
            Err(Refused::SpecialAddress { host: host.to_owned(), ip })
        }
    }
}

/// A `[deploy] signal_hosts` entry that is not a host, address or range: which, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signal_hosts[{index}]: {text:?}: {why}")]
pub struct BadSignalHost {
    index: usize,
    text: String,
    why: EntryError,
}

/// What is wrong with one `signal_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum EntryError {
    #[error("empty")]
    Empty,
    #[error("not an address/prefix CIDR range")]
    NotCidr,
    #[error("prefix length must be 0 to {0}")]
    Prefix(u8),
    #[error("port {0:?} is not a number 0 to 65535")]
    Port(String),
    #[error("not a host name, host:port, IP address or CIDR range")]
    NotHost,
}

impl Entry {
    fn parse(text: &str) -> Result<Entry, EntryError> {
        if text.is_empty() {
            return Err(EntryError::Empty);
        }
        if let Some((addr, prefix)) = text.split_once('/') {
            let ip: IpAddr = addr.parse().map_err(|_| EntryError::NotCidr)?;
            let ip = unmapped(ip);
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix.parse().ok().filter(|p| *p <= max).ok_or(EntryError::Prefix(max))?;
            return Ok(Entry::Net { ip, prefix });
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Entry::Ip { ip: unmapped(ip), port: None });
        }
        if let Ok(addr) = text.parse::<std::net::SocketAddr>() {
            return Ok(Entry::Ip { ip: unmapped(addr.ip()), port: Some(addr.port()) });
        }
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port.parse::<u16>().map_err(|_| EntryError::Port(port.to_owned()))?)),
            None => (text, None),
        };
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty() && label.len() <= 63 && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !valid {
            return Err(EntryError::NotHost);
        }
        Ok(Entry::Name { host: host.to_ascii_lowercase(), port })
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (so `::ffff:127.0.0.1` is loopback).
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// Addresses the relay never reaches unless listed: anything not globally routable.
pub fn special(ip: IpAddr) -> bool {
    match unmapped(ip) {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> bool {
    const RANGES: &[(Ipv4Addr, u8)] = &[
        (Ipv4Addr::new(0, 0, 0, 0), 8),       // "this network", unspecified
        (Ipv4Addr::new(10, 0, 0, 0), 8),      // RFC 1918
        (Ipv4Addr::new(100, 64, 0, 0), 10),   // shared address space (carrier-grade NAT)
        (Ipv4Addr::new(127, 0, 0, 0), 8),     // loopback
        (Ipv4Addr::new(169, 254, 0, 0), 16),  // link-local (cloud metadata services)
        (Ipv4Addr::new(172, 16, 0, 0), 12),   // RFC 1918
        (Ipv4Addr::new(192, 0, 0, 0), 24),    // IETF protocol assignments
        (Ipv4Addr::new(192, 0, 2, 0), 24),    // documentation
        (Ipv4Addr::new(192, 88, 99, 0), 24),  // 6to4 relay anycast
        (Ipv4Addr::new(192, 168, 0, 0), 16),  // RFC 1918
        (Ipv4Addr::new(198, 18, 0, 0), 15),   // benchmarking
        (Ipv4Addr::new(198, 51, 100, 0), 24), // documentation
        (Ipv4Addr::new(203, 0, 113, 0), 24),  // documentation
        (Ipv4Addr::new(224, 0, 0, 0), 4),     // multicast
        (Ipv4Addr::new(240, 0, 0, 0), 4),     // reserved, broadcast
    ];
    RANGES.iter().any(|(net, prefix)| in_net(IpAddr::V4(ip), IpAddr::V4(*net), *prefix))
}

fn special_v6(ip: Ipv6Addr) -> bool {
    const RANGES: &[(Ipv6Addr, u8)] = &[
        (Ipv6Addr::UNSPECIFIED, 128),
        (Ipv6Addr::LOCALHOST, 128),
        (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96), // IPv4-compatible (deprecated)
        (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96), // NAT64: reaches IPv4 addresses
        (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // local-use NAT64
        (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64), // discard
        (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23), // IETF protocol assignments (Teredo, ...)
        (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation
        (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16), // 6to4: reaches IPv4 addresses
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local (ULA)
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
        (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), // site-local (deprecated)
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast
    ];
    RANGES.iter().any(|(net, prefix)| in_net(IpAddr::V6(ip), IpAddr::V6(*net), *prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[&str]) -> SignalHosts {
        SignalHosts::parse(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn an_empty_list_relays_nothing() {
        assert_eq!(hosts(&[]).admit_url("https://heat.example.com/signal"), Err(Refused::Off));
    }

    #[test]
    fn only_listed_hosts_and_ports_are_admitted() {
        let list = hosts(&["heat.example.com", "api.example.org:8004", "203.0.113.7", "198.51.100.0/24"]);
        let ok = list.admit_url("https://Heat.Example.com./v1/signal").unwrap();
        assert_eq!((ok.host.as_str(), ok.port, ok.literal), ("heat.example.com", 443, None));
        assert!(list.admit_url("http://api.example.org:8004/x").is_ok());
        let refused = list.admit_url("http://api.example.org:8080/x").unwrap_err();
        assert_eq!(refused, Refused::NotListed("api.example.org:8080".into()));
        assert!(refused.to_string().contains("[deploy] signal_hosts"), "{refused}");
        // Listed addresses are admitted even though documentation ranges are special.
        assert!(list.admit_url("http://203.0.113.7:1234/x").is_ok());
        assert!(list.admit_url("http://198.51.100.99/x").is_ok());
        assert!(matches!(list.admit_url("http://evil.example.com/x"), Err(Refused::NotListed(_))));
        assert!(matches!(list.admit_url("http://heat.example.com.evil.net/x"), Err(Refused::NotListed(_))));
        assert_eq!(list.admit_url("ftp://heat.example.com/x"), Err(Refused::BadUrl));
        assert_eq!(list.admit_url("not a url"), Err(Refused::BadUrl));
    }

    #[test]
    fn loopback_is_refused_unless_listed_in_every_spelling() {
        let list = hosts(&["heat.example.com"]);
        for url in [
            "http://127.0.0.1:8080/admin",
            "http://127.1/admin",
            "http://2130706433/admin",
            "http://[::1]/admin",
            "http://[::ffff:127.0.0.1]/admin",
            "http://0.0.0.0/",
            "http://169.254.169.254/latest/meta-data",
        ] {
            assert!(matches!(list.admit_url(url), Err(Refused::NotListed(_))), "{url}");
        }
        let listed = hosts(&["127.0.0.1"]);
        let ok = listed.admit_url("http://127.0.0.1:8080/signal").unwrap();
        assert_eq!(ok.literal, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        // An address another spelling of the listed one is the same address.
        assert!(listed.admit_url("http://[::ffff:127.0.0.1]:8080/signal").is_ok());
        assert!(listed.admit_url("http://127.0.0.2/signal").is_err());
    }

    #[test]
    fn resolved_addresses_must_be_public_or_listed() {
        let list = hosts(&["heat.example.com", "10.1.0.0/16"]);
        assert!(list.admit_address("heat.example.com", "93.184.216.34".parse().unwrap()).is_ok());
        assert!(list.admit_address("heat.example.com", "2606:2800:220:1::1".parse().unwrap()).is_ok());
        assert!(list.admit_address("heat.example.com", "10.1.2.3".parse().unwrap()).is_ok());
        for special in [
            "127.0.0.1",
            "10.2.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
        ] {
            let refused = list.admit_address("heat.example.com", special.parse().unwrap()).unwrap_err();
            assert!(matches!(refused, Refused::SpecialAddress { .. }), "{special}");
            assert!(refused.to_string().contains("[deploy] signal_hosts"), "{refused}");
        }
    }

    #[test]
    fn bad_entries_are_named() {
        let err = SignalHosts::parse(&["heat".into(), "10.0.0.0/33".into()]).unwrap_err().to_string();
        assert!(err.starts_with("signal_hosts[1]: \"10.0.0.0/33\""), "{err}");
        assert!(SignalHosts::parse(&["heat:99999".into()]).unwrap_err().to_string().contains("port"));
        assert!(SignalHosts::parse(&["http://heat/".into()]).unwrap_err().to_string().contains("signal_hosts[0]"));
        assert!(SignalHosts::parse(&["".into()]).unwrap_err().to_string().contains("empty"));
        let v6 = hosts(&["[fd00::5]:8004", "fd00:1::/32"]);
        assert!(v6.admit_url("http://[fd00::5]:8004/x").is_ok());
        assert!(v6.admit_url("http://[fd00::5]:8005/x").is_err());
        assert!(v6.admit_url("http://[fd00:1::9]/x").is_ok());
    }
}
