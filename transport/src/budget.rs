//! Byte accounting for the router's inbound queue: a count of queued messages says nothing
//! about memory when one message may be 16 MiB, so it is also bounded in bytes (the outbound
//! side is bounded in [`crate::outbound`]).

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

/// Total length of a message's parts.
pub(crate) fn message_bytes(parts: &[Vec<u8>]) -> usize {
    parts.iter().map(Vec::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

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
