//! Writes off the reply path: increments are added together per (key, bucket) in memory and
//! flushed every `flush_interval_ms` as one pipeline per node (+5 once equals +1 five times);
//! unique pairs wait for the same flush and run their script there. While Redis is down the
//! pending set grows up to `max_pending` entries; past that, new increments are dropped and
//! counted. A flush that fails puts its entries back (at-least-once: a batch that reached Redis
//! but whose reply was lost is counted again).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::Mutex;

use super::conn::Item;
use super::health::Stats;
use super::keys;
use crate::store::{Counter, Counts, Increment, Layout, StoreKey};

#[derive(Default)]
struct Pending {
    /// (key, time of its finest bucket) → counts.
    incs: HashMap<(StoreKey, u64), Counts>,
    /// (pair, unique) → (period, time).
    pairs: HashMap<(StoreKey, StoreKey), (u64, u64)>,
    /// Fields past their keep found by readers (of timelines and rate counters), by key name.
    dels: HashMap<String, Vec<Vec<u8>>>,
    /// Keys whose TTL to renew: their first write of a coarsest bucket (a day).
    expires: std::collections::HashSet<StoreKey>,
}

enum Origin {
    Inc(StoreKey, u64, Counts),
    Pair(StoreKey, StoreKey, u64, u64),
    Del,
}

/// A flush's commands and what each came from (to put back on failure).
pub struct Batch {
    pub items: Vec<Item>,
    origins: Vec<Origin>,
}

impl Batch {
    /// Entries (items before they are sent).
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
        p.incs.is_empty() && p.pairs.is_empty() && p.dels.is_empty() && p.expires.is_empty()
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

    /// Everything pending, as commands.
    pub fn take(&self, layout: &Layout, prefix: &str, ttl: u64) -> Batch {
        let taken = std::mem::take(&mut *self.pending.lock());
        let incs = taken.incs;
        let mut items = Vec::with_capacity(incs.len() + taken.pairs.len() + taken.dels.len());
        let mut origins = Vec::with_capacity(items.capacity());
        // The TTL is renewed only after a key's first write of a day (seen in the replies of
        // the flush before): a key written every day still lives 14 days past its last write,
        // and most writes cost no EXPIRE.
        for ((key, at), counts) in incs {
            items.extend(increment_items(layout, prefix, None, [(key, at, counts)]));
            origins.push(Origin::Inc(key, at, counts));
        }
        for key in taken.expires {
            let tk = keys::timeline_key(prefix, &key);
            let mut cmd = redis::cmd("EXPIRE");
            cmd.arg(&tk).arg(ttl);
            items.push(Item::new(&tk, vec![cmd]));
            origins.push(Origin::Del);
        }
        for ((pair, unique), (period, at)) in taken.pairs {
            let pk = keys::pair_key(prefix, &pair, &unique);
            let tk = keys::timeline_key(prefix, &unique);
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(keys::UNIQUE_SCRIPT)
                .arg(2)
                .arg(&pk)
                .arg(&tk)
                .arg(period)
                .arg(ttl);
            let one = Increment::one(unique, Counter::Seen).counts;
            for (f, _) in keys::increment_fields(layout, at, &one) {
                cmd.arg(f);
            }
            items.push(Item::new(&tk, vec![cmd]));
            origins.push(Origin::Pair(pair, unique, period, at));
        }
        for (name, fields) in taken.dels {
            let mut cmd = redis::cmd("HDEL");
            cmd.arg(&name).arg(fields);
            items.push(Item::new(&name, vec![cmd]));
            origins.push(Origin::Del);
        }
        Batch { items, origins }
    }

