//! Dates of the Date and Received headers, in Unix seconds, and what is wrong with a Date
//! header's zone: the one place the pipeline reads dates.
//!
//! Two readings exist, because rules have seen both since they were written and their results
//! must not move:
//!
//! - `parse_strict`: mail-parser's RFC 5322 parser (seconds required, a numeric zone or an
//!   obsolete name). The Date header goes through it while the message is parsed
//!   (`ParsedMessage::date`, `msg:date()`, the `invalid_date` anomaly).
//! - `parse_loose`: the rule library's `util.parse_date` (weekday and seconds optional,
//!   two-digit years, obsolete zone names; an unknown name counts as UTC), for what the strict
//!   parser refuses in a Received stamp (`received_time`).

use std::borrow::Cow;
use std::sync::LazyLock;

use serde::Serialize;

/// A date as mail-parser's RFC 5322 parser reads it (`Thu, 22 Aug 2002 18:26:25 -0700`), in
/// Unix seconds; None when it does not parse or names an impossible day or time.
pub fn parse_strict(s: &str) -> Option<i64> {
    mail_parser::DateTime::parse_rfc822(s)
        .filter(mail_parser::DateTime::is_valid)
        .map(|d| d.to_timestamp())
}

/// The time stamp of a Received header's value: the date after its last `;`, Unix seconds.
/// `parse_strict` goes first (most stamps have seconds and a numeric zone, and the regex
/// captures of `parse_loose` cost several times more); `parse_loose` takes what it refuses
/// (no seconds, for one). Over the dev corpus both give the Lua parser's result.
pub fn received_time(value: &str) -> Option<i64> {
    received_time_bytes(value.as_bytes())
}

/// `received_time` of a value as raw bytes (invalid UTF-8 read as by `utf8_lossy`): only the
/// part after the last `;` is decoded.
pub fn received_time_bytes(value: &[u8]) -> Option<i64> {
    let semi = memchr::memrchr(b';', value)?;
    // Splitting at an ASCII byte and decoding each side gives what decoding the whole and
    // splitting gives: no invalid sequence spans an ASCII byte.
    let date = super::utf8_lossy(&value[semi + 1..]);
    parse_strict(date.trim()).or_else(|| parse_loose(&date))
}

/// The time stamp of a Received header's value as mail-parser's Received parser reads it, Unix
/// seconds (not checked for an impossible day or time). `shrike replay` has placed messages in
/// time by this reading from the start, and it differs from `received_time`'s in edge cases
/// (two-digit years, zone names other than GMT, hours past 23, spelled-out months all read
/// otherwise or not at all): kept so that replay's arrival times do not move. The two agree
/// on every message of the dev corpus.
pub fn received_time_mail_parser(value: &[u8]) -> Option<i64> {
    match mail_parser::parsers::MessageStream::new(value).parse_received() {
        mail_parser::HeaderValue::Received(r) => r.date.map(|d| d.to_timestamp()),
        _ => None,
    }
}

/// The pattern of `parse_loose`.
static DATE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(
        r"(\d\d?)\s+([A-Za-z]{3})[A-Za-z]*\s+(\d{2,4})\s+(\d\d?):(\d\d)(?::(\d\d))?(?:\s*([+-])(\d\d)(\d\d)|\s*([A-Za-z]+))?",
    )
    .expect("date pattern")
});

/// Compiles the date pattern, so that no scan pays for it: for a process about to scan.
pub fn warm() {
    LazyLock::force(&DATE);
}

/// An RFC 5322 date ("Thu, 22 Aug 2002 18:26:25 -0700"; weekday and seconds optional,
/// two-digit years and obsolete zone names accepted), as the rule library's
/// `util.parse_date` reads it, in Unix seconds.
pub fn parse_loose(s: &str) -> Option<i64> {
    let c = DATE.captures(s)?;
    let num = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<i64>().ok());
    let (d, mut y, hh, mm) = (num(1)?, num(3)?, num(4)?, num(5)?);
    let ss = num(6).unwrap_or(0);
    let month = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ]
    .iter()
    .position(|m| m.eq_ignore_ascii_case(&c[2]))? as i64
        + 1;
    if y < 50 {
        y += 2000;
    } else if y < 1000 {
        y += 1900;
    }
    let offset = if let Some(sign) = c.get(7) {
        let o = num(8)? * 60 + num(9)?;
        if sign.as_str() == "-" {
            -o
        } else {
            o
        }
    } else {
        c.get(10).map_or(0, |z| zone_minutes(z.as_str()))
    };
    if !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(((days_from_civil(y, month, d) * 24 + hh) * 60 + mm) * 60 + ss - offset * 60)
}

