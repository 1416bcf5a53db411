//! A sliding anti-replay window over explicit nonces (the scheme of RFC 6479, one word wide).

use super::SessionError;

/// How many nonces below the highest seen are still accepted once, out of order.
pub(crate) const WINDOW: u64 = 128;

#[derive(Debug, Default)]
pub(crate) struct ReplayWindow {
    /// Highest nonce accepted so far, if any.
    highest: Option<u64>,
    /// Bit `i` set: nonce `highest - i` was accepted.
    seen: u128,
}

impl ReplayWindow {
    /// Whether `nonce` would be accepted. Does not record it: call [`ReplayWindow::insert`] only
    /// after the message authenticated, so forged nonces cannot advance the window.
    pub(crate) fn check(&self, nonce: u64) -> Result<(), SessionError> {
        let Some(highest) = self.highest else { return Ok(()) };
        if nonce > highest {
            return Ok(());
        }
        let age = highest - nonce;
        if age >= WINDOW {
            return Err(SessionError::TooOld(nonce));
        }
        if self.seen & (1u128 << age) != 0 {
            return Err(SessionError::Replayed(nonce));
        }
        Ok(())
    }

    pub(crate) fn insert(&mut self, nonce: u64) {
        match self.highest {
            None => {
                self.highest = Some(nonce);
                self.seen = 1;
            }
            Some(highest) if nonce > highest => {
                let shift = nonce - highest;
                self.seen = if shift >= WINDOW { 0 } else { self.seen << shift };
                self.seen |= 1;
                self.highest = Some(nonce);
            }
            Some(highest) => {
                let age = highest - nonce;
                if age < WINDOW {
                    self.seen |= 1u128 << age;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_each_nonce_once_within_the_window() {
        let mut w = ReplayWindow::default();
        for n in [5, 3, 9, 4] {
            assert_eq!(w.check(n), Ok(()));
            w.insert(n);
        }
        assert_eq!(w.check(3), Err(SessionError::Replayed(3)));
        assert_eq!(w.check(9), Err(SessionError::Replayed(9)));
        assert_eq!(w.check(8), Ok(()));
        w.insert(9 + WINDOW);
        assert_eq!(w.check(8), Err(SessionError::TooOld(8)));
        assert_eq!(w.check(10), Ok(()));
    }
}
