//! The reputation store on a Redis or Valkey node or Cluster, shared by every daemon.
//!
//! Implements `ReputationStore` so that its users (scan, engine, learn, `/reputation`) do not
//! change. The scan path is synchronous on the scan workers; the store owns a small tokio
//! runtime for its connections, and a worker's call hands its batch to that runtime and waits
//! on a channel at most `timeout_ms` (`block`). Parts:
//! - `config.rs`: `[store] backend` and `[store.redis]`;
//! - `keys.rs`: key layout, field encoding, window sums of a decoded hash, the Lua scripts;
//! - `conn.rs`: connections, the cluster slot map, one pipeline per node, reconnect/backoff;
//! - `scripts.rs`: the per-node read and write scripts of the scan path;
//! - `coalesce.rs`: the scan workers' reads sent together while a batch is out;
//! - `near.rs`: window sums served again for `near_cache_ms`, with own increments added;
//! - `writer.rs`: increments aggregated per key and flushed as pipelines off the reply path;
//! - `learns.rs`: the classifier's shared learn stream;
//! - `transfer.rs`: `shrike store export/import`;
//! - `health.rs`: counters for `/metrics`.

mod coalesce;
mod config;
mod conn;
mod health;
pub mod keys;
pub mod learns;
mod near;
mod scripts;
pub mod transfer;
mod writer;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

pub use config::{Backend, RedisConfig, RedisConfigError};
use conn::{Item, Link};
pub use health::Stats;
use redis::Value;

use super::{
    BackendStatus, Clock, Increment, Layout, RateResult, ReputationStore, StoreConfig, StoreError,
    StoreKey, Timeline, Unavailable, WindowCounts, WindowSums,
};

