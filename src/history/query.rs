//! Queries over the history: filters, newest-first paging with an opaque cursor.
//!
//! The parameters are the same for `GET /history` and `shrike history` ([`Query::parse`]):
//! `from`, `to` (Unix seconds, RFC 3339, a date, or a duration meaning that long ago: `2h`),
//! `action` (rspamd's names, `_` for the space, or `learn`, `learn_spam`, `learn_ham`),
//! `sender`, `rcpt` (an address, case-insensitive, or `@domain`), `ip` (an address or a CIDR
//! range), `message_id`, `queue_id`, `symbol` (a symbol that fired, shadow hits included),
//! `min_score`, `max_score`, `limit` (default 50), `cursor` (the `cursor` of the page before).
//!
//! Records are read newest segment first, each segment's batches last first: a batch outside
//! the time range is skipped without decompressing it, and one whose string table holds no
//! value a string filter asks for is skipped after decompressing it, before its records are
//! looked at.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;

use super::segment::{self, Batch, RecordRef, F_MESSAGE_ID, F_QUEUE_ID, F_SENDER};
use super::writer::segments;
use super::{Hasher, Kind, Record};

/// Records per page unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 50;

/// Why a query cannot run.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("unknown parameter {0:?}")]
    Unknown(String),
    #[error("{name}: {reason} (got {value:?})")]
    Bad {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    /// (The cause is in the message, not a `source`: printed with its chain it would show
    /// twice.)
    #[error("reading the history {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A string filter: an exact value (case-insensitive) or, from `@`, a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    value: String,
    /// Under `privacy = "hash"`, the forms a hashed record holds: for an address, `h:…@h:…`
    /// and the bare `h:…` of records written before domains were kept; for a domain, the
    /// `@h:…` a hashed address ends with.
    hashed: Vec<String>,
    domain: bool,
    /// An address or message-id: angle brackets around the stored value do not count.
    address: bool,
}

impl Text {
    fn new(value: &str, address: bool) -> Text {
        let v = value.trim();
        let v = if address {
            v.trim_matches(['<', '>'])
        } else {
            v
        };
        Text {
            value: v.to_string(),
            hashed: Vec::new(),
            domain: address && v.starts_with('@'),
            address,
        }
    }

    fn matches(&self, s: &str) -> bool {
        let s = if self.address {
            s.trim_matches(['<', '>'])
        } else {
            s
        };
        if self.domain {
            let plain = s.len() >= self.value.len()
                && s.is_char_boundary(s.len() - self.value.len())
                && s[s.len() - self.value.len()..].eq_ignore_ascii_case(&self.value);
            return plain || self.hashed.iter().any(|h| s.ends_with(h.as_str()));
        }
        s.eq_ignore_ascii_case(&self.value) || self.hashed.iter().any(|h| h == s)
    }
}

/// Which records a query wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    /// Kind codes.
    pub kinds: Option<Vec<u8>>,
    pub sender: Option<Text>,
    pub rcpt: Option<Text>,
    pub ip: Option<IpNet>,
    pub message_id: Option<Text>,
    pub queue_id: Option<Text>,
    pub symbol: Option<Text>,
    pub min_score: Option<f64>,
    pub max_score: Option<f64>,
}

/// Where the page before ended: the last record it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub segment_us: i64,
    pub batch_offset: u64,
    pub index: u32,
}

impl Cursor {
    /// Opaque to clients: `v1` and the position, in hex.
    pub fn encode(&self) -> String {
        format!(
            "v1.{:x}.{:x}.{:x}",
            self.segment_us, self.batch_offset, self.index
        )
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let mut parts = s.split('.');
        if parts.next()? != "v1" {
            return None;
        }
        let c = Cursor {
            segment_us: i64::from_str_radix(parts.next()?, 16).ok()?,
            batch_offset: u64::from_str_radix(parts.next()?, 16).ok()?,
            index: u32::from_str_radix(parts.next()?, 16).ok()?,
        };
        parts.next().is_none().then_some(c)
    }
}

