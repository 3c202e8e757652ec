//! The byte format of the store's files, apart from any I/O: record framing (payload length,
//! CRC32C of the payload, payload), the header both file kinds start with, WAL records, snapshot
//! shard blocks and the snapshot's end marker. All integers are little-endian; counters are
//! LEB128 varints.
//!
//! ```text
//! frame:       len u32 | crc32c(payload) u32 | payload (len bytes)
//! header:      magic [8] | version u16 | hash algorithm u16 | shards u32 | n u8
//!              | n × (bucket_secs u64, keep_secs u64) | crc32c(all before) u32
//! key:         namespace u8 | kind u16 | hash u64
//! WAL record, version 1:
//!              shard u32 | seq u64 | time u64 | n u32 | n × (key, 5 × varint)
//! WAL record, version 2 (one message's change, over every shard it touched):
//!              time u64 | groups to the payload's end:
//!              (shard varint | seq varint | n varint | n × (key, 5 × varint))
//! shard block: shard u32 | seq u64 | n u32
//!              | n × (key, buckets u16, buckets × (resolution u8, id u32, 5 × varint))
//! snapshot:    header | one framed shard block per shard | end
//! end:         "SHRKEND\0" | keys u64 | crc32c(the 16 bytes before) u32
//! WAL file:    header | framed WAL records (of the header's version)
//! ```
//!
//! Version 2 changed only the WAL record: a version 1 record held one shard's change, so a
//! message touching sixty shards wrote sixty frames, each into its own shard's buffer (a cold
//! cache line apiece); a version 2 record is built in the writing thread's scratch buffer and
//! framed once. Files of either version are read; new files are written as version 2.
//!
//! Decoders check every read against the input's bounds and report damage with a typed error;
//! the caller (`recover.rs`) decides whether it is a torn tail or corruption.

use super::super::{Bucket, Counts, Increment, Resolution, StoreKey, COUNTERS};

/// File format version written.
pub(super) const VERSION: u16 = 2;
/// The oldest version read.
const OLDEST_VERSION: u16 = 1;
/// Hash algorithm of the keys: 1 = XXH3-64 with shrike's shingle seed (shingle::SEED).
pub(super) const HASH_ALGORITHM: u16 = 1;
pub(super) const WAL_MAGIC: &[u8; 8] = b"SHRKWAL\0";
pub(super) const SNAP_MAGIC: &[u8; 8] = b"SHRKSNP\0";
const SNAP_END: &[u8; 8] = b"SHRKEND\0";
/// Length of the snapshot's end marker.
const SNAP_END_LEN: usize = 20;

/// Why a frame could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum FrameError {
    /// Fewer than the 8 bytes of length and checksum remain.
    #[error("truncated record header")]
    TruncatedHeader,
    /// The payload runs past the end of the data.
    #[error("truncated record")]
    Truncated,
    #[error("checksum mismatch")]
    Checksum,
}

impl FrameError {
    /// Whether the data simply ends early (a torn write), rather than holding wrong bytes.
    pub(super) fn is_truncation(self) -> bool {
        matches!(self, FrameError::TruncatedHeader | FrameError::Truncated)
    }
}

/// A frame whose checksum holds but whose payload does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum PayloadError {
    #[error("malformed record")]
    Record,
    #[error("malformed shard block")]
    ShardBlock,
}

/// Why a file's header does not fit this store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum HeaderError {
    /// Not one of shrike's store files at all (corruption, not a different build).
    #[error("not a shrike store file (bad magic)")]
    Magic,
    #[error("format version {0:?}, expected {OLDEST_VERSION} to {VERSION}")]
    Version(Option<u16>),
    #[error("hash algorithm {0:?}, expected {HASH_ALGORITHM}")]
    HashAlgorithm(Option<u16>),
    #[error(
        "written with {found:?} shards, configured {configured} (keep store.shards/max_keys as they were)"
    )]
    Shards { found: Option<u32>, configured: u32 },
    #[error("bucket resolutions differ from the configuration")]
    Resolutions,
}

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

