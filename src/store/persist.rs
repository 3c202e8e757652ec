//! Persistence: an append-only log (WAL) of applied increments and periodic snapshots, so no
//! statistics are lost on restart or host move.
//!
//! Each shard appends its increments, framed and checksummed (CRC32C), to its own buffer while
//! it holds its own lock, numbered by a per-shard sequence. A flusher thread moves the buffers
//! to the current WAL file every `flush_ms` and fsyncs by policy (default: every second, like
//! Redis `appendfsync everysec`). A snapshot first rotates the WAL, then writes every shard
//! (each under its lock only while it is encoded) with the shard's sequence, to a temporary file
//! that is fsynced and renamed into place; older WALs and snapshots are then removed. Replay
//! skips records a snapshot already holds (sequence ≤ the shard's snapshot sequence), so a
//! snapshot never has to stop the writers.
//!
//! Files carry a format version, the hash algorithm and the bucket layout; anything else is
//! refused with a clear message. On startup a torn last record of a WAL is cut off with a
//! warning; a bad checksum anywhere else, or a damaged snapshot, stops startup naming the file
//! and offset, unless `salvage` is set, which moves the bad file aside (`.corrupt`) and starts
//! from what is valid.
//!
//! Rate counters are not persisted: they cover minutes and restart empty.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{Bucket, Clock, Counts, Increment, Store, StoreConfig, StoreError, StoreKey, COUNTERS};

/// File format version.
const VERSION: u16 = 1;
/// Hash algorithm of the keys: 1 = XXH3-64 with shrike's shingle seed (shingle::SEED).
const HASH_ALGORITHM: u16 = 1;
const WAL_MAGIC: &[u8; 8] = b"SHRKWAL\0";
const SNAP_MAGIC: &[u8; 8] = b"SHRKSNP\0";
const SNAP_END: &[u8; 8] = b"SHRKEND\0";

/// When the WAL is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// After every flush (`flush_ms`).
    Always,
    /// At most once a second (the default).
    EverySecond,
    /// Never explicitly (the OS decides).
    Never,
}

/// Persistence options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PersistConfig {
    pub fsync: FsyncPolicy,
    /// How often shard buffers are written to the WAL.
    pub flush_ms: u64,
    /// How often a snapshot is written (0: only on `snapshot()` and at shutdown).
    pub snapshot_secs: u64,
}

impl Default for PersistConfig {
    fn default() -> Self {
        PersistConfig {
            fsync: FsyncPolicy::EverySecond,
            flush_ms: 100,
            snapshot_secs: 300,
        }
    }
}

/// Why persistent state could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} at byte {offset}: {what} (start with salvage to move it aside and use what is valid)")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error(
        "{path}: {what}; this build cannot use it (move the data directory aside to start empty)"
    )]
    Incompatible { path: PathBuf, what: String },
    #[error(transparent)]
    Config(#[from] StoreError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PersistError + '_ {
    move |source| PersistError::Io {
        path: path.to_path_buf(),
        source,
    }
}

// ---- encoding ---------------------------------------------------------------------------------

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A cursor over a payload; every read is bounds-checked.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.data.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn done(&self) -> bool {
        self.at == self.data.len()
    }
}

fn put_key(out: &mut Vec<u8>, key: &StoreKey) {
    out.push(key.namespace);
    out.extend_from_slice(&key.kind.to_le_bytes());
    out.extend_from_slice(&key.hash.to_le_bytes());
}

fn read_key(r: &mut Reader<'_>) -> Option<StoreKey> {
    Some(StoreKey {
        namespace: r.u8()?,
        kind: r.u16()?,
        hash: r.u64()?,
    })
}

fn put_counts(out: &mut Vec<u8>, counts: &Counts) {
    for &c in counts {
        put_varint(out, c);
    }
}

fn read_counts(r: &mut Reader<'_>) -> Option<Counts> {
    let mut counts = [0u64; COUNTERS];
    for c in &mut counts {
        *c = r.varint()?;
    }
    Some(counts)
}

