//! The decision history: every verdict and every learn, appended to an on-disk log under the
//! data directory, and the queries over it (`GET /history`, `shrike history`).
//!
//! Owns: the [`Record`] type, the `[history]` options ([`HistoryConfig`], checked with
//! [`HistoryConfigError`]), the segment format (`segment.rs`, described there), the background
//! writer with rotation and retention (`writer.rs`), and the reader with its filters and
//! cursors (`query.rs`). Never touches: sockets, scanning; listeners hand it finished records
//! through a [`Recorder`].
//!
//! The reply path never waits for the history: [`Recorder::record`] puts the record in a
//! bounded channel (`try_send`); when the writer falls behind and the channel is full the record
//! is dropped and counted (`shrike_history_dropped_total`, `/health`). The writer collects
//! records into batches, each written as one zstd frame at least every `flush_ms` (≤ 1 s), so
//! a `kill -9` loses at most the batch still being collected.

pub mod query;
pub mod segment;
pub mod writer;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::verdict::{Action, Verdict};

/// The history's directory inside the data directory.
pub const DIR: &str = "history";
/// The keyed-hash secret of `privacy = "hash"`, inside the history directory.
const KEY_FILE: &str = "key";

/// How subjects and addresses are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Privacy {
    /// As they came.
    #[default]
    None,
    /// Replaced by a keyed hash (`h:` and 16 hex digits; the key is `history/key`, made at first
    /// start): a query for an address still finds it, the log alone does not reveal it. An
    /// address keeps its domain's hash after an `@` (`h:…@h:…`), so `@domain` queries work.
    Hash,
}

/// `[history]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Record every verdict and learn of `shrike serve` under `DATA_DIR/history`.
    pub enabled: bool,
    /// `none` or `hash` (subjects, envelope and From addresses, authenticated user).
    pub privacy: Privacy,
    /// Bound on the history's bytes on disk; the oldest segments are deleted first.
    pub max_bytes: u64,
    /// Segments whose newest record is older than this many days are deleted (0: no age limit).
    pub keep_days: u64,
    /// A segment is closed and a new one started past this many bytes...
    pub segment_bytes: u64,
    /// ...or this many seconds after it was started.
    pub segment_secs: u64,
    /// A batch is written at least this often (milliseconds, 1..=1000).
    pub flush_ms: u64,
    /// ...or as soon as it holds this many records.
    pub batch_records: usize,
    /// Records waiting for the writer; beyond, new ones are dropped and counted.
    pub queue: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            enabled: true,
            privacy: Privacy::None,
            max_bytes: 1 << 30,
            keep_days: 30,
            segment_bytes: 16 << 20,
            segment_secs: 3600,
            flush_ms: 1000,
            batch_records: 4096,
            queue: 16_384,
        }
    }
}

/// Why the `[history]` options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryConfigError {
    #[error("history.flush_ms must be 1..=1000, got {0}")]
    FlushMs(u64),
    #[error("history.segment_bytes must be at least 64 KiB and at most max_bytes")]
    SegmentBytes,
    #[error("history.segment_secs, batch_records and queue must be greater than 0")]
    Zero,
    #[error("history.batch_records must be at most 16384, got {0}")]
    BatchRecords(usize),
}

impl HistoryConfig {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), HistoryConfigError> {
        if !(1..=1000).contains(&self.flush_ms) {
            return Err(HistoryConfigError::FlushMs(self.flush_ms));
        }
        if self.segment_bytes < 64 << 10 || self.segment_bytes > self.max_bytes {
            return Err(HistoryConfigError::SegmentBytes);
        }
        if self.segment_secs == 0 || self.batch_records == 0 || self.queue == 0 {
            return Err(HistoryConfigError::Zero);
        }
        if self.batch_records > 16_384 {
            return Err(HistoryConfigError::BatchRecords(self.batch_records));
        }
        Ok(())
    }
}

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A verdict with its action.
    Scan(Action),
    /// `/learnspam`.
    LearnSpam,
    /// `/learnham`.
    LearnHam,
    /// A quarantined message sent on to its recipients (`/quarantine/ID/release`).
    Release,
}

