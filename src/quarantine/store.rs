//! The quarantine on disk: segments of kept messages, the events that change them (release,
//! delete), the writer thread, retention, and the reads (list, find, body).
//!
//! Format. `DATA/quarantine/` holds pairs of files per segment, named by the segment's start
//! time in microseconds (20 digits): `T.qdat`, the stored bodies one after another (zstd, then
//! sealed when a key is set; no framing), and `T.qidx`, one frame per entry: its JSON length
//! (u32 LE), the CRC-32C of the JSON (u32 LE), the JSON of [`Meta`] with the offset, length
//! and CRC-32C of its body in `T.qdat`. The writer appends a body, then its frame: a process
//! killed between the two leaves bytes nothing refers to; one killed within a frame leaves a
//! frame whose CRC fails, where every reader stops (so a torn entry is never served), and
//! which the next start cuts off. Each start writes a new segment. `events` holds one JSON
//! line per release or delete (a torn last line does not parse and does not count). A
//! deleted entry's body is overwritten with zeros at once.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::{Deserialize, Serialize};

use super::crypto::Key;
use super::{id_time, normal_address, Meta, QuarantineConfig, QuarantineError, Stats, DIR};

const IDX: &str = "qidx";
const DAT: &str = "qdat";
const EVENTS: &str = "events";
/// A segment is closed after this long...
const SEGMENT_AGE: Duration = Duration::from_secs(3600);
/// ...or with this many entries: a list's first page parses the newest index only, so its
/// cost is bounded by this, not by the quarantine's size.
const SEGMENT_ENTRIES: usize = 4096;
/// How often retention runs besides after writes past `max_bytes`.
const RETENTION_EVERY: Duration = Duration::from_secs(60);
/// zstd's level for bodies. The writer runs beside the scan workers on the same cores, so its
/// CPU is theirs: level 1 compresses mail about as well as 3 (text) in much less time.
const LEVEL: i32 = 1;
/// Largest index frame read (a frame claiming more is torn or foreign).
const MAX_FRAME: u32 = 16 << 20;

/// One segment's files.
#[derive(Debug, Clone)]
pub struct Segment {
    pub start_us: i64,
    pub idx: PathBuf,
    pub dat: PathBuf,
}

/// A release of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Released {
    pub time_us: i64,
    /// Who released it: `http`, `ui`, `cli`, `link`.
    pub by: String,
    /// The recipients it went to.
    pub rcpt: Vec<String>,
}

/// What the events say of an entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EntryState {
    pub released: Vec<Released>,
    pub deleted: bool,
}

