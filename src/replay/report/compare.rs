//! Two rule sets over the same stream: both passes' figures, the messages they treat
//! differently, and how many moved to a stricter or milder action per label.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use serde::Serialize;

use super::super::{Corpus, Label, Lane};
use super::{is_caught, table, Summary};
use crate::verdict::{Action, VerdictConfig};

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
