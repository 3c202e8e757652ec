//! The classifier's features: what of a scanned message the model weighs, each a 64-bit hash
//! of a family tag and a value (the shingles' stable XXH3), folded into the table by the model.
//!
//! Owns: tokenization for the model (words of the normalized subject and body, CJK character
//! pairs, adjacent word pairs of the body), header, MIME part, URL and attachment tokens, rule
//! symbols, reputation buckets, and the per-message limits. Bump `FEATURE_VERSION` whenever
//! any of it changes what a message hashes to: snapshots trained under another version are
//! refused.

use crate::entities::{Entities, IpSource};
use crate::message::{Anomalies, ParsedMessage};
use crate::shingle::{hash_bytes, Kind, Shingle};
use crate::store::{Counter, WindowCounts};

/// Version of the feature hashing; stored in classifier snapshots.
pub const FEATURE_VERSION: u32 = 4;

/// Words taken from the subject and from the body at most.
const MAX_SUBJECT_WORDS: usize = 40;
const MAX_BODY_WORDS: usize = 600;
/// Bigrams pair a word with the next `OSB_WINDOW - 1` words, the distance part of the feature.
/// Adjacent pairs only: wider windows tripled the body's share of a message's features and the
/// model ranked worse (replay; docs/perf-log.md, "Feature version 4").
const OSB_WINDOW: usize = 2;
/// Longest word kept, in bytes; longer ones become a length class.
const MAX_WORD_BYTES: usize = 24;

/// Feature families: the first byte of every hashed feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Family {
    Bias = 0,
    SubjectWord = 1,
    Word = 2,
    Bigram = 3,
    FromDomain = 4,
    FromName = 5,
    Mailer = 6,
    MessageIdDomain = 7,
    Shape = 8,
    Anomaly = 9,
    UrlHost = 10,
    UrlDomain = 11,
    Attachment = 12,
    Symbol = 13,
    Reputation = 14,
    HeaderName = 15,
    HeaderToken = 16,
    HeaderShape = 17,
    Part = 18,
}

/// A message's feature hashes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    hashes: Vec<u64>,
    buf: Vec<u8>,
}

/// The piece types whose reputation `Features::add_reputation` reads.
pub const REPUTATION_KINDS: [Kind; 6] = [
    Kind::From,
    Kind::FromDomain,
    Kind::SenderIp,
    Kind::UrlDomain,
    Kind::Subject,
    Kind::BodyExact,
];

impl Features {
    /// Adds one feature; returns its hash.
    pub fn add(&mut self, family: Family, value: &[u8]) -> u64 {
        self.buf.clear();
        self.buf.push(family as u8);
        self.buf.extend_from_slice(value);
        let h = hash_bytes(&self.buf);
        self.hashes.push(h);
        h
    }

    /// Adds a rule symbol that hit (callers keep to `learns_symbol`).
    pub fn add_symbol(&mut self, name: &str) {
        self.add(Family::Symbol, name.as_bytes());
    }

    /// Adds bucketed reputation of the message's pieces in the store window `window`: per
    /// piece type, the highest spam ratio and complaint and rescue counts of its keys.
    pub fn add_reputation(&mut self, shingles: &[Shingle], stats: &[WindowCounts], window: usize) {
        for kind in REPUTATION_KINDS {
            let mut ratio: Option<u64> = None;
            let (mut complaints, mut rescues, mut seen) = (0u64, 0u64, 0u64);
            for (s, c) in shingles.iter().zip(stats) {
                if s.kind != kind {
                    continue;
                }
                let Some(w) = c.windows.get(window) else {
                    continue;
                };
                let (spam, ham) = (w[Counter::Spam as usize], w[Counter::Ham as usize]);
                if spam + ham >= 3 {
                    let r = spam * 4 / (spam + ham);
                    ratio = Some(ratio.map_or(r, |x| x.max(r)));
                }
                complaints = complaints.max(w[Counter::Complaint as usize]);
                rescues = rescues.max(w[Counter::Rescue as usize]);
                seen = seen.max(w[Counter::Seen as usize]);
            }
            let id = kind.id().to_le_bytes();
            let mut tag = |what: u8, bucket: u64| {
                let mut v = [0u8; 4];
                v[..2].copy_from_slice(&id);
                v[2] = what;
                v[3] = bucket.min(255) as u8;
                self.add(Family::Reputation, &v);
            };
            if let Some(r) = ratio {
                tag(b'r', r);
            }
            if complaints > 0 {
                tag(b'c', log_bucket(complaints));
            }
            if rescues > 0 {
                tag(b'h', log_bucket(rescues));
            }
            if seen > 0 {
                tag(b's', log_bucket(seen));
            }
        }
    }

