//! Whether a rule's negative tests can fail: an `expect-not SYMBOL` test means something only
//! when its message gets into the rule's check as far as the hits do, and is turned away there
//! (a near miss: the trigger in a harmless form). A message that stops where any plain message
//! stops (no HTML for an HTML rule) would pass however broken the rule's real condition is.
//!
//! How it is judged, from the tests' line traces (`ruletest::Trace`): the *interesting* lines of
//! a symbol are the lines of its rule's file its passing `expect` tests ran, less the lines plain
//! baseline messages run. An `expect-not` test is a near miss when it runs at least one of them.
//! A symbol whose `expect-not` tests are none of them is reported (`shrike rules check` warns).
//! A symbol whose hits run no line the baselines do not, other than the line returning the hit
//! (a one-line check), cannot be judged so and is left out.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::RuleLocation;
use crate::message::{prepare, Envelope};
use crate::store::StoreConfig;

use super::ruletest::{TestResult, Trace};
use super::{InMemoryError, ScanSettings, Scanner};

/// Plain messages: what any mail reaches of a rule. Text, HTML, an attachment, each ordinary.
const BASELINES: &[&[u8]] = &[
    b"From: Ann Lee <ann@example.org>\r\nTo: bob@example.net\r\nSubject: lunch tomorrow\r\n\
Date: Thu, 19 Nov 2026 10:00:00 +0000\r\nMessage-ID: <b1@example.org>\r\n\r\n\
Hi Bob, shall we have lunch tomorrow at noon? Ann\r\n",
    b"From: Ann Lee <ann@example.org>\r\nTo: bob@example.net\r\nSubject: the agenda\r\n\
Date: Thu, 19 Nov 2026 10:00:00 +0000\r\nMessage-ID: <b2@example.org>\r\nMIME-Version: 1.0\r\n\
Content-Type: text/html; charset=utf-8\r\n\r\n\
<html><body><p>Hi Bob, the agenda is on <a href=\"https://example.org/agenda\">our site</a>.</p></body></html>\r\n",
    b"From: Ann Lee <ann@example.org>\r\nTo: bob@example.net\r\nSubject: the report\r\n\
Date: Thu, 19 Nov 2026 10:00:00 +0000\r\nMessage-ID: <b3@example.org>\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n\
The report is attached.\r\n--b\r\nContent-Type: application/pdf; name=\"report.pdf\"\r\n\
Content-Disposition: attachment; filename=\"report.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\n\
JVBERi0xLjQK\r\n--b--\r\n",
];

/// A symbol whose negative tests never reach past where plain mail stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeakNegative {
    pub symbol: String,
    pub rule: String,
    /// The rule's file.
    pub file: String,
    /// Its `expect-not` tests.
    pub negatives: usize,
    /// Lines only hits reach, less those that merely record the hit: a near miss runs one.
    pub interesting: BTreeSet<u32>,
}

