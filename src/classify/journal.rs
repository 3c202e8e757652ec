//! The classifier's learn journal: what a user's learn trained, written before the learn is
//! acknowledged, so a killed process loses no training that a client was told happened. The
//! weights themselves are saved as a snapshot every few minutes (`Classifier::save`); the
//! journal holds the learns since, and startup trains them again over the snapshot.
//!
//! Records are framed `[payload length u32][CRC32C u32][payload]`. A learn's payload is the
//! class, the message key (Message-ID or body hash, which keeps a message from training twice)
//! and the feature hashes. A snapshot writes a marker record with its file's checksum before
//! it replaces the old snapshot, then empties the journal: if the process dies between the two,
//! startup finds the marker, sees that the snapshot on disk is the one it names, and skips the
//! learns before it (they are in the snapshot); if it died before the rename, the marker names
//! no snapshot on disk and every learn is trained again. A torn last record (a write cut by the
//! kill) is dropped; a bad record before the end stops the read there, with a warning.
//!
//! A write that fails (a full disk) keeps what it could not write and writes it first next
//! time, so the file is always a prefix of the records: a torn append is completed, never
//! followed by another record. A learn is acknowledged only once nothing is left over. After a
//! failed fsync what was written since may not be on disk whatever later fsyncs say (Linux
//! reports a writeback error once), so learns are refused until a snapshot has emptied the
//! journal.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Class, Features};
use crate::store::persist::{disk, Part, PersistHealth};

const LEARN: u8 = 1;
const MARKER: u8 = 2;
/// Largest payload read back (a message has a few thousand features at most).
const MAX_PAYLOAD: usize = 1 << 24;
/// The most the journal keeps in memory while its writes fail; past it learns are refused
/// before they train (a bulk learn against a full disk).
const MAX_PENDING: usize = 16 << 20;

/// One learn read back from the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct Learn {
    pub class: Class,
    pub key: Option<u64>,
    pub features: Features,
}

/// The open journal file. Its owner serializes access (the classifier's journal lock).
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// fsync each append (`persist.fsync = "always"`); else `sync` does, once a second.
    sync_each: bool,
    dirty: bool,
    /// Records the file does not have yet: a write that failed part way, and what came after.
    pending: Vec<u8>,
    /// An fsync failed since the journal was last emptied.
    unsynced: bool,
    health: Option<Arc<PersistHealth>>,
}

impl Journal {
    /// Opens (creating) the journal at `path` and returns the learns to train again over the
    /// snapshot whose file checksum is `snapshot_crc` (`None`: no snapshot was loaded).
    pub fn open(
        path: &Path,
        snapshot_crc: Option<u32>,
        sync_each: bool,
    ) -> std::io::Result<(Journal, Vec<Learn>)> {
        let mut bytes = Vec::new();
        if let Ok(mut f) = File::open(path) {
            f.read_to_end(&mut bytes)?;
        }
        let (records, valid) = read_records(&bytes);
        if valid < bytes.len() {
            tracing::warn!(
                journal = %path.display(),
                kept = valid,
                dropped = bytes.len() - valid,
                "classifier journal: cut at its last whole record"
            );
        }
        // Learns after the last marker naming the loaded snapshot; all of them otherwise.
        let start = records
            .iter()
            .rposition(|r| matches!(r, Record::Marker(crc) if Some(*crc) == snapshot_crc))
            .map_or(0, |i| i + 1);
        let learns = records
            .into_iter()
            .skip(start)
            .filter_map(|r| match r {
                Record::Learn(l) => Some(l),
                Record::Marker(_) => None,
            })
            .collect();
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        file.set_len(valid as u64)?;
        let journal = Journal {
            path: path.to_path_buf(),
            file,
            sync_each,
            dirty: false,
            pending: Vec::new(),
            unsynced: false,
            health: None,
        };
        Ok((journal, learns))
    }

