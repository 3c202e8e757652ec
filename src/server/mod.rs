//! `shrike serve`: the daemon. Opens the durable store, loads the rules, starts the scan worker
//! pool, serves HTTP (rspamd's protocol plus shrike's endpoints), milter and (when configured)
//! SpamAssassin's spamd protocol, reloads on SIGHUP,
//! and shuts down gracefully on SIGTERM/SIGINT.
//!
//! Owns: the listeners, the runtime, the worker pool, the shutdown order, and the `[server]`,
//! `[http]`, `[milter]` and `[spamd]` options. Never touches: wire formats and the milter session's logic
//! (`proto`), scoring (`scan`).

pub mod access;
pub mod activity;
pub mod budget;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod milter;
mod notify;
pub mod ops;
pub mod pool;
mod quarantine;
mod record;
pub mod sniff;
pub mod spamd;
mod ui;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Semaphore};

use crate::auth::AuthConfig;
use crate::classify::SnapshotError;
use crate::datadir::DataDir;
use crate::dns::DnsConfig;
use crate::dnsbl::ZoneConfig;
use crate::engine::{LoadError, Overrides, RuleLocation};
use crate::history::HistoryConfig;
use crate::scan::{ScanSettings, Scanner};
use crate::store::{
    Committer, PersistConfig, PersistError, ReputationStore, Store, StoreConfig, Sweeper,
    SystemClock,
};
use listen::Listen;
use metrics::Metrics;
use pool::Pool;

/// What the daemon reads of the configuration (`Config::serve_settings` composes it): its own
/// sections, those of the modules it starts, the scanner's settings, and how a reload reads the
/// file again.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub server: ServerConfig,
    pub http: http::HttpConfig,
    pub milter: milter::MilterConfig,
    pub spamd: spamd::SpamdConfig,
    pub access: access::AccessConfig,
    pub store: StoreConfig,
    pub persist: PersistConfig,
    pub history: HistoryConfig,
    pub quarantine: crate::quarantine::QuarantineConfig,
    pub dns: DnsConfig,
    pub dnsbl: Vec<ZoneConfig>,
    pub auth: AuthConfig,
    /// `[limits]`, `[verdict]`, `[scan]`, `[engine]`, `[classifier]`, `[scores]` and `[rules]`.
    pub scan: ScanSettings,
    /// `[dkim_signing]`: the keys outbound mail is signed with.
    pub dkim_signing: crate::sign::DkimSigningConfig,
    /// `[arc]`: the key accepted inbound mail is sealed with.
    pub arc: crate::sign::ArcConfig,
    /// Where SIGHUP and `POST /reload` read `[scores]` and `[rules]` again (none without a
    /// configuration file).
    pub reread: Option<Reread>,
}

/// The configuration file a reload reads again, and how: `read` parses and checks the whole
/// file as at start and gives its rule-set overrides, or the error as a message
/// (`config::reread_overrides`).
#[derive(Debug, Clone)]
pub struct Reread {
    pub path: PathBuf,
    pub read: fn(&Path) -> Result<Overrides, String>,
}

/// `[server]`: workers, queue, state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Scan worker threads, each with its own Lua state (0: one per core).
    pub workers: usize,
    /// Threads serving sockets (0: one per two cores, 1 to 2). They only parse and write.
    pub io_threads: usize,
    /// Messages waiting for a worker before new ones are refused (0: 64 per worker).
    pub queue: usize,
    /// Message bytes held at once by every listener together (bodies being read or inflated,
    /// queued, in the workers); beyond, new messages are refused (0: sized for the machine,
    /// `budget::default_limit`).
    pub inflight_bytes: usize,
    /// A scan not answered within this many milliseconds gets the fallback (milter) or 503.
    pub scan_timeout_ms: u64,
    /// A worker busy on one job this long is replaced by a fresh one (0: twice
    /// `scan_timeout_ms`).
    pub stuck_worker_ms: u64,
    /// Reputation state (WAL, snapshots).
    pub data_dir: PathBuf,
    /// Move damaged WAL or snapshot files aside at startup instead of refusing to start.
    pub salvage: bool,
    /// Seconds a full sweep of the store (expired buckets, empty keys) takes.
    pub sweep_cycle_secs: u64,
    /// At shutdown, how long open connections may take to finish their messages.
    pub shutdown_grace_secs: u64,
}

