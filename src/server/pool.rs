//! The scan worker pool: a bounded crossbeam channel feeding one thread per worker, each owning
//! a `ScanWorker` (and so its own Lua state). Jobs carry a tokio oneshot for the reply; a
//! worker answers first and applies the message's store updates after, off the reply path.
//!
//! Owns: job submission (refused at once when the queue is full: never unbounded memory; each
//! job carries its body's share of the byte budget, `budget.rs`, until the worker is done with
//! it), the worker threads, their restart after a panic, their replacement when stuck, and the
//! drain at shutdown.
//!
//! A worker stuck on one job (longer than `stuck_after`, by default twice the scan timeout:
//! its caller has long had the fallback) is replaced by the supervisor thread: the stuck one
//! is retired (it leaves when its job ends, taking no other) and a fresh worker, with a fresh
//! Lua state, takes its place, so capacity comes back. A thread cannot be killed safely, so a
//! retired one runs on until its job ends; at most `MAX_STUCK_PER_WORKER` per worker are left
//! running, beyond which no more are replaced (logged) rather than threads piling up.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::budget::{Reservation, ANALYSIS_FACTOR};
use super::listen::LogThrottle;
use super::metrics::{Metrics, Stage};
use crate::message::{prepare, Envelope};
use crate::netcheck::{Checker, NetChecks};
use crate::scan::{ScanWorker, Scanner, StageTimes};
use crate::sign::{Outcome, Signer};
use crate::store::Counter;
use crate::verdict::Verdict;

/// A message to scan.
#[derive(Debug)]
pub struct ScanRequest {
    pub raw: Vec<u8>,
    /// `raw`'s share of the byte budget: held while the request waits and while a worker
    /// scans it, given back with the job.
    pub held: Reservation,
    pub envelope: Envelope,
    /// Whether the reply carries the message's distinct URLs and addresses (the HTTP reply's
    /// extras; the milter has no use for them).
    pub lists: bool,
    /// The message's network checks, filled by `Pool::scan` when the pool has a checker.
    pub checks: Option<Arc<NetChecks>>,
    /// The final actions whose messages the quarantine keeps: a message with one of them
    /// comes back in the reply (`ScanReply::kept`). `Daemon::recorded` sets it.
    pub keep: crate::quarantine::ActionSet,
}

/// What a worker found, owned (the analysis borrows the raw bytes and stays on the worker).
#[derive(Debug, Clone)]
pub struct ScanReply {
    pub verdict: Verdict,
    pub message_id: Option<String>,
    pub subject: String,
    /// The first From header address.
    pub from: Option<String>,
    pub urls: Vec<String>,
    pub emails: Vec<String>,
    pub times: StageTimes,
    /// Time spent waiting in the queue.
    pub queued: Duration,
    /// The network checks the rules saw (the milter writes them as Authentication-Results).
    pub checks: Option<Arc<NetChecks>>,
    /// The message's bytes when its final action is one the request's `keep` names.
    pub kept: Option<Vec<u8>>,
}

/// What a learn job recorded.
#[derive(Debug, Clone)]
pub struct LearnReply {
    /// Store keys that got the complaint or rescue.
    pub keys: usize,
    pub message_id: Option<String>,
    /// Whether the classifier trained on it (not when it had already learned this message).
    pub trained: bool,
    /// The classifier had already learned it: not trained again, no complaint or rescue.
    pub duplicate: bool,
    /// Why the classifier's training of it was not recorded, if it was not.
    pub journal_error: Option<String>,
    /// Why a shared store did not take it (nothing was learned).
    pub store_error: Option<String>,
}

enum Job {
    Scan {
        /// (boxed: the envelope makes it several times larger than the other jobs)
        request: Box<ScanRequest>,
        enqueued: Instant,
        reply: oneshot::Sender<ScanReply>,
        /// The submitting connection's span: the worker's `scan` span nests in it.
        span: tracing::Span,
    },
    Learn {
        raw: Vec<u8>,
        held: Reservation,
        counter: Counter,
        reply: oneshot::Sender<LearnReply>,
        span: tracing::Span,
    },
    /// A trial scan (the web UI's Test page): the report `shrike scan` prints, with no store
    /// update, no autolearn and no count in the scan metrics — it is not arrived mail.
    Test {
        request: Box<ScanRequest>,
        reply: oneshot::Sender<serde_json::Value>,
    },
    Stop,
}

