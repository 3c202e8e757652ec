//! The quarantine: the bodies of refused messages, kept so an operator (or a recipient, by a
//! signed link) can look at them, release them or learn from them.
//!
//! Owns: `[quarantine]` ([`QuarantineConfig`], checked with [`QuarantineConfigError`]), the
//! entry's metadata ([`Meta`]), the handle listeners submit to ([`Quarantine`]), the on-disk
//! store and its writer thread (`store.rs`, format described there), encryption at rest
//! (`crypto.rs`), per-recipient links (`links.rs`), the SMTP re-injection of a release
//! (`release.rs`) and the text rendering of a kept message (`render.rs`). Never touches:
//! sockets of its own listeners, scanning; the server decides what to keep and calls in.
//!
//! The reply path never waits: [`Quarantine::submit`] hands the bytes to a bounded queue
//! (counted in entries and in bytes) and the writer compresses, encrypts and appends them;
//! a full queue drops the entry, counted (`shrike_quarantine_dropped_total`, `/health`) and
//! logged. Each entry is in the page cache as soon as the writer takes it and fsynced within
//! `flush_ms` (≤ 1 s): a `kill -9` loses at most the entries still queued.

pub mod crypto;
pub mod links;
pub mod release;
pub mod render;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::verdict::Action;

/// The quarantine's directory inside the data directory.
pub const DIR: &str = "quarantine";

/// `[quarantine]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuarantineConfig {
    /// Keep the bodies of messages whose final action is in `actions` under `DATA/quarantine`.
    pub enabled: bool,
    /// rspamd's action names (`reject`, `quarantine`, `discard`, `add header`, ...).
    pub actions: Vec<String>,
    /// Bound on the quarantine's bytes on disk; the oldest segments go first.
    pub max_bytes: u64,
    /// Entries older than this many days are deleted (0: no age limit).
    pub keep_days: u64,
    /// The writer fsyncs at least this often (milliseconds, 1..=1000).
    pub flush_ms: u64,
    /// Message bytes waiting for the writer; beyond, new entries are dropped and counted.
    pub queue_bytes: u64,
    /// A 32-byte key (raw, or 64 hex digits) that encrypts the bodies at rest
    /// (XChaCha20-Poly1305); none: bodies are only compressed.
    pub key_file: Option<PathBuf>,
    /// `host:port` of the SMTP server a release re-injects into (one that does not pass mail
    /// through shrike again, e.g. Postfix's `127.0.0.1:10026` with `-o smtpd_milters=`).
    pub release_relay: Option<String>,
    /// The HELO name of a release's SMTP session.
    pub release_helo: String,
    /// The address the per-recipient links start with, e.g. `https://mail.example.com:11333`.
    pub link_base: String,
    /// A per-recipient link is valid this many days after it was made.
    pub link_days: u64,
}

impl Default for QuarantineConfig {
    fn default() -> Self {
        QuarantineConfig {
            enabled: false,
            actions: vec!["reject".into(), "quarantine".into(), "discard".into()],
            max_bytes: 1 << 30,
            keep_days: 30,
            flush_ms: 1000,
            queue_bytes: 128 << 20,
            key_file: None,
            release_relay: None,
            release_helo: "localhost".into(),
            link_base: "http://127.0.0.1:11333".into(),
            link_days: 7,
        }
    }
}

/// Why the `[quarantine]` options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuarantineConfigError {
    #[error("quarantine.actions: unknown action {0:?}")]
    Action(String),
    #[error("quarantine.flush_ms must be 1..=1000, got {0}")]
    FlushMs(u64),
    #[error("quarantine.max_bytes must be at least 1 MiB")]
    MaxBytes,
    #[error("quarantine.queue_bytes must be greater than 0")]
    QueueBytes,
    #[error("quarantine.release_relay must be host:port, got {0:?}")]
    Relay(String),
    #[error("quarantine.link_days must be 1..=365, got {0}")]
    LinkDays(u64),
    #[error("quarantine.link_base must start with http:// or https://, got {0:?}")]
    LinkBase(String),
}

