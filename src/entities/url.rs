//! URLs: finding them in text, and one canonical form for every spelling of the same target.
//!
//! Canonical form (WHATWG URL parsing, the `url` crate): scheme and host lower-case; IDN hosts
//! in punycode (the Unicode and the punycode spelling give the same host); percent-encoded hosts
//! decoded; decimal, octal and hex IPv4 hosts turned into dotted quads; default ports and the
//! fragment dropped; a trailing dot on the host dropped. Scheme-less text (`www.example.com/x`,
//! `example.net/offer`) is read as `http://` when its suffix is a known public suffix.

use std::net::IpAddr;
use std::sync::LazyLock;

use linkify::{LinkFinder, LinkKind};

/// A URL in canonical form with its host and registrable domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalUrl {
    pub url: String,
    /// Lower-case host; punycode for IDN; dotted quad or bracket-less IPv6 for IP hosts.
    pub host: String,
    /// Registrable domain (eTLD+1) by the public suffix list; `None` for IP hosts and for hosts
    /// that are themselves a public suffix.
    pub domain: Option<String>,
    pub ip: Option<IpAddr>,
}

/// A URL whose authority carries a user name (`http://www.bank.example@198.51.100.7/`).
pub fn has_userinfo(url: &str) -> bool {
    // Bytes, not `str` patterns: this runs for every URL record, and `split_once("://")` set up
    // a substring searcher each time (~700 instructions a URL), as `memmem::find` does. A
    // scheme has no ":", so the first "://" is the first ":" or none that passes.
    let url = url.as_bytes();
    let Some(sep) = memchr::memchr(b':', url).filter(|&i| url[i + 1..].starts_with(b"//")) else {
        return false;
    };
    let scheme = &url[..sep];
    if !scheme.first().is_some_and(u8::is_ascii_alphabetic)
        || !scheme
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'.' | b'-'))
    {
        return false;
    }
    let rest = &url[sep + 3..];
    let end = memchr::memchr3(b'/', b'?', b'#', rest).unwrap_or(rest.len());
    memchr::memchr(b'@', &rest[..end]).is_some()
}

/// A link or address found in plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<'t> {
    Url(&'t str),
    Email(&'t str),
}

static FINDER: LazyLock<LinkFinder> = LazyLock::new(|| {
    let mut finder = LinkFinder::new();
    finder.url_must_have_scheme(false);
    finder.kinds(&[LinkKind::Url, LinkKind::Email]);
    finder
});

/// Finds URL and email candidates in plain text: URLs with a web scheme by a direct scan (which
/// keeps percent-encoded and numeric hosts whole), then scheme-less URLs and addresses by
/// linkify, skipping what the first pass already took.
pub fn find_in_text(text: &str) -> Vec<Found<'_>> {
    let schemed = find_schemed(text);
    let mut found: Vec<Found<'_>> = schemed
        .iter()
        .map(|&(s, e)| Found::Url(&text[s..e]))
        .collect();
    // Both lists are in text order: walk them together.
    let mut next = 0;
    for link in FINDER.links(text) {
        while next < schemed.len() && schemed[next].1 <= link.start() {
            next += 1;
        }
        if schemed.get(next).is_some_and(|&(s, _)| s < link.end()) {
            continue;
        }
        found.push(match link.kind() {
            LinkKind::Email => Found::Email(link.as_str()),
            _ => Found::Url(link.as_str()),
        });
    }
    found
}