impl Kind {
    /// One byte on disk: the action's index in `Action::ALL`, then the learns.
    pub fn code(self) -> u8 {
        match self {
            Kind::Scan(a) => Action::ALL.iter().position(|x| *x == a).unwrap_or(0) as u8,
            Kind::LearnSpam => 64,
            Kind::LearnHam => 65,
            Kind::Release => 66,
        }
    }

    pub fn from_code(code: u8) -> Option<Kind> {
        match code {
            64 => Some(Kind::LearnSpam),
            65 => Some(Kind::LearnHam),
            66 => Some(Kind::Release),
            c => Action::ALL.get(usize::from(c)).map(|a| Kind::Scan(*a)),
        }
    }

    /// The action's rspamd name, or `learn spam` / `learn ham` / `release`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Scan(a) => a.as_str(),
            Kind::LearnSpam => "learn spam",
            Kind::LearnHam => "learn ham",
            Kind::Release => "release",
        }
    }

    /// rspamd's action names (`_` for the space), `learn_spam`, `learn_ham`, and `learn` for both.
    pub fn parse_filter(s: &str) -> Option<Vec<Kind>> {
        let s = s.trim().to_ascii_lowercase().replace('_', " ");
        match s.as_str() {
            "learn" => Some(vec![Kind::LearnSpam, Kind::LearnHam]),
            "learn spam" => Some(vec![Kind::LearnSpam]),
            "learn ham" => Some(vec![Kind::LearnHam]),
            "release" => Some(vec![Kind::Release]),
            _ => Action::parse(&s).map(|a| vec![Kind::Scan(a)]),
        }
    }
}

/// One symbol of a recorded verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SymbolRecord {
    pub name: String,
    pub score: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// A shadow or test-mode hit: reported, not counted in the score.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
}

/// One decision. Scores are kept to a thousandth.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
    pub kind: Kind,
    /// `http`, `milter`, `spamd`.
    pub listener: String,
    pub queue_id: Option<String>,
    pub message_id: Option<String>,
    pub ip: Option<IpAddr>,
    pub helo: Option<String>,
    /// The client's reverse DNS name as the MTA resolved it.
    pub rdns: Option<String>,
    /// The authenticated user.
    pub user: Option<String>,
    /// The envelope sender (MAIL FROM).
    pub sender: Option<String>,
    pub rcpt: Vec<String>,
    /// The first From header address.
    pub from: Option<String>,
    pub subject: Option<String>,
    /// Message bytes.
    pub size: u64,
    pub score: f64,
    pub required_score: Option<f64>,
    pub symbols: Vec<SymbolRecord>,
    /// The rule generation that judged it (0 for learns).
    pub generation: u64,
    /// Wall time from the request to the verdict, microseconds.
    pub scan_us: u64,
    /// A learn of a message the classifier had already learned as that class: acknowledged,
    /// not trained again, no complaint or rescue.
    pub duplicate: bool,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            time_us: 0,
            kind: Kind::Scan(Action::NoAction),
            listener: String::new(),
            queue_id: None,
            message_id: None,
            ip: None,
            helo: None,
            rdns: None,
            user: None,
            sender: None,
            rcpt: Vec::new(),
            from: None,
            subject: None,
            size: 0,
            score: 0.0,
            required_score: None,
            symbols: Vec::new(),
            generation: 0,
            scan_us: 0,
            duplicate: false,
        }
    }
}

/// Microseconds since the Unix epoch, now.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// RFC 3339 with microseconds, UTC.
pub fn format_time(us: i64) -> String {
    let t = UNIX_EPOCH + std::time::Duration::from_micros(us.max(0) as u64);
    humantime::format_rfc3339_micros(t).to_string()
}