impl QuarantineConfig {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), QuarantineConfigError> {
        for a in &self.actions {
            if Action::parse(a).is_none() {
                return Err(QuarantineConfigError::Action(a.clone()));
            }
        }
        if !(1..=1000).contains(&self.flush_ms) {
            return Err(QuarantineConfigError::FlushMs(self.flush_ms));
        }
        if self.max_bytes < 1 << 20 {
            return Err(QuarantineConfigError::MaxBytes);
        }
        if self.queue_bytes == 0 {
            return Err(QuarantineConfigError::QueueBytes);
        }
        if let Some(r) = &self.release_relay {
            let ok = r
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
            if !ok {
                return Err(QuarantineConfigError::Relay(r.clone()));
            }
        }
        if !(1..=365).contains(&self.link_days) {
            return Err(QuarantineConfigError::LinkDays(self.link_days));
        }
        if !(self.link_base.starts_with("http://") || self.link_base.starts_with("https://")) {
            return Err(QuarantineConfigError::LinkBase(self.link_base.clone()));
        }
        Ok(())
    }

    /// The actions whose messages are kept, as a bit set over `Action::ALL`.
    pub fn action_set(&self) -> ActionSet {
        let mut bits = 0u16;
        if self.enabled {
            for a in self.actions.iter().filter_map(|a| Action::parse(a)) {
                bits |= ActionSet::bit(a);
            }
        }
        ActionSet(bits)
    }
}

/// A set of actions (the ones the quarantine keeps); empty keeps nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActionSet(u16);

impl ActionSet {
    fn bit(a: Action) -> u16 {
        1 << Action::ALL.iter().position(|x| *x == a).unwrap_or(0)
    }