/// The symbols of `rules` whose `expect-not` tests (in traced `results`) are no near misses.
pub fn weak_negatives(
    settings: &ScanSettings,
    store: &StoreConfig,
    rules: &RuleLocation,
    results: &[TestResult],
) -> Result<Vec<WeakNegative>, InMemoryError> {
    let scanner = Scanner::in_memory(settings, store, rules.clone())?;
    let generation = scanner.engine().generation();
    let mut worker = scanner.worker();
    worker.rules().trace_lines();
    let mut baseline: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for raw in BASELINES {
        let input = prepare(raw, &settings.limits);
        worker.rules().take_lines();
        worker.scan(&input, &Envelope::default());
        for (rule, line, _) in worker.rules().take_lines() {
            baseline.entry(rule).or_default().insert(line);
        }
    }
    let traces: Vec<_> = results.iter().filter_map(|r| r.trace.as_ref()).collect();
    let empty = BTreeSet::new();
    let mut out = Vec::new();
    for r in &generation.rules {
        let base = baseline.get(&r.name).unwrap_or(&empty);
        for s in &r.symbols {
            let negatives: Vec<_> = traces
                .iter()
                .filter(|t| t.expect_not.contains(&s.name))
                .collect();
            if negatives.is_empty() {
                continue;
            }
            let interesting: BTreeSet<u32> = traces
                .iter()
                .filter(|t| t.expect.contains(&s.name) && t.hit.contains(&s.name))
                .flat_map(|t| rule_lines(t, &r.name, &empty))
                .filter(|l| !base.contains(l))
                .copied()
                .collect();
            // Lines that only record or return the hit (`return true`, `hits.SYM = true`,
            // `hits = hits or {}`; told by their text, `records_hit`) are reached by hits alone: no near miss can run them. A
            // symbol left with no other line decides on a line plain mail runs (every message
            // is a near miss) and is not judged.
            let text = generation
                .sources
                .rules
                .iter()
                .find(|f| f.name == r.file)
                .map(|f| f.text.clone());
            let in_check = |l: u32| {
                traces
                    .iter()
                    .any(|t| t.check_lines.get(&r.name).is_some_and(|c| c.contains(&l)))
            };
            let interesting: BTreeSet<u32> = interesting
                .into_iter()
                .filter(|&l| {
                    let line = text
                        .as_deref()
                        .and_then(|t| t.lines().nth(l as usize - 1))
                        .unwrap_or("")
                        .trim();
                    !records_hit(line, &s.name, in_check(l))
                })
                .collect();
            if interesting.is_empty() {
                continue;
            }
            let near_miss = negatives.iter().any(|t| {
                rule_lines(t, &r.name, &empty)
                    .iter()
                    .any(|l| interesting.contains(l))
            });
            if !near_miss {
                out.push(WeakNegative {
                    symbol: s.name.clone(),
                    rule: r.name.clone(),
                    file: r.file.clone(),
                    negatives: negatives.len(),
                    interesting,
                });
            }
        }
    }
    Ok(out)
}

/// Whether a source line does no more than record or return a hit of `symbol`. A `return` in
/// the rule's `check` itself (`in_check`) returns its verdict; one in a helper decides.
fn records_hit(line: &str, symbol: &str, in_check: bool) -> bool {
    let mentions = line.match_indices(symbol).any(|(i, _)| {
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !word(line[..i].chars().next_back()) && !word(line[i + symbol.len()..].chars().next())
    });
    let or_table = line
        .split_once(" = ")
        .is_some_and(|(a, b)| b.trim_end() == format!("{a} or {{}}"));
    let returns_hit = in_check && line.starts_with("return");
    mentions || or_table || returns_hit || matches!(line, "end" | "else" | "")
}

fn rule_lines<'a>(t: &'a Trace, rule: &str, empty: &'a BTreeSet<u32>) -> &'a BTreeSet<u32> {
    t.lines.get(rule).unwrap_or(empty)
}

/// `12, 14-16`: lines as ranges.
pub fn ranges(lines: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = lines.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_that_only_record_a_hit() {
        for yes in [
            "return true",
            "return 1, { tostring(count) }",
            "return hits",
            "hits.DATE_IN_FUTURE = true",
            "hits = { DATE_IN_FUTURE = { zone } }",
            "hits = hits or {}",
            "end",
        ] {
            assert!(records_hit(yes, "DATE_IN_FUTURE", true), "{yes}");
        }
        for no in [
            "if date > now + DAY then",
            "local hits = {}",
            "hits.DATE_IN_FUTURE_X = true",
            "local n = msg:email_count(\"to\")",
        ] {
            assert!(!records_hit(no, "DATE_IN_FUTURE", true), "{no}");
        }
        // a helper's return decides
        assert!(!records_hit(
            "return ham > 0 and ham * 2 >= seen and ham > spam",
            "X",
            false
        ));
    }

    #[test]
    fn line_ranges() {
        let l: BTreeSet<u32> = [3, 4, 5, 9, 11, 12].into_iter().collect();
        assert_eq!(ranges(&l), "3-5, 9, 11-12");
        assert_eq!(ranges(&BTreeSet::new()), "");
    }
}
