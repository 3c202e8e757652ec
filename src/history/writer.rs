//! The history's writer thread: batches the records the listeners send, appends each batch to
//! the current segment, rotates segments by size and age, and deletes the oldest ones past
//! `max_bytes` or `keep_days`.
//!
//! A batch is written when it holds `batch_records` records or `flush_ms` after its first
//! record, whichever comes first; the file is fsynced at most once a second (a killed process
//! loses nothing written; only a crashed OS may lose the last second). Each start opens a new
//! segment, so a segment torn by a kill is never appended to.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::segment::{encode_batch, segment_header};
use super::{now_us, HistoryConfig, Record, Stats};

/// File name ending of segments.
pub const SEGMENT_EXT: &str = "hseg";
/// How often retention runs besides after each rotation.
const RETENTION_EVERY: Duration = Duration::from_secs(60);
/// Most often the segment is fsynced.
const SYNC_EVERY: Duration = Duration::from_secs(1);
/// How long the writer sleeps between takes while a batch is open (a flush or stop waits this
/// long at most before it is seen).
const COLLECT: Duration = Duration::from_millis(25);

/// What the writer thread receives.
#[derive(Debug)]
pub enum Msg {
    Record(Box<Record>),
    /// Write the collected batch, fsync, then answer.
    Flush(Sender<()>),
    /// Write the collected batch, fsync, and end.
    Stop,
}

/// The running writer; closing it (or dropping it) writes the last batch and joins the thread.
pub struct Writer {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn spawn(
        dir: PathBuf,
        config: HistoryConfig,
        rx: Receiver<Msg>,
        tx: Sender<Msg>,
        stats: Arc<Stats>,
    ) -> std::io::Result<Writer> {
        let mut state = State {
            dir,
            config,
            stats,
            current: None,
            last_sync: Instant::now(),
            last_retention: Instant::now(),
        };
        state.retention();
        let thread = std::thread::Builder::new()
            .name("shrike-history".into())
            .spawn(move || state.run(&rx))?;
        Ok(Writer {
            tx,
            thread: Some(thread),
        })
    }