/// Why a job got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("scan queue full")]
    Busy,
    #[error("no answer within the scan timeout")]
    Timeout,
    #[error("scan workers are stopping")]
    Stopped,
}

/// What the supervisor sees of one worker thread.
#[derive(Default)]
struct WorkerSlot {
    /// When its running job started (ms since the pool's start, plus 1), 0 while idle.
    busy_since: AtomicU64,
    /// Replaced by a fresh worker: it leaves after its job and takes no other.
    retired: AtomicBool,
    /// The queue id of the running job, for the log.
    job: Mutex<Option<String>>,
}

/// What the pool needs to start a worker, shared with the supervisor.
struct Workers {
    scanner: Arc<Scanner>,
    /// Signs authenticated senders' mail after its verdict (None: `[dkim_signing]` off).
    signer: Option<Arc<Signer>>,
    rx: Receiver<Job>,
    metrics: Arc<Metrics>,
    epoch: Instant,
    /// Live workers, and the retired ones still running a job.
    live: Mutex<Vec<(Arc<WorkerSlot>, JoinHandle<()>)>>,
    retired: Mutex<Vec<Arc<WorkerSlot>>>,
    next_id: AtomicU64,
    stopping: AtomicBool,
    full_log: LogThrottle,
}

/// Retired workers still running that one worker may leave behind before replacement stops.
const MAX_STUCK_PER_WORKER: usize = 4;

impl Workers {
    fn spawn(self: &Arc<Self>, warm: Option<std::sync::mpsc::Sender<()>>) -> std::io::Result<()> {
        let slot = Arc::new(WorkerSlot::default());
        let id = self.next_id.fetch_add(1, Relaxed);
        let (me, s) = (Arc::clone(self), Arc::clone(&slot));
        let handle = std::thread::Builder::new()
            .name(format!("shrike-scan-{id}"))
            .spawn(move || worker_loop(&me, &s, warm))?;
        self.live.lock().push((slot, handle));
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// One look at the workers: replaces those busy on one job for longer than `stuck_after`.
    fn supervise(self: &Arc<Self>, stuck_after: Duration) {
        self.retired
            .lock()
            .retain(|s| s.busy_since.load(Relaxed) != 0);
        let now = self.now_ms();
        let stuck: Vec<Arc<WorkerSlot>> = self
            .live
            .lock()
            .iter()
            .filter(|(s, _)| {
                let since = s.busy_since.load(Relaxed);
                since != 0 && now.saturating_sub(since) > stuck_after.as_millis() as u64
            })
            .map(|(s, _)| Arc::clone(s))
            .collect();
        for slot in stuck {
            let workers = self.live.lock().len();
            if self.retired.lock().len() >= workers * MAX_STUCK_PER_WORKER {
                if let Some(held) = self.full_log.allow() {
                    tracing::error!(
                        stuck = self.retired.lock().len(),
                        held_back = held,
                        "scan workers stuck and too many already replaced; not replacing more"
                    );
                }
                return;
            }
            if self.stopping.load(Relaxed) {
                return;
            }
            slot.retired.store(true, Relaxed);
            // Detach it: the live list is what `stop` sends stops to and joins.
            self.live.lock().retain(|(s, _)| !Arc::ptr_eq(s, &slot));
            self.retired.lock().push(Arc::clone(&slot));
            self.metrics.workers_replaced.fetch_add(1, Relaxed);
            tracing::warn!(
                queue_id = slot.job.lock().as_deref(),
                busy_ms = now.saturating_sub(slot.busy_since.load(Relaxed)),
                "scan worker stuck on one message; replaced by a fresh one"
            );
            if let Err(e) = self.spawn(None) {
                tracing::error!(error = %e, "cannot start a scan worker to replace a stuck one");
            }
        }
    }

    /// Retired workers still running their job.
    fn stuck(&self) -> usize {
        self.retired
            .lock()
            .iter()
            .filter(|s| s.busy_since.load(Relaxed) != 0)
            .count()
    }
}

/// The running pool.
pub struct Pool {
    tx: Sender<Job>,
    pool: Arc<Workers>,
    supervisor: Mutex<Option<(std::sync::mpsc::Sender<()>, JoinHandle<()>)>>,
    workers: usize,
    capacity: usize,
    /// The network checks every scanned message gets first (none: offline).
    checker: Option<Arc<Checker>>,
}

impl Pool {
    /// Key files of the signer's `keys` template are read again at their next use.
    pub fn forget_template_keys(&self) {
        if let Some(signer) = &self.pool.signer {
            signer.forget_loaded();
        }
    }

