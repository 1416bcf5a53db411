//! Admission control for connections that have not authenticated yet.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Counts unauthenticated connections per IP and in total. A [`Slot`] is held from accept
/// until the connection authenticates or closes, whichever comes first.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    inner: Arc<Mutex<Counts>>,
    max_total: usize,
    max_per_ip: usize,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

impl Admission {
    pub(crate) fn new(max_total: usize, max_per_ip: usize) -> Self {
        Admission { inner: Arc::default(), max_total, max_per_ip }
    }

    /// A slot for a new connection from `ip`, or `None` if a limit is reached.
    pub(crate) fn admit(&self, ip: IpAddr) -> Option<Slot> {
        let mut counts = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if counts.total >= self.max_total || from_ip >= self.max_per_ip {
            return None;
        }
        counts.total += 1;
        counts.per_ip.insert(ip, from_ip + 1);
        Some(Slot { admission: self.clone(), ip })
    }

    fn release(&self, ip: IpAddr) {
        let mut counts = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        counts.total -= 1;
        if let Some(n) = counts.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                counts.per_ip.remove(&ip);
            }
        }
    }
}

/// A held admission slot, released on drop.
#[derive(Debug)]
pub(crate) struct Slot {
    admission: Admission,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.release(self.ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_ip_and_total_and_releases_on_drop() {
        let a = Admission::new(3, 2);
        let ip1: IpAddr = [10, 0, 0, 1].into();
        let ip2: IpAddr = [10, 0, 0, 2].into();
        let s1 = a.admit(ip1).unwrap();
        let _s2 = a.admit(ip1).unwrap();
        assert!(a.admit(ip1).is_none());
        let _s3 = a.admit(ip2).unwrap();
        assert!(a.admit(ip2).is_none());
        drop(s1);
        assert!(a.admit(ip1).is_some());
    }
}
