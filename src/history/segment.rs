//! The history's segment format.
//!
//! A segment is a file `history/<start>.hseg`, `<start>` the microsecond Unix time it was
//! started, 20 decimal digits (so names sort by age). It holds a 16-byte header and then
//! batches, appended whole:
//!
//! ```text
//! segment header  "SHRKHIST" | version u32 LE (1) | reserved u32 LE (0)
//! batch           "SHB1" | len u32 | count u32 | min_us i64 | max_us i64 | crc u32 | payload
//! ```
//!
//! All integers little-endian. `len` is the payload's length, `count` its records, `min_us` and
//! `max_us` the range of their times (a query skips a batch outside its range without
//! decompressing it), and `crc` the CRC-32C of the 24 bytes from `len` to `max_us` followed by
//! the payload. The payload is one zstd frame; decompressed:
//!
//! ```text
//! strings   n:varint, then n × (len:varint, UTF-8 bytes)     every distinct string once
//! records   n:varint, base_us:zigzag
//! record    dt:zigzag (time - the time of the record before, or base_us) | kind u8 | flags u8 | ip (4 or 16 bytes, per flags)
//!           listener, queue_id, message_id, helo, rdns, user, sender, from, subject: ref
//!           rcpts: n:varint, n × ref
//!           size:varint | score:zigzag | [required:zigzag, flag 4] | generation:varint
//!           scan_us:varint
//!           symbols: n:varint, n × (name_ref << 1 | shadow):varint, score:zigzag,
//!                    options: m:varint, m × ref
//! ```
//!
//! A `ref` is a varint: 0 for none, else 1 + the string's index. Scores are thousandths.
//! `flags`: 1 an IPv4 address follows, 2 an IPv6 one, 4 a required score is present, 8 a
//! learn of a message already learned (a duplicate; readers that predate it ignore it). The
//! string table makes a batch's repeated values (symbol names, listeners, HELOs, recipients,
//! options) one byte each, and lets a query skip a whole batch when no string of it matches a
//! sender, recipient, symbol, message-id or queue-id filter.
//!
//! Recovery: a reader takes every batch whose header and CRC check out. What is not (a torn
//! tail after a kill, a damaged batch) is skipped: the reader looks for the next `SHB1` whose
//! batch checks out and goes on from there, so one bad batch loses only its own records and a
//! torn segment is read up to its last whole batch. A segment is never appended to after a
//! restart (the writer starts a new one), so a torn tail stays at the end of its file.

use std::net::IpAddr;

use super::{Kind, Record, SymbolRecord};

pub const SEGMENT_MAGIC: &[u8; 8] = b"SHRKHIST";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 16;
pub const BATCH_MAGIC: &[u8; 4] = b"SHB1";
pub const BATCH_HEADER_LEN: usize = 32;
/// A batch larger than this is taken for damage (the writer's batches are far smaller).
pub const MAX_BATCH_BYTES: usize = 256 << 20;
/// Most bytes a batch decompresses to (a batch of the most records the config allows, 16,384,
/// takes a few MiB).
const MAX_PLAIN_BYTES: u64 = 64 << 20;
/// Nor do more records than this fit in one.
const MAX_BATCH_RECORDS: usize = 1 << 22;
/// zstd level of a batch of this many records. A small batch (light traffic) gets level 9: a
/// few bytes less a record for CPU there is plenty of; a large one (a busy daemon: batches fill
/// before the flush interval) level 3, which costs a fraction of the CPU a record and loses
/// little, as large batches compress well anyway (BENCHMARKS.md, "Decision history").
pub fn level_for(records: usize) -> i32 {
    if records <= 1024 {
        9
    } else {
        3
    }
}

/// Why a batch could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("batch payload is not valid zstd: {0}")]
    Zstd(String),
    #[error("batch payload ends early")]
    Short,
    #[error("batch payload is malformed: {0}")]
    Bad(&'static str),
}

/// The segment file header.
pub fn segment_header() -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn milli(v: f64) -> i64 {
    if v.is_finite() {
        (v * 1000.0).round() as i64
    } else {
        0
    }
}

/// Builds a batch's string table.
#[derive(Default)]
struct Strings<'a> {
    index: rustc_hash::FxHashMap<&'a str, u32>,
    list: Vec<&'a str>,
}