    /// Reports failed and recovered writes to `health` (the data directory's).
    pub fn report_to(&mut self, health: Arc<PersistHealth>) {
        self.health = Some(health);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Err when a learn is to be refused before it trains: records left over from failed
    /// writes past `MAX_PENDING`, or a failed fsync not yet made up for by a snapshot.
    pub fn ready(&self) -> std::io::Result<()> {
        if self.unsynced {
            return Err(std::io::Error::other(format!(
                "{}: an fsync failed; learns wait for the classifier's next snapshot",
                self.path.display()
            )));
        }
        if self.pending.len() > MAX_PENDING {
            return Err(std::io::Error::other(format!(
                "{}: {} bytes of learns not written yet",
                self.path.display(),
                self.pending.len()
            )));
        }
        Ok(())
    }

    /// Whether a snapshot is needed before learns are taken again (a failed fsync).
    pub fn needs_snapshot(&self) -> bool {
        self.unsynced
    }

    /// Appends one learn: written to the OS (and fsynced when `sync_each`) when it returns.
    pub fn append(
        &mut self,
        class: Class,
        key: Option<u64>,
        features: &Features,
    ) -> std::io::Result<()> {
        let hashes = features.hashes();
        let mut payload = Vec::with_capacity(14 + hashes.len() * 8);
        payload.push(LEARN);
        payload.push(u8::from(class == Class::Spam));
        match key {
            Some(k) => {
                payload.push(1);
                payload.extend_from_slice(&k.to_le_bytes());
            }
            None => payload.push(0),
        }
        payload.extend_from_slice(&(hashes.len() as u32).to_le_bytes());
        for h in hashes {
            payload.extend_from_slice(&h.to_le_bytes());
        }
        self.write_record(&payload)
    }

    /// Marks the snapshot whose file checksum is `crc` as holding every learn written so far.
    pub fn mark(&mut self, crc: u32) -> std::io::Result<()> {
        let mut payload = vec![MARKER];
        payload.extend_from_slice(&crc.to_le_bytes());
        self.write_record(&payload)?;
        self.sync()
    }

    /// Empties the journal (after a snapshot holds everything in it, and the marker naming that
    /// snapshot is on disk: from then on the records before it are not needed, whatever an
    /// earlier failed fsync lost of them).
    pub fn clear(&mut self) -> std::io::Result<()> {
        self.unsynced = false;
        // `mark` wrote everything before the marker; nothing is left over here.
        self.pending.clear();
        let result = disk::truncate(&self.file, &self.path, 0)
            .and_then(|()| disk::sync(&self.file, &self.path, false));
        self.report(&result);
        result?;
        self.dirty = false;
        Ok(())
    }

    /// Writes what failed writes left over, without an fsync.
    pub fn flush(&mut self) -> std::io::Result<()> {
        let result = self.write_pending();
        self.report(&result);
        result
    }

    /// Writes what failed writes left over and fsyncs what was appended since the last sync.
    pub fn sync(&mut self) -> std::io::Result<()> {
        let result = self.write_pending().and_then(|()| {
            if self.dirty {
                if let Err(e) = disk::sync(&self.file, &self.path, false) {
                    self.unsynced = true;
                    return Err(e);
                }
                self.dirty = false;
            }
            Ok(())
        });
        self.report(&result);
        result
    }

    fn write_record(&mut self, payload: &[u8]) -> std::io::Result<()> {
        self.pending
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.pending
            .extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        self.pending.extend_from_slice(payload);
        if self.sync_each {
            self.sync()
        } else {
            self.flush()
        }
    }

    /// Writes `pending` (one write when it holds one record: a kill leaves a whole record or a
    /// torn tail); what a failure leaves stays for the next time.
    fn write_pending(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let (done, result) = disk::write(&mut self.file, &self.path, &self.pending);
        if done > 0 {
            self.dirty = true;
            self.pending.drain(..done);
        }
        result
    }

    fn report(&self, result: &std::io::Result<()>) {
        let Some(health) = &self.health else {
            return;
        };
        match result {
            Err(e) => health.failed(Part::Journal, &format_args!("{}: {e}", self.path.display())),
            Ok(()) if !self.unsynced => health.ok(Part::Journal),
            Ok(()) => {}
        }
    }
}

enum Record {
    Learn(Learn),
    Marker(u32),
}

/// The records of `bytes` up to the first incomplete or damaged one, and where that is.
fn read_records(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + 8..(at + 8).saturating_add(len)) else {
            break;
        };
        if len > MAX_PAYLOAD || crc32c::crc32c(payload) != crc {
            break;
        }
        let Some(record) = parse(payload) else {
            break;
        };
        records.push(record);
        at += 8 + len;
    }
    (records, at)
}