    pub fn contains(self, a: Action) -> bool {
        self.0 & ActionSet::bit(a) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// One symbol of a kept verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Symbol {
    pub name: String,
    pub score: f64,
}

/// What the quarantine knows of a kept message besides its bytes: the verdict's and the
/// envelope's fields (as the decision history has them; its record carries the same
/// `time_us`), and where the bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Meta {
    /// 16 hex digits of `time_us` and 8 random ones.
    pub id: String,
    /// Microseconds since the Unix epoch: the history record's time.
    pub time_us: i64,
    pub action: String,
    pub score: f64,
    pub listener: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The envelope sender as the MTA gave it (empty: the null sender `<>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    #[serde(default)]
    pub rcpt: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(default)]
    pub symbols: Vec<Symbol>,
    /// The message's bytes.
    pub size: u64,
    /// Where its stored form is in the segment's data file, its length and CRC-32C.
    #[serde(default)]
    pub off: u64,
    #[serde(default)]
    pub len: u64,
    #[serde(default)]
    pub crc: u32,
    /// Whether the stored form is encrypted.
    #[serde(default)]
    pub enc: bool,
}

impl Meta {
    /// The metadata of a verdict on a message with `envelope`, timed `time_us`.
    pub fn new(
        time_us: i64,
        verdict: &crate::verdict::Verdict,
        envelope: &crate::message::Envelope,
    ) -> Meta {
        let mut symbols: Vec<Symbol> = verdict
            .symbols
            .values()
            .map(|s| Symbol {
                name: s.name.clone(),
                score: s.score,
            })
            .collect();
        symbols.sort_by(|a, b| b.score.total_cmp(&a.score));
        Meta {
            id: new_id(time_us),
            time_us,
            action: verdict.action.as_str().to_string(),
            score: verdict.score,
            queue_id: envelope.queue_id.clone(),
            ip: envelope.client_ip.map(|i| i.to_string()),
            helo: envelope.helo.clone(),
            user: envelope.user.clone(),
            sender: envelope.mail_from.clone(),
            rcpt: envelope.rcpt_to.clone(),
            symbols,
            ..Meta::default()
        }
    }

    /// Whether `rcpt` is one of its recipients (addresses compared without angle brackets
    /// and case).
    pub fn has_rcpt(&self, rcpt: &str) -> bool {
        let want = normal_address(rcpt);
        self.rcpt.iter().any(|r| normal_address(r) == want)
    }

    /// The entry as the JSON API shows it (without where it is stored).
    pub fn to_json(&self, state: &store::EntryState) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "time": crate::history::format_time(self.time_us),
            "time_us": self.time_us,
            "action": self.action,
            "score": self.score,
            "listener": self.listener,
            "queue_id": self.queue_id,
            "message_id": self.message_id,
            "ip": self.ip,
            "helo": self.helo,
            "user": self.user,
            "sender": self.sender,
            "rcpt": self.rcpt,
            "from": self.from,
            "subject": self.subject,
            "symbols": self.symbols,
            "size": self.size,
            "encrypted": self.enc,
            "released": state.released.iter().map(|r| serde_json::json!({
                "time": crate::history::format_time(r.time_us),
                "by": r.by,
                "rcpt": r.rcpt,
            })).collect::<Vec<_>>(),
        })
    }
}

/// An address lower-cased, without angle brackets and surrounding space.
pub fn normal_address(a: &str) -> String {
    a.trim().trim_matches(['<', '>']).to_lowercase()
}

/// A new entry id: the time in 16 hex digits and 32 random bits.
pub fn new_id(time_us: i64) -> String {
    let mut r = [0u8; 4];
    crypto::random(&mut r);
    format!("{:016x}{:08x}", time_us.max(0), u32::from_le_bytes(r))
}

/// The time an id was made at, when it is one.
pub fn id_time(id: &str) -> Option<i64> {
    if id.len() != 24 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    i64::from_str_radix(&id[..16], 16).ok()
}

/// Counters of the writer, shared with `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Entries written.
    pub stored: AtomicU64,
    /// Entries dropped because the writer's queue was full.
    pub dropped: AtomicU64,
    /// Entries not kept because they alone would take more than a quarter of `max_bytes`.
    pub too_large: AtomicU64,
    /// Entries that could not be written (I/O errors; logged).
    pub write_errors: AtomicU64,
    /// Bytes of the quarantine on disk (after the last write or deletion).
    pub bytes: AtomicU64,
    /// Message bytes waiting for the writer.
    pub queued_bytes: AtomicU64,
}

/// Where listeners hand what they keep; cheap to clone. A disabled one keeps nothing.
#[derive(Clone, Default)]
pub struct Quarantine {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    tx: crossbeam_channel::Sender<store::Msg>,
    stats: Arc<Stats>,
    actions: ActionSet,
    queue_bytes: u64,
    store: store::Store,
    drop_log: parking_lot::Mutex<Option<std::time::Instant>>,
}

impl std::fmt::Debug for Quarantine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.inner.is_some() {
            "Quarantine(on)"
        } else {
            "Quarantine(off)"
        })
    }
}

impl Quarantine {
    pub fn disabled() -> Quarantine {
        Quarantine { inner: None }
    }

    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The actions it keeps (empty when disabled).
    pub fn actions(&self) -> ActionSet {
        self.inner
            .as_ref()
            .map_or(ActionSet::default(), |i| i.actions)
    }

    /// The store the operations read and change (`None` when disabled).
    pub fn store(&self) -> Option<&store::Store> {
        self.inner.as_deref().map(|i| &i.store)
    }

    pub fn stats(&self) -> Option<&Stats> {
        self.inner.as_deref().map(|i| &*i.stats)
    }