    /// Starts `workers` threads behind a queue of `capacity` jobs; a worker busy on one job
    /// for longer than `stuck_after` is replaced.
    pub fn start(
        scanner: Arc<Scanner>,
        workers: usize,
        capacity: usize,
        metrics: Arc<Metrics>,
        stuck_after: Duration,
        signer: Option<Arc<Signer>>,
    ) -> std::io::Result<Pool> {
        let workers = workers.max(1);
        let capacity = capacity.max(1);
        let (tx, rx) = bounded(capacity);
        let (warm_tx, warm_rx) = std::sync::mpsc::channel();
        let pool = Arc::new(Workers {
            scanner,
            signer,
            rx,
            metrics,
            epoch: Instant::now(),
            live: Mutex::new(Vec::with_capacity(workers)),
            retired: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            full_log: LogThrottle::new(Duration::from_secs(10)),
        });
        for _ in 0..workers {
            pool.spawn(Some(warm_tx.clone()))?;
        }
        // The supervisor looks four times per `stuck_after` (at least every second), and
        // leaves when its channel closes.
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let tick = (stuck_after / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let watched = Arc::clone(&pool);
        let supervisor = std::thread::Builder::new()
            .name("shrike-scan-supervisor".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(tick)
                {
                    watched.supervise(stuck_after);
                }
            })?;
        // Serve only once every worker has its Lua state: the first messages would otherwise
        // wait for it. A worker that takes longer than this still builds it on its first job.
        let deadline = Instant::now() + WARM_WAIT;
        for _ in 0..workers {
            let left = deadline.saturating_duration_since(Instant::now());
            if warm_rx.recv_timeout(left).is_err() {
                tracing::warn!("scan workers still building their rule states; serving anyway");
                break;
            }
        }
        Ok(Pool {
            tx,
            pool,
            supervisor: Mutex::new(Some((stop_tx, supervisor))),
            workers,
            capacity,
            checker: None,
        })
    }

    /// Gives every scanned message its network checks before it is queued.
    pub fn with_checker(mut self, checker: Arc<Checker>) -> Pool {
        self.checker = Some(checker);
        self
    }

    pub fn checker(&self) -> Option<&Arc<Checker>> {
        self.checker.as_ref()
    }

    /// Scans a message; `Busy` at once when the queue is full.
    pub async fn scan(
        &self,
        mut request: ScanRequest,
        timeout: Duration,
    ) -> Result<ScanReply, PoolError> {
        self.check_network(&mut request).await?;
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Scan {
            request: Box::new(request),
            enqueued: Instant::now(),
            reply,
            span: tracing::Span::current(),
        })?;
        wait(rx, timeout).await
    }

