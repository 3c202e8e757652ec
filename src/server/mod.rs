//! `shrike serve`: the daemon. Opens the durable store, loads the rules, starts the scan worker
//! pool, serves HTTP (rspamd's protocol plus shrike's endpoints) and milter, reloads on SIGHUP,
//! and shuts down gracefully on SIGTERM/SIGINT.
//!
//! Owns: the listeners, the runtime, the shutdown order, and what the daemon tells the MTA
//! (the X-Spam-* headers). Never touches: wire formats (`proto`), scoring (`scan`).

pub mod http;
pub mod listen;
pub mod metrics;
pub mod milter;
pub mod pool;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Semaphore};

use crate::config::Config;
use crate::engine::RuleLocation;
use crate::scan::{Action, Scanner, Verdict};
use crate::store::{Committer, Durable, ReputationStore, Store, Sweeper, SystemClock};
use listen::Listen;
use metrics::Metrics;
use pool::Pool;

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
    /// A scan not answered within this many milliseconds gets the fallback (milter) or 503.
    pub scan_timeout_ms: u64,
    /// Reputation state (WAL, snapshots).
    pub data_dir: PathBuf,
    /// Move damaged WAL or snapshot files aside at startup instead of refusing to start.
    pub salvage: bool,
    /// Seconds a full sweep of the store (expired buckets, empty keys) takes.
    pub sweep_cycle_secs: u64,
    /// At shutdown, how long open connections may take to finish their messages.
    pub shutdown_grace_secs: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            workers: 0,
            io_threads: 0,
            queue: 0,
            scan_timeout_ms: 10_000,
            data_dir: PathBuf::from("shrike-data"),
            salvage: false,
            sweep_cycle_secs: 600,
            shutdown_grace_secs: 30,
        }
    }
}

/// The shared state of a running daemon.
pub struct Daemon {
    pub config: Config,
    pub scanner: Arc<Scanner>,
    pub store: Arc<Store>,
    /// Writes a learn's increments to the WAL before it is acknowledged.
    pub committer: Committer,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    /// The action thresholds in rspamd's names, from the config.
    pub thresholds: BTreeMap<&'static str, f64>,
    pub started: Instant,
    /// False until the listeners are up, and again from the start of shutdown.
    pub ready: AtomicBool,
}

impl Daemon {
    pub fn scan_timeout(&self) -> Duration {
        Duration::from_millis(self.config.server.scan_timeout_ms.max(1))
    }

    /// Rebuilds the rules (SIGHUP, `POST /reload`); blocking.
    pub fn reload(&self) -> Result<u64, String> {
        match self.scanner.engine().reload() {
            Ok(id) => {
                tracing::info!(generation = id, "rules reloaded");
                Ok(id)
            }
            Err(e) => {
                tracing::error!(error = %e, "rule reload failed; the previous rules keep serving");
                Err(e.to_string())
            }
        }
    }
}

/// The action thresholds in rspamd's names (the `thresholds` of a `/checkv2` reply).
fn thresholds(v: &crate::scan::VerdictConfig) -> BTreeMap<&'static str, f64> {
    let mut t = BTreeMap::new();
    t.insert(Action::Reject.as_str(), v.reject);
    t.insert(Action::AddHeader.as_str(), v.add_header);
    t.insert(Action::Greylist.as_str(), v.greylist);
    if let Some(s) = v.soft_reject {
        t.insert(Action::SoftReject.as_str(), s);
    }
    if let Some(s) = v.rewrite_subject {
        t.insert(Action::RewriteSubject.as_str(), s);
    }
    t
}

/// The X-Spam-* headers for a verdict: score, status and symbols (folded).
pub fn spam_headers(verdict: &Verdict, add_header_at: f64) -> Vec<(String, String)> {
    let spam = verdict.action >= Action::AddHeader;
    let required = verdict.required_score.unwrap_or(add_header_at);
    let mut symbols = String::with_capacity(32 * verdict.symbols.len());
    let mut item = String::with_capacity(48);
    let mut line = 0;
    for (i, s) in verdict.symbols.values().enumerate() {
        item.clear();
        item.push_str(&s.name);
        item.push('(');
        push_score(&mut item, s.score);
        item.push(')');
        if i > 0 {
            if line + item.len() > 70 {
                symbols.push_str(",\n\t");
                line = 0;
            } else {
                symbols.push_str(", ");
                line += 2;
            }
        }
        line += item.len();
        symbols.push_str(&item);
    }
    let (mut score, mut required_text) = (String::new(), String::new());
    push_score(&mut score, verdict.score);
    push_score(&mut required_text, required);
    let status = [
        if spam { "Yes" } else { "No" },
        ", score=",
        &score,
        " required=",
        &required_text,
        " action=",
        verdict.action.as_str(),
        " generation=",
        itoa::Buffer::new().format(verdict.generation),
    ]
    .concat();
    vec![
        (
            "X-Spam-Score".into(),
            [&score, " / ", &required_text].concat(),
        ),
        ("X-Spam-Status".into(), status),
        (
            "X-Spam-Symbols".into(),
            if symbols.is_empty() {
                "none".into()
            } else {
                symbols
            },
        ),
    ]
}

