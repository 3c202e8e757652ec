//! Writes off the reply path: increments are added together per (key, bucket) in memory and
//! flushed every `flush_interval_ms` as `WRITE` script calls, one per node and `CHUNK`
//! operations (+5 once equals +1 five times); unique pairs and the deletes readers asked for
//! go in the same calls. While Redis is down the
//! pending set grows up to `max_pending` entries; past that, new increments are dropped and
//! counted. A flush that fails puts its entries back (at-least-once: a batch that reached Redis
//! but whose reply was lost is counted again).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::Mutex;

use super::conn::Item;
use super::health::Stats;
use super::keys;
use super::scripts::{Scripts, CHUNK};
use crate::store::{Counts, Increment, Layout, StoreKey};

#[derive(Default)]
struct Pending {
    /// (key, time of its finest bucket) → counts.
    incs: HashMap<(StoreKey, u64), Counts>,
    /// (pair, unique) → (period, time).
    pairs: HashMap<(StoreKey, StoreKey), (u64, u64)>,
    /// Fields past their keep found by readers (of rate counters), by key name.
    dels: HashMap<String, Vec<Vec<u8>>>,
}

enum Origin {
    Inc(StoreKey, u64, Counts),
    Pair(StoreKey, StoreKey, u64, u64),
    /// A hash's fields to delete (not put back when the call fails: the next reader finds
    /// them again).
    Del(String, Vec<Vec<u8>>),
}

/// A flush's script calls and the entries each carries (to put back on failure).
pub struct Batch {
    pub items: Vec<Item>,
    origins: Vec<Vec<Origin>>,
}

impl Batch {
    /// Script calls (before they are sent).
    pub fn len(&self) -> usize {
        self.origins.len()
    }

    pub fn is_empty(&self) -> bool {
        self.origins.is_empty()
    }
}

pub struct Writer {
    pending: Mutex<Pending>,
    max: usize,
    /// The finest bucket's width: increments within one bucket share an entry.
    bucket_secs: u64,
}

impl Writer {
    pub fn new(max: usize, bucket_secs: u64) -> Writer {
        Writer {
            pending: Mutex::new(Pending::default()),
            max,
            bucket_secs: bucket_secs.max(1),
        }
    }

    pub fn len(&self) -> usize {
        let p = self.pending.lock();
        p.incs.len() + p.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        let p = self.pending.lock();
        p.incs.is_empty() && p.pairs.is_empty() && p.dels.is_empty()
    }

    pub fn add(&self, increments: &[Increment], now: u64, stats: &Stats) {
        let mut p = self.pending.lock();
        for inc in increments {
            self.add_one(&mut p, inc.key, now, &inc.counts, stats);
        }
    }

    fn add_one(&self, p: &mut Pending, key: StoreKey, at: u64, counts: &Counts, stats: &Stats) {
        let full = p.incs.len() + p.pairs.len() >= self.max;
        let at = at - at % self.bucket_secs;
        match p.incs.get_mut(&(key, at)) {
            Some(sum) => {
                for (s, d) in sum.iter_mut().zip(counts) {
                    *s = s.saturating_add(*d);
                }
            }
            None if full => {
                stats.dropped.fetch_add(1, Relaxed);
            }
            None => {
                p.incs.insert((key, at), *counts);
            }
        }
    }

    pub fn pair(&self, pair: StoreKey, unique: StoreKey, period: u64, now: u64, stats: &Stats) {
        let mut p = self.pending.lock();
        if p.pairs.contains_key(&(pair, unique)) {
            return;
        }
        if p.incs.len() + p.pairs.len() >= self.max {
            stats.dropped.fetch_add(1, Relaxed);
            return;
        }
        p.pairs.insert((pair, unique), (period, now));
    }

    /// Deletes `fields` of the hash `name` with the next flush.
    pub fn delete(&self, name: String, fields: Vec<Vec<u8>>) {
        let mut p = self.pending.lock();
        if p.dels.len() < self.max {
            p.dels.insert(name, fields);
        }
    }

