//! What a replay found: detection and false positives per label, a score-threshold table,
//! per-rule hits by label, detection over time, throughput; and the differences between two
//! rule sets. As text tables, JSON, and a CSV with one row per message.
//!
//! Owns: the figures and their rendering. Never touches: the pipeline.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::sync::Arc;

use serde::Serialize;

use super::{Corpus, Feedback, Item, Label, Lane, Outcome};
use crate::store::Counter;
use crate::verdict::{Action, VerdictConfig};

/// Score thresholds of the threshold table, besides the configured ones.
const SCORE_GRID: [f64; 11] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 15.0, 20.0];

/// Whether an action keeps a message from the inbox (the add-header threshold and beyond).
pub fn is_caught(action: Action) -> bool {
    action >= Action::AddHeader
}

/// Whether an action refuses or drops a message (the reject threshold, and the shadow ban).
pub fn is_rejected(action: Action) -> bool {
    matches!(action, Action::Reject | Action::Discard)
}

/// A share in percent of `total`, 0 for an empty total.
fn pct(n: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        (n as f64 * 1e5 / total as f64).round() / 1e3
    }
}

/// Figures of one rule set's pass.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub messages: usize,
    /// Messages that could not be read (not counted below).
    pub errors: usize,
    pub undated: usize,
    pub skipped_files: usize,
    /// Simulated span of the stream, RFC 3339.
    pub from: String,
    pub to: String,
    pub elapsed_secs: f64,
    pub messages_per_sec: f64,
    pub complaints: u64,
    pub rescues: u64,
    pub store_keys: usize,
    pub swept_keys: u64,
    /// Messages the classifier learned, per class.
    pub classifier_spam: u64,
    pub classifier_ham: u64,
    pub labels: Vec<LabelSummary>,
    pub thresholds: Vec<ThresholdRow>,
    /// How well the scores separate spam from ham and hard ham (1 − AUC, spam caught at a
    /// fixed false-positive budget), wherever the thresholds sit.
    pub separation: Vec<super::roc::Separation>,
    pub rules: Vec<RuleRow>,
    pub over_time: Vec<Slice>,
}

/// One label's actions.
#[derive(Debug, Serialize)]
pub struct LabelSummary {
    pub label: Label,
    pub messages: usize,
    pub actions: BTreeMap<&'static str, usize>,
    /// At or above add header: detection for spam, false positives for ham.
    pub caught: usize,
    pub caught_pct: f64,
    pub rejected: usize,
    pub rejected_pct: f64,
}

/// Share of each label scoring at least `score`.
#[derive(Debug, Serialize)]
pub struct ThresholdRow {
    pub score: f64,
    /// Which configured action starts here, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<&'static str>,
    pub spam_pct: f64,
    pub ham_pct: f64,
    pub hard_ham_pct: f64,
}

/// One symbol's hits by label.
#[derive(Debug, Serialize)]
pub struct RuleRow {
    pub symbol: String,
    /// Mean score when it hit.
    pub mean_score: f64,
    pub spam: usize,
    pub ham: usize,
    pub hard_ham: usize,
    pub unlabeled: usize,
    /// A positive score that hits ham (of either kind) at least as often, as a share of the
    /// label's messages, as it hits spam.
    pub misfires: bool,
}

/// One stretch of the stream (equal message counts).
#[derive(Debug, Serialize)]
pub struct Slice {
    pub from: String,
    pub to: String,
    pub spam: usize,
    pub spam_caught_pct: f64,
    pub ham: usize,
    pub ham_caught_pct: f64,
    pub hard_ham: usize,
    pub hard_ham_caught_pct: f64,
    /// Feedback filed about the messages of this stretch.
    pub complaints: usize,
    pub rescues: usize,
}

fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

impl Summary {
    pub fn new(corpus: &Corpus, lane: &Lane, verdict: &VerdictConfig, slices: usize) -> Summary {
        let items: Vec<&Item> = corpus.items.iter().collect();
        let mut summary = Summary::of(&items, lane, verdict, slices);
        summary.undated = corpus.undated;
        summary.skipped_files = corpus.skipped.len();
        summary
    }