/// `n` increments (key, counters). A damaged count reserves no more than the rest of the
/// payload can hold (an increment takes at least 16 bytes).
fn read_increments(r: &mut Reader<'_>, n: usize) -> Option<Vec<Increment>> {
    let mut increments = Vec::with_capacity(n.min((r.data.len() - r.at) / 16 + 1));
    for _ in 0..n {
        let key = read_key(r)?;
        let counts = read_counts(r)?;
        increments.push(Increment { key, counts });
    }
    Some(increments)
}

/// Appends a framed record: payload length, CRC32C of the payload, payload. The payload is
/// written in place by `write`, then the header is filled in: no intermediate buffer.
fn frame(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    write(out);
    finish_record(&mut out[start..]);
}

/// Reads the frame at `data[at..]`: Ok((payload, next offset)), or what is wrong with it;
/// `None` at the end of the data.
pub(super) fn next_frame(data: &[u8], at: usize) -> Option<Result<(&[u8], usize), FrameError>> {
    if at == data.len() {
        return None;
    }
    let mut r = Reader::new(&data[at..]);
    let (Some(len), Some(crc)) = (r.u32(), r.u32()) else {
        return Some(Err(FrameError::TruncatedHeader));
    };
    let Some(payload) = r.bytes(len as usize) else {
        return Some(Err(FrameError::Truncated));
    };
    if crc32c::crc32c(payload) != crc {
        return Some(Err(FrameError::Checksum));
    }
    Some(Ok((payload, at + 8 + len as usize)))
}

/// Starts a version 2 record at `time` in `out` (the writing thread's scratch buffer): room
/// for the frame's length and checksum, then the time. Groups follow (`encode_group`), then
/// `finish_record` frames it.
pub(crate) fn begin_record(out: &mut Vec<u8>, time: u64) {
    out.clear();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&time.to_le_bytes());
}

/// Appends one shard's group to a record begun by `begin_record` (called under the shard's
/// lock, so that `seq` orders the shard's changes).
pub(crate) fn encode_group<'a>(
    out: &mut Vec<u8>,
    shard: u32,
    seq: u64,
    changes: impl ExactSizeIterator<Item = (&'a StoreKey, &'a Counts)>,
) {
    put_varint(out, u64::from(shard));
    put_varint(out, seq);
    put_varint(out, changes.len() as u64);
    for (key, counts) in changes {
        put_key(out, key);
        put_counts(out, counts);
    }
}