impl Record {
    /// A verdict's fields: score, action, symbols (shadow ones marked), generation.
    pub fn from_verdict(v: &Verdict) -> Record {
        let symbol = |s: &crate::verdict::SymbolHit, shadow| SymbolRecord {
            name: s.name.clone(),
            score: s.score,
            options: s.options.clone(),
            shadow,
        };
        Record {
            time_us: now_us(),
            kind: Kind::Scan(v.action),
            score: v.score,
            required_score: v.required_score,
            generation: v.generation,
            symbols: v
                .symbols
                .values()
                .map(|s| symbol(s, false))
                .chain(v.shadow.values().map(|s| symbol(s, true)))
                .collect(),
            ..Record::default()
        }
    }

    /// The envelope's fields.
    pub fn with_envelope(mut self, e: &crate::message::Envelope) -> Record {
        self.queue_id = e.queue_id.clone();
        self.ip = e.client_ip;
        self.helo = e.helo.clone();
        self.rdns = e.hostname.clone();
        self.user = e.user.clone();
        self.sender = e.mail_from.clone();
        self.rcpt = e.rcpt_to.clone();
        self
    }

    /// The record as `/history` and `shrike history --json` print it.
    pub fn to_json(&self) -> serde_json::Value {
        let mut o = serde_json::Map::new();
        let mut put = |k: &str, v: serde_json::Value| {
            if !v.is_null() {
                o.insert(k.to_string(), v);
            }
        };
        use serde_json::json;
        put("time", json!(format_time(self.time_us)));
        put("time_us", json!(self.time_us));
        put("action", json!(self.kind.name()));
        put("listener", json!(self.listener));
        put("queue_id", json!(self.queue_id));
        put("message_id", json!(self.message_id));
        put("ip", json!(self.ip.map(|i| i.to_string())));
        put("helo", json!(self.helo));
        put("rdns", json!(self.rdns));
        put("user", json!(self.user));
        put("sender", json!(self.sender));
        put("rcpt", json!(self.rcpt));
        put("from", json!(self.from));
        put("subject", json!(self.subject));
        put("size", json!(self.size));
        if matches!(self.kind, Kind::Scan(_)) {
            put("score", json!(self.score));
            put("required_score", json!(self.required_score));
            put("symbols", json!(self.symbols));
            put("generation", json!(self.generation));
        }
        put("scan_ms", json!(self.scan_us as f64 / 1000.0));
        if !matches!(self.kind, Kind::Scan(_)) {
            put("duplicate", json!(self.duplicate));
        }
        serde_json::Value::Object(o)
    }
}

/// The keyed hash of `privacy = "hash"`.
#[derive(Clone)]
pub struct Hasher {
    key: [u8; 32],
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hasher(..)")
    }
}