impl EntryState {
    /// Whether a release went to `rcpt` already (any release when `None`).
    pub fn released_to(&self, rcpt: Option<&str>) -> bool {
        match rcpt {
            None => !self.released.is_empty(),
            Some(r) => {
                let r = normal_address(r);
                self.released
                    .iter()
                    .any(|x| x.rcpt.iter().any(|y| normal_address(y) == r))
            }
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Event {
    id: String,
    op: String,
    time_us: i64,
    #[serde(default)]
    by: String,
    #[serde(default)]
    rcpt: Vec<String>,
}

/// Why a kept body cannot be given.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("reading the quarantine: {0}")]
    Io(#[from] std::io::Error),
    #[error("the stored message is damaged (checksum)")]
    Damaged,
    #[error("the stored message is encrypted and no key_file is set")]
    NoKey,
    #[error("the stored message does not open with this key")]
    WrongKey,
    #[error("the message was deleted")]
    Deleted,
}

/// The quarantine directory, for the writer and the readers; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    dir: PathBuf,
    key: Option<Key>,
    /// Events are appended by one thread at a time of this process.
    events: parking_lot::Mutex<()>,
    /// Entries being released now: a second release of one waits for none, it is refused.
    releasing: parking_lot::Mutex<std::collections::HashSet<String>>,
}

/// An entry claimed for a release; the claim ends when it is dropped.
pub struct Claim {
    store: Store,
    id: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.store.inner.releasing.lock().remove(&self.id);
    }
}

impl Store {
    /// The quarantine of `data_dir`. `create` (the daemon): the directory is made if absent
    /// and the newest index cut after its last whole frame.
    pub fn open(
        data_dir: &Path,
        config: &QuarantineConfig,
        create: bool,
    ) -> Result<Store, QuarantineError> {
        let dir = data_dir.join(DIR);
        let io = |error| QuarantineError::Io {
            path: dir.clone(),
            error,
        };
        if create {
            crate::secrets::private_dir(&dir).map_err(io)?;
        }
        let key = match &config.key_file {
            None => None,
            Some(path) => Some(Key::load(path).map_err(|error| QuarantineError::Key {
                path: path.clone(),
                error,
            })?),
        };
        let store = Store {
            inner: Arc::new(StoreInner {
                dir: dir.clone(),
                key,
                events: parking_lot::Mutex::new(()),
                releasing: parking_lot::Mutex::new(Default::default()),
            }),
        };
        if create {
            if let Some(last) = store.segments().map_err(io)?.last() {
                cut_torn_tail(&last.idx).map_err(io)?;
            }
        }
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn encrypted(&self) -> bool {
        self.inner.key.is_some()
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> std::io::Result<Vec<Segment>> {
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(self.dir()) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for e in entries {
            let name = e?.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".qidx")) else {
                continue;
            };
            if let Ok(start_us) = stem.parse::<i64>() {
                out.push(self.segment(start_us));
            }
        }
        out.sort_by_key(|s| s.start_us);
        Ok(out)
    }

    fn segment(&self, start_us: i64) -> Segment {
        Segment {
            start_us,
            idx: self.dir().join(format!("{start_us:020}.{IDX}")),
            dat: self.dir().join(format!("{start_us:020}.{DAT}")),
        }
    }

    /// Every entry's state by id, from the events.
    pub fn states(&self) -> std::io::Result<HashMap<String, EntryState>> {
        let text = match std::fs::read(self.dir().join(EVENTS)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
            Err(e) => return Err(e),
        };
        let mut out: HashMap<String, EntryState> = HashMap::new();
        for line in text.split(|b| *b == b'\n') {
            let Ok(ev) = serde_json::from_slice::<Event>(line) else {
                continue;
            };
            let s = out.entry(ev.id).or_default();
            match ev.op.as_str() {
                "release" => s.released.push(Released {
                    time_us: ev.time_us,
                    by: ev.by,
                    rcpt: ev.rcpt,
                }),
                "delete" => s.deleted = true,
                _ => {}
            }
        }
        Ok(out)
    }

    /// The state of one entry.
    pub fn state(&self, id: &str) -> std::io::Result<EntryState> {
        Ok(self.states()?.remove(id).unwrap_or_default())
    }

    fn append_event(&self, ev: &Event) -> std::io::Result<()> {
        let _one = self.inner.events.lock();
        let mut line = serde_json::to_vec(ev).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir().join(EVENTS))?;
        // One write: a concurrent appender (the CLI beside the daemon) cannot interleave.
        f.write_all(&line)?;
        f.sync_data()
    }

    /// Claims `id` for a release; `None` while another release of it is under way.
    pub fn claim(&self, id: &str) -> Option<Claim> {
        self.inner
            .releasing
            .lock()
            .insert(id.to_string())
            .then(|| Claim {
                store: self.clone(),
                id: id.to_string(),
            })
    }

    /// Records a release of `id` to `rcpt` by `by`.
    pub fn mark_released(&self, id: &str, by: &str, rcpt: &[String]) -> std::io::Result<()> {
        self.append_event(&Event {
            id: id.to_string(),
            op: "release".into(),
            time_us: crate::history::now_us(),
            by: by.to_string(),
            rcpt: rcpt.to_vec(),
        })
    }