/// A query: filter, page size, where to continue.
#[derive(Debug, Clone)]
pub struct Query {
    pub filter: Filter,
    pub limit: usize,
    pub cursor: Option<Cursor>,
}

impl Default for Query {
    fn default() -> Self {
        Query {
            filter: Filter::default(),
            limit: DEFAULT_LIMIT,
            cursor: None,
        }
    }
}

/// A time: Unix seconds, RFC 3339 (`2026-11-27T10:00:00Z`, `2026-11-27 10:00:00`), a date, or a
/// duration (`90m`, `2h`, `7d`, optionally followed by `ago`) before `now_us`.
pub fn parse_time(s: &str, now_us: i64) -> Option<i64> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return secs.is_finite().then(|| (secs * 1e6).round() as i64);
    }
    let to_us = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_micros()).ok())
    };
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return to_us(t);
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(&format!("{s}T00:00:00Z")) {
        return to_us(t);
    }
    let d = s.strip_suffix("ago").unwrap_or(s).trim();
    humantime::parse_duration(d)
        .ok()
        .and_then(|d| i64::try_from(d.as_micros()).ok())
        .map(|d| now_us.saturating_sub(d))
}

impl Query {
    /// A query from `name=value` pairs (`/history`'s query string, or `shrike history`'s flags).
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        now_us: i64,
    ) -> Result<Query, QueryError> {
        let mut q = Query::default();
        let bad = |name: &'static str, value: &str, reason: &'static str| QueryError::Bad {
            name,
            value: value.to_string(),
            reason,
        };
        for (k, v) in pairs {
            let f = &mut q.filter;
            match k {
                "from" => {
                    f.from_us = Some(parse_time(v, now_us).ok_or_else(|| {
                        bad(
                        "from",
                        v,
                        "not a time (RFC 3339, a date, Unix seconds) or a duration ago (2h, 7d)",
                    )
                    })?)
                }
                "to" => {
                    f.to_us = Some(parse_time(v, now_us).ok_or_else(|| {
                        bad(
                        "to",
                        v,
                        "not a time (RFC 3339, a date, Unix seconds) or a duration ago (2h, 7d)",
                    )
                    })?)
                }
                "action" => {
                    let mut codes = f.kinds.take().unwrap_or_default();
                    for one in v.split(',') {
                        let kinds = Kind::parse_filter(one)
                            .ok_or_else(|| bad("action", v, "not an action"))?;
                        codes.extend(kinds.into_iter().map(Kind::code));
                    }
                    f.kinds = Some(codes);
                }
                "sender" => f.sender = Some(Text::new(v, true)),
                "rcpt" => f.rcpt = Some(Text::new(v, true)),
                "message_id" => f.message_id = Some(Text::new(v, true)),
                "queue_id" => f.queue_id = Some(Text::new(v, false)),
                "symbol" => f.symbol = Some(Text::new(v, false)),
                "ip" => {
                    let v = v.trim();
                    f.ip = Some(match v.parse::<IpNet>() {
                        Ok(net) => net,
                        Err(_) => IpNet::from(
                            v.parse::<IpAddr>()
                                .map_err(|_| bad("ip", v, "not an address or CIDR range"))?,
                        ),
                    })
                }
                "min_score" | "max_score" => {
                    let name = if k == "min_score" {
                        "min_score"
                    } else {
                        "max_score"
                    };
                    let score = v
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite())
                        .ok_or_else(|| bad(name, v, "not a number"))?;
                    if k == "min_score" {
                        f.min_score = Some(score);
                    } else {
                        f.max_score = Some(score);
                    }
                }
                "limit" => {
                    q.limit = v
                        .trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad("limit", v, "not a positive integer"))?
                }
                "cursor" => {
                    q.cursor = Some(
                        Cursor::decode(v.trim())
                            .ok_or_else(|| bad("cursor", v, "not a cursor of this history"))?,
                    )
                }
                other => return Err(QueryError::Unknown(other.to_string())),
            }
        }
        Ok(q)
    }
}

