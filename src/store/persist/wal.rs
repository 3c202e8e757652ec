//! The WAL's writing side: the current WAL file (`WalWriter`), the flusher thread that moves
//! the store's buffered records into it, fsyncs by policy and takes the periodic snapshots,
//! and group commit (`Committer`).
//!
//! A failed write keeps what it could not write and writes it first next time, so the file is
//! always a prefix of the records taken from the store: a kill leaves at most a torn last
//! record (cut at startup), never a gap. Records are given up only past `MAX_PENDING` (a disk
//! full for long under load), and after a failed fsync the file's recent pages may not be on
//! disk whatever later fsyncs say (Linux reports a writeback error once). Either way the WAL
//! no longer holds everything the store does: commits fail until a snapshot, which holds the
//! whole store, has been written.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::format::WAL_MAGIC;
use super::health::{Part, PersistHealth};
use super::{disk, io_err, snapshot, store_header, FsyncPolicy, PersistConfig, PersistError};
use crate::store::Store;

pub(super) fn wal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:016x}.log"))
}

/// The most a WAL keeps in memory while its writes fail (~50,000 messages' records); past it
/// the records are given up and a snapshot has to make up for them.
const MAX_PENDING: usize = 64 << 20;

/// The WAL file being appended to.
pub(super) struct WalWriter {
    pub(super) dir: PathBuf,
    pub(super) generation: u64,
    path: PathBuf,
    file: File,
    /// Records taken from the store that the file does not have yet (a write that failed part
    /// way, and what came after it).
    pending: Vec<u8>,
    /// `MAX_PENDING` (a test sets less).
    pub(super) max_pending: usize,
    /// The file's length, and its length when it last ended on a whole record.
    len: u64,
    header_len: u64,
    whole: u64,
    /// The file has to be cut back to this length before anything is appended (records given
    /// up after part of them was written).
    cut_to: Option<u64>,
    /// The newest WAL generation that lacks records the store holds (given up, or written
    /// before a failed fsync): until a snapshot covers it, nothing is acknowledged.
    pub(super) unsaved: Option<u64>,
    pub(super) health: Arc<PersistHealth>,
    last_sync: Instant,
    dirty: bool,
}

