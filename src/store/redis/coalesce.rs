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
use std::time::Duration;

use parking_lot::Mutex;
use redis::Value;
use tokio::sync::oneshot;

use super::conn::{Item, Link, LinkError};

type Replies = Vec<Result<Vec<Value>, LinkError>>;

struct Waiting {
    items: Vec<Item>,
    reply: oneshot::Sender<Replies>,
}

pub struct Coalescer {
    link: Arc<Link>,
    queue: Mutex<Vec<Waiting>>,
    /// A task is sending the queue's batches.
    sending: AtomicBool,
    /// Longest wait for one batch.
    deadline: Duration,
}

impl Coalescer {
    pub fn new(link: Arc<Link>, deadline: Duration) -> Arc<Coalescer> {
        Arc::new(Coalescer {
            link,
            queue: Mutex::new(Vec::new()),
            sending: AtomicBool::new(false),
            deadline,
        })
    }

    /// `Link::run` for a read: sent with the other reads waiting now. Must run on the store's
    /// runtime.
    pub async fn run(self: &Arc<Self>, items: Vec<Item>) -> Replies {
        let n = items.len();
        let (tx, rx) = oneshot::channel();
        self.queue.lock().push(Waiting { items, reply: tx });
        if !self.sending.swap(true, Ordering::AcqRel) {
            // A task of its own sends, so that a caller giving up (its timeout drops this
            // future) never strands the reads queued behind it.
            let me = self.clone();
            tokio::spawn(async move { me.drain().await });
        }
        rx.await.unwrap_or_else(|_| {
            (0..n)
                .map(|_| Err(LinkError::Redis("no reply".into())))
                .collect()
        })
    }

    async fn drain(self: Arc<Self>) {
        loop {
            let batch = std::mem::take(&mut *self.queue.lock());
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
            let mut replies = Vec::with_capacity(batch.len());
            for w in batch {
                lens.push(w.items.len());
                items.extend(w.items);
                replies.push(w.reply);
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
            for (len, reply) in lens.into_iter().zip(replies) {
                // A reader that gave up has dropped its receiver: nothing to do.
                let _ = reply.send(results.by_ref().take(len).collect());
            }
        }
    }
}