    /// The figures of a pass that scored `items` (in arrival order), `lane.outcomes[i]` being
    /// what `items[i]` got: a whole corpus, or the messages one cross-validation fold scored.
    pub fn of(items: &[&Item], lane: &Lane, verdict: &VerdictConfig, slices: usize) -> Summary {
        let scanned = || {
            items
                .iter()
                .copied()
                .zip(&lane.outcomes)
                .filter(|(_, o)| o.error.is_none())
        };
        let labels = Label::ALL
            .iter()
            .filter_map(|&label| {
                let of: Vec<&Outcome> = scanned()
                    .filter(|(i, _)| i.label == label)
                    .map(|(_, o)| o)
                    .collect();
                if of.is_empty() && label == Label::Unlabeled {
                    return None;
                }
                let mut actions = BTreeMap::new();
                for o in &of {
                    *actions.entry(o.action.as_str()).or_insert(0) += 1;
                }
                let caught = of.iter().filter(|o| is_caught(o.action)).count();
                let rejected = of.iter().filter(|o| is_rejected(o.action)).count();
                Some(LabelSummary {
                    label,
                    messages: of.len(),
                    actions,
                    caught,
                    caught_pct: pct(caught, of.len()),
                    rejected,
                    rejected_pct: pct(rejected, of.len()),
                })
            })
            .collect();

        let mut grid: Vec<(f64, Option<&'static str>)> =
            SCORE_GRID.iter().map(|&s| (s, None)).collect();
        for (score, action) in [
            (Some(verdict.greylist), Action::Greylist),
            (Some(verdict.add_header), Action::AddHeader),
            (verdict.rewrite_subject, Action::RewriteSubject),
            (verdict.soft_reject, Action::SoftReject),
            (Some(verdict.reject), Action::Reject),
        ] {
            if let Some(score) = score {
                grid.retain(|(s, _)| *s != score);
                grid.push((score, Some(action.as_str())));
            }
        }
        grid.sort_by(|a, b| a.0.total_cmp(&b.0));
        let share = |label: Label, score: f64| {
            let of: Vec<f64> = scanned()
                .filter(|(i, _)| i.label == label)
                .map(|(_, o)| o.score)
                .collect();
            pct(of.iter().filter(|&&s| s >= score).count(), of.len())
        };
        let thresholds = grid
            .into_iter()
            .map(|(score, action)| ThresholdRow {
                score,
                action,
                spam_pct: share(Label::Spam, score),
                ham_pct: share(Label::Ham, score),
                hard_ham_pct: share(Label::HardHam, score),
            })
            .collect();
        let scores = |label: Label| -> Vec<f64> {
            scanned()
                .filter(|(i, _)| i.label == label)
                .map(|(_, o)| o.score)
                .collect()
        };
        let separation = super::roc::separation(
            &scores(Label::Spam),
            &scores(Label::Ham),
            &scores(Label::HardHam),
        );

        let mut per_label = [0usize; 4];
        for (item, _) in scanned() {
            per_label[item.label as usize] += 1;
        }
        let hams = per_label[Label::Ham as usize] + per_label[Label::HardHam as usize];
        let spams = per_label[Label::Spam as usize];
        let mut by_symbol: BTreeMap<&str, (f64, [usize; 4])> = BTreeMap::new();
        for (item, o) in scanned() {
            for (name, score) in &o.symbols {
                let e = by_symbol.entry(name).or_insert((0.0, [0; 4]));
                e.0 += score;
                e.1[item.label as usize] += 1;
            }
        }
        let mut rules: Vec<RuleRow> = by_symbol
            .into_iter()
            .map(|(symbol, (sum, hits))| {
                let total: usize = hits.iter().sum();
                let mean_score = (sum / total as f64 * 1e3).round() / 1e3;
                RuleRow {
                    symbol: symbol.to_string(),
                    mean_score,
                    spam: hits[Label::Spam as usize],
                    ham: hits[Label::Ham as usize],
                    hard_ham: hits[Label::HardHam as usize],
                    unlabeled: hits[Label::Unlabeled as usize],
                    misfires: mean_score > 0.0
                        && hams > 0
                        && (hits[Label::Ham as usize] + hits[Label::HardHam as usize])
                            * spams.max(1)
                            >= hits[Label::Spam as usize].max(1) * hams,
                }
            })
            .collect();
        rules.sort_by(|a, b| {
            let total = |r: &RuleRow| r.spam + r.ham + r.hard_ham + r.unlabeled;
            total(b)
                .cmp(&total(a))
                .then_with(|| a.symbol.cmp(&b.symbol))
        });

        let n = items.len();
        let slices = slices.clamp(1, n.max(1));
        let over_time = (0..slices)
            .map(|k| {
                let range = k * n / slices..(k + 1) * n / slices;
                let part: Vec<(&Item, &Outcome)> = items[range.clone()]
                    .iter()
                    .copied()
                    .zip(&lane.outcomes[range])
                    .filter(|(_, o)| o.error.is_none())
                    .collect();
                let count = |label: Label| part.iter().filter(|(i, _)| i.label == label).count();
                let caught = |label: Label| {
                    part.iter()
                        .filter(|(i, o)| i.label == label && is_caught(o.action))
                        .count()
                };
                let filed = |c: Counter| part.iter().filter(|(_, o)| o.feedback == Some(c)).count();
                let (spam, ham, hard_ham) =
                    (count(Label::Spam), count(Label::Ham), count(Label::HardHam));
                Slice {
                    from: part
                        .first()
                        .map_or_else(String::new, |(i, _)| rfc3339(i.arrival)),
                    to: part
                        .last()
                        .map_or_else(String::new, |(i, _)| rfc3339(i.arrival)),
                    spam,
                    spam_caught_pct: pct(caught(Label::Spam), spam),
                    ham,
                    ham_caught_pct: pct(caught(Label::Ham), ham),
                    hard_ham,
                    hard_ham_caught_pct: pct(caught(Label::HardHam), hard_ham),
                    complaints: filed(Counter::Complaint),
                    rescues: filed(Counter::Rescue),
                }
            })
            .collect();

        let secs = lane.elapsed.as_secs_f64();
        Summary {
            messages: n,
            errors: lane.outcomes.iter().filter(|o| o.error.is_some()).count(),
            undated: 0,
            skipped_files: 0,
            from: items
                .first()
                .map_or_else(String::new, |i| rfc3339(i.arrival)),
            to: items
                .last()
                .map_or_else(String::new, |i| rfc3339(i.arrival)),
            elapsed_secs: (secs * 1e3).round() / 1e3,
            messages_per_sec: if secs > 0.0 {
                (n as f64 / secs).round()
            } else {
                0.0
            },
            complaints: lane.complaints,
            rescues: lane.rescues,
            store_keys: lane.store_keys,
            swept_keys: lane.swept_keys,
            classifier_spam: lane.learned.0,
            classifier_ham: lane.learned.1,
            labels,
            thresholds,
            separation,
            rules,
            over_time,
        }
    }

    /// The summary as text tables.
    pub fn write_text(&self, out: &mut dyn Write, feedback: &Feedback) -> io::Result<()> {
        let count = |l: Label| {
            self.labels
                .iter()
                .find(|s| s.label == l)
                .map_or(0, |s| s.messages)
        };
        writeln!(
            out,
            "replay: {} messages ({} spam, {} ham, {} hard ham{}) arriving {} .. {}",
            self.messages,
            count(Label::Spam),
            count(Label::Ham),
            count(Label::HardHam),
            match count(Label::Unlabeled) {
                0 => String::new(),
                u => format!(", {u} unlabeled"),
            },
            self.from,
            self.to
        )?;
        writeln!(
            out,
            "time: {:.2} s, {} messages/s (one thread); store: {} keys, {} swept",
            self.elapsed_secs, self.messages_per_sec, self.store_keys, self.swept_keys
        )?;
        writeln!(
            out,
            "feedback: {} complaints, {} rescues (complain {}%, rescue {}%, after ~{})",
            self.complaints,
            self.rescues,
            feedback.complain * 100.0,
            feedback.rescue * 100.0,
            humantime::format_duration(std::time::Duration::from_secs(feedback.delay_secs))
        )?;
        writeln!(
            out,
            "classifier: learned {} spam, {} ham (training on {})",
            self.classifier_spam,
            self.classifier_ham,
            match feedback.train {
                super::Train::Feedback => "complaints and rescues",
                super::Train::All => "every label",
            }
        )?;
        if self.errors + self.undated + self.skipped_files > 0 {
            writeln!(
                out,
                "notes: {} unreadable, {} skipped files, {} without a usable date (placed after their neighbour)",
                self.errors, self.skipped_files, self.undated
            )?;
        }
        writeln!(out)?;
        self.write_tables(out)
    }

    /// The tables of the text form: actions by label, score thresholds, rule hits by label,
    /// detection over time.
    pub fn write_tables(&self, out: &mut dyn Write) -> io::Result<()> {
        let actions: Vec<&'static str> = Action::ALL
            .iter()
            .map(|a| a.as_str())
            .filter(|a| {
                matches!(*a, "no action" | "greylist" | "add header" | "reject")
                    || self.labels.iter().any(|l| l.actions.contains_key(a))
            })
            .collect();
        let mut header = vec!["label".to_string(), "messages".to_string()];
        header.extend(actions.iter().map(|a| a.to_string()));
        header.extend(["≥ add header".to_string(), "rejected".to_string()]);
        let mut rows = vec![header];
        for l in &self.labels {
            let mut row = vec![l.label.as_str().to_string(), l.messages.to_string()];
            row.extend(
                actions
                    .iter()
                    .map(|a| l.actions.get(a).copied().unwrap_or(0).to_string()),
            );
            row.push(format!("{} ({:.1}%)", l.caught, l.caught_pct));
            row.push(format!("{} ({:.1}%)", l.rejected, l.rejected_pct));
            rows.push(row);
        }
        table(out, &rows)?;
        writeln!(out)?;

        let mut rows = vec![vec![
            "score ≥".to_string(),
            "spam".to_string(),
            "ham".to_string(),
            "hard ham".to_string(),
            String::new(),
        ]];
        for t in &self.thresholds {
            rows.push(vec![
                format!("{}", t.score),
                format!("{:.1}%", t.spam_pct),
                format!("{:.2}%", t.ham_pct),
                format!("{:.1}%", t.hard_ham_pct),
                t.action.map_or_else(String::new, |a| format!("← {a}")),
            ]);
        }
        table(out, &rows)?;
        writeln!(out)?;

        if !self.separation.is_empty() {
            let mut rows = vec![vec![
                "spam against".to_string(),
                "1 - AUC".to_string(),
                "false positives".to_string(),
                "spam caught".to_string(),
                "from score".to_string(),
            ]];
            for s in &self.separation {
                rows.push(vec![
                    s.against.to_string(),
                    format!("{:.4}%", s.one_minus_auc_pct),
                    format!("≤ {}%", s.budget_pct),
                    format!("{:.1}%", s.spam_caught_pct),
                    if s.threshold.is_finite() {
                        format!("{:.2}", s.threshold)
                    } else {
                        "any".into()
                    },
                ]);
            }
            table(out, &rows)?;
            writeln!(out)?;
        }

        let mut rows = vec![vec![
            "symbol".to_string(),
            "mean score".to_string(),
            "spam".to_string(),
            "ham".to_string(),
            "hard ham".to_string(),
            "unlabeled".to_string(),
            String::new(),
        ]];
        for r in &self.rules {
            rows.push(vec![
                r.symbol.clone(),
                format!("{:.2}", r.mean_score),
                r.spam.to_string(),
                r.ham.to_string(),
                r.hard_ham.to_string(),
                r.unlabeled.to_string(),
                if r.misfires {
                    "misfires".into()
                } else {
                    String::new()
                },
            ]);
        }
        table(out, &rows)?;
        writeln!(out)?;

        let mut rows = vec![vec![
            "from".to_string(),
            "to".to_string(),
            "spam".to_string(),
            "caught".to_string(),
            "ham".to_string(),
            "ham caught".to_string(),
            "hard ham".to_string(),
            "caught".to_string(),
            "complaints".to_string(),
            "rescues".to_string(),
        ]];
        for s in &self.over_time {
            rows.push(vec![
                s.from.get(..10).unwrap_or("").to_string(),
                s.to.get(..10).unwrap_or("").to_string(),
                s.spam.to_string(),
                format!("{:.1}%", s.spam_caught_pct),
                s.ham.to_string(),
                format!("{:.2}%", s.ham_caught_pct),
                s.hard_ham.to_string(),
                format!("{:.1}%", s.hard_ham_caught_pct),
                s.complaints.to_string(),
                s.rescues.to_string(),
            ]);
        }
        table(out, &rows)
    }
}

/// Left-aligned first and last column (a name, a note), right-aligned others, two spaces
/// apart.
fn table(out: &mut dyn Write, rows: &[Vec<String>]) -> io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = width[c] - cell.chars().count();
            if c == 0 || (c == columns - 1 && columns > 2 && rows[0][c].is_empty()) {
                if c > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// `NAME(score) NAME(score)`: a message's symbols for the CSV and the difference list.
fn symbol_list(symbols: &[(Arc<str>, f64)]) -> String {
    symbols
        .iter()
        .map(|(n, s)| format!("{n}({s})"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn feedback_name(o: &Outcome) -> &'static str {
    match o.feedback {
        Some(Counter::Complaint) => "complaint",
        Some(Counter::Rescue) => "rescue",
        _ => "",
    }
}

/// One row per message: `file,label,arrival,action,score,symbols,feedback`, then the same for
/// the second rule set when comparing (`action_b`, …).
pub fn write_csv(
    out: impl Write,
    corpus: &Corpus,
    a: &Lane,
    b: Option<&Lane>,
) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    let mut header: Vec<String> = LEAD_COLUMNS
        .iter()
        .chain(&OUTCOME_COLUMNS)
        .map(|c| c.to_string())
        .collect();
    if b.is_some() {
        header.extend(OUTCOME_COLUMNS.iter().map(|c| format!("{c}_b")));
    }
    w.write_record(&header)?;
    for (i, item) in corpus.items.iter().enumerate() {
        let mut row = vec![
            item.name.clone(),
            item.label.as_str().to_string(),
            rfc3339(item.arrival),
        ];
        for lane in std::iter::once(a).chain(b) {
            row.extend(outcome_cells(&lane.outcomes[i]));
        }
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

/// The CSV's columns of a message, then of its outcome in one pass.
const LEAD_COLUMNS: [&str; 3] = ["file", "label", "arrival"];
const OUTCOME_COLUMNS: [&str; 5] = ["action", "score", "symbols", "feedback", "probability"];

/// The CSV of a cross-validation: `write_csv`'s columns for one rule set and a `fold` column,
/// one row per message a fold scored (so hard ham once per fold), folds in order.
pub fn write_csv_folds(
    out: impl Write,
    corpus: &Corpus,
    cv: &super::crossval::CrossValidation,
) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(LEAD_COLUMNS.iter().chain(&OUTCOME_COLUMNS).chain(&["fold"]))?;
    for (k, fold) in cv.folds.iter().enumerate() {
        for (&i, o) in fold.scored.iter().zip(&fold.lane.outcomes) {
            let item = &corpus.items[i];
            let mut row = vec![
                item.name.clone(),
                item.label.as_str().to_string(),
                rfc3339(item.arrival),
            ];
            row.extend(outcome_cells(o));
            row.push(k.to_string());
            w.write_record(&row)?;
        }
    }
    w.flush()?;
    Ok(())
}

/// A message's action, score, symbols, feedback and probability as CSV cells.
fn outcome_cells(o: &Outcome) -> [String; 5] {
    let [action, score, symbols] = match &o.error {
        Some(e) => ["error".to_string(), String::new(), e.clone()],
        None => [
            o.action.as_str().to_string(),
            o.score.to_string(),
            symbol_list(&o.symbols),
        ],
    };
    [
        action,
        score,
        symbols,
        feedback_name(o).to_string(),
        o.probability
            .map_or_else(String::new, |p| format!("{p:.4}")),
    ]
}

/// A cross-validation's figures: each fold's, and every fold's scored messages together (the
/// untrained labels once per fold).
#[derive(Debug, Serialize)]
pub struct CrossSummary {
    pub folds: usize,
    /// A split by date: the share of each label learned, and until when (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<(f64, String)>,
    pub seed: u64,
    pub elapsed_secs: f64,
    pub per_fold: Vec<Summary>,
    pub total: Summary,
}

impl CrossSummary {
    pub fn new(
        corpus: &Corpus,
        cv: &super::crossval::CrossValidation,
        seed: u64,
        verdict: &VerdictConfig,
        slices: usize,
    ) -> CrossSummary {
        let per_fold = cv
            .folds
            .iter()
            .map(|f| {
                let items: Vec<&Item> = f.scored.iter().map(|&i| &corpus.items[i]).collect();
                let mut s = Summary::of(&items, &f.lane, verdict, slices);
                s.errors += f.unreadable;
                s
            })
            .collect();
        // All folds' messages in arrival order, so the over-time table means what it says.
        let mut all: Vec<(usize, usize)> = (cv.folds.iter().enumerate())
            .flat_map(|(k, f)| (0..f.scored.len()).map(move |n| (k, n)))
            .collect();
        all.sort_by_key(|&(k, n)| {
            let i = cv.folds[k].scored[n];
            (corpus.items[i].arrival, i, k)
        });
        let items: Vec<&Item> = all
            .iter()
            .map(|&(k, n)| &corpus.items[cv.folds[k].scored[n]])
            .collect();
        let sum = |f: &dyn Fn(&Lane) -> u64| cv.folds.iter().map(|x| f(&x.lane)).sum::<u64>();
        let lane = Lane {
            outcomes: all
                .iter()
                .map(|&(k, n)| cv.folds[k].lane.outcomes[n].clone())
                .collect(),
            elapsed: cv.elapsed,
            complaints: sum(&|l| l.complaints),
            rescues: sum(&|l| l.rescues),
            store_keys: cv.folds.iter().map(|f| f.lane.store_keys).sum(),
            swept_keys: sum(&|l| l.swept_keys),
            learned: (sum(&|l| l.learned.0), sum(&|l| l.learned.1)),
        };
        let mut total = Summary::of(&items, &lane, verdict, slices);
        total.undated = corpus.undated;
        total.skipped_files = corpus.skipped.len();
        total.errors += cv.folds.iter().map(|f| f.unreadable).sum::<usize>();
        CrossSummary {
            folds: cv.k,
            split: cv.split.map(|(f, at)| (f, rfc3339(at))),
            seed,
            elapsed_secs: (cv.elapsed.as_secs_f64() * 1e3).round() / 1e3,
            per_fold,
            total,
        }
    }

    /// A line per fold (what it learned, each label's share at add header or above), then the
    /// tables of all folds together.
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let count = |s: &Summary, l: Label| {
            s.labels
                .iter()
                .find(|x| x.label == l)
                .map_or(0, |x| x.messages)
        };
        let t = &self.total;
        match &self.split {
            Some((fraction, until)) => writeln!(
                out,
                "split by date: learned the earliest {}% of the labelled mail (as `shrike learn` \
                 does, messages up to {until}), then scored the rest",
                fraction * 100.0
            )?,
            None => writeln!(
                out,
                "cross-validation: {} folds of the spam and ham (seed {}); each fold learns the \
                 others (as `shrike learn` does), then scores its own and all hard ham",
                self.folds, self.seed
            )?,
        }
        writeln!(
            out,
            "scored: {} messages ({} spam, {} ham, {} hard ham{}) arriving {} .. {}",
            t.messages,
            count(t, Label::Spam),
            count(t, Label::Ham),
            count(t, Label::HardHam),
            match count(t, Label::Unlabeled) {
                0 => String::new(),
                u => format!(", {u} unlabeled"),
            },
            t.from,
            t.to
        )?;
        writeln!(
            out,
            "time: {:.2} s for all folds; learned: {} spam, {} ham over the folds (classifier: {} spam, {} ham)",
            self.elapsed_secs, t.complaints, t.rescues, t.classifier_spam, t.classifier_ham
        )?;
        if t.errors + t.undated + t.skipped_files > 0 {
            writeln!(
                out,
                "notes: {} unreadable, {} skipped files, {} without a usable date (placed after their neighbour)",
                t.errors, t.skipped_files, t.undated
            )?;
        }
        writeln!(out)?;
        let caught = |s: &Summary, l: Label| {
            s.labels.iter().find(|x| x.label == l).map_or_else(
                || "-".to_string(),
                |x| format!("{} ({:.1}%)", x.caught, x.caught_pct),
            )
        };
        let mut rows = vec![[
            "fold",
            "learned spam",
            "learned ham",
            "spam",
            "≥ add header",
            "ham",
            "≥ add header",
            "hard ham",
            "≥ add header",
        ]
        .map(String::from)
        .to_vec()];
        let fold_rows = self
            .per_fold
            .iter()
            .enumerate()
            .map(|(k, s)| (k.to_string(), s));
        for (name, s) in fold_rows.chain(std::iter::once(("all".to_string(), t))) {
            rows.push(vec![
                name,
                s.complaints.to_string(),
                s.rescues.to_string(),
                count(s, Label::Spam).to_string(),
                caught(s, Label::Spam),
                count(s, Label::Ham).to_string(),
                caught(s, Label::Ham),
                count(s, Label::HardHam).to_string(),
                caught(s, Label::HardHam),
            ]);
        }
        table(out, &rows)?;
        writeln!(out)?;
        writeln!(out, "all folds together:")?;
        self.total.write_tables(out)
    }
}

/// A message two rule sets treat differently.
#[derive(Debug, Serialize)]
pub struct Difference {
    pub file: String,
    pub label: Label,
    pub action_a: Action,
    pub score_a: f64,
    pub action_b: Action,
    pub score_b: f64,
    /// Symbols only the second rule set hit, with their scores.
    pub added: Vec<(String, f64)>,
    /// Symbols only the first rule set hit.
    pub removed: Vec<(String, f64)>,
    /// Symbols both hit with different scores: (name, a, b).
    pub changed: Vec<(String, f64, f64)>,
}

/// Per label: how many messages moved to a stricter or a milder action.
#[derive(Debug, Default, Serialize)]
pub struct Moves {
    pub stricter: usize,
    pub milder: usize,
    pub newly_caught: usize,
    pub no_longer_caught: usize,
}

/// Two rule sets over the same stream.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub a: Summary,
    pub b: Summary,
    pub moves: BTreeMap<&'static str, Moves>,
    pub differences: Vec<Difference>,
}

impl Comparison {
    pub fn new(
        corpus: &Corpus,
        a: &Lane,
        b: &Lane,
        verdict: &VerdictConfig,
        slices: usize,
    ) -> Self {
        let mut moves: BTreeMap<&'static str, Moves> = BTreeMap::new();
        let mut differences = Vec::new();
        for ((item, x), y) in corpus.items.iter().zip(&a.outcomes).zip(&b.outcomes) {
            if x.action == y.action || x.error.is_some() || y.error.is_some() {
                continue;
            }
            let m = moves.entry(item.label.as_str()).or_default();
            if y.action > x.action {
                m.stricter += 1;
            } else {
                m.milder += 1;
            }
            match (is_caught(x.action), is_caught(y.action)) {
                (false, true) => m.newly_caught += 1,
                (true, false) => m.no_longer_caught += 1,
                _ => {}
            }
            let xs: BTreeMap<&str, f64> = x.symbols.iter().map(|(n, s)| (&**n, *s)).collect();
            let ys: BTreeMap<&str, f64> = y.symbols.iter().map(|(n, s)| (&**n, *s)).collect();
            let names: BTreeSet<&str> = xs.keys().chain(ys.keys()).copied().collect();
            let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
            for name in names {
                match (xs.get(name), ys.get(name)) {
                    (None, Some(&s)) => added.push((name.to_string(), s)),
                    (Some(&s), None) => removed.push((name.to_string(), s)),
                    (Some(&p), Some(&q)) if p != q => changed.push((name.to_string(), p, q)),
                    _ => {}
                }
            }
            differences.push(Difference {
                file: item.name.clone(),
                label: item.label,
                action_a: x.action,
                score_a: x.score,
                action_b: y.action,
                score_b: y.score,
                added,
                removed,
                changed,
            });
        }
        Comparison {
            a: Summary::new(corpus, a, verdict, slices),
            b: Summary::new(corpus, b, verdict, slices),
            moves,
            differences,
        }
    }

    /// Both summaries' headline figures, the moves, then every difference.
    pub fn write_text(&self, out: &mut dyn Write, a_name: &str, b_name: &str) -> io::Result<()> {
        writeln!(
            out,
            "compare: A = {a_name}, B = {b_name}; {} messages, A {:.2} s, B {:.2} s",
            self.a.messages, self.a.elapsed_secs, self.b.elapsed_secs
        )?;
        writeln!(out)?;
        let mut rows = vec![vec![
            "label".to_string(),
            "messages".to_string(),
            "A ≥ add header".to_string(),
            "B ≥ add header".to_string(),
            "A rejected".to_string(),
            "B rejected".to_string(),
            "stricter in B".to_string(),
            "milder in B".to_string(),
        ]];
        for (x, y) in self.a.labels.iter().zip(&self.b.labels) {
            let m = self.moves.get(x.label.as_str());
            rows.push(vec![
                x.label.as_str().to_string(),
                x.messages.to_string(),
                format!("{} ({:.1}%)", x.caught, x.caught_pct),
                format!("{} ({:.1}%)", y.caught, y.caught_pct),
                format!("{} ({:.1}%)", x.rejected, x.rejected_pct),
                format!("{} ({:.1}%)", y.rejected, y.rejected_pct),
                m.map_or(0, |m| m.stricter).to_string(),
                m.map_or(0, |m| m.milder).to_string(),
            ]);
        }
        table(out, &rows)?;
        writeln!(out)?;
        writeln!(out, "{} messages change action:", self.differences.len())?;
        for d in &self.differences {
            let mut why: Vec<String> = Vec::new();
            why.extend(d.added.iter().map(|(n, s)| format!("+{n}({s})")));
            why.extend(d.removed.iter().map(|(n, s)| format!("-{n}({s})")));
            why.extend(d.changed.iter().map(|(n, p, q)| format!("~{n}({p}→{q})")));
            writeln!(
                out,
                "  {} [{}] {} ({}) → {} ({}): {}",
                d.file,
                d.label.as_str(),
                d.action_a.as_str(),
                d.score_a,
                d.action_b.as_str(),
                d.score_b,
                why.join(" ")
            )?;
        }
        Ok(())
    }
}