impl<'a> Strings<'a> {
    fn add(&mut self, s: &'a str) -> u64 {
        let next = self.list.len() as u32;
        let i = *self.index.entry(s).or_insert_with(|| {
            self.list.push(s);
            next
        });
        u64::from(i) + 1
    }

    fn opt(&mut self, s: &'a Option<String>) -> u64 {
        s.as_deref().map_or(0, |s| self.add(s))
    }
}

/// A record's optional strings, in the order a batch stores them.
fn optional_strings(r: &Record) -> [&Option<String>; 8] {
    [
        &r.queue_id,
        &r.message_id,
        &r.helo,
        &r.rdns,
        &r.user,
        &r.sender,
        &r.from,
        &r.subject,
    ]
}

/// A batch ready to append: header and payload.
pub fn encode_batch(records: &[Record]) -> Vec<u8> {
    encode_batch_at(records, level_for(records.len()))
}

/// [`encode_batch`] at a given zstd level.
pub fn encode_batch_at(records: &[Record], level: i32) -> Vec<u8> {
    let mut strings = Strings::default();
    // The table lists the strings field by field (every subject together, every message-id
    // together, …): zstd finds more in a run of alike strings (6% fewer bytes on the corpus in
    // batches of 100) than in the records' order.
    for r in records {
        strings.add(&r.listener);
    }
    for field in 0..8 {
        for r in records {
            strings.opt(optional_strings(r)[field]);
        }
    }
    for r in records {
        for rcpt in &r.rcpt {
            strings.add(rcpt);
        }
    }
    for r in records {
        for sym in &r.symbols {
            strings.add(&sym.name);
        }
    }
    for r in records {
        for sym in &r.symbols {
            for o in &sym.options {
                strings.add(o);
            }
        }
    }
    let mut body = Vec::with_capacity(records.len() * 96);
    let base = records.iter().map(|r| r.time_us).min().unwrap_or(0);
    let max = records.iter().map(|r| r.time_us).max().unwrap_or(0);
    put_varint(&mut body, records.len() as u64);
    put_varint(&mut body, zigzag(base));
    let mut prev = base;
    for r in records {
        // From the record before (the writer sorts a batch by time: small and positive).
        put_varint(&mut body, zigzag(r.time_us.wrapping_sub(prev)));
        prev = r.time_us;
        body.push(r.kind.code());
        let mut flags = 0u8;
        match r.ip {
            Some(IpAddr::V4(_)) => flags |= 1,
            Some(IpAddr::V6(_)) => flags |= 2,
            None => {}
        }
        if r.required_score.is_some() {
            flags |= 4;
        }
        if r.duplicate {
            flags |= 8;
        }
        body.push(flags);
        match r.ip {
            Some(IpAddr::V4(ip)) => body.extend_from_slice(&ip.octets()),
            Some(IpAddr::V6(ip)) => body.extend_from_slice(&ip.octets()),
            None => {}
        }
        let listener = strings.add(&r.listener);
        put_varint(&mut body, listener);
        for s in optional_strings(r) {
            let i = strings.opt(s);
            put_varint(&mut body, i);
        }
        put_varint(&mut body, r.rcpt.len() as u64);
        for rcpt in &r.rcpt {
            let i = strings.add(rcpt);
            put_varint(&mut body, i);
        }
        put_varint(&mut body, r.size);
        put_varint(&mut body, zigzag(milli(r.score)));
        if let Some(req) = r.required_score {
            put_varint(&mut body, zigzag(milli(req)));
        }
        put_varint(&mut body, r.generation);
        put_varint(&mut body, r.scan_us);
        put_varint(&mut body, r.symbols.len() as u64);
        for s in &r.symbols {
            let name = strings.add(&s.name);
            put_varint(&mut body, (name << 1) | u64::from(s.shadow));
            put_varint(&mut body, zigzag(milli(s.score)));
            put_varint(&mut body, s.options.len() as u64);
            for o in &s.options {
                let i = strings.add(o);
                put_varint(&mut body, i);
            }
        }
    }
    let mut plain = Vec::with_capacity(body.len() + strings.list.len() * 16);
    put_varint(&mut plain, strings.list.len() as u64);
    for s in &strings.list {
        put_varint(&mut plain, s.len() as u64);
        plain.extend_from_slice(s.as_bytes());
    }
    plain.extend_from_slice(&body);
    // Compressing a Vec in memory cannot fail but for allocation; keep the bytes uncompressed
    // would break the format, so an impossible error yields an empty frame of zero records.
    let payload = zstd::bulk::compress(&plain, level).unwrap_or_default();
    let count = if payload.is_empty() { 0 } else { records.len() };
    let mut out = Vec::with_capacity(BATCH_HEADER_LEN + payload.len());
    out.extend_from_slice(BATCH_MAGIC);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&(count as u32).to_le_bytes());
    out.extend_from_slice(&base.to_le_bytes());
    out.extend_from_slice(&max.to_le_bytes());
    let mut crc = crc32c::crc32c(&out[4..28]);
    crc = crc32c::crc32c_append(crc, &payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// A batch found in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Offset of the batch header in the segment.
    pub offset: usize,
    pub count: u32,
    pub min_us: i64,
    pub max_us: i64,
    /// Payload range in the segment.
    pub payload: (usize, usize),
}