impl WalWriter {
    /// Starts WAL `generation`. A file of that name holding no record (a rotation that failed
    /// after creating it) is started again; one with records is never overwritten.
    pub(super) fn create(
        dir: &Path,
        generation: u64,
        store: &Store,
        health: Arc<PersistHealth>,
    ) -> Result<WalWriter, PersistError> {
        let path = wal_path(dir, generation);
        let header = store_header(WAL_MAGIC, store);
        let header_only =
            |path: &Path| std::fs::metadata(path).is_ok_and(|m| m.len() <= header.len() as u64);
        let result = (|| {
            let mut file = match disk::create_new_append(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && header_only(&path) => {
                    tracing::warn!(file = %path.display(), "starting again a WAL a failed rotation left empty");
                    disk::remove(&path)?;
                    disk::create_new_append(&path)?
                }
                other => other?,
            };
            disk::write_all(&mut file, &path, &header)?;
            disk::sync(&file, &path, true)?;
            disk::sync_dir(dir)?;
            Ok(file)
        })();
        let file = match result {
            Ok(file) => file,
            Err(e) => {
                // Best effort: a header-only file left here would be started again anyway.
                if header_only(&path) {
                    let _ = disk::remove(&path);
                }
                return Err(io_err(&path)(e));
            }
        };
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            generation,
            path,
            file,
            pending: Vec::new(),
            max_pending: MAX_PENDING,
            len: header.len() as u64,
            header_len: header.len() as u64,
            whole: header.len() as u64,
            cut_to: None,
            unsaved: None,
            health,
            last_sync: Instant::now(),
            dirty: false,
        })
    }

    /// The next WAL, taking over what this one has not saved.
    pub(super) fn rotate(&self, store: &Store) -> Result<WalWriter, PersistError> {
        let mut next =
            WalWriter::create(&self.dir, self.generation + 1, store, self.health.clone())?;
        next.unsaved = self.unsaved;
        next.max_pending = self.max_pending;
        Ok(next)
    }

    /// Moves the store's pending WAL records into the file (not yet fsynced). What a failed
    /// write leaves is kept, in order, for the next flush.
    pub(super) fn flush(&mut self, store: &Store) -> Result<(), PersistError> {
        let result = self.write_out(store).map_err(io_err(&self.path));
        match &result {
            Err(e) => self.health.failed(Part::Wal, e),
            Ok(()) if self.unsaved.is_none() => self.health.ok(Part::Wal),
            Ok(()) => {}
        }
        result
    }

    fn write_out(&mut self, store: &Store) -> std::io::Result<()> {
        let mut result = self.cut();
        store.drain_logs(|bytes| {
            if result.is_ok() && self.pending.is_empty() {
                // The common case: straight from the store's buffer, no copy.
                let (done, r) = disk::write(&mut self.file, &self.path, bytes);
                self.wrote(done);
                if r.is_err() {
                    self.pending.extend_from_slice(&bytes[done..]);
                }
                result = r;
            } else {
                self.pending.extend_from_slice(bytes);
            }
        });
        if result.is_ok() && !self.pending.is_empty() {
            let (done, r) = disk::write(&mut self.file, &self.path, &self.pending);
            self.wrote(done);
            self.pending.drain(..done);
            result = r;
        }
        if self.pending.is_empty() {
            self.whole = self.len;
        } else if self.pending.len() > self.max_pending {
            tracing::error!(
                file = %self.path.display(),
                bytes = self.pending.len(),
                "WAL writes failing for too long: records given up until a snapshot is written"
            );
            self.pending = Vec::new();
            self.unsaved = Some(self.generation);
            // The file may end inside a record given up: nothing is appended after it until
            // it is cut back to the last whole one.
            self.cut_to = Some(self.whole);
        }
        result
    }

    fn wrote(&mut self, bytes: usize) {
        if bytes > 0 {
            self.len += bytes as u64;
            self.dirty = true;
        }
    }

    /// Cuts the file back to `cut_to`, if due.
    fn cut(&mut self) -> std::io::Result<()> {
        if let Some(len) = self.cut_to {
            disk::truncate(&self.file, &self.path, len)?;
            self.len = len;
            self.whole = len;
            self.cut_to = None;
        }
        Ok(())
    }

    pub(super) fn sync(&mut self) -> Result<(), PersistError> {
        if self.dirty {
            if let Err(e) = disk::sync(&self.file, &self.path, false) {
                // What was written since the last good fsync may never reach the disk, and a
                // later fsync would not say so.
                self.unsaved = Some(self.generation);
                let e = io_err(&self.path)(e);
                self.health.failed(Part::Wal, &e);
                return Err(e);
            }
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Whether nothing was appended after the header, and nothing is waiting to be or had to
    /// be given up.
    pub(super) fn holds_no_record(&self) -> bool {
        self.len == self.header_len
            && self.pending.is_empty()
            && self.cut_to.is_none()
            && self.unsaved.is_none_or(|g| g < self.generation)
    }

    /// Err while the WAL lacks records the store holds (see `unsaved`).
    pub(super) fn check_saved(&self) -> Result<(), PersistError> {
        match self.unsaved {
            None => Ok(()),
            Some(_) => Err(PersistError::NotSaved),
        }
    }

    /// A snapshot holding everything logged up to WAL `covered` is on disk.
    pub(super) fn saved_up_to(&mut self, covered: u64) {
        if self.unsaved.is_some_and(|g| g <= covered) {
            self.unsaved = None;
            self.health.ok(Part::Wal);
        }
    }
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
    /// Tickets taken (each by a caller whose increments are already in the WAL buffer).
    taken: AtomicU64,
    /// Every ticket up to this one is written.
    written: AtomicU64,
    /// WAL writes done by `commit` (so a test or metric can see the grouping).
    writes: AtomicU64,
}

impl Committer {
    pub(super) fn new(store: Arc<Store>, wal: Arc<Mutex<WalWriter>>, fsync: FsyncPolicy) -> Self {
        Committer {
            store,
            wal,
            fsync,
            tickets: Arc::default(),
        }
    }

    /// Writes (and fsyncs by policy) everything recorded before this call. Fails while the
    /// write (or fsync) fails, and while the WAL lacks records the store holds (a failed fsync,
    /// records given up) until a snapshot has been written.
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
        w.check_saved()?;
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

/// Writes the store's WAL buffer to the file every `flush_ms`, fsyncs by policy, and snapshots
/// every `snapshot_secs`, until `stop`. A failed snapshot, or a WAL that lacks records, is
/// tried again after 1 s, then 2, 4 … up to `snapshot_secs` (at most a minute), so snapshots
/// resume soon after the fault clears without rewriting the store every second meanwhile.
pub(super) fn flusher_loop(
    store: &Store,
    wal: &Mutex<WalWriter>,
    stop: &Stop,
    dir: &Path,
    persist: &PersistConfig,
) {
    let every = Duration::from_secs(persist.snapshot_secs);
    let max_backoff = every.clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut backoff = Duration::from_secs(1);
    let mut last_snapshot = Instant::now();
    let mut retry_at: Option<Instant> = None;
    while !stop.wait(Duration::from_millis(persist.flush_ms.max(1))) {
        let unsaved = {
            let mut w = wal.lock();
            // The writer reports failures (log, /health); the next round tries again.
            let _ = w.flush(store).and_then(|()| match persist.fsync {
                FsyncPolicy::Always => w.sync(),
                FsyncPolicy::EverySecond if w.last_sync.elapsed() >= Duration::from_secs(1) => {
                    w.sync()
                }
                _ => Ok(()),
            });
            w.unsaved.is_some()
        };
        if unsaved && retry_at.is_none() {
            retry_at = Some(Instant::now());
        }
        let due = match retry_at {
            Some(at) => Instant::now() >= at,
            None => persist.snapshot_secs > 0 && last_snapshot.elapsed() >= every,
        };
        if !due {
            continue;
        }
        last_snapshot = Instant::now();
        match snapshot::write(store, wal, dir) {
            Ok(_) => {
                retry_at = None;
                backoff = Duration::from_secs(1);
            }
            Err(_) => {
                retry_at = Some(Instant::now() + backoff);
                backoff = (backoff * 2).min(max_backoff);
            }
        }
    }
}

/// Ends the flusher: at once, not after its sleep.
#[derive(Default)]
pub(super) struct Stop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stop {
    /// Waits up to `timeout` (less on a spurious wake-up); true once `stop` was called.
    fn wait(&self, timeout: Duration) -> bool {
        let mut stopped = self.stopped.lock();
        if !*stopped {
            self.wake.wait_for(&mut stopped, timeout);
        }
        *stopped
    }

    pub(super) fn stop(&self) {
        *self.stopped.lock() = true;
        self.wake.notify_all();
    }
}
