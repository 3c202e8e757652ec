//! The X-Spam-* headers shrike adds to a message: through the milter, and in the `milter`
//! block of an rspamd reply for MTAs that add them themselves.
//!
//! Owns: their names, their text (score, status, folded symbol list) and which headers count as
//! ours (so a sender cannot forge them). Never touches: sockets.

use crate::verdict::{Action, Verdict};

/// The X-Spam-* headers for a verdict: score, status and symbols (folded).
pub fn spam_headers(verdict: &Verdict, add_header_at: f64) -> Vec<(String, String)> {
    let spam = verdict.action >= Action::AddHeader;
    let required = verdict.required_score.unwrap_or(add_header_at);
    let mut symbols = String::with_capacity(32 * verdict.symbols.len());
    let mut item = String::with_capacity(48);
    let mut line = 0;
    for (i, s) in verdict.symbols.values().enumerate() {
        item.clear();
        item.push_str(&s.name);
        item.push('(');
        push_score(&mut item, s.score);
        item.push(')');
        if i > 0 {
            if line + item.len() > 70 {
                symbols.push_str(",\n\t");
                line = 0;
            } else {
                symbols.push_str(", ");
                line += 2;
            }
        }
        line += item.len();
        symbols.push_str(&item);
    }
    let (mut score, mut required_text) = (String::new(), String::new());
    push_score(&mut score, verdict.score);
    push_score(&mut required_text, required);
    let status = [
        if spam { "Yes" } else { "No" },
        ", score=",
        &score,
        " required=",
        &required_text,
        " action=",
        verdict.action.as_str(),
        " generation=",
        itoa::Buffer::new().format(verdict.generation),
    ]
    .concat();
    vec![
        (
            "X-Spam-Score".into(),
            [&score, " / ", &required_text].concat(),
        ),
        ("X-Spam-Status".into(), status),
        (
            "X-Spam-Symbols".into(),
            if symbols.is_empty() {
                "none".into()
            } else {
                symbols
            },
        ),
    ]
}

/// Appends `x` as `format!("{x:.2}")` would. Float formatting costs ~1,000 instructions a
/// number and a verdict's headers hold one per symbol, so ordinary scores are written from the
/// rounded integer (by `itoa`, not `core::fmt`); a value within a hair of a rounding tie, a negative one that rounds to
/// zero ("-0.00") and a huge or non-finite one take the exact path.
fn push_score(out: &mut String, x: f64) {
    use std::fmt::Write as _;
    let y = x * 100.0;
    let r = y.round();
    let near_tie = ((y - y.floor()) - 0.5).abs() < 1e-6;
    if !y.is_finite() || y.abs() >= 1e9 || near_tie || (r == 0.0 && x.is_sign_negative()) {
        let _ = write!(out, "{x:.2}");
        return;
    }
    let n = r as i64;
    if n < 0 {
        out.push('-');
    }
    let a = n.unsigned_abs();
    out.push_str(itoa::Buffer::new().format(a / 100));
    out.push('.');
    let cents = (a % 100) as u8;
    out.push(char::from(b'0' + cents / 10));
    out.push(char::from(b'0' + cents % 10));
}

/// Whether a header is one of ours, which a sender must not be able to forge.
pub fn is_spam_header(name: &[u8]) -> bool {
    name.get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"x-spam-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::xorshift;
    use crate::verdict::SymbolHit;

    #[test]
    fn scores_are_written_as_format_writes_them() {
        let mut x: u64 = 0x853C_49E6_748F_EA9B;
        let mut values = vec![
            0.0,
            -0.0,
            0.125,
            0.375,
            0.625,
            -0.125,
            1.005,
            0.015,
            2.675,
            -0.001,
            0.004,
            0.005,
            6.0,
            15.0,
            -4.0,
            99.995,
            1e8,
            1e12,
            -1e12,
            f64::NAN,
            f64::INFINITY,
            f64::MIN,
        ];
        for _ in 0..200_000 {
            xorshift(&mut x);
            let v = (x % 4_000_001) as f64 / 1000.0 - 2000.0; // three decimals: ties included
            values.push(v);
            values.push(v * 1.5);
            values.push(f64::from_bits(x) % 1e6);
        }
        for v in values {
            let mut s = String::new();
            push_score(&mut s, v);
            assert_eq!(s, format!("{v:.2}"), "{v:e}");
        }
    }

    #[test]
    fn spam_headers_fold_long_symbol_lists() {
        let mut v = Verdict {
            score: 7.5,
            action: Action::AddHeader,
            generation: 1207,
            ..Verdict::default()
        };
        for i in 0..12 {
            let name = format!("SOME_LONGISH_SYMBOL_{i:02}");
            v.symbols.insert(
                name.clone(),
                SymbolHit {
                    name,
                    score: 0.5,
                    description: None,
                    options: vec![],
                },
            );
        }
        let h = spam_headers(&v, 6.0);
        assert_eq!(h[0], ("X-Spam-Score".into(), "7.50 / 6.00".into()));
        assert_eq!(
            h[1].1,
            "Yes, score=7.50 required=6.00 action=add header generation=1207"
        );
        let symbols = &h[2].1;
        assert!(symbols.contains(",\n\t"), "{symbols}");
        for line in symbols.split("\n\t") {
            assert!(line.len() <= 80, "{line}");
        }
        assert_eq!(symbols.matches("SOME_LONGISH_SYMBOL_").count(), 12);
        let ham = spam_headers(&Verdict::default(), 6.0);
        assert!(ham[1].1.starts_with("No, "));
        assert_eq!(ham[2].1, "none");
        assert!(is_spam_header(b"X-SPAM-Flag") && !is_spam_header(b"X-Spa"));
    }
}
