//! Key layout in Redis and the scripts that run there.
//!
//! - A key's timeline is one hash, `<prefix>:{<ns>.<kind>.<hash>}`, whose fields are
//!   `<resolution><counter><bucket id>` (e.g. `01` + 10-minute bucket number for "spam") holding
//!   64-bit counters. Counter 0 holds "seen" less what the bucket's spam and ham counters hold
//!   (`stored_deltas`): a scanned message is seen and, most often, spam or ham, so it writes
//!   one field per resolution instead of two, and a bucket holds one field for it where it
//!   held two. Every increment is added to its bucket at each resolution (a 10-minute
//!   bucket and its day), so no process ever folds buckets: a window sum reads the finest
//!   resolution that still keeps the whole window. The key's TTL (the coarsest resolution's
//!   keep plus one bucket) is renewed by each write that creates a coarsest bucket; fields past their resolution's keep are
//!   deleted by the reader that meets them. No sweeper walks Redis.
//! - A paired unique count's pair marker is `<prefix>:p:{<unique id>}:<pair id>`: the braces
//!   (the hash tag) put it in the unique key's slot, so the write script checks and counts both
//!   atomically on one node (`scripts.rs`).
//! - A rate counter is a small hash `<prefix>:r:{<id>}` of sub-bucket → hits with a TTL of its
//!   window (Figma's layout), hit in one `MULTI`/`EXEC` transaction (`RateWindow`).

use std::fmt::Write as _;

use redis::Value;

use crate::store::{Counts, Layout, StoreKey, Timeline, WindowCounts, WindowSums, COUNTERS};

/// The id of a store key inside keys (also its hash tag).
fn id(out: &mut String, key: &StoreKey) {
    let _ = write!(out, "{}.{}.{:016x}", key.namespace, key.kind, key.hash);
}

/// A key's timeline hash.
pub fn timeline_key(prefix: &str, key: &StoreKey) -> String {
    let mut s = String::with_capacity(prefix.len() + 32);
    s.push_str(prefix);
    s.push_str(":{");
    id(&mut s, key);
    s.push('}');
    s
}

/// The marker of a (pair, unique) in the unique key's slot.
pub fn pair_key(prefix: &str, pair: &StoreKey, unique: &StoreKey) -> String {
    let mut s = String::with_capacity(prefix.len() + 64);
    s.push_str(prefix);
    s.push_str(":p:{");
    id(&mut s, unique);
    s.push_str("}:");
    id(&mut s, pair);
    s
}

/// A rate counter's hash.
pub fn rate_key(prefix: &str, key: &StoreKey) -> String {
    let mut s = String::with_capacity(prefix.len() + 32);
    s.push_str(prefix);
    s.push_str(":r:{");
    id(&mut s, key);
    s.push('}');
    s
}

/// The classifier's learn stream (one key: learns are applied in one order everywhere).
pub fn learn_stream(prefix: &str) -> String {
    format!("{prefix}:clf:learns")
}

/// The cluster hash slot of a key: CRC16 (XMODEM) of its hash tag, else of the whole key.
pub fn slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let rest = &b[open + 1..];
            let close = rest.iter().position(|&c| c == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(b);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// A timeline field.
pub fn field(resolution: usize, counter: usize, bucket: u64) -> String {
    format!("{resolution}{counter}{bucket}")
}

/// The stored deltas of adding `counts`: as `counts`, but counter 0 ("seen") less the spam and
/// ham counted with it, so that a scan's usual increment (seen and spam, or seen and ham)
/// touches one field. Negative only for an increment of spam or ham without seen (none of
/// shrike's own writers makes one); Redis's counters are signed.
pub fn stored_deltas(counts: &Counts) -> [i64; COUNTERS] {
    let mut out = [0i64; COUNTERS];
    for (o, &c) in out.iter_mut().zip(counts) {
        *o = i64::try_from(c).unwrap_or(i64::MAX);
    }
    out[0] = out[0].saturating_sub(out[1]).saturating_sub(out[2]);
    out
}

/// The counts of a bucket's stored values (`stored_deltas` undone; a sum below zero, which
/// only a hand-edited hash can hold, reads as zero).
pub fn counts_of_stored(stored: &[i64; COUNTERS]) -> Counts {
    let mut out = [0u64; COUNTERS];
    for (o, &v) in out.iter_mut().zip(stored) {
        *o = u64::try_from(v).unwrap_or(0);
    }
    let seen = i128::from(stored[0]) + i128::from(stored[1]) + i128::from(stored[2]);
    out[0] = u64::try_from(seen.max(0)).unwrap_or(u64::MAX);
    out
}

/// A field's (resolution, counter, bucket id), or `None` for one we did not write.
pub fn parse_field(f: &[u8]) -> Option<(usize, usize, u64)> {
    if f.len() < 3 || !f.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let r = usize::from(f[0] - b'0');
    let c = usize::from(f[1] - b'0');
    if c >= COUNTERS {
        return None;
    }
    let id = std::str::from_utf8(&f[2..]).ok()?.parse().ok()?;
    Some((r, c, id))
}

/// Seconds a timeline key lives after its last write: the coarsest resolution's keep plus one
/// of its buckets.
pub fn ttl_secs(layout: &Layout) -> u64 {
    let last = layout
        .resolutions()
        .last()
        .expect("a layout has a resolution");
    last.keep_secs + last.bucket_secs
}

/// The (field, delta) writes of adding `counts` at time `at`: one per nonzero stored delta
/// (`stored_deltas`) and resolution, counter by counter, finest resolution first.
pub fn increment_fields(layout: &Layout, at: u64, counts: &Counts) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for (c, &delta) in stored_deltas(counts).iter().enumerate() {
        if delta == 0 {
            continue;
        }
        for (r, res) in layout.resolutions().iter().enumerate() {
            out.push((field(r, c, at / res.bucket_secs), delta));
        }
    }
    out
}

