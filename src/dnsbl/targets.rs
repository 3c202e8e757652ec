//! The names a message asks the lists about, read from the raw bytes and the envelope on the
//! network side (before the scan worker parses the message, so the lookups run while it
//! waits in the queue): the client address, the public addresses of the Received chain, the
//! From and envelope sender domains, the HELO name, and the registrable domains of URLs in the
//! text of the message (plain and quoted-printable text; a base64-encoded body is not decoded
//! here). Each is bounded.

use std::net::IpAddr;

use crate::entities::{is_private, received, registrable_domain};
use crate::message::Envelope;

/// Received headers read at most.
const MAX_RECEIVED: usize = 16;
/// URL domains asked at most.
const MAX_URL_DOMAINS: usize = 32;
/// Body bytes searched for URLs at most.
const MAX_BODY_SCAN: usize = 256 * 1024;

/// What a message asks about, each name once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    pub client_ip: Option<IpAddr>,
    pub received_ips: Vec<IpAddr>,
    pub url_domains: Vec<String>,
    pub from_domain: Option<String>,
    pub mail_from_domain: Option<String>,
    pub helo: Option<String>,
}

/// The targets of `raw`; URLs are searched only when `urls` (some zone asks for them).
pub fn targets(raw: &[u8], envelope: &Envelope, urls: bool) -> Targets {
    let (head, body) = split(raw);
    let mut t = Targets {
        client_ip: envelope.client_ip.filter(|ip| !is_private(*ip)),
        ..Default::default()
    };
    for (name, value) in headers(head) {
        if name.eq_ignore_ascii_case("received") && t.received_ips.len() < MAX_RECEIVED {
            if let Some((ip, _)) = received::sender(&value) {
                if !is_private(ip) && !t.received_ips.contains(&ip) && Some(ip) != t.client_ip {
                    t.received_ips.push(ip);
                }
            }
        } else if name.eq_ignore_ascii_case("from") && t.from_domain.is_none() {
            t.from_domain = address_domain(&value);
        }
    }
    t.mail_from_domain = envelope.mail_from.as_deref().and_then(address_domain);
    t.helo = envelope
        .helo
        .as_deref()
        .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
        .filter(|h| h.contains('.') && h.parse::<IpAddr>().is_err() && !h.starts_with('['))
        .and_then(|h| registrable_domain(&h));
    if urls {
        t.url_domains = url_domains(&body[..body.len().min(MAX_BODY_SCAN)]);
    }
    t
}

fn split(raw: &[u8]) -> (&[u8], &[u8]) {
    if let Some(i) = memchr::memmem::find(raw, b"\r\n\r\n") {
        return (&raw[..i + 2], &raw[i + 4..]);
    }
    if let Some(i) = memchr::memmem::find(raw, b"\n\n") {
        return (&raw[..i + 1], &raw[i + 2..]);
    }
    (raw, &[])
}

/// Unfolded (name, value) pairs of the header section's Received and From headers (the only
/// ones asked about; the others are skipped without copying).
fn headers(head: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut keep = false;
    for line in crate::netcheck::lines(head) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            if keep {
                if let Some((_, v)) = out.last_mut() {
                    v.push(' ');
                    v.push_str(String::from_utf8_lossy(line).trim());
                }
            }
            continue;
        }
        let Some(colon) = memchr::memchr(b':', line) else {
            keep = false;
            continue;
        };
        let name = line[..colon].trim_ascii();
        keep = name.eq_ignore_ascii_case(b"received") || name.eq_ignore_ascii_case(b"from");
        if keep {
            out.push((
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(line[colon + 1..].trim_ascii()).into_owned(),
            ));
        }
    }
    out
}

/// The domain of the (first) address of a header value or envelope sender, lower-cased.
fn address_domain(value: &str) -> Option<String> {
    let addr = match (value.rfind('<'), value.rfind('>')) {
        (Some(s), Some(e)) if s < e => &value[s + 1..e],
        _ => value,
    };
    let domain = addr.rsplit_once('@')?.1;
    let domain: String = domain
        .trim()
        .trim_end_matches(['>', '.', ',', ';', ')'])
        .to_ascii_lowercase();
    let ok = domain.contains('.')
        && domain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    ok.then_some(domain)
}