    /// Records a complaint (`Counter::Complaint`) or rescue (`Counter::Rescue`).
    pub async fn learn(
        &self,
        raw: Vec<u8>,
        held: Reservation,
        counter: Counter,
        timeout: Duration,
    ) -> Result<LearnReply, PoolError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Learn {
            raw,
            held,
            counter,
            reply,
            span: tracing::Span::current(),
        })?;
        wait(rx, timeout).await
    }

    /// A trial scan: `shrike scan`'s report of the message (README.md, `shrike scan`), leaving the store,
    /// the classifier and the scan counters as they were.
    pub async fn test(
        &self,
        mut request: ScanRequest,
        timeout: Duration,
    ) -> Result<serde_json::Value, PoolError> {
        // A trial sees what a scan would, the network checks included.
        self.check_network(&mut request).await?;
        let (reply, rx) = oneshot::channel();
        self.submit(Job::Test {
            request: Box::new(request),
            reply,
        })?;
        wait(rx, timeout).await
    }

    /// Fills a request's network checks when the pool has a checker and the request has none.
    /// A full queue refuses at once, without the lookups; otherwise the connection's task waits
    /// here, at most the budget, and the worker never does.
    async fn check_network(&self, request: &mut ScanRequest) -> Result<(), PoolError> {
        if let (Some(checker), None) = (&self.checker, &request.checks) {
            if self.tx.is_full() {
                return Err(PoolError::Busy);
            }
            let checks = checker.check(&request.raw, &request.envelope).await;
            request.checks = Some(Arc::new(checks));
        }
        Ok(())
    }

    fn submit(&self, job: Job) -> Result<(), PoolError> {
        self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => PoolError::Busy,
            TrySendError::Disconnected(_) => PoolError::Stopped,
        })
    }

    /// Jobs waiting for a worker.
    pub fn depth(&self) -> usize {
        self.tx.len()
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Retired workers still running the job they were stuck on.
    pub fn stuck(&self) -> usize {
        self.pool.stuck()
    }

    /// Lets the queued jobs finish, then stops and joins the workers (blocking). Retired
    /// workers still stuck are not waited for.
    pub fn stop(&self) {
        self.pool.stopping.store(true, Relaxed);
        if let Some((tx, handle)) = self.supervisor.lock().take() {
            drop(tx);
            let _ = handle.join();
        }
        let live: Vec<(Arc<WorkerSlot>, JoinHandle<()>)> =
            std::mem::take(&mut *self.pool.live.lock());
        for _ in 0..live.len() {
            // FIFO: every job queued before the stops is still served.
            let _ = self.tx.send(Job::Stop);
        }
        for (_, h) in live {
            let _ = h.join();
        }
    }
}

async fn wait<T>(rx: oneshot::Receiver<T>, timeout: Duration) -> Result<T, PoolError> {
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(reply)) => Ok(reply),
        // The worker dropped the sender: it panicked on this message (logged there).
        Ok(Err(_)) => Err(PoolError::Stopped),
        Err(_) => Err(PoolError::Timeout),
    }
}

/// How long `Pool::start` waits for the workers' first Lua states.
const WARM_WAIT: Duration = Duration::from_secs(30);
/// An idle worker checks this often for a new rule generation and builds its state for it (so
/// the first message after a reload does not pay the build either), and hands over its counters.
const IDLE_WARM: Duration = Duration::from_secs(1);

fn worker_loop(pool: &Workers, slot: &WorkerSlot, warm: Option<std::sync::mpsc::Sender<()>>) {
    let (scanner, rx, metrics) = (&pool.scanner, &pool.rx, &*pool.metrics);
    let mut worker = scanner.worker();
    worker.rules().warm();
    if let Some(warm) = warm {
        let _ = warm.send(());
    }
    loop {
        let job = match rx.recv_timeout(IDLE_WARM) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                // Idle: per-rule counters reach /metrics, and a new generation gets built.
                worker.rules().flush_counters();
                worker.rules().warm();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if matches!(job, Job::Stop) {
            break;
        }
        *slot.job.lock() = match &job {
            Job::Scan { request, .. } => request.envelope.queue_id.clone(),
            _ => None,
        };
        slot.busy_since.store(pool.now_ms(), Relaxed);
        let signer = pool.signer.as_deref();
        let result = catch_unwind(AssertUnwindSafe(|| {
            run_job(&mut worker, job, metrics, signer)
        }));
        slot.busy_since.store(0, Relaxed);
        if slot.retired.load(Relaxed) {
            // Replaced while stuck on that job: a fresh worker serves in its place.
            tracing::info!("a replaced scan worker finished its job and leaves");
            break;
        }
        if result.is_err() {
            // The message is lost to this worker (its caller sees an error and falls back);
            // the Lua state may be inconsistent, so build a fresh one.
            tracing::error!("scan worker panicked; rebuilding it");
            metrics
                .worker_restarts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            worker = scanner.worker();
        }
    }
    worker.rules().flush_counters();
}