/// Appends `x` as `format!("{x:.2}")` would. Float formatting costs ~1,000 instructions a
/// number and a verdict's headers hold one per symbol, so ordinary scores are written from the
/// rounded integer (by `itoa`, not `core::fmt`); a value within a hair of a rounding tie, a negative one that rounds to
/// zero ("-0.00") and a huge or non-finite one take the exact path.
fn push_score(out: &mut String, x: f64) {
    use std::fmt::Write as _;
    let y = x * 100.0;
    let r = y.round();
    let near_tie = ((y - y.floor()) - 0.5).abs() < 1e-6;
    if !y.is_finite() || y.abs() >= 1e9 || near_tie || (r == 0.0 && x.is_sign_negative()) {
        let _ = write!(out, "{x:.2}");
        return;
    }
    let n = r as i64;
    if n < 0 {
        out.push('-');
    }
    let a = n.unsigned_abs();
    out.push_str(itoa::Buffer::new().format(a / 100));
    out.push('.');
    let cents = (a % 100) as u8;
    out.push(char::from(b'0' + cents / 10));
    out.push(char::from(b'0' + cents % 10));
}

/// Whether a header is one of ours, which a sender must not be able to forge.
pub fn is_spam_header(name: &[u8]) -> bool {
    name.get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"x-spam-"))
}