/// Why the `[server]`, `[http]` or `[milter]` options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("server.scan_timeout_ms must be greater than 0")]
    ScanTimeout,
    #[error("http.max_body_bytes must be greater than 0")]
    MaxBody,
    #[error(
        "http.max_headers must be at least {MIN_HTTP_HEADERS}, got {0}: clients send several \
         headers of their own (rspamc 5 to 10)"
    )]
    MaxHeaders(usize),
    #[error(
        "http.max_header_bytes must be at least {MIN_HTTP_HEADER_BYTES}, got {0}: the HTTP \
         parser's smallest read buffer"
    )]
    MaxHeaderBytes(usize),
    #[error(
        "server.inflight_bytes ({budget}) must hold two messages of the largest size accepted \
         ({largest} bytes: http.max_body_bytes, spamd.max_body_bytes, limits.max_message_bytes)"
    )]
    Budget { budget: usize, largest: usize },
    #[error("http.password is empty: it would let in whoever sends an empty Password header; remove the line for no password")]
    EmptyPassword,
    #[error(transparent)]
    Milter(#[from] milter::MilterConfigError),
    #[error(transparent)]
    Access(#[from] access::AccessConfigError),
}

/// The fewest request headers `[http] max_headers` may allow.
pub const MIN_HTTP_HEADERS: usize = 16;
/// The smallest request head `[http] max_header_bytes` may allow: hyper's least buffer size.
pub const MIN_HTTP_HEADER_BYTES: usize = 8192;

/// Checks the daemon's sections: values that parse but make no sense. `max_message_bytes`
/// (`[limits]`) bounds what a milter session collects.
pub fn validate(
    server: &ServerConfig,
    http: &http::HttpConfig,
    milter: &milter::MilterConfig,
    spamd: &spamd::SpamdConfig,
    max_message_bytes: usize,
) -> Result<(), SettingsError> {
    if server.scan_timeout_ms == 0 {
        return Err(SettingsError::ScanTimeout);
    }
    if http.max_body_bytes == 0 {
        return Err(SettingsError::MaxBody);
    }
    if http.max_headers < MIN_HTTP_HEADERS {
        return Err(SettingsError::MaxHeaders(http.max_headers));
    }
    if http.max_header_bytes < MIN_HTTP_HEADER_BYTES {
        return Err(SettingsError::MaxHeaderBytes(http.max_header_bytes));
    }
    // A message briefly needs twice its size (a compressed body beside what it inflates to, a
    // milter message beside the parts it is built from): a smaller budget would refuse the
    // largest messages for ever, as busy rather than too large.
    let largest = largest_message(http, spamd, max_message_bytes);
    if server.inflight_bytes != 0 && server.inflight_bytes < largest.saturating_mul(2) {
        return Err(SettingsError::Budget {
            budget: server.inflight_bytes,
            largest,
        });
    }
    if http.password.as_deref() == Some("") {
        return Err(SettingsError::EmptyPassword);
    }
    milter.validate()?;
    Ok(())
}

/// The largest message a listener accepts.
fn largest_message(
    http: &http::HttpConfig,
    spamd: &spamd::SpamdConfig,
    max_message_bytes: usize,
) -> usize {
    http.max_body_bytes
        .max(spamd.max_body_bytes)
        .max(max_message_bytes)
}

/// Why the daemon could not start, or could not save its state at shutdown. Each message says
/// which step failed; the underlying error is its source.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// An I/O step (`what` names it) failed.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The data directory is in use, or its store or classifier cannot be opened.
    #[error(transparent)]
    DataDir(#[from] crate::datadir::DataDirError),
    #[error("loading the rules")]
    Rules(#[source] LoadError),
    /// The rule directory cannot be watched.
    #[error(transparent)]
    Watch(crate::engine::watch::WatchError),
    #[error("{0}: the listener is off")]
    ListenerOff(&'static str),
    #[error("no listener is configured (HTTP, milter and spamd are all off)")]
    NoListener,
    #[error("saving the classifier at shutdown")]
    SaveClassifier(#[source] SnapshotError),
    #[error("opening the decision history")]
    History(#[source] crate::history::HistoryError),
    #[error("opening the quarantine")]
    Quarantine(#[source] crate::quarantine::QuarantineError),
    #[error("writing the final snapshot at shutdown")]
    CloseData(#[source] PersistError),
    #[error("starting the DNS checks")]
    Dns(#[source] crate::netcheck::NetcheckError),
    #[error("starting the redis store")]
    Redis(#[source] crate::store::redis::RedisStoreError),
    /// A `[[dkim_signing.domain]]` key that cannot be read (config check says it first).
    #[error("DKIM signing: {0}")]
    Sign(String),
    #[error(transparent)]
    ShareLearns(crate::store::redis::learns::ShareError),
}

impl ServeError {
    /// An I/O error of the step `what`.
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServeError {
        let what = what.into();
        move |source| ServeError::Io { what, source }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            workers: 0,
            io_threads: 0,
            queue: 0,
            inflight_bytes: 0,
            scan_timeout_ms: 10_000,
            stuck_worker_ms: 0,
            data_dir: PathBuf::from("shrike-data"),
            salvage: false,
            sweep_cycle_secs: 600,
            shutdown_grace_secs: 30,
        }
    }
}

/// The shared state of a running daemon.
pub struct Daemon {
    pub config: ServeSettings,
    pub scanner: Arc<Scanner>,
    pub store: Arc<Store>,
    /// Writes a learn's increments to the WAL before it is acknowledged.
    pub committer: Committer,
    /// Whether the data directory takes the writes (`/health`'s `persistence`).
    pub persist_health: Arc<crate::store::PersistHealth>,
    pub pool: Pool,
    /// The message bytes every listener may hold at once.
    pub budget: Arc<budget::Budget>,
    pub metrics: Arc<Metrics>,
    /// The decision history (does nothing when `[history]` is off).
    pub history: crate::history::Recorder,
    /// The kept bodies of refused messages (does nothing when `[quarantine]` is off).
    pub quarantine: crate::quarantine::Quarantine,
    /// The key of the per-recipient quarantine links (none when the quarantine is off).
    pub links: Option<crate::quarantine::links::LinkKey>,
    /// The action thresholds in rspamd's names, from the config.
    pub thresholds: BTreeMap<&'static str, f64>,
    pub started: Instant,
    /// False until the listeners are up, and again from the start of shutdown.
    pub ready: AtomicBool,
    /// HTTP requests being answered: at shutdown the HTTP listener serves (`/health` 503, new
    /// scans refused) until none is left.
    pub http_in_flight: std::sync::atomic::AtomicUsize,
    /// The web UI's login sessions.
    pub ui: ui::Sessions,
    /// Who may do what (`[access]`).
    pub access: access::Access,
}

impl Daemon {
    pub fn scan_timeout(&self) -> Duration {
        Duration::from_millis(self.config.server.scan_timeout_ms.max(1))
    }

    /// How long one job may hold a worker before it is replaced.
    pub fn stuck_after(config: &ServerConfig) -> Duration {
        Duration::from_millis(match config.stuck_worker_ms {
            0 => config.scan_timeout_ms.max(1).saturating_mul(2),
            ms => ms,
        })
    }

    /// Rebuilds the rules (SIGHUP, `POST /reload`); blocking. The engine logs the outcome once
    /// (the new generation, or the error while the previous rules keep serving); the scan
    /// workers switch to the new generation at their next scan without logging.
    ///
    /// With a configuration file, its `[scores]` and `[rules]` are read again first (the other
    /// sections apply at the next start); a file that no longer parses fails the reload.
    pub fn reload(&self) -> Result<u64, LoadError> {
        // Key files named by the `keys` template are read again at their next use (a rotated
        // key); the listed domains' keys at the next start.
        self.pool.forget_template_keys();
        let engine = self.scanner.engine();
        let Some(reread) = &self.config.reread else {
            return engine.reload();
        };
        match (reread.read)(&reread.path) {
            Ok(overrides) => engine.reload_with(overrides),
            Err(message) => {
                let e = LoadError::Read {
                    file: reread.path.display().to_string(),
                    message,
                };
                engine.reload_failed(&e);
                Err(e)
            }
        }
    }
}

/// Runs the daemon until SIGTERM/SIGINT.
pub fn serve(config: ServeSettings, rules: RuleLocation) -> Result<(), ServeError> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let s = &config.server;
    // With a shared store a scan waits for its reads on the network: more workers than cores
    // keep the cores busy meanwhile, and more reads in flight share each batch. Eight per core
    // carried 10-15% more than four or sixteen per core (BENCHMARKS.md, "Shared reputation on
    // Redis").
    let workers = match (s.workers, config.store.backend) {
        (0, crate::store::redis::Backend::Redis) => cores * 8,
        (0, _) => cores,
        (n, _) => n,
    };
    let queue = if s.queue == 0 { workers * 64 } else { s.queue };
    // One socket thread per two cores (1–2): on a small machine the scan workers need the cores,
    // and every extra socket thread adds wake-ups that preempt them and cost scan throughput
    // (measured under HTTP load; BENCHMARKS.md, the daemon's section).
    let io_threads = if s.io_threads == 0 {
        (cores / 2).clamp(1, 2)
    } else {
        s.io_threads
    };

    let DataDir {
        durable,
        classifier,
        classifier_path,
        lock: _lock,
        ..
    } = crate::datadir::open(
        &s.data_dir,
        &config.store,
        &config.persist,
        &config.scan.classifier,
        s.salvage,
    )?;
    let (history, history_writer) =
        crate::history::open(&s.data_dir, &config.history).map_err(ServeError::History)?;
    if history.enabled() {
        tracing::info!(dir = %s.data_dir.join(crate::history::DIR).display(), "decision history on");
    }
    let (quarantine, quarantine_writer) =
        crate::quarantine::open(&s.data_dir, &config.quarantine).map_err(ServeError::Quarantine)?;
    let links = match quarantine.store() {
        Some(store) => {
            tracing::info!(
                dir = %store.dir().display(),
                encrypted = store.encrypted(),
                "quarantine on"
            );
            Some(
                crate::quarantine::links::LinkKey::open(store.dir())
                    .map_err(ServeError::io("opening the quarantine's link key"))?,
            )
        }
        None => None,
    };
    let store = durable.store().clone();
    let sweeper = Sweeper::spawn(store.clone(), Duration::from_secs(s.sweep_cycle_secs))
        .map_err(ServeError::io("starting the sweeper"))?;
    let shared: Arc<dyn ReputationStore> = match config.store.backend {
        crate::store::redis::Backend::Memory => store.clone(),
        crate::store::redis::Backend::Redis => {
            let redis = Arc::new(
                crate::store::redis::RedisStore::new(&config.store, Arc::new(SystemClock))
                    .map_err(ServeError::Redis)?,
            );
            if config.store.redis.shared_classifier && classifier.config().enabled {
                crate::store::redis::learns::share(&redis, &classifier, &s.data_dir)
                    .map_err(ServeError::ShareLearns)?;
            }
            redis
        }
    };
    let scanner = Scanner::with_classifier(&config.scan, rules, shared, classifier.clone())
        .map_err(ServeError::Rules)?;
    let persist_health = durable.health();
    let classifier_snapshots = ClassifierSnapshots::spawn(
        classifier.clone(),
        classifier_path.clone(),
        config.persist.snapshot_secs,
        config.persist.fsync,
        persist_health.clone(),
    )?;
    let watcher = crate::engine::watch::watch(scanner.engine()).map_err(ServeError::Watch)?;
    let metrics = Arc::new(Metrics::default());
    let stuck_after = Daemon::stuck_after(&config.server);
    let signer = crate::sign::Signer::new(&config.dkim_signing)
        .map_err(|e| ServeError::Sign(e.to_string()))?
        .map(Arc::new);
    let pool = Pool::start(
        scanner.clone(),
        workers,
        queue,
        metrics.clone(),
        stuck_after,
        signer,
    )
    .map_err(ServeError::io("starting the scan workers"))?;
    let pool = match crate::netcheck::from_config(
        &config.dns,
        &config.dnsbl,
        &config.auth,
        &config.scan.limits,
        true,
    )
    .map_err(ServeError::Dns)?
    {
        Some(checker) => {
            let sealer = crate::sign::Sealer::new(&config.arc)
                .map_err(|e| ServeError::Sign(e.to_string()))?
                .map(Arc::new);
            pool.with_checker(Arc::new(checker.with_sealer(sealer)))
        }
        None => {
            if config.arc.enabled {
                tracing::warn!(
                    "[arc] is enabled but the network checks are off ([dns]): nothing is sealed"
                );
            }
            pool
        }
    };
    let budget = budget::Budget::new(
        match s.inflight_bytes {
            0 => budget::default_limit(largest_message(
                &config.http,
                &config.spamd,
                config.scan.limits.max_message_bytes,
            )),
            n => n,
        },
        cores,
    );
    let access = access::Access::new(&config.access, config.http.password());
    let daemon = Arc::new(Daemon {
        thresholds: config.scan.verdict.thresholds(),
        budget,
        config,
        scanner,
        store,
        committer: durable.committer(),
        persist_health: persist_health.clone(),
        pool,
        metrics,
        history,
        quarantine,
        links,
        started: Instant::now(),
        ready: AtomicBool::new(false),
        http_in_flight: std::sync::atomic::AtomicUsize::new(0),
        ui: ui::Sessions::default(),
        access,
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(io_threads)
        .thread_name("shrike-io")
        .enable_all()
        .build()
        .map_err(ServeError::io("starting the I/O runtime"))?;
    let served = runtime.block_on(run(daemon.clone()));
    runtime.shutdown_timeout(Duration::from_secs(1));

    // Every connection is closed: finish the queued scans, then make the state durable.
    daemon.pool.stop();
    drop(watcher);
    drop(sweeper);
    let store_keys = daemon.store.stats().keys;
    drop(daemon);
    // The last batch of the history goes to disk, and the last kept messages.
    drop(history_writer);
    drop(quarantine_writer);
    drop(classifier_snapshots);
    let saved = classifier.save(&classifier_path);
    report_classifier_save(&persist_health, &saved);
    // The store's final snapshot is taken even when the classifier's failed (a full disk):
    // each stands alone, and the journal keeps the classifier's learns meanwhile.
    let closed = durable.close();
    saved.map_err(ServeError::SaveClassifier)?;
    closed.map_err(ServeError::CloseData)?;
    tracing::info!(keys = store_keys, "state saved; bye");
    served
}

/// Saves the classifier every `persist.snapshot_secs` (with the store's snapshots) when it has
/// learned since the last save, which empties its learn journal, and at once when its journal
/// needs a snapshot (a failed fsync). Once a second it writes what failed journal writes left
/// over, and under `fsync = "every_second"` fsyncs the journal. A failed save is tried again
/// after 1 s, then 2, 4 … up to the snapshot interval (at most a minute). Stops when dropped.
struct ClassifierSnapshots(Option<(crossbeam_channel::Sender<()>, std::thread::JoinHandle<()>)>);

impl ClassifierSnapshots {
    fn spawn(
        classifier: Arc<crate::classify::Classifier>,
        path: std::path::PathBuf,
        every_secs: u64,
        fsync: crate::store::FsyncPolicy,
        health: Arc<crate::store::PersistHealth>,
    ) -> Result<ClassifierSnapshots, ServeError> {
        if !classifier.config().enabled {
            return Ok(ClassifierSnapshots(None));
        }
        let every = Duration::from_secs(every_secs);
        let max_backoff = every.clamp(Duration::from_secs(1), Duration::from_secs(60));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("shrike-clf-snap".into())
            .spawn(move || {
                let mut saved = classifier.learned();
                let mut last_save = Instant::now();
                let mut retry_at: Option<Instant> = None;
                let mut backoff = Duration::from_secs(1);
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Duration::from_secs(1))
                {
                    // The journal reports its failures (log, /health) itself.
                    let _ = if fsync == crate::store::FsyncPolicy::EverySecond {
                        classifier.sync_journal()
                    } else {
                        classifier.flush_journal()
                    };
                    let learned = classifier.learned();
                    let due = classifier.journal_needs_snapshot()
                        || match retry_at {
                            Some(at) => Instant::now() >= at,
                            None => {
                                every_secs > 0 && last_save.elapsed() >= every && learned != saved
                            }
                        };
                    if !due {
                        continue;
                    }
                    last_save = Instant::now();
                    let result = classifier.save(&path);
                    report_classifier_save(&health, &result);
                    match result {
                        Ok(()) => {
                            saved = learned;
                            retry_at = None;
                            backoff = Duration::from_secs(1);
                            tracing::debug!(spam = learned.0, ham = learned.1, "classifier saved");
                        }
                        Err(_) => {
                            retry_at = Some(Instant::now() + backoff);
                            backoff = (backoff * 2).min(max_backoff);
                        }
                    }
                }
            })
            .map_err(ServeError::io("starting the classifier snapshots"))?;
        Ok(ClassifierSnapshots(Some((stop, thread))))
    }
}

fn report_classifier_save(
    health: &crate::store::PersistHealth,
    result: &Result<(), crate::classify::SnapshotError>,
) {
    use crate::store::persist::Part;
    match result {
        Ok(()) => health.ok(Part::ClassifierSnapshot),
        Err(e) => health.failed(Part::ClassifierSnapshot, e),
    }
}

impl Drop for ClassifierSnapshots {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.0.take() {
            // Disconnecting the channel ends the thread's wait.
            drop(stop);
            let _ = thread.join();
        }
    }
}

/// The start-up warnings of an access model open wider than it may look: admin or read access
/// beyond loopback without a password hash while HTTP listens beyond loopback, and a plain-text
/// password.
fn warn_about_access(config: &ServeSettings, http: &Listen) {
    let a = &config.access;
    let beyond_loopback = match http {
        Listen::Tcp(addr) => addr
            .parse::<std::net::SocketAddr>()
            .map_or(true, |s| !s.ip().is_loopback()),
        _ => false,
    };
    if beyond_loopback && a.password_hash.is_none() && a.admin_open_beyond_loopback() {
        tracing::warn!(
            listen = %config.http.listen,
            admin_networks = ?a.admin_networks,
            read_networks = ?a.read_networks,
            trusted_proxies = ?a.trusted_proxies,
            "!!! HTTP listens beyond loopback and [access] lets clients beyond loopback learn, \
             reload or read mail metadata without any password: set access.password_hash \
             (shrike passwd) or narrow the networks (docs/security.md)"
        );
    }
    if config.http.password().is_some() {
        tracing::warn!(
            "http.password is a plain-text password in the config: replace it with \
             access.password_hash (shrike passwd)"
        );
    }
}

async fn run(daemon: Arc<Daemon>) -> Result<(), ServeError> {
    use tokio::signal::unix::{signal, SignalKind};
    // `stop`: SIGTERM. `closed`: the HTTP listener stops too, once the requests it was
    // answering at SIGTERM are answered: meanwhile it tells load balancers `/health` 503.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (closed_tx, closed_rx) = watch::channel(false);
    let http_listen = Listen::parse(&daemon.config.http.listen);
    let milter_listen = Listen::parse(&daemon.config.milter.listen);
    let spamd_listen = Listen::parse(&daemon.config.spamd.listen);
    // Each open connection holds a permit; the shutdown waits until it has them all back.
    let http_slots = daemon
        .config
        .http
        .max_connections
        .clamp(1, u32::MAX as usize);
    let milter_slots = daemon
        .config
        .milter
        .max_connections
        .clamp(1, u32::MAX as usize);
    let spamd_slots = daemon
        .config
        .spamd
        .max_connections
        .clamp(1, u32::MAX as usize);
    let http_limit = Arc::new(Semaphore::new(http_slots));
    let milter_limit = Arc::new(Semaphore::new(milter_slots));
    let spamd_limit = Arc::new(Semaphore::new(spamd_slots));

    let a = &daemon.config.access;
    let perms = listen::SocketPerms {
        // (`validate` refused the values that do not convert)
        mode: a.socket_mode().unwrap_or(0o660),
        group: a.socket_group().ok().flatten(),
    };
    warn_about_access(&daemon.config, &http_listen);
    let mut servers = Vec::new();
    if http_listen != Listen::Off {
        let listener = listen::bind(&http_listen, "HTTP", perms).await?;
        servers.push(tokio::spawn(http::run(
            listener,
            daemon.clone(),
            http_limit.clone(),
            closed_rx.clone(),
        )));
    }
    if milter_listen != Listen::Off {
        let listener = listen::bind(&milter_listen, "milter", perms).await?;
        servers.push(tokio::spawn(milter::run(
            listener,
            daemon.clone(),
            milter_limit.clone(),
            stop_rx.clone(),
        )));
    }
    if spamd_listen != Listen::Off {
        let listener = listen::bind(&spamd_listen, "spamd", perms).await?;
        servers.push(tokio::spawn(spamd::run(
            listener,
            daemon.clone(),
            spamd_limit.clone(),
            stop_rx.clone(),
        )));
    }
    if servers.is_empty() {
        return Err(ServeError::NoListener);
    }
    let mut term = signal(SignalKind::terminate()).map_err(ServeError::io("SIGTERM handler"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(ServeError::io("SIGINT handler"))?;
    let mut hup = signal(SignalKind::hangup()).map_err(ServeError::io("SIGHUP handler"))?;
    daemon.ready.store(true, Ordering::Relaxed);
    tracing::info!(
        http = ?http_listen,
        milter = ?milter_listen,
        spamd = ?spamd_listen,
        workers = daemon.pool.workers(),
        inflight_bytes = daemon.budget.limit(),
        generation = daemon.scanner.engine().generation().id,
        "shrike serving"
    );
    notify::ready(daemon.scanner.engine().generation().id);
    notify::watchdog();
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                notify::reloading();
                let d = daemon.clone();
                let _ = tokio::task::spawn_blocking(move || d.reload()).await;
                notify::ready(daemon.scanner.engine().generation().id);
            }
        }
    }
    notify::stopping();
    tracing::info!("shutting down: finishing the open connections; /health answers 503");
    daemon.ready.store(false, Ordering::Relaxed);
    let _ = stop_tx.send(true);
    // Wait for the open connections (each holds a permit) up to the grace period. The HTTP
    // listener goes on answering meanwhile (every reply closes its connection, new scans are
    // refused) until the requests it had are answered; then it closes and its connections
    // (idle keep-alive ones now) end.
    let grace = Duration::from_secs(daemon.config.server.shutdown_grace_secs);
    let drained = tokio::time::timeout(grace, async {
        for (limit, n) in [(&milter_limit, milter_slots), (&spamd_limit, spamd_slots)] {
            let _ = limit.acquire_many(n as u32).await;
        }
        while daemon.http_in_flight.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = closed_tx.send(true);
        let _ = http_limit.acquire_many(http_slots as u32).await;
    })
    .await;
    let _ = closed_tx.send(true);
    for server in servers {
        let _ = server.await;
    }
    if drained.is_err() {
        tracing::warn!(
            ?grace,
            "connections still open after the grace period; closing them"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms() {
        assert_eq!(
            Listen::parse("127.0.0.1:11332"),
            Listen::Tcp("127.0.0.1:11332".into())
        );
        assert_eq!(
            Listen::parse("inet:127.0.0.1:1"),
            Listen::Tcp("127.0.0.1:1".into())
        );
        assert_eq!(
            Listen::parse("unix:/run/s.sock"),
            Listen::Unix("/run/s.sock".into())
        );
        assert_eq!(Listen::parse("off"), Listen::Off);
        assert_eq!(Listen::parse(""), Listen::Off);
    }
}