/// One page of answers.
#[derive(Debug, Default)]
pub struct Page {
    /// Newest first.
    pub records: Vec<Record>,
    /// Where the next page starts; `None` when there are no more records.
    pub cursor: Option<Cursor>,
    /// Records looked at.
    pub examined: u64,
    /// Bytes of segments that belong to no whole batch (torn tails, damage).
    pub skipped_bytes: u64,
}

/// The string references of a batch that a text filter accepts; `None` when there is no filter.
fn refs_matching(batch: &Batch<'_>, filter: Option<&Text>) -> Option<Vec<u32>> {
    let f = filter?;
    Some(
        batch
            .strings
            .iter()
            .enumerate()
            .filter(|(_, s)| f.matches(s))
            .map(|(i, _)| i as u32 + 1)
            .collect(),
    )
}

/// A text filter's references in one batch.
struct Prepared {
    sender: Option<Vec<u32>>,
    rcpt: Option<Vec<u32>>,
    message_id: Option<Vec<u32>>,
    queue_id: Option<Vec<u32>>,
    symbol: Option<Vec<u32>>,
}

impl Prepared {
    fn new(batch: &Batch<'_>, f: &Filter) -> Prepared {
        Prepared {
            sender: refs_matching(batch, f.sender.as_ref()),
            rcpt: refs_matching(batch, f.rcpt.as_ref()),
            message_id: refs_matching(batch, f.message_id.as_ref()),
            queue_id: refs_matching(batch, f.queue_id.as_ref()),
            symbol: refs_matching(batch, f.symbol.as_ref()),
        }
    }

    /// No record of the batch can match.
    fn excludes_all(&self) -> bool {
        [
            &self.sender,
            &self.rcpt,
            &self.message_id,
            &self.queue_id,
            &self.symbol,
        ]
        .iter()
        .any(|r| r.as_ref().is_some_and(Vec::is_empty))
    }
}

fn in_refs(refs: &Option<Vec<u32>>, r: u32) -> bool {
    refs.as_ref().is_none_or(|v| v.contains(&r))
}

impl Filter {
    fn time_overlaps(&self, min_us: i64, max_us: i64) -> bool {
        self.from_us.is_none_or(|f| max_us >= f) && self.to_us.is_none_or(|t| min_us <= t)
    }

    fn accepts(&self, batch: &Batch<'_>, p: &Prepared, r: &RecordRef) -> bool {
        if self.from_us.is_some_and(|f| r.time_us < f) || self.to_us.is_some_and(|t| r.time_us > t)
        {
            return false;
        }
        if self.kinds.as_ref().is_some_and(|k| !k.contains(&r.kind)) {
            return false;
        }
        let score = r.score_milli as f64 / 1000.0;
        if self.min_score.is_some_and(|m| score < m) || self.max_score.is_some_and(|m| score > m) {
            return false;
        }
        if let Some(net) = &self.ip {
            if !r.ip.is_some_and(|ip| net.contains(&ip)) {
                return false;
            }
        }
        if !in_refs(&p.sender, r.fields[F_SENDER])
            || !in_refs(&p.message_id, r.fields[F_MESSAGE_ID])
            || !in_refs(&p.queue_id, r.fields[F_QUEUE_ID])
        {
            return false;
        }
        if let Some(rcpt) = &p.rcpt {
            let refs = &batch.refs[r.rcpt.0 as usize..r.rcpt.1 as usize];
            if !refs.iter().any(|x| rcpt.contains(x)) {
                return false;
            }
        }
        if let Some(symbol) = &p.symbol {
            let syms = &batch.symbols[r.symbols.0 as usize..r.symbols.1 as usize];
            if !syms.iter().any(|s| symbol.contains(&s.name)) {
                return false;
            }
        }
        true
    }
}