/// Writes the frame's length and checksum into the first 8 bytes of `record` (built by
/// `begin_record` and `encode_group`, or by `frame`); the bytes are then one whole frame.
pub(crate) fn finish_record(record: &mut [u8]) {
    let payload = &record[8..];
    let (len, crc) = (payload.len() as u32, crc32c::crc32c(payload));
    record[..4].copy_from_slice(&len.to_le_bytes());
    record[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes one version 1 record (the tests' fixtures of what older files hold).
#[cfg(test)]
fn encode_record_v1(
    out: &mut Vec<u8>,
    shard: u32,
    seq: u64,
    time: u64,
    increments: &[(StoreKey, Counts)],
) {
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

/// One shard's part of a WAL record: the change, its sequence number in that shard, and the
/// time it was applied at.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct WalRecord {
    pub shard: u32,
    pub seq: u64,
    pub time: u64,
    pub increments: Vec<Increment>,
}

/// Decodes a record of a file of `version`: its groups, one per shard (version 1 records hold
/// one).
pub(super) fn decode_record(version: u16, payload: &[u8]) -> Result<Vec<WalRecord>, PayloadError> {
    if version == 1 {
        return decode_record_v1(payload).map(|record| vec![record]);
    }
    let mut r = Reader::new(payload);
    let records = (|| {
        let time = r.u64()?;
        let mut out = Vec::new();
        while !r.done() {
            let shard = u32::try_from(r.varint()?).ok()?;
            let seq = r.varint()?;
            let n = r.varint()? as usize;
            let increments = read_increments(&mut r, n)?;
            out.push(WalRecord {
                shard,
                seq,
                time,
                increments,
            });
        }
        Some(out)
    })();
    records.ok_or(PayloadError::Record)
}

fn decode_record_v1(payload: &[u8]) -> Result<WalRecord, PayloadError> {
    let mut r = Reader::new(payload);
    let record = (|| {
        let shard = r.u32()?;
        let seq = r.u64()?;
        let time = r.u64()?;
        let n = r.u32()? as usize;
        let increments = read_increments(&mut r, n)?;
        r.done().then_some(WalRecord {
            shard,
            seq,
            time,
            increments,
        })
    })();
    record.ok_or(PayloadError::Record)
}

/// The header both file kinds start with: what the data means.
pub(super) fn header(magic: &[u8; 8], shards: u32, resolutions: &[Resolution]) -> Vec<u8> {
    header_of_version(magic, VERSION, shards, resolutions)
}

fn header_of_version(
    magic: &[u8; 8],
    version: u16,
    shards: u32,
    resolutions: &[Resolution],
) -> Vec<u8> {
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(magic);
    h.extend_from_slice(&version.to_le_bytes());
    h.extend_from_slice(&HASH_ALGORITHM.to_le_bytes());
    h.extend_from_slice(&shards.to_le_bytes());
    h.push(resolutions.len() as u8);
    for r in resolutions {
        h.extend_from_slice(&r.bucket_secs.to_le_bytes());
        h.extend_from_slice(&r.keep_secs.to_le_bytes());
    }
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a file's header against a store of `shards` shards and these resolutions; returns
/// the offset after it and the file's format version.
pub(super) fn check_header(
    data: &[u8],
    magic: &[u8; 8],
    shards: u32,
    resolutions: &[Resolution],
) -> Result<(usize, u16), HeaderError> {
    if data.len() < 8 || &data[..8] != magic {
        return Err(HeaderError::Magic);
    }
    let mut r = Reader::new(&data[8..]);
    let version = r.u16();
    let algorithm = r.u16();
    let found = r.u32();
    let version = match version {
        Some(v) if (OLDEST_VERSION..=VERSION).contains(&v) => v,
        _ => return Err(HeaderError::Version(version)),
    };
    if algorithm != Some(HASH_ALGORITHM) {
        return Err(HeaderError::HashAlgorithm(algorithm));
    }
    if found != Some(shards) {
        return Err(HeaderError::Shards {
            found,
            configured: shards,
        });
    }
    let expected = header_of_version(magic, version, shards, resolutions);
    if data.len() < expected.len() || data[..expected.len()] != expected[..] {
        return Err(HeaderError::Resolutions);
    }
    Ok((expected.len(), version))
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

/// One shard's block of a snapshot.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ShardBlock {
    pub shard: u32,
    pub seq: u64,
    pub entries: Vec<(StoreKey, Vec<Bucket>)>,
}

pub(super) fn decode_shard_block(payload: &[u8]) -> Result<ShardBlock, PayloadError> {
    let mut r = Reader::new(payload);
    let block = (|| {
        let shard = r.u32()?;
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
        r.done().then_some(ShardBlock {
            shard,
            seq,
            entries,
        })
    })();
    block.ok_or(PayloadError::ShardBlock)
}

/// The snapshot's end marker: it holds `keys` keys in all.
pub(super) fn snapshot_end(keys: u64) -> Vec<u8> {
    let mut end = Vec::with_capacity(SNAP_END_LEN);
    end.extend_from_slice(SNAP_END);
    end.extend_from_slice(&keys.to_le_bytes());
    let crc = crc32c::crc32c(&end);
    end.extend_from_slice(&crc.to_le_bytes());
    end
}

/// Whether `rest` (everything after the last shard block) is exactly the end marker of a
/// snapshot of `keys` keys.
pub(super) fn is_snapshot_end(rest: &[u8], keys: u64) -> bool {
    let mut r = Reader::new(rest);
    r.bytes(8) == Some(&SNAP_END[..])
        && r.u64() == Some(keys)
        && r.u32() == Some(crc32c::crc32c(&rest[..16]))
        && r.done()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;

    /// A data directory written by the format's first version (shards = 2, the default
    /// resolutions): a snapshot and the WAL after it. Decoding it must never change.
    const SNAPSHOT: &[u8] =
        include_bytes!("../../../tests/fixtures/store-v1/snapshot-0000000000000001.bin");
    const WAL: &[u8] = include_bytes!("../../../tests/fixtures/store-v1/wal-0000000000000002.log");
    const HEADER_LEN: usize = 53;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn resolutions() -> Vec<Resolution> {
        StoreConfig::default().resolutions
    }

    const K1: StoreKey = StoreKey {
        namespace: 0,
        kind: 8,
        hash: 0x0123_4567_89ab_cdef,
    };
    const K2: StoreKey = StoreKey {
        namespace: 0,
        kind: 8,
        hash: 0xfedc_ba98_7654_3210,
    };
    const K3: StoreKey = StoreKey {
        namespace: 1,
        kind: 300,
        hash: 0x0000_0100_0000_0007,
    };
    const PAIR: StoreKey = StoreKey {
        namespace: 0,
        kind: 71,
        hash: 0xdead_beef,
    };
    const UNIQUE: StoreKey = StoreKey {
        namespace: 0,
        kind: 72,
        hash: 0x0000_0200_0000_0042,
    };

    /// The WAL fixture's second record, framed: shard 1, sequence 3, at 1,700,173,500.
    fn record_bytes() -> Vec<u8> {
        hex("38000000 133ae9f4
             01000000 0300000000000000 bc96566500000000 02000000
             00 0800 efcdab8967452301 01 00 00 00 00
             01 2c01 0700000000010000 00 00 00 01 00")
    }

    #[test]
    fn varints_have_their_exact_bytes() {
        let cases: [(u64, &[u8]); 6] = [
            (0, &[0x00]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ];
        for (v, bytes) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            let mut r = Reader::new(bytes);
            assert_eq!(r.varint(), Some(v));
            assert!(r.done());
            for cut in 0..bytes.len() {
                assert_eq!(
                    Reader::new(&bytes[..cut]).varint(),
                    None,
                    "{v} cut at {cut}"
                );
            }
        }
        // More than ten bytes is no u64.
        assert_eq!(Reader::new(&[0x80; 11]).varint(), None);
    }

    #[test]
    fn a_version_1_wal_record_has_its_exact_bytes_and_decodes_back() {
        let increments = [(K1, [1, 0, 0, 0, 0]), (K3, [0, 0, 0, 1, 0])];
        let mut out = vec![0xaa];
        encode_record_v1(&mut out, 1, 3, 1_700_173_500, &increments);
        assert_eq!(out[0], 0xaa, "appends");
        assert_eq!(out[1..], record_bytes()[..]);
        let (payload, next) = next_frame(&out, 1).unwrap().unwrap();
        assert_eq!(next, out.len());
        assert_eq!(
            decode_record(1, payload),
            Ok(vec![WalRecord {
                shard: 1,
                seq: 3,
                time: 1_700_173_500,
                increments: increments
                    .iter()
                    .map(|&(key, counts)| Increment { key, counts })
                    .collect(),
            }])
        );
    }

    /// A version 2 record of two groups: shard 1 at sequence 3 (K1 and K3), shard 300 at
    /// sequence 128 (PAIR), at 1,700,173,500.
    fn record_v2_payload() -> Vec<u8> {
        hex("bc96566500000000
             01 03 02
             00 0800 efcdab8967452301 01 00 00 00 00
             01 2c01 0700000000010000 00 00 00 01 00
             ac02 8001 01
             00 4700 efbeadde00000000 02 00 00 00 00")
    }

    #[test]
    fn a_version_2_wal_record_has_its_exact_bytes_and_decodes_back() {
        let first = [(K1, [1, 0, 0, 0, 0]), (K3, [0, 0, 0, 1, 0])];
        let second = [(PAIR, [2, 0, 0, 0, 0])];
        let mut out = vec![0xaa; 40];
        begin_record(&mut out, 1_700_173_500);
        encode_group(&mut out, 1, 3, first.iter().map(|(k, c)| (k, c)));
        encode_group(&mut out, 300, 128, second.iter().map(|(k, c)| (k, c)));
        finish_record(&mut out);
        let expected = record_v2_payload();
        assert_eq!(expected.len(), 64);
        assert_eq!(out[..4], 64u32.to_le_bytes(), "length");
        assert_eq!(
            out[4..8],
            crc32c::crc32c(&expected).to_le_bytes(),
            "checksum"
        );
        assert_eq!(out[8..], expected[..], "payload");
        let (payload, next) = next_frame(&out, 0).unwrap().unwrap();
        assert_eq!(next, out.len());
        let inc = |key, counts| Increment { key, counts };
        assert_eq!(
            decode_record(2, payload),
            Ok(vec![
                WalRecord {
                    shard: 1,
                    seq: 3,
                    time: 1_700_173_500,
                    increments: vec![inc(K1, [1, 0, 0, 0, 0]), inc(K3, [0, 0, 0, 1, 0])],
                },
                WalRecord {
                    shard: 300,
                    seq: 128,
                    time: 1_700_173_500,
                    increments: vec![inc(PAIR, [2, 0, 0, 0, 0])],
                },
            ])
        );
        // Cut short or padded, it is malformed, never a partial record (a cut between groups
        // leaves a shorter record whose frame would not have matched its checksum).
        assert_cuts_and_padding_malformed(2, payload, &[8, 43]);
        // A change count far beyond the payload reserves nothing large and fails.
        let mut huge = payload[..10].to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(decode_record(2, &huge), Err(PayloadError::Record));
        // A shard number past u32 is malformed.
        let mut wide = payload[..8].to_vec();
        wide.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x1f, 0x01, 0x00]);
        assert_eq!(decode_record(2, &wide), Err(PayloadError::Record));
    }

    #[test]
    fn the_header_has_its_exact_bytes() {
        let wal = header(WAL_MAGIC, 2, &resolutions());
        let body = hex("5348524b57414c00 0200 0100 02000000 02
             5802000000000000 8051010000000000 8051010000000000 0075120000000000");
        assert_eq!(wal[..HEADER_LEN - 4], body[..]);
        assert_eq!(wal[HEADER_LEN - 4..], crc32c::crc32c(&body).to_le_bytes());
        // The version 1 fixtures differ in the version (and so the checksum) only.
        assert_eq!(wal[10..HEADER_LEN - 4], WAL[10..HEADER_LEN - 4]);
        assert_eq!(&WAL[8..10], &[1, 0]);
        let snap = header(SNAP_MAGIC, 2, &resolutions());
        assert_eq!(snap[10..HEADER_LEN - 4], SNAPSHOT[10..HEADER_LEN - 4]);
        assert_eq!(
            check_header(WAL, WAL_MAGIC, 2, &resolutions()),
            Ok((HEADER_LEN, 1))
        );
        assert_eq!(
            check_header(&wal, WAL_MAGIC, 2, &resolutions()),
            Ok((HEADER_LEN, 2))
        );
    }

    #[test]
    fn a_header_that_does_not_fit_is_refused_with_its_reason() {
        let check =
            |data: &[u8], shards, res: &[Resolution]| check_header(data, WAL_MAGIC, shards, res);
        let res = resolutions();
        assert_eq!(
            check_header(WAL, SNAP_MAGIC, 2, &res),
            Err(HeaderError::Magic)
        );
        for version in [0u8, 3, 9] {
            let mut other = WAL.to_vec();
            other[8] = version;
            assert_eq!(
                check(&other, 2, &res),
                Err(HeaderError::Version(Some(u16::from(version))))
            );
        }
        let mut alg = WAL.to_vec();
        alg[10] = 9;
        assert_eq!(
            check(&alg, 2, &res),
            Err(HeaderError::HashAlgorithm(Some(9)))
        );
        assert_eq!(
            check(WAL, 4, &res),
            Err(HeaderError::Shards {
                found: Some(2),
                configured: 4
            })
        );
        assert_eq!(check(WAL, 2, &res[..1]), Err(HeaderError::Resolutions));
        let mut crc = WAL.to_vec();
        crc[HEADER_LEN - 1] ^= 1;
        assert_eq!(check(&crc, 2, &res), Err(HeaderError::Resolutions));
        // Cut anywhere inside, a header is refused, never read past its end.
        for cut in 0..HEADER_LEN {
            let e = check(&WAL[..cut], 2, &res).unwrap_err();
            let expected = match cut {
                0..=7 => HeaderError::Magic,
                8..=9 => HeaderError::Version(None),
                10..=11 => HeaderError::HashAlgorithm(None),
                12..=15 => HeaderError::Shards {
                    found: None,
                    configured: 2,
                },
                _ => HeaderError::Resolutions,
            };
            assert_eq!(e, expected, "cut at {cut}");
        }
    }

    /// The frames of `data` from `at`: their payloads, then the error that stopped them.
    fn frames(data: &[u8], mut at: usize) -> (Vec<&[u8]>, Option<FrameError>) {
        let mut out = Vec::new();
        while let Some(frame) = next_frame(data, at) {
            match frame {
                Ok((payload, next)) => {
                    out.push(payload);
                    at = next;
                }
                Err(e) => return (out, Some(e)),
            }
        }
        (out, None)
    }

    #[test]
    fn the_wal_fixture_decodes_to_its_records() {
        let (payloads, error) = frames(WAL, HEADER_LEN);
        assert_eq!(error, None);
        let records: Vec<WalRecord> = payloads
            .iter()
            .flat_map(|p| decode_record(1, p).unwrap())
            .collect();
        let one = |key| Increment {
            key,
            counts: [1, 0, 0, 0, 0],
        };
        assert_eq!(
            records,
            [
                WalRecord {
                    shard: 0,
                    seq: 3,
                    time: 1_700_173_500,
                    increments: vec![one(PAIR), one(UNIQUE)],
                },
                WalRecord {
                    shard: 1,
                    seq: 3,
                    time: 1_700_173_500,
                    increments: vec![
                        one(K1),
                        Increment {
                            key: K3,
                            counts: [0, 0, 0, 1, 0]
                        }
                    ],
                },
            ]
        );
        assert_eq!(WAL[WAL.len() - record_bytes().len()..], record_bytes()[..]);
    }

    #[test]
    fn frames_cut_at_every_offset_are_truncations() {
        let body = &WAL[HEADER_LEN..];
        let boundaries = [0, 64, body.len()];
        for cut in 0..=body.len() {
            let (payloads, error) = frames(&body[..cut], 0);
            let whole = boundaries.iter().filter(|b| **b <= cut).count() - 1;
            assert_eq!(payloads.len(), whole, "cut at {cut}");
            if boundaries.contains(&cut) {
                assert_eq!(error, None, "cut at {cut}");
            } else {
                let e = error.unwrap();
                assert!(e.is_truncation(), "cut at {cut}: {e}");
                let into = cut - boundaries[whole];
                let expected = if into < 8 {
                    FrameError::TruncatedHeader
                } else {
                    FrameError::Truncated
                };
                assert_eq!(e, expected, "cut at {cut}");
            }
        }
    }

    #[test]
    fn a_changed_byte_is_a_checksum_error() {
        let frame = record_bytes();
        // Every byte after the length: the checksum itself or the payload.
        for i in 4..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 0x10;
            assert_eq!(
                next_frame(&bad, 0),
                Some(Err(FrameError::Checksum)),
                "byte {i}"
            );
            assert!(!FrameError::Checksum.is_truncation());
        }
        // A longer length runs past the end; a shorter one leaves a payload that fails the sum.
        let mut long = frame.clone();
        long[0] += 1;
        assert_eq!(next_frame(&long, 0), Some(Err(FrameError::Truncated)));
        let mut short = frame.clone();
        short[0] -= 1;
        assert_eq!(next_frame(&short, 0), Some(Err(FrameError::Checksum)));
    }

    /// Every cut of a record's payload (but at `whole_at`, where a shorter record is whole)
    /// and the payload with a byte more are malformed.
    fn assert_cuts_and_padding_malformed(version: u16, payload: &[u8], whole_at: &[usize]) {
        for cut in (0..payload.len()).filter(|c| !whole_at.contains(c)) {
            assert_eq!(
                decode_record(version, &payload[..cut]),
                Err(PayloadError::Record),
                "cut at {cut}"
            );
        }
        let mut padded = payload.to_vec();
        padded.push(0);
        assert_eq!(decode_record(version, &padded), Err(PayloadError::Record));
    }

    #[test]
    fn payloads_cut_short_or_padded_are_malformed() {
        let frame = record_bytes();
        assert_cuts_and_padding_malformed(1, &frame[8..], &[]);
        let (blocks, _) = frames(SNAPSHOT, HEADER_LEN);
        for block in blocks {
            for cut in 0..block.len() {
                assert_eq!(
                    decode_shard_block(&block[..cut]),
                    Err(PayloadError::ShardBlock),
                    "cut at {cut}"
                );
            }
            let mut padded = block.to_vec();
            padded.push(0);
            assert_eq!(decode_shard_block(&padded), Err(PayloadError::ShardBlock));
        }
    }

    #[test]
    fn the_snapshot_fixture_decodes_and_encodes_back_to_its_bytes() {
        let bucket = |id, counts| Bucket {
            resolution: 0,
            id,
            counts,
        };
        let (early, late) = (2_833_333, 2_833_334);
        let expected = [
            ShardBlock {
                shard: 0,
                seq: 2,
                entries: vec![
                    (UNIQUE, vec![bucket(late, [1, 0, 0, 0, 0])]),
                    (K2, vec![bucket(early, [0, 0, 1, 0, 0])]),
                    (PAIR, vec![bucket(late, [1, 0, 0, 0, 0])]),
                ],
            },
            ShardBlock {
                shard: 1,
                seq: 2,
                entries: vec![(
                    K1,
                    vec![
                        bucket(early, [1, 1, 0, 0, 0]),
                        bucket(late, [300, 0, 0, 1, 0]),
                    ],
                )],
            },
        ];
        assert_eq!(
            check_header(SNAPSHOT, SNAP_MAGIC, 2, &resolutions()),
            Ok((HEADER_LEN, 1))
        );
        let mut at = HEADER_LEN;
        let mut encoded = SNAPSHOT[..HEADER_LEN].to_vec();
        for want in &expected {
            let (payload, next) = next_frame(SNAPSHOT, at).unwrap().unwrap();
            let block = decode_shard_block(payload).unwrap();
            assert_eq!(&block, want);
            encode_shard_block(&mut encoded, block.shard, block.seq, &block.entries);
            at = next;
        }
        let end = hex("5348524b454e4400 0400000000000000 a64e52de");
        assert_eq!(snapshot_end(4), end);
        assert!(is_snapshot_end(&SNAPSHOT[at..], 4));
        assert!(!is_snapshot_end(&SNAPSHOT[at..], 5));
        for cut in 0..end.len() {
            assert!(!is_snapshot_end(&end[..cut], 4), "cut at {cut}");
        }
        encoded.extend_from_slice(&end);
        assert_eq!(encoded, SNAPSHOT);
    }
}