    /// Deletes an entry: recorded, and its body overwritten with zeros.
    pub fn delete(&self, meta: &Meta, seg: &Segment, by: &str) -> std::io::Result<()> {
        self.append_event(&Event {
            id: meta.id.clone(),
            op: "delete".into(),
            time_us: crate::history::now_us(),
            by: by.to_string(),
            rcpt: Vec::new(),
        })?;
        let f = OpenOptions::new().write(true).open(&seg.dat)?;
        let zeros = vec![0u8; 64 << 10];
        let mut at = 0u64;
        while at < meta.len {
            let n = (meta.len - at).min(zeros.len() as u64) as usize;
            f.write_all_at(&zeros[..n], meta.off + at)?;
            at += n as u64;
        }
        f.sync_data()
    }

    /// The entry `id` and its segment.
    pub fn find(&self, id: &str) -> std::io::Result<Option<(Meta, Segment)>> {
        let Some(t) = id_time(id) else {
            return Ok(None);
        };
        let segments = self.segments()?;
        // An entry is in a segment started before it was written, which is at or after the
        // entry's time; newest first, the segments started after it are skipped unless it is
        // not found where it should be.
        for pass in 0..2 {
            for seg in segments.iter().rev() {
                let likely = seg.start_us <= t.saturating_add(60_000_000);
                if (pass == 0) != likely {
                    continue;
                }
                if let Some(m) = read_index(&seg.idx)?.into_iter().find(|m| m.id == id) {
                    return Ok(Some((m, seg.clone())));
                }
            }
        }
        Ok(None)
    }

    /// The original bytes of an entry.
    pub fn body(&self, meta: &Meta, seg: &Segment) -> Result<Vec<u8>, BodyError> {
        let f = File::open(&seg.dat)?;
        let mut stored = vec![0u8; meta.len as usize];
        f.read_exact_at(&mut stored, meta.off)?;
        if crc32c::crc32c(&stored) != meta.crc {
            return Err(if stored.iter().all(|b| *b == 0) {
                BodyError::Deleted
            } else {
                BodyError::Damaged
            });
        }
        let compressed = if meta.enc {
            let key = self.inner.key.as_ref().ok_or(BodyError::NoKey)?;
            key.open(&meta.id, &stored).ok_or(BodyError::WrongKey)?
        } else {
            stored
        };
        let raw = zstd::bulk::decompress(&compressed, meta.size as usize)
            .map_err(|_| BodyError::Damaged)?;
        if raw.len() as u64 != meta.size {
            return Err(BodyError::Damaged);
        }
        Ok(raw)
    }

    /// A page of entries, newest first.
    pub fn list(&self, q: &Query) -> std::io::Result<Page> {
        let states = self.states()?;
        let mut page = Page::default();
        let limit = q.limit.max(1);
        for seg in self.segments()?.iter().rev() {
            let mut end = usize::MAX;
            if let Some((s, pos)) = q.cursor {
                if seg.start_us > s {
                    continue;
                }
                if seg.start_us == s {
                    end = pos;
                }
            }
            let entries = read_index(&seg.idx)?;
            let end = end.min(entries.len());
            for (i, m) in entries.into_iter().take(end).enumerate().rev() {
                let state = states.get(&m.id).cloned().unwrap_or_default();
                if state.deleted || !q.matches(&m) {
                    continue;
                }
                if page.entries.len() == limit {
                    page.cursor = Some((seg.start_us, i + 1));
                    return Ok(page);
                }
                page.entries.push((m, state));
            }
        }
        Ok(page)
    }

    /// Bytes on disk.
    pub fn bytes(&self) -> u64 {
        self.segments()
            .unwrap_or_default()
            .iter()
            .map(|s| file_len(&s.idx) + file_len(&s.dat))
            .sum::<u64>()
            + file_len(&self.dir().join(EVENTS))
    }
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// The index's entries up to the first frame that is torn or damaged.
pub fn read_index(path: &Path) -> std::io::Result<Vec<Meta>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(frames(&bytes).0)
}

