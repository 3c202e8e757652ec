//! The CSV of one row per message (`--csv`): of a replay, of two rule sets compared, of a
//! cross-validation's folds.

use std::io::Write;

use super::super::{Corpus, Lane, Outcome};
use super::{feedback_name, rfc3339, symbol_list};

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
    cv: &crate::replay::crossval::CrossValidation,
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
