//! Connections to the nodes, the cluster's slot map, and sending a batch of commands as one
//! pipeline per node.
//!
//! The redis crate's cluster connection sends a pipeline to one slot only (a pipeline over
//! several slots fails with CROSSSLOT), but a node accepts any command for the slots it serves.
//! So the link keeps its own copy of the slot map (`CLUSTER SLOTS`), groups a batch's commands
//! by the node serving their slot, and routes each group as one pipeline to the slot of its
//! first command: one round trip per node, sent at once. A stale map shows as MOVED replies:
//! those commands fail (the caller retries or reads zeros) and the map is refreshed.
//!
//! Reconnection: a link that fails is dropped and rebuilt in the background with backoff
//! (100 ms doubling to 2 s); meanwhile operations fail at once instead of waiting.

use std::future::Future as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, IntoConnectionInfo, Value};

use super::config::RedisConfig;
use super::health::Stats;
use crate::secrets::{redact, redact_all, Redacted};

const SLOTS: usize = 16_384;

#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// Commands about one key's slot whose replies belong together.
pub struct Item {
    pub slot: u16,
    pub cmds: Vec<Cmd>,
    /// What to send instead when the node answers NOSCRIPT (the same script call as `EVAL`).
    pub retry: Option<Vec<Cmd>>,
}

impl Item {
    pub fn new(key: &str, cmds: Vec<Cmd>) -> Item {
        Item {
            slot: super::keys::slot(key),
            cmds,
            retry: None,
        }
    }

    /// A script call by SHA, with its text to fall back on.
    pub fn script(key: &str, evalsha: Cmd, eval: Cmd) -> Item {
        Item {
            slot: super::keys::slot(key),
            cmds: vec![evalsha],
            retry: Some(vec![eval]),
        }
    }
}

/// Indexes of `nodes` grouped by node, in the order each node first appears: one pipeline or
/// script call per group.
pub fn by_node(nodes: impl IntoIterator<Item = u16>) -> Vec<(u16, Vec<usize>)> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, node) in nodes.into_iter().enumerate() {
        match groups.iter_mut().find(|(n, _)| *n == node) {
            Some((_, list)) => list.push(i),
            None => groups.push((node, vec![i])),
        }
    }
    groups
}

/// Which of a node's connections a batch takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// What a scan or a learn waits on: reads, rate limits, confirmed writes, pings.
    Read,
    /// The write-behind flushes and `store import`: large pipelines nobody waits on.
    Bulk,
}

/// Why a batch (or part of it) failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LinkError {
    #[error("not connected to redis ({})", Redacted(.0))]
    Down(String),
    #[error("redis: {}", Redacted(.0))]
    Redis(String),
    #[error("redis: NOSCRIPT")]
    NoScript,
}

struct State {
    conns: Option<Arc<Vec<Conn>>>,
    /// Slot → node index (cluster only).
    slots: Option<Arc<Vec<u16>>>,
    backoff: Duration,
    next_try: Instant,
    last_error: String,
    /// Consecutive failed batches and when the first of them failed.
    failures: u32,
    failing_since: Option<Instant>,
}

pub struct Link {
    cfg: RedisConfig,
    state: Mutex<State>,
    connecting: AtomicBool,
    refreshing: AtomicBool,
    next: std::sync::atomic::AtomicUsize,
    pub stats: Arc<Stats>,
    runtime: tokio::runtime::Handle,
}

impl Link {
    pub fn new(cfg: RedisConfig, stats: Arc<Stats>, runtime: tokio::runtime::Handle) -> Arc<Link> {
        let link = Arc::new(Link {
            cfg,
            state: Mutex::new(State {
                conns: None,
                slots: None,
                backoff: Duration::from_millis(100),
                next_try: Instant::now(),
                last_error: "connecting".into(),
                failures: 0,
                failing_since: None,
            }),
            connecting: AtomicBool::new(false),
            refreshing: AtomicBool::new(false),
            next: Default::default(),
            stats,
            runtime,
        });
        link.reconnect_soon();
        link
    }

    /// Whether a connection is up (it may still fail).
    pub fn connected(&self) -> bool {
        self.state.lock().conns.is_some()
    }

    /// The node serving each of `slots`, as the slot map says (all 0 without a cluster or
    /// before the map is known): how a batch is grouped into per-node script calls.
    pub fn nodes_of(&self, slots: impl Iterator<Item = u16>) -> Vec<u16> {
        let map = self.state.lock().slots.clone();
        slots
            .map(|s| map.as_ref().map_or(0, |m| m[usize::from(s) % SLOTS]))
            .collect()
    }