/// The whole frames of an index and the length they take.
fn frames(bytes: &[u8]) -> (Vec<Meta>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= 8 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap_or_default());
        let Some(json) = bytes.get(at + 8..at + 8 + len as usize) else {
            break;
        };
        if len > MAX_FRAME || crc32c::crc32c(json) != crc {
            break;
        }
        let Ok(m) = serde_json::from_slice::<Meta>(json) else {
            break;
        };
        out.push(m);
        at += 8 + len as usize;
    }
    (out, at)
}

/// Cuts an index after its last whole frame (what a kill left is never appended to, but a
/// reader would stop there).
fn cut_torn_tail(path: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(path)?;
    let (_, whole) = frames(&bytes);
    if whole < bytes.len() {
        tracing::warn!(
            file = %path.display(),
            cut = bytes.len() - whole,
            "quarantine index ended in a torn entry (a killed writer); cut off"
        );
        OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(whole as u64)?;
    }
    Ok(())
}

/// A list's filters.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// A recipient address, or `@domain`.
    pub rcpt: Option<String>,
    /// The envelope sender or the From address, or `@domain`.
    pub sender: Option<String>,
    /// A symbol that hit.
    pub symbol: Option<String>,
    pub since_us: Option<i64>,
    pub until_us: Option<i64>,
    pub limit: usize,
    /// The segment and position the page before ended at.
    pub cursor: Option<(i64, usize)>,
}

fn address_matches(want: &str, have: &str) -> bool {
    let have = normal_address(have);
    if want.starts_with('@') {
        have.ends_with(want)
    } else {
        have == want
    }
}

impl Query {
    /// From `name=value` pairs: `rcpt`, `sender`, `symbol`, `since`, `until` (times as
    /// `/history` takes them), `limit`, `cursor`.
    pub fn parse<'a>(
        pairs: impl Iterator<Item = (&'a str, &'a str)>,
        now_us: i64,
    ) -> Result<Query, String> {
        let mut q = Query {
            limit: 50,
            ..Query::default()
        };
        for (k, v) in pairs {
            let time = |v: &str| {
                crate::history::query::parse_time(v, now_us)
                    .ok_or_else(|| format!("{k}: not a time: {v:?}"))
            };
            match k {
                "rcpt" => q.rcpt = Some(normal_address(v)),
                "sender" => q.sender = Some(normal_address(v)),
                "symbol" => q.symbol = Some(v.trim().to_string()),
                "since" => q.since_us = Some(time(v)?),
                "until" => q.until_us = Some(time(v)?),
                "limit" => {
                    q.limit = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| format!("limit: 1..=1000, got {v:?}"))?
                }
                "cursor" => {
                    q.cursor = v
                        .split_once('.')
                        .and_then(|(s, p)| Some((s.parse().ok()?, p.parse().ok()?)));
                    if q.cursor.is_none() {
                        return Err(format!("cursor: not a cursor: {v:?}"));
                    }
                }
                _ => return Err(format!("unknown parameter {k:?}")),
            }
        }
        Ok(q)
    }

    pub fn matches(&self, m: &Meta) -> bool {
        if self.since_us.is_some_and(|t| m.time_us < t)
            || self.until_us.is_some_and(|t| m.time_us > t)
        {
            return false;
        }
        if let Some(r) = &self.rcpt {
            if !m.rcpt.iter().any(|x| address_matches(r, x)) {
                return false;
            }
        }
        if let Some(s) = &self.sender {
            let any = [&m.sender, &m.from]
                .into_iter()
                .flatten()
                .any(|x| address_matches(s, x));
            if !any {
                return false;
            }
        }
        if let Some(sym) = &self.symbol {
            if !m.symbols.iter().any(|s| s.name.eq_ignore_ascii_case(sym)) {
                return false;
            }
        }
        true
    }
}

/// A page of a list.
#[derive(Debug, Default)]
pub struct Page {
    pub entries: Vec<(Meta, EntryState)>,
    pub cursor: Option<(i64, usize)>,
}

impl Page {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "entries": self.entries.iter().map(|(m, s)| m.to_json(s)).collect::<Vec<_>>(),
            "cursor": self.cursor.map(|(s, p)| format!("{s}.{p}")),
        })
    }
}