    /// After a flush: keys whose replies show a first write of the day get their TTL renewed
    /// by the next flush, and the entries of failed items are put back (within the bound).
    pub fn settle(
        &self,
        batch: Batch,
        results: &[Result<Vec<redis::Value>, super::conn::LinkError>],
        layout: &Layout,
        stats: &Stats,
    ) {
        let coarsest = layout.resolutions().len() - 1;
        let mut failed = Vec::new();
        let mut expire = Vec::new();
        for (i, r) in results.iter().enumerate() {
            match (r, &batch.origins[i]) {
                (Err(_), _) => failed.push(i),
                (Ok(replies), Origin::Inc(key, _, counts)) => {
                    // The replies come per written counter, each at every resolution
                    // (`keys::increment_fields`): a day field equal to its delta was new.
                    let stored = keys::stored_deltas(counts);
                    let deltas = stored.iter().filter(|&&d| d != 0);
                    let firsts = replies
                        .chunks(coarsest + 1)
                        .zip(deltas)
                        .any(|(per_res, &d)| {
                            matches!(per_res.get(coarsest), Some(redis::Value::Int(v)) if *v == d)
                        });
                    if firsts {
                        expire.push(*key);
                    }
                }
                _ => {}
            }
        }
        if !expire.is_empty() {
            self.pending.lock().expires.extend(expire);
        }
        self.requeue(batch, &failed, stats);
    }

    /// Puts back the entries of `failed` items (within the bound).
    pub fn requeue(&self, batch: Batch, failed: &[usize], stats: &Stats) {
        if failed.is_empty() {
            return;
        }
        let mut p = self.pending.lock();
        for &i in failed {
            match &batch.origins[i] {
                Origin::Inc(key, at, counts) => self.add_one(&mut p, *key, *at, counts, stats),
                Origin::Pair(pair, unique, period, at) => {
                    if p.incs.len() + p.pairs.len() >= self.max {
                        stats.dropped.fetch_add(1, Relaxed);
                    } else {
                        p.pairs.entry((*pair, *unique)).or_insert((*period, *at));
                    }
                }
                Origin::Del => {}
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
    use crate::store::StoreConfig;

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
        let batch = w.take(&layout, "in", 100);
        assert!(w.is_empty());
        let mut all: Vec<Vec<Vec<String>>> = batch.items.iter().map(args).collect();
        all.sort();
        assert_eq!(
            all,
            vec![
                vec![
                    vec![
                        "HINCRBY".into(),
                        "in:{0.1.0000000000000001}".into(),
                        format!("00{}", now / 600),
                        "5".into()
                    ],
                    vec![
                        "HINCRBY".into(),
                        "in:{0.1.0000000000000001}".into(),
                        format!("10{}", now / 86_400),
                        "5".into()
                    ],
                ],
                vec![
                    vec![
                        "HINCRBY".into(),
                        "in:{0.1.0000000000000002}".into(),
                        format!("01{}", now / 600),
                        "2".into()
                    ],
                    vec![
                        "HINCRBY".into(),
                        "in:{0.1.0000000000000002}".into(),
                        format!("11{}", now / 86_400),
                        "2".into()
                    ],
                ],
            ]
        );
        // A failed flush puts its entries back; a first write of the day asks for an EXPIRE.
        let results = vec![
            Err(super::super::conn::LinkError::Redis("down".into())),
            Ok(vec![redis::Value::Int(9), redis::Value::Int(2)]),
        ];
        let first_is_key1 = args(&batch.items[0])[0][1].ends_with("1}");
        let results = if first_is_key1 {
            results
        } else {
            results.into_iter().rev().collect()
        };
        w.settle(batch, &results, &layout, &stats);
        let again = w.take(&layout, "in", 100);
        let all: Vec<Vec<Vec<String>>> = again.items.iter().map(args).collect();
        assert_eq!(all.len(), 2, "{all:?}");
        assert!(all.iter().any(|c| c[0][0] == "HINCRBY" && c[0][3] == "5"));
        assert!(all
            .iter()
            .any(|c| c[0] == vec!["EXPIRE", "in:{0.1.0000000000000002}", "100"]));
    }
}