/// Appends a framed record: payload length, CRC32C of the payload, payload. The payload is
/// written in place by `write`, then the header is filled in: no intermediate buffer.
fn frame(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    write(out);
    let payload = &out[start + 8..];
    let (len, crc) = (payload.len() as u32, crc32c::crc32c(payload));
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes one WAL record (called by the store under the shard's lock).
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    shard: u32,
    seq: u64,
    time: u64,
    increments: &[(StoreKey, Counts)],
) {
    // Room for the whole record at once: the writer takes a shard's buffer away, so the next
    // record starts from an empty one, which would otherwise grow several times per record.
    // (frame, header, then per increment a key of 11 bytes and up to 10 bytes per counter)
    out.reserve(8 + 24 + increments.len() * (11 + 10 * COUNTERS));
    frame(out, |payload| {
        payload.extend_from_slice(&shard.to_le_bytes());
        payload.extend_from_slice(&seq.to_le_bytes());
        payload.extend_from_slice(&time.to_le_bytes());
        payload.extend_from_slice(&(increments.len() as u32).to_le_bytes());
        for (key, counts) in increments {
            put_key(payload, key);
            put_counts(payload, counts);
        }
    });
}

struct WalRecord {
    shard: u32,
    seq: u64,
    time: u64,
    increments: Vec<Increment>,
}

fn decode_record(payload: &[u8]) -> Option<WalRecord> {
    let mut r = Reader::new(payload);
    let shard = r.u32()?;
    let seq = r.u64()?;
    let time = r.u64()?;
    let n = r.u32()? as usize;
    let mut increments = Vec::with_capacity(n.min(payload.len() / 11 + 1));
    for _ in 0..n {
        let key = read_key(&mut r)?;
        let counts = read_counts(&mut r)?;
        increments.push(Increment { key, counts });
    }
    r.done().then_some(WalRecord {
        shard,
        seq,
        time,
        increments,
    })
}

/// The header both file kinds start with: what the data means.
fn header(magic: &[u8; 8], store: &Store) -> Vec<u8> {
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(magic);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&HASH_ALGORITHM.to_le_bytes());
    h.extend_from_slice(&(store.shard_count() as u32).to_le_bytes());
    let resolutions = store.layout().resolutions();
    h.push(resolutions.len() as u8);
    for r in resolutions {
        h.extend_from_slice(&r.bucket_secs.to_le_bytes());
        h.extend_from_slice(&r.keep_secs.to_le_bytes());
    }
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a file's header against this store; returns the offset after it.
fn check_header(
    path: &Path,
    data: &[u8],
    magic: &[u8; 8],
    store: &Store,
) -> Result<usize, PersistError> {
    let expected = header(magic, store);
    let incompatible = |what: String| PersistError::Incompatible {
        path: path.to_path_buf(),
        what,
    };
    if data.len() < 8 || &data[..8] != magic {
        return Err(PersistError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            what: "not a shrike store file (bad magic)".into(),
        });
    }
    let mut r = Reader::new(&data[8..]);
    let version = r.u16();
    let algorithm = r.u16();
    let shards = r.u32();
    if version != Some(VERSION) {
        return Err(incompatible(format!(
            "format version {version:?}, expected {VERSION}"
        )));
    }
    if algorithm != Some(HASH_ALGORITHM) {
        return Err(incompatible(format!(
            "hash algorithm {algorithm:?}, expected {HASH_ALGORITHM}"
        )));
    }
    if shards != Some(store.shard_count() as u32) {
        return Err(incompatible(format!(
            "written with {shards:?} shards, configured {} (keep store.shards/max_keys as they were)",
            store.shard_count()
        )));
    }
    if data.len() < expected.len() || data[..expected.len()] != expected[..] {
        return Err(incompatible(
            "bucket resolutions differ from the configuration".into(),
        ));
    }
    Ok(expected.len())
}

// ---- files ------------------------------------------------------------------------------------

fn generation_of(path: &Path, prefix: &str, suffix: &str) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let hex = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    u64::from_str_radix(hex, 16).ok()
}

fn wal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:016x}.log"))
}

fn snapshot_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("snapshot-{generation:016x}.bin"))
}

/// (generation, path) of files named `prefix{hex}suffix`, oldest first.
fn list(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<(u64, PathBuf)>, PersistError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let path = entry.map_err(io_err(dir))?.path();
        if let Some(g) = generation_of(&path, prefix, suffix) {
            out.push((g, path));
        }
    }
    out.sort();
    Ok(out)
}

fn sync_dir(dir: &Path) -> Result<(), PersistError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

fn move_aside(path: &Path) -> Result<(), PersistError> {
    let aside = path.with_extension("corrupt");
    tracing::warn!(file = %path.display(), to = %aside.display(), "moving damaged store file aside");
    fs::rename(path, &aside).map_err(io_err(path))
}