    /// Sorts and removes duplicates (features are present or absent, not counted).
    pub fn finish(&mut self) {
        self.hashes.sort_unstable();
        self.hashes.dedup();
    }

    /// Features from hashes already finished (the learn journal's).
    pub fn from_hashes(hashes: Vec<u64>) -> Features {
        Features {
            hashes,
            buf: Vec::new(),
        }
    }

    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// Whether the model weighs a rule symbol of this score: spam signs only. Good signs (negative
/// scores) already pull a message down through the rules; learned from spam and easy ham they
/// turn into spam signs (16% of spam and 12% of easy ham link their own domain, 80% of
/// subscribed newsletters do), and score-0 symbols are signs the scores decided not to count.
/// Cross-validated on the dev split this took hard ham at add header from 10.0 to 8.4% (2
/// folds) and 15.0 to 13.1% (5 folds) with no spam lost (docs/perf-log.md). Leaving them out
/// needs no new `FEATURE_VERSION`: a snapshot's weights for them just stop being read.
pub fn learns_symbol(score: f64) -> bool {
    score > 0.0
}

/// The subject after its leading list tags (`[SA] `, `[scoop] Re: `): a tag marks the list a
/// message went through, which a spammer can copy, not who wrote it; the List-* headers are left
/// out for the same reason. Measured neutral on every replay (docs/perf-log.md, 2026-11-29);
/// kept because a copied tag no longer buys ham weight. Dropping features changes no other
/// feature's hash, so no new `FEATURE_VERSION`: a snapshot's weights for them go unread.
fn without_list_tags(subject: &str) -> &str {
    let mut s = subject.trim_start();
    for _ in 0..3 {
        let t = s
            .strip_prefix("re:")
            .or_else(|| s.strip_prefix("fw:"))
            .or_else(|| s.strip_prefix("fwd:"))
            .unwrap_or(s)
            .trim_start();
        match t.strip_prefix('[').and_then(|r| r.split_once(']')) {
            Some((tag, rest)) if tag.len() <= 24 => s = rest.trim_start(),
            _ => return s,
        }
    }
    s
}

/// 1, 2-3, 4-7, …: the bit length.
fn log_bucket(n: u64) -> u64 {
    u64::from(64 - n.leading_zeros())
}

/// The content features of a message: words and bigrams of its subject and body, header
/// tokens, its shape, anomalies, URL hosts and domains, attachments. Call `finish` after adding
/// symbols and reputation.
pub fn extract(
    message: &ParsedMessage<'_>,
    entities: &Entities,
    anomalies: &Anomalies,
) -> Features {
    let mut f = Features::default();
    f.add(Family::Bias, b"");
    for w in words(without_list_tags(&message.subject.normalized)).take(MAX_SUBJECT_WORDS) {
        f.add(Family::SubjectWord, w.as_bytes());
    }
    let body: std::borrow::Cow<'_, str> = if message.body.normalized.trim().is_empty() {
        std::borrow::Cow::Owned(message.html_text.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(&message.body.normalized)
    };
    // Each word is hashed once; a bigram hashes the pair of word hashes and their distance.
    let word_hashes: Vec<u64> = words(&body)
        .take(MAX_BODY_WORDS)
        .map(|w| f.add(Family::Word, w.as_bytes()))
        .collect();
    let mut pair = [0u8; 18];
    pair[0] = Family::Bigram as u8;
    for (i, a) in word_hashes.iter().enumerate() {
        pair[1..9].copy_from_slice(&a.to_le_bytes());
        for d in 1..OSB_WINDOW {
            let Some(b) = word_hashes.get(i + d) else {
                break;
            };
            pair[9] = d as u8;
            pair[10..].copy_from_slice(&b.to_le_bytes());
            f.hashes.push(hash_bytes(&pair));
        }
    }
    if let Some(from) = entities.from() {
        f.add(Family::FromDomain, from.domain.as_bytes());
        if let Some(name) = &from.name {
            for w in words(&name.to_lowercase()).take(6) {
                f.add(Family::FromName, w.as_bytes());
            }
        }
        if entities.message_id_domain.as_deref() == Some(from.domain.as_str()) {
            f.add(Family::Shape, b"mid=from");
        }
    } else {
        f.add(Family::Shape, b"no-from");
    }
    if let Some(mailer) = &entities.mailer {
        let first = mailer.split([' ', '/', '(']).next().unwrap_or("");
        f.add(Family::Mailer, first.to_lowercase().as_bytes());
    }
    if let Some(domain) = &entities.message_id_domain {
        f.add(Family::MessageIdDomain, domain.as_bytes());
    }
    let hops = entities
        .ips
        .iter()
        .filter(|i| i.source == IpSource::Received)
        .count();
    let shape: [(&[u8], u64); 5] = [
        (b"hops", hops as u64),
        (b"parts", message.part_count as u64),
        (b"urls", log_bucket(entities.urls.len() as u64)),
        (b"domains", log_bucket(entities.domains.len() as u64)),
        (b"body", log_bucket(body.len() as u64 / 64)),
    ];
    for (name, n) in shape {
        let mut v = name.to_vec();
        v.push(b'=');
        v.push(n.min(255) as u8);
        f.add(Family::Shape, &v);
    }
    if message.body.normalized.trim().is_empty() && !message.html_text.is_empty() {
        f.add(Family::Shape, b"html-only");
    }
    for a in anomalies.iter() {
        f.add(Family::Anomaly, a.as_str().as_bytes());
    }
    for h in entities.hosts.iter().take(20) {
        f.add(Family::UrlHost, h.as_bytes());
    }
    for d in entities.domains.iter().take(20) {
        f.add(Family::UrlDomain, d.as_bytes());
    }
    add_parts(&mut f, message);
    for a in entities.attachments.iter().take(10) {
        f.add(Family::Attachment, a.content_type.as_bytes());
        if let Some(ext) = &a.extension {
            f.add(Family::Attachment, ext.as_bytes());
        }
    }
    add_headers(&mut f, message);
    f
}

/// MIME parts looked at for their content types and charsets.
const MAX_PARTS: usize = 20;

/// The content type and charset of every MIME part (the top-level header names only the
/// outermost): `text/html` inside `multipart/alternative`, `ks_c_5601-1987` in a part. Charsets
/// tell the languages a deployment's mail is written in.
fn add_parts(f: &mut Features, message: &ParsedMessage<'_>) {
    use mail_parser::MimeHeaders;
    let Some(mime) = &message.mime else {
        return;
    };
    let mut v = Vec::with_capacity(48);
    for part in mime.parts.iter().take(MAX_PARTS) {
        // The rules' part type (`msg:parts()`), so both read a part alike: a part without a
        // Content-Type is text/plain (RFC 2045) here too. No new `FEATURE_VERSION`: such parts
        // gain the feature real text/plain parts already had, and a type without a subtype
        // (`type:text` instead of `type:text/`) is new, so no learned weight changes meaning.
        v.clear();
        v.extend_from_slice(b"type:");
        v.extend_from_slice(crate::message::part_type(part).as_bytes());
        f.add(Family::Part, &v);
        let Some(ct) = part.content_type() else {
            continue;
        };
        if let Some(charset) = ct.attribute("charset") {
            v.clear();
            v.extend_from_slice(b"charset:");
            v.extend_from_slice(charset.trim().as_bytes());
            v.make_ascii_lowercase();
            f.add(Family::Part, &v);
        }
    }
}

/// Headers whose values are split into tokens, with the most tokens taken from each.
const TOKENIZED_HEADERS: [(&str, usize); 17] = [
    ("received", 24),
    ("from", 8),
    ("reply-to", 8),
    ("sender", 8),
    ("return-path", 4),
    ("to", 8),
    ("cc", 8),
    ("x-mailer", 8),
    ("user-agent", 8),
    ("x-mimeole", 8),
    ("precedence", 2),
    ("content-type", 6),
    ("content-transfer-encoding", 2),
    ("mime-version", 4),
    ("x-priority", 4),
    ("x-msmail-priority", 2),
    ("organization", 6),
];
/// Received headers tokenized, nearest first: ours, the sender's relay, and on mailing-list mail
/// the hops before the list server, where the message really came from.
const RECEIVED_HOPS: usize = 8;
/// Header names taken at most.
const MAX_HEADERS: usize = 64;

/// Header tokens: which headers a message has (mailers and spamware have telltale sets), the
/// tokens of the headers in `TOKENIZED_HEADERS` (hosts of the nearest Received hops, sender
/// addresses, mailer, list, content type), and the character-class shapes of the Date and
/// Message-ID values (generated ones have their own).
fn add_headers(f: &mut Features, message: &ParsedMessage<'_>) {
    let Some(mime) = &message.mime else {
        return;
    };
    let raw = message.raw;
    let mut received = 0;
    let mut name = String::new();
    let mut token = Vec::with_capacity(64);
    for h in mime.headers().iter().take(MAX_HEADERS) {
        name.clear();
        name.push_str(h.name.as_str());
        name.make_ascii_lowercase();
        // A list's headers say which list a message went through, and anyone can add them.
        if name.starts_with("list-") {
            continue;
        }
        f.add(Family::HeaderName, name.as_bytes());
        let (s, e) = (h.offset_start as usize, h.offset_end as usize);
        if s > e || e > raw.len() {
            continue;
        }
        let value = &raw[s..e];
        match name.as_str() {
            "date" | "message-id" => {
                token.clear();
                token.extend_from_slice(name.as_bytes());
                token.push(b':');
                shape(value, &mut token);
                f.add(Family::HeaderShape, &token);
                continue;
            }
            "received" => {
                received += 1;
                if received > RECEIVED_HOPS {
                    continue;
                }
            }
            _ => {}
        }
        let Some(&(_, most)) = TOKENIZED_HEADERS.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        let tokens = value
            .split(|b| b.is_ascii_whitespace() || b"()<>[];,\"=:".contains(b))
            .filter(|t| (2..=40).contains(&t.len()))
            .take(most);
        for t in tokens {
            token.clear();
            token.extend_from_slice(name.as_bytes());
            token.push(b':');
            token.extend(t.iter().map(u8::to_ascii_lowercase));
            f.add(Family::HeaderToken, &token);
        }
    }
}

/// Character classes of a header value, runs collapsed: `Sat, 07 Sep 2002 18:24:06 +0900`
/// becomes `a, 9 a 9 9:9:9 +9`; the first 40 classes.
fn shape(value: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    for &b in value.trim_ascii() {
        let class = match b {
            b'0'..=b'9' => b'9',
            b'a'..=b'z' | b'A'..=b'Z' => b'a',
            b' ' | b'\t' | b'\r' | b'\n' => b' ',
            128.. => b'u',
            other => other,
        };
        if out.len() > start && out.last() == Some(&class) {
            continue;
        }
        if out.len() - start >= 40 {
            break;
        }
        out.push(class);
    }
}

/// Words of normalized text: runs of letters and digits, at least two bytes; long ones and long
/// numbers become classes (`#len` and `@len`), so identifiers don't flood the table. Scripts
/// written without spaces between words (Chinese, Japanese; Korean too, whose words run long)
/// give overlapping pairs of characters instead, as CJK search indexes do.
fn words(text: &str) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    // (A CJK piece, one or two characters of three bytes or more, passes these filters as is.)
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .flat_map(split_cjk)
        .filter(|w| w.len() >= 2)
        .map(|w| {
            if w.bytes().all(|b| b.is_ascii_digit()) && w.len() > 4 {
                std::borrow::Cow::Owned(format!("#{}", w.len()))
            } else if w.len() > MAX_WORD_BYTES {
                std::borrow::Cow::Owned(format!("@{}", w.len() / 8))
            } else {
                std::borrow::Cow::Borrowed(w)
            }
        })
}