fn parse(p: &[u8]) -> Option<Record> {
    let u32_at = |i: usize| Some(u32::from_le_bytes(p.get(i..i + 4)?.try_into().ok()?));
    let u64_at = |i: usize| Some(u64::from_le_bytes(p.get(i..i + 8)?.try_into().ok()?));
    match *p.first()? {
        MARKER => Some(Record::Marker(u32_at(1)?)),
        LEARN => {
            let class = if *p.get(1)? == 1 {
                Class::Spam
            } else {
                Class::Ham
            };
            let (key, at) = match *p.get(2)? {
                1 => (Some(u64_at(3)?), 11),
                _ => (None, 3),
            };
            let n = u32_at(at)? as usize;
            let hashes = p.get(at + 4..)?;
            if hashes.len() != n.checked_mul(8)? {
                return None;
            }
            let hashes = hashes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            Some(Record::Learn(Learn {
                class,
                key,
                features: Features::from_hashes(hashes),
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::features::Family;

    fn features(i: u64) -> Features {
        let mut f = Features::default();
        for k in 0..5 {
            f.add(Family::Word, format!("w{i}-{k}").as_bytes());
        }
        f.finish();
        f
    }

    #[test]
    fn learns_come_back_after_the_last_marker_of_the_loaded_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, none) = Journal::open(&path, None, false).unwrap();
        assert!(none.is_empty());
        j.append(Class::Spam, Some(7), &features(1)).unwrap();
        j.mark(0xABCD).unwrap();
        j.append(Class::Ham, None, &features(2)).unwrap();
        drop(j);
        // The snapshot named by the marker is on disk: only the learn after it.
        let (_, after) = Journal::open(&path, Some(0xABCD), false).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].class, Class::Ham);
        assert_eq!(after[0].key, None);
        assert_eq!(after[0].features.hashes(), features(2).hashes());
        // Another snapshot (the marked one never replaced it): every learn.
        let (_, all) = Journal::open(&path, Some(1), false).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].key, Some(7));
    }

    #[test]
    fn a_torn_tail_is_cut_and_appending_goes_on_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, _) = Journal::open(&path, None, false).unwrap();
        j.append(Class::Spam, Some(1), &features(1)).unwrap();
        j.append(Class::Spam, Some(2), &features(2)).unwrap();
        drop(j);
        let len = std::fs::metadata(&path).unwrap().len();
        for cut in [len - 1, len - 20, len - 41] {
            let f = OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(cut).unwrap();
            drop(f);
            let (mut j, learns) = Journal::open(&path, None, false).unwrap();
            assert_eq!(learns.len(), 1, "cut at {cut}");
            j.append(Class::Ham, Some(3), &features(3)).unwrap();
            drop(j);
            let (_, learns) = Journal::open(&path, None, false).unwrap();
            assert_eq!(
                learns.iter().map(|l| l.key).collect::<Vec<_>>(),
                [Some(1), Some(3)]
            );
            // back to two whole learns for the next cut
            let (mut j, _) = Journal::open(&path, None, false).unwrap();
            j.clear().unwrap();
            j.append(Class::Spam, Some(1), &features(1)).unwrap();
            j.append(Class::Spam, Some(2), &features(2)).unwrap();
        }
    }

    /// The keys of the learns in the file, read without opening the journal (which would cut
    /// a torn tail the live one is about to complete).
    fn keys(path: &Path) -> Vec<Option<u64>> {
        let (records, _) = read_records(&std::fs::read(path).unwrap());
        records
            .into_iter()
            .filter_map(|r| match r {
                Record::Learn(l) => Some(l.key),
                Record::Marker(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_torn_append_is_completed_and_the_learns_after_it_are_kept() {
        use crate::store::persist::disk::{inject, Fault};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, _) = Journal::open(&path, None, false).unwrap();
        j.append(Class::Spam, Some(1), &features(1)).unwrap();
        // 10 bytes of the next record reach the file, then the disk is full.
        let fault = inject(dir.path(), Fault::DiskFull { room: 10 });
        assert!(j.append(Class::Spam, Some(2), &features(2)).is_err());
        assert!(j.flush().is_err());
        assert_eq!(keys(&path), [Some(1)], "a torn tail, cut when read");
        drop(fault);
        j.append(Class::Ham, Some(3), &features(3)).unwrap();
        assert_eq!(keys(&path), [Some(1), Some(2), Some(3)]);
        j.append(Class::Ham, Some(4), &features(4)).unwrap();
        drop(j);
        assert_eq!(keys(&path), [Some(1), Some(2), Some(3), Some(4)]);
    }

    #[test]
    fn after_a_failed_fsync_learns_wait_for_a_snapshot() {
        use crate::store::persist::disk::{inject, Fault};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let (mut j, _) = Journal::open(&path, None, true).unwrap();
        let health = Arc::new(PersistHealth::default());
        j.report_to(health.clone());
        j.append(Class::Spam, Some(1), &features(1)).unwrap();
        let fault = inject(dir.path(), Fault::Fsync);
        assert!(j.append(Class::Spam, Some(2), &features(2)).is_err());
        drop(fault);
        assert!(j.needs_snapshot());
        assert!(
            j.ready().is_err(),
            "a later fsync would not tell what was lost"
        );
        assert!(health
            .degraded()
            .unwrap()
            .starts_with("classifier journal: "));
        j.mark(7).unwrap();
        j.clear().unwrap();
        assert!(j.ready().is_ok());
        assert_eq!(health.degraded(), None);
    }

    #[test]
    fn arbitrary_bytes_are_read_without_panicking() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2_000 {
            let n = (crate::testing::xorshift(&mut x) % 64) as usize;
            let bytes: Vec<u8> = (0..n)
                .map(|_| crate::testing::xorshift(&mut x) as u8)
                .collect();
            let (_, valid) = read_records(&bytes);
            assert!(valid <= bytes.len());
        }
    }
}