/// Byte spans of `http://`, `https://`, `ftp://` (and defanged `hxxp://`) URLs in `text`.
fn find_schemed(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(pos) = memchr::memmem::find(&bytes[from..], b"://") {
        let sep = from + pos;
        from = sep + 3;
        let mut start = sep;
        while start > 0 && sep - start < 8 && bytes[start - 1].is_ascii_alphabetic() {
            start -= 1;
        }
        let scheme = text[start..sep].to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https" | "ftp" | "hxxp" | "hxxps") {
            continue;
        }
        let rest = &text[sep + 3..];
        let mut end = sep
            + 3
            + rest
                .char_indices()
                .find(|&(_, c)| ends_url(c))
                .map_or(rest.len(), |(i, _)| i);
        // Trailing punctuation belongs to the sentence, a closing bracket only if unmatched.
        while end > sep + 3 {
            let last = bytes[end - 1];
            let strip = match last {
                b'.' | b',' | b';' | b':' | b'!' | b'?' => true,
                b')' => unbalanced(&text[start..end], '(', ')'),
                b']' => unbalanced(&text[start..end], '[', ']'),
                _ => false,
            };
            if !strip {
                break;
            }
            end -= 1;
        }
        if end > sep + 3 {
            spans.push((start, end));
            from = end;
        }
    }
    spans
}

fn unbalanced(s: &str, open: char, close: char) -> bool {
    s.matches(close).count() > s.matches(open).count()
}

/// Characters that end a URL in running text.
fn ends_url(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '<' | '>' | '"' | '\'' | '`' | '{' | '}' | '|' | '\\' | '^'
        )
        || (!c.is_ascii() && !c.is_alphanumeric())
}

/// Canonicalizes a URL as written in a message (with or without a scheme). Returns `None` for
/// anything that is not a web or ftp URL with a host (mailto:, cid:, javascript:, junk).
pub fn canonicalize(raw: &str) -> Option<CanonicalUrl> {
    let raw = raw
        .trim()
        .trim_matches(|c| matches!(c, '<' | '>' | '"' | '\''));
    if raw.is_empty() || raw.len() > 8192 {
        return None;
    }
    plain_url(raw).unwrap_or_else(|| parsed_url(raw))
}

/// `canonicalize` by the WHATWG parser: for every URL `plain_url` does not take.
fn parsed_url(raw: &str) -> Option<CanonicalUrl> {
    let parsed = match scheme_of(raw) {
        Some(scheme) => {
            if !matches!(scheme.as_str(), "http" | "https" | "ftp" | "hxxp" | "hxxps") {
                return None;
            }
            let mut u = url::Url::parse(raw).ok()?;
            if u.scheme().starts_with("hxxp") {
                let fixed = format!("http{}", &raw[4..]);
                u = url::Url::parse(&fixed).ok()?;
            }
            u
        }
        None => {
            let candidate = raw.strip_prefix("//").unwrap_or(raw);
            let with_scheme = format!("http://{candidate}");
            let u = url::Url::parse(&with_scheme).ok()?;
            // Scheme-less text must end in a real public suffix: "file.txt" is not a host.
            match u.host() {
                Some(url::Host::Domain(d)) if has_known_suffix(d) => u,
                _ => return None,
            }
        }
    };
    from_parsed(parsed)
}

