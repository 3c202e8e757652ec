//! The figures of a cross-validation (`--cross-validate K`) or a split by date (`--split-by-date`):
//! each fold's, and all folds' scored messages together.

use std::io::{self, Write};

use serde::Serialize;

use super::super::{Corpus, Item, Label, Lane};
use super::{rfc3339, table, Summary};
use crate::verdict::VerdictConfig;

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
        cv: &crate::replay::crossval::CrossValidation,
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