/// The batches of a segment and what was skipped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    pub batches: Vec<BatchInfo>,
    /// Bytes that belong to no whole batch (a torn tail, damage).
    pub skipped_bytes: usize,
    /// The segment header was missing or wrong (the batches were still looked for).
    pub bad_header: bool,
}

/// A batch header at `pos` that checks out, with its payload.
fn batch_at(bytes: &[u8], pos: usize) -> Option<BatchInfo> {
    let h = bytes.get(pos..pos + BATCH_HEADER_LEN)?;
    if &h[..4] != BATCH_MAGIC {
        return None;
    }
    let le32 = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or_default());
    let le64 = |i: usize| i64::from_le_bytes(h[i..i + 8].try_into().unwrap_or_default());
    let len = le32(4) as usize;
    let count = le32(8);
    if len > MAX_BATCH_BYTES || count as usize > MAX_BATCH_RECORDS {
        return None;
    }
    let start = pos + BATCH_HEADER_LEN;
    let payload = bytes.get(start..start + len)?;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h[4..28]), payload);
    if crc != le32(28) {
        return None;
    }
    Some(BatchInfo {
        offset: pos,
        count,
        min_us: le64(12),
        max_us: le64(20),
        payload: (start, start + len),
    })
}

/// Finds every whole batch of a segment, skipping torn or damaged bytes.
pub fn scan(bytes: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut pos = 0;
    if bytes.len() >= HEADER_LEN
        && &bytes[..8] == SEGMENT_MAGIC
        && bytes[8..12] == VERSION.to_le_bytes()
    {
        pos = HEADER_LEN;
    } else {
        out.bad_header = true;
    }
    while pos < bytes.len() {
        if let Some(b) = batch_at(bytes, pos) {
            out.batches.push(b);
            pos = b.payload.1;
            continue;
        }
        // Damage: resume at the next batch magic that starts a batch which checks out.
        let mut next = None;
        let mut from = pos + 1;
        while let Some(i) = memchr::memmem::find(bytes.get(from..).unwrap_or_default(), BATCH_MAGIC)
        {
            let at = from + i;
            if batch_at(bytes, at).is_some() {
                next = Some(at);
                break;
            }
            from = at + 1;
        }
        let resume = next.unwrap_or(bytes.len());
        out.skipped_bytes += resume - pos;
        pos = resume;
    }
    out
}

/// A decoded batch: its strings borrowed from the decompressed payload, its records as
/// references into them (a query filters on these without building owned records).
#[derive(Debug, Default)]
pub struct Batch<'a> {
    pub strings: Vec<&'a str>,
    pub records: Vec<RecordRef>,
    /// Recipient and option references of all records.
    pub refs: Vec<u32>,
    pub symbols: Vec<SymbolRef>,
}

/// A record of a [`Batch`]; string fields are references (0: none, else 1 + index).
#[derive(Debug, Default, Clone)]
pub struct RecordRef {
    pub time_us: i64,
    pub kind: u8,
    pub ip: Option<IpAddr>,
    /// listener, queue_id, message_id, helo, rdns, user, sender, from, subject.
    pub fields: [u32; 9],
    /// Range of `Batch::refs`.
    pub rcpt: (u32, u32),
    pub size: u64,
    pub score_milli: i64,
    pub required_milli: Option<i64>,
    pub generation: u64,
    pub scan_us: u64,
    /// Range of `Batch::symbols`.
    pub symbols: (u32, u32),
    /// Flag 8: a duplicate learn.
    pub duplicate: bool,
}

