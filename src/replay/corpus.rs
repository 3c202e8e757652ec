//! The replay corpus: message files, maildirs and mboxes, with their labels, envelopes and
//! arrival times, in arrival order.
//!
//! Owns: finding messages under the given paths, labels (by folder or a CSV), arrival times
//! (from the mailbox or headers, or spread over a period in a seeded order). Never touches: the
//! pipeline, the store.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use mail_parser::{HeaderName, MessageParser};
use serde::Serialize;

use crate::message::date::received_time_mail_parser;
use crate::message::Envelope;
use crate::shingle::hash_bytes;

/// What a message is known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    Spam,
    Ham,
    HardHam,
    Unlabeled,
}

impl Label {
    pub const ALL: [Label; 4] = [Label::Spam, Label::Ham, Label::HardHam, Label::Unlabeled];

    pub fn as_str(self) -> &'static str {
        match self {
            Label::Spam => "spam",
            Label::Ham => "ham",
            Label::HardHam => "hard_ham",
            Label::Unlabeled => "unlabeled",
        }
    }

    /// A label from a folder name or a CSV cell (`easy_ham` is ham, as in the SpamAssassin
    /// corpus).
    pub fn parse(s: &str) -> Option<Label> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "spam" => Some(Label::Spam),
            "ham" | "easy_ham" => Some(Label::Ham),
            "hard_ham" | "hardham" => Some(Label::HardHam),
            _ => None,
        }
    }

    /// Ham of either kind: mail that must not be lost.
    pub fn is_ham(self) -> bool {
        matches!(self, Label::Ham | Label::HardHam)
    }
}

/// Where a message's bytes are.
#[derive(Debug)]
pub enum Source {
    /// A file holding one message (read again when needed, so a large corpus is not held).
    File(PathBuf),
    /// One message cut from an mbox.
    Bytes(Vec<u8>),
}

/// One message of the stream.
#[derive(Debug)]
pub struct Item {
    /// The path as given, with `#N` (1-based) for the messages of a multi-message mbox.
    pub name: String,
    /// The name relative to the corpus path it was found under: what seeds hash, so a corpus
    /// replays the same wherever it is unpacked.
    pub key: String,
    pub label: Label,
    /// Simulated arrival, Unix seconds.
    pub arrival: u64,
    pub envelope: Envelope,
    pub source: Source,
}

impl Item {
    pub fn raw(&self) -> std::io::Result<Cow<'_, [u8]>> {
        match &self.source {
            Source::File(path) => std::fs::read(path).map(Cow::Owned),
            Source::Bytes(bytes) => Ok(Cow::Borrowed(bytes)),
        }
    }
}

/// How arrival times are chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arrival {
    /// From the mbox `From ` line, else the topmost dated Received header, else Date.
    Headers,
    /// Evenly over `period_secs` from `start`, in an order fixed by `seed`.
    Spread {
        start: u64,
        period_secs: u64,
        seed: u64,
    },
}

/// A loaded corpus, in arrival order.
#[derive(Debug, Default)]
pub struct Corpus {
    pub items: Vec<Item>,
    /// Files that were not read, with the reason.
    pub skipped: Vec<(String, String)>,
    /// Messages with no usable time in their headers, placed after their predecessor in input
    /// order.
    pub undated: usize,
}

/// Why a corpus cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("labels {0}: {1}")]
    Labels(String, String),
    #[error("no messages found under {0}")]
    Empty(String),
}

/// Arrival times this far from the corpus median are a sender's broken clock, not arrival.
const TIME_OUTLIER_SECS: u64 = 2 * 365 * 86_400;

