//! The classifier shared by every daemon: user learns go to one Redis stream
//! (`<prefix>:clf:learns`, one key, so one total order), and each daemon applies the others'
//! entries in stream order.
//!
//! - A daemon's user learn (`/learnspam`, `/learnham`) trains its own model at once, as
//!   without Redis, then appends (origin, class, message key, feature hashes) to the stream
//!   (capped at about `MAX_LEN` entries).
//! - A tail task reads the stream every `POLL` from the last entry applied and trains on each
//!   entry of another origin (`SharedModel::apply_learn`, the classifier's `learn_quietly`:
//!   into the learn journal, so a kill keeps it; not published again). A message trains once
//!   per class while remembered, so an entry met twice trains once.
//! - The origin is a random id kept in the data directory; the last entry applied is kept
//!   there too (`redis-learns.pos`), so a restarted daemon continues where it stopped, and a
//!   new one replays the capped stream instead of starting cold.
//!
//! The stream knows a learn as a class bit, a message key and feature hashes; the classifier
//! (`classify`, above the store) implements `SharedModel` to publish and apply them.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::Value;

use super::{keys, RedisStore};

const MAX_LEN: u64 = 1_000_000;
const POLL: Duration = Duration::from_millis(200);
const BATCH: usize = 500;
const ORIGIN_FILE: &str = "redis-origin";
const POS_FILE: &str = "redis-learns.pos";

/// Why sharing could not start.
#[derive(Debug, thiserror::Error)]
#[error("sharing the classifier through redis: {0}")]
pub struct ShareError(#[from] std::io::Error);

/// A user learn as the stream carries it: (spam, message key, feature hashes).
pub type Publish = Box<dyn Fn(bool, Option<u64>, &[u64]) + Send + Sync>;

/// The model whose learns the stream shares: the classifier.
pub trait SharedModel: Send + Sync + 'static {
    /// Calls `publish` after each learn of this daemon's users that trained.
    fn publish_learns(&self, publish: Publish);
    /// Trains on another daemon's learn (journalled, not published again); whether it trained.
    fn apply_learn(&self, spam: bool, key: Option<u64>, hashes: Vec<u64>) -> std::io::Result<bool>;
}

/// Publishes this daemon's learns and applies the others'. Runs until the store is dropped.
pub fn share<M: SharedModel>(
    store: &Arc<RedisStore>,
    classifier: &Arc<M>,
    data_dir: &Path,
) -> Result<(), ShareError> {
    let origin = origin(data_dir)?;
    let pos_path = data_dir.join(POS_FILE);
    let start = std::fs::read_to_string(&pos_path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0".into());
    let stream = keys::learn_stream(store.prefix());
    let weak: Weak<RedisStore> = Arc::downgrade(store);
    {
        let stream = stream.clone();
        let origin = origin.clone();
        classifier.publish_learns(Box::new(move |spam, key, features| {
            let Some(store) = weak.upgrade() else { return };
            let mut cmd = redis::cmd("XADD");
            cmd.arg(&stream)
                .arg("MAXLEN")
                .arg("~")
                .arg(MAX_LEN)
                .arg("*")
                .arg("o")
                .arg(&origin)
                .arg("c")
                .arg(u8::from(spam))
                .arg("k")
                .arg(key.map(|k| k.to_string()).unwrap_or_default())
                .arg("f")
                .arg(encode(features));
            if let Err(e) = store.query(cmd, Duration::from_secs(1)) {
                store.stats().errors.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "learn not shared with the other daemons");
            }
        }));
    }
    let Some(runtime) = store.runtime() else {
        return Ok(());
    };
    let link = store.inner.link.clone();
    let stats = store.stats().clone();
    let classifier = classifier.clone();
    runtime.spawn(async move {
        let mut last = start;
        loop {
            tokio::time::sleep(POLL).await;
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(&stream)
                .arg(format!("({last}"))
                .arg("+")
                .arg("COUNT")
                .arg(BATCH);
            let Ok(reply) = link.query(cmd).await else {
                continue;
            };
            let entries = parse(&reply);
            if entries.is_empty() {
                continue;
            }
            for e in &entries {
                if e.origin != origin {
                    match classifier.apply_learn(e.spam, e.key, e.hashes.clone()) {
                        Ok(_) => {
                            stats.learns_applied.fetch_add(1, Relaxed);
                        }
                        Err(err) => {
                            tracing::error!(error = %err, "shared learn not journaled");
                        }
                    }
                }
                last.clone_from(&e.id);
            }
            save_pos(&pos_path, &last);
        }
    });
    Ok(())
}

fn save_pos(path: &PathBuf, last: &str) {
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, last)
        .and_then(|()| std::fs::rename(&tmp, path))
        .is_err()
    {
        tracing::warn!(path = %path.display(), "cannot save the learn stream position");
    }
}

/// This daemon's id in the stream, created once in its data directory.
fn origin(dir: &Path) -> std::io::Result<String> {
    let path = dir.join(ORIGIN_FILE);
    if let Ok(s) = std::fs::read_to_string(&path) {
        if !s.trim().is_empty() {
            return Ok(s.trim().to_string());
        }
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()) << 32;
    let id = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&seed.to_le_bytes()));
    std::fs::create_dir_all(dir)?;
    std::fs::write(&path, &id)?;
    Ok(id)
}

fn encode(features: &[u64]) -> Vec<u8> {
    features.iter().flat_map(|h| h.to_le_bytes()).collect()
}

struct Entry {
    id: String,
    origin: String,
    spam: bool,
    key: Option<u64>,
    hashes: Vec<u64>,
}

fn text(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// An `XRANGE` reply; malformed entries are skipped (their id still advances the position).
fn parse(reply: &Value) -> Vec<Entry> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(parts) = item else { continue };
        let (Some(id), Some(Value::Array(fields))) = (parts.first().and_then(text), parts.get(1))
        else {
            continue;
        };
        let mut e = Entry {
            id: String::from_utf8_lossy(id).into_owned(),
            origin: String::new(),
            spam: false,
            key: None,
            hashes: Vec::new(),
        };
        for pair in fields.chunks_exact(2) {
            let (Some(name), Some(value)) = (text(&pair[0]), text(&pair[1])) else {
                continue;
            };
            match name {
                b"o" => e.origin = String::from_utf8_lossy(value).into_owned(),
                b"c" => e.spam = value == b"1",
                b"k" => e.key = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()),
                b"f" => {
                    e.hashes = value
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect();
                }
                _ => {}
            }
        }
        out.push(e);
    }
    out
}
