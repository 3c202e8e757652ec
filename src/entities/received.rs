//! The sending side of one Received header: the address that connected and the name of the host.
//! Only the `from` clause (before ` by `) speaks about the sender. In it, the receiving MTA writes
//! the address it saw in a parenthesized comment, while the word after `from` is most often the
//! client's HELO, a claim: a spammer greets with any `[a.b.c.d]` literal it likes. The address
//! is therefore the first IP literal inside a comment (`helo=`, `HELO x` and `ident=` values left
//! out, `user@` idents stripped); only when no comment holds one is it an IP outside the
//! comments (Exim without rDNS, bare `from 1.2.3.4`): the last `[...]` literal there, else the
//! first bare one (`from 198.51.100.1 [192.0.2.1] by`: the HELO first). The styles of real MTAs:
//!
//! - Postfix: `from helo (rdns [192.0.2.1])`, rdns `unknown` when it did not verify,
//!   `[IPv6:2001:db8::1]`; forged: `from [198.51.100.1] (unknown [192.0.2.1])`
//! - Sendmail: `from helo (rdns [192.0.2.1])`, `from helo ([192.0.2.1])`,
//!   `from helo (user@rdns [192.0.2.1] (may be forged))`, `(user@[192.0.2.1])`, `[IPv6:…]`
//! - Exim: `from rdns ([192.0.2.1]:port helo=x ident=y)`, `from rdns ([192.0.2.1])`; without
//!   rDNS the address comes first: `from [192.0.2.1] (helo=x)`, `from [192.0.2.1]:port
//!   (helo=[198.51.100.1])`, `from [2001:db8::1] (port=587 helo=x)`
//! - qmail: `from rdns (HELO helo) (192.0.2.1)`, `from unknown (HELO x) (user@192.0.2.1)`,
//!   `from helo (192.0.2.1)`; netqmail and qmail-ldap `([192.0.2.1])`; the HELO may be a bare
//!   address or sanitized to `?192.0.2.1?`
//! - Microsoft Exchange / Office 365: `from helo (192.0.2.1) by … with Microsoft SMTP Server`,
//!   `(2603:10b6:a03:1::17)`, zone ids (`fe80::1%11`)
//! - Gmail: `from helo (rdns. [192.0.2.1]) by mx.google.com with ESMTPS`
//! - Courier: `from helo (rdns [::ffff:192.0.2.1]) (AUTH: …)`, rdns `softdnserr`,
//!   `from helo ([::ffff:192.0.2.1])`, `from rdns (HELO x) ([::ffff:192.0.2.1])`
//! - also ZMailer `([192.0.2.1]:25 "EHLO x")`, CommuniGate `from [192.0.2.1] (account u HELO x)`,
//!   XMail `(192.0.2.1:23198)`, fetchmail, MDaemon and SMTPD32 `from helo [192.0.2.1] by …`,
//!   bare `from 192.0.2.1 by …`
//!
//! IPv4-mapped IPv6 addresses (`::ffff:192.0.2.1`) become the IPv4 address. The host is the name
//! in the HELO position, else the HELO name of a `helo=` / `HELO` value, else the verified rDNS
//! name before the address (`unknown` and `softdnserr` are no names, nor is anything without a
//! letter, such as a literal or qmail's `?192.0.2.1?`).
//!
//! mail-parser's own Received parser costs more than the rest of MIME parsing together, and
//! this is all the pipeline needs of it.

use std::net::IpAddr;

/// The sending IP and host name of a Received header's text (without the field name).
pub fn sender(text: &str) -> Option<(IpAddr, Option<String>)> {
    let hop = from_hop(text)?;
    let ip = hop_ip(&hop)?;
    let host = (hop.first)
        .or_else(|| hop.helo.and_then(name))
        .or_else(|| hop.connection.and_then(|(_, rdns)| rdns.and_then(name)))
        .map(str::to_ascii_lowercase);
    Some((ip, host))
}

/// The sending IP alone (`sender` without the host name).
pub fn sender_ip(text: &str) -> Option<IpAddr> {
    hop_ip(&from_hop(text)?)
}