/// Finds every message under `paths` (files, directories walked recursively, maildirs, mboxes),
/// labels it (from `labels` when given, else from the nearest folder named spam, ham, easy_ham
/// or hard_ham) and orders the stream by arrival.
pub fn load(
    paths: &[PathBuf],
    labels: Option<&Path>,
    arrival: &Arrival,
) -> Result<Corpus, CorpusError> {
    let by_file = match labels {
        Some(csv) => read_labels(csv)?,
        None => HashMap::new(),
    };
    let mut corpus = Corpus::default();
    let mut times: Vec<Option<u64>> = Vec::new();
    for path in paths {
        let mut files = Vec::new();
        collect(path, &mut files).map_err(|e| CorpusError::Io(path.display().to_string(), e))?;
        for file in files {
            let bytes = match std::fs::read(&file) {
                Ok(b) => b,
                Err(e) => {
                    corpus
                        .skipped
                        .push((file.display().to_string(), e.to_string()));
                    continue;
                }
            };
            if bytes.iter().all(u8::is_ascii_whitespace) {
                corpus
                    .skipped
                    .push((file.display().to_string(), "empty".into()));
                continue;
            }
            let label = label_of(&file, &by_file);
            let name = file.display().to_string();
            let mut from_line = None;
            if bytes.starts_with(b"From ") {
                let messages: Vec<_> = mail_parser::mailbox::mbox::MessageIterator::new(&bytes[..])
                    .filter_map(Result::ok)
                    .collect();
                if messages.len() > 1 {
                    for (i, m) in messages.into_iter().enumerate() {
                        let from_line = Some(m.internal_date()).filter(|&t| t > 0);
                        let contents = m.unwrap_contents();
                        let (time, envelope) = headers_of(&contents);
                        times.push(from_line.or(time));
                        corpus.items.push(Item {
                            name: format!("{name}#{}", i + 1),
                            key: format!("{}#{}", relative(path, &file), i + 1),
                            label,
                            arrival: 0,
                            envelope,
                            source: Source::Bytes(contents),
                        });
                    }
                    continue;
                }
                // One message after a `From ` line: a file cut from a mailbox (the pipeline
                // drops the line itself).
                from_line = messages
                    .first()
                    .map(|m| m.internal_date())
                    .filter(|&t| t > 0);
            }
            let (time, envelope) = headers_of(&bytes);
            times.push(from_line.or(time));
            corpus.items.push(Item {
                key: relative(path, &file),
                name,
                label,
                arrival: 0,
                envelope,
                source: Source::File(file),
            });
        }
    }
    if corpus.items.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(CorpusError::Empty(names.join(", ")));
    }
    match *arrival {
        Arrival::Headers => {
            corpus.undated = assign_header_times(&mut corpus.items, &times);
            // Stable: equal times keep input order.
            corpus.items.sort_by_key(|item| item.arrival);
        }
        Arrival::Spread {
            start,
            period_secs,
            seed,
        } => {
            let seed = seed.to_le_bytes();
            corpus.items.sort_by_cached_key(|item| {
                let mut key = seed.to_vec();
                key.extend_from_slice(item.key.as_bytes());
                (hash_bytes(&key), item.key.clone())
            });
            let n = corpus.items.len() as u128;
            for (i, item) in corpus.items.iter_mut().enumerate() {
                item.arrival = start + (i as u128 * u128::from(period_secs) / n) as u64;
            }
        }
    }
    Ok(corpus)
}

/// `file` relative to the corpus path `root` it was found under (the file name when `root` is
/// the file itself).
fn relative(root: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(root)
        .ok()
        .filter(|r| !r.as_os_str().is_empty());
    let rel = rel
        .or_else(|| file.file_name().map(Path::new))
        .unwrap_or(file);
    rel.display().to_string()
}

/// Header times with outliers dropped; a message without one arrives with its predecessor in
/// input order (or with the earliest message). Returns how many had none.
fn assign_header_times(items: &mut [Item], times: &[Option<u64>]) -> usize {
    let mut known: Vec<u64> = times.iter().flatten().copied().collect();
    known.sort_unstable();
    let median = known.get(known.len() / 2).copied();
    let usable = |t: Option<u64>| -> Option<u64> {
        let (t, m) = (t?, median?);
        (t.abs_diff(m) <= TIME_OUTLIER_SECS).then_some(t)
    };
    let earliest = times.iter().filter_map(|&t| usable(t)).min().unwrap_or(0);
    let mut undated = 0;
    let mut previous = earliest;
    for (item, &t) in items.iter_mut().zip(times) {
        item.arrival = match usable(t) {
            Some(t) => t,
            None => {
                undated += 1;
                previous
            }
        };
        previous = item.arrival;
    }
    undated
}