pub const F_LISTENER: usize = 0;
pub const F_QUEUE_ID: usize = 1;
pub const F_MESSAGE_ID: usize = 2;
pub const F_HELO: usize = 3;
pub const F_RDNS: usize = 4;
pub const F_USER: usize = 5;
pub const F_SENDER: usize = 6;
pub const F_FROM: usize = 7;
pub const F_SUBJECT: usize = 8;

#[derive(Debug, Default, Clone, Copy)]
pub struct SymbolRef {
    pub name: u32,
    pub shadow: bool,
    pub score_milli: i64,
    /// Range of `Batch::refs`.
    pub options: (u32, u32),
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, FormatError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.pos).ok_or(FormatError::Short)?;
            self.pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(v);
            }
        }
        Err(FormatError::Bad("varint too long"))
    }

    fn byte(&mut self) -> Result<u8, FormatError> {
        let b = *self.b.get(self.pos).ok_or(FormatError::Short)?;
        self.pos += 1;
        Ok(b)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.pos.checked_add(n).ok_or(FormatError::Short)?;
        let s = self.b.get(self.pos..end).ok_or(FormatError::Short)?;
        self.pos = end;
        Ok(s)
    }

    /// A count of items each taking at least one more byte: bounded by what is left.
    fn count(&mut self) -> Result<usize, FormatError> {
        let n = self.varint()?;
        if n > (self.b.len() - self.pos) as u64 {
            return Err(FormatError::Bad("count past the end"));
        }
        Ok(n as usize)
    }
}

/// Decompresses a batch's payload.
pub fn decompress(payload: &[u8]) -> Result<Vec<u8>, FormatError> {
    let size = zstd::zstd_safe::get_frame_content_size(payload)
        .ok()
        .flatten()
        .ok_or_else(|| FormatError::Zstd("no content size".into()))?;
    if size > MAX_PLAIN_BYTES {
        return Err(FormatError::Zstd("content size too large".into()));
    }
    zstd::bulk::decompress(payload, size as usize).map_err(|e| FormatError::Zstd(e.to_string()))
}

/// Decodes a decompressed payload into `out` (cleared first; its vectors are reused).
pub fn decode<'a>(plain: &'a [u8], out: &mut Batch<'a>) -> Result<(), FormatError> {
    out.strings.clear();
    out.records.clear();
    out.refs.clear();
    out.symbols.clear();
    let mut r = Reader { b: plain, pos: 0 };
    let n = r.count()?;
    for _ in 0..n {
        let len = r.varint()? as usize;
        let s = std::str::from_utf8(r.bytes(len)?).map_err(|_| FormatError::Bad("not UTF-8"))?;
        out.strings.push(s);
    }
    let nstr = out.strings.len() as u64;
    let sref = |v: u64| -> Result<u32, FormatError> {
        if v > nstr {
            Err(FormatError::Bad("string reference out of range"))
        } else {
            Ok(v as u32)
        }
    };
    let records = r.count()?;
    // A record takes at least 18 bytes: a damaged count cannot make the vector outgrow the
    // payload many times.
    if records > (plain.len() - r.pos) / 18 {
        return Err(FormatError::Bad("more records than bytes"));
    }
    let base = unzigzag(r.varint()?);
    out.records.reserve(records);
    let mut prev = base;
    for _ in 0..records {
        prev = prev.wrapping_add(unzigzag(r.varint()?));
        let mut rec = RecordRef {
            time_us: prev,
            kind: r.byte()?,
            ..RecordRef::default()
        };
        let flags = r.byte()?;
        rec.duplicate = flags & 8 != 0;
        if flags & 1 != 0 {
            let o: [u8; 4] = r.bytes(4)?.try_into().map_err(|_| FormatError::Short)?;
            rec.ip = Some(IpAddr::from(o));
        } else if flags & 2 != 0 {
            let o: [u8; 16] = r.bytes(16)?.try_into().map_err(|_| FormatError::Short)?;
            rec.ip = Some(IpAddr::from(o));
        }
        for f in &mut rec.fields {
            *f = sref(r.varint()?)?;
        }
        let nrcpt = r.count()?;
        let start = out.refs.len() as u32;
        for _ in 0..nrcpt {
            out.refs.push(sref(r.varint()?)?);
        }
        rec.rcpt = (start, out.refs.len() as u32);
        rec.size = r.varint()?;
        rec.score_milli = unzigzag(r.varint()?);
        if flags & 4 != 0 {
            rec.required_milli = Some(unzigzag(r.varint()?));
        }
        rec.generation = r.varint()?;
        rec.scan_us = r.varint()?;
        let nsym = r.count()?;
        let sstart = out.symbols.len() as u32;
        for _ in 0..nsym {
            let name = r.varint()?;
            let score_milli = unzigzag(r.varint()?);
            let nopt = r.count()?;
            let ostart = out.refs.len() as u32;
            for _ in 0..nopt {
                out.refs.push(sref(r.varint()?)?);
            }
            out.symbols.push(SymbolRef {
                name: sref(name >> 1)?,
                shadow: name & 1 != 0,
                score_milli,
                options: (ostart, out.refs.len() as u32),
            });
        }
        rec.symbols = (sstart, out.symbols.len() as u32);
        out.records.push(rec);
    }
    if r.pos != plain.len() {
        return Err(FormatError::Bad("bytes after the last record"));
    }
    Ok(())
}

