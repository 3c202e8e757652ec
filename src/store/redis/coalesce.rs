//! The scan workers' reads, coalesced: while a batch of reads is on its way to Redis, the reads
//! that arrive meanwhile wait and then go out together as the next batch (one pipeline per
//! node for all of them), as client-side auto-pipelining does. On an idle link a read leaves at
//! once; under load each Redis node reads and answers one pipeline per batch instead of one per
//! message, and the client routes, wakes and parses per batch rather than per message.
//!
//! Timeline reads (a scan's prefetch) are merged further: the keys of every read in the batch
//! are grouped by node and read by one `READ` script call per node (`scripts.rs`), whatever the
//! number of scans they came from.
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
use super::scripts::{Scripts, CHUNK};

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

/// A read: commands of its own (rate counters), or timeline keys whose window sums to read at
/// a time (one reply per key: `READ`'s string for it).
pub enum Read {
    Items(Vec<Item>),
    Timelines { keys: Vec<String>, now: u64 },
}

impl Read {
    fn len(&self) -> usize {
        match self {
            Read::Items(items) => items.len(),
            Read::Timelines { keys, .. } => keys.len(),
        }
    }
}

struct Waiting {
    read: Read,
    slot: Arc<Slot>,
}

pub struct Coalescer {
    link: Arc<Link>,
    scripts: Arc<Scripts>,
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
        scripts: Arc<Scripts>,
        runtime: tokio::runtime::Handle,
        deadline: Duration,
    ) -> Arc<Coalescer> {
        Arc::new(Coalescer {
            link,
            scripts,
            runtime,
            queue: Mutex::new(Vec::new()),
            sending: AtomicBool::new(false),
            deadline,
        })
    }

    /// Queues a read (`Link::run`'s items) to leave with the other reads waiting now; wait on
    /// the slot for its replies. From any thread: the worker hands the read over without
    /// waking the runtime when a batch is already out (the sending task takes it next).
    pub fn submit(self: &Arc<Self>, read: Read) -> Arc<Slot> {
        let slot = Arc::new(Slot::default());
        self.queue.lock().push(Waiting {
            read,
            slot: slot.clone(),
        });
        if !self.sending.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            self.runtime.spawn(async move { me.drain().await });
        }
        slot
    }

    /// `submit`, then its replies within `timeout` (`None`: timed out).
    pub fn run(self: &Arc<Self>, read: Read, timeout: Duration) -> Option<Replies> {
        self.submit(read).wait(Instant::now() + timeout)
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
            let lens: Vec<usize> = batch.iter().map(|w| w.read.len()).collect();
            let plan = self.plan(&mut batch);
            let total = plan.items.len();
            let results = match tokio::time::timeout(self.deadline, self.link.run(plan.items)).await
            {
                Ok(r) => r,
                // (Each reader counts its own timeout.)
                Err(_) => {
                    self.link.outcome(Some("timed out"), false);
                    (0..total)
                        .map(|_| Err(LinkError::Redis("timed out".into())))
                        .collect()
                }
            };
            let mut out: Vec<Replies> = lens
                .iter()
                .map(|&n| {
                    (0..n)
                        .map(|_| Err(LinkError::Redis("no reply".into())))
                        .collect()
                })
                .collect();
            for (result, targets) in results.into_iter().zip(plan.targets) {
                match targets {
                    Target::Item(w, i) => out[w][i] = result,
                    Target::Keys(keys) => {
                        let values = match result {
                            Ok(mut v) => match v.pop() {
                                Some(Value::Array(values)) if values.len() == keys.len() => {
                                    Ok(values)
                                }
                                _ => Err(LinkError::Redis("READ: unexpected reply".into())),
                            },
                            Err(e) => Err(e),
                        };
                        match values {
                            Ok(values) => {
                                for ((w, i), v) in keys.into_iter().zip(values) {
                                    out[w][i] = Ok(vec![v]);
                                }
                            }
                            Err(e) => {
                                for (w, i) in keys {
                                    out[w][i] = Err(e.clone());
                                }
                            }
                        }
                    }
                }
            }
            for (w, replies) in batch.into_iter().zip(out) {
                w.slot.fill(replies);
            }
        }
    }
}

/// Where a sent item's replies go: one read's item, or (read, key) per key of a `READ` call.
enum Target {
    Item(usize, usize),
    Keys(Vec<(usize, usize)>),
}

struct Plan {
    items: Vec<Item>,
    targets: Vec<Target>,
}

impl Coalescer {
    /// A batch as items to send: each read's own items, and one `READ` call per node (and
    /// `CHUNK` keys) for all the timeline keys.
    fn plan(&self, batch: &mut [Waiting]) -> Plan {
        let mut items = Vec::new();
        let mut targets = Vec::new();
        let mut timelines: Vec<(usize, usize, String)> = Vec::new();
        let mut now = 0;
        for (w, waiting) in batch.iter_mut().enumerate() {
            match &mut waiting.read {
                Read::Items(own) => {
                    for (i, item) in std::mem::take(own).into_iter().enumerate() {
                        items.push(item);
                        targets.push(Target::Item(w, i));
                    }
                }
                Read::Timelines { keys, now: at } => {
                    now = now.max(*at);
                    for (i, k) in std::mem::take(keys).into_iter().enumerate() {
                        timelines.push((w, i, k));
                    }
                }
            }
        }
        if timelines.is_empty() {
            return Plan { items, targets };
        }
        let nodes = self
            .link
            .nodes_of(timelines.iter().map(|(_, _, k)| super::keys::slot(k)));
        for (_, members) in super::conn::by_node(nodes) {
            for chunk in members.chunks(CHUNK) {
                let names: Vec<&str> = chunk.iter().map(|&t| timelines[t].2.as_str()).collect();
                let (sha, text) = self.scripts.read_call(&names, now);
                items.push(Item::script(names[0], sha, text));
                targets.push(Target::Keys(
                    chunk
                        .iter()
                        .map(|&t| (timelines[t].0, timelines[t].1))
                        .collect(),
                ));
            }
        }
        Plan { items, targets }
    }
}
