//! `shrike learn`: teaches shrike existing mail, as `sa-learn` and `rspamc learn_spam` do.
//! Offline into a data directory (locked, opened and saved the way `shrike serve` keeps it), or
//! through a running daemon's `/learnspam` and `/learnham`.
//!
//! Owns: the walk of the given paths (through `replay::corpus`, the label forced by the flag),
//! the learn loop (worker threads offline, a few requests in flight over HTTP), the progress bar
//! and the per-file error lines on stderr, the counts of the summary. Never touches: what a learn
//! records (`scan::ScanWorker::learn`), the data directory's formats (`datadir`, `store`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::Mutex;

use crate::classify::passes::Passes;
use crate::classify::{Class, SnapshotError};
use crate::datadir::DataDirError;
use crate::engine::{LoadError, RuleLocation};
use crate::replay::corpus::{self, Arrival, CorpusError, Item};
use crate::scan::{learn_counter, ScanSettings, Scanner};
use crate::secrets::Redacted;
use crate::store::{PersistConfig, PersistError, ReputationStore, StoreConfig};

/// Requests in flight at most when learning through a daemon: enough to keep two scan workers
/// busy across the round trips, few enough not to fill its queue.
pub const HTTP_IN_FLIGHT: usize = 4;

/// What a learn reads of the configuration (`Config::learn_settings` composes it).
#[derive(Debug, Clone, PartialEq)]
pub struct LearnSettings {
    /// The data directory an offline learn opens (`[server] data_dir`).
    pub data_dir: PathBuf,
    /// Offline learn threads (`[server] workers`; 0: one per core).
    pub workers: usize,
    /// The data directory's store (`[store]`; a shared one refuses an offline learn).
    pub store: StoreConfig,
    /// The data directory's durability (`[persist]`).
    pub persist: PersistConfig,
    /// The scanner's settings; their `classifier` is the data directory's classifier's.
    pub scan: ScanSettings,
}

/// Where the learns go.
#[derive(Debug, Clone)]
pub enum Target {
    /// Into `LearnSettings::data_dir`, with these rules (they decide the classifier's features,
    /// so use the daemon's).
    Offline { rules: RuleLocation },
    /// Through a running daemon: its base URL (`http://127.0.0.1:11333`) and the controller
    /// password, if it needs one.
    Server {
        url: String,
        password: Option<String>,
    },
}

/// What to learn.
#[derive(Debug, Clone)]
pub struct Options {
    /// Files, directories (walked recursively), maildirs and mbox files of spam.
    pub spam: Vec<PathBuf>,
    /// The same, of ham.
    pub ham: Vec<PathBuf>,
    pub target: Target,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress: bool,
}

/// What a run learned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Messages the classifier trained on, by the label given.
    pub spam: usize,
    pub ham: usize,
    /// Messages it had already learned (same Message-ID, else same body): not trained again.
    pub duplicate_spam: usize,
    pub duplicate_ham: usize,
    /// Paths and files that could not be read (or held no message).
    pub unreadable: usize,
    /// Messages the daemon refused, or whose learn could not be made durable.
    pub refused: usize,
    pub elapsed: Duration,
}

impl Summary {
    /// Messages learned, duplicates included: what the run could use.
    pub fn processed(&self) -> usize {
        self.spam + self.ham + self.duplicate_spam + self.duplicate_ham
    }