    /// Writes what is collected and stops the thread (blocking).
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = self.tx.send(Msg::Stop);
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Current {
    file: File,
    path: PathBuf,
    bytes: u64,
    opened: Instant,
    dirty: bool,
}

struct State {
    dir: PathBuf,
    config: HistoryConfig,
    stats: Arc<Stats>,
    current: Option<Current>,
    last_sync: Instant,
    last_retention: Instant,
}

impl State {
    fn run(mut self, rx: &Receiver<Msg>) {
        let flush_every = Duration::from_millis(self.config.flush_ms.clamp(1, 1000));
        let mut batch: Vec<Record> = Vec::new();
        let mut deadline: Option<Instant> = None;
        loop {
            let wait = deadline.map_or(SYNC_EVERY, |d| d.saturating_duration_since(Instant::now()));
            let msg = match rx.recv_timeout(wait) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Disconnected) => Msg::Stop,
                Err(RecvTimeoutError::Timeout) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        self.write(&mut batch);
                        deadline = None;
                    }
                    self.housekeeping();
                    continue;
                }
            };
            if self.take(msg, &mut batch, &mut deadline, flush_every) {
                return;
            }
            // While a batch is open the writer sleeps and then takes what queued meanwhile,
            // instead of waiting in `recv`: a receiver blocked in `recv` must be woken by each
            // send (a futex call and a context switch on the listener's thread, for every
            // message), a sleeping one costs the senders nothing.
            while let Some(d) = deadline {
                std::thread::sleep(COLLECT.min(d.saturating_duration_since(Instant::now())));
                let mut stop = false;
                for msg in rx.try_iter() {
                    stop = self.take(msg, &mut batch, &mut deadline, flush_every);
                    if stop {
                        break;
                    }
                }
                if stop {
                    return;
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    self.write(&mut batch);
                    deadline = None;
                }
                // Under steady load `recv` never times out: sync and retention are due here too.
                self.housekeeping();
            }
        }
    }

    /// Handles one message; true when the writer is to stop (its last batch written).
    fn take(
        &mut self,
        msg: Msg,
        batch: &mut Vec<Record>,
        deadline: &mut Option<Instant>,
        flush_every: Duration,
    ) -> bool {
        match msg {
            Msg::Record(r) => {
                if batch.is_empty() {
                    *deadline = Some(Instant::now() + flush_every);
                }
                batch.push(*r);
                if batch.len() >= self.config.batch_records {
                    self.write(batch);
                    *deadline = None;
                }
                false
            }
            Msg::Flush(ack) => {
                self.write(batch);
                *deadline = None;
                self.sync();
                let _ = ack.send(());
                false
            }
            Msg::Stop => {
                self.write(batch);
                self.sync();
                true
            }
        }
    }

    /// Appends the batch (emptied) to the current segment, rotating first when it is due.
    fn write(&mut self, batch: &mut Vec<Record>) {
        if batch.is_empty() {
            return;
        }
        // Records come from many threads: newest-first reading wants them in time order.
        batch.sort_by_key(|r| r.time_us);
        let bytes = encode_batch(batch);
        let n = batch.len() as u64;
        batch.clear();
        if self.rotation_due() {
            self.rotate();
        }
        let result = match self.current.as_mut() {
            Some(c) => c.file.write_all(&bytes).map(|()| {
                c.bytes += bytes.len() as u64;
                c.dirty = true;
            }),
            None => Err(std::io::Error::other("no segment open")),
        };
        match result {
            Ok(()) => {
                self.stats.written.fetch_add(n, Relaxed);
                self.stats.bytes.fetch_add(bytes.len() as u64, Relaxed);
            }
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Relaxed);
                tracing::error!(error = %e, dir = %self.dir.display(), records = n, "history batch not written");
                // Cut the partial batch off and keep the segment (a full disk would otherwise
                // leave a new, empty segment behind every second); if even that fails, start a
                // new segment next time.
                if let Some(c) = self.current.as_mut() {
                    if c.file.set_len(c.bytes).is_err() {
                        self.current = None;
                    }
                }
            }
        }
        if self.last_sync.elapsed() >= SYNC_EVERY {
            self.sync();
        }
    }

    fn rotation_due(&self) -> bool {
        match &self.current {
            None => true,
            Some(c) => {
                c.bytes >= self.config.segment_bytes
                    || c.opened.elapsed() >= Duration::from_secs(self.config.segment_secs)
            }
        }
    }

    fn rotate(&mut self) {
        self.sync();
        self.current = None;
        match open_segment(&self.dir) {
            Ok((file, path)) => {
                self.current = Some(Current {
                    file,
                    path,
                    bytes: super::segment::HEADER_LEN as u64,
                    opened: Instant::now(),
                    dirty: true,
                });
            }
            Err(e) => {
                tracing::error!(error = %e, dir = %self.dir.display(), "cannot start a history segment");
            }
        }
        self.retention();
    }

    fn sync(&mut self) {
        self.last_sync = Instant::now();
        if let Some(c) = self.current.as_mut().filter(|c| c.dirty) {
            c.dirty = false;
            if let Err(e) = c.file.sync_data() {
                tracing::warn!(error = %e, path = %c.path.display(), "history fsync failed");
            }
        }
    }

    fn housekeeping(&mut self) {
        if self.last_sync.elapsed() >= SYNC_EVERY {
            self.sync();
        }
        if self.last_retention.elapsed() >= RETENTION_EVERY {
            self.retention();
        }
    }

    fn retention(&mut self) {
        self.last_retention = Instant::now();
        let current = self.current.as_ref().map(|c| (c.path.clone(), c.bytes));
        // Room for the current segment to grow to its full size: the total stays within
        // max_bytes (give or take the batch that crosses segment_bytes).
        let limit = self
            .config
            .max_bytes
            .saturating_sub(self.config.segment_bytes)
            + current.as_ref().map_or(0, |c| c.1);
        let current = current.map(|c| c.0);
        match retain(
            &self.dir,
            limit,
            self.config.keep_days,
            SystemTime::now(),
            current.as_deref(),
        ) {
            Ok(kept) => {
                self.stats.bytes.store(kept.bytes, Relaxed);
                self.stats.segments.store(kept.segments, Relaxed);
                if kept.deleted > 0 {
                    tracing::info!(
                        deleted = kept.deleted,
                        kept = kept.segments,
                        bytes = kept.bytes,
                        "old history segments deleted"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, dir = %self.dir.display(), "history retention failed")
            }
        }
    }
}