impl Hasher {
    /// The key of a history directory, made (from /dev/urandom) when `create` and absent.
    ///
    /// Whoever reads the key can hash every address they guess and find it in the history, so
    /// the file is its owner's alone (0600): made so, and an existing one with looser modes
    /// (older shrike wrote it with the umask's) tightened when `create` (the daemon's open;
    /// `shrike history` only reads it).
    pub fn open(dir: &Path, create: bool) -> std::io::Result<Option<Hasher>> {
        let path = dir.join(KEY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) if bytes.len() == 32 => {
                let mut key = [0; 32];
                key.copy_from_slice(&bytes);
                if create {
                    if let Some(mode) = crate::secrets::tighten(&path)? {
                        tracing::warn!(
                            file = %path.display(),
                            was = %format!("{mode:04o}"),
                            "the history's hashing key was readable by others; made 0600"
                        );
                    }
                }
                return Ok(Some(Hasher { key }));
            }
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} is not a 32-byte key", path.display()),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if !create {
            return Ok(None);
        }
        use std::io::Read;
        let mut key = [0; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        crate::secrets::write_private(&path, &key)?;
        Ok(Some(Hasher { key }))
    }

    /// `h:` and 16 hex digits of SHA-256(key ‖ value); addresses are lower-cased first.
    pub fn hash(&self, value: &str, address: bool) -> String {
        let mut h = Sha256::new();
        h.update(self.key);
        if address {
            h.update(
                value
                    .trim()
                    .trim_matches(['<', '>'])
                    .to_lowercase()
                    .as_bytes(),
            );
        } else {
            h.update(value.as_bytes());
        }
        let digest = h.finalize();
        let mut out = String::with_capacity(18);
        out.push_str("h:");
        for b in &digest[..8] {
            use std::fmt::Write;
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    /// An address as `privacy = "hash"` stores it: the hash of the whole address, then `@` and
    /// the hash of `@domain` when it has a domain (`h:…@h:…`), so that a query for the address
    /// and one for its domain (`@example.com`) both find it without the domain in clear.
    pub fn hash_address(&self, value: &str) -> String {
        let whole = self.hash(value, true);
        let normal = value.trim().trim_matches(['<', '>']).to_lowercase();
        match normal.rsplit_once('@') {
            Some((_, domain)) if !domain.is_empty() => {
                format!("{whole}@{}", self.hash(&format!("@{domain}"), true))
            }
            _ => whole,
        }
    }

    /// Replaces the record's subject, addresses and user by their hashes.
    pub fn apply(&self, r: &mut Record) {
        let addr = |v: &mut Option<String>| {
            if let Some(s) = v.as_mut() {
                *s = self.hash_address(s);
            }
        };
        addr(&mut r.sender);
        addr(&mut r.from);
        if let Some(user) = r.user.as_mut() {
            *user = self.hash(user, true);
        }
        for rcpt in &mut r.rcpt {
            *rcpt = self.hash_address(rcpt);
        }
        if let Some(s) = r.subject.as_mut() {
            *s = self.hash(s, false);
        }
    }
}

/// Counters of the writer, shared with `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Records written to disk.
    pub written: AtomicU64,
    /// Records dropped because the writer's queue was full.
    pub dropped: AtomicU64,
    /// Batches that could not be written (I/O errors; logged).
    pub write_errors: AtomicU64,
    /// Bytes of the history on disk (after the last write or deletion).
    pub bytes: AtomicU64,
    /// Segments on disk.
    pub segments: AtomicU64,
}

/// Where listeners hand their records; cheap to clone. A disabled recorder does nothing.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    inner: Option<Arc<RecorderInner>>,
}

#[derive(Debug)]
struct RecorderInner {
    tx: crossbeam_channel::Sender<writer::Msg>,
    stats: Arc<Stats>,
    hasher: Option<Hasher>,
}

impl Recorder {
    /// A recorder that records nothing.
    pub fn disabled() -> Recorder {
        Recorder { inner: None }
    }

    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Hands a record to the writer without waiting: when its queue is full the record is
    /// dropped and counted.
    pub fn record(&self, mut record: Record) {
        let Some(inner) = &self.inner else { return };
        if let Some(h) = &inner.hasher {
            h.apply(&mut record);
        }
        if inner
            .tx
            .try_send(writer::Msg::Record(Box::new(record)))
            .is_err()
        {
            inner.stats.dropped.fetch_add(1, Relaxed);
        }
    }

    /// The writer's counters (`None` when disabled).
    pub fn stats(&self) -> Option<&Stats> {
        self.inner.as_deref().map(|i| &*i.stats)
    }

    /// Writes what is collected now and waits until it is on disk (tests, shutdown); blocking.
    pub fn flush(&self) {
        if let Some(inner) = &self.inner {
            let (ack, done) = crossbeam_channel::bounded(1);
            if inner.tx.send(writer::Msg::Flush(ack)).is_ok() {
                let _ = done.recv();
            }
        }
    }
}

/// Why the history could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// (The cause is in the message, not a `source`: printed with its chain it would show
    /// twice.)
    #[error("history directory {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Opens `DATA_DIR/history` and starts its writer: the recorder for the listeners and the