/// The field/value pairs of an `HGETALL` reply (RESP2 array or RESP3 map).
pub fn hash_pairs(v: &Value) -> Vec<(&[u8], i64)> {
    fn bytes(v: &Value) -> Option<&[u8]> {
        match v {
            Value::BulkString(b) => Some(b),
            Value::SimpleString(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
    fn num(v: &Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(*i),
            other => std::str::from_utf8(bytes(other)?).ok()?.parse().ok(),
        }
    }
    let mut out = Vec::new();
    match v {
        Value::Array(items) => {
            for pair in items.chunks_exact(2) {
                if let (Some(f), Some(n)) = (bytes(&pair[0]), num(&pair[1])) {
                    out.push((f, n));
                }
            }
        }
        Value::Map(items) => {
            for (f, n) in items {
                if let (Some(f), Some(n)) = (bytes(f), num(n)) {
                    out.push((f, n));
                }
            }
        }
        _ => {}
    }
    out
}

/// One decoded timeline hash: per resolution, (bucket id, counts), and the fields past their
/// resolution's keep (to delete).
pub struct Decoded {
    pub buckets: Vec<Vec<(u64, Counts)>>,
    pub stale: Vec<Vec<u8>>,
}

/// Decodes an `HGETALL` reply at time `now`.
pub fn decode(layout: &Layout, v: &Value, now: u64) -> Decoded {
    let res = layout.resolutions();
    let mut stored: Vec<Vec<(u64, [i64; COUNTERS])>> = vec![Vec::new(); res.len()];
    let mut stale = Vec::new();
    for (f, n) in hash_pairs(v) {
        let Some((r, c, id)) = parse_field(f) else {
            continue;
        };
        let Some(resolution) = res.get(r) else {
            continue;
        };
        let end = (id + 1).saturating_mul(resolution.bucket_secs);
        if end.saturating_add(resolution.keep_secs) <= now {
            stale.push(f.to_vec());
            continue;
        }
        let list = &mut stored[r];
        match list.iter_mut().find(|(b, _)| *b == id) {
            Some((_, values)) => values[c] = values[c].saturating_add(n),
            None => {
                let mut values = [0; COUNTERS];
                values[c] = n;
                list.push((id, values));
            }
        }
    }
    let buckets = stored
        .into_iter()
        .map(|mut list| {
            list.sort_unstable_by_key(|(id, _)| *id);
            list.into_iter()
                .map(|(id, values)| (id, counts_of_stored(&values)))
                .collect()
        })
        .collect();
    Decoded { buckets, stale }
}

/// The window sums of a decoded timeline: each window reads the finest resolution that keeps
/// it whole (its buckets that end inside the window), the coarsest for longer windows. Every
/// resolution holds every increment, so this equals the memory store's sums of settled
/// buckets.
pub fn window_sums(layout: &Layout, windows_secs: &[u64], d: &Decoded, now: u64) -> WindowCounts {
    let res = layout.resolutions();
    let mut sums = WindowSums::zeros(windows_secs.len());
    for (w, &window) in windows_secs.iter().enumerate() {
        let r = res
            .iter()
            .position(|r| r.keep_secs >= window)
            .unwrap_or(res.len() - 1);
        let from = now.saturating_sub(window);
        let mut total = [0u64; COUNTERS];
        for (id, counts) in &d.buckets[r] {
            let end = (id + 1).saturating_mul(res[r].bucket_secs);
            if end > from {
                for (t, c) in total.iter_mut().zip(counts) {
                    *t = t.saturating_add(*c);
                }
            }
        }
        sums[w] = total;
    }
    WindowCounts { windows: sums }
}

/// A decoded timeline as the memory store shows one: fine buckets while kept, and coarse
/// buckets holding only what no finer kept bucket holds.
pub fn timeline(layout: &Layout, windows_secs: &[u64], d: &Decoded, now: u64) -> Option<Timeline> {
    let res = layout.resolutions();
    let mut out: Vec<(usize, u64, Counts)> = Vec::new();
    for (r, list) in d.buckets.iter().enumerate() {
        for (id, counts) in list {
            let start = id * res[r].bucket_secs;
            let mut own = *counts;
            if r > 0 {
                let end = start + res[r].bucket_secs;
                // Subtract what the finer resolutions still show of this bucket.
                for (fid, fine) in &d.buckets[r - 1] {
                    let fstart = fid * res[r - 1].bucket_secs;
                    if fstart >= start && fstart < end {
                        for (o, f) in own.iter_mut().zip(fine) {
                            *o = o.saturating_sub(*f);
                        }
                    }
                }
            }
            if own.iter().any(|&c| c > 0) {
                out.push((r, start, own));
            }
        }
    }
    if out.is_empty() {
        return None;
    }
    out.sort_by_key(|(r, start, _)| (*r, *start));
    Some(Timeline {
        buckets: out,
        windows: window_sums(layout, windows_secs, d, now),
    })
}

/// A sliding-window rate counter (the memory store's `rate.rs`: window/60 sub-buckets plus
/// one), a small hash of sub-bucket → hits. A hit is one transaction of plain commands
/// (`MULTI`, `HINCRBY` of the current sub-bucket, the TTL renewed, `HGETALL`, `EXEC`): atomic
/// on its node as a script would be (two daemons racing get distinct counts), at a fraction of
/// a script's cost to Redis. The count is summed here; sub-buckets past the window are deleted
/// by the next flush (`Writer::delete`).
pub struct RateWindow {
    /// Sub-buckets counted.
    n: u64,
    /// The current sub-bucket.
    cur: u64,
    ttl: u64,
}

impl RateWindow {
    pub fn new(window_secs: u64, now: u64) -> RateWindow {
        let window = window_secs.max(1);
        let sub = (window / 60).max(1);
        RateWindow {
            n: window / sub + 1,
            cur: now / sub,
            ttl: window + sub,
        }
    }

    /// The commands of a hit, or of a peek (`hit` false: the hash read, nothing counted).
    pub fn commands(&self, name: &str, hit: bool) -> Vec<redis::Cmd> {
        let mut read = redis::cmd("HGETALL");
        read.arg(name);
        if !hit {
            return vec![read];
        }
        let mut incr = redis::cmd("HINCRBY");
        incr.arg(name).arg(self.cur).arg(1);
        let mut expire = redis::cmd("EXPIRE");
        expire.arg(name).arg(self.ttl);
        vec![redis::cmd("MULTI"), incr, expire, read, redis::cmd("EXEC")]
    }

    /// From the replies of `commands`: the count with this hit (for a peek, what a hit would
    /// count) and the sub-buckets past the window; `None` for a reply of another shape.
    pub fn reply(&self, replies: &[Value], hit: bool) -> Option<(u64, Vec<Vec<u8>>)> {
        let hash = if hit {
            match replies.last()? {
                Value::Array(results) => results.get(2)?,
                _ => return None,
            }
        } else {
            replies.first()?
        };
        if !matches!(hash, Value::Array(_) | Value::Map(_)) {
            return None;
        }
        let mut count = 0u64;
        let mut stale = Vec::new();
        for (f, hits) in hash_pairs(hash) {
            let Some(idx) = std::str::from_utf8(f)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if idx + self.n > self.cur {
                count = count.saturating_add(u64::try_from(hits).unwrap_or(0));
            } else {
                stale.push(f.to_vec());
            }
        }
        Some((if hit { count } else { count + 1 }, stale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreConfig;

    #[test]
    fn keys_share_the_unique_slot() {
        let u = StoreKey {
            namespace: 0,
            kind: 7,
            hash: 0xabc,
        };
        let p = StoreKey {
            namespace: 0,
            kind: 6,
            hash: 0xdef,
        };
        let t = timeline_key("in", &u);
        let pk = pair_key("in", &p, &u);
        assert_eq!(t, "in:{0.7.0000000000000abc}");
        assert_eq!(slot(&t), slot(&pk));
        assert_ne!(slot(&t), slot(&timeline_key("in", &p)));
        // Redis's own examples (CLUSTER KEYSLOT).
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
    }

    #[test]
    fn window_sums_match_the_layout() {
        let cfg = StoreConfig::default();
        let layout = Layout::new(&cfg.resolutions).unwrap();
        let now = 1_000_000_000;
        // Two hits now, one 3 hours ago, one 3 days ago.
        let mut fields = Vec::new();
        for at in [now, now, now - 3 * 3600, now - 3 * 86_400] {
            for (f, d) in increment_fields(&layout, at, &[1, 0, 0, 0, 0]) {
                fields.push(Value::BulkString(f.into_bytes()));
                fields.push(Value::Int(d));
            }
        }
        let d = decode(&layout, &Value::Array(fields), now);
        // The 3-day-old fine bucket is past its keep.
        assert_eq!(d.stale.len(), 1);
        let w = window_sums(&layout, &cfg.windows_secs, &d, now);
        let seen: Vec<u64> = w.windows.iter().map(|c| c[0]).collect();
        assert_eq!(seen, vec![2, 2, 3, 4, 4]);
        assert_eq!(parse_field(b"01123"), Some((0, 1, 123)));
        assert_eq!(parse_field(b"x1"), None);
    }

    #[test]
    fn a_scan_writes_one_field_per_resolution_and_reads_back_its_counts() {
        let layout = Layout::new(&StoreConfig::default().resolutions).unwrap();
        let now = 1_000_000_000;
        // Seen and spam: the spam field alone, in the 10-minute bucket and the day.
        let f = increment_fields(&layout, now, &[1, 1, 0, 0, 0]);
        assert_eq!(
            f,
            vec![(field(0, 1, now / 600), 1), (field(1, 1, now / 86_400), 1)]
        );
        // Seen alone (neither spam nor ham), seen and ham, a complaint.
        assert_eq!(
            increment_fields(&layout, now, &[1, 0, 0, 0, 0])[0].0,
            field(0, 0, now / 600)
        );
        assert_eq!(increment_fields(&layout, now, &[1, 0, 1, 0, 0]).len(), 2);
        assert_eq!(
            increment_fields(&layout, now, &[0, 0, 0, 1, 0])[0].0,
            field(0, 3, now / 600)
        );
        // Spam without seen (no writer of shrike's makes one) stores a negative remainder and
        // still reads back exactly.
        let odd = [0, 2, 0, 0, 0];
        assert_eq!(stored_deltas(&odd), [-2, 2, 0, 0, 0]);
        let mut fields = Vec::new();
        for counts in [[3, 1, 1, 0, 0], [1, 1, 0, 0, 0], odd, [0, 0, 0, 2, 1]] {
            for (f, d) in increment_fields(&layout, now, &counts) {
                fields.push(Value::BulkString(f.into_bytes()));
                fields.push(Value::Int(d));
            }
        }
        let d = decode(&layout, &Value::Array(fields), now);
        assert_eq!(d.buckets[0], vec![(now / 600, [4, 4, 1, 2, 1])]);
        assert_eq!(d.buckets[1], vec![(now / 86_400, [4, 4, 1, 2, 1])]);
        assert_eq!(counts_of_stored(&[-5, 1, 1, 0, 0]), [0, 1, 1, 0, 0]);
    }

    #[test]
    fn a_rate_hit_is_one_transaction_and_counts_its_window() {
        // A 60 s window: 1 s sub-buckets, 61 of them counted.
        let w = RateWindow::new(60, 1_000);
        let names: Vec<String> = w
            .commands("in:r:{x}", true)
            .iter()
            .map(|c| match c.args_iter().next() {
                Some(redis::Arg::Simple(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(names, ["MULTI", "HINCRBY", "EXPIRE", "HGETALL", "EXEC"]);
        assert_eq!(w.commands("in:r:{x}", false).len(), 1);
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        // This hit's sub-bucket (1000) holds 3 with it, 940 is the oldest counted, 939 is out.
        let hash = Value::Array(vec![
            bulk("1000"),
            bulk("3"),
            bulk("940"),
            bulk("2"),
            bulk("939"),
            bulk("7"),
        ]);
        let queued = Value::SimpleString("QUEUED".into());
        let replies = vec![
            Value::Okay,
            queued.clone(),
            queued.clone(),
            queued,
            Value::Array(vec![Value::Int(3), Value::Int(1), hash.clone()]),
        ];
        assert_eq!(w.reply(&replies, true), Some((5, vec![b"939".to_vec()])));
        // A peek answers what a hit would count.
        assert_eq!(w.reply(&[hash], false), Some((6, vec![b"939".to_vec()])));
        // An aborted transaction or an error is no count.
        assert_eq!(w.reply(&[Value::Nil], true), None);
        assert_eq!(w.reply(&[Value::Int(1)], false), None);
    }
}