    pub fn last_error(&self) -> String {
        self.state.lock().last_error.clone()
    }

    /// Starts a background connect unless one is running or the backoff has not passed.
    fn reconnect_soon(self: &Arc<Self>) {
        {
            let st = self.state.lock();
            if st.conns.is_some() || Instant::now() < st.next_try {
                return;
            }
        }
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = self.clone();
        self.runtime.spawn(async move {
            let result = tokio::time::timeout(Duration::from_secs(5), connect(&link.cfg)).await;
            let mut st = link.state.lock();
            match result {
                Ok(Ok((conns, slots))) => {
                    tracing::info!(nodes = ?redact_all(&link.cfg.urls), "redis store connected");
                    st.conns = Some(Arc::new(conns));
                    st.slots = slots.map(Arc::new);
                    st.backoff = Duration::from_millis(100);
                }
                Ok(Err(e)) => link.connect_failed(&mut st, e.to_string()),
                Err(_) => link.connect_failed(&mut st, "connect timed out".into()),
            }
            drop(st);
            link.connecting.store(false, Ordering::Release);
        });
    }

    fn connect_failed(&self, st: &mut State, error: String) {
        // What the client library says may quote the URL it was given.
        let error = redact(&error).into_owned();
        tracing::warn!(
            nodes = ?redact_all(&self.cfg.urls),
            error = %error,
            retry_in_ms = st.backoff.as_millis() as u64,
            "redis store: cannot connect"
        );
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        st.last_error = error;
        st.next_try = Instant::now() + st.backoff;
        st.backoff = (st.backoff * 2).min(Duration::from_secs(2));
    }

    /// Records the outcome of a batch: failures that persist drop the connection so it is
    /// rebuilt from the seed nodes.
    pub fn outcome(self: &Arc<Self>, error: Option<&str>, io: bool) {
        let mut st = self.state.lock();
        match error {
            None => {
                st.failures = 0;
                st.failing_since = None;
            }
            Some(e) => {
                let e = redact(e);
                st.last_error = e.to_string();
                st.failures += 1;
                let since = *st.failing_since.get_or_insert_with(Instant::now);
                let single = !self.cfg.cluster;
                if (single && io) || (st.failures >= 5 && since.elapsed() >= Duration::from_secs(1))
                {
                    if st.conns.take().is_some() {
                        tracing::warn!(error = %e, "redis store: connection dropped; reconnecting");
                    }
                    st.failures = 0;
                    st.failing_since = None;
                }
            }
        }
        let down = st.conns.is_none();
        drop(st);
        if down {
            self.reconnect_soon();
        }
    }

    /// Refreshes the slot map in the background (after a MOVED reply).
    pub fn refresh_slots(self: &Arc<Self>) {
        if !self.cfg.cluster || self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let link = self.clone();
        self.runtime.spawn(async move {
            let conn = link.state.lock().conns.as_ref().map(|c| c[0].clone());
            if let Some(Conn::Cluster(mut c)) = conn {
                // Let the cluster settle a moment: a failover shows MOVED for a while.
                tokio::time::sleep(Duration::from_millis(50)).await;
                match slot_map(&mut c).await {
                    Ok(map) => link.state.lock().slots = Some(Arc::new(map)),
                    Err(e) => tracing::debug!(error = %Redacted(&e.to_string()), "redis store: slot map refresh failed"),
                }
            }
            link.refreshing.store(false, Ordering::Release);
        });
    }

    /// Sends `items` as one pipeline per node and returns each item's replies, or why it failed.
    /// Bound the wait with a timeout around this call. On the read lane.
    pub async fn run(self: &Arc<Self>, items: Vec<Item>) -> Vec<Result<Vec<Value>, LinkError>> {
        self.run_on(items, Lane::Read).await
    }