/// The arrival time (topmost dated Received header, else Date) and the envelope the delivering
/// MTA recorded (Return-Path, Delivered-To / X-Original-To).
fn headers_of(raw: &[u8]) -> (Option<u64>, Envelope) {
    let parser = MessageParser::new()
        .header_raw(HeaderName::Received)
        .header_date(HeaderName::Date);
    let Some(message) = parser.parse_headers(raw) else {
        return (None, Envelope::default());
    };
    let positive = |t: i64| u64::try_from(t).ok().filter(|&t| t > 0);
    let received = (message.headers().iter())
        .filter(|h| h.name == HeaderName::Received)
        .filter_map(|h| raw.get(h.offset_start as usize..h.offset_end as usize))
        .find_map(|value| received_time_mail_parser(value).and_then(positive));
    let time = received.or_else(|| message.date().and_then(|d| positive(d.to_timestamp())));
    let address = |name: &str| -> Option<String> {
        let raw = message.header_raw(name)?;
        let a = raw
            .trim()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim();
        (a.contains('@') && !a.contains(char::is_whitespace)).then(|| a.to_string())
    };
    let rcpt = address("Delivered-To").or_else(|| address("X-Original-To"));
    let envelope = Envelope {
        client_ip: None,
        helo: None,
        mail_from: address("Return-Path"),
        rcpt_to: rcpt.into_iter().collect(),
        ..Envelope::default()
    };
    (time, envelope)
}

/// Files under `path` in name order; skips hidden files, notes (README, *.md, *.csv, *.json)
/// and maildir `tmp/` folders.
fn collect(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for entry in entries {
        let Some(name) = entry.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let lower = name.to_ascii_lowercase();
        if name.starts_with('.')
            || lower.starts_with("readme")
            || [".md", ".csv", ".json", ".txt~"]
                .iter()
                .any(|ext| lower.ends_with(ext))
        {
            continue;
        }
        if entry.is_dir() {
            if name == "tmp" && entry.with_file_name("cur").is_dir() {
                continue;
            }
            collect(&entry, out)?;
        } else {
            out.push(entry);
        }
    }
    Ok(())
}

fn label_of(file: &Path, by_file: &HashMap<PathBuf, Label>) -> Label {
    if !by_file.is_empty() {
        let key = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        if let Some(&label) = by_file.get(&key) {
            return label;
        }
    }
    file.ancestors()
        .skip(1)
        .filter_map(|a| a.file_name()?.to_str())
        .find_map(Label::parse)
        .unwrap_or(Label::Unlabeled)
}

