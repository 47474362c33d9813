//! Receipt sinks that commands combine: a queue the command drains itself (to print or
//! tally receipts in emission order) and a fan-out to several sinks. The JSON Lines file
//! sink is in [`crate::receipts_file`].

use std::sync::{Arc, Mutex, PoisonError};

use heart_fleet_core::HeartReceipt;
use heart_fleet_core::receipt::ReceiptSink;

/// Collects receipts for the command to drain with [`ReceiptQueue::drain`]. The fleet owns
/// the sink; the command keeps the [`ReceiptQueue`] handle.
#[derive(Debug, Default)]
pub struct QueueSink {
    queue: Arc<Mutex<Vec<HeartReceipt>>>,
}

/// The command's end of a [`QueueSink`].
#[derive(Debug, Clone, Default)]
pub struct ReceiptQueue {
    queue: Arc<Mutex<Vec<HeartReceipt>>>,
}

impl QueueSink {
    /// A sink and the handle that drains it.
    pub fn new() -> (QueueSink, ReceiptQueue) {
        let queue = Arc::new(Mutex::new(Vec::new()));
        (QueueSink { queue: Arc::clone(&queue) }, ReceiptQueue { queue })
    }
}

impl ReceiptSink for QueueSink {
    fn emit(&mut self, receipt: &HeartReceipt) {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push(receipt.clone());
    }
}

impl ReceiptQueue {
    /// Takes every receipt emitted since the last drain, oldest first.
    pub fn drain(&self) -> Vec<HeartReceipt> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Sends each receipt to every inner sink, in order.
#[derive(Default)]
pub struct FanoutSink {
    sinks: Vec<Box<dyn ReceiptSink>>,
}

impl FanoutSink {
    /// A fan-out to `sinks`.
    pub fn new(sinks: Vec<Box<dyn ReceiptSink>>) -> FanoutSink {
        FanoutSink { sinks }
    }
}

impl ReceiptSink for FanoutSink {
    fn emit(&mut self, receipt: &HeartReceipt) {
        for sink in &mut self.sinks {
            sink.emit(receipt);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use heart_fleet_core::{HeartEvent, Timestamp};

    #[test]
    fn fanout_reaches_every_queue_in_order() {
        let (a, qa) = QueueSink::new();
        let (b, qb) = QueueSink::new();
        let mut fan = FanoutSink::new(vec![Box::new(a), Box::new(b)]);
        let r1 = HeartReceipt::new(HeartEvent::Acquired, "r", "w", Some(Timestamp(1000)), None, Timestamp(0));
        let r2 = HeartReceipt::new(HeartEvent::Released, "r", "w", None, None, Timestamp(5));
        fan.emit(&r1);
        fan.emit(&r2);
        assert_eq!(qa.drain(), vec![r1.clone(), r2.clone()]);
        assert_eq!(qb.drain(), vec![r1, r2]);
        assert!(qa.drain().is_empty());
    }
}