/// Runs a query over the history directory `dir` (`DATA_DIR/history`). A missing directory is
/// an empty history.
pub fn run(dir: &Path, query: &Query) -> Result<Page, QueryError> {
    let io = |error| QueryError::Io {
        path: dir.to_path_buf(),
        error,
    };
    let mut page = Page::default();
    let mut filter = query.filter.clone();
    if let Some(h) = Hasher::open(dir, false).map_err(io)? {
        for t in [&mut filter.sender, &mut filter.rcpt].into_iter().flatten() {
            t.hashed = if t.domain {
                vec![format!("@{}", h.hash(&t.value, true))]
            } else {
                vec![h.hash_address(&t.value), h.hash(&t.value, true)]
            };
        }
    }
    let segs = match segments(dir) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(page),
        Err(e) => return Err(io(e)),
    };
    let limit = query.limit.max(1);
    // Vectors reused from batch to batch (the strings borrow each batch's payload).
    let (mut records, mut refs, mut symbols) = (Vec::new(), Vec::new(), Vec::new());
    for (i, seg) in segs.iter().enumerate().rev() {
        if let Some(c) = &query.cursor {
            if seg.start_us > c.segment_us {
                continue;
            }
        }
        // Every record of a segment was taken before the next segment was started.
        if let (Some(from), Some(next)) = (filter.from_us, segs.get(i + 1)) {
            if next.start_us < from {
                break;
            }
        }
        let bytes = match std::fs::read(&seg.path) {
            Ok(b) => b,
            // Deleted by retention meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(e)),
        };
        let scan = segment::scan(&bytes);
        page.skipped_bytes += scan.skipped_bytes as u64;
        let same_segment = query.cursor.filter(|c| c.segment_us == seg.start_us);
        for b in scan.batches.iter().rev() {
            if same_segment.is_some_and(|c| b.offset as u64 > c.batch_offset) {
                continue;
            }
            if !filter.time_overlaps(b.min_us, b.max_us) {
                continue;
            }
            let Ok(plain) = segment::decompress(&bytes[b.payload.0..b.payload.1]) else {
                continue;
            };
            // The batch borrows `plain`: a fresh one each time, reusing the vectors.
            let mut decoded = Batch {
                strings: Vec::new(),
                records: std::mem::take(&mut records),
                refs: std::mem::take(&mut refs),
                symbols: std::mem::take(&mut symbols),
            };
            if segment::decode(&plain, &mut decoded).is_err() {
                continue;
            }
            let prepared = Prepared::new(&decoded, &filter);
            let mut end = decoded.records.len();
            if let Some(c) = same_segment.filter(|c| c.batch_offset == b.offset as u64) {
                end = end.min(c.index as usize);
            }
            if !prepared.excludes_all() {
                for (idx, r) in decoded.records[..end].iter().enumerate().rev() {
                    page.examined += 1;
                    if filter.accepts(&decoded, &prepared, r) {
                        page.records.push(decoded.record(r));
                        if page.records.len() == limit {
                            page.cursor = Some(Cursor {
                                segment_us: seg.start_us,
                                batch_offset: b.offset as u64,
                                index: idx as u32,
                            });
                            return Ok(page);
                        }
                    }
                }
            } else {
                page.examined += end as u64;
            }
            records = std::mem::take(&mut decoded.records);
            refs = std::mem::take(&mut decoded.refs);
            symbols = std::mem::take(&mut decoded.symbols);
        }
    }
    Ok(page)
}

impl Page {
    /// The page as `/history` answers it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "records": self.records.iter().map(Record::to_json).collect::<Vec<_>>(),
            "cursor": self.cursor.map(|c| c.encode()),
            "examined": self.examined,
            "skipped_bytes": self.skipped_bytes,
        })
    }
}