    /// `run` on a given lane. A script call answered NOSCRIPT is sent once more as its text
    /// (`Item::retry`).
    pub async fn run_on(
        self: &Arc<Self>,
        mut items: Vec<Item>,
        lane: Lane,
    ) -> Vec<Result<Vec<Value>, LinkError>> {
        let retries: Vec<(u16, Option<Vec<Cmd>>)> =
            items.iter_mut().map(|i| (i.slot, i.retry.take())).collect();
        let mut out = self.send(items, lane).await;
        let mut again = Vec::new();
        let mut at = Vec::new();
        for (i, (slot, retry)) in retries.into_iter().enumerate() {
            if let (Err(LinkError::NoScript), Some(cmds)) = (&out[i], retry) {
                again.push(Item {
                    slot,
                    cmds,
                    retry: None,
                });
                at.push(i);
            }
        }
        if !again.is_empty() {
            for (i, r) in at.into_iter().zip(self.send(again, lane).await) {
                out[i] = r;
            }
        }
        out
    }

    async fn send(
        self: &Arc<Self>,
        items: Vec<Item>,
        lane: Lane,
    ) -> Vec<Result<Vec<Value>, LinkError>> {
        if items.is_empty() {
            return Vec::new();
        }
        let (conns, slots) = {
            let st = self.state.lock();
            (st.conns.clone(), st.slots.clone())
        };
        let Some(conns) = conns else {
            self.reconnect_soon();
            let e = LinkError::Down(self.last_error());
            return items.iter().map(|_| Err(e.clone())).collect();
        };
        // With more than one connection a node's first carries the bulk writes and the others
        // the reads, so that a read never queues behind a flush's thousands of commands on
        // one socket (Redis interleaves its clients' input; one client's pipeline is FIFO).
        let conn = match (lane, conns.len()) {
            (_, 1) | (Lane::Bulk, _) => conns[0].clone(),
            (Lane::Read, n) => {
                conns[1 + self.next.fetch_add(1, Ordering::Relaxed) % (n - 1)].clone()
            }
        };
        let lens: Vec<usize> = items.iter().map(|i| i.cmds.len()).collect();
        let slots_of: Vec<u16> = items.iter().map(|i| i.slot).collect();
        let mut cmds_of: Vec<Option<Vec<Cmd>>> = items.into_iter().map(|i| Some(i.cmds)).collect();
        let groups = by_node(slots_of.iter().map(|&slot| match &slots {
            Some(map) => map[usize::from(slot) % SLOTS],
            None => 0,
        }));
        self.stats.round_trips.fetch_add(1, Ordering::Relaxed);
        // The node pipelines go out together and are awaited here, in this task: no task per
        // node to spawn and wake.
        let mut sends = Vec::with_capacity(groups.len());
        for (g, (_, members)) in groups.iter().enumerate() {
            let mut pipe = redis::pipe();
            let mut count = 0;
            for &i in members {
                for cmd in cmds_of[i].take().unwrap_or_default() {
                    pipe.add_command(cmd);
                    count += 1;
                }
            }
            let first_slot = slots_of[members[0]];
            let mut conn = conn.clone();
            self.stats.pipeline(count);
            sends.push(Some(Box::pin(async move {
                let r = match &mut conn {
                    Conn::Single(c) => c.req_packed_commands(&pipe, 0, count).await,
                    Conn::Cluster(c) => {
                        c.route_pipeline(
                            pipe,
                            0,
                            count,
                            SingleNodeRoutingInfo::SpecificNode(Route::new(
                                first_slot,
                                SlotAddr::Master,
                            )),
                        )
                        .await
                    }
                };
                (g, r)
            })));
        }
        let mut done = Vec::with_capacity(sends.len());
        std::future::poll_fn(|cx| {
            for slot in sends.iter_mut() {
                if let Some(f) = slot {
                    if let std::task::Poll::Ready(r) = f.as_mut().poll(cx) {
                        done.push(r);
                        *slot = None;
                    }
                }
            }
            if sends.iter().all(Option::is_none) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        let mut out: Vec<Result<Vec<Value>, LinkError>> = lens
            .iter()
            .map(|_| Err(LinkError::Redis("no reply".into())))
            .collect();
        let mut error: Option<(String, bool)> = None;
        let mut moved = false;
        for (g, result) in done {
            let members = &groups[g].1;
            match result {
                Ok(values) => {
                    let mut values = values.into_iter();
                    for &i in members {
                        let replies: Vec<Value> = values.by_ref().take(lens[i]).collect();
                        let failed = replies.iter().find_map(|v| match v {
                            Value::ServerError(e) => Some(e.clone()),
                            _ => None,
                        });
                        out[i] = match failed {
                            // Not a failure: the caller sends the script's text.
                            Some(e) if e.kind() == Some(redis::ServerErrorKind::NoScript) => {
                                Err(LinkError::NoScript)
                            }
                            Some(e) => {
                                let text = format!("{e:?}");
                                // (A script touching a key another node now serves.)
                                if text.contains("MOVED")
                                    || text.contains("ASK")
                                    || text.contains("non local key")
                                {
                                    moved = true;
                                }
                                error.get_or_insert((text.clone(), false));
                                Err(LinkError::Redis(text))
                            }
                            None => Ok(replies),
                        };
                    }
                }
                Err(e) => {
                    let io = e.is_io_error()
                        || e.is_connection_dropped()
                        || e.is_connection_refusal()
                        || e.is_timeout();
                    let text = e.to_string();
                    if text.contains("MOVED") || text.contains("ASK") {
                        moved = true;
                    }
                    for &i in members {
                        out[i] = Err(LinkError::Redis(text.clone()));
                    }
                    error = Some((text, io));
                }
            }
        }
        if moved {
            self.refresh_slots();
        }
        match &error {
            Some((e, io)) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.outcome(Some(e), *io);
            }
            None => self.outcome(None, false),
        }
        out
    }

    /// Marks a timed-out batch as a failure (the timeout dropped its future).
    pub fn timed_out(self: &Arc<Self>) {
        self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
        self.outcome(Some("timed out"), false);
    }

    /// A plain connection for commands routed by the client itself (streams, `SCAN`).
    pub async fn query(self: &Arc<Self>, cmd: Cmd) -> Result<Value, LinkError> {
        let conn = self.state.lock().conns.as_ref().map(|c| c[0].clone());
        let Some(conn) = conn else {
            self.reconnect_soon();
            return Err(LinkError::Down(self.last_error()));
        };
        let r = match conn {
            Conn::Single(mut c) => c.req_packed_command(&cmd).await,
            Conn::Cluster(mut c) => c.req_packed_command(&cmd).await,
        };
        r.map_err(|e| LinkError::Redis(e.to_string()))
    }
}

async fn connect(cfg: &RedisConfig) -> redis::RedisResult<(Vec<Conn>, Option<Vec<u16>>)> {
    let timeout = Duration::from_millis(cfg.timeout_ms.max(200) * 10);
    let mut conns = Vec::with_capacity(cfg.pool_size);
    if cfg.cluster {
        let mut b = redis::cluster::ClusterClient::builder(cfg.urls.clone())
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(timeout)
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(200);
        if let Some(p) = &cfg.password {
            b = b.password(p);
        }
        if let Some(u) = &cfg.username {
            b = b.username(u);
        }
        let client = b.build()?;
        for _ in 0..cfg.pool_size {
            conns.push(Conn::Cluster(client.get_async_connection().await?));
        }
        let Some(Conn::Cluster(c)) = conns.first_mut() else {
            unreachable!("a cluster link has cluster connections")
        };
        let map = slot_map(c).await?;
        Ok((conns, Some(map)))
    } else {
        let mut info = cfg.urls[0].as_str().into_connection_info()?;
        let mut settings = info.redis_settings().clone();
        if let Some(p) = &cfg.password {
            settings = settings.set_password(p);
        }
        if let Some(u) = &cfg.username {
            settings = settings.set_username(u);
        }
        info = info.set_redis_settings(settings);
        let client = redis::Client::open(info)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(timeout));
        for _ in 0..cfg.pool_size {
            conns.push(Conn::Single(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            ));
        }
        Ok((conns, None))
    }
}

/// `CLUSTER SLOTS` as slot → node index.
async fn slot_map(c: &mut ClusterConnection) -> redis::RedisResult<Vec<u16>> {
    let reply = c
        .req_packed_command(&redis::cmd("CLUSTER").arg("SLOTS").clone())
        .await?;
    let mut nodes: Vec<String> = Vec::new();
    let mut map = vec![0u16; SLOTS];
    let Value::Array(ranges) = reply else {
        return Err((redis::ErrorKind::Parse, "CLUSTER SLOTS: not an array").into());
    };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        let port = match master.get(1) {
            Some(Value::Int(p)) => *p,
            _ => 0,
        };
        let name = format!("{host}:{port}");
        let index = match nodes.iter().position(|n| *n == name) {
            Some(i) => i,
            None => {
                nodes.push(name);
                nodes.len() - 1
            }
        };
        let (start, end) = (*start as usize, (*end as usize).min(SLOTS - 1));
        for slot in map.iter_mut().take(end + 1).skip(start) {
            *slot = index as u16;
        }
    }
    Ok(map)
}
