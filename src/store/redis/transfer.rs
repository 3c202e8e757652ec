//! `shrike store export` and `shrike store import`: counters moved between a memory data
//! directory and Redis as JSON lines, one key a line:
//! `{"ns":0,"kind":3,"hash":"00ab…","buckets":[[resolution,start,[seen,spam,ham,complaint,rescue]],…]}`.
//! Import adds each bucket at its own resolution and every coarser one (the redis layout, its
//! counter 0 stored less spam and ham: `keys::stored_deltas`), so the window sums read the same
//! on both sides. Paired-unique pair keys are not moved: in
//! Redis a pair is a marker next to its unique key, and a pair seen before the move may count
//! once more in the first period after it.

use std::io::{BufRead, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::conn::Item;
use super::{keys, RedisStore};
use crate::store::{Counts, Store, StoreKey, Unavailable};

/// `Kind::PairSenderRcpt`: the pair keys of paired unique counts.
const PAIR_KIND: u16 = 71;

#[derive(Serialize, Deserialize)]
struct Line {
    ns: u8,
    kind: u16,
    hash: String,
    buckets: Vec<(usize, u64, Counts)>,
}

/// Why a transfer stopped.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// (The cause is the `source`, printed after the message.)
    #[error("reading or writing the dump")]
    Io(#[from] std::io::Error),
    #[error("line {0}: {1}")]
    Parse(u64, String),
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
}

/// Writes every key of a memory store; returns the number of keys.
pub fn export(store: &Store, out: &mut dyn Write) -> Result<u64, TransferError> {
    let mut n = 0;
    for shard in 0..store.shard_count() {
        for key in store.keys_in_shard(shard) {
            let Some(t) = store.timeline(&key) else {
                continue;
            };
            let line = Line {
                ns: key.namespace,
                kind: key.kind,
                hash: format!("{:016x}", key.hash),
                buckets: t.buckets,
            };
            serde_json::to_writer(&mut *out, &line).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
            n += 1;
        }
    }
    out.flush()?;
    Ok(n)
}

/// Adds every key of a dump to Redis; returns the number of keys written.
pub fn import(store: &RedisStore, input: &mut dyn BufRead) -> Result<u64, TransferError> {
    let layout = &store.inner.layout;
    let prefix = store.inner.prefix.clone();
    let ttl = store.inner.ttl;
    let res = layout.resolutions();
    let mut items: Vec<Item> = Vec::new();
    let mut written = 0;
    let mut line_no = 0;
    let mut line = String::new();
    loop {
        line.clear();
        let eof = input.read_line(&mut line)? == 0;
        if !eof && !line.trim().is_empty() {
            line_no += 1;
            let l: Line = serde_json::from_str(&line)
                .map_err(|e| TransferError::Parse(line_no, e.to_string()))?;
            let hash = u64::from_str_radix(&l.hash, 16)
                .map_err(|e| TransferError::Parse(line_no, e.to_string()))?;
            if l.kind != PAIR_KIND {
                let key = StoreKey {
                    namespace: l.ns,
                    kind: l.kind,
                    hash,
                };
                let tk = keys::timeline_key(&prefix, &key);
                let mut cmds = Vec::new();
                for (r, start, counts) in &l.buckets {
                    for (c, &delta) in keys::stored_deltas(counts).iter().enumerate() {
                        if delta == 0 {
                            continue;
                        }
                        for (coarser, resolution) in res.iter().enumerate().skip(*r) {
                            let mut cmd = redis::cmd("HINCRBY");
                            cmd.arg(&tk)
                                .arg(keys::field(coarser, c, start / resolution.bucket_secs))
                                .arg(delta);
                            cmds.push(cmd);
                        }
                    }
                }
                let mut e = redis::cmd("EXPIRE");
                e.arg(&tk).arg(ttl);
                cmds.push(e);
                items.push(Item::new(&tk, cmds));
            }
        }
        if items.len() >= 500 || (eof && !items.is_empty()) {
            let batch = std::mem::take(&mut items);
            let n = batch.len() as u64;
            let link = store.inner.link.clone();
            let results = store
                .block(Duration::from_secs(30), async move {
                    link.run_on(batch, super::conn::Lane::Bulk).await
                })
                .ok_or_else(|| Unavailable("timed out".into()))?;
            if let Some(e) = results.into_iter().find_map(Result::err) {
                return Err(Unavailable(e.to_string()).into());
            }
            written += n;
        }
        if eof {
            return Ok(written);
        }
    }
}
