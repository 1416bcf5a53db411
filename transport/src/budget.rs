//! Byte accounting for the router's queues: a count of queued messages says nothing about
//! memory when one message may be 16 MiB, so both directions are also bounded in bytes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

/// Bytes of received messages waiting for the socket's owner, shared by every connection of a
/// router. A connection waits (and stops reading) while the budget is spent.
#[derive(Debug, Clone)]
pub(crate) struct InboundBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

impl InboundBudget {
    pub(crate) fn new(total: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        InboundBudget { permits: Arc::new(Semaphore::new(total)), total }
    }

    /// What a message of `bytes` is charged (a message larger than the whole budget is charged
    /// the whole budget, so it still passes, alone).
    pub(crate) fn charge(&self, bytes: usize) -> u32 {
        u32::try_from(bytes.min(self.total)).unwrap_or(u32::MAX)
    }

    /// Waits until `charge` bytes are free and takes them.
    pub(crate) async fn take(&self, charge: u32) {
        if let Ok(permit) = self.permits.acquire_many(charge).await {
            permit.forget();
        }
    }

    /// Gives back what a message was charged once its owner took it.
    pub(crate) fn give_back(&self, charge: u32) {
        self.permits.add_permits(charge as usize);
    }
}

/// Bytes queued for one peer and not yet handed to its connection.
#[derive(Debug, Clone, Default)]
pub(crate) struct OutboundBytes(Arc<AtomicUsize>);

impl OutboundBytes {
    /// Reserves `bytes` if the queue holds less than `limit` (an empty queue always takes one
    /// message, however large, so nothing is refused only for its size).
    pub(crate) fn reserve(&self, bytes: usize, limit: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued == 0 || queued.saturating_add(bytes) <= limit).then_some(queued.saturating_add(bytes))
            })
            .is_ok()
    }

    /// Releases what a message reserved once its connection took it, or it was refused.
    pub(crate) fn release(&self, bytes: usize) {
        let _ = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| Some(queued.saturating_sub(bytes)));
    }
}

/// Total length of a message's parts.
pub(crate) fn message_bytes(parts: &[Vec<u8>]) -> usize {
    parts.iter().map(Vec::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outbound_queue_is_bounded_in_bytes_but_always_takes_one() {
        let queued = OutboundBytes::default();
        assert!(queued.reserve(100, 10), "an empty queue takes any one message");
        assert!(!queued.reserve(1, 10));
        queued.release(100);
        assert!(queued.reserve(6, 10) && queued.reserve(4, 10));
        assert!(!queued.reserve(1, 10));
    }

    #[tokio::test]
    async fn inbound_bytes_wait_until_given_back() {
        let budget = InboundBudget::new(10);
        let charge = budget.charge(8);
        budget.take(charge).await;
        let second = budget.charge(1_000);
        assert_eq!(second, 10, "larger than the budget: charged the whole budget");
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(20), budget.take(second)).await;
        assert!(waiting.is_err(), "the budget is spent");
        budget.give_back(charge);
        budget.take(second).await;
    }
}
