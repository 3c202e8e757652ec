//! What a replay found: detection and false positives per label, a score-threshold table,
//! per-rule hits by label, detection over time, throughput; and the differences between two
//! rule sets. As text tables, JSON, and a CSV with one row per message.
//!
//! Owns: the figures and their rendering. Never touches: the pipeline.
//!
//! One file per report: one rule set's pass (`summary.rs`), a cross-validation or a split by
//! date (`cross.rs`), two rule sets compared (`compare.rs`); the CSV of one row per message
//! (`messages.rs`); here, what they share (shares, times, the text table).

mod compare;
mod cross;
mod messages;
mod summary;

use std::io::{self, Write};
use std::sync::Arc;

use super::Outcome;
use crate::store::Counter;
use crate::verdict::Action;

pub use compare::{Comparison, Difference, Moves};
pub use cross::CrossSummary;
pub use messages::{write_csv, write_csv_folds};
pub use summary::{LabelSummary, RuleRow, Slice, Summary, ThresholdRow};

/// Whether an action keeps a message from the inbox (the add-header threshold and beyond).
pub fn is_caught(action: Action) -> bool {
    action >= Action::AddHeader
}

/// Whether an action refuses or drops a message (the reject threshold, and the shadow ban).
pub fn is_rejected(action: Action) -> bool {
    matches!(action, Action::Reject | Action::Discard)
}

/// A share in percent of `total`, 0 for an empty total.
pub(super) fn pct(n: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        (n as f64 * 1e5 / total as f64).round() / 1e3
    }
}

pub(super) fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

/// Left-aligned first and last column (a name, a note), right-aligned others, two spaces
/// apart.
pub(super) fn table(out: &mut dyn Write, rows: &[Vec<String>]) -> io::Result<()> {
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
pub(super) fn symbol_list(symbols: &[(Arc<str>, f64)]) -> String {
    symbols
        .iter()
        .map(|(n, s)| format!("{n}({s})"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `feedback` of a message's CSV row: the simulated user's complaint or rescue, if any.
pub(super) fn feedback_name(o: &Outcome) -> &'static str {
    match o.feedback {
        Some(Counter::Complaint) => "complaint",
        Some(Counter::Rescue) => "rescue",
        _ => "",
    }
}