/// The `from` clause of a Received header's text, parsed.
fn from_hop(text: &str) -> Option<Hop<'_>> {
    let text = text.trim_start();
    let b = text.as_bytes();
    if b.len() < 5 || !b[..4].eq_ignore_ascii_case(b"from") || !b[4].is_ascii_whitespace() {
        return None;
    }
    let clause = &text[5..];
    Some(Hop::parse(
        &clause[..by_clause(clause).unwrap_or(clause.len())],
    ))
}

fn hop_ip(hop: &Hop<'_>) -> Option<IpAddr> {
    let ip = (hop.connection.map(|(ip, _)| ip))
        .or(hop.outside_bracketed)
        .or(hop.outside_bare)?;
    Some(crate::entities::canonical_ip(ip))
}

/// A Received header (its value) whose client greeted with its bare address:
/// `from 192.0.2.7 ([192.0.2.7])`, the address not in the `[...]` literal form HELO asks for.
pub fn helo_is_bare_ip(value: &[u8]) -> bool {
    let Some(rest) = value.trim_ascii_start().strip_prefix(b"from") else {
        return false;
    };
    let after_from = rest.trim_ascii_start();
    if after_from.len() == rest.len() {
        return false; // "from" not followed by white space
    }
    let end = after_from
        .iter()
        .position(|&c| !(c.is_ascii_digit() || c == b'.'))
        .unwrap_or(after_from.len());
    let (ip, after) = after_from.split_at(end);
    let valid = std::str::from_utf8(ip)
        .is_ok_and(|t| t.parse::<std::net::Ipv4Addr>().is_ok() && t.split('.').count() == 4);
    if !valid {
        return false;
    }
    let after_ws = after.trim_ascii_start();
    after_ws.len() < after.len()
        && after_ws
            .strip_prefix(b"([")
            .and_then(|r| r.strip_prefix(ip))
            .is_some_and(|r| r.starts_with(b"])"))
}

/// What the from clause says, as written.
#[derive(Default)]
struct Hop<'a> {
    /// The name in the first word, when it is outside the comments and no address: the HELO
    /// (Postfix, Sendmail, Exchange, Gmail, Courier) or the rDNS name (Exim, qmail).
    first: Option<&'a str>,
    /// A `helo=` (Exim) or `HELO x` (qmail, Courier, CommuniGate) value.
    helo: Option<&'a str>,
    /// The first address in a comment, with the rDNS word written just before it.
    connection: Option<(IpAddr, Option<&'a str>)>,
    /// The last `[...]` address outside the comments: the one the MTA wrote in `from helo
    /// [192.0.2.1] by` (fetchmail, MDaemon, SMTPD32), where the HELO may be a literal too.
    outside_bracketed: Option<IpAddr>,
    /// The first bare address outside the comments (`from 192.0.2.1 by`).
    outside_bare: Option<IpAddr>,
}

impl<'a> Hop<'a> {
    fn parse(clause: &'a str) -> Self {
        let mut hop = Hop::default();
        // the current comment (0: outside), the word's place in it, and its first word
        let (mut comment, mut index, mut lead) = (0, 0, None);
        let mut helo_next = false;
        for (n, (word, c)) in Words::new(clause).enumerate() {
            if c != comment {
                (comment, index, lead, helo_next) = (c, 0, None, false);
            } else {
                index += 1;
            }
            if c == 0 {
                match word.literal() {
                    Some((ip, _)) if word.open.is_some() => hop.outside_bracketed = Some(ip),
                    Some((ip, _)) => {
                        hop.outside_bare.get_or_insert(ip);
                    }
                    None if n == 0 => hop.first = clean_name(word.address_part()),
                    None => {}
                }
                continue;
            }
            let text = word.text;
            if helo_next {
                helo_next = false;
                hop.helo.get_or_insert(text);
                continue;
            }
            if text.eq_ignore_ascii_case("helo") || text.eq_ignore_ascii_case("ehlo") {
                helo_next = true;
                continue;
            }
            if let Some(value) = strip_prefix_ci(text, "helo=") {
                hop.helo.get_or_insert(value);
                continue;
            }
            if strip_prefix_ci(text, "ident=").is_some() {
                continue;
            }
            if hop.connection.is_none() {
                if let Some((ip, attached)) = word.literal() {
                    // `(rdns [ip])`, `(rdns. [ip])`, `(unknown[ip])`: the name the MTA found
                    let rdns = attached.or(if index == 1 { lead } else { None });
                    hop.connection = Some((ip, rdns));
                    if hop.first.is_some() {
                        break; // the common case: nothing more is needed
                    }
                    continue;
                }
            }
            if index == 0 {
                lead = Some(text);
            }
        }
        hop
    }
}