/// Creates a new segment named by the time now (a microsecond later when taken).
fn open_segment(dir: &Path) -> std::io::Result<(File, PathBuf)> {
    let mut t = now_us();
    loop {
        let path = dir.join(format!("{t:020}.{SEGMENT_EXT}"));
        match OpenOptions::new().append(true).create_new(true).open(&path) {
            Ok(mut file) => {
                file.write_all(&segment_header())?;
                return Ok((file, path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => t += 1,
            Err(e) => return Err(e),
        }
    }
}

/// A segment on disk.
#[derive(Debug, Clone)]
pub struct SegmentFile {
    pub path: PathBuf,
    /// The time it was started (its name), microseconds.
    pub start_us: i64,
    pub bytes: u64,
    /// Last written.
    pub modified: SystemTime,
}

/// The segments of a history directory, oldest first.
pub fn segments(dir: &Path) -> std::io::Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(SEGMENT_EXT) {
            continue;
        }
        let Some(start_us) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<i64>().ok())
        else {
            continue;
        };
        let meta = entry.metadata()?;
        out.push(SegmentFile {
            path,
            start_us,
            bytes: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        });
    }
    out.sort_by_key(|s| s.start_us);
    Ok(out)
}

/// What retention left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    pub segments: u64,
    pub bytes: u64,
    pub deleted: u64,
}