/// The canonical form of a plain URL without the WHATWG parser (~5 k instructions a URL):
/// `http://` or `https://` (any case), or no scheme at all, then a host of letters, digits and
/// hyphens (`plain_ldh`, no `xn--` label), then a path and query of characters the parser keeps
/// as they are, without dot segments. Its form is then the text itself with the scheme and host
/// lower-cased, "/" for an empty path and the fragment dropped. `None` for anything else, which
/// goes to the parser; `Some(None)` for a scheme-less host without a known public suffix.
/// `plain_urls_agree_with_the_parser` checks it against the parser on random URLs.
fn plain_url(raw: &str) -> Option<Option<CanonicalUrl>> {
    let b = raw.as_bytes();
    let (scheme, rest) = match b.iter().position(|&c| c == b':') {
        Some(5) if b[..5].eq_ignore_ascii_case(b"https") => ("https", &raw[5..]),
        Some(4) if b[..4].eq_ignore_ascii_case(b"http") => ("http", &raw[4..]),
        // A colon further on (a port, a scheme-less URL's query) or another scheme: the parser.
        Some(_) => return None,
        None => ("", raw),
    };
    let rest = if scheme.is_empty() {
        rest.strip_prefix("//").unwrap_or(rest)
    } else {
        rest.strip_prefix("://")?
    };
    let host_end = rest
        .bytes()
        .position(|c| matches!(c, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let (host, tail) = rest.split_at(host_end);
    if !plain_ldh(host) {
        return None;
    }
    let tail = &tail[..memchr::memchr(b'#', tail.as_bytes()).unwrap_or(tail.len())];
    let (path, query) = match memchr::memchr(b'?', tail.as_bytes()) {
        Some(q) => (&tail[..q], Some(&tail[q + 1..])),
        None => (tail, None),
    };
    // The query: the path's characters and "?", but no apostrophe (the parser percent-encodes
    // it in a web URL's query).
    if !plain_path(path.as_bytes())
        || !query.is_none_or(|q| {
            q.bytes()
                .all(|c| c == b'?' || (PLAIN_PATH[usize::from(c)] && c != b'\''))
        })
    {
        return None;
    }
    // IDNA checks an "xn--" label's punycode: the parser.
    let host = host.to_ascii_lowercase();
    if host.starts_with("xn--") || host.contains(".xn--") {
        return None;
    }
    if scheme.is_empty() && !has_known_suffix(&host) {
        return Some(None);
    }
    let scheme = if scheme.is_empty() { "http" } else { scheme };
    let mut url = String::with_capacity(scheme.len() + 4 + host.len() + tail.len());
    url.push_str(scheme);
    url.push_str("://");
    url.push_str(&host);
    if path.is_empty() {
        url.push('/');
    }
    url.push_str(path);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    Some(Some(CanonicalUrl {
        url,
        domain: registrable_domain(&host),
        host,
        ip: None,
    }))
}

/// A path the parser keeps as it is: `PLAIN_PATH` bytes, no `.` or `..` segment and no `%2e`
/// (a dot to the parser, so maybe a dot segment). One pass.
fn plain_path(path: &[u8]) -> bool {
    let dots = |seg: &[u8]| seg == b"." || seg == b"..";
    let mut segment = 0;
    for (i, &c) in path.iter().enumerate() {
        match c {
            b'/' if dots(&path[segment..i]) => return false,
            b'/' => segment = i + 1,
            b'%' if path.get(i + 1) == Some(&b'2')
                && matches!(path.get(i + 2), Some(b'e' | b'E')) =>
            {
                return false;
            }
            _ if !PLAIN_PATH[usize::from(c)] => return false,
            _ => {}
        }
    }
    !dots(&path[segment..])
}

/// Bytes the WHATWG parser keeps as they are in a path (and, but for the apostrophe, in the
/// query of a web URL): letters, digits and `-._~!$&'()*+,;=:@/%`.
static PLAIN_PATH: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
                    | b'/'
                    | b'%'
            );
        c += 1;
    }
    t
};

fn from_parsed(mut u: url::Url) -> Option<CanonicalUrl> {
    u.set_fragment(None);
    let (host, ip) = match u.host()? {
        url::Host::Domain(d) => {
            let d = d.trim_end_matches('.');
            if d.is_empty() {
                return None;
            }
            (d.to_string(), None)
        }
        url::Host::Ipv4(v4) => (v4.to_string(), Some(IpAddr::V4(v4))),
        url::Host::Ipv6(v6) => (v6.to_string(), Some(IpAddr::V6(v6))),
    };
    if ip.is_none() && u.host_str().is_some_and(|h| h.ends_with('.')) {
        let _ = u.set_host(Some(&host));
    }
    let domain = if ip.is_none() {
        registrable_domain(&host)
    } else {
        None
    };
    Some(CanonicalUrl {
        url: u.into(),
        host,
        domain,
        ip,
    })
}

/// The scheme of `raw` (lower-case) when it starts with one.
fn scheme_of(raw: &str) -> Option<String> {
    let colon = raw.find(':')?;
    let scheme = &raw[..colon];
    let valid = !scheme.is_empty()
        && scheme.as_bytes()[0].is_ascii_alphabetic()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    // "example.com:8080/x" is a host with a port, not a scheme.
    if !valid || scheme.contains('.') {
        return None;
    }
    Some(scheme.to_ascii_lowercase())
}