    /// Everything pending, as `WRITE` calls: the operations grouped by the node serving their
    /// key (`nodes` maps slots to nodes) and cut into calls of at most `CHUNK`.
    pub fn take(
        &self,
        layout: &Layout,
        prefix: &str,
        scripts: &Scripts,
        nodes: impl FnOnce(&[u16]) -> Vec<u16>,
    ) -> Batch {
        let taken = std::mem::take(&mut *self.pending.lock());
        let mut ops: Vec<(u16, Origin)> =
            Vec::with_capacity(taken.incs.len() + taken.pairs.len() + taken.dels.len());
        for ((key, at), counts) in taken.incs {
            ops.push((
                keys::slot(&keys::timeline_key(prefix, &key)),
                Origin::Inc(key, at, counts),
            ));
        }
        for ((pair, unique), (period, at)) in taken.pairs {
            ops.push((
                keys::slot(&keys::timeline_key(prefix, &unique)),
                Origin::Pair(pair, unique, period, at),
            ));
        }
        for (name, fields) in taken.dels {
            ops.push((keys::slot(&name), Origin::Del(name, fields)));
        }
        let node_of = nodes(&ops.iter().map(|(slot, _)| *slot).collect::<Vec<_>>());
        let mut ops: Vec<Option<Origin>> = ops.into_iter().map(|(_, o)| Some(o)).collect();
        let mut items = Vec::new();
        let mut origins = Vec::new();
        for (_, members) in super::conn::by_node(node_of) {
            for chunk in members.chunks(CHUNK) {
                let mut call = scripts.writes();
                let mut carried = Vec::with_capacity(chunk.len());
                for &i in chunk {
                    let Some(origin) = ops[i].take() else {
                        continue;
                    };
                    match &origin {
                        Origin::Inc(key, at, counts) => call.inc(layout, prefix, key, *at, counts),
                        Origin::Pair(pair, unique, period, at) => {
                            call.pair(layout, prefix, pair, unique, *period, *at)
                        }
                        Origin::Del(name, fields) => call.del(name, fields),
                    }
                    carried.push(origin);
                }
                let (sha, text, first) = call.finish();
                items.push(Item::script(&first, sha, text));
                origins.push(carried);
            }
        }
        Batch { items, origins }
    }

    /// After a flush: the entries of calls that failed are put back (within the bound), and
    /// of a call that ran only the operations whose key its node no longer serves (its
    /// commands run under `pcall`: the rest is never resent). Returns how many moved.
    pub fn settle(
        &self,
        mut batch: Batch,
        results: &[Result<Vec<redis::Value>, super::conn::LinkError>],
        stats: &Stats,
    ) -> usize {
        let mut failed = Vec::new();
        let mut moved = 0;
        for (i, r) in results.iter().enumerate() {
            match r {
                Err(_) => failed.push(i),
                Ok(replies) => {
                    let Some(redis::Value::Array(ops)) = replies.first() else {
                        continue;
                    };
                    let mut keep: Vec<Origin> = Vec::new();
                    let carried = std::mem::take(&mut batch.origins[i]);
                    for (n, origin) in carried.into_iter().enumerate() {
                        if ops
                            .iter()
                            .any(|v| matches!(v, redis::Value::Int(k) if *k == n as i64 + 1))
                        {
                            keep.push(origin);
                        }
                    }
                    moved += keep.len();
                    batch.origins[i] = keep;
                    failed.push(i);
                }
            }
        }
        self.requeue(batch, &failed, stats);
        moved
    }