/// What the writer thread receives.
pub enum Msg {
    Entry(Box<(Meta, Vec<u8>)>),
    /// Write what is queued, fsync, then answer.
    Flush(Sender<()>),
    Stop,
}

/// The running writer; dropping it writes what is queued, fsyncs and joins the thread.
pub struct Writer {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn spawn(
        store: Store,
        config: QuarantineConfig,
        rx: Receiver<Msg>,
        tx: Sender<Msg>,
        stats: Arc<Stats>,
    ) -> std::io::Result<Writer> {
        stats.bytes.store(store.bytes(), Relaxed);
        let mut w = W {
            segment_bytes: (config.max_bytes / 8).clamp(64 << 10, 64 << 20),
            store,
            config,
            stats,
            cur: None,
            dirty: false,
            last_sync: Instant::now(),
            last_retention: Instant::now(),
        };
        w.retention();
        let thread = std::thread::Builder::new()
            .name("shrike-quarantine".into())
            .spawn(move || w.run(&rx))?;
        Ok(Writer {
            tx,
            thread: Some(thread),
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.tx.send(Msg::Stop);
            let _ = thread.join();
        }
    }
}

struct Cur {
    seg: Segment,
    dat: File,
    idx: File,
    dat_len: u64,
    entries: usize,
    opened: Instant,
}

struct W {
    store: Store,
    config: QuarantineConfig,
    stats: Arc<Stats>,
    segment_bytes: u64,
    cur: Option<Cur>,
    dirty: bool,
    last_sync: Instant,
    last_retention: Instant,
}

impl W {
    fn run(mut self, rx: &Receiver<Msg>) {
        let sync_every = Duration::from_millis(self.config.flush_ms.clamp(1, 1000));
        loop {
            let msg = match rx.recv_timeout(sync_every) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    self.housekeeping(sync_every);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => Msg::Stop,
            };
            match msg {
                Msg::Entry(e) => {
                    let (meta, raw) = *e;
                    let n = raw.len() as u64;
                    self.write(meta, &raw);
                    self.stats.queued_bytes.fetch_sub(n, Relaxed);
                }
                Msg::Flush(ack) => {
                    self.sync();
                    let _ = ack.send(());
                }
                Msg::Stop => {
                    // What is still queued was acknowledged to the MTA: keep it.
                    for m in rx.try_iter() {
                        if let Msg::Entry(e) = m {
                            let (meta, raw) = *e;
                            self.write(meta, &raw);
                        }
                    }
                    self.sync();
                    return;
                }
            }
            self.housekeeping(sync_every);
        }
    }

    fn housekeeping(&mut self, sync_every: Duration) {
        if self.dirty && self.last_sync.elapsed() >= sync_every {
            self.sync();
        }
        if self.last_retention.elapsed() >= RETENTION_EVERY {
            self.retention();
        }
    }

    fn sync(&mut self) {
        if let Some(c) = &self.cur {
            if self.dirty {
                let r = c.dat.sync_data().and_then(|()| c.idx.sync_data());
                if let Err(e) = r {
                    self.stats.write_errors.fetch_add(1, Relaxed);
                    tracing::error!(error = %e, "quarantine fsync failed");
                }
            }
        }
        self.dirty = false;
        self.last_sync = Instant::now();
    }