/// Why the redis store could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RedisStoreError {
    #[error(transparent)]
    Config(#[from] RedisConfigError),
    #[error(transparent)]
    Layout(#[from] StoreError),
    #[error("starting the redis store's runtime: {0}")]
    Runtime(std::io::Error),
}

/// A reply a worker waits for: `None` until the task ends, then its result (`None` inside when
/// it timed out).
struct Reply<T> {
    state: parking_lot::Mutex<Option<Option<T>>>,
    done: parking_lot::Condvar,
}

impl<T> Default for Reply<T> {
    fn default() -> Self {
        Reply {
            state: parking_lot::Mutex::new(None),
            done: parking_lot::Condvar::new(),
        }
    }
}

struct Inner {
    link: Arc<Link>,
    scripts: Arc<scripts::Scripts>,
    near: Option<near::NearCache>,
    /// The scan path's reads (lookups, rate scripts), coalesced.
    reads: Arc<coalesce::Coalescer>,
    layout: Layout,
    windows_secs: Vec<u64>,
    clock: Arc<dyn Clock>,
    prefix: String,
    timeout: Duration,
    ttl: u64,
    writer: writer::Writer,
    stats: Arc<Stats>,
    /// The last read failed (cleared by the next that succeeds).
    degraded: AtomicBool,
    /// After three reads in a row timed out, reads fail at once until this instant (ms on
    /// `started`), but for one probe at a time: a scan waits for a dead node once
    /// (`timeout_ms`), not once per read (its prefetch, then a rate limit), and the scans
    /// behind it not at all. Three, not one: on a daemon short of CPU a read late now and then
    /// is the daemon's delay, not the store's, and must not fail the scans that follow.
    fail_fast_until: std::sync::atomic::AtomicU64,
    timeouts_in_a_row: std::sync::atomic::AtomicU32,
    probing: AtomicBool,
    started: std::time::Instant,
}

/// The shared store. Starting it never waits for Redis: it connects in the background, and
/// until it is connected scans go on without reputation.
pub struct RedisStore {
    inner: Arc<Inner>,
    runtime: Option<tokio::runtime::Runtime>,
    flusher: Option<tokio::task::JoinHandle<()>>,
}

impl RedisStore {
    pub fn new(config: &StoreConfig, clock: Arc<dyn Clock>) -> Result<RedisStore, RedisStoreError> {
        let cfg = config.redis.clone();
        cfg.validate()?;
        let layout = Layout::new(&config.resolutions)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("shrike-redis")
            .enable_all()
            .build()
            .map_err(RedisStoreError::Runtime)?;
        let stats = Arc::new(Stats::default());
        let link = Link::new(cfg.clone(), stats.clone(), runtime.handle().clone());
        let bucket_secs = layout.resolutions()[0].bucket_secs;
        let ttl = keys::ttl_secs(&layout);
        let scripts = Arc::new(scripts::Scripts::new(&layout, &config.windows_secs, ttl));
        let reads = coalesce::Coalescer::new(
            link.clone(),
            scripts.clone(),
            runtime.handle().clone(),
            Duration::from_millis(cfg.timeout_ms),
        );
        let inner = Arc::new(Inner {
            link,
            scripts,
            near: near::NearCache::new(cfg.near_cache_ms, cfg.near_cache_keys),
            reads,
            ttl,
            layout,
            windows_secs: config.windows_secs.clone(),
            clock,
            prefix: cfg.prefix.clone(),
            timeout: Duration::from_millis(cfg.timeout_ms),
            writer: writer::Writer::new(cfg.max_pending, bucket_secs),
            stats,
            degraded: AtomicBool::new(false),
            fail_fast_until: std::sync::atomic::AtomicU64::new(0),
            timeouts_in_a_row: std::sync::atomic::AtomicU32::new(0),
            probing: AtomicBool::new(false),
            started: std::time::Instant::now(),
        });
        let flusher = {
            let inner = inner.clone();
            let every = Duration::from_millis(cfg.flush_interval_ms);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut last_ping = tokio::time::Instant::now();
                loop {
                    tick.tick().await;
                    inner.flush().await;
                    // A daemon without traffic still knows (and says on /health) whether its
                    // store answers.
                    if last_ping.elapsed() >= Duration::from_secs(1) {
                        last_ping = tokio::time::Instant::now();
                        inner.heartbeat().await;
                    }
                }
            })
        };
        Ok(RedisStore {
            inner,
            runtime: Some(runtime),
            flusher: Some(flusher),
        })
    }

    /// The counters of this store (`/metrics`).
    pub fn stats(&self) -> &Arc<Stats> {
        &self.inner.stats
    }

    /// Runs `fut` on the store's runtime; its result, or `None` past `timeout`.
    fn block<T: Send + 'static>(
        &self,
        timeout: Duration,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let runtime = self.runtime.as_ref()?;
        // A mutex and condvar rather than a channel: the worker sleeps until woken, where a
        // channel's receive spins and yields first (measurable on two busy cores).
        let slot = Arc::new(Reply::<T>::default());
        let theirs = slot.clone();
        runtime.spawn(async move {
            let result = tokio::time::timeout(timeout, fut).await.ok();
            let mut state = theirs.state.lock();
            *state = Some(result);
            theirs.done.notify_one();
        });
        // The task answers `None` on its own timeout; the margin only covers a busy runtime.
        let deadline = std::time::Instant::now() + timeout + Duration::from_millis(20);
        let mut state = slot.state.lock();
        while state.is_none() {
            if slot.done.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        match state.take().flatten() {
            Some(v) => Some(v),
            None => {
                drop(state);
                self.inner.link.timed_out();
                None
            }
        }
    }

    /// Waits until every increment recorded so far is written (or `timeout` passes); returns
    /// whether nothing is left pending. Tests and `store import` use it.
    pub fn flush_now(&self, timeout: Duration) -> bool {
        let inner = self.inner.clone();
        self.block(timeout, async move {
            for _ in 0..50 {
                inner.flush().await;
                if inner.writer.is_empty() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        })
        .unwrap_or(false)
    }

    /// Waits up to `timeout` for the first connection; returns whether it is up.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while !self.inner.link.connected() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Sends one command with `timeout` (streams, admin).
    pub fn query(&self, cmd: redis::Cmd, timeout: Duration) -> Result<Value, Unavailable> {
        let link = self.inner.link.clone();
        match self.block(timeout, async move { link.query(cmd).await }) {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(Unavailable(e.to_string())),
            None => Err(Unavailable("timed out".into())),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    pub fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.runtime.as_ref().map(|r| r.handle().clone())
    }

    /// A read on the scan path (coalesced with the other workers'), waited for at most
    /// `timeout_ms`.
    fn read(&self, read: coalesce::Read) -> Option<coalesce::Replies> {
        let inner = &self.inner;
        let now_ms = || inner.started.elapsed().as_millis() as u64;
        let failing = now_ms() < inner.fail_fast_until.load(Relaxed);
        if failing && inner.probing.swap(true, Relaxed) {
            inner.stats.fast_failures.fetch_add(1, Relaxed);
            return None;
        }
        let replies = inner.reads.run(read, inner.timeout);
        match &replies {
            None => {
                inner.link.timed_out();
                // Four timeouts' worth: a failover or partition keeps failing for seconds,
                // and a probe a timeout long finds the end of it.
                if inner.timeouts_in_a_row.fetch_add(1, Relaxed) + 1 >= 3 {
                    let span = inner.timeout.as_millis() as u64 * 4;
                    inner.fail_fast_until.store(now_ms() + span, Relaxed);
                }
            }
            Some(_) => {
                inner.timeouts_in_a_row.store(0, Relaxed);
                inner.fail_fast_until.store(0, Relaxed);
            }
        }
        if failing {
            inner.probing.store(false, Relaxed);
        }
        replies
    }

    /// `HGETALL` of each key's timeline (the whole hash: `/reputation`'s timeline view).
    fn hgetall(&self, keys: &[StoreKey]) -> Result<Vec<Value>, Unavailable> {
        let items: Vec<Item> = keys
            .iter()
            .map(|k| {
                let name = keys::timeline_key(&self.inner.prefix, k);
                let mut cmd = redis::cmd("HGETALL");
                cmd.arg(&name);
                Item::new(&name, vec![cmd])
            })
            .collect();
        self.replies(self.read(coalesce::Read::Items(items)))
    }

    /// Each key's window sums, summed on its node (`scripts::READ`).
    fn window_sums(&self, keys: &[StoreKey], now: u64) -> Result<Vec<WindowCounts>, Unavailable> {
        let names = keys
            .iter()
            .map(|k| keys::timeline_key(&self.inner.prefix, k))
            .collect();
        let values = self.replies(self.read(coalesce::Read::Timelines { keys: names, now }))?;
        values
            .iter()
            .map(|v| {
                self.inner
                    .scripts
                    .parse_sums(v)
                    .ok_or_else(|| Unavailable("READ: unexpected reply".into()))
            })
            .collect()
    }

    /// One value per read item, or why the read failed.
    fn replies(&self, replies: Option<coalesce::Replies>) -> Result<Vec<Value>, Unavailable> {
        let Some(replies) = replies else {
            return Err(Unavailable("timed out".into()));
        };
        let mut out = Vec::with_capacity(replies.len());
        for r in replies {
            match r {
                Ok(mut v) => out.push(v.pop().unwrap_or(Value::Nil)),
                Err(e) => return Err(Unavailable(e.to_string())),
            }
        }
        Ok(out)
    }

    fn rate(&self, key: StoreKey, limit: u64, window_secs: u64, hit: bool) -> RateResult {
        let name = keys::rate_key(&self.inner.prefix, &key);
        let window = keys::RateWindow::new(window_secs, self.now());
        let cmds = window.commands(&name, hit);
        let reply = self
            .read(coalesce::Read::Items(vec![conn::Item::new(&name, cmds)]))
            .and_then(|mut r| r.pop());
        let counted = match reply {
            Some(Ok(replies)) => window.reply(&replies, hit),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "redis rate counter unavailable");
                None
            }
            _ => None,
        };
        match counted {
            Some((count, stale)) => {
                if !stale.is_empty() {
                    self.inner.writer.delete(name, stale);
                }
                RateResult {
                    count,
                    over: count > limit,
                }
            }
            None => {
                // Fail open: a limit that cannot be read does not block mail.
                self.inner.degraded.store(true, Relaxed);
                RateResult {
                    count: 1,
                    over: 1 > limit,
                }
            }
        }
    }
}