/// Runs the daemon until SIGTERM/SIGINT.
pub fn serve(config: Config, rules: RuleLocation) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let s = &config.server;
    let workers = if s.workers == 0 { cores } else { s.workers };
    let queue = if s.queue == 0 { workers * 64 } else { s.queue };
    // One socket thread per two cores (1–2): on a small machine the scan workers need the cores,
    // and every extra socket thread adds wake-ups that preempt them (BENCHMARKS.md, stop 18).
    let io_threads = if s.io_threads == 0 {
        (cores / 2).clamp(1, 2)
    } else {
        s.io_threads
    };

    let _lock = lock_data_dir(&s.data_dir)?;
    let (durable, recovery) = Durable::open(
        &s.data_dir,
        &config.store,
        &config.persist,
        Arc::new(SystemClock),
        s.salvage,
    )
    .with_context(|| format!("opening the data directory {}", s.data_dir.display()))?;
    tracing::info!(
        dir = %s.data_dir.display(),
        snapshot_keys = recovery.snapshot_keys,
        wal_records = recovery.wal_records,
        truncated_tail = recovery.truncated_tail,
        "reputation state loaded"
    );
    let store = durable.store().clone();
    let sweeper = Sweeper::spawn(store.clone(), Duration::from_secs(s.sweep_cycle_secs))
        .context("starting the sweeper")?;
    let shared: Arc<dyn ReputationStore> = store.clone();
    let classifier_path = s.data_dir.join(CLASSIFIER_FILE);
    let classifier = Arc::new(load_classifier(&config, &classifier_path, s.salvage)?);
    open_learn_journal(&config, &classifier, &classifier_path)?;
    let scanner = Scanner::with_classifier(&config, rules, shared, classifier.clone())
        .context("loading the rules")?;
    let classifier_snapshots = ClassifierSnapshots::spawn(
        classifier.clone(),
        classifier_path.clone(),
        config.persist.snapshot_secs,
        config.persist.fsync,
    )?;
    let watcher = crate::engine::watch::watch(scanner.engine()).map_err(anyhow::Error::msg)?;
    let metrics = Arc::new(Metrics::default());
    let pool = Pool::start(scanner.clone(), workers, queue, metrics.clone())
        .context("starting the scan workers")?;
    let daemon = Arc::new(Daemon {
        thresholds: thresholds(&config.verdict),
        config,
        scanner,
        store,
        committer: durable.committer(),
        pool,
        metrics,
        started: Instant::now(),
        ready: AtomicBool::new(false),
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(io_threads)
        .thread_name("shrike-io")
        .enable_all()
        .build()
        .context("starting the I/O runtime")?;
    let served = runtime.block_on(run(daemon.clone()));
    runtime.shutdown_timeout(Duration::from_secs(1));

    // Every connection is closed: finish the queued scans, then make the state durable.
    daemon.pool.stop();
    drop(watcher);
    drop(sweeper);
    let store_keys = daemon.store.stats().keys;
    drop(daemon);
    drop(classifier_snapshots);
    classifier
        .save(&classifier_path)
        .context("saving the classifier at shutdown")?;
    durable
        .close()
        .context("writing the final snapshot at shutdown")?;
    tracing::info!(keys = store_keys, "state saved; bye");
    served
}

/// Saves the classifier every `persist.snapshot_secs` (with the store's snapshots) when it has
/// learned since the last save, which empties its learn journal; under `fsync = "every_second"`
/// it also fsyncs the journal once a second. Stops when dropped.
struct ClassifierSnapshots(Option<(crossbeam_channel::Sender<()>, std::thread::JoinHandle<()>)>);

impl ClassifierSnapshots {
    fn spawn(
        classifier: Arc<crate::classify::Classifier>,
        path: std::path::PathBuf,
        every_secs: u64,
        fsync: crate::store::FsyncPolicy,
    ) -> anyhow::Result<ClassifierSnapshots> {
        if !classifier.config().enabled {
            return Ok(ClassifierSnapshots(None));
        }
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("shrike-clf-snap".into())
            .spawn(move || {
                let mut saved = classifier.learned();
                let mut last_save = Instant::now();
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Duration::from_secs(1))
                {
                    if fsync == crate::store::FsyncPolicy::EverySecond {
                        if let Err(e) = classifier.sync_journal() {
                            tracing::error!(error = %e, "classifier journal fsync failed");
                        }
                    }
                    if every_secs == 0 || last_save.elapsed() < Duration::from_secs(every_secs) {
                        continue;
                    }
                    last_save = Instant::now();
                    let learned = classifier.learned();
                    if learned == saved {
                        continue;
                    }
                    match classifier.save(&path) {
                        Ok(()) => {
                            saved = learned;
                            tracing::debug!(spam = learned.0, ham = learned.1, "classifier saved");
                        }
                        Err(e) => tracing::error!(error = %e, "classifier snapshot failed"),
                    }
                }
            })
            .context("starting the classifier snapshots")?;
        Ok(ClassifierSnapshots(Some((stop, thread))))
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

/// The classifier's weights in the data directory.
const CLASSIFIER_FILE: &str = "classifier.bin";
/// The learns since the classifier's last snapshot, beside it.
const JOURNAL_FILE: &str = "classifier.journal";

/// Opens the classifier's learn journal, trains again what it holds beyond the snapshot just
/// loaded (the learns a killed process acknowledged but had not saved), and attaches it.
fn open_learn_journal(
    config: &crate::config::Config,
    classifier: &crate::classify::Classifier,
    snapshot: &std::path::Path,
) -> anyhow::Result<()> {
    use crate::classify::{journal::Journal, Classifier};
    let path = snapshot.with_file_name(JOURNAL_FILE);
    let crc = Classifier::file_crc(snapshot);
    let sync_each = config.persist.fsync == crate::store::FsyncPolicy::Always;
    let (journal, learns) = Journal::open(&path, crc, sync_each)
        .with_context(|| format!("opening the classifier journal {}", path.display()))?;
    let mut trained = 0;
    for l in &learns {
        trained += usize::from(classifier.train(&l.features, l.class, l.key));
    }
    if !learns.is_empty() {
        tracing::info!(
            learns = learns.len(),
            trained,
            "classifier journal replayed"
        );
    }
    classifier.attach_journal(journal);
    Ok(())
}

/// The classifier saved by the last shutdown, or a fresh one when there is none. A damaged or
/// incompatible file stops startup with the reason, unless `salvage` moves it aside.
fn load_classifier(
    config: &crate::config::Config,
    path: &std::path::Path,
    salvage: bool,
) -> anyhow::Result<crate::classify::Classifier> {
    use crate::classify::Classifier;
    if !path.exists() {
        return Ok(Classifier::new(&config.classifier));
    }
    match Classifier::load(&config.classifier, path) {
        Ok(model) => {
            let (spam, ham) = model.learned();
            tracing::info!(spam, ham, "classifier loaded");
            Ok(model)
        }
        Err(e) if salvage => {
            let aside = path.with_extension("bin.damaged");
            tracing::error!(error = %e, aside = %aside.display(), "classifier snapshot refused; moved aside, starting afresh");
            std::fs::rename(path, &aside)
                .with_context(|| format!("moving {} aside", path.display()))?;
            Ok(Classifier::new(&config.classifier))
        }
        Err(e) => {
            Err(anyhow::Error::new(e)
                .context("loading the classifier (server.salvage moves it aside)"))
        }
    }
}

/// Two daemons appending to one WAL would corrupt it: the first holds an exclusive lock on
/// `DIR/lock` for its lifetime (released by the OS, also on `kill -9`).
fn lock_data_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the data directory {}", dir.display()))?;
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "{} is in use by another shrike (lock held on {}); give each daemon its own --data",
            dir.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

async fn run(daemon: Arc<Daemon>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let (stop_tx, stop_rx) = watch::channel(false);
    let http_listen = Listen::parse(&daemon.config.http.listen);
    let milter_listen = Listen::parse(&daemon.config.milter.listen);
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
    let http_limit = Arc::new(Semaphore::new(http_slots));
    let milter_limit = Arc::new(Semaphore::new(milter_slots));

    let mut servers = Vec::new();
    if http_listen != Listen::Off {
        let listener = listen::bind(&http_listen, "HTTP").await?;
        servers.push(tokio::spawn(http::run(
            listener,
            daemon.clone(),
            http_limit.clone(),
            stop_rx.clone(),
        )));
    }
    if milter_listen != Listen::Off {
        let listener = listen::bind(&milter_listen, "milter").await?;
        servers.push(tokio::spawn(milter::run(
            listener,
            daemon.clone(),
            milter_limit.clone(),
            stop_rx.clone(),
        )));
    }
    if servers.is_empty() {
        anyhow::bail!("neither HTTP nor milter is configured to listen");
    }
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
    daemon.ready.store(true, Ordering::Relaxed);
    tracing::info!(
        http = ?http_listen,
        milter = ?milter_listen,
        workers = daemon.pool.workers(),
        generation = daemon.scanner.engine().generation().id,
        "shrike serving"
    );
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                let d = daemon.clone();
                let _ = tokio::task::spawn_blocking(move || d.reload()).await;
            }
        }
    }
    tracing::info!("shutting down: no new connections; finishing the open ones");
    daemon.ready.store(false, Ordering::Relaxed);
    let _ = stop_tx.send(true);
    for server in servers {
        let _ = server.await;
    }
    // Wait for the open connections (each holds a permit) up to the grace period.
    let grace = Duration::from_secs(daemon.config.server.shutdown_grace_secs);
    let drained = tokio::time::timeout(grace, async {
        for (limit, n) in [(&http_limit, http_slots), (&milter_limit, milter_slots)] {
            let _ = limit.acquire_many(n as u32).await;
        }
    })
    .await;
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
    use crate::scan::SymbolHit;
    use crate::testing::xorshift;

    #[test]
    fn a_data_directory_serves_one_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_data_dir(dir.path()).unwrap();
        let err = lock_data_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("in use by another shrike"), "{err}");
        drop(first);
        assert!(lock_data_dir(dir.path()).is_ok());
    }

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

    #[test]
    fn scores_are_written_as_format_writes_them() {
        let mut x: u64 = 0x853C_49E6_748F_EA9B;
        let mut values = vec![
            0.0,
            -0.0,
            0.125,
            0.375,
            0.625,
            -0.125,
            1.005,
            0.015,
            2.675,
            -0.001,
            0.004,
            0.005,
            6.0,
            15.0,
            -4.0,
            99.995,
            1e8,
            1e12,
            -1e12,
            f64::NAN,
            f64::INFINITY,
            f64::MIN,
        ];
        for _ in 0..200_000 {
            xorshift(&mut x);
            let v = (x % 4_000_001) as f64 / 1000.0 - 2000.0; // three decimals: ties included
            values.push(v);
            values.push(v * 1.5);
            values.push(f64::from_bits(x) % 1e6);
        }
        for v in values {
            let mut s = String::new();
            push_score(&mut s, v);
            assert_eq!(s, format!("{v:.2}"), "{v:e}");
        }
    }

    #[test]
    fn spam_headers_fold_long_symbol_lists() {
        let mut v = Verdict {
            score: 7.5,
            action: Action::AddHeader,
            generation: 1207,
            ..Verdict::default()
        };
        for i in 0..12 {
            let name = format!("SOME_LONGISH_SYMBOL_{i:02}");
            v.symbols.insert(
                name.clone(),
                SymbolHit {
                    name,
                    score: 0.5,
                    description: None,
                    options: vec![],
                },
            );
        }
        let h = spam_headers(&v, 6.0);
        assert_eq!(h[0], ("X-Spam-Score".into(), "7.50 / 6.00".into()));
        assert_eq!(
            h[1].1,
            "Yes, score=7.50 required=6.00 action=add header generation=1207"
        );
        let symbols = &h[2].1;
        assert!(symbols.contains(",\n\t"), "{symbols}");
        for line in symbols.split("\n\t") {
            assert!(line.len() <= 80, "{line}");
        }
        assert_eq!(symbols.matches("SOME_LONGISH_SYMBOL_").count(), 12);
        let ham = spam_headers(&Verdict::default(), 6.0);
        assert!(ham[1].1.starts_with("No, "));
        assert_eq!(ham[2].1, "none");
        assert!(is_spam_header(b"X-SPAM-Flag") && !is_spam_header(b"X-Spa"));
    }
}
