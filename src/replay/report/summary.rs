//! The figures of one rule set's pass: per label, per score threshold, per rule, over time.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use super::super::{Corpus, Feedback, Item, Label, Lane, Outcome};
use super::{is_caught, is_rejected, pct, rfc3339, table};
use crate::store::Counter;
use crate::verdict::{Action, VerdictConfig};

/// Score thresholds of the threshold table, besides the configured ones.
const SCORE_GRID: [f64; 11] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 15.0, 20.0];

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
    pub separation: Vec<crate::replay::roc::Separation>,
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
        let separation = crate::replay::roc::separation(
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
                crate::replay::Train::Feedback => "complaints and rescues",
                crate::replay::Train::All => "every label",
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
