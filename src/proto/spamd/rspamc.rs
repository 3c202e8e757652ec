//! rspamd's legacy reply (`RSPAMD/1.3 0 EX_OK` and a `Metric: default; …` line), the one
//! Exim's `variant=rspamd` and rspamc before 1.0 parse. Exim reads it with
//! `sscanf("RSPAMD/%7s 0 EX_OK\r\nMetric: default; %7s %lf / %lf / %lf\r\n")` and then an
//! optional `Action:` line, so the order and the three numbers are fixed; the third is always
//! `0.0`, as rspamd sends it.

use super::reply::{client_score, is_spam};
use crate::verdict::Verdict;

/// The reply to a legacy CHECK, SYMBOLS, REPORT or REPORT_IFSPAM: the metric line (spam when
/// the action is add header or worse, against the add-header `threshold`), the action, then
/// one `Symbol: NAME(score)` line a symbol. The reply runs to the end of the connection.
pub fn legacy_reply(verdict: &Verdict, threshold: f64) -> Vec<u8> {
    let spam = if is_spam(verdict) { "True" } else { "False" };
    let score = client_score(verdict, threshold, 0.01);
    let mut out = format!(
        "RSPAMD/1.3 0 EX_OK\r\nMetric: default; {spam}; {score:.2} / {threshold:.2} / 0.0\r\n\
         Action: {}\r\n",
        verdict.action.as_str()
    );
    for s in verdict.symbols.values() {
        out.push_str(&format!("Symbol: {}({:.2})\r\n", s.name, s.score));
    }
    out.into_bytes()
}
