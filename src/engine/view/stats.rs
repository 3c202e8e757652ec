//! `msg:stat` and `msg:stats`: the window counts of a message's shingles, read by kind and
//! window name, combined by `store::combine` (a mapping: the figures are the store's).

use mlua::{Lua, Result, Table, Value};

use super::super::ffi::{self, Row};
use super::{int, number, opt_text, Arg, MessageData};
use crate::shingle::{Kind, Shingle};
use crate::store::{combine, spam_ratio, Combine, Counter, Counts};

/// How window names map to window indices (`10m`, `1h`, ...).
#[derive(Debug, Clone, Default)]
pub struct WindowNames {
    names: Vec<String>,
}

impl WindowNames {
    pub fn new(windows_secs: &[u64]) -> Self {
        WindowNames {
            names: windows_secs.iter().map(|&s| window_name(s)).collect(),
        }
    }

    pub fn index(&self, name: &[u8]) -> Option<usize> {
        self.names.iter().position(|n| n.as_bytes() == name)
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// `600` → `10m`, `3600` → `1h`, `86400` → `24h`, `604800` → `7d`.
pub fn window_name(secs: u64) -> String {
    if secs >= 2 * 86_400 && secs.is_multiple_of(86_400) {
        format!("{}d", secs / 86_400)
    } else if secs.is_multiple_of(3_600) {
        format!("{}h", secs / 3_600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// The index of a window given by name (`"1h"`).
fn window_arg(windows: &WindowNames, window: &Value) -> Result<usize> {
    match window {
        // Compared as bytes: `to_str` would validate UTF-8 on every `msg:stat` call.
        Value::String(s) => windows.index(&s.as_bytes()),
        _ => None,
    }
    .ok_or_else(|| {
        mlua::Error::runtime(format!(
            "unknown window {window:?}; configured: {}",
            windows.names().join(", ")
        ))
    })
}

/// An argument given as a shingle type name or number.
fn kind_arg(v: &Value) -> Result<Kind> {
    let k = match v {
        Value::String(s) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(Kind::parse),
        Value::Integer(i) => u16::try_from(*i).ok().and_then(Kind::from_id),
        Value::Number(n) => Kind::from_id(*n as u16),
        _ => None,
    };
    k.ok_or_else(|| mlua::Error::runtime(format!("unknown shingle type {v:?}")))
}

impl MessageData<'_> {
    /// `msg:stat(type, window[, how[, min_seen]])`: the elementwise max (or sum, min, median) of
    /// the window counts of this message's keys of a type that were seen at least `min_seen`
    /// times in the window (default 0: all of them), then the number of keys combined and the
    /// number of keys of the type.
    pub fn stat(
        &self,
        windows: &WindowNames,
        kind: &Value,
        window: &Value,
        how: &Value,
        min_seen: &Value,
    ) -> Result<[u64; 7]> {
        let kind = kind_arg(kind)?;
        let w = window_arg(windows, window)?;
        let how = match how {
            Value::Nil => Some(Combine::Max),
            Value::String(s) => Combine::parse(&s.as_bytes()),
            _ => None,
        }
        .ok_or_else(|| {
            mlua::Error::runtime("msg:stat: `how` must be \"max\", \"sum\", \"min\" or \"median\"")
        })?;
        let min_seen = match min_seen {
            Value::Nil => Some(0),
            Value::Integer(i) => u64::try_from(*i).ok(),
            Value::Number(n) if n.fract() == 0.0 && *n >= 0.0 => Some(*n as u64),
            _ => None,
        }
        .ok_or_else(|| mlua::Error::runtime("msg:stat: `min_seen` must be a whole number >= 0"))?;
        Ok(self.combined(0..self.shingles.len(), kind, w, how, min_seen))
    }

    /// `stat` from arguments as the raw C function reads them; None for any bad argument (the
    /// caller then asks `stat` for the error).
    pub fn stat_args(
        &self,
        windows: &WindowNames,
        index: &KindIndex,
        kind: Arg<'_>,
        window: Arg<'_>,
        how: Arg<'_>,
        min_seen: Arg<'_>,
    ) -> Option<[u64; 7]> {
        let kind = match kind {
            Arg::Str(s) => std::str::from_utf8(s).ok().and_then(Kind::parse),
            Arg::Int(i) => u16::try_from(i).ok().and_then(Kind::from_id),
            _ => None,
        }?;
        let Arg::Str(window) = window else {
            return None;
        };
        let w = windows.index(window)?;
        let how = match how {
            Arg::None => Combine::Max,
            Arg::Str(s) => Combine::parse(s)?,
            _ => return None,
        };
        let min_seen = match min_seen {
            Arg::None => 0,
            Arg::Int(i) => u64::try_from(i).ok()?,
            _ => return None,
        };
        let rows = index.rows(kind).iter().map(|&i| i as usize);
        Some(self.combined(rows, kind, w, how, min_seen))
    }

    /// `combine` over window `w` of the shingles of `kind` among the `candidates` (indices
    /// into `shingles`; others are skipped, as is a shingle without stats) seen at least
    /// `min_seen` times there, then how many were combined and how many there were.
    fn combined(
        &self,
        candidates: impl Iterator<Item = usize>,
        kind: Kind,
        w: usize,
        how: Combine,
        min_seen: u64,
    ) -> [u64; 7] {
        let mut all = 0u64;
        let mut taken = 0u64;
        let stats = self.stats_of(&[kind]);
        let rows = candidates
            .filter_map(|i| Some((self.shingles.get(i)?, stats.get(i)?)))
            .filter(|(s, _)| s.kind == kind)
            .map(|(_, c)| c.windows.get(w).copied().unwrap_or_default())
            .filter(|r| {
                all += 1;
                let keep = r[0] >= min_seen;
                taken += u64::from(keep);
                keep
            });
        let [a, b, c, d, e] = combine(rows, how);
        [a, b, c, d, e, taken, all]
    }

    /// `msg:stats(type[, window])`: one table per key, with a table per window, or with
    /// the counts of the one window asked for.
    pub fn stats_table(
        &self,
        lua: &Lua,
        windows: &WindowNames,
        kind: &Value,
        window: &Value,
    ) -> Result<Table> {
        let kind = kind_arg(kind)?;
        let only = match window {
            Value::Nil => None,
            w => Some(window_arg(windows, w)?),
        };
        let stats = self.stats_of(&[kind]);
        let keys: Vec<_> = (self.shingles.iter().zip(stats.iter()))
            .filter(|(s, _)| s.kind == kind)
            .map(|(s, c)| (format!("{:016x}", s.hash), c))
            .collect();
        if let Some(w) = only {
            let rows: Vec<_> = (keys.iter())
                .map(|(hash, c)| {
                    counts_row(c.windows.get(w).unwrap_or(&Counts::default()), Some(hash))
                })
                .collect();
            return ffi::records(lua, &rows);
        }
        let mut rows = Vec::new();
        for (hash, c) in keys {
            let k = lua.create_table_from(
                windows
                    .names()
                    .iter()
                    .zip(&c.windows)
                    .map(|(name, counts)| {
                        Ok::<_, mlua::Error>((
                            name.as_str(),
                            ffi::record(lua, &counts_row(counts, None))?,
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?,
            )?;
            k.raw_set("hash", hash)?;
            rows.push(k);
        }
        lua.create_sequence_from(rows)
    }

    /// `msg:shingles(type)`: the hashes of this message's shingles of a type, as hex.
    pub(super) fn shingle_hashes(&self, lua: &Lua, kind: &Value) -> Result<Value> {
        let kind = kind_arg(kind)?;
        Ok(Value::Table(
            lua.create_sequence_from(
                self.shingles
                    .iter()
                    .filter(|s| s.kind == kind)
                    .map(|sh| format!("{:016x}", sh.hash)),
            )?,
        ))
    }
}

/// The counters of one window as a record, with the spam ratio (and the key's hash).
fn counts_row<'s>(counts: &Counts, hash: Option<&'s str>) -> Row<'s, 7> {
    [
        (c"seen", int(counts[Counter::Seen as usize])),
        (c"spam", int(counts[Counter::Spam as usize])),
        (c"ham", int(counts[Counter::Ham as usize])),
        (c"complaints", int(counts[Counter::Complaint as usize])),
        (c"rescues", int(counts[Counter::Rescue as usize])),
        (c"spam_ratio", number(spam_ratio(counts))),
        (c"hash", opt_text(hash)),
    ]
}

/// A message's shingles grouped by kind, for `msg:stat`: the indices of its shingles in
/// order of (kind number modulo `KIND_BUCKETS`, position), and where each bucket starts. A
/// counting sort per scan, built at its first `msg:stat`; a lookup then reads one kind's rows
/// instead of testing every shingle's kind (~700 instructions a call before).
#[derive(Debug, Default)]
pub struct KindIndex {
    order: Vec<u32>,
    start: Vec<u32>,
    next: Vec<u32>,
}

const KIND_BUCKETS: usize = 64;

impl KindIndex {
    /// Rebuilds the index over `shingles`, reusing its buffers.
    pub fn build(&mut self, shingles: &[Shingle]) {
        let bucket = |s: &Shingle| usize::from(s.kind.id()) % KIND_BUCKETS;
        self.start.clear();
        self.start.resize(KIND_BUCKETS + 1, 0);
        for s in shingles {
            self.start[bucket(s) + 1] += 1;
        }
        for b in 0..KIND_BUCKETS {
            self.start[b + 1] += self.start[b];
        }
        self.order.clear();
        self.order.resize(shingles.len(), 0);
        self.next.clear();
        self.next.extend_from_slice(&self.start[..KIND_BUCKETS]);
        for (i, s) in shingles.iter().enumerate() {
            let slot = &mut self.next[bucket(s)];
            self.order[*slot as usize] = i as u32;
            *slot += 1;
        }
    }

    /// The indices of the shingles in `kind`'s bucket, in order.
    fn rows(&self, kind: Kind) -> &[u32] {
        let b = usize::from(kind.id()) % KIND_BUCKETS;
        match (self.start.get(b), self.start.get(b + 1)) {
            (Some(&a), Some(&e)) => self.order.get(a as usize..e as usize).unwrap_or_default(),
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The index gives each kind's shingles, in their order: what testing every shingle's
        /// kind gives. Fails when a bucket is cut short or a row is placed out of order.
        #[test]
        fn kind_index_rows_are_each_kinds_shingles_in_order(
            kinds in proptest::collection::vec(0..Kind::ALL.len(), 0..300),
        ) {
            let shingles: Vec<Shingle> = (kinds.iter().enumerate())
                .map(|(i, &k)| Shingle { kind: Kind::ALL[k], hash: i as u64 })
                .collect();
            let mut index = KindIndex::default();
            // built twice: a rebuild reuses the buffers of a larger message's index
            index.build(&shingles[..shingles.len() / 2]);
            index.build(&shingles);
            for &kind in Kind::ALL {
                let got: Vec<usize> = (index.rows(kind).iter())
                    .map(|&i| i as usize)
                    .filter(|&i| shingles[i].kind == kind)
                    .collect();
                let expected: Vec<usize> =
                    (0..shingles.len()).filter(|&i| shingles[i].kind == kind).collect();
                proptest::prop_assert_eq!(got, expected);
            }
        }
    }

    #[test]
    fn window_names() {
        let w: Vec<String> = [600, 3600, 86_400, 604_800, 1_209_600, 90]
            .iter()
            .map(|&s| window_name(s))
            .collect();
        assert_eq!(w, ["10m", "1h", "24h", "7d", "14d", "90s"]);
    }
}