/// A CSV of `file,label` rows (a header row is allowed); files relative to the CSV's folder.
fn read_labels(csv_path: &Path) -> Result<HashMap<PathBuf, Label>, CorpusError> {
    let name = csv_path.display().to_string();
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_path(csv_path)
        .map_err(|e| CorpusError::Labels(name.clone(), e.to_string()))?;
    let base = csv_path.parent().unwrap_or(Path::new("."));
    let mut out = HashMap::new();
    for (line, record) in reader.records().enumerate() {
        let record = record.map_err(|e| CorpusError::Labels(name.clone(), e.to_string()))?;
        let (Some(file), Some(label)) = (record.get(0), record.get(1)) else {
            return Err(CorpusError::Labels(
                name,
                format!("line {}: expected file,label", line + 1),
            ));
        };
        let Some(label) = Label::parse(label) else {
            if line == 0 {
                continue; // a header row
            }
            return Err(CorpusError::Labels(
                name,
                format!(
                    "line {}: unknown label {label:?} (spam, ham, hard_ham)",
                    line + 1
                ),
            ));
        };
        let path = base.join(file);
        let key = std::fs::canonicalize(&path).unwrap_or(path);
        out.insert(key, label);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, body: &str) -> PathBuf {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
        path
    }

    fn msg(date: &str, subject: &str) -> String {
        format!(
            "Return-Path: <s@example.com>\nDelivered-To: r@example.org\nFrom: s@example.com\n\
             Date: {date}\nSubject: {subject}\n\nbody\n"
        )
    }

    #[test]
    fn folders_label_and_dates_order() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        write(
            &dir,
            "spam/a.eml",
            &msg("Tue, 3 Sep 2002 10:00:00 +0000", "late"),
        );
        write(
            &dir,
            "ham/b.eml",
            &msg("Mon, 2 Sep 2002 10:00:00 +0000", "early"),
        );
        write(
            &dir,
            "hard_ham/c",
            &msg("Mon, 2 Sep 2002 11:00:00 +0000", "mid"),
        );
        write(
            &dir,
            "other/d.eml",
            &msg("Wed, 4 Sep 2002 10:00:00 +0000", "unl"),
        );
        write(&dir, "README.md", "notes");
        let corpus = load(std::slice::from_ref(&dir), None, &Arrival::Headers).unwrap();
        let got: Vec<(Label, &str)> = corpus
            .items
            .iter()
            .map(|i| (i.label, i.name.rsplit('/').next().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                (Label::Ham, "b.eml"),
                (Label::HardHam, "c"),
                (Label::Spam, "a.eml"),
                (Label::Unlabeled, "d.eml")
            ]
        );
        assert_eq!(corpus.items[0].arrival, 1_030_960_800);
        let env = &corpus.items[0].envelope;
        assert_eq!(env.mail_from.as_deref(), Some("s@example.com"));
        assert_eq!(env.rcpt_to, ["r@example.org"]);
    }

    #[test]
    fn received_time_wins_over_date_and_outliers_are_undated() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        write(
            &dir,
            "ham/a",
            "Received: from x by y; Mon, 2 Sep 2002 12:00:00 +0000\nDate: Mon, 2 Sep 2002 09:00:00 +0000\n\nx\n",
        );
        write(&dir, "ham/b", &msg("Mon, 2 Sep 2002 13:00:00 +0000", "b"));
        write(&dir, "ham/c", &msg("Mon, 2 Sep 2002 14:00:00 +0000", "c"));
        // A spammer's clock decades off, then no date at all.
        write(&dir, "ham/d", &msg("Sat, 1 Jan 2039 00:00:00 +0000", "d"));
        write(&dir, "ham/e", "Subject: no date\n\nx\n");
        let corpus = load(std::slice::from_ref(&dir), None, &Arrival::Headers).unwrap();
        assert_eq!(corpus.undated, 2);
        let a = corpus
            .items
            .iter()
            .find(|i| i.name.ends_with("/a"))
            .unwrap();
        assert_eq!(a.arrival, 1_030_968_000);
        // Undated messages follow their predecessor in input order (c, then d).
        let c = corpus
            .items
            .iter()
            .find(|i| i.name.ends_with("/c"))
            .unwrap();
        for n in ["/d", "/e"] {
            let i = corpus.items.iter().find(|i| i.name.ends_with(n)).unwrap();
            assert_eq!(i.arrival, c.arrival, "{n}");
        }
    }

    #[test]
    fn mbox_splits_and_csv_labels() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let mbox = "From a@x Mon Sep  2 10:00:00 2002\nSubject: one\n\nbody one\n>From quoted\n\n\
                    From b@x Mon Sep  2 09:00:00 2002\nSubject: two\n\nbody two\n";
        write(&dir, "box.mbox", mbox);
        write(
            &dir,
            "x/single.eml",
            &msg("Mon, 2 Sep 2002 11:00:00 +0000", "s"),
        );
        let csv = write(&dir, "labels.csv", "file,label\nx/single.eml,spam\n");
        let corpus = load(
            &[dir.join("box.mbox"), dir.join("x")],
            Some(&csv),
            &Arrival::Headers,
        )
        .unwrap();
        let names: Vec<&str> = corpus.items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names.len(), 3);
        assert!(names[0].ends_with("box.mbox#2"), "{names:?}");
        assert!(names[1].ends_with("box.mbox#1"));
        assert_eq!(corpus.items[2].label, Label::Spam);
        assert_eq!(corpus.items[0].label, Label::Unlabeled);
        let one = corpus.items[1].raw().unwrap();
        assert!(String::from_utf8_lossy(&one).contains("From quoted"));
        let bad = write(&dir, "bad.csv", "x/single.eml,spammy\nx/single.eml,maybe\n");
        let err = load(&[dir.join("x")], Some(&bad), &Arrival::Headers).unwrap_err();
        assert!(err.to_string().contains("unknown label"), "{err}");
    }

    #[test]
    fn spread_is_stable_for_a_seed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        for i in 0..20 {
            write(
                &dir,
                &format!("ham/{i:02}"),
                &msg("Mon, 2 Sep 2002 11:00:00 +0000", "s"),
            );
        }
        let spread = |seed| Arrival::Spread {
            start: 1_000,
            period_secs: 2_000,
            seed,
        };
        let order = |seed| -> Vec<String> {
            let c = load(std::slice::from_ref(&dir), None, &spread(seed)).unwrap();
            assert_eq!(c.items[0].arrival, 1_000);
            assert_eq!(c.items[19].arrival, 1_000 + 19 * 100);
            c.items.into_iter().map(|i| i.name).collect()
        };
        assert_eq!(order(1), order(1));
        assert_ne!(order(1), order(2));
    }
}