/// Whether a character belongs to a script written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}'     // Hangul Jamo
        | '\u{3040}'..='\u{30FF}'   // Hiragana, Katakana
        | '\u{3130}'..='\u{318F}'   // Hangul compatibility Jamo
        | '\u{3400}'..='\u{4DBF}'   // CJK extension A
        | '\u{4E00}'..='\u{9FFF}'   // CJK unified ideographs
        | '\u{AC00}'..='\u{D7AF}'   // Hangul syllables
        | '\u{F900}'..='\u{FAFF}'   // CJK compatibility ideographs
        | '\u{FF66}'..='\u{FF9F}') // half-width Katakana
}

/// Splits a run of letters into its non-CJK words and the overlapping character pairs of its CJK
/// stretches (a lone CJK character stands for itself).
fn split_cjk(run: &str) -> impl Iterator<Item = &str> {
    let mut rest = run;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        if !is_cjk(first) {
            let end = rest.find(is_cjk).unwrap_or(rest.len());
            let (word, tail) = rest.split_at(end);
            rest = tail;
            return Some(word);
        }
        let one = first.len_utf8();
        let second = rest[one..].chars().next().filter(|&c| is_cjk(c));
        let piece = &rest[..one + second.map_or(0, char::len_utf8)];
        // Step one character, so pairs overlap; past a pair that ends the CJK stretch, step two
        // (its last character is in the pair already).
        rest = &rest[one..];
        if let Some(c) = second {
            if !rest[c.len_utf8()..].starts_with(is_cjk) {
                rest = &rest[c.len_utf8()..];
            }
        }
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_of(family: Family, value: &[u8]) -> u64 {
        Features::default().add(family, value)
    }

    fn features_of(raw: &[u8]) -> Vec<u64> {
        let limits = crate::message::Limits::default();
        let input = crate::message::prepare(raw, &limits);
        let a = crate::scan::analyze(&input, &Default::default(), &limits);
        let mut f = extract(&a.message, &a.entities, &a.anomalies);
        f.finish();
        f.hashes().to_vec()
    }

    #[test]
    fn a_forged_list_tag_and_list_headers_change_no_feature() {
        let plain = b"From: a@spam.example\nSubject: Cheap pills today\nMessage-ID: <1@spam.example>\n\nBuy now\n";
        let listed = b"From: a@spam.example\nList-Id: Irish Linux Users <ilug.linux.ie>\nList-Unsubscribe: <mailto:leave@linux.ie>\nList-Post: <mailto:ilug@linux.ie>\nSubject: [ILUG] Cheap pills today\nMessage-ID: <1@spam.example>\n\nBuy now\n";
        assert_eq!(features_of(plain), features_of(listed));
    }

    #[test]
    fn part_features_are_the_rules_part_types() {
        let raw = b"From: a@example.com\nSubject: x\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\nno content type here\n--b\nContent-Type: TEXT/HTML; charset=UTF-8\n\n<p>hi</p>\n--b--\n";
        let limits = crate::message::Limits::default();
        let input = crate::message::prepare(raw, &limits);
        let a = crate::scan::analyze(&input, &Default::default(), &limits);
        let mime = a.message.mime.as_ref().expect("parsed");
        let got = features_of(raw);
        for part in mime.parts.iter() {
            let t = crate::message::part_type(part);
            let h = hash_of(Family::Part, format!("type:{t}").as_bytes());
            assert!(got.binary_search(&h).is_ok(), "{t}");
        }
        assert!(
            got.binary_search(&hash_of(Family::Part, b"type:text/plain"))
                .is_ok(),
            "a part without Content-Type"
        );
    }

    #[test]
    fn list_tags_are_not_subject_words() {
        assert_eq!(without_list_tags("[sa] cheap pills"), "cheap pills");
        assert_eq!(without_list_tags("re: [scoop] [ilug] deal"), "deal");
        assert_eq!(without_list_tags("cheap [sa] pills"), "cheap [sa] pills");
        assert_eq!(without_list_tags("[unclosed tag"), "[unclosed tag");
        let long = format!("[{}] x", "a".repeat(40));
        assert_eq!(without_list_tags(&long), long, "not a tag: kept");
    }

    #[test]
    fn words_and_classes() {
        let got: Vec<String> = words("Buy 1234567 now!! a x-ray aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
            .map(|w| w.into_owned())
            .collect();
        assert_eq!(got, ["Buy", "#7", "now", "ray", "@4"]);
        let got: Vec<String> = words("未承諾広告※灼熱!出会いのvip広場 x日 한국어")
            .map(|w| w.into_owned())
            .collect();
        assert_eq!(
            got,
            [
                "未承", "承諾", "諾広", "広告", "灼熱", "出会", "会い", "いの", "vip", "広場",
                "日", "한국", "국어"
            ]
        );
    }

    #[test]
    fn header_shapes_and_tokens() {
        let mut out = b"date:".to_vec();
        shape(b" Sat, 07 Sep 2002 18:24:06 +0900\r\n", &mut out);
        assert_eq!(out, b"date:a, 9 a 9 9:9:9 +9");
        let raw = b"From: a@example.com\nList-Id: Irish Linux Users <ilug.linux.ie>\nX-Odd: 1\nSubject: hi\n\nbody text here\n";
        let f = features_of(raw);
        let has = |family: Family, value: &[u8]| f.binary_search(&hash_of(family, value)).is_ok();
        assert!(has(Family::HeaderName, b"x-odd"));
        assert!(!has(Family::HeaderName, b"list-id"));
        assert!(
            !has(Family::HeaderToken, b"list-id:ilug.linux.ie"),
            "a list's name is copied as easily as its subject tag"
        );
        assert!(has(Family::HeaderToken, b"from:a@example.com"));
        assert!(
            !has(Family::HeaderToken, b"x-odd:1"),
            "only listed headers are tokenized"
        );
    }

    #[test]
    fn same_message_same_features_and_families_differ() {
        let raw = b"From: A <a@example.com>\nSubject: cheap meds\nMessage-ID: <1@example.com>\n\nbuy cheap meds now at http://pills.example.net/x\n";
        let limits = crate::message::Limits::default();
        let input = crate::message::prepare(raw, &limits);
        let a = crate::scan::analyze(&input, &Default::default(), &limits);
        let mut f1 = extract(&a.message, &a.entities, &a.anomalies);
        let mut f2 = extract(&a.message, &a.entities, &a.anomalies);
        f1.finish();
        f2.finish();
        assert_eq!(f1, f2);
        assert!(f1.len() > 10, "{}", f1.len());
        let mut x = Features::default();
        x.add(Family::Word, b"cheap");
        x.add(Family::SubjectWord, b"cheap");
        x.finish();
        assert_eq!(x.len(), 2, "the family is part of the hash");
        assert!(
            f1.hashes().binary_search(&x.hashes()[0]).is_ok()
                || f1.hashes().binary_search(&x.hashes()[1]).is_ok()
        );
    }
}
