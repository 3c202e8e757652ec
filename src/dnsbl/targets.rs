//! The names a message asks the lists about, read from the raw bytes and the envelope on the
//! network side (before the scan worker parses the message, so the lookups run while it
//! waits in the queue): the client address, the public addresses of the Received chain, the
//! From and envelope sender domains, the HELO name, and the registrable domains of URLs in the
//! text of the message (plain, quoted-printable and base64-encoded text parts). Each is
//! bounded.

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
    match mail_auth::AuthenticatedMessage::parse(raw) {
        Some(m) => targets_of(&m.headers, body_of(&m), envelope, urls),
        // No header section: all of it is text.
        None => targets_of(&[], raw, envelope, urls),
    }
}

/// The body of a message parsed by mail-auth.
pub fn body_of<'x>(m: &mail_auth::AuthenticatedMessage<'x>) -> &'x [u8] {
    m.raw_message
        .get(m.body_offset as usize..)
        .unwrap_or_default()
}

/// The targets of a message whose header fields (name, raw value) are already split, as
/// mail-auth's parse leaves them (authentication parses every message anyway), and its body.
pub fn targets_of(
    headers: &[(&[u8], &[u8])],
    body: &[u8],
    envelope: &Envelope,
    urls: bool,
) -> Targets {
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
    if urls {
        t.url_domains = url_domains(&body[..body.len().min(MAX_BODY_SCAN)]);
        for text in base64_texts(headers, body) {
            for d in url_domains(&text) {
                if t.url_domains.len() < MAX_URL_DOMAINS && !t.url_domains.contains(&d) {
                    t.url_domains.push(d);
                }
            }
        }
    }
    t
}

/// Where the line-by-line walk of `base64_texts` is.
enum Walk {
    Body,
    PartHeaders { base64: bool, text: bool },
    Base64,
}

/// The decoded text of the base64-encoded text parts of a message (the whole body when the
/// message itself is one), `MAX_BODY_SCAN` bytes in all at most. A light walk over lines, not
/// a MIME parser: a part's header block follows a line starting with `--` (its boundary) and
/// ends at a blank line; its data runs to the next `--` line. Parts that are not text (no
/// Content-Type is text, RFC 2045 5.2) are skipped, and data that does not decode is dropped.
fn base64_texts(headers: &[(&[u8], &[u8])], body: &[u8]) -> Vec<Vec<u8>> {
    let mentions = |b: &[u8]| {
        memchr::memmem::find(b, b"ase64").is_some() || memchr::memmem::find(b, b"ASE64").is_some()
    };
    if !mentions(body) && !headers.iter().any(|(_, v)| mentions(v)) {
        return Vec::new();
    }
    let (mut base64, mut text) = (false, true);
    for (name, value) in headers {
        part_field(
            name.trim_ascii(),
            value.trim_ascii(),
            &mut base64,
            &mut text,
        );
    }
    let mut state = if base64 && text {
        Walk::Base64
    } else {
        Walk::Body
    };
    let limit = MAX_BODY_SCAN / 3 * 4;
    let (mut out, mut data, mut used): (Vec<Vec<u8>>, Vec<u8>, usize) = (Vec::new(), Vec::new(), 0);
    let flush = |data: &mut Vec<u8>, out: &mut Vec<Vec<u8>>| {
        if !data.is_empty() {
            if let Some(decoded) = mail_parser::decoders::base64::base64_decode(data) {
                out.push(decoded);
            }
            data.clear();
        }
    };
    for line in crate::message::lines(body) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.starts_with(b"--") {
            flush(&mut data, &mut out);
            state = Walk::PartHeaders {
                base64: false,
                text: true,
            };
            continue;
        }
        match &mut state {
            Walk::Body => {}
            Walk::PartHeaders { base64, text } => {
                if line.is_empty() {
                    state = if *base64 && *text {
                        Walk::Base64
                    } else {
                        Walk::Body
                    };
                } else {
                    part_header(line, base64, text);
                }
            }
            Walk::Base64 => {
                if used + line.len() > limit {
                    break;
                }
                used += line.len();
                data.extend_from_slice(line.trim_ascii());
            }
        }
    }
    flush(&mut data, &mut out);
    out
}

/// Notes what one header line says of its part's encoding and type.
fn part_header(line: &[u8], base64: &mut bool, text: &mut bool) {
    if let Some(colon) = memchr::memchr(b':', line) {
        part_field(
            line[..colon].trim_ascii(),
            line[colon + 1..].trim_ascii(),
            base64,
            text,
        );
    }
}

/// Notes what one header field says of its part's encoding and type.
fn part_field(name: &[u8], value: &[u8], base64: &mut bool, text: &mut bool) {
    if name.eq_ignore_ascii_case(b"content-transfer-encoding") {
        *base64 = value.eq_ignore_ascii_case(b"base64");
    } else if name.eq_ignore_ascii_case(b"content-type") {
        *text = value.len() >= 5 && value[..5].eq_ignore_ascii_case(b"text/");
    }
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
        let domain = std::str::from_utf8(&host)
            .ok()
            .map(|h| h.trim_matches(['.', '-']))
            .filter(|h| {
                h.contains('.')
                    && h.parse::<IpAddr>().is_err()
                    && !h.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            })
            .and_then(registrable_domain);
        seen_hosts.push(host);
        if let Some(d) = domain {
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
    fn urls_of_base64_text_parts_are_read_and_of_other_parts_not() {
        let enc = |t: &str| {
            use std::fmt::Write;
            // standard base64, wrapped at 76 columns as MIME does
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut s = String::new();
            for c in t.as_bytes().chunks(3) {
                let n = c.len();
                let v = (c[0] as u32) << 16
                    | (*c.get(1).unwrap_or(&0) as u32) << 8
                    | *c.get(2).unwrap_or(&0) as u32;
                for i in 0..4 {
                    if i <= n {
                        s.push(A[(v >> (18 - 6 * i) & 63) as usize] as char);
                    } else {
                        s.push('=');
                    }
                }
            }
            let mut wrapped = String::new();
            for (i, ch) in s.chars().enumerate() {
                if i > 0 && i % 76 == 0 {
                    let _ = write!(wrapped, "\r\n");
                }
                wrapped.push(ch);
            }
            wrapped
        };
        let html = enc("<a href=\"https://pay.evil.example.com/x\">pay</a> and some more text to wrap over several lines of base64 data, www.second.example.org");
        let image = enc("http://not.a.text.example.net/");
        let raw = format!(
            "From: a@b.example\r\nContent-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n\
             --b1\r\nContent-Type: text/plain\r\n\r\nplain http://plain.example.info/\r\n\
             --b1\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: BASE64\r\n\r\n{html}\r\n\
             --b1\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\n{image}\r\n\
             --b1--\r\n"
        );
        let t = targets(raw.as_bytes(), &Envelope::default(), true);
        assert_eq!(
            t.url_domains,
            ["example.info", "example.com", "example.org"],
            "{raw}"
        );
        // a message that is one base64 text part
        let single = format!(
            "From: a@b.example\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n",
            enc("visit http://single.example.net/ now")
        );
        let t = targets(single.as_bytes(), &Envelope::default(), true);
        assert_eq!(t.url_domains, ["example.net"]);
        // without URLs asked, nothing is decoded
        assert!(targets(single.as_bytes(), &Envelope::default(), false)
            .url_domains
            .is_empty());
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
