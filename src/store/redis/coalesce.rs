//! The scan workers' reads, coalesced: while a batch of reads is on its way to Redis, the reads
//! that arrive meanwhile wait and then go out together as the next batch (one pipeline per
//! node for all of them), as client-side auto-pipelining does. On an idle link a read leaves at
//! once; under load each Redis node reads and answers one pipeline per batch instead of one per
//! message, and the client routes, wakes and parses per batch rather than per message.
//!
//! One batch is in flight at a time, bounded by a deadline: a batch that does not answer in
//! time fails its reads (as a read of its own would have) and the next batch leaves, so a slow
//! or dead node holds the reads queued behind it no longer than their own timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::Value;

use super::conn::{Item, Link, LinkError};

pub type Replies = Vec<Result<Vec<Value>, LinkError>>;

/// Where a read's replies arrive; the scan worker that submitted it sleeps on it.
#[derive(Default)]
pub struct Slot {
    replies: Mutex<Option<Replies>>,
    done: Condvar,
    /// The reader stopped waiting: a batch not yet sent leaves this read out.
    abandoned: AtomicBool,
}

impl Slot {
    /// The replies, or `None` past `deadline` (the read is then abandoned).
    pub fn wait(&self, deadline: Instant) -> Option<Replies> {
        let mut replies = self.replies.lock();
        while replies.is_none() {
            if self.done.wait_until(&mut replies, deadline).timed_out() {
                break;
            }
        }
        let out = replies.take();
        if out.is_none() {
            self.abandoned.store(true, Ordering::Relaxed);
        }
        out
    }

    fn fill(&self, replies: Replies) {
        *self.replies.lock() = Some(replies);
        self.done.notify_one();
    }
}

struct Waiting {
    items: Vec<Item>,
    slot: Arc<Slot>,
}

pub struct Coalescer {
    link: Arc<Link>,
    runtime: tokio::runtime::Handle,
    queue: Mutex<Vec<Waiting>>,
    /// A task is sending the queue's batches.
    sending: AtomicBool,
    /// Longest wait for one batch.
    deadline: Duration,
}

impl Coalescer {
    pub fn new(
        link: Arc<Link>,
        runtime: tokio::runtime::Handle,
        deadline: Duration,
    ) -> Arc<Coalescer> {
        Arc::new(Coalescer {
            link,
            runtime,
            queue: Mutex::new(Vec::new()),
            sending: AtomicBool::new(false),
            deadline,
        })
    }

    /// Queues a read (`Link::run`'s items) to leave with the other reads waiting now; wait on
    /// the slot for its replies. From any thread: the worker hands the read over without
    /// waking the runtime when a batch is already out (the sending task takes it next).
    pub fn submit(self: &Arc<Self>, items: Vec<Item>) -> Arc<Slot> {
        let slot = Arc::new(Slot::default());
        self.queue.lock().push(Waiting {
            items,
            slot: slot.clone(),
        });
        if !self.sending.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            self.runtime.spawn(async move { me.drain().await });
        }
        slot
    }

    /// `submit`, then its replies within `timeout` (`None`: timed out).
    pub fn run(self: &Arc<Self>, items: Vec<Item>, timeout: Duration) -> Option<Replies> {
        self.submit(items).wait(Instant::now() + timeout)
    }

    async fn drain(self: Arc<Self>) {
        loop {
            let mut batch = std::mem::take(&mut *self.queue.lock());
            batch.retain(|w| !w.slot.abandoned.load(Ordering::Relaxed));
            if batch.is_empty() {
                self.sending.store(false, Ordering::Release);
                // A read queued between the take and the store found `sending` still set:
                // send it unless another task has taken over.
                if self.queue.lock().is_empty() || self.sending.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            self.link.stats.coalesced(batch.len());
            let mut lens = Vec::with_capacity(batch.len());
            let mut items = Vec::new();
            let mut slots = Vec::with_capacity(batch.len());
            for w in batch {
                lens.push(w.items.len());
                items.extend(w.items);
                slots.push(w.slot);
            }
            let total = items.len();
            let results = match tokio::time::timeout(self.deadline, self.link.run(items)).await {
                Ok(r) => r,
                // (Each reader counts its own timeout.)
                Err(_) => {
                    self.link.outcome(Some("timed out"), false);
                    (0..total)
                        .map(|_| Err(LinkError::Redis("timed out".into())))
                        .collect()
                }
            };
            let mut results = results.into_iter();
            for (len, slot) in lens.into_iter().zip(slots) {
                slot.fill(results.by_ref().take(len).collect());
            }
        }
    }
}