impl Inner {
    async fn heartbeat(&self) {
        let ping = Item {
            slot: 0,
            cmds: vec![redis::cmd("PING")],
            retry: None,
        };
        let link = self.link.clone();
        let ok = match tokio::time::timeout(self.timeout * 4, link.run(vec![ping])).await {
            Ok(r) => r.iter().all(Result::is_ok),
            Err(_) => {
                self.link.timed_out();
                false
            }
        };
        self.degraded.store(!ok, Relaxed);
    }

    async fn flush(&self) {
        let link = self.link.clone();
        let mut batch = self
            .writer
            .take(&self.layout, &self.prefix, &self.scripts, |slots| {
                link.nodes_of(slots.iter().copied())
            });
        self.stats.pending.store(self.writer.len() as u64, Relaxed);
        if batch.is_empty() {
            return;
        }
        self.stats.flushes.fetch_add(1, Relaxed);
        let wait = (self.timeout * 20).max(Duration::from_secs(1));
        let items = std::mem::take(&mut batch.items);
        match tokio::time::timeout(wait, link.run_on(items, conn::Lane::Bulk)).await {
            Ok(results) => {
                if self.writer.settle(batch, &results, &self.stats) > 0 {
                    self.link.refresh_slots();
                }
            }
            Err(_) => {
                self.link.timed_out();
                let all: Vec<usize> = (0..batch.len()).collect();
                self.writer.requeue(batch, &all, &self.stats);
            }
        }
        self.stats.pending.store(self.writer.len() as u64, Relaxed);
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        if let Some(f) = self.flusher.take() {
            f.abort();
        }
        // What scans counted last is written before the daemon exits (bounded).
        self.flush_now(Duration::from_secs(2));
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_millis(200));
        }
    }
}