    /// Hands a message to the writer without waiting: when its queue is full (entries or
    /// bytes) the entry is dropped, counted and logged (at most once per 10 s).
    pub fn submit(&self, meta: Meta, raw: Vec<u8>) {
        let Some(inner) = &self.inner else { return };
        let n = raw.len() as u64;
        let queued = inner.stats.queued_bytes.fetch_add(n, Relaxed);
        let taken = queued.saturating_add(n) <= inner.queue_bytes
            && inner
                .tx
                .try_send(store::Msg::Entry(Box::new((meta, raw))))
                .is_ok();
        if !taken {
            inner.stats.queued_bytes.fetch_sub(n, Relaxed);
            inner.stats.dropped.fetch_add(1, Relaxed);
            let mut last = inner.drop_log.lock();
            if last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10)) {
                *last = Some(std::time::Instant::now());
                tracing::warn!(
                    dropped = inner.stats.dropped.load(Relaxed),
                    "quarantine writer behind: a refused message was not kept"
                );
            }
        }
    }

    /// Makes what was submitted so far durable and waits for it (tests, shutdown); blocking.
    pub fn flush(&self) {
        if let Some(inner) = &self.inner {
            let (ack, done) = crossbeam_channel::bounded(1);
            if inner.tx.send(store::Msg::Flush(ack)).is_ok() {
                let _ = done.recv();
            }
        }
    }
}

/// Why the quarantine could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    #[error("quarantine directory {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("quarantine key file {path}: {error}")]
    Key { path: PathBuf, error: String },
}

/// Opens `DATA_DIR/quarantine` and starts its writer: the handle for the listeners and the
/// writer, which makes the last entries durable when dropped. Disabled by config: a handle
/// that keeps nothing, and no files.
pub fn open(
    data_dir: &Path,
    config: &QuarantineConfig,
) -> Result<(Quarantine, Option<store::Writer>), QuarantineError> {
    if !config.enabled {
        return Ok((Quarantine::disabled(), None));
    }
    let store = store::Store::open(data_dir, config, true)?;
    let stats = Arc::new(Stats::default());
    // Entries are counted in bytes (`queue_bytes`); the channel's own bound only caps the
    // number of small ones.
    let (tx, rx) = crossbeam_channel::bounded(4096);
    let writer = store::Writer::spawn(store.clone(), config.clone(), rx, tx.clone(), stats.clone())
        .map_err(|error| QuarantineError::Io {
            path: store.dir().to_path_buf(),
            error,
        })?;
    Ok((
        Quarantine {
            inner: Some(Arc::new(Inner {
                tx,
                stats,
                actions: config.action_set(),
                queue_bytes: config.queue_bytes,
                store,
                drop_log: parking_lot::Mutex::new(None),
            })),
        },
        Some(writer),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_checks() {
        assert!(QuarantineConfig::default().validate().is_ok());
        for (c, msg) in [
            (
                QuarantineConfig {
                    actions: vec!["bounce".into()],
                    ..Default::default()
                },
                "quarantine.actions: unknown action \"bounce\"",
            ),
            (
                QuarantineConfig {
                    flush_ms: 0,
                    ..Default::default()
                },
                "quarantine.flush_ms must be 1..=1000, got 0",
            ),
            (
                QuarantineConfig {
                    release_relay: Some("127.0.0.1".into()),
                    ..Default::default()
                },
                "quarantine.release_relay must be host:port, got \"127.0.0.1\"",
            ),
            (
                QuarantineConfig {
                    max_bytes: 1000,
                    ..Default::default()
                },
                "quarantine.max_bytes must be at least 1 MiB",
            ),
        ] {
            assert_eq!(c.validate().unwrap_err().to_string(), msg);
        }
    }

    #[test]
    fn action_sets() {
        let mut c = QuarantineConfig {
            enabled: true,
            ..Default::default()
        };
        let s = c.action_set();
        assert!(s.contains(Action::Reject) && s.contains(Action::Discard));
        assert!(!s.contains(Action::AddHeader) && !s.contains(Action::NoAction));
        c.enabled = false;
        assert!(c.action_set().is_empty());
    }

    #[test]
    fn ids_carry_their_time() {
        let id = new_id(1_700_000_000_000_000);
        assert_eq!(id.len(), 24);
        assert_eq!(id_time(&id), Some(1_700_000_000_000_000));
        assert_ne!(id, new_id(1_700_000_000_000_000));
        assert_eq!(id_time("../../etc/passwd"), None);
    }
}