    pub fn per_sec(&self) -> f64 {
        self.processed() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Why the run could not learn at all.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error("nothing to learn: give --spam PATH or --ham PATH")]
    NoPaths,
    #[error("no readable message under the given paths")]
    NoMessages,
    #[error("{dir} is in use by a running shrike (lock held on {lock}): stop it, or learn through it with --server URL")]
    DataDirInUse { dir: String, lock: String },
    #[error("the data directory cannot be used")]
    DataDir(#[source] DataDirError),
    #[error("loading the rules")]
    Rules(#[source] LoadError),
    #[error("starting the learn workers")]
    Threads(#[source] std::io::Error),
    #[error("saving the classifier")]
    SaveClassifier(#[source] SnapshotError),
    #[error("writing the store's final snapshot")]
    CloseData(#[source] PersistError),
    #[error("the daemon at {} cannot be used: {why}", Redacted(url))]
    Server { url: String, why: String },
    #[error("--password-file {path}: {why}")]
    PasswordFile { path: String, why: String },
    #[error("store.backend is \"redis\": learning offline would fill the data directory, not Redis; learn through a running daemon with --server URL")]
    SharedStore,
}

/// The environment variable `shrike learn --server` takes the password from when neither
/// `--password` nor `--password-file` gives it.
pub const PASSWORD_ENV: &str = "SHRIKE_PASSWORD";

/// The password to send to the daemon: `--password` (which every user of the host sees in
/// `ps`), else the first line of `--password-file`, else `env` (`SHRIKE_PASSWORD`'s value).
/// An empty one is none, as for the daemon. A password file that others may read is
/// accepted with a warning on stderr, as it may be in use already.
pub fn password(
    given: Option<String>,
    file: Option<&Path>,
    env: Option<String>,
) -> Result<Option<String>, LearnError> {
    let password = match (given, file) {
        (Some(p), _) => Some(p),
        (None, Some(path)) => Some(password_file(path)?),
        (None, None) => env,
    };
    Ok(password.filter(|p| !p.is_empty()))
}

fn password_file(path: &Path) -> Result<String, LearnError> {
    let refused = |why: String| LearnError::PasswordFile {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| refused(e.to_string()))?;
    let line = text.lines().next().unwrap_or("");
    if line.is_empty() {
        return Err(refused("its first line is empty".into()));
    }
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(m) = std::fs::metadata(path) {
        if m.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "shrike: warning: --password-file {} can be read by other users (chmod 600 it)",
                path.display()
            );
        }
    }
    Ok(line.to_string())
}

/// One message to learn.
struct Job {
    item: Item,
    class: Class,
}

/// What learning one message gave.
enum Outcome {
    Learned { class: Class, trained: bool },
    Unreadable { name: String, why: String },
    Refused { name: String, why: String },
}

/// Learns every message under `options.spam` and `options.ham`; unreadable files and refused
/// messages are reported on stderr and counted, without stopping.
pub fn run(settings: &LearnSettings, options: &Options) -> Result<Summary, LearnError> {
    if options.spam.is_empty() && options.ham.is_empty() {
        return Err(LearnError::NoPaths);
    }
    if matches!(options.target, Target::Offline { .. })
        && settings.store.backend == crate::store::redis::Backend::Redis
    {
        return Err(LearnError::SharedStore);
    }
    let bar = if options.progress {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    let start = Instant::now();
    let mut summary = Summary::default();
    let say = |line: String| bar.suspend(|| eprintln!("shrike: {line}"));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
        bar.set_style(style);
    }
    bar.set_message("finding messages");
    let mut jobs = Vec::new();
    for (paths, class) in [(&options.spam, Class::Spam), (&options.ham, Class::Ham)] {
        for path in paths {
            summary.unreadable += find(path, class, &mut jobs, &say);
        }
    }
    if jobs.is_empty() {
        bar.finish_and_clear();
        return Err(LearnError::NoMessages);
    }
    interleave(&mut jobs);
    bar.set_length(jobs.len() as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} messages, {rate}, ETA {eta} {msg}")
    {
        bar.set_style(style.with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} msg/s", state.per_sec());
            },
        ));
    }
    bar.set_message("");
    bar.reset_eta();
    let mut tally = |outcome: Outcome| {
        match outcome {
            Outcome::Learned { class, trained } => match (class, trained) {
                (Class::Spam, true) => summary.spam += 1,
                (Class::Ham, true) => summary.ham += 1,
                (Class::Spam, false) => summary.duplicate_spam += 1,
                (Class::Ham, false) => summary.duplicate_ham += 1,
            },
            Outcome::Unreadable { name, why } => {
                summary.unreadable += 1;
                say(format!("cannot read {name}: {why}"));
            }
            Outcome::Refused { name, why } => {
                summary.refused += 1;
                say(format!("not learned {name}: {why}"));
            }
        }
        bar.inc(1);
    };
    match &options.target {
        Target::Offline { rules } => offline(settings, rules.clone(), &jobs, &mut tally)?,
        Target::Server { url, password } => over_http(url, password.as_deref(), &jobs, &mut tally)?,
    }
    bar.finish_and_clear();
    summary.elapsed = start.elapsed();
    Ok(summary)
}

/// Orders the jobs so both classes run through the whole learn in proportion (each keeps its
/// own order): an online model taught every spam and then every ham ends leaning to the class
/// it saw last, and the classifier's stack (`classify::stack`) is fitted on what the models
/// said before each learn, which needs both classes while both models are ready.
fn interleave(jobs: &mut Vec<Job>) {
    let count = |class| jobs.iter().filter(|j| j.class == class).count().max(1);
    let (spam, ham) = (count(Class::Spam), count(Class::Ham));
    let (mut seen_spam, mut seen_ham) = (0usize, 0usize);
    let mut keys: Vec<(f64, usize)> = Vec::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        let (seen, of) = match j.class {
            Class::Spam => (&mut seen_spam, spam),
            Class::Ham => (&mut seen_ham, ham),
        };
        keys.push(((*seen as f64 + 0.5) / of as f64, i));
        *seen += 1;
    }
    keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut slots: Vec<Option<Job>> = jobs.drain(..).map(Some).collect();
    jobs.extend(keys.into_iter().filter_map(|(_, i)| slots[i].take()));
}