/// Obsolete zone names of RFC 5322, minutes east of UTC (unknown names count as UTC).
fn zone_minutes(name: &str) -> i64 {
    const ZONES: [(&str, i64); 20] = [
        ("ut", 0),
        ("gmt", 0),
        ("utc", 0),
        ("z", 0),
        ("est", -300),
        ("edt", -240),
        ("cst", -360),
        ("cdt", -300),
        ("mst", -420),
        ("mdt", -360),
        ("pst", -480),
        ("pdt", -420),
        ("bst", 60),
        ("cet", 60),
        ("cest", 120),
        ("met", 60),
        ("mest", 120),
        ("eet", 120),
        ("eest", 180),
        ("jst", 540),
    ];
    ZONES
        .iter()
        .find(|(z, _)| z.eq_ignore_ascii_case(name))
        .map_or(0, |&(_, m)| m)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// What is wrong with a Date header's zone: the zone as written, borrowed (`&str`, what
/// `zone_problem` finds) or owned (`String`, what `ParsedMessage::date` keeps). Serialized as
/// `"zone_problem": "bad_offset" | "malformed", "zone": "…"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "zone_problem", content = "zone", rename_all = "snake_case")]
pub enum ZoneProblem<S = String> {
    /// A numeric zone no place has ("-1900", "+0575"): the first sign and four digits written.
    BadOffset(S),
    /// A zone in no form RFC 5322 allows ("GMT+1", "+-0500", "Eastern Daylight Time").
    Malformed(S),
}

impl ZoneProblem<&str> {
    /// The problem with the zone copied out of the value.
    pub fn owned(&self) -> ZoneProblem {
        match *self {
            ZoneProblem::BadOffset(z) => ZoneProblem::BadOffset(z.to_string()),
            ZoneProblem::Malformed(z) => ZoneProblem::Malformed(z.to_string()),
        }
    }
}

impl<S: AsRef<str>> ZoneProblem<S> {
    /// The zone as written.
    pub fn zone(&self) -> &str {
        match self {
            ZoneProblem::BadOffset(z) | ZoneProblem::Malformed(z) => z.as_ref(),
        }
    }
}

/// White space as Lua's `%s` sees it (C locale): space, tab, and LF, VT, FF, CR.
fn lua_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The zone of a Date header (its value as text: `message::header_text`) when it is wrong. The
/// last four digits of the value, after a sign, are a numeric zone: its hours must be at most
/// 14 and its minutes at most 59. Otherwise the zone is what follows the time ("hh:mm[:ss]"
/// and white space), a trailing comment left out: a numeric zone, optionally followed by a
/// name, or one to three letters (GMT, EST, Z), or four digits; anything else is malformed. A
/// Date without a time, or with nothing after it, is not this check's business
/// (`invalid_date`'s).
///
/// This is exactly what the default rules did with Lua patterns before (`^.*[+-](%d%d)(%d%d)
/// %s*%(?[^%d]*%)?%s*$`, then `%s*%b()%s*$` removed, then `%d%d:%d%d:?%d?%d?%s+(.-)%s*$`
/// tried where the first colon puts it, then anywhere), at ~0.4 k instructions a message
/// against the patterns' 13.6 k.
pub fn zone_problem(value: &str) -> Option<ZoneProblem<&str>> {
    let b = value.as_bytes();
    // The last digit of the value; a sign and four digits must end there.
    if let Some(q) = b.iter().rposition(u8::is_ascii_digit) {
        if q >= 4 && matches!(b[q - 4], b'+' | b'-') && b[q - 3..q].iter().all(u8::is_ascii_digit) {
            let hours = u32::from(b[q - 3] - b'0') * 10 + u32::from(b[q - 2] - b'0');
            let minutes = u32::from(b[q - 1] - b'0') * 10 + u32::from(b[q] - b'0');
            if hours > 14 || minutes > 59 {
                let first = b
                    .windows(5)
                    .position(|w| {
                        matches!(w[0], b'+' | b'-') && w[1..].iter().all(u8::is_ascii_digit)
                    })
                    .unwrap_or(q - 4);
                return Some(ZoneProblem::BadOffset(&value[first..first + 5]));
            }
        }
    }
    let zone = zone_after_time(strip_trailing_comment(b)).filter(|z| !z.is_empty())?;
    let ok = match zone {
        [s, d @ ..]
            if matches!(s, b'+' | b'-')
                && d.len() >= 4
                && d[..4].iter().all(u8::is_ascii_digit) =>
        {
            let rest = &d[4..];
            let letters = rest
                .iter()
                .position(|&c| !lua_space(c))
                .unwrap_or(rest.len());
            rest.is_empty()
                || (letters > 0
                    && letters < rest.len()
                    && rest[letters..].iter().all(u8::is_ascii_alphabetic))
        }
        z if (1..=3).contains(&z.len()) && z.iter().all(u8::is_ascii_alphabetic) => true,
        z => z.len() == 4 && z.iter().all(u8::is_ascii_digit),
    };
    if ok {
        return None;
    }
    // (the zone lies between ASCII bytes, so this slice is on character boundaries)
    let start = zone.as_ptr() as usize - b.as_ptr() as usize;
    value
        .get(start..start + zone.len())
        .map(ZoneProblem::Malformed)
}

/// The value without a trailing parenthesized comment and the white space around it (Lua's
/// `gsub("%s*%b()%s*$", "")`): the group whose balanced ")" is the last byte before trailing
/// white space.
fn strip_trailing_comment(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&c| !lua_space(c)).map_or(0, |i| i + 1);
    if end == 0 || b[end - 1] != b')' {
        return b;
    }
    let mut depth = 0usize;
    for j in (0..end).rev() {
        match b[j] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    let start = b[..j]
                        .iter()
                        .rposition(|&c| !lua_space(c))
                        .map_or(0, |i| i + 1);
                    return &b[..start];
                }
            }
            _ => {}
        }
    }
    b
}