/// Deletes the oldest segments until the rest hold at most `max_bytes`, and every segment last
/// written more than `keep_days` before `now` (0: no age limit). `current` is never deleted.
pub fn retain(
    dir: &Path,
    max_bytes: u64,
    keep_days: u64,
    now: SystemTime,
    current: Option<&Path>,
) -> std::io::Result<Kept> {
    let all = segments(dir)?;
    let mut total: u64 = all.iter().map(|s| s.bytes).sum();
    let max_age = Duration::from_secs(keep_days.saturating_mul(86_400));
    let mut deleted = 0;
    let mut kept = 0;
    for s in &all {
        let is_current = current == Some(s.path.as_path());
        let too_old = keep_days > 0
            && now
                .duration_since(s.modified)
                .is_ok_and(|age| age > max_age);
        if !is_current && (total > max_bytes || too_old) {
            match std::fs::remove_file(&s.path) {
                Ok(()) => {
                    total -= s.bytes;
                    deleted += 1;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    total -= s.bytes;
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        kept += 1;
    }
    Ok(Kept {
        segments: kept,
        bytes: total,
        deleted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::segment::tests::sample;

    fn make(dir: &Path, start_us: i64, bytes: usize, age_days: u64) -> PathBuf {
        let path = dir.join(format!("{start_us:020}.{SEGMENT_EXT}"));
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        let f = File::options().write(true).open(&path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age_days * 86_400))
            .unwrap();
        path
    }

    #[test]
    fn retention_by_bytes_deletes_the_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..5).map(|i| make(dir.path(), 1000 + i, 100, 0)).collect();
        std::fs::write(dir.path().join("key"), [0u8; 32]).unwrap();
        let kept = retain(dir.path(), 250, 30, SystemTime::now(), Some(&paths[4])).unwrap();
        assert_eq!(
            kept,
            Kept {
                segments: 2,
                bytes: 200,
                deleted: 3
            }
        );
        let left: Vec<i64> = segments(dir.path())
            .unwrap()
            .iter()
            .map(|s| s.start_us)
            .collect();
        assert_eq!(left, vec![1003, 1004]);
        assert!(dir.path().join("key").exists(), "only segments are deleted");
        // The current segment stays even when it alone is over the bound.
        let kept = retain(dir.path(), 50, 30, SystemTime::now(), Some(&paths[4])).unwrap();
        assert_eq!(kept.segments, 1);
        assert!(paths[4].exists());
    }

    #[test]
    fn retention_by_days() {
        let dir = tempfile::tempdir().unwrap();
        let old = make(dir.path(), 1, 10, 40);
        let older = make(dir.path(), 0, 10, 45);
        let recent = make(dir.path(), 2, 10, 29);
        let kept = retain(dir.path(), 1 << 30, 30, SystemTime::now(), None).unwrap();
        assert_eq!(kept.deleted, 2);
        assert!(!old.exists() && !older.exists() && recent.exists());
        // keep_days = 0: no age limit.
        let ancient = make(dir.path(), 3, 10, 4000);
        retain(dir.path(), 1 << 30, 0, SystemTime::now(), None).unwrap();
        assert!(ancient.exists());
    }

    #[test]
    fn writer_batches_rotates_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let config = HistoryConfig {
            segment_bytes: 64 << 10,
            max_bytes: 256 << 10,
            batch_records: 100,
            ..HistoryConfig::default()
        };
        let (recorder, writer) = crate::history::open(dir.path(), &config).unwrap();
        let writer = writer.unwrap();
        // Subjects that do not compress, so segments fill.
        let mut x = 1u64;
        for i in 0..6000 {
            let mut r = sample(i);
            r.subject = Some(format!(
                "{:016x}{:016x}",
                crate::testing::xorshift(&mut x),
                crate::testing::xorshift(&mut x)
            ));
            recorder.record(r);
            if i % 1000 == 999 {
                recorder.flush();
            }
        }
        recorder.flush();
        let stats = recorder.stats().unwrap();
        assert_eq!(
            stats.written.load(Relaxed) + stats.dropped.load(Relaxed),
            6000
        );
        writer.close();
        let hist = dir.path().join(crate::history::DIR);
        let segs = segments(&hist).unwrap();
        assert!(segs.len() >= 2, "rotated: {}", segs.len());
        let total: u64 = segs.iter().map(|s| s.bytes).sum();
        // Within max_bytes, give or take the batch that crossed segment_bytes.
        assert!(total <= (256 + 16) << 10, "bounded: {total}");
        // What is left reads back, newest records last, each batch in time order.
        let mut last = 0;
        let mut n = 0;
        for s in &segs {
            let (records, scan) =
                crate::history::segment::read_all(&std::fs::read(&s.path).unwrap());
            assert_eq!(scan.skipped_bytes, 0);
            for r in records {
                assert!(r.time_us >= last);
                last = r.time_us;
                n += 1;
            }
        }
        assert!(n > 0 && n < 6000, "{n}");
    }

    #[test]
    fn disabled_history_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let config = HistoryConfig {
            enabled: false,
            ..HistoryConfig::default()
        };
        let (recorder, writer) = crate::history::open(dir.path(), &config).unwrap();
        assert!(writer.is_none());
        recorder.record(sample(1));
        recorder.flush();
        assert!(recorder.stats().is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let config = HistoryConfig {
            queue: 1,
            ..HistoryConfig::default()
        };
        let (recorder, writer) = crate::history::open(dir.path(), &config).unwrap();
        for i in 0..10_000 {
            recorder.record(sample(i));
        }
        recorder.flush();
        let s = recorder.stats().unwrap();
        let (written, dropped) = (s.written.load(Relaxed), s.dropped.load(Relaxed));
        assert_eq!(written + dropped, 10_000);
        assert!(
            dropped > 0,
            "a queue of one cannot keep up with a tight loop"
        );
        drop(writer);
    }
}