/// The words of a from clause, each with the number of the top-level comment it sits in (0:
/// outside any). Words end at white space, parentheses, `,`, `;` and `"`; brackets stay in the
/// word (`[192.0.2.1]:25`, `helo=[192.0.2.1]`).
struct Words<'a> {
    text: &'a str,
    at: usize,
    depth: u32,
    comments: u32,
}

impl<'a> Words<'a> {
    fn new(text: &'a str) -> Self {
        Words {
            text,
            at: 0,
            depth: 0,
            comments: 0,
        }
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = (Word<'a>, u32);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.text.as_bytes();
        while let Some(&c) = b.get(self.at) {
            match BYTES[c as usize] {
                SPACE => {}
                OPEN => {
                    self.comments += u32::from(self.depth == 0);
                    self.depth += 1;
                }
                CLOSE => self.depth = self.depth.saturating_sub(1),
                _ => break,
            }
            self.at += 1;
        }
        // the word, noting its marks on the way (most words are names: no second look)
        let start = self.at;
        let (mut after_at, mut open, mut colon) = (0, None, false);
        while let Some(&c) = b.get(self.at) {
            match BYTES[c as usize] {
                WORD => {}
                AT => (after_at, open, colon) = (self.at - start + 1, None, false),
                BRACKET => {
                    open.get_or_insert(self.at - start - after_at);
                }
                COLON => colon = true,
                _ => break,
            }
            self.at += 1;
        }
        (self.at > start).then(|| {
            let comment = if self.depth == 0 { 0 } else { self.comments };
            let text = &self.text[start..self.at];
            let word = Word {
                text,
                after_at,
                open,
                colon,
            };
            (word, comment)
        })
    }
}

const WORD: u8 = 0;
const AT: u8 = 1;
const BRACKET: u8 = 2;
const COLON: u8 = 3;
const SPACE: u8 = 4;
const OPEN: u8 = 5;
const CLOSE: u8 = 6;

/// What each byte is to `Words`: part of a word (some of them marks), a separator, or a
/// parenthesis.
static BYTES: [u8; 256] = {
    let mut t = [WORD; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        if c.is_ascii_whitespace() || c == b',' || c == b';' || c == b'"' {
            t[i] = SPACE;
        }
        i += 1;
    }
    t[b'@' as usize] = AT;
    t[b'[' as usize] = BRACKET;
    t[b':' as usize] = COLON;
    t[b'(' as usize] = OPEN;
    t[b')' as usize] = CLOSE;
    t
};

/// A word with the marks an address needs: where the part after the last `@` starts (an ident
/// before it is the client's word: qmail `(user@192.0.2.1)`, Sendmail `(user@[192.0.2.1])`),
/// and in that part the first `[` and whether there is a `:`.
#[derive(Clone, Copy)]
struct Word<'a> {
    text: &'a str,
    after_at: usize,
    open: Option<usize>,
    colon: bool,
}

impl<'a> Word<'a> {
    /// A word met outside `Words` (a HELO value, an rDNS word): its marks looked for.
    fn of(text: &'a str) -> Self {
        let after_at = text.bytes().rposition(|c| c == b'@').map_or(0, |i| i + 1);
        let rest = &text.as_bytes()[after_at..];
        Word {
            text,
            after_at,
            open: rest.iter().position(|&c| c == b'['),
            colon: rest.contains(&b':'),
        }
    }

    fn address_part(&self) -> &'a str {
        &self.text[self.after_at..]
    }

    /// The address the word writes, with the name attached before a `[`
    /// (`unknown[192.0.2.1]`): `192.0.2.1`, `[192.0.2.1]`, `[192.0.2.1]:25`, `192.0.2.1:25`,
    /// `[IPv6:2001:db8::1]`, `2001:db8::1`, `fe80::1%11`, `user@192.0.2.1`, `user@[192.0.2.1]`.
    fn literal(&self) -> Option<(IpAddr, Option<&'a str>)> {
        let part = self.address_part();
        match self.open {
            Some(0) => bracketed(part).map(|ip| (ip, None)),
            // `unknown[192.0.2.1]`, `<unknown.domain>[192.0.2.1]`
            Some(open) => bracketed(&part[open..]).map(|ip| (ip, Some(&part[..open]))),
            // IPv4 starts with a digit; IPv6 has a ':'. Most words are neither.
            None if self.colon || part.as_bytes().first().is_some_and(u8::is_ascii_digit) => {
                address(part).map(|ip| (ip, None))
            }
            None => None,
        }
    }
}