/// Cuts `s` to `max` characters, marking the cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Records as a table, one line each (`shrike history` without `--json`): time, action,
/// score, listener, queue id, client IP, sender, first recipient (and how many more),
/// subject, and the symbols that scored most.
pub fn write_table(out: &mut impl std::io::Write, records: &[Record]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<19}  {:<15}  {:>7}  {:<6}  {:<12}  {:<15}  {:<24}  {:<24}  {:<24}  SYMBOLS",
        "TIME (UTC)", "ACTION", "SCORE", "VIA", "QUEUE-ID", "IP", "SENDER", "RCPT", "SUBJECT"
    )?;
    for r in records {
        let time = super::format_time(r.time_us);
        let time = time.get(..19).unwrap_or(&time).replace('T', " ");
        let score = if matches!(r.kind, Kind::Scan(_)) {
            format!("{:.2}", r.score)
        } else {
            "-".into()
        };
        let rcpt = match r.rcpt.len() {
            0 => String::new(),
            1 => r.rcpt[0].clone(),
            n => format!("{} +{}", r.rcpt[0], n - 1),
        };
        let mut symbols: Vec<&super::SymbolRecord> =
            r.symbols.iter().filter(|s| !s.shadow).collect();
        symbols.sort_by(|a, b| b.score.abs().total_cmp(&a.score.abs()));
        let symbols: Vec<String> = symbols
            .iter()
            .take(4)
            .map(|s| format!("{}({})", s.name, s.score))
            .collect();
        let action = match (r.kind, r.duplicate) {
            (Kind::LearnSpam | Kind::LearnHam, true) => format!("{} dup", r.kind.name()),
            _ => r.kind.name().to_string(),
        };
        writeln!(
            out,
            "{:<19}  {:<15}  {:>7}  {:<6}  {:<12}  {:<15}  {:<24}  {:<24}  {:<24}  {}",
            time,
            action,
            score,
            cut(&r.listener, 6),
            cut(r.queue_id.as_deref().unwrap_or("-"), 12),
            r.ip.map_or_else(|| "-".to_string(), |ip| cut(&ip.to_string(), 15)),
            cut(r.sender.as_deref().unwrap_or("-"), 24),
            cut(if rcpt.is_empty() { "-" } else { &rcpt }, 24),
            cut(r.subject.as_deref().unwrap_or("-"), 24),
            symbols.join(" ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::segment::tests::sample;
    use crate::history::writer::SEGMENT_EXT;
    use crate::history::{segment::encode_batch, segment::segment_header, HistoryConfig};
    use crate::verdict::Action;

    /// A history of `n` sample records in segments of `per_segment`, batches of 10.
    fn history(n: u64, per_segment: u64) -> (tempfile::TempDir, Vec<Record>) {
        let dir = tempfile::tempdir().unwrap();
        let records: Vec<Record> = (0..n).map(sample).collect();
        for chunk in records.chunks(per_segment as usize) {
            let start = chunk[0].time_us - 1;
            let mut bytes = segment_header().to_vec();
            for b in chunk.chunks(10) {
                bytes.extend(encode_batch(b));
            }
            std::fs::write(dir.path().join(format!("{start:020}.{SEGMENT_EXT}")), bytes).unwrap();
        }
        (dir, records)
    }

    fn q(pairs: &[(&str, &str)]) -> Query {
        Query::parse(pairs.iter().copied(), 1_790_000_100_000_000).unwrap()
    }

    fn all(dir: &Path, pairs: &[(&str, &str)]) -> Vec<Record> {
        let mut query = q(pairs);
        query.limit = usize::MAX;
        run(dir, &query).unwrap().records
    }

    type Case<'a> = (Vec<(&'a str, &'a str)>, Box<dyn Fn(&Record) -> bool + 'a>);

    /// Each filter alone returns exactly the records a plain check of the same condition keeps,
    /// newest first.
    #[test]
    fn every_filter() {
        let (dir, records) = history(300, 70);
        let expect = |keep: &dyn Fn(&Record) -> bool| -> Vec<Record> {
            records.iter().rev().filter(|r| keep(r)).cloned().collect()
        };
        let t = |i: usize| records[i].time_us;
        let from = format!("{}", t(100) as f64 / 1e6);
        let to = format!("{}", t(120) as f64 / 1e6);
        let cases: Vec<Case<'_>> = vec![
            (vec![], Box::new(|_| true)),
            (
                vec![("from", from.as_str())],
                Box::new(move |r| r.time_us >= t(100)),
            ),
            (
                vec![("to", to.as_str())],
                Box::new(move |r| r.time_us <= t(120)),
            ),
            (
                vec![("from", from.as_str()), ("to", to.as_str())],
                Box::new(move |r| r.time_us >= t(100) && r.time_us <= t(120)),
            ),
            (
                vec![("action", "reject")],
                Box::new(|r| r.kind == Kind::Scan(Action::Reject)),
            ),
            (
                vec![("action", "no_action,greylist")],
                Box::new(|r| matches!(r.kind, Kind::Scan(Action::NoAction | Action::Greylist))),
            ),
            (
                vec![("sender", "S3@Sender0.example")],
                Box::new(|r| r.sender.as_deref() == Some("s3@sender0.example")),
            ),
            (
                vec![("sender", "@sender2.example")],
                Box::new(|r| r.sender.as_deref().unwrap().ends_with("@sender2.example")),
            ),
            (
                vec![("rcpt", "<r4@example.org>")],
                Box::new(|r| r.rcpt.iter().any(|x| x == "r4@example.org")),
            ),
            (
                vec![("ip", "192.0.2.0/28")],
                Box::new(|r| {
                    r.ip.is_some_and(|ip| "192.0.2.0/28".parse::<IpNet>().unwrap().contains(&ip))
                }),
            ),
            (
                vec![("ip", "2001:db8::1")],
                Box::new(|r| r.ip == Some("2001:db8::1".parse().unwrap())),
            ),
            (
                vec![("message_id", "m42@example.com")],
                Box::new(|r| r.message_id.as_deref() == Some("<m42@example.com>")),
            ),
            (
                vec![("queue_id", "q000077")],
                Box::new(|r| r.queue_id.as_deref() == Some("Q000077")),
            ),
            (
                vec![("symbol", "rule_5")],
                Box::new(|r| r.symbols.iter().any(|s| s.name == "RULE_5")),
            ),
            (vec![("min_score", "50")], Box::new(|r| r.score >= 50.0)),
            (vec![("max_score", "-1.5")], Box::new(|r| r.score <= -1.5)),
            (
                vec![
                    ("action", "add_header"),
                    ("min_score", "20"),
                    ("symbol", "BAYES_SPAM"),
                ],
                Box::new(|r| r.kind == Kind::Scan(Action::AddHeader) && r.score >= 20.0),
            ),
            (vec![("symbol", "NO_SUCH_RULE")], Box::new(|_| false)),
            (vec![("sender", "nobody@nowhere")], Box::new(|_| false)),
        ];
        for (pairs, keep) in &cases {
            let want = expect(keep.as_ref());
            let got = all(dir.path(), pairs);
            assert_eq!(got, want, "{pairs:?}");
            let nothing = ["NO_SUCH_RULE", "nobody@nowhere"];
            if !pairs.iter().any(|(_, v)| nothing.contains(v)) {
                assert!(!want.is_empty(), "{pairs:?} selects something");
                assert!(
                    want.len() < records.len() || pairs.is_empty(),
                    "{pairs:?} selects"
                );
            }
        }
    }

    /// Pages of any size, followed by their cursors, are every matching record once, newest
    /// first, across batch and segment boundaries.
    #[test]
    fn cursor_paging() {
        let (dir, records) = history(257, 64);
        for (limit, pairs) in [
            (1usize, vec![]),
            (7, vec![]),
            (10, vec![]),
            (64, vec![]),
            (300, vec![]),
            (3, vec![("action", "reject")]),
        ] {
            let mut got = Vec::new();
            let mut cursor: Option<String> = None;
            let mut pages = 0;
            loop {
                let mut p: Vec<(&str, &str)> = pairs.clone();
                let limit_s = limit.to_string();
                p.push(("limit", &limit_s));
                if let Some(c) = &cursor {
                    p.push(("cursor", c));
                }
                let page = run(dir.path(), &q(&p)).unwrap();
                assert!(page.records.len() <= limit);
                got.extend(page.records);
                pages += 1;
                match page.cursor {
                    Some(c) => cursor = Some(c.encode()),
                    None => break,
                }
                assert!(pages < 1000);
            }
            let want: Vec<Record> = if pairs.is_empty() {
                records.iter().rev().cloned().collect()
            } else {
                records
                    .iter()
                    .rev()
                    .filter(|r| r.kind == Kind::Scan(Action::Reject))
                    .cloned()
                    .collect()
            };
            assert_eq!(got, want, "limit {limit} {pairs:?}");
        }
    }

    #[test]
    fn parameters_are_checked() {
        let now = 1_000_000_000_000_000;
        for (pairs, msg) in [
            (vec![("bogus", "1")], "unknown parameter \"bogus\""),
            (
                vec![("from", "yesterday-ish")],
                "from: not a time (RFC 3339",
            ),
            (vec![("action", "nuke")], "action: not an action"),
            (
                vec![("ip", "300.1.1.1")],
                "ip: not an address or CIDR range",
            ),
            (vec![("min_score", "NaN")], "min_score: not a number"),
            (vec![("limit", "0")], "limit: not a positive integer"),
            (
                vec![("cursor", "v2.1.2.3")],
                "cursor: not a cursor of this history",
            ),
        ] {
            let e = Query::parse(pairs, now).unwrap_err().to_string();
            assert!(e.starts_with(msg), "{e}");
        }
        assert_eq!(parse_time("2h", now), Some(now - 7_200_000_000));
        assert_eq!(parse_time("2h ago", now), Some(now - 7_200_000_000));
        assert_eq!(parse_time("1700000000", now), Some(1_700_000_000_000_000));
        assert_eq!(
            parse_time("2023-11-14T22:13:20Z", now),
            Some(1_700_000_000_000_000)
        );
        assert_eq!(parse_time("2023-11-14", now), Some(1_699_920_000_000_000));
        let c = Cursor {
            segment_us: 1_790_000_000_000_000,
            batch_offset: 123_456,
            index: 9,
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
    }

    /// With `privacy = "hash"` an address filter finds the hashed records, and a missing
    /// directory is an empty history rather than an error.
    #[test]
    fn hashed_addresses_are_found() {
        let base = tempfile::tempdir().unwrap();
        let config = HistoryConfig {
            privacy: crate::history::Privacy::Hash,
            ..HistoryConfig::default()
        };
        let (recorder, writer) = crate::history::open(base.path(), &config).unwrap();
        for i in 0..20 {
            recorder.record(sample(i));
        }
        drop(writer);
        let dir = base.path().join(crate::history::DIR);
        let got = all(&dir, &[("sender", "s3@sender0.example")]);
        let want: Vec<u64> = (0..20)
            .filter(|i: &u64| i % 7 == 3 && i.is_multiple_of(3))
            .collect();
        assert_eq!(got.len(), want.len());
        assert!(got
            .iter()
            .all(|r| r.sender.as_deref().unwrap().starts_with("h:")));
        assert!(all(&dir, &[("rcpt", "all@example.org")]).len() == 20);
        // A domain is found by its hash too.
        assert_eq!(all(&dir, &[("rcpt", "@Example.org")]).len(), 20);
        let sender0: Vec<u64> = (0..20).filter(|i: &u64| i.is_multiple_of(3)).collect();
        assert_eq!(
            all(&dir, &[("sender", "@sender0.example")]).len(),
            sender0.len()
        );
        assert!(all(&dir, &[("sender", "@example")]).is_empty());
        let missing = run(&base.path().join("nope"), &Query::default()).unwrap();
        assert!(missing.records.is_empty());
    }
}