/// Registrable domains of the `http(s)://` and `www.` URLs of `body`, by a byte scan (a message
/// asks this on the network side for every message, so it does not run the full URL finder of
/// the analysis: ~1 µs instead of ~12): a URL's host is the run of letters, digits, dots and
/// hyphens after the scheme (a user name before `@` skipped), across quoted-printable soft
/// line breaks; hosts that are addresses or carry other characters (IDN in UTF-8) are left out.
fn url_domains(body: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen_hosts: Vec<Vec<u8>> = Vec::new();
    let mut consider = |host: Vec<u8>, out: &mut Vec<String>| {
        if host.len() < 3 || seen_hosts.contains(&host) || seen_hosts.len() >= 4 * MAX_URL_DOMAINS {
            return;
        }
        seen_hosts.push(host.clone());
        let Ok(h) = std::str::from_utf8(&host) else {
            return;
        };
        let h = h.trim_matches(['.', '-']);
        if !h.contains('.')
            || h.parse::<IpAddr>().is_ok()
            || h.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            return;
        }
        if let Some(d) = registrable_domain(h) {
            if out.len() < MAX_URL_DOMAINS && !out.contains(&d) {
                out.push(d);
            }
        }
    };
    let lower = |b: u8| b.to_ascii_lowercase();
    for i in memchr::memmem::find_iter(body, b"://") {
        let scheme_ok = (i >= 4 && body[i - 4..i].iter().map(|&b| lower(b)).eq(*b"http"))
            || (i >= 5 && body[i - 5..i].iter().map(|&b| lower(b)).eq(*b"https"));
        if scheme_ok {
            consider(host_at(body, i + 3), &mut out);
        }
    }
    for i in memchr::memmem::find_iter(body, b"www.") {
        let starts_word = i == 0
            || !(body[i - 1].is_ascii_alphanumeric()
                || matches!(body[i - 1], b'.' | b'/' | b'-' | b'@'));
        if starts_word {
            consider(host_at(body, i), &mut out);
        }
    }
    out
}

/// The host of the authority starting at `start`, lower-cased: letters, digits, `.`, `-`,
/// through quoted-printable soft breaks; after an `@` (user info) the host starts again.
fn host_at(body: &[u8], start: usize) -> Vec<u8> {
    let mut host = Vec::with_capacity(32);
    let mut i = start;
    while i < body.len() && host.len() < 253 {
        let b = body[i];
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
            host.push(b.to_ascii_lowercase());
            i += 1;
        } else if b == b'=' && body[i + 1..].starts_with(b"\r\n") {
            i += 3;
        } else if b == b'=' && body[i + 1..].starts_with(b"\n") {
            i += 2;
        } else if b == b'@' {
            host.clear();
            i += 1;
        } else {
            break;
        }
    }
    host
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_of_a_message() {
        let raw = b"Received: from a.example (a.example [198.51.100.7]) by mx; Mon, 1 Jan 2024\r\n\
Received: from inside (inside [10.0.0.2]) by relay\r\n\
From: \"Bob\" <bob@Mail.Example.COM>\r\n\
Subject: hi\r\n\r\n\
see http://www.shop.example.net/x and https://click.example.org/=\r\nmore and http://198.51.100.9/\r\n";
        let env = Envelope {
            client_ip: Some("192.0.2.1".parse().unwrap()),
            helo: Some("mx.sender.example.co.uk".into()),
            mail_from: Some("<b@bounce.example>".into()),
            ..Default::default()
        };
        let t = targets(raw, &env, true);
        assert_eq!(t.client_ip, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(
            t.received_ips,
            vec!["198.51.100.7".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(t.from_domain.as_deref(), Some("mail.example.com"));
        assert_eq!(t.mail_from_domain.as_deref(), Some("bounce.example"));
        assert_eq!(t.helo.as_deref(), Some("example.co.uk"));
        assert_eq!(t.url_domains, vec!["example.net", "example.org"]);
        let private = Envelope {
            client_ip: Some("127.0.0.1".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(targets(b"", &private, false), Targets::default());
    }

    #[test]
    fn url_domains_by_byte_scan() {
        let body = b"HTTP://user@WWW.Evil.Example.com:8080/x and www.plain.example.net, \
            http://spl=\r\nit.example.org/ https://192.0.2.1/ ftp://no.example.com/ \
            awww.not.example.com x://no.example.net http://x.example.net?q";
        // user info skipped, case folded, a soft line break inside a host joined, addresses,
        // other schemes and `www.` inside a word left out, each domain once
        assert_eq!(
            url_domains(body),
            ["example.com", "example.org", "example.net"]
        );
        let www = url_domains(b"see www.shop.example.co.uk/deals");
        assert_eq!(www, ["example.co.uk"]);
    }
}