/// writer's handle, which writes the last batch when closed. Disabled by config: a recorder
/// that records nothing, and no files.
pub fn open(
    data_dir: &Path,
    config: &HistoryConfig,
) -> Result<(Recorder, Option<writer::Writer>), HistoryError> {
    if !config.enabled {
        return Ok((Recorder::disabled(), None));
    }
    let dir = data_dir.join(DIR);
    let io = |error| HistoryError::Io {
        path: dir.clone(),
        error,
    };
    // Made for the daemon's user alone, like the data directory; kept as it is if it exists.
    crate::secrets::private_dir(&dir).map_err(io)?;
    let hasher = match config.privacy {
        Privacy::None => None,
        Privacy::Hash => Hasher::open(&dir, true).map_err(io)?,
    };
    let stats = Arc::new(Stats::default());
    let (tx, rx) = crossbeam_channel::bounded(config.queue);
    let w = writer::Writer::spawn(dir.clone(), config.clone(), rx, tx.clone(), stats.clone())
        .map_err(io)?;
    Ok((
        Recorder {
            inner: Some(Arc::new(RecorderInner { tx, stats, hasher })),
        },
        Some(w),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_checks() {
        assert!(HistoryConfig::default().validate().is_ok());
        for (c, msg) in [
            (
                HistoryConfig {
                    flush_ms: 0,
                    ..Default::default()
                },
                "history.flush_ms must be 1..=1000, got 0",
            ),
            (
                HistoryConfig {
                    flush_ms: 1500,
                    ..Default::default()
                },
                "history.flush_ms must be 1..=1000, got 1500",
            ),
            (
                HistoryConfig {
                    segment_bytes: 1000,
                    ..Default::default()
                },
                "history.segment_bytes must be at least 64 KiB and at most max_bytes",
            ),
            (
                HistoryConfig {
                    queue: 0,
                    ..Default::default()
                },
                "history.segment_secs, batch_records and queue must be greater than 0",
            ),
            (
                HistoryConfig {
                    batch_records: 20_000,
                    ..Default::default()
                },
                "history.batch_records must be at most 16384, got 20000",
            ),
        ] {
            assert_eq!(c.validate().unwrap_err().to_string(), msg);
        }
    }

    #[test]
    fn kinds_round_trip_and_parse() {
        for a in Action::ALL {
            assert_eq!(Kind::from_code(Kind::Scan(a).code()), Some(Kind::Scan(a)));
        }
        assert_eq!(Kind::from_code(64), Some(Kind::LearnSpam));
        assert_eq!(Kind::from_code(65), Some(Kind::LearnHam));
        assert_eq!(Kind::from_code(9), None);
        assert_eq!(
            Kind::parse_filter("no_action"),
            Some(vec![Kind::Scan(Action::NoAction)])
        );
        assert_eq!(Kind::parse_filter("learn_ham"), Some(vec![Kind::LearnHam]));
        assert_eq!(Kind::parse_filter("bogus"), None);
    }

    #[test]
    fn hashing_hides_and_still_matches() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Hasher::open(dir.path(), false).unwrap().is_none());
        let h = Hasher::open(dir.path(), true).unwrap().unwrap();
        let again = Hasher::open(dir.path(), false).unwrap().unwrap();
        assert_eq!(
            h.hash("Bob@Example.com", true),
            again.hash("<bob@example.com>", true)
        );
        let mut r = Record {
            sender: Some("bob@example.com".into()),
            rcpt: vec!["alice@example.org".into()],
            subject: Some("Secret plans".into()),
            ..Record::default()
        };
        h.apply(&mut r);
        let s = r.sender.clone().unwrap();
        assert!(s.starts_with("h:") && s.len() == 18 + 1 + 18, "{s}");
        assert_eq!(s, h.hash_address("<Bob@Example.COM>"));
        assert!(s.ends_with(&format!("@{}", h.hash("@example.com", true))));
        assert_eq!(h.hash_address("postmaster"), h.hash("postmaster", true));
        assert!(!format!("{r:?}").contains("example"));
        assert!(!format!("{r:?}").contains("Secret"));
        let other = tempfile::tempdir().unwrap();
        let h2 = Hasher::open(other.path(), true).unwrap().unwrap();
        assert_ne!(
            h2.hash("bob@example.com", true),
            s,
            "keys differ per directory"
        );
    }
}