impl ReputationStore for RedisStore {
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<WindowCounts> {
        self.lookup_checked(keys).unwrap_or_else(|_| {
            keys.iter()
                .map(|_| WindowCounts {
                    windows: WindowSums::zeros(self.inner.windows_secs.len()),
                })
                .collect()
        })
    }

    fn lookup_checked(&self, keys: &[StoreKey]) -> Result<Vec<WindowCounts>, Unavailable> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.inner.stats.prefetches.fetch_add(1, Relaxed);
        let now = self.now();
        let stats = &self.inner.stats;
        let cached = match &self.inner.near {
            Some(near) => near.get(keys, stats),
            None => vec![None; keys.len()],
        };
        let missing: Vec<StoreKey> = keys
            .iter()
            .zip(&cached)
            .filter(|(_, c)| c.is_none())
            .map(|(k, _)| *k)
            .collect();
        if missing.is_empty() {
            return Ok(cached.into_iter().flatten().collect());
        }
        match self.window_sums(&missing, now) {
            Ok(read) => {
                self.inner.degraded.store(false, Relaxed);
                if let Some(near) = &self.inner.near {
                    near.put(missing.iter().copied().zip(read.iter().cloned()), stats);
                }
                let mut read = read.into_iter();
                Ok(cached
                    .into_iter()
                    .map(|c| {
                        c.or_else(|| read.next()).unwrap_or_else(|| WindowCounts {
                            windows: WindowSums::zeros(self.inner.windows_secs.len()),
                        })
                    })
                    .collect())
            }
            Err(e) => {
                self.inner.degraded.store(true, Relaxed);
                self.inner.stats.unavailable.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }

    fn reads_by_kind(&self) -> bool {
        true
    }

    fn record_many(&self, increments: &[Increment]) {
        if let Some(near) = &self.inner.near {
            near.add(increments);
        }
        self.inner
            .writer
            .add(increments, self.now(), &self.inner.stats);
    }

    fn record_confirmed(&self, increments: &[Increment]) -> Result<(), Unavailable> {
        if increments.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let items = writer::increment_items(
            &self.inner.layout,
            &self.inner.prefix,
            Some(self.inner.ttl),
            increments.iter().map(|i| (i.key, now, i.counts)),
        );
        let link = self.inner.link.clone();
        let wait = (self.inner.timeout * 10).max(Duration::from_millis(500));
        match self.block(wait, async move { link.run(items).await }) {
            Some(results) => match results.into_iter().find_map(Result::err) {
                None => {
                    if let Some(near) = &self.inner.near {
                        near.add(increments);
                    }
                    Ok(())
                }
                Some(e) => Err(Unavailable(e.to_string())),
            },
            None => Err(Unavailable("timed out".into())),
        }
    }

    fn increment_unique(&self, pair: StoreKey, unique: StoreKey, period_secs: u64) -> bool {
        // Counted off the reply path by the flusher's script; whether it grew is known there.
        self.inner.writer.pair(
            pair,
            unique,
            period_secs.max(1),
            self.now(),
            &self.inner.stats,
        );
        true
    }

    fn hit(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult {
        self.rate(key, limit, window_secs, true)
    }

    fn peek_rate(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult {
        self.rate(key, limit, window_secs, false)
    }

    fn timeline(&self, key: &StoreKey) -> Option<Timeline> {
        let now = self.now();
        let values = self.hgetall(std::slice::from_ref(key)).ok()?;
        let d = keys::decode(&self.inner.layout, values.first()?, now);
        keys::timeline(&self.inner.layout, &self.inner.windows_secs, &d, now)
    }

    fn now(&self) -> u64 {
        self.inner.clock.now_secs()
    }

    fn windows_secs(&self) -> &[u64] {
        &self.inner.windows_secs
    }

    fn status(&self) -> Option<BackendStatus> {
        let connected = self.inner.link.connected();
        let degraded = !connected || self.inner.degraded.load(Relaxed);
        Some(BackendStatus {
            backend: "redis",
            degraded,
            detail: if degraded {
                self.inner.link.last_error()
            } else {
                String::new()
            },
            metrics: self.inner.stats.metrics(),
        })
    }
}