/// Adds the messages under `path` to `jobs`, as `class` whatever their folders are called;
/// reports what cannot be read. Returns how many paths or files could not be read.
fn find(path: &std::path::Path, class: Class, jobs: &mut Vec<Job>, say: &dyn Fn(String)) -> usize {
    // Arrival order does not matter to a learn; headers give the corpus's natural one.
    match corpus::load(
        std::slice::from_ref(&path.to_path_buf()),
        None,
        &Arrival::Headers,
    ) {
        Ok(found) => {
            for (file, why) in &found.skipped {
                say(format!("cannot read {file}: {why}"));
            }
            jobs.extend(found.items.into_iter().map(|item| Job { item, class }));
            found.skipped.len()
        }
        Err(CorpusError::Empty(_)) => {
            say(format!("no messages under {}", path.display()));
            1
        }
        Err(e) => {
            say(format!("cannot read {e}"));
            1
        }
    }
}

/// Learns `jobs` into the data directory: one scan worker a thread, as the daemon's pool does,
/// then saves the classifier and closes the store durably.
fn offline(
    settings: &LearnSettings,
    rules: RuleLocation,
    jobs: &[Job],
    tally: &mut (dyn FnMut(Outcome) + Send),
) -> Result<(), LearnError> {
    let dir = crate::datadir::open(
        &settings.data_dir,
        &settings.store,
        &settings.persist,
        &settings.scan.classifier,
        false,
    )
    .map_err(|e| match e {
        // The lock's own message advises a daemon; a learn has other choices.
        DataDirError::InUse { dir, lock } => LearnError::DataDirInUse { dir, lock },
        other => LearnError::DataDir(other),
    })?;
    let store: Arc<dyn ReputationStore> = dir.durable.store().clone();
    let scanner = Scanner::with_classifier(&settings.scan, rules, store, dir.classifier.clone())
        .map_err(LearnError::Rules)?;
    let threads = match settings.workers {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    }
    .min(jobs.len())
    .max(1);
    let next = AtomicUsize::new(0);
    let passes = Passes::attach(&dir.classifier);
    // The workers count under a lock held for an increment: on a small machine a thread
    // waiting on a channel would take a core from them.
    let tally = Mutex::new(tally);
    std::thread::scope(|s| -> Result<(), LearnError> {
        for i in 0..threads {
            let (tally, next, scanner) = (&tally, &next, &scanner);
            std::thread::Builder::new()
                .name(format!("shrike-learn-{i}"))
                .spawn_scoped(s, move || {
                    let mut worker = scanner.worker();
                    while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let outcome = match job.item.raw() {
                            Ok(raw) => {
                                let l = worker.learn(&raw, learn_counter(job.class));
                                match l.journal_error {
                                    Some(why) => Outcome::Refused {
                                        name: job.item.name.clone(),
                                        why: format!("the classifier's journal: {why}"),
                                    },
                                    None => Outcome::Learned {
                                        class: job.class,
                                        trained: !l.duplicate,
                                    },
                                }
                            }
                            Err(e) => Outcome::Unreadable {
                                name: job.item.name.clone(),
                                why: e.to_string(),
                            },
                        };
                        (tally.lock())(outcome);
                    }
                })
                .map_err(LearnError::Threads)?;
        }
        Ok(())
    })?;
    // Further passes over what this run learned (not journalled: a learn killed meanwhile keeps
    // its first pass).
    passes.finish(&dir.classifier, settings.scan.classifier.learn_passes);
    // The scanner holds the store and the classifier; both are written once it is gone.
    drop(scanner);
    dir.classifier
        .save(&dir.classifier_path)
        .map_err(LearnError::SaveClassifier)?;
    dir.durable.close().map_err(LearnError::CloseData)?;
    drop(dir.lock);
    Ok(())
}