/// The address in `[...]` at the start of `word`, whatever follows the `]` (a port).
fn bracketed(word: &str) -> Option<IpAddr> {
    let inner = &word[1..];
    address(&inner[..inner.bytes().position(|c| c == b']').unwrap_or(inner.len())])
}

/// An address as text, with an `IPv6:` prefix, a zone id or an IPv4 port.
fn address(text: &str) -> Option<IpAddr> {
    let text = text
        .get(..5)
        .filter(|p| p.eq_ignore_ascii_case("ipv6:"))
        .map_or(text, |_| &text[5..]);
    let Some(colon) = text.bytes().rposition(|c| c == b':') else {
        return text.parse().ok().map(IpAddr::V4);
    };
    let zone = text.bytes().position(|c| c == b'%').unwrap_or(text.len());
    text[..zone].parse().ok().map(IpAddr::V6).or_else(|| {
        // XMail's `192.0.2.1:23198`
        let port = &text[colon + 1..];
        (!port.is_empty() && port.bytes().all(|c| c.is_ascii_digit()))
            .then(|| text[..colon].parse().ok().map(IpAddr::V4))
            .flatten()
    })
}

/// The host name in a word: without an ident (`user@`), brackets or a trailing dot; `None` for
/// an address, a placeholder (`unknown`, Courier's `softdnserr`) or a word without a letter
/// (qmail writes a forged `[192.0.2.1]` as `?192.0.2.1?`).
fn name(text: &str) -> Option<&str> {
    let word = Word::of(text);
    word.literal()
        .is_none()
        .then(|| clean_name(word.address_part()))
        .flatten()
}

/// `name` of the part after `@` of a word known to be no address.
fn clean_name(name: &str) -> Option<&str> {
    let name = name
        .trim_matches(|c| matches!(c, '[' | ']' | '<' | '>'))
        .trim_end_matches('.');
    let placeholder = ["unknown", "softdnserr", "softdnserror"]
        .iter()
        .any(|p| name.eq_ignore_ascii_case(p));
    (!placeholder && name.bytes().any(|c| c.is_ascii_alphabetic())).then_some(name)
}

fn strip_prefix_ci<'w>(word: &'w str, prefix: &str) -> Option<&'w str> {
    word.get(..prefix.len())
        .filter(|p| p.eq_ignore_ascii_case(prefix))
        .map(|_| &word[prefix.len()..])
}

