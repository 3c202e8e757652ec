//! The sending side of one Received header: the IP literal and the name of the host that
//! connected. Only the `from` clause (before ` by `) speaks about the sender, in the styles real
//! MTAs write:
//!
//! - Postfix, Sendmail: `from helo.example (rdns.example [192.0.2.1])`, `[IPv6:2001:db8::1]`
//! - Exim: `from [192.0.2.1] (helo=x)`, `from host ([2001:db8::1] helo=x)`
//! - qmail: `from unknown (HELO x) (198.51.100.7)`
//! - bare: `from 192.0.2.1 by ...`
//!
//! mail-parser's own Received parser costs more than the rest of MIME parsing together, and
//! this is all the pipeline needs of it.

use std::net::IpAddr;

/// The sending IP and host name of a Received header's text (without the field name).
pub fn sender(text: &str) -> Option<(IpAddr, Option<String>)> {
    let text = text.trim_start();
    let lower_prefix = text.get(..5).map(str::to_ascii_lowercase);
    if lower_prefix.as_deref() != Some("from ") {
        return None;
    }
    let clause = &text[5..];
    let end = by_clause(clause).unwrap_or(clause.len());
    let clause = &clause[..end];
    let host_token = clause
        .split(|c: char| c.is_whitespace() || c == '(')
        .find(|t| !t.is_empty())
        .unwrap_or_default();
    let ip = bracketed_ip(clause, b'[', b']')
        .or_else(|| bracketed_ip(clause, b'(', b')'))
        .or_else(|| parse_ip(host_token))?;
    let host = host_token
        .trim_matches(|c| c == '[' || c == ']')
        .to_ascii_lowercase();
    let host = (!host.is_empty() && parse_ip(&host).is_none() && host != "unknown")
        .then_some(host)
        .or_else(|| helo_name(clause));
    Some((ip, host))
}

/// The name after `HELO ` / `EHLO ` (qmail) or `helo=` (Exim) in the from clause.
fn helo_name(clause: &str) -> Option<String> {
    let at = ["(helo ", "(ehlo ", "helo="]
        .iter()
        .find_map(|k| find_ci(clause, k).map(|i| i + k.len()))?;
    let name: String = clause[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ')' | ']' | ';'))
        .collect();
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

/// The first IP literal between `open` and `close`, looking at each bracket's last word (so
/// `(rdns.example [192.0.2.1])` and `(198.51.100.7)` both work).
fn bracketed_ip(clause: &str, open: u8, close: u8) -> Option<IpAddr> {
    let mut rest = clause;
    // (memchr: `str::find` of a char costs ~170 instructions a call on these short clauses)
    while let Some(start) = memchr::memchr(open, rest.as_bytes()) {
        let after = &rest[start + 1..];
        let end = memchr::memchr(close, after.as_bytes()).unwrap_or(after.len());
        let inner = &after[..end];
        let found = inner
            .split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == '(' || c == ')')
            .filter(|w| !w.is_empty())
            .find_map(parse_ip);
        if found.is_some() {
            return found;
        }
        rest = after.get(end + 1..).unwrap_or_default();
    }
    None
}

fn parse_ip(word: &str) -> Option<IpAddr> {
    let word = word.trim_matches(|c| matches!(c, '[' | ']' | '(' | ')' | ';' | ','));
    // An IP literal starts with a digit, a hex digit of IPv6, ':' or "IPv6:"; most words don't.
    let first = *word.as_bytes().first()?;
    if !(first.is_ascii_hexdigit() || first == b':' || first == b'I' || first == b'i') {
        return None;
    }
    let word = word
        .get(..5)
        .filter(|p| p.eq_ignore_ascii_case("ipv6:"))
        .map_or(word, |_| &word[5..]);
    let word = &word[..memchr::memchr(b'%', word.as_bytes()).unwrap_or(word.len())]; // zone ids
    word.parse().ok()
}

/// Where the ` by ` clause starts: the whitespace before a "by" word.
fn by_clause(clause: &str) -> Option<usize> {
    let b = clause.as_bytes();
    memchr::memchr2_iter(b'b', b'B', b).find_map(|i| {
        let before = i.checked_sub(1).map(|j| b[j])?;
        let word = b.get(i..i + 3)?;
        (before.is_ascii_whitespace()
            && word[1].eq_ignore_ascii_case(&b'y')
            && word[2].is_ascii_whitespace())
        .then_some(i - 1)
    })
}

/// Position of an ASCII `needle` in `haystack`, ignoring ASCII case.
fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    let first = *n.first()?;
    let (lower, upper) = (first.to_ascii_lowercase(), first.to_ascii_uppercase());
    let mut from = 0;
    while let Some(i) = memchr::memchr2(lower, upper, h.get(from..)?) {
        let at = from + i;
        if h.len() - at >= n.len() && h[at..at + n.len()].eq_ignore_ascii_case(n) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<String> {
        sender(text).map(|(ip, _)| ip.to_string())
    }

    #[test]
    fn styles_of_real_mtas() {
        let cases = [
            (
                "from mx.example.com (mx.example.com [192.0.2.10])\r\n\tby a.example (Postfix)",
                "192.0.2.10",
            ),
            (
                "from unknown (HELO x) (198.51.100.7) by b.example",
                "198.51.100.7",
            ),
            (
                "from h ([IPv6:2001:DB8:0:0:0:0:0:2]) by c.example",
                "2001:db8::2",
            ),
            (
                "from h.example ([2001:db8::1] helo=h) by d.example with esmtp (Exim 4.96)",
                "2001:db8::1",
            ),
            ("from [203.0.113.5] (helo=x) by e.example", "203.0.113.5"),
            ("from 203.0.113.6 by f.example", "203.0.113.6"),
            ("FROM host (host [192.0.2.3]) BY g.example", "192.0.2.3"),
            (
                "from bybox.example (bybox [192.0.2.4])\n\tby h.example",
                "192.0.2.4",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(ip(text).as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn host_names_are_kept() {
        let (_, host) = sender("from Mail.Example.COM (rdns [192.0.2.1]) by x").unwrap();
        assert_eq!(host.as_deref(), Some("mail.example.com"));
        let (_, host) = sender("from unknown (HELO Box) (198.51.100.7) by b").unwrap();
        assert_eq!(host.as_deref(), Some("box"));
        let (_, host) = sender("from [203.0.113.5] (helo=pc1) by e").unwrap();
        assert_eq!(host.as_deref(), Some("pc1"));
        let (_, host) = sender("from [203.0.113.5] by e").unwrap();
        assert_eq!(host, None);
    }

    #[test]
    fn by_clause_and_other_headers_are_ignored() {
        assert_eq!(ip("from h by e.example ([192.0.2.1])"), None);
        assert_eq!(ip("by localhost with IMAP (fetchmail-5.9.0) for x@y"), None);
        assert_eq!(
            ip("from phobos [127.0.0.1] by localhost"),
            Some("127.0.0.1".into())
        );
    }
}