/// Charges a job's analysis to the budget on top of its body, for as long as the worker holds
/// it: forced, as a message already admitted is scanned whatever arrives meanwhile; new ones
/// are refused until the charge is given back.
/// Signs a message that leaves with its headers unchanged (no action, greylist, add header:
/// a rewritten subject would break the signature, and refused mail is not sent), and says so
/// in its symbols: `DKIM_SIGNED`, or `DKIM_SIGN_FAIL` with the reason when it should have been.
fn sign(
    signer: &Signer,
    verdict: &mut Verdict,
    raw: &[u8],
    envelope: &Envelope,
    from: Option<&str>,
) {
    if !leaves_unchanged(verdict.action) {
        return;
    }
    match signer.sign(raw, envelope.user.as_deref(), from) {
        Outcome::Skipped => {}
        Outcome::Signed { domain, value } => {
            verdict.note("DKIM_SIGNED", None, vec![domain]);
            verdict.dkim_signature = Some(value);
        }
        Outcome::Failed { domain, reason } => {
            tracing::warn!(%domain, %reason, "DKIM signing failed; the message goes unsigned");
            verdict.note("DKIM_SIGN_FAIL", None, vec![format!("{domain}: {reason}")]);
        }
    }
}

/// Seals an accepted inbound message that leaves with its headers unchanged (as `sign`):
/// `ARC_SEALED` with the sealing domain, or `ARC_SEAL_FAIL` (score 0) with why not.
fn arc_seal(verdict: &mut Verdict, seal: &Result<String, String>) {
    if !leaves_unchanged(verdict.action) {
        return;
    }
    let (name, option) = match seal {
        Ok(set) => {
            verdict.arc_seal = crate::sign::seal_fields(set);
            let domain = verdict
                .arc_seal
                .first()
                .and_then(|(_, v)| {
                    v.split(';')
                        .find_map(|t| t.trim().strip_prefix("d=").map(str::to_string))
                })
                .unwrap_or_default();
            ("ARC_SEALED", domain)
        }
        Err(reason) => {
            tracing::warn!(%reason, "ARC sealing failed; the message goes unsealed");
            ("ARC_SEAL_FAIL", reason.clone())
        }
    };
    verdict.note(name, None, vec![option]);
}

/// Whether a message with this action is delivered as it came (at most with `X-Spam-*` headers
/// added): only those are signed or sealed.
fn leaves_unchanged(action: crate::verdict::Action) -> bool {
    use crate::verdict::Action;
    matches!(
        action,
        Action::NoAction | Action::Greylist | Action::AddHeader
    )
}

fn charge_analysis(held: &mut Reservation, raw: &[u8], limit: usize) {
    let analysed = raw.len().min(limit);
    held.force(
        held.bytes()
            .saturating_add(analysed.saturating_mul(ANALYSIS_FACTOR)),
    );
}