    fn write(&mut self, mut meta: Meta, raw: &[u8]) {
        meta.size = raw.len() as u64;
        let compressed = match zstd::bulk::compress(raw, LEVEL) {
            Ok(c) => c,
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "quarantine: compressing failed");
                return;
            }
        };
        let stored = match &self.store.inner.key {
            Some(k) => k.seal(&meta.id, &compressed),
            None => compressed,
        };
        if stored.len() as u64 > self.config.max_bytes / 4 {
            self.stats.too_large.fetch_add(1, Relaxed);
            tracing::warn!(
                id = meta.id,
                bytes = raw.len(),
                "quarantine: message not kept: larger than a quarter of max_bytes"
            );
            return;
        }
        if let Err(e) = self.append(&mut meta, &stored) {
            self.stats.write_errors.fetch_add(1, Relaxed);
            tracing::error!(error = %e, id = meta.id, "quarantine: writing failed");
            // Whatever reached the files is never appended to again.
            self.cur = None;
            return;
        }
        self.stats.stored.fetch_add(1, Relaxed);
        if self.stats.bytes.load(Relaxed) > self.config.max_bytes {
            self.retention();
        }
    }

    fn append(&mut self, meta: &mut Meta, stored: &[u8]) -> std::io::Result<()> {
        let rotate = self.cur.as_ref().is_none_or(|c| {
            (c.dat_len > 0 && c.dat_len + stored.len() as u64 > self.segment_bytes)
                || c.entries >= SEGMENT_ENTRIES
                || c.opened.elapsed() >= SEGMENT_AGE
        });
        if rotate {
            self.sync();
            self.cur = None;
            let mut start = crate::history::now_us();
            while self.store.segment(start).idx.exists() {
                start += 1;
            }
            let seg = self.store.segment(start);
            let open = |p: &Path| OpenOptions::new().create_new(true).append(true).open(p);
            let dat = open(&seg.dat)?;
            let idx = open(&seg.idx)?;
            self.cur = Some(Cur {
                seg,
                dat,
                idx,
                dat_len: 0,
                entries: 0,
                opened: Instant::now(),
            });
        }
        let Some(c) = self.cur.as_mut() else {
            return Ok(());
        };
        meta.off = c.dat_len;
        meta.len = stored.len() as u64;
        meta.crc = crc32c::crc32c(stored);
        meta.enc = self.store.inner.key.is_some();
        c.dat.write_all(stored)?;
        c.dat_len += stored.len() as u64;
        let json = serde_json::to_vec(&*meta).map_err(std::io::Error::other)?;
        let mut frame = Vec::with_capacity(json.len() + 8);
        frame.extend_from_slice(&(json.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
        frame.extend_from_slice(&json);
        c.idx.write_all(&frame)?;
        c.entries += 1;
        self.dirty = true;
        self.stats
            .bytes
            .fetch_add(stored.len() as u64 + frame.len() as u64, Relaxed);
        Ok(())
    }

    /// Deletes the oldest segments past `max_bytes`, and those whose last write is older
    /// than `keep_days`; never the one being written.
    fn retention(&mut self) {
        self.last_retention = Instant::now();
        let Ok(segments) = self.store.segments() else {
            return;
        };
        let current = self.cur.as_ref().map(|c| c.seg.start_us);
        let sizes: Vec<u64> = segments
            .iter()
            .map(|s| file_len(&s.idx) + file_len(&s.dat))
            .collect();
        let events = file_len(&self.store.dir().join(EVENTS));
        let mut total: u64 = sizes.iter().sum::<u64>() + events;
        let max_age = (self.config.keep_days > 0)
            .then(|| Duration::from_secs(self.config.keep_days.saturating_mul(86_400)));
        for (seg, size) in segments.iter().zip(&sizes) {
            if Some(seg.start_us) == current {
                continue;
            }
            let old = max_age.is_some_and(|age| {
                std::fs::metadata(&seg.idx)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() > age)
            });
            if total <= self.config.max_bytes && !old {
                continue;
            }
            let removed =
                std::fs::remove_file(&seg.idx).and_then(|()| std::fs::remove_file(&seg.dat));
            match removed {
                Ok(()) => {
                    total = total.saturating_sub(*size);
                    tracing::debug!(segment = seg.start_us, "quarantine segment deleted");
                }
                Err(e) => tracing::warn!(error = %e, "deleting a quarantine segment failed"),
            }
        }
        self.stats.bytes.store(total, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> QuarantineConfig {
        let _ = dir;
        QuarantineConfig {
            enabled: true,
            ..QuarantineConfig::default()
        }
    }

    fn meta(i: i64) -> Meta {
        Meta {
            id: super::super::new_id(1_000_000 + i),
            time_us: 1_000_000 + i,
            action: "reject".into(),
            rcpt: vec![format!("u{}@example.com", i % 3)],
            sender: Some("s@example.net".into()),
            ..Meta::default()
        }
    }

    #[test]
    fn written_entries_list_find_and_open() {
        let data = tempfile::tempdir().unwrap();
        let c = config(data.path());
        let (q, w) = super::super::open(data.path(), &c).unwrap();
        for i in 0..10 {
            q.submit(
                meta(i),
                format!("Subject: {i}\r\n\r\nbody {i}\r\n").into_bytes(),
            );
        }
        q.flush();
        let store = q.store().unwrap();
        let page = store
            .list(&Query {
                limit: 4,
                ..Query::default()
            })
            .unwrap();
        assert_eq!(page.entries.len(), 4);
        assert_eq!(page.entries[0].0.time_us, 1_000_009, "newest first");
        let next = store
            .list(&Query {
                limit: 100,
                cursor: page.cursor,
                ..Query::default()
            })
            .unwrap();
        assert_eq!(next.entries.len(), 6);
        assert_eq!(next.entries[0].0.time_us, 1_000_005);
        let only = store
            .list(&Query {
                limit: 100,
                rcpt: Some("u1@example.com".into()),
                ..Query::default()
            })
            .unwrap();
        assert_eq!(only.entries.len(), 3);
        let id = &page.entries[2].0.id;
        let (m, seg) = store.find(id).unwrap().unwrap();
        assert_eq!(
            store.body(&m, &seg).unwrap(),
            b"Subject: 7\r\n\r\nbody 7\r\n"
        );
        store.delete(&m, &seg, "test").unwrap();
        assert!(matches!(store.body(&m, &seg), Err(BodyError::Deleted)));
        let all = store
            .list(&Query {
                limit: 100,
                ..Query::default()
            })
            .unwrap();
        assert_eq!(all.entries.len(), 9);
        drop(w);
    }

    #[test]
    fn a_torn_frame_ends_the_index() {
        let data = tempfile::tempdir().unwrap();
        let c = config(data.path());
        let (q, w) = super::super::open(data.path(), &c).unwrap();
        for i in 0..3 {
            q.submit(meta(i), b"x".to_vec());
        }
        drop(w);
        let store = q.store().unwrap().clone();
        let seg = store.segments().unwrap().pop().unwrap();
        let mut bytes = std::fs::read(&seg.idx).unwrap();
        let whole = bytes.len();
        bytes.truncate(whole - 5);
        std::fs::write(&seg.idx, &bytes).unwrap();
        assert_eq!(read_index(&seg.idx).unwrap().len(), 2);
        Store::open(data.path(), &c, true).unwrap();
        let cut = std::fs::read(&seg.idx).unwrap();
        assert!(cut.len() < bytes.len());
        assert_eq!(read_index(&seg.idx).unwrap().len(), 2);
    }

    #[test]
    fn keep_days_deletes_old_segments_but_never_the_current_one() {
        let data = tempfile::tempdir().unwrap();
        let c = QuarantineConfig {
            keep_days: 30,
            ..config(data.path())
        };
        // Two starts: two segments.
        for round in 0..2 {
            let (q, w) = super::super::open(data.path(), &c).unwrap();
            q.submit(meta(round), b"Subject: x\r\n\r\nbody\r\n".to_vec());
            q.flush();
            drop(w);
        }
        let store = Store::open(data.path(), &c, true).unwrap();
        let segs = store.segments().unwrap();
        assert_eq!(segs.len(), 2);
        let old = SystemTime::now() - Duration::from_secs(31 * 86_400);
        File::options()
            .write(true)
            .open(&segs[0].idx)
            .unwrap()
            .set_modified(old)
            .unwrap();
        // A writer's start runs retention: the old segment goes, the recent one stays.
        let (q, w) = super::super::open(data.path(), &c).unwrap();
        let left = q.store().unwrap().segments().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].start_us, segs[1].start_us);
        assert!(!segs[0].dat.exists());
        drop(w);
    }
}