/// What follows the time ("hh:mm", optionally ":s" or ":ss", then white space) up to trailing
/// white space: tried where the first colon puts the time, then at every position in turn, as
/// Lua's `match` does. None when no time is followed by white space; "" when nothing follows.
fn zone_after_time(b: &[u8]) -> Option<&[u8]> {
    let colon = b.iter().position(|&c| c == b':')?;
    let at = |i: usize| -> Option<&[u8]> {
        let d = |k: usize| b.get(k).is_some_and(u8::is_ascii_digit);
        if !(d(i) && d(i + 1) && b.get(i + 2) == Some(&b':') && d(i + 3) && d(i + 4)) {
            return None;
        }
        // ":?%d?%d?%s+": Lua takes each optional part when it can and backs off only to find
        // the white space, which a taken ':' or digit never is, so the greedy path is the
        // only one that can match.
        let mut k = i + 5;
        if b.get(k) == Some(&b':') {
            k += 1;
        }
        for _ in 0..2 {
            if d(k) {
                k += 1;
            }
        }
        if !b.get(k).is_some_and(|&c| lua_space(c)) {
            return None;
        }
        let start = k + b[k..]
            .iter()
            .position(|&c| !lua_space(c))
            .unwrap_or(b.len() - k);
        let end = b
            .iter()
            .rposition(|&c| !lua_space(c))
            .map_or(start, |e| (e + 1).max(start));
        Some(&b[start..end])
    };
    if colon >= 2 {
        if let Some(z) = at(colon - 2) {
            return Some(z);
        }
    }
    (0..b.len()).find_map(at)
}

/// What rules read of the Date header, read once when the message is parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DateFacts {
    /// Unix seconds, by `parse_strict` (mail-parser's reading of the header); None when the
    /// message has no Date or it does not parse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<i64>,
    /// What is wrong with the first Date header's zone, if anything.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub zone_problem: Option<ZoneProblem>,
}

impl DateFacts {
    /// No Date header, or one without a time and without a zone problem.
    pub fn is_empty(&self) -> bool {
        self.time.is_none() && self.zone_problem.is_none()
    }

    /// The facts of a parsed message's top-level headers (`raw`: the bytes mail-parser read).
    pub(super) fn of(message: &mail_parser::Message<'_>, raw: &[u8]) -> DateFacts {
        let time = message
            .date()
            .filter(|d| d.is_valid())
            .map(mail_parser::DateTime::to_timestamp);
        let zone_problem = (message.headers().iter())
            .find(|h| h.name.as_str().eq_ignore_ascii_case("date"))
            .and_then(|h| zone_problem(&super::header_text(h, raw)).map(|z| z.owned()));
        DateFacts { time, zone_problem }
    }
}