struct WalWriter {
    dir: PathBuf,
    generation: u64,
    path: PathBuf,
    file: BufWriter<File>,
    last_sync: Instant,
    dirty: bool,
}

impl WalWriter {
    fn create(dir: &Path, generation: u64, store: &Store) -> Result<WalWriter, PersistError> {
        let path = wal_path(dir, generation);
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut file = BufWriter::with_capacity(1 << 20, file);
        file.write_all(&header(WAL_MAGIC, store))
            .map_err(io_err(&path))?;
        file.flush().map_err(io_err(&path))?;
        file.get_ref().sync_all().map_err(io_err(&path))?;
        sync_dir(dir)?;
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            generation,
            path,
            file,
            last_sync: Instant::now(),
            dirty: false,
        })
    }

    /// Moves every shard's pending records into the file (not yet fsynced).
    fn flush(&mut self, store: &Store) -> Result<(), PersistError> {
        let mut result = Ok(());
        store.drain_logs(|bytes| {
            if result.is_ok() && !bytes.is_empty() {
                result = self.file.write_all(bytes);
                self.dirty = true;
            }
        });
        result.map_err(io_err(&self.path))?;
        self.file.flush().map_err(io_err(&self.path))
    }

    fn sync(&mut self) -> Result<(), PersistError> {
        if self.dirty {
            self.file
                .get_ref()
                .sync_data()
                .map_err(io_err(&self.path))?;
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

/// A store whose increments survive restarts: open it from a data directory, use `store()`.
pub struct Durable {
    store: Arc<Store>,
    dir: PathBuf,
    wal: Arc<Mutex<WalWriter>>,
    stop: Arc<AtomicBool>,
    flusher: Option<JoinHandle<()>>,
    committer: Committer,
}

/// Makes increments durable before they are acknowledged (a user's learn): `commit` returns
/// once everything recorded before the call is written to the WAL file (to the OS) and, under
/// `fsync = "always"`, fsynced; under `every_second` the flusher fsyncs within a second, as
/// Redis's `appendfsync everysec` does. So a killed process loses nothing acknowledged, and a
/// crashed OS at most the last second.
///
/// Group commit: callers that arrive while a write is under way wait for the WAL lock, and the
/// first to get it writes for all of them (every caller takes a ticket; one write covers every
/// ticket taken before it started), so a burst of learns costs one write, not one per learn.
#[derive(Clone)]
pub struct Committer {
    store: Arc<Store>,
    wal: Arc<Mutex<WalWriter>>,
    fsync: FsyncPolicy,
    tickets: Arc<Tickets>,
}

#[derive(Default)]
struct Tickets {
    /// Tickets taken (each by a caller whose increments are already in the shard logs).
    taken: AtomicU64,
    /// Every ticket up to this one is written.
    written: AtomicU64,
    /// WAL writes done by `commit` (so a test or metric can see the grouping).
    writes: AtomicU64,
}

impl Committer {
    /// Writes (and fsyncs by policy) everything recorded before this call.
    pub fn commit(&self) -> Result<(), PersistError> {
        let ticket = self.tickets.taken.fetch_add(1, Ordering::SeqCst) + 1;
        let mut w = self.wal.lock();
        if self.tickets.written.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        // Every ticket up to `upto` was taken after its increments were logged, so this write
        // carries them all.
        let upto = self.tickets.taken.load(Ordering::SeqCst);
        w.flush(&self.store)?;
        if self.fsync == FsyncPolicy::Always {
            w.sync()?;
        }
        self.tickets.writes.fetch_add(1, Ordering::Relaxed);
        self.tickets.written.store(upto, Ordering::SeqCst);
        Ok(())
    }

    /// (commits asked for, WAL writes they took).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.tickets.taken.load(Ordering::Relaxed),
            self.tickets.writes.load(Ordering::Relaxed),
        )
    }
}

/// What `open` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    pub snapshot: Option<PathBuf>,
    pub snapshot_keys: u64,
    pub wal_files: usize,
    pub wal_records: u64,
    pub skipped_records: u64,
    pub truncated_tail: bool,
    pub moved_aside: Vec<PathBuf>,
}

