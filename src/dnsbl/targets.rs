//! The names a message asks the lists about, on the network side (before the scan worker
//! parses the message, so the lookups run while it waits in the queue): the client address,
//! the public addresses of the Received chain, the From and envelope sender domains and the
//! HELO name, read from the header fields and the envelope; and the registrable domains of the
//! message's URLs, which are the rules' own (`entities::url_domains` over the scan's parse),
//! so a URL a rule sees is one the lists are asked about. Each is bounded.

use std::net::IpAddr;

use crate::entities::{is_private, received, registrable_domain};
use crate::message::{Envelope, Limits};

/// Received headers read at most.
const MAX_RECEIVED: usize = 16;
/// URL domains asked at most.
pub const MAX_URL_DOMAINS: usize = 32;

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

/// The targets of `raw`; URL domains only when `urls` gives the scan's limits (some zone asks
/// for them).
pub fn targets(raw: &[u8], envelope: &Envelope, urls: Option<&Limits>) -> Targets {
    let mut t = match mail_auth::AuthenticatedMessage::parse(raw) {
        Some(m) => targets_of(&m.headers, envelope),
        // No header section: no header names.
        None => targets_of(&[], envelope),
    };
    if let Some(limits) = urls {
        t.url_domains = url_domains(raw, limits);
    }
    t
}

/// The targets named by a message's header fields (name, raw value), already split as
/// mail-auth's parse leaves them (authentication parses every message anyway), and by its
/// envelope: all but the URL domains.
pub fn targets_of(headers: &[(&[u8], &[u8])], envelope: &Envelope) -> Targets {
    let mut t = Targets {
        client_ip: envelope.client_ip.filter(|ip| !is_private(*ip)),
        ..Default::default()
    };
    let mut received = 0;
    for (name, value) in headers {
        let name = name.trim_ascii();
        if name.eq_ignore_ascii_case(b"received") && received < MAX_RECEIVED {
            received += 1;
            // Folded values are fine as they are: the parser treats line breaks as spaces.
            if let Some(ip) = received::sender_ip(&String::from_utf8_lossy(value)) {
                if !is_private(ip) && !t.received_ips.contains(&ip) && Some(ip) != t.client_ip {
                    t.received_ips.push(ip);
                }
            }
        } else if name.eq_ignore_ascii_case(b"from") && t.from_domain.is_none() {
            t.from_domain = address_domain(String::from_utf8_lossy(value).trim());
        }
    }
    t.mail_from_domain = envelope.mail_from.as_deref().and_then(address_domain);
    t.helo = envelope
        .helo
        .as_deref()
        .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
        .filter(|h| h.contains('.') && h.parse::<IpAddr>().is_err() && !h.starts_with('['))
        .and_then(|h| registrable_domain(&h));
    t
}

/// The registrable domains of the URLs of `raw`, the first `MAX_URL_DOMAINS`: the message
/// prepared and parsed as the scan worker will (same `limits`; `parse_links` leaves out the
/// normalized text and the attachments' hashes), and its URLs found as the rules'
/// (`entities::url_domains`, which leaves out the addresses, hops and attachments). A second
/// scanner of the raw bytes would disagree with the rules on encoded parts, HTML and
/// scheme-less links; this costs a parse on the network side (docs/perf-log.md, "DNS lists'
/// URL targets from entities").
pub fn url_domains(raw: &[u8], limits: &Limits) -> Vec<String> {
    let prepared = crate::message::prepare(raw, limits);
    let parsed = crate::message::parse_links(&prepared, limits);
    let mut domains = crate::entities::url_domains(&parsed);
    domains.truncate(MAX_URL_DOMAINS);
    domains
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
        let t = targets(raw, &env, Some(&Limits::default()));
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
        assert_eq!(targets(b"", &private, None), Targets::default());
    }

    #[test]
    fn url_domains_are_those_of_the_parsed_message() {
        let b64 = |s: &str| {
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut out = String::new();
            for c in s.as_bytes().chunks(3) {
                let v = (c[0] as u32) << 16
                    | (*c.get(1).unwrap_or(&0) as u32) << 8
                    | *c.get(2).unwrap_or(&0) as u32;
                for i in 0..4 {
                    out.push(if i <= c.len() {
                        A[(v >> (18 - 6 * i) & 63) as usize] as char
                    } else {
                        '='
                    });
                }
            }
            out
        };
        let html = b64("<a href=\"https://pay.evil.example.com/x\">pay</a> www.second.example.org");
        let image = b64("http://not.a.text.example.net/");
        let raw = format!(
            "From: a@b.example\r\nContent-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n\
             --b1\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
             plain HTTP://user@WWW.Plain.Example.info/ http://spl=\r\nit.example.io/ \
             https://192.0.2.1/ bare.example.co.uk/deals\r\n\
             --b1\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: BASE64\r\n\r\n{html}\r\n\
             --b1\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\n{image}\r\n\
             --b1--\r\n"
        );
        let limits = Limits::default();
        let t = targets(raw.as_bytes(), &Envelope::default(), Some(&limits));
        // user info dropped and case folded, a quoted-printable soft break joined, an address
        // host left out, a scheme-less link found; the text of a base64 HTML part (body text,
        // outside an alternative) before its link; nothing of the image
        assert_eq!(
            t.url_domains,
            [
                "example.info",
                "example.io",
                "example.co.uk",
                "example.org",
                "example.com"
            ],
            "{raw}"
        );
        let input = crate::message::prepare(raw.as_bytes(), &limits);
        let parsed = crate::message::parse(&input, &limits);
        let rules = crate::entities::extract(&parsed, &Envelope::default()).domains;
        assert_eq!(t.url_domains, rules);
        // without URLs asked, none
        assert!(targets(raw.as_bytes(), &Envelope::default(), None)
            .url_domains
            .is_empty());
    }

    #[test]
    fn url_domains_are_bounded() {
        let body: String = (0..40)
            .map(|i| format!("http://host.d{i}.example/ "))
            .collect();
        let raw = format!("From: a@b.example\r\n\r\n{body}\r\n");
        let d = url_domains(raw.as_bytes(), &Limits::default());
        assert_eq!(d.len(), MAX_URL_DOMAINS);
        assert_eq!(
            (d[0].as_str(), d[31].as_str()),
            ("d0.example", "d31.example")
        );
    }
}