/// Where the ` by ` clause starts: the whitespace before a "by" word outside the comments (a
/// qmail HELO may hold spaces: `(HELO by the way)`), else before the first "by" word.
fn by_clause(clause: &str) -> Option<usize> {
    let b = clause.as_bytes();
    let (mut first, mut depth, mut counted) = (None, 0u32, 0);
    for i in memchr::memchr2_iter(b'b', b'B', b) {
        let Some(before) = i.checked_sub(1).map(|j| b[j]) else {
            continue;
        };
        let is_by = before.is_ascii_whitespace()
            && b.get(i + 1).is_some_and(|c| c.eq_ignore_ascii_case(&b'y'))
            && b.get(i + 2).is_some_and(u8::is_ascii_whitespace);
        if !is_by {
            continue;
        }
        for j in memchr::memchr2_iter(b'(', b')', &b[counted..i]) {
            depth = match b[counted + j] {
                b'(' => depth + 1,
                _ => depth.saturating_sub(1),
            };
        }
        counted = i;
        if depth == 0 {
            return Some(i - 1);
        }
        first.get_or_insert(i - 1);
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_helo_addresses() {
        assert!(helo_is_bare_ip(b" from 192.0.2.7 ([192.0.2.7]) by mx"));
        assert!(helo_is_bare_ip(b"from 192.0.2.7\r\n\t([192.0.2.7])"));
        assert!(!helo_is_bare_ip(b"from 192.0.2.7 ([192.0.2.8]) by mx"));
        assert!(!helo_is_bare_ip(b"from host.example ([192.0.2.7]) by mx"));
        assert!(!helo_is_bare_ip(b"from 192.0.2.7 (host [192.0.2.7])"));
        assert!(!helo_is_bare_ip(b"from192.0.2.7 ([192.0.2.7])"));
        assert!(!helo_is_bare_ip(b"from 1.2.3 ([1.2.3])"));
    }

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

    /// One hop of each MTA's format whose client greeted with a forged address literal (and
    /// some honest ones), with the address and host the parser must give.
    #[test]
    fn forged_helo_literals_lose_to_the_connection_address() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            // Postfix
            (
                "from [198.51.100.1] (unknown [203.0.113.9])\r\n\tby mx.example.org (Postfix) with ESMTP id 4VkXyZ1a2b",
                "203.0.113.9",
                None,
            ),
            (
                "from [198.51.100.1] (mail.example.net [203.0.113.9])\r\n\t(using TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 (256/256 bits))\r\n\t(No client certificate requested)\r\n\tby mx.example.org (Postfix) with ESMTPS id 4Vk",
                "203.0.113.9",
                Some("mail.example.net"),
            ),
            (
                "from [IPv6:2001:db8::bad] (mail.example.net [IPv6:2001:db8:5::9]) by mx.example.org (Postfix)",
                "2001:db8:5::9",
                Some("mail.example.net"),
            ),
            (
                "from [198.51.100.1] (unknown [IPv6:2001:db8:5::a]) by mx.example.org (Postfix)",
                "2001:db8:5::a",
                None,
            ),
            // Sendmail
            (
                "from [198.51.100.2] (host.example.net [203.0.113.10] (may be forged)) by mx.example.org (8.17.1/8.17.1) with ESMTP id 44MAF",
                "203.0.113.10",
                Some("host.example.net"),
            ),
            (
                "from [198.51.100.2] ([203.0.113.11]) by mx.example.org (8.17.1/8.17.1) with SMTP id 44MAF",
                "203.0.113.11",
                None,
            ),
            (
                "from [IPv6:2001:db8::bad] (eve@dsl.example.net [IPv6:2001:db8:6::2]) by mx.example.org (8.17.1/8.17.1)",
                "2001:db8:6::2",
                Some("dsl.example.net"),
            ),
            (
                "from [198.51.100.3] (198.51.100.3@[203.0.113.12]) by mx.example.org (8.11.6/8.11.6) with SMTP id h8B",
                "203.0.113.12",
                None,
            ),
            // Exim: the address outside the parentheses when there is no rDNS name
            (
                "from [203.0.113.13] (helo=[198.51.100.4])\r\n\tby mx.example.org with esmtp (Exim 4.96)\r\n\tid 1s9AbC-000Qx1-2D",
                "203.0.113.13",
                None,
            ),
            (
                "from [203.0.113.14]:52144 (helo=[198.51.100.4]) by mx.example.org with esmtp (Exim 4.96)",
                "203.0.113.14",
                None,
            ),
            (
                "from [2001:db8:7::3] (port=52144 helo=[IPv6:2001:db8::bad]) by mx.example.org with esmtp (Exim 4.96)",
                "2001:db8:7::3",
                None,
            ),
            (
                "from [203.0.113.17] (helo=198.51.100.7) by mx.example.org with smtp (Exim 4.96)",
                "203.0.113.17",
                None,
            ),
            (
                "from mail.example.net ([203.0.113.15]:41234 helo=[198.51.100.5]) by mx.example.org with esmtps (Exim 4.96)",
                "203.0.113.15",
                Some("mail.example.net"),
            ),
            (
                "from dsl.example.net ([2001:db8:8::4] helo=[IPv6:2001:db8::bad] ident=[198.51.100.6]) by mx.example.org with esmtp (Exim 4.96)",
                "2001:db8:8::4",
                Some("dsl.example.net"),
            ),
            // qmail
            (
                "from unknown (HELO [198.51.100.8]) (203.0.113.18)\r\n  by mx.example.org with SMTP; 22 May 2024 10:15:25 -0000",
                "203.0.113.18",
                None,
            ),
            (
                "from unknown (HELO 198.51.100.8) (203.0.113.19) by mx.example.org with SMTP",
                "203.0.113.19",
                None,
            ),
            (
                "from dsl.example.net (HELO ?198.51.100.8?) (198.51.100.8@203.0.113.20) by mx.example.org with SMTP",
                "203.0.113.20",
                Some("dsl.example.net"),
            ),
            (
                "from unknown (HELO [IPv6:2001:db8::bad]) (2001:db8:9::5) by mx.example.org with SMTP",
                "2001:db8:9::5",
                None,
            ),
            (
                "from unknown (HELO [198.51.100.8]) ([203.0.113.21]) by mx.example.org (qmail-ldap-1.03) with SMTP",
                "203.0.113.21",
                None,
            ),
            (
                "from 198.51.100.9 (203.0.113.22) by mx.example.org with SMTP",
                "203.0.113.22",
                None,
            ),
            // Microsoft Exchange / Office 365
            (
                "from [198.51.100.10] (203.0.113.23) by BN8NAM12FT011.mail.protection.outlook.com (10.13.182.159) with Microsoft SMTP Server (version=TLS1_2, cipher=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384) id 15.20.7587.21 via Frontend Transport",
                "203.0.113.23",
                None,
            ),
            (
                "from [IPv6:2001:db8::bad] (2603:10b6:a03:1::17) by BY5PR.namprd.prod.outlook.com (2603:10b6:a03:2::5) with Microsoft SMTP Server",
                "2603:10b6:a03:1::17",
                None,
            ),
            (
                "from EX01.corp.example ([fe80::1%11]) by EX02.corp.example ([fe80::2%11]) with mapi id 14.03.0123.003",
                "fe80::1",
                Some("ex01.corp.example"),
            ),
            // Gmail
            (
                "from [192.168.1.2] (dsl.example.net. [203.0.113.25])\r\n        by smtp.gmail.com with ESMTPSA id x1sm123",
                "203.0.113.25",
                Some("dsl.example.net"),
            ),
            (
                "from [198.51.100.11] (mail.example.net. [2001:db8:a::6]) by mx.google.com with ESMTPS id a2si456",
                "2001:db8:a::6",
                Some("mail.example.net"),
            ),
            // Courier
            (
                "from [192.168.2.4] (softdnserr [::ffff:203.0.113.26])\r\n  (AUTH: CRAM-MD5 eve@example.net, )\r\n  by mail.example.org with ESMTPSA",
                "203.0.113.26",
                None,
            ),
            (
                "from [198.51.100.12] ([::ffff:203.0.113.27]) by mail.example.org with ESMTP; Wed, 22 May 2024 10:15:25 +0200",
                "203.0.113.27",
                None,
            ),
            (
                "from unknown (HELO [198.51.100.12]) ([::ffff:203.0.113.28]) (AUTH: LOGIN eve, TLS: TLSv1/SSLv3,256bits,AES256-SHA) by mail.example.org with ESMTPSA",
                "203.0.113.28",
                None,
            ),
            (
                "from [IPv6:2001:db8::bad] ([2001:db8:b::7]) by mail.example.org with ESMTP",
                "2001:db8:b::7",
                None,
            ),
            // ZMailer, CommuniGate, XMail
            (
                "from [198.51.100.13] ([203.0.113.29]:18952 \"EHLO [198.51.100.13]\")\r\n\tby vger.example.org with ESMTP id S2002",
                "203.0.113.29",
                None,
            ),
            (
                "from [198.51.100.13] ([203.0.113.29]:18952 \"EHLO box.example.net\") by vger.example.org with ESMTP",
                "203.0.113.29",
                Some("box.example.net"),
            ),
            (
                "from [203.0.113.30] (account eve HELO [198.51.100.14]) by mail.example.org (CommuniGate Pro SMTP 6.3) with ESMTPA id 1",
                "203.0.113.30",
                None,
            ),
            (
                "from list.example.net (203.0.113.32:23198) by mx.example.org with [XMail 1.20 ESMTP Server] id <S72E>",
                "203.0.113.32",
                Some("list.example.net"),
            ),
            (
                "from acecomms [203.0.113.33] by mx.example.org [192.0.2.99] with SMTP (MDaemon.PRO.v5.0.6.R)",
                "203.0.113.33",
                Some("acecomms"),
            ),
            (
                "from 198.51.100.15 [203.0.113.35] by mx.example.org with ESMTP (SMTPD32-7.11) id AA1D",
                "203.0.113.35",
                None,
            ),
            (
                "from [198.51.100.15] [203.0.113.36] by mx.example.org [192.0.2.99] with SMTP (MDaemon.PRO.v5.0.6.R)",
                "203.0.113.36",
                None,
            ),
            (
                "from old.example.net (<unknown.domain>[203.0.113.34]) by mx.example.org (rwcrmhc53) with SMTP",
                "203.0.113.34",
                Some("old.example.net"),
            ),
        ];
        for &(text, want_ip, want_host) in cases {
            let (ip, host) = sender(text).unwrap_or_else(|| panic!("no sender: {text}"));
            assert_eq!(ip.to_string(), want_ip, "{text}");
            assert_eq!(host.as_deref(), want_host, "{text}");
        }
    }

    /// Header-like junk never panics (the parser slices text at the bytes it looked for), and
    /// a host it returns is a name.
    #[test]
    fn random_clauses_do_not_panic() {
        use crate::testing::{pick, xorshift};
        let pieces: Vec<&str> =
            "from | |\t|\r\n\t|(|)|[|]|@|:|%|.|,|;|\"|IPv6:|ipv6|::|ffff|192.0.2.1\
            |2001:db8::1|25|helo=|HELO |ident=| by |unknown|é|ß|\u{1F600}|host.example|b|y"
                .split('|')
                .collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            let n = 1 + xorshift(&mut x) % 24;
            let text = format!("from {}", pick(&mut x, &pieces, n));
            if let Some((_, Some(host))) = sender(&text) {
                let letter = host.bytes().any(|c| c.is_ascii_alphabetic());
                assert!(letter && host == host.to_ascii_lowercase(), "{text:?}");
            }
        }
    }

    #[test]
    fn ipv4_mapped_addresses_become_ipv4() {
        for text in [
            "from h (h [::ffff:192.0.2.5]) by x",
            "from h (h [IPv6:::ffff:192.0.2.5]) by x",
            "from unknown (HELO h) (::ffff:192.0.2.5) by x",
        ] {
            assert_eq!(ip(text).as_deref(), Some("192.0.2.5"), "{text}");
        }
    }

    #[test]
    fn host_is_the_helo_then_the_rdns_name() {
        let host = |text| sender(text).and_then(|(_, h)| h);
        // the HELO name, even when it differs from the rDNS name
        assert_eq!(
            host("from helo.example (rdns.example [192.0.2.1]) by x").as_deref(),
            Some("helo.example")
        );
        // a forged literal: the verified name, never the literal
        assert_eq!(
            host("from [198.51.100.1] (Rdns.Example. [192.0.2.1]) by x").as_deref(),
            Some("rdns.example")
        );
        assert_eq!(host("from [198.51.100.1] (unknown [192.0.2.1]) by x"), None);
        // qmail: the rDNS name first, the HELO when there is none
        assert_eq!(
            host("from softdnserror (HELO two) (192.0.2.1) by x").as_deref(),
            Some("two")
        );
        // Sendmail's ident and IDENT: prefixes are not part of the name
        assert_eq!(
            host("from [198.51.100.1] (IDENT:root@rdns.example [192.0.2.1]) by x").as_deref(),
            Some("rdns.example")
        );
        // a port after the literal does not make it a name
        assert_eq!(host("from [203.0.113.5]:25 by e"), None);
        // CommuniGate's account name is no rDNS name
        assert_eq!(
            host("from [203.0.113.30] (account eve [203.0.113.30] verified) by x"),
            None
        );
    }

    #[test]
    fn comments_without_an_address_fall_back_to_the_host_position() {
        assert_eq!(
            ip("from [203.0.113.5] (port=25 helo=x) (ident=192.0.2.9) by e").as_deref(),
            Some("203.0.113.5")
        );
        assert_eq!(
            ip("from [10.128.128.81]:50999 (HELO x.example) by fsav ([10.128.128.74]:25)")
                .as_deref(),
            Some("10.128.128.81")
        );
        assert_eq!(ip("from unknown (HELO x) by e"), None);
        // a " by " inside a comment (a qmail that keeps the spaces of a HELO) is no by clause
        assert_eq!(
            ip("from unknown (HELO by the way) (203.0.113.31) by mx.example.org").as_deref(),
            Some("203.0.113.31")
        );
        assert_eq!(ip("from Unknown/Local ([?.?.?.?]) by mailcity.com"), None);
    }
}