impl Durable {
    /// Opens (creating) `dir`, loads the newest snapshot, replays the WALs after it, and starts
    /// the flusher. `salvage` moves damaged files aside instead of refusing to start.
    pub fn open(
        dir: &Path,
        config: &StoreConfig,
        persist: &PersistConfig,
        clock: Arc<dyn Clock>,
        salvage: bool,
    ) -> Result<(Durable, Recovery), PersistError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let store = Arc::new(Store::new(config, clock)?);
        let mut recovery = Recovery::default();
        let snapshots = list(dir, "snapshot-", ".bin")?;
        let mut base = 0;
        let mut snapshot_seqs = vec![0u64; store.shard_count()];
        for (generation, path) in snapshots.iter().rev() {
            match load_snapshot(path, &store, &mut snapshot_seqs) {
                Ok(keys) => {
                    base = *generation;
                    recovery.snapshot = Some(path.clone());
                    recovery.snapshot_keys = keys;
                    break;
                }
                Err(e @ PersistError::Corrupt { .. }) if salvage => {
                    tracing::warn!(error = %e, "damaged snapshot");
                    store.clear();
                    snapshot_seqs.iter_mut().for_each(|s| *s = 0);
                    move_aside(path)?;
                    recovery.moved_aside.push(path.clone());
                }
                Err(e) => return Err(e),
            }
        }
        let wals = list(dir, "wal-", ".log")?;
        let mut next_generation = base + 1;
        for (generation, path) in &wals {
            next_generation = next_generation.max(generation + 1);
            if *generation <= base {
                continue;
            }
            recovery.wal_files += 1;
            replay_wal(path, &store, &snapshot_seqs, salvage, &mut recovery)?;
        }
        let wal = WalWriter::create(dir, next_generation, &store)?;
        store.enable_log();
        let wal = Arc::new(Mutex::new(wal));
        let stop = Arc::new(AtomicBool::new(false));
        let flusher = {
            let (store, wal, stop) = (store.clone(), wal.clone(), stop.clone());
            let (thread_dir, persist) = (dir.to_path_buf(), persist.clone());
            std::thread::Builder::new()
                .name("shrike-wal".into())
                .spawn(move || flusher_loop(&store, &wal, &stop, &thread_dir, &persist))
                .map_err(io_err(dir))?
        };
        let committer = Committer {
            store: store.clone(),
            wal: wal.clone(),
            fsync: persist.fsync,
            tickets: Arc::default(),
        };
        Ok((
            Durable {
                store,
                dir: dir.to_path_buf(),
                wal,
                stop,
                flusher: Some(flusher),
                committer,
            },
            recovery,
        ))
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The handle that makes acknowledged increments durable (see `Committer`).
    pub fn committer(&self) -> Committer {
        self.committer.clone()
    }

    /// Writes and fsyncs everything applied so far. When it returns, those increments survive
    /// a crash.
    pub fn sync(&self) -> Result<(), PersistError> {
        let mut wal = self.wal.lock();
        wal.flush(&self.store)?;
        wal.sync()
    }

    /// Rotates the WAL, writes a snapshot, and removes the files it makes redundant.
    pub fn snapshot(&self) -> Result<PathBuf, PersistError> {
        snapshot(&self.store, &self.wal, &self.dir)
    }

    /// Flushes, fsyncs and writes a final snapshot (graceful shutdown).
    pub fn close(mut self) -> Result<(), PersistError> {
        self.stop_flusher();
        self.sync()?;
        self.snapshot().map(|_| ())
    }

    fn stop_flusher(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.flusher.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.stop_flusher();
        if let Err(e) = self.sync() {
            tracing::error!(error = %e, "final WAL sync failed");
        }
    }
}

fn flusher_loop(
    store: &Store,
    wal: &Mutex<WalWriter>,
    stop: &AtomicBool,
    dir: &Path,
    persist: &PersistConfig,
) {
    let mut last_snapshot = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(persist.flush_ms.max(1)));
        let result = {
            let mut w = wal.lock();
            w.flush(store).and_then(|()| match persist.fsync {
                FsyncPolicy::Always => w.sync(),
                FsyncPolicy::EverySecond if w.last_sync.elapsed() >= Duration::from_secs(1) => {
                    w.sync()
                }
                _ => Ok(()),
            })
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "WAL write failed; will retry");
        }
        if persist.snapshot_secs > 0
            && last_snapshot.elapsed() >= Duration::from_secs(persist.snapshot_secs)
        {
            last_snapshot = Instant::now();
            if let Err(e) = snapshot(store, wal, dir) {
                tracing::error!(error = %e, "snapshot failed");
            }
        }
    }
}