/// Posts `jobs` to the daemon at `url`, `HTTP_IN_FLIGHT` at a time.
fn over_http(
    url: &str,
    password: Option<&str>,
    jobs: &[Job],
    tally: &mut (dyn FnMut(Outcome) + Send),
) -> Result<(), LearnError> {
    let base = url.trim_end_matches('/');
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .max_idle_connections_per_host(HTTP_IN_FLIGHT)
        .build()
        .into();
    let unusable = |why: String| LearnError::Server {
        url: base.to_string(),
        why,
    };
    // One request first, so a wrong URL or a stopped daemon is one clear error, not one a file.
    let ping = agent
        .get(format!("{base}/ping"))
        .call()
        .map_err(|e| unusable(e.to_string()))?;
    if ping.status() != 200 {
        return Err(unusable(format!("/ping answered {}", ping.status())));
    }
    let next = AtomicUsize::new(0);
    // The workers count under a lock held for an increment: on a small machine a thread
    // waiting on a channel would take a core from them.
    let tally = Mutex::new(tally);
    // The first refusal for want of the right password: every other message would get it
    // too, and each wrong try makes the daemon wait longer before it checks the next.
    let unauthorized: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| -> Result<(), LearnError> {
        for i in 0..HTTP_IN_FLIGHT.min(jobs.len()) {
            let (tally, next, agent, unauthorized) = (&tally, &next, &agent, &unauthorized);
            std::thread::Builder::new()
                .name(format!("shrike-learn-{i}"))
                .spawn_scoped(s, move || {
                    while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let first = unauthorized.lock().clone();
                        let outcome = match first {
                            Some(why) => Outcome::Refused {
                                name: job.item.name.clone(),
                                why: format!("not sent: {why}"),
                            },
                            None => post(agent, base, password, job, unauthorized),
                        };
                        (tally.lock())(outcome);
                    }
                })
                .map_err(LearnError::Threads)?;
        }
        Ok(())
    })
}

/// One message to `/learnspam` or `/learnham`.
fn post(
    agent: &ureq::Agent,
    base: &str,
    password: Option<&str>,
    job: &Job,
    unauthorized: &Mutex<Option<String>>,
) -> Outcome {
    let name = job.item.name.clone();
    let raw = match job.item.raw() {
        Ok(raw) => raw,
        Err(e) => {
            return Outcome::Unreadable {
                name,
                why: e.to_string(),
            }
        }
    };
    let endpoint = match job.class {
        Class::Spam => "learnspam",
        Class::Ham => "learnham",
    };
    let refused = |why: String| Outcome::Refused {
        name: name.clone(),
        why,
    };
    // A 429 (this client's wrong passwords) says how long to wait: waited out a few times.
    let mut tries = 0;
    let (status, mut reply) = loop {
        // A declared message type: the daemon refuses a state change a browser could send
        // (text/plain, form types, or none) from a client without the password.
        let mut request = agent
            .post(format!("{base}/{endpoint}"))
            .header("Content-Type", "message/rfc822");
        if let Some(p) = password {
            request = request.header("Password", p);
        }
        let reply = match request.send(&raw[..]) {
            Ok(r) => r,
            Err(e) => return refused(format!("/{endpoint}: {e}")),
        };
        let status = reply.status().as_u16();
        tries += 1;
        if status != 429 || tries > 4 || unauthorized.lock().is_some() {
            break (status, reply);
        }
        let wait = reply
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .unwrap_or(1)
            .clamp(1, 60);
        std::thread::sleep(Duration::from_secs(wait));
    };
    let text = reply
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .unwrap_or_default();
    let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    if status != 200 {
        let why = json
            .as_ref()
            .and_then(|j| j.get("error")?.as_str().map(str::to_string))
            .unwrap_or_else(|| text.trim().chars().take(200).collect());
        let why = format!("/{endpoint} answered {status}: {why}");
        if matches!(status, 401 | 403 | 429) {
            unauthorized.lock().get_or_insert_with(|| why.clone());
        }
        return refused(why);
    }
    match json.as_ref().and_then(|j| j.get("duplicate")?.as_bool()) {
        Some(duplicate) => Outcome::Learned {
            class: job.class,
            trained: !duplicate,
        },
        // A daemon that does not say: the learn counted, and cannot be told from a first one.
        None => Outcome::Learned {
            class: job.class,
            trained: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::corpus::{Item, Label, Source};

    fn job(class: Class, n: usize) -> Job {
        let name = format!("{class:?}/{n}");
        Job {
            item: Item {
                name: name.clone(),
                key: name,
                label: if class == Class::Spam {
                    Label::Spam
                } else {
                    Label::Ham
                },
                arrival: n as u64,
                envelope: Default::default(),
                source: Source::File(PathBuf::from("/nonexistent")),
            },
            class,
        }
    }

    #[test]
    fn the_classes_are_interleaved_in_proportion_each_in_its_order() {
        let mut jobs: Vec<Job> = (0..4).map(|n| job(Class::Spam, n)).collect();
        jobs.extend((0..8).map(|n| job(Class::Ham, n)));
        interleave(&mut jobs);
        let names: Vec<&str> = jobs.iter().map(|j| j.item.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Ham/0", "Spam/0", "Ham/1", "Ham/2", "Spam/1", "Ham/3", "Ham/4", "Spam/2", "Ham/5",
                "Ham/6", "Spam/3", "Ham/7"
            ]
        );
        let mut one: Vec<Job> = (0..3).map(|n| job(Class::Ham, n)).collect();
        interleave(&mut one);
        assert_eq!(one.len(), 3);
    }
}