impl Batch<'_> {
    /// The string a reference names.
    pub fn str(&self, r: u32) -> Option<&str> {
        if r == 0 {
            None
        } else {
            self.strings.get(r as usize - 1).copied()
        }
    }

    fn owned(&self, r: u32) -> Option<String> {
        self.str(r).map(str::to_owned)
    }

    /// The owned record.
    pub fn record(&self, rec: &RecordRef) -> Record {
        let refs = |(a, b): (u32, u32)| -> Vec<String> {
            self.refs[a as usize..b as usize]
                .iter()
                .filter_map(|&r| self.owned(r))
                .collect()
        };
        Record {
            time_us: rec.time_us,
            kind: Kind::from_code(rec.kind).unwrap_or(Kind::Scan(crate::verdict::Action::NoAction)),
            listener: self.owned(rec.fields[F_LISTENER]).unwrap_or_default(),
            queue_id: self.owned(rec.fields[F_QUEUE_ID]),
            message_id: self.owned(rec.fields[F_MESSAGE_ID]),
            ip: rec.ip,
            helo: self.owned(rec.fields[F_HELO]),
            rdns: self.owned(rec.fields[F_RDNS]),
            user: self.owned(rec.fields[F_USER]),
            sender: self.owned(rec.fields[F_SENDER]),
            rcpt: refs(rec.rcpt),
            from: self.owned(rec.fields[F_FROM]),
            subject: self.owned(rec.fields[F_SUBJECT]),
            size: rec.size,
            score: rec.score_milli as f64 / 1000.0,
            required_score: rec.required_milli.map(|m| m as f64 / 1000.0),
            symbols: self.symbols[rec.symbols.0 as usize..rec.symbols.1 as usize]
                .iter()
                .map(|s| SymbolRecord {
                    name: self.owned(s.name).unwrap_or_default(),
                    score: s.score_milli as f64 / 1000.0,
                    options: refs(s.options),
                    shadow: s.shadow,
                })
                .collect(),
            generation: rec.generation,
            scan_us: rec.scan_us,
            duplicate: rec.duplicate,
        }
    }
}