fn snapshot(store: &Store, wal: &Mutex<WalWriter>, dir: &Path) -> Result<PathBuf, PersistError> {
    // Rotate: everything in WAL generations up to `covered` is applied before any shard below
    // is encoded, so the snapshot holds it all.
    let covered = {
        let mut w = wal.lock();
        w.flush(store)?;
        w.sync()?;
        let covered = w.generation;
        *w = WalWriter::create(&w.dir.clone(), covered + 1, store)?;
        covered
    };
    let path = snapshot_path(dir, covered);
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    out.write_all(&header(SNAP_MAGIC, store))
        .map_err(io_err(&tmp))?;
    let mut keys = 0u64;
    let mut block = Vec::new();
    for shard in 0..store.shard_count() {
        block.clear();
        keys += store.encode_shard(shard, &mut block);
        out.write_all(&block).map_err(io_err(&tmp))?;
    }
    let mut end = Vec::with_capacity(20);
    end.extend_from_slice(SNAP_END);
    end.extend_from_slice(&keys.to_le_bytes());
    let crc = crc32c::crc32c(&end);
    end.extend_from_slice(&crc.to_le_bytes());
    out.write_all(&end).map_err(io_err(&tmp))?;
    out.flush().map_err(io_err(&tmp))?;
    out.get_ref().sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, &path).map_err(io_err(&path))?;
    sync_dir(dir)?;
    for (generation, old) in list(dir, "wal-", ".log")? {
        if generation <= covered {
            fs::remove_file(&old).map_err(io_err(&old))?;
        }
    }
    for (generation, old) in list(dir, "snapshot-", ".bin")? {
        if generation < covered {
            fs::remove_file(&old).map_err(io_err(&old))?;
        }
    }
    Ok(path)
}

/// Encodes one shard's block: shard, sequence, keys with their buckets.
pub(crate) fn encode_shard_block(
    out: &mut Vec<u8>,
    shard: u32,
    seq: u64,
    keys: &[(StoreKey, Vec<Bucket>)],
) {
    frame(out, |payload| {
        payload.extend_from_slice(&shard.to_le_bytes());
        payload.extend_from_slice(&seq.to_le_bytes());
        payload.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        for (key, buckets) in keys {
            put_key(payload, key);
            payload.extend_from_slice(&(buckets.len() as u16).to_le_bytes());
            for b in buckets.iter() {
                payload.push(b.resolution);
                payload.extend_from_slice(&b.id.to_le_bytes());
                put_counts(payload, &b.counts);
            }
        }
    });
}

fn read_file(path: &Path) -> Result<Vec<u8>, PersistError> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(io_err(path))?;
    Ok(data)
}

/// Reads framed records from `data[at..]`: Ok((payload, next offset)), Err(offset) at damage.
fn next_frame(data: &[u8], at: usize) -> Option<Result<(&[u8], usize), &'static str>> {
    if at == data.len() {
        return None;
    }
    let mut r = Reader::new(&data[at..]);
    let (Some(len), Some(crc)) = (r.u32(), r.u32()) else {
        return Some(Err("truncated record header"));
    };
    let Some(payload) = r.bytes(len as usize) else {
        return Some(Err("truncated record"));
    };
    if crc32c::crc32c(payload) != crc {
        return Some(Err("checksum mismatch"));
    }
    Some(Ok((payload, at + 8 + len as usize)))
}