/// Canonical host: lower-case, IDN to punycode, trailing dot dropped; IP literals canonical.
pub fn canonical_host(raw: &str) -> Option<String> {
    let raw = raw.trim().trim_end_matches('.');
    // Plain LDH names (most of them) need no IDNA processing: only lower-casing.
    if plain_ldh(raw) {
        return Some(raw.to_ascii_lowercase());
    }
    let bare = raw.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(ip.to_string());
    }
    match url::Host::parse(raw).ok()? {
        url::Host::Domain(d) => Some(d.trim_end_matches('.').to_string()),
        url::Host::Ipv4(v4) => Some(v4.to_string()),
        url::Host::Ipv6(v6) => Some(v6.to_string()),
    }
}

/// Whether `host` is letters, digits and hyphens in dot-separated labels of 1 to 63 bytes,
/// with a letter somewhere and a last label that is no number: a name the WHATWG host parser
/// would only lower-case. One pass over the bytes (it was five, ~950 instructions a host).
fn plain_ldh(host: &str) -> bool {
    let mut alpha = false;
    let mut label_start = 0;
    for (i, &b) in host.as_bytes().iter().enumerate() {
        match b {
            b'.' => {
                if !(1..=63).contains(&(i - label_start)) {
                    return false;
                }
                label_start = i + 1;
            }
            b'a'..=b'z' | b'A'..=b'Z' => alpha = true,
            b'0'..=b'9' | b'-' => {}
            _ => return false,
        }
    }
    alpha && (1..=63).contains(&(host.len() - label_start)) && !numeric_label(&host[label_start..])
}

