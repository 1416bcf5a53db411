//! Subnet targets (`S@`, `-S`): an address, or a network as Python's `ipaddress.ip_network`
//! reads it (`10.0.0.0/24`, `10.0.0.0/255.255.255.0`, `fd00::/8`), matched against a minion's
//! `ipv4` or `ipv6` grain, as Salt's `ipcidr` matcher does. A network whose address has bits set
//! past its prefix is refused (Salt logs it and matches nothing).

use std::net::IpAddr;

use crate::{Expr, TargetError};

/// An address range, or one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    network: IpAddr,
    prefix: u32,
}

impl Subnet {
    pub(crate) fn parse(text: &str) -> Result<Subnet, TargetError> {
        let bad = || TargetError::BadSubnet(text.to_owned());
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| bad())?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                digits.parse::<u32>().ok().filter(|p| *p <= bits).ok_or_else(bad)?
            }
            // IPv4 networks may give a netmask or a host mask instead of a length.
            Some(mask) => match (network, mask.parse::<std::net::Ipv4Addr>()) {
                (IpAddr::V4(_), Ok(mask)) => mask_length(u32::from(mask)).ok_or_else(bad)?,
                _ => return Err(bad()),
            },
        };
        let subnet = Subnet { network, prefix };
        if subnet.host_bits(network) != 0 {
            let network = format!("{}/{prefix}", subnet.first());
            return Err(TargetError::HostBits { given: text.to_owned(), network });
        }
        Ok(subnet)
    }

    /// Whether `address` (as a grain holds it) lies in this subnet.
    pub(crate) fn holds(&self, address: &str) -> bool {
        let Ok(address) = address.parse::<IpAddr>() else { return false };
        match (self.network, address) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                // `::/0` leaves no network bits: a shift by 128 would overflow.
                let network = |a: IpAddr| self.value(a).checked_shr(self.host_count()).unwrap_or(0);
                network(address) == network(self.network)
            }
            _ => false,
        }
    }

    fn bits(&self) -> u32 {
        if self.network.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// How many low bits are the host's.
    fn host_count(&self) -> u32 {
        self.bits() - self.prefix
    }

    fn value(&self, address: IpAddr) -> u128 {
        match address {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        }
    }

    fn host_bits(&self, address: IpAddr) -> u128 {
        let host = self.host_count();
        if host == 0 {
            0
        } else {
            self.value(address) & (u128::MAX >> (128 - host))
        }
    }

    /// The network's first address.
    fn first(&self) -> IpAddr {
        let value = self.value(self.network) & !(self.host_bits(self.network));
        match self.network {
            IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from(value as u32)),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(value)),
        }
    }
}

/// The prefix length of a netmask (`255.255.255.0`: 24) or a host mask (`0.0.0.255`: 24).
fn mask_length(mask: u32) -> Option<u32> {
    let ones = mask.leading_ones();
    if mask.checked_shl(ones).unwrap_or(0) == 0 {
        return Some(ones);
    }
    let zeros = mask.leading_zeros();
    (mask.checked_shl(zeros).unwrap_or(0) == u32::MAX.checked_shl(zeros).unwrap_or(0)).then_some(zeros)
}

pub(crate) fn subnet(text: &str) -> Result<Expr, TargetError> {
    Subnet::parse(text).map(Expr::Subnet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_read_as_pythons_ipaddress_reads_them() {
        let prefix = |text: &str| Subnet::parse(text).map(|s| s.prefix);
        assert_eq!(prefix("10.0.0.0/24"), Ok(24));
        assert_eq!(prefix("10.0.0.0/255.255.255.0"), Ok(24));
        assert_eq!(prefix("10.0.0.0/0.0.0.255"), Ok(24));
        assert_eq!(prefix("10.1.2.3"), Ok(32));
        assert_eq!(prefix("fd00::/8"), Ok(8));
        assert_eq!(prefix("0.0.0.0/0"), Ok(0));
        // Every address of its family is in a /0.
        assert!(Subnet::parse("::/0").unwrap().holds("fd00::1") && !Subnet::parse("::/0").unwrap().holds("10.0.0.1"));
        assert!(Subnet::parse("0.0.0.0/0").unwrap().holds("10.0.0.1"));
        let host_bits = Subnet::parse("10.1.2.3/24").unwrap_err();
        assert!(host_bits.to_string().contains("the network is 10.1.2.0/24"), "{host_bits}");
        for bad in ["10.0.0.0/33", "nope", "10.0.0.0/x", "10.0.0.0/255.0.255.0", "fd00::/255.0.0.0", "10.0.0.0/"] {
            assert!(matches!(Subnet::parse(bad), Err(TargetError::BadSubnet(_))), "{bad}");
        }
    }
}