fn load_snapshot(path: &Path, store: &Store, seqs: &mut [u64]) -> Result<u64, PersistError> {
    let data = read_file(path)?;
    let corrupt = |offset: usize, what: &str| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what: what.to_string(),
    };
    let mut at = check_header(path, &data, SNAP_MAGIC, store)?;
    let mut keys = 0u64;
    for _ in 0..store.shard_count() {
        let (payload, next) = match next_frame(&data, at) {
            Some(Ok(frame)) => frame,
            Some(Err(what)) => return Err(corrupt(at, what)),
            None => return Err(corrupt(at, "snapshot ends early")),
        };
        let mut r = Reader::new(payload);
        let parsed = (|| {
            let shard = r.u32()? as usize;
            let seq = r.u64()?;
            let n = r.u32()?;
            let mut entries = Vec::with_capacity((n as usize).min(payload.len() / 11 + 1));
            for _ in 0..n {
                let key = read_key(&mut r)?;
                let nb = r.u16()?;
                let mut buckets = Vec::with_capacity(nb as usize);
                for _ in 0..nb {
                    buckets.push(Bucket {
                        resolution: r.u8()?,
                        id: r.u32()?,
                        counts: read_counts(&mut r)?,
                    });
                }
                entries.push((key, buckets));
            }
            r.done().then_some((shard, seq, entries))
        })();
        let Some((shard, seq, entries)) = parsed.filter(|(s, _, _)| *s < seqs.len()) else {
            return Err(corrupt(at, "malformed shard block"));
        };
        seqs[shard] = seq;
        keys += entries.len() as u64;
        store.load_shard(shard, seq, entries);
        at = next;
    }
    let mut r = Reader::new(&data[at..]);
    let end_ok = r.bytes(8) == Some(&SNAP_END[..])
        && r.u64() == Some(keys)
        && r.u32() == Some(crc32c::crc32c(&data[at..at + 16]))
        && r.done();
    if !end_ok {
        return Err(corrupt(
            at,
            "missing or bad end marker (incomplete snapshot)",
        ));
    }
    Ok(keys)
}