/// A header value unfolded (line breaks and the white space after them become one space) and
/// trimmed; borrowed when it has no line break.
pub fn unfold(s: &str) -> Cow<'_, str> {
    let s = s.trim();
    if memchr::memchr2(b'\r', b'\n', s.as_bytes()).is_none() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        if c == '\r' || c == '\n' {
            space = true;
            continue;
        }
        if space && (c == ' ' || c == '\t') {
            if !out.ends_with(' ') {
                out.push(' ');
            }
            continue;
        }
        space = false;
        out.push(c);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_zones_as_the_lua_patterns_read_them() {
        use ZoneProblem::{BadOffset as Bad, Malformed as Odd};
        // what follows "Thu, 22 Aug 2002 18:26:25"
        let after_time: &[(&str, Option<ZoneProblem<&str>>)] = &[
            (" -0700", None),
            (" -0700 (PDT)", None),
            (" +0100 CET", None),
            (" z", None),
            (" 01800", Some(Odd("01800"))),
            (" GMT+1", Some(Odd("GMT+1"))),
            (" +-0500", Some(Odd("+-0500"))),
            (" UTC+0200", Some(Odd("UTC+0200"))),
            (" +01:00", Some(Odd("+01:00"))),
            (" Europe/London", Some(Odd("Europe/London"))),
            // an impossible offset wins, and shows the first sign and four digits written
            (" -1900", Some(Bad("-1900"))),
            (" +0575", Some(Bad("+0575"))),
            (" +2500 (x)", Some(Bad("+2500"))),
            // nothing after the time: INVALID_DATE's business
            ("", None),
            ("   ", None),
            // a comment is removed only when it ends the value, balanced
            (" -0700 (PDT) (x)", Some(Odd("-0700 (PDT)"))),
            (" +0000 (GMT) trailing", Some(Odd("+0000 (GMT) trailing"))),
            (" -0400 (EDT", Some(Odd("-0400 (EDT"))),
        ];
        for (rest, want) in after_time {
            let value = format!("Thu, 22 Aug 2002 18:26:25{rest}");
            assert_eq!(zone_problem(&value), *want, "{value:?}");
        }
        let whole: &[(&str, Option<ZoneProblem<&str>>)] = &[
            ("22 Aug 2002 18:26 GMT", None),
            (
                "Fri, 30 Aug 02 21:48:08 Eastern Daylight Time",
                Some(Odd("Eastern Daylight Time")),
            ),
            ("no time here", None),
            ("Sat Sep 21 08:18:08 2002", None),
            // seconds of one digit; three digits are no time at all
            ("10:11:1 ABCD", Some(Odd("ABCD"))),
            ("12:34:567 X", None),
        ];
        for (value, want) in whole {
            assert_eq!(zone_problem(value), *want, "{value:?}");
        }
    }

    #[test]
    fn received_times() {
        assert_eq!(
            received_time("from a by b; Thu, 22 Aug 2002 18:26:25 -0700"),
            Some(1_030_065_985)
        );
        // no seconds: the strict parser refuses, the loose one reads it
        assert_eq!(parse_strict("22 Aug 02 18:26 GMT"), None);
        assert_eq!(
            received_time("from a by b; 22 Aug 02 18:26 GMT"),
            Some(1_030_040_760)
        );
        assert_eq!(received_time("from a by b (no date)"), None);
        // the last ";" starts the date
        assert_eq!(
            received_time("from a (x; y) by b; Thu, 22 Aug 2002 18:26:25 +0000"),
            Some(1_030_040_785)
        );
        // invalid UTF-8 before the date does not matter; inside it, it reads as U+FFFD
        assert_eq!(
            received_time_bytes(b"from \xff by b; Thu, 22 Aug 2002 18:26:25 +0000"),
            Some(1_030_040_785)
        );
        assert_eq!(
            received_time_bytes(b"from a; 22 Aug 2002 18:26:25 \xff"),
            received_time(&String::from_utf8_lossy(
                b"from a; 22 Aug 2002 18:26:25 \xff"
            ))
        );
    }

    /// Where replay's reading of a Received stamp and the rules' part: each caller keeps its own.
    #[test]
    fn replay_reads_received_stamps_as_mail_parser_does() {
        let both = |stamp: &str| {
            let value = format!("from x by y; {stamp}\r\n");
            (
                received_time_mail_parser(value.as_bytes()),
                received_time(&value),
            )
        };
        let t = 1_030_968_000; // 2 Sep 2002 12:00:00 UTC
        assert_eq!(both("Mon, 2 Sep 2002 12:00:00 +0000"), (Some(t), Some(t)));
        assert_eq!(
            both("Mon, 2 Sep 2002 12:00 +0000 (GMT)"),
            (Some(t), Some(t))
        );
        // mail-parser ignores the zone name; the rules read EDT as -0400
        assert_eq!(
            both("2 Sep 2002 12:00:00 EDT"),
            (Some(t), Some(t + 4 * 3600))
        );
        // a two-digit year is 19xx to mail-parser, 2002 to the rules
        let (replay, rules) = both("2 Sep 02 12:00:00 +0000");
        assert!(replay.is_some_and(|r| r < 0), "{replay:?}");
        assert_eq!(rules, Some(t));
        // an impossible hour: mail-parser counts on, the rules refuse the stamp
        assert_eq!(
            both("2 Sep 2002 25:00:00 +0000"),
            (Some(t + 13 * 3600), None)
        );
        assert_eq!(both("no date"), (None, None));
    }

    #[test]
    fn loose_dates_as_util_parse_date_reads_them() {
        for (s, want) in [
            ("Thu, 22 Aug 2002 18:26:25 -0700", Some(1_030_065_985)),
            ("22 Aug 02 18:26 GMT", Some(1_030_040_760)),
            ("22 aug 2002 18:26:25 PDT", Some(1_030_065_985)),
            // unknown names count as UTC
            ("22 Aug 2002 18:26:25 XYZ", Some(1_030_040_785)),
            // 2-digit years: below 50 in this century; 3 digits: 1900 +
            ("1 Jan 49 00:00", Some(2_493_072_000)),
            ("1 Jan 102 00:00", Some(1_009_843_200)),
            ("1 Foo 2002 00:00", None),
            ("32 Aug 2002 18:26", None),
            ("22 Aug 2002 24:00", None),
            ("no date", None),
        ] {
            assert_eq!(parse_loose(s), want, "{s:?}");
        }
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    /// `ParsedMessage::date` as `msg:date()` and `msg:date_zone()` read the header: the time
    /// by mail-parser, the zone of the first Date header's unfolded text.
    #[test]
    fn date_facts_of_parsed_messages() {
        use crate::message::{parse, prepare, Limits};
        let facts = |raw: &str| {
            let input = prepare(raw.as_bytes(), &Limits::default());
            parse(&input, &Limits::default()).date
        };
        assert_eq!(
            facts("Date: Thu, 22 Aug 2002 18:26:25 -0700\nSubject: x\n\nbody\n"),
            DateFacts {
                time: Some(1_030_065_985),
                zone_problem: None
            }
        );
        assert_eq!(
            facts("date: Thu, 22 Aug 2002\n 18:26:25\n\tGMT+1\nSubject: x\n\nbody\n"),
            DateFacts {
                // (mail-parser reads the zone as GMT)
                time: Some(1_030_040_785),
                zone_problem: Some(ZoneProblem::Malformed("GMT+1".into()))
            }
        );
        assert_eq!(
            facts("Date: Thu, 22 Aug 2002 18:26:25 -1900\nSubject: x\n\nbody\n").zone_problem,
            Some(ZoneProblem::BadOffset("-1900".into()))
        );
        // no seconds: mail-parser gives no time (`invalid_date`), and the zone is fine
        assert_eq!(
            facts("Date: 22 Aug 2002 18:26 GMT\nSubject: x\n\nbody\n"),
            DateFacts::default()
        );
        assert!(facts("Subject: x\n\nbody\n").is_empty());
        let json = serde_json::to_value(DateFacts {
            time: Some(1),
            zone_problem: Some(ZoneProblem::BadOffset("-1900".into())),
        })
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({"time": 1, "zone_problem": "bad_offset", "zone": "-1900"})
        );
    }

    #[test]
    fn unfolds_like_the_view() {
        assert_eq!(unfold(" a\r\n\tb\r\n  c "), "a b c");
        assert!(matches!(unfold(" a b "), Cow::Borrowed("a b")));
    }
}
