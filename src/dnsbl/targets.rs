//! The names a message asks the lists about, read from the raw bytes and the envelope on the
//! network side (before the scan worker parses the message, so the lookups run while it
//! waits in the queue): the client address, the public addresses of the Received chain, the
//! From and envelope sender domains, the HELO name, and the registrable domains of URLs in the
//! text of the message (plain and quoted-printable text; a base64-encoded body is not decoded
//! here). Each is bounded.

use std::net::IpAddr;

use crate::entities::{canonicalize, is_private, received, registrable_domain};
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

/// Unfolded (name, value) pairs of a header section.
fn headers(head: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(head);
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
        } else if let Some((n, v)) = line.split_once(':') {
            out.push((n.trim().to_string(), v.trim().to_string()));
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

fn url_domains(body: &[u8]) -> Vec<String> {
    // Undo quoted-printable's soft line breaks and its `=3D`, so URLs in QP text are whole.
    let mut text = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] == b'=' {
            if body[i + 1..].starts_with(b"\r\n") {
                i += 3;
                continue;
            }
            if body[i + 1..].starts_with(b"\n") {
                i += 2;
                continue;
            }
            if body[i + 1..].starts_with(b"3D") || body[i + 1..].starts_with(b"3d") {
                text.push(b'=');
                i += 3;
                continue;
            }
        }
        text.push(body[i]);
        i += 1;
    }
    let text = String::from_utf8_lossy(&text);
    let mut out: Vec<String> = Vec::new();
    for found in crate::entities::url::find_in_text(&text) {
        let crate::entities::url::Found::Url(u) = found else {
            continue;
        };
        let Some(c) = canonicalize(u) else { continue };
        if let Some(d) = c.domain {
            if !out.contains(&d) {
                out.push(d);
                if out.len() == MAX_URL_DOMAINS {
                    break;
                }
            }
        }
    }
    out
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
}