fn replay_wal(
    path: &Path,
    store: &Store,
    snapshot_seqs: &[u64],
    salvage: bool,
    recovery: &mut Recovery,
) -> Result<(), PersistError> {
    let data = read_file(path)?;
    let header_len = match check_header(path, &data, WAL_MAGIC, store) {
        Ok(len) => len,
        // A WAL cut off inside its own header holds no records.
        Err(PersistError::Corrupt { .. }) | Err(PersistError::Incompatible { .. })
            if data.len() < header(WAL_MAGIC, store).len() =>
        {
            tracing::warn!(file = %path.display(), "empty WAL with a torn header; removing it");
            fs::remove_file(path).map_err(io_err(path))?;
            recovery.truncated_tail = true;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut at = header_len;
    while let Some(frame) = next_frame(&data, at) {
        let damage = match frame {
            Ok((payload, next)) => match decode_record(payload) {
                Some(record) if (record.shard as usize) < snapshot_seqs.len() => {
                    recovery.wal_records += 1;
                    if record.seq > snapshot_seqs[record.shard as usize] {
                        store.replay(
                            record.shard as usize,
                            record.seq,
                            record.time,
                            &record.increments,
                        );
                    } else {
                        recovery.skipped_records += 1;
                    }
                    at = next;
                    continue;
                }
                _ => "malformed record",
            },
            Err(what) => what,
        };
        // Damage at the very end is a torn write: cut it off. Anywhere else it is corruption.
        let torn_tail = match damage {
            "truncated record header" | "truncated record" => true,
            _ => {
                let len = data
                    .get(at..at + 4)
                    .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
                at + 8 + len as usize >= data.len()
            }
        };
        if torn_tail {
            tracing::warn!(file = %path.display(), offset = at, "torn WAL tail cut off");
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err(path))?;
            file.set_len(at as u64).map_err(io_err(path))?;
            file.sync_all().map_err(io_err(path))?;
            recovery.truncated_tail = true;
            return Ok(());
        }
        if salvage {
            move_aside(path)?;
            recovery.moved_aside.push(path.to_path_buf());
            return Ok(());
        }
        return Err(PersistError::Corrupt {
            path: path.to_path_buf(),
            offset: at as u64,
            what: damage.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Counter, ManualClock, Resolution, WindowCounts};

    const T0: u64 = 1_700_000_000;

    fn config() -> StoreConfig {
        StoreConfig {
            max_keys: 100_000,
            shards: 32,
            ..StoreConfig::default()
        }
    }

    fn persist() -> PersistConfig {
        PersistConfig {
            snapshot_secs: 0,
            ..PersistConfig::default()
        }
    }

    fn key(h: u64) -> StoreKey {
        StoreKey {
            namespace: (h % 3) as u8,
            kind: 8,
            hash: h.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }

    fn open(
        dir: &Path,
        clock: &Arc<ManualClock>,
        salvage: bool,
    ) -> Result<(Durable, Recovery), PersistError> {
        Durable::open(dir, &config(), &persist(), clock.clone(), salvage)
    }

    fn load(d: &Durable, n: u64) -> Vec<WindowCounts> {
        d.store().lookup_many(&(0..n).map(key).collect::<Vec<_>>())
    }

    fn write_some(d: &Durable, clock: &ManualClock, n: u64) {
        for i in 0..n {
            clock.advance(37);
            d.store().record_many(&[
                Increment::one(key(i % 50), Counter::Seen),
                Increment::one(key(i % 7), Counter::Spam),
            ]);
            if i % 10 == 0 {
                d.store()
                    .increment_unique(key(1_000 + i % 13), key(2_000), 86_400);
            }
        }
    }

    #[test]
    fn wal_replay_restores_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        write_some(&d, &clock, 500);
        d.sync().unwrap();
        let before = load(&d, 50);
        let unique = d.store().lookup_many(&[key(2_000)]);
        drop(d);
        let (d, recovery) = open(dir.path(), &clock, false).unwrap();
        assert!(recovery.wal_records > 0);
        assert_eq!(load(&d, 50), before);
        assert_eq!(d.store().lookup_many(&[key(2_000)]), unique);
    }

    /// A durable store whose flusher would write only within the hour: what reaches the file
    /// meanwhile is what `commit` wrote.
    fn open_commit_only(dir: &Path, clock: &Arc<ManualClock>) -> Durable {
        let slow = PersistConfig {
            flush_ms: 3_600_000,
            ..persist()
        };
        Durable::open(dir, &config(), &slow, clock.clone(), false)
            .unwrap()
            .0
    }

    /// As a killed process: no flush, no final sync, no snapshot (the flusher thread leaks).
    fn kill(d: Durable) {
        std::mem::forget(d);
    }

    #[test]
    fn committed_increments_are_in_the_file_without_a_flush_or_drop() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let d = open_commit_only(dir.path(), &clock);
        write_some(&d, &clock, 200);
        let before = load(&d, 50);
        d.committer().commit().unwrap();
        kill(d);
        let (d2, recovery) = open(dir.path(), &clock, false).unwrap();
        assert!(recovery.wal_records > 0);
        assert_eq!(load(&d2, 50), before);
    }

    #[test]
    fn commits_waiting_together_share_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let d = open_commit_only(dir.path(), &clock);
        let callers = 8;
        // Hold the WAL as a write in progress would; the callers queue behind it.
        let held = d.wal.lock();
        let threads: Vec<_> = (0..callers)
            .map(|i| {
                let (store, committer) = (d.store().clone(), d.committer());
                std::thread::spawn(move || {
                    store.record_many(&[Increment::one(key(i), Counter::Complaint)]);
                    committer.commit().unwrap();
                })
            })
            .collect();
        while d.committer().counts().0 < callers {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(d.committer().counts(), (callers, 1), "one write for all");
        kill(d);
        let (d2, _) = open(dir.path(), &clock, false).unwrap();
        for (i, c) in load(&d2, callers).iter().enumerate() {
            let last = c.windows.len() - 1;
            assert_eq!(c.windows[last][Counter::Complaint as usize], 1, "key {i}");
        }
    }

    #[test]
    fn snapshot_then_wal_restores_without_double_counting() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        write_some(&d, &clock, 300);
        d.snapshot().unwrap();
        write_some(&d, &clock, 200);
        d.sync().unwrap();
        let before = load(&d, 50);
        drop(d);
        let (d, recovery) = open(dir.path(), &clock, false).unwrap();
        assert!(recovery.snapshot.is_some());
        assert!(recovery.snapshot_keys > 0);
        assert_eq!(load(&d, 50), before);
        // Only the newest snapshot and the WALs after it remain.
        assert_eq!(list(dir.path(), "snapshot-", ".bin").unwrap().len(), 1);
        d.close().unwrap();
        let (d, recovery) = open(dir.path(), &clock, false).unwrap();
        assert_eq!(recovery.wal_records, 0, "close wrote a final snapshot");
        assert_eq!(load(&d, 50), before);
    }

    #[test]
    fn torn_tail_is_cut_off_with_what_was_synced_kept() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        write_some(&d, &clock, 100);
        d.sync().unwrap();
        let before = load(&d, 50);
        drop(d);
        let (_, wal) = list(dir.path(), "wal-", ".log").unwrap().pop().unwrap();
        let mut f = OpenOptions::new().append(true).open(&wal).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 5]).unwrap(); // a record cut short
        drop(f);
        let (d, recovery) = open(dir.path(), &clock, false).unwrap();
        assert!(recovery.truncated_tail);
        assert_eq!(load(&d, 50), before);
    }

    #[test]
    fn corruption_inside_a_wal_stops_startup_unless_salvaging() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        write_some(&d, &clock, 200);
        d.sync().unwrap();
        drop(d);
        let wals = list(dir.path(), "wal-", ".log").unwrap();
        let (_, wal) = wals
            .iter()
            .find(|(_, p)| fs::metadata(p).unwrap().len() > 1_000)
            .unwrap();
        let mut data = fs::read(wal).unwrap();
        let middle = data.len() / 2;
        data[middle] ^= 0xff;
        fs::write(wal, &data).unwrap();
        let err = open(dir.path(), &clock, false).err().expect("refused");
        let msg = err.to_string();
        assert!(
            msg.contains(&wal.display().to_string()) && msg.contains("at byte"),
            "{msg}"
        );
        let (_, recovery) = open(dir.path(), &clock, true).unwrap();
        assert_eq!(recovery.moved_aside, vec![wal.clone()]);
        assert!(wal.with_extension("corrupt").exists());
    }

    #[test]
    fn damaged_snapshot_is_refused_and_salvage_falls_back() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        write_some(&d, &clock, 100);
        let snap = d.snapshot().unwrap();
        drop(d);
        let mut data = fs::read(&snap).unwrap();
        let n = data.len();
        data.truncate(n - 10); // incomplete: no valid end marker
        fs::write(&snap, &data).unwrap();
        let err = open(dir.path(), &clock, false).err().expect("refused");
        assert!(matches!(err, PersistError::Corrupt { .. }), "{err}");
        let (_, recovery) = open(dir.path(), &clock, true).unwrap();
        assert_eq!(recovery.moved_aside, vec![snap]);
    }

    #[test]
    fn a_different_layout_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        write_some(&d, &clock, 10);
        d.snapshot().unwrap();
        drop(d);
        let other = StoreConfig {
            resolutions: vec![Resolution {
                bucket_secs: 60,
                keep_secs: 3_600,
            }],
            ..config()
        };
        let err = Durable::open(dir.path(), &other, &persist(), clock.clone(), false)
            .err()
            .expect("refused");
        assert!(matches!(err, PersistError::Incompatible { .. }), "{err}");
        assert!(err.to_string().contains("resolutions"), "{err}");
    }

    #[test]
    fn snapshots_during_writes_lose_and_double_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        let d = Arc::new(d);
        let writer = {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..40_000u64 {
                    d.store().record_many(&[
                        Increment::one(key(i % 200), Counter::Seen),
                        Increment::one(key(i % 11), Counter::Ham),
                    ]);
                }
            })
        };
        for _ in 0..5 {
            d.snapshot().unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        writer.join().unwrap();
        d.sync().unwrap();
        let before = load(&d, 200);
        let total: u64 = before.iter().map(|w| w.windows[4][0]).sum();
        assert_eq!(total, 40_000);
        drop(Arc::try_unwrap(d).ok().expect("sole owner"));
        let (d, _) = open(dir.path(), &clock, false).unwrap();
        assert_eq!(load(&d, 200), before);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

            /// Replaying the WAL (after any snapshot) gives the same state as the live store,
            /// whatever the interleaving of writes, time steps and snapshots.
            #[test]
            fn replay_equals_live(
                ops in proptest::collection::vec((0u8..4, 0u64..64, 0usize..5, 0u64..20_000), 1..150),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let clock = Arc::new(ManualClock::new(T0));
                let (d, _) = open(dir.path(), &clock, false).unwrap();
                for (op, k, c, dt) in &ops {
                    match op {
                        0 | 1 => d.store().record_many(&[Increment::one(key(*k), Counter::ALL[*c])]),
                        2 => clock.advance(*dt),
                        _ => {
                            if *dt % 5 == 0 {
                                d.snapshot().unwrap();
                            } else {
                                d.store().increment_unique(key(100 + k), key(999), 86_400);
                            }
                        }
                    }
                }
                d.sync().unwrap();
                let keys: Vec<_> = (0..64).map(key).chain([key(999)]).collect();
                let live = d.store().lookup_many(&keys);
                let timelines: Vec<_> = keys.iter().map(|k| d.store().timeline(k)).collect();
                drop(d);
                let (d, _) = open(dir.path(), &clock, false).unwrap();
                prop_assert_eq!(d.store().lookup_many(&keys), live);
                let replayed: Vec<_> = keys.iter().map(|k| d.store().timeline(k)).collect();
                prop_assert_eq!(replayed, timelines);
            }
        }
    }
}