fn run_job(worker: &mut ScanWorker, job: Job, metrics: &Metrics, signer: Option<&Signer>) {
    match job {
        Job::Scan {
            mut request,
            enqueued,
            reply,
            span,
        } => {
            // Every log line of this scan (rules' included) carries the queue id; the lines after
            // the verdict also the generation of the rules that judged it.
            let span = tracing::info_span!(
                parent: &span,
                "scan",
                queue_id = request.envelope.queue_id.as_deref(),
                generation = tracing::field::Empty
            );
            let _entered = span.enter();
            if reply.is_closed() {
                // The client gave up (timeout or disconnect) while the job waited.
                return;
            }
            let queued = enqueued.elapsed();
            let start = Instant::now();
            let scanner = worker.scanner().clone();
            let limit = scanner.limits().max_message_bytes;
            charge_analysis(&mut request.held, &request.raw, limit);
            let input = prepare(&request.raw, scanner.limits());
            let mut scanned =
                worker.scan_with(&input, &request.envelope, request.checks.as_deref());
            let owned = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect();
            let cfg = scanner.classifier().config();
            // Our users' own mail is not received mail: it trains nothing.
            let autolearn = (cfg.autolearn_spam_at.is_some() || cfg.autolearn_ham_at.is_some())
                && !scanned.updates.outbound;
            if scanned.updates.outbound {
                metrics.outbound_scans.fetch_add(1, Relaxed);
                if scanned
                    .verdict
                    .symbols
                    .contains_key(crate::outbound::OUTBOUND_LIMIT)
                {
                    metrics.outbound_limited.fetch_add(1, Relaxed);
                }
            }
            let mut verdict = if autolearn {
                scanned.verdict.clone()
            } else {
                std::mem::take(&mut scanned.verdict)
            };
            if let Some(signer) = signer {
                let from = scanned.analysis.entities.from().map(|e| e.address.as_str());
                sign(signer, &mut verdict, &request.raw, &request.envelope, from);
            }
            if !scanned.updates.outbound {
                if let Some(seal) = request.checks.as_ref().and_then(|c| c.arc_seal.as_ref()) {
                    arc_seal(&mut verdict, seal);
                }
            }
            let (urls, emails) = if request.lists {
                (
                    owned(scanned.analysis.distinct_urls()),
                    owned(scanned.analysis.distinct_emails()),
                )
            } else {
                (Vec::new(), Vec::new())
            };
            // A copy: the analysis still borrows the bytes, and the store updates below come
            // after the answer.
            let kept = request
                .keep
                .contains(verdict.action)
                .then(|| request.raw.clone());
            let answer = ScanReply {
                urls,
                emails,
                verdict,
                message_id: scanned.analysis.entities.message_id.clone(),
                subject: scanned.analysis.message.subject.display.clone(),
                from: scanned.analysis.entities.from().map(|e| e.address.clone()),
                times: scanned.times,
                queued,
                checks: request.checks.clone(),
                kept,
            };
            span.record("generation", answer.verdict.generation);
            metrics.scanned(answer.verdict.action);
            metrics.stage(Stage::Queue, queued);
            metrics.stage(Stage::Analyze, answer.times.analyze);
            metrics.stage(Stage::Lookup, answer.times.lookup);
            metrics.stage(Stage::Rules, answer.times.rules);
            metrics.stage(Stage::Total, start.elapsed());
            if let Some(c) = &request.checks {
                metrics.stage(Stage::Dns, Duration::from_micros(c.waited_us));
            }
            tracing::debug!(
                action = answer.verdict.action.as_str(),
                score = answer.verdict.score,
                "verdict"
            );
            let _ = reply.send(answer);
            scanner.apply(&scanned.updates);
            if autolearn {
                worker.autolearn(&scanned);
            }
        }
        Job::Learn {
            raw,
            mut held,
            counter,
            reply,
            span,
        } => {
            let _entered = tracing::info_span!(parent: &span, "learn", ?counter).entered();
            let limit = worker.scanner().limits().max_message_bytes;
            charge_analysis(&mut held, &raw, limit);
            // (counted by `ops` once it is taken)
            let learned = worker.learn(&raw, counter);
            let _ = reply.send(LearnReply {
                keys: learned.keys,
                message_id: learned.message_id,
                trained: learned.trained,
                duplicate: learned.duplicate,
                journal_error: learned.journal_error,
                store_error: learned.store_error,
            });
        }
        Job::Test { mut request, reply } => {
            if reply.is_closed() {
                return;
            }
            let limit = worker.scanner().limits().max_message_bytes;
            charge_analysis(&mut request.held, &request.raw, limit);
            let input = prepare(&request.raw, worker.scanner().limits());
            let scanned = worker.trial(&input, &request.envelope, request.checks.as_deref());
            // The report borrows the analysis: serialized here, on the worker.
            let report = serde_json::to_value(scanned.analysis.report("test", &scanned.verdict))
                .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }));
            let _ = reply.send(report);
        }
        Job::Stop => {}
    }
}