    /// Puts back the entries of `failed` items (within the bound).
    pub fn requeue(&self, batch: Batch, failed: &[usize], stats: &Stats) {
        if failed.is_empty() {
            return;
        }
        let mut p = self.pending.lock();
        for origin in failed.iter().flat_map(|&i| &batch.origins[i]) {
            match origin {
                Origin::Inc(key, at, counts) => self.add_one(&mut p, *key, *at, counts, stats),
                Origin::Pair(pair, unique, period, at) => {
                    if p.incs.len() + p.pairs.len() >= self.max {
                        stats.dropped.fetch_add(1, Relaxed);
                    } else {
                        p.pairs.entry((*pair, *unique)).or_insert((*period, *at));
                    }
                }
                Origin::Del(..) => {}
            }
        }
    }
}

/// One item per (key, time, counts): its HINCRBYs at every resolution (per nonzero counter,
/// finest first) and, with `ttl`, the key's EXPIRE.
pub fn increment_items(
    layout: &Layout,
    prefix: &str,
    ttl: Option<u64>,
    incs: impl IntoIterator<Item = (StoreKey, u64, Counts)>,
) -> Vec<Item> {
    incs.into_iter()
        .map(|(key, at, counts)| {
            let tk = keys::timeline_key(prefix, &key);
            let mut cmds = Vec::new();
            for (f, delta) in keys::increment_fields(layout, at, &counts) {
                let mut c = redis::cmd("HINCRBY");
                c.arg(&tk).arg(f).arg(delta);
                cmds.push(c);
            }
            if let Some(ttl) = ttl {
                let mut e = redis::cmd("EXPIRE");
                e.arg(&tk).arg(ttl);
                cmds.push(e);
            }
            Item::new(&tk, cmds)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Counter, StoreConfig};

    fn args(item: &Item) -> Vec<Vec<String>> {
        item.cmds
            .iter()
            .map(|c| {
                c.args_iter()
                    .map(|a| match a {
                        redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                        _ => String::new(),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn increments_add_up_per_key_and_the_bound_drops_and_counts() {
        let layout = Layout::new(&StoreConfig::default().resolutions).unwrap();
        let stats = Stats::default();
        let w = Writer::new(2, 600);
        let key = |hash| StoreKey {
            namespace: 0,
            kind: 1,
            hash,
        };
        let now = 1_800_000_000;
        for i in 0..5 {
            // Five increments within one 10-minute bucket: one set of writes of +5.
            w.add(&[Increment::one(key(1), Counter::Seen)], now + i, &stats);
        }
        // A scan judged spam: seen and spam, written as the spam field alone.
        let spam = Increment {
            key: key(2),
            counts: [1, 1, 0, 0, 0],
        };
        w.add(&[spam], now, &stats);
        // Full: a third key is dropped and counted, more of a held key still adds up.
        w.add(&[Increment::one(key(3), Counter::Seen)], now, &stats);
        w.add(&[spam], now, &stats);
        assert_eq!(stats.dropped.load(Relaxed), 1);
        let scripts = Scripts::new(&layout, &StoreConfig::default().windows_secs, 100);
        // Key 1 on node 0, key 2 on node 1: one call each.
        let k1 = keys::slot(&keys::timeline_key("in", &key(1)));
        let nodes = |slots: &[u16]| -> Vec<u16> {
            slots.iter().map(|&s| if s == k1 { 0 } else { 1 }).collect()
        };
        let batch = w.take(&layout, "in", &scripts, nodes);
        assert!(w.is_empty());
        let mut all: Vec<Vec<String>> = batch.items.iter().map(|i| args(i).remove(0)).collect();
        all.sort_by(|a, b| a[3].cmp(&b[3]));
        let call = |key: &str, f1: String, f2: String, d: &str| {
            vec![
                "EVALSHA".into(),
                redis::Script::new(super::super::scripts::WRITE)
                    .get_hash()
                    .to_string(),
                "1".into(),
                key.into(),
                "100".into(),
                "1".into(),
                "i".into(),
                key.into(),
                "2".into(),
                f1,
                d.into(),
                f2,
                d.into(),
            ]
        };
        assert_eq!(
            all,
            vec![
                call(
                    "in:{0.1.0000000000000001}",
                    format!("00{}", now / 600),
                    format!("10{}", now / 86_400),
                    "5"
                ),
                call(
                    "in:{0.1.0000000000000002}",
                    format!("01{}", now / 600),
                    format!("11{}", now / 86_400),
                    "2"
                ),
            ]
        );
        // Each call falls back on the script's text.
        assert!(batch
            .items
            .iter()
            .all(|i| i.retry.as_ref().is_some_and(|r| matches!(
                r[0].args_iter().next(),
                Some(redis::Arg::Simple(b)) if b == b"EVAL"
            ))));
        // A failed call puts its entries back; one that ran does not come again.
        let first_is_key1 = args(&batch.items[0])[0][3].ends_with("1}");
        let mut results = vec![
            Err(super::super::conn::LinkError::Redis("down".into())),
            Ok(vec![redis::Value::Array(vec![])]),
        ];
        if !first_is_key1 {
            results.reverse();
        }
        assert_eq!(w.settle(batch, &results, &stats), 0);
        let again = w.take(&layout, "in", &scripts, nodes);
        let all: Vec<Vec<String>> = again.items.iter().map(|i| args(i).remove(0)).collect();
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0][3], "in:{0.1.0000000000000001}");
        assert_eq!(all[0][10], "5");
        // A call that ran but whose node no longer serves its first operation's key: that
        // operation alone comes again.
        w.add(&[spam], now, &stats);
        let batch = w.take(&layout, "in", &scripts, |s| vec![0; s.len()]);
        assert_eq!(batch.len(), 1);
        let first_key = args(&batch.items[0])[0][3].clone();
        let results = vec![Ok(vec![redis::Value::Array(vec![redis::Value::Int(1)])])];
        assert_eq!(w.settle(batch, &results, &stats), 1);
        let again = w.take(&layout, "in", &scripts, |s| vec![0; s.len()]);
        assert_eq!(again.origins.iter().map(Vec::len).sum::<usize>(), 1);
        assert_eq!(args(&again.items[0])[0][3], first_key);
    }

    #[test]
    fn a_node_gets_calls_of_at_most_chunk_operations() {
        let cfg = StoreConfig::default();
        let layout = Layout::new(&cfg.resolutions).unwrap();
        let scripts = Scripts::new(&layout, &cfg.windows_secs, 100);
        let stats = Stats::default();
        let w = Writer::new(10_000, 600);
        let now = 1_800_000_000;
        for hash in 0..(CHUNK as u64 * 2 + 1) {
            let key = StoreKey {
                namespace: 0,
                kind: 1,
                hash,
            };
            w.add(&[Increment::one(key, Counter::Seen)], now, &stats);
        }
        let unique = StoreKey {
            namespace: 0,
            kind: 7,
            hash: 1,
        };
        let pair = StoreKey {
            namespace: 0,
            kind: 6,
            hash: 2,
        };
        w.pair(pair, unique, 3600, now, &stats);
        w.delete("in:r:{x}".into(), vec![b"17".to_vec()]);
        let batch = w.take(&layout, "in", &scripts, |s| vec![0; s.len()]);
        // 2 × CHUNK + 3 operations on one node: three calls.
        assert_eq!(batch.len(), 3);
        let ops: usize = batch.origins.iter().map(Vec::len).sum();
        assert_eq!(ops, CHUNK * 2 + 1 + 1 + 1);
        // Each call declares one key (its route); the others are arguments.
        assert!(batch.items.iter().all(|i| args(i)[0][2] == "1"));
        let flat: Vec<String> = batch.items.iter().flat_map(|i| args(i).remove(0)).collect();
        assert!(flat.iter().any(|a| a.starts_with("in:p:{0.7.")));
        assert!(flat.windows(4).any(|w| w == ["d", "in:r:{x}", "1", "17"]));
    }
}