/// Every record of a segment's bytes, oldest first (tests and tools).
pub fn read_all(bytes: &[u8]) -> (Vec<Record>, Scan) {
    let s = scan(bytes);
    let mut out = Vec::new();
    for b in &s.batches {
        let Ok(plain) = decompress(&bytes[b.payload.0..b.payload.1]) else {
            continue;
        };
        let mut batch = Batch::default();
        if decode(&plain, &mut batch).is_ok() {
            out.extend(batch.records.iter().map(|r| batch.record(r)));
        }
    }
    (out, s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::verdict::Action;

    /// A record with every field set, varied by `i`.
    pub fn sample(i: u64) -> Record {
        Record {
            time_us: 1_790_000_000_000_000 + i as i64 * 1_000,
            kind: Kind::Scan(Action::ALL[(i % 8) as usize]),
            listener: if i.is_multiple_of(2) {
                "http"
            } else {
                "milter"
            }
            .into(),
            queue_id: Some(format!("Q{i:06}")),
            message_id: Some(format!("<m{i}@example.com>")),
            ip: Some(if i.is_multiple_of(3) {
                IpAddr::from([192, 0, 2, (i % 250) as u8])
            } else {
                "2001:db8::1".parse().unwrap()
            }),
            helo: Some("mx.example.net".into()),
            rdns: (!i.is_multiple_of(4)).then(|| "mail.example.net".into()),
            user: (i.is_multiple_of(5)).then(|| "alice".into()),
            sender: Some(format!("s{}@sender{}.example", i % 7, i % 3)),
            rcpt: vec![format!("r{}@example.org", i % 11), "all@example.org".into()],
            from: Some(format!("f{}@from.example", i % 5)),
            subject: Some(format!("Subject número {i}")),
            size: 1000 + i * 37,
            score: (i as f64) * 0.5 - 3.25,
            required_score: (i.is_multiple_of(2)).then_some(15.0),
            symbols: vec![
                SymbolRecord {
                    name: "BAYES_SPAM".into(),
                    score: 3.5,
                    options: vec![format!("{}%", 90 + i % 10)],
                    shadow: false,
                },
                SymbolRecord {
                    name: format!("RULE_{}", i % 13),
                    score: -0.125,
                    options: vec![],
                    shadow: i.is_multiple_of(6),
                },
            ],
            generation: 3 + i % 2,
            scan_us: 1234 + i,
            duplicate: i.is_multiple_of(9),
        }
    }

    fn segment(batches: &[&[Record]]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = segment_header().to_vec();
        let mut ends = Vec::new();
        for b in batches {
            bytes.extend(encode_batch(b));
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    #[test]
    fn records_round_trip() {
        let records: Vec<Record> = (0..50).map(sample).collect();
        let (bytes, _) = segment(&[&records[..20], &records[20..]]);
        let (back, s) = read_all(&bytes);
        assert_eq!(back, records);
        assert_eq!(s.batches.len(), 2);
        assert_eq!(s.skipped_bytes, 0);
        assert!(!s.bad_header);
        assert_eq!(s.batches[0].min_us, records[0].time_us);
        assert_eq!(s.batches[0].max_us, records[19].time_us);
        // An empty record survives too (no optional fields, no symbols).
        let empty = Record::default();
        let (bytes, _) = segment(&[std::slice::from_ref(&empty)]);
        assert_eq!(read_all(&bytes).0, vec![empty]);
    }

    /// The bytes are the format the module documents.
    #[test]
    fn byte_vector() {
        let r = Record {
            time_us: 1_000_000,
            kind: Kind::Scan(Action::Reject),
            listener: "http".into(),
            ip: Some(IpAddr::from([192, 0, 2, 1])),
            size: 300,
            score: 15.5,
            required_score: Some(15.0),
            generation: 2,
            scan_us: 900,
            symbols: vec![SymbolRecord {
                name: "GTUBE".into(),
                score: 15.5,
                options: vec![],
                shadow: false,
            }],
            ..Record::default()
        };
        let batch = encode_batch(std::slice::from_ref(&r));
        assert_eq!(&batch[..4], b"SHB1");
        let len = u32::from_le_bytes(batch[4..8].try_into().unwrap()) as usize;
        assert_eq!(batch.len(), BATCH_HEADER_LEN + len);
        assert_eq!(u32::from_le_bytes(batch[8..12].try_into().unwrap()), 1);
        assert_eq!(
            i64::from_le_bytes(batch[12..20].try_into().unwrap()),
            1_000_000
        );
        assert_eq!(
            i64::from_le_bytes(batch[20..28].try_into().unwrap()),
            1_000_000
        );
        let crc = crc32c::crc32c_append(crc32c::crc32c(&batch[4..28]), &batch[32..]);
        assert_eq!(u32::from_le_bytes(batch[28..32].try_into().unwrap()), crc);
        let plain = decompress(&batch[32..]).unwrap();
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[2u8][..],                       // two strings
            &[4], b"http", &[5], b"GTUBE",
            &[1],                             // one record
            &[0x80, 0x89, 0x7a],              // base 1_000_000 zigzag = 2_000_000
            &[0],                             // dt
            &[7],                             // kind: reject
            &[1 | 4],                         // IPv4, required score
            &[192, 0, 2, 1],
            &[1],                             // listener = string 0
            &[0, 0, 0, 0, 0, 0, 0, 0],        // queue_id .. subject: none
            &[0],                             // no rcpt
            &[0xac, 0x02],                    // size 300
            &[0x98, 0xf2, 0x01],              // 15500 zigzag = 31000
            &[0xb0, 0xea, 0x01],              // 15000 zigzag = 30000
            &[2],                             // generation
            &[0x84, 0x07],                    // scan_us 900
            &[1], &[2 << 1], &[0x98, 0xf2, 0x01], &[0], // GTUBE 15.5, no options
        ]
        .concat();
        assert_eq!(plain, expected);
        let mut segment = segment_header().to_vec();
        assert_eq!(&segment[..], b"SHRKHIST\x01\x00\x00\x00\x00\x00\x00\x00");
        segment.extend(batch);
        assert_eq!(read_all(&segment).0, vec![r]);
    }

    /// A kill in the middle of an append: every cut inside the last batch reads back the batches
    /// before it, with the cut bytes counted as skipped.
    #[test]
    fn torn_tail_at_every_offset() {
        let records: Vec<Record> = (0..30).map(sample).collect();
        let (bytes, ends) = segment(&[&records[..10], &records[10..20], &records[20..]]);
        let last_start = ends[1];
        for cut in last_start..bytes.len() {
            let (back, s) = read_all(&bytes[..cut]);
            assert_eq!(back, records[..20], "cut at {cut}");
            assert_eq!(s.skipped_bytes, cut - last_start, "cut at {cut}");
        }
        // A cut inside the segment header: nothing, and no panic.
        for cut in 0..HEADER_LEN {
            let (back, s) = read_all(&bytes[..cut]);
            assert!(back.is_empty());
            assert!(s.bad_header);
        }
    }

    /// A damaged batch in the middle loses its own records only, wherever the damage is
    /// (header, length, payload, checksum).
    #[test]
    fn corrupted_batch_in_the_middle() {
        let records: Vec<Record> = (0..30).map(sample).collect();
        let (bytes, ends) = segment(&[&records[..10], &records[10..20], &records[20..]]);
        let (start, end) = (ends[0], ends[1]);
        for at in (start..end)
            .step_by(7)
            .chain([start, start + 5, start + 29, end - 1])
        {
            let mut bad = bytes.clone();
            bad[at] ^= 0x5a;
            let (back, s) = read_all(&bad);
            let mut expect = records[..10].to_vec();
            expect.extend_from_slice(&records[20..]);
            assert_eq!(back, expect, "damage at {at}");
            assert_eq!(s.skipped_bytes, end - start, "damage at {at}");
        }
        // Zeroed pages (a crashed file system) in the middle likewise.
        let mut zeroed = bytes.clone();
        zeroed[start..end].fill(0);
        assert_eq!(read_all(&zeroed).0.len(), 20);
        // Garbage, or a wrong header: never a panic, and the batches are still found.
        let mut no_header = bytes.clone();
        no_header[0] = b'X';
        let (back, s) = read_all(&no_header);
        assert!(s.bad_header);
        assert_eq!(back, records);
        let mut rng = 7u64;
        for _ in 0..200 {
            let mut junk = bytes.clone();
            for _ in 0..8 {
                let i = (crate::testing::xorshift(&mut rng) as usize) % junk.len();
                junk[i] = crate::testing::xorshift(&mut rng) as u8;
            }
            let _ = read_all(&junk);
        }
    }

    #[test]
    fn malformed_payloads_are_errors_not_panics() {
        let mut batch = Batch::default();
        assert_eq!(decode(&[], &mut batch), Err(FormatError::Short));
        // A count larger than the bytes left.
        assert!(decode(&[0xff, 0xff, 0x03], &mut batch).is_err());
        // A string reference past the table.
        let r = sample(1);
        let enc = encode_batch(std::slice::from_ref(&r));
        let mut plain = decompress(&enc[32..]).unwrap();
        assert!(decode(&plain, &mut Batch::default()).is_ok());
        plain.push(0);
        let mut batch = Batch::default();
        assert_eq!(
            decode(&plain, &mut batch),
            Err(FormatError::Bad("bytes after the last record"))
        );
        for cut in 0..plain.len() - 1 {
            assert!(
                decode(&plain[..cut], &mut Batch::default()).is_err(),
                "cut {cut}"
            );
        }
        assert!(decompress(b"not zstd").is_err());
    }
}