/// A last label of digits (or hex) makes the WHATWG parser read the name as an IPv4 address.
fn numeric_label(last: &str) -> bool {
    match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => last.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// Registrable domain (eTLD+1) of a canonical host, lower-case.
pub fn registrable_domain(host: &str) -> Option<String> {
    psl::domain_str(host).map(str::to_string)
}

/// True when the host ends in a public suffix from the list (not just the `*` default rule).
pub fn has_known_suffix(host: &str) -> bool {
    psl::suffix(host.as_bytes()).is_some_and(|s| s.is_known())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo() {
        assert!(has_userinfo("http://www.bank.example@198.51.100.7/login"));
        assert!(!has_userinfo("http://example.com/a@b"));
        assert!(!has_userinfo("mailto:a@b.example"));
        for (url, userinfo) in [
            ("https://u:p@example.com", true),
            ("http://example.com?x=a@b", false),
            ("http://example.com#a@b", false),
            ("http://a@b", true),
            ("h-x+1.y://a@b/", true),
            ("1http://a@b/", false),
            ("ht tp://a@b/", false),
            ("://a@b", false),
            ("é://a@b", false),
            ("http:/a@b", false),
            ("http://example.com/x://a@b", false),
            ("x:y://a@b/", false),
            ("http:x://a@b/", false),
            ("http:", false),
        ] {
            assert_eq!(has_userinfo(url), userinfo, "{url}");
        }
    }

    fn canon(raw: &str) -> CanonicalUrl {
        canonicalize(raw).unwrap_or_else(|| panic!("{raw} did not canonicalize"))
    }

    #[test]
    fn idn_spellings_agree() {
        let a = canon("http://пример.испытание/путь");
        let b = canon("http://xn--e1afmkfd.xn--80akhbyknj4f/путь");
        assert_eq!(a.host, "xn--e1afmkfd.xn--80akhbyknj4f");
        assert_eq!(a, b);
        assert_eq!(
            canon("http://BÜCHER.example/").host,
            "xn--bcher-kva.example"
        );
    }

    #[test]
    fn numeric_hosts_become_dotted_quads() {
        for raw in [
            "http://3232235777/",
            "http://0xC0.0xA8.0x01.0x01/",
            "http://0300.0250.01.01/",
            "http://192.168.1.1/",
        ] {
            let c = canon(raw);
            assert_eq!(c.host, "192.168.1.1", "{raw}");
            assert!(c.ip.is_some());
            assert_eq!(c.domain, None);
        }
    }

    #[test]
    fn canonical_host_fast_path_agrees_with_the_parser() {
        for raw in [
            "Mail.Example.COM",
            "a-b.example.org.",
            "xn--bcher-kva.example",
            "bücher.example",
            "0x7f.1",
            "1.2.3.4",
            "[2001:DB8::1]",
            "cafe.beef",
            "a.0xff",
            "a.123",
        ] {
            let slow = match url::Host::parse(
                raw.trim_end_matches('.')
                    .trim_start_matches('[')
                    .trim_end_matches(']'),
            ) {
                Ok(url::Host::Domain(d)) => Some(d),
                Ok(url::Host::Ipv4(v4)) => Some(v4.to_string()),
                Ok(url::Host::Ipv6(v6)) => Some(v6.to_string()),
                Err(_) => None,
            };
            let slow = slow.or_else(|| {
                raw.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .ok()
                    .map(|ip| ip.to_string())
            });
            assert_eq!(canonical_host(raw), slow, "{raw}");
        }
    }

    /// `plain_ldh` against the five-pass test it replaced, on random names.
    #[test]
    fn plain_ldh_agrees_with_the_label_checks() {
        use crate::testing::{pick, xorshift};
        fn by_passes(raw: &str) -> bool {
            let last = raw.rsplit('.').next().unwrap_or_default();
            !raw.is_empty()
                && raw
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
                && raw.bytes().any(|b| b.is_ascii_alphabetic())
                && !raw
                    .split('.')
                    .any(|label| label.is_empty() || label.len() > 63)
                && !numeric_label(last)
        }
        let long = "a".repeat(60);
        let pieces = [
            "a", "Z", "0", "9", "-", ".", "..", "0x", "0X", "ff", "é", "_", " ", "com", &long,
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..50_000 {
            let n = xorshift(&mut x) % 8;
            let host = pick(&mut x, &pieces, n);
            assert_eq!(plain_ldh(&host), by_passes(&host), "{host:?}");
        }
    }

    /// `plain_url` gives what the parser gives, on random URLs built from pieces that are
    /// plain and pieces that are not, and takes the common forms.
    #[test]
    fn plain_urls_agree_with_the_parser() {
        use crate::testing::{pick, xorshift};
        let plain_schemes = ["http://", "https://", "HTTP://", "hTTpS://", "", "//"];
        let odd_schemes = [
            "ftp://",
            "hxxp://",
            "http:",
            "http:/",
            "https:\\\\",
            "mailto:",
            "http:///",
        ];
        // Pieces the fast path takes, and pieces it must leave to the parser (one in ten).
        let plain_hosts = [
            "a", "Ex", "-", "0", "9", "com", "co", "uk", "ff", "0x", "xn", "b-c",
        ];
        let odd_hosts = [
            ".",
            "xn--",
            "xn--bcher-kva",
            "XN--80ak",
            "_",
            "é",
            "@",
            ":",
            ":80",
            ":8080",
            "[",
            "%41",
            " ",
            "\t",
            "..",
        ];
        let plain_tails = [
            "/", "a", "Z", "0", "%20", "%zz", "%", ".", "..", "/.", "/..", "?", "#", "&", "=", "'",
            "~", "!", "$", "(", ")", "*", "+", ",", ";", ":", "@", "-", "_", "%2", "e",
        ];
        let odd_tails = [
            "%2e", "%2E", "\"", "<", ">", "`", "{", "}", "|", "^", "[", "]", "\\", " ", "\t", "\n",
            "é",
        ];
        let piece = |x: &mut u64, plain: &[&str], odd: &[&str]| {
            if xorshift(x).is_multiple_of(10) {
                pick(x, odd, 1)
            } else {
                pick(x, plain, 1)
            }
        };
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut taken = 0;
        for _ in 0..200_000 {
            let mut raw = piece(&mut x, &plain_schemes, &odd_schemes);
            let labels = 1 + xorshift(&mut x) % 3;
            for i in 0..labels {
                if i > 0 {
                    raw.push('.');
                }
                for _ in 0..1 + xorshift(&mut x) % 2 {
                    raw.push_str(&piece(&mut x, &plain_hosts, &odd_hosts));
                }
            }
            if xorshift(&mut x).is_multiple_of(2) {
                raw.push_str(&pick(
                    &mut x,
                    &[".com", ".org", ".co.uk", ".example", ".zz"],
                    1,
                ));
            }
            for _ in 0..xorshift(&mut x) % 10 {
                raw.push_str(&piece(&mut x, &plain_tails, &odd_tails));
            }
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            if let Some(fast) = plain_url(raw) {
                taken += 1;
                assert_eq!(fast, parsed_url(raw), "{raw:?}");
            }
        }
        // The plain forms are common enough in the pieces to be tested many times.
        assert!(taken > 20_000, "{taken}");
        for raw in [
            "http://Example.COM",
            "https://www.example.co.uk/a/b.html?x=1&y=%20z",
            "HTTP://A.B.EXAMPLE.COM.AU/x#frag",
            "www.example.com/path",
            "example.net/offer?id=7",
            "//cdn.example.org/i.gif",
            "http://a.example/?",
            "http://a.example/~user/(1)*+,;=:@!$&'",
            "https://a.example/p?q=a?b/c&d=e",
        ] {
            let fast = plain_url(raw).unwrap_or_else(|| panic!("{raw} not plain"));
            assert!(fast.is_some(), "{raw}");
            assert_eq!(fast, parsed_url(raw), "{raw}");
        }
        for raw in ["file.txt", "report.pdf"] {
            assert_eq!(plain_url(raw), Some(None), "{raw}");
            assert_eq!(parsed_url(raw), None, "{raw}");
        }
    }

    #[test]
    fn percent_encoded_host_is_decoded() {
        assert_eq!(canon("http://%65xample.com/").host, "example.com");
    }

    #[test]
    fn scheme_less_needs_a_public_suffix() {
        assert_eq!(
            canon("www.example.com/path").url,
            "http://www.example.com/path"
        );
        assert_eq!(
            canon("example.net/offer").domain.as_deref(),
            Some("example.net")
        );
        assert!(canonicalize("file.txt").is_none());
        assert!(canonicalize("example.com:8080/x").is_some());
    }

    #[test]
    fn registrable_domains_use_the_psl() {
        assert_eq!(
            canon("http://shop.example.co.uk/").domain.as_deref(),
            Some("example.co.uk")
        );
        assert_eq!(
            canon("HTTP://A.B.EXAMPLE.COM.AU/x#frag").url,
            "http://a.b.example.com.au/x"
        );
    }

    #[test]
    fn non_web_schemes_are_ignored() {
        assert!(canonicalize("mailto:a@example.com").is_none());
        assert!(canonicalize("javascript:alert(1)").is_none());
        assert!(canonicalize("cid:image001.png@01D").is_none());
    }

    #[test]
    fn text_finder_sees_urls_and_emails() {
        let found =
            find_in_text("see www.example.org/x or mail bob@example.com, http://a.example/.");
        assert!(found.contains(&Found::Url("www.example.org/x")));
        assert!(found.contains(&Found::Email("bob@example.com")));
        assert!(found.contains(&Found::Url("http://a.example/")));
        let found =
            find_in_text("(at http://%65xample.com/a_(b)) or HXXP://x.example/\u{3000}next");
        assert_eq!(
            found,
            vec![
                Found::Url("http://%65xample.com/a_(b)"),
                Found::Url("HXXP://x.example/")
            ]
        );
    }
}
