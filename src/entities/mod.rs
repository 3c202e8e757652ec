//! Entities: the things in a message that carry reputation — URLs, hosts, registrable domains,
//! email addresses, IPs, attachments — each with where it was found.
//!
//! Owns: extraction and canonical forms of entities. Never touches: the network (no DNS, no
//! lookups), the store, Lua.

pub mod received;
pub mod url;

use std::net::IpAddr;

use mail_parser::{Address, HeaderName, HeaderValue};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::message::{normalize, Anomaly, Envelope, LinkAttr, ParsedMessage};

pub use self::received::helo_is_bare_ip;
pub use self::url::{canonical_host, canonicalize, has_userinfo, registrable_domain, CanonicalUrl};

/// Most URLs kept per message; more set `too_many_links`.
pub const MAX_URLS: usize = 1_000;
/// Most addresses kept per message.
pub const MAX_EMAILS: usize = 1_000;
/// Most Received headers read (real chains have a handful; loops and forgeries have more).
pub const MAX_RECEIVED_HOPS: usize = 100;

/// Where a URL was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UrlSource {
    /// Plain text of a body part.
    Text,
    /// `<a href>` and friends.
    HtmlHref,
    /// `<img src>` and friends.
    HtmlSrc,
    /// `<form action>`.
    HtmlAction,
    /// `background=` attributes.
    HtmlBackground,
    /// Visible text of an HTML part.
    HtmlText,
    /// A header such as List-Unsubscribe.
    Header,
}

impl From<LinkAttr> for UrlSource {
    fn from(attr: LinkAttr) -> Self {
        match attr {
            LinkAttr::Href => UrlSource::HtmlHref,
            LinkAttr::Src => UrlSource::HtmlSrc,
            LinkAttr::Action => UrlSource::HtmlAction,
            LinkAttr::Background => UrlSource::HtmlBackground,
        }
    }
}

/// A URL entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UrlEntity {
    pub url: String,
    pub host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub host_is_ip: bool,
    pub source: UrlSource,
    /// Anchor text for `<a href>` links.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The authority carries a user name (`http://www.bank.example@198.51.100.7/`):
    /// `has_userinfo` of `url`.
    pub userinfo: bool,
}

/// The role an address plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EmailRole {
    From,
    Sender,
    ReplyTo,
    ReturnPath,
    To,
    Cc,
    EnvelopeFrom,
    EnvelopeRcpt,
    Body,
    Mailto,
}

/// An address with its role and display name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmailEntity {
    /// Lower-case address, domain in punycode.
    pub address: String,
    pub domain: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub role: EmailRole,
}

/// Where an IP was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IpSource {
    /// The connecting client, as the MTA reported it.
    Client,
    /// A Received header.
    Received,
}

/// An IP with its place in the Received chain (hop 0 is the topmost, most recent header).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpEntity {
    pub ip: IpAddr,
    pub source: IpSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hop: Option<usize>,
    /// The name the sending host gave (HELO) or was known by, when the header says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The registrable domain of `host` (lower-cased), by the public suffix list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// A loopback, private, link-local, CGNAT or unspecified address (`is_private`): a hop
    /// inside someone's own network.
    pub private: bool,
}

impl IpEntity {
    fn new(ip: IpAddr, source: IpSource, hop: Option<usize>, host: Option<String>) -> IpEntity {
        // (Received hosts come lower-cased; only a HELO from the envelope may need a copy)
        let domain = host.as_deref().and_then(|h| {
            if h.bytes().any(|b| b.is_ascii_uppercase()) {
                registrable_domain(&h.to_ascii_lowercase())
            } else {
                registrable_domain(h)
            }
        });
        IpEntity {
            private: is_private(ip),
            ip,
            source,
            hop,
            host,
            domain,
        }
    }
}

/// One Received header (hop 0 is the topmost, most recent one), every one of the message's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReceivedHop {
    /// The time stamp after the header's last `;`, Unix seconds (`message::date::received_time`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<i64>,
    /// The client greeted with its bare address: `from 192.0.2.7 ([192.0.2.7])`
    /// (`helo_is_bare_ip`).
    pub helo_ip: bool,
}

/// Attachment flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AttachmentFlags {
    /// A harmless-looking extension followed by an executable one: `photo.jpg.exe`.
    pub double_extension: bool,
    /// The last extension is one that runs code on a mail reader's machine.
    pub executable: bool,
}

/// An attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttachmentEntity {
    /// File name as displayed (decoded); empty when none was given.
    pub name: String,
    /// The normalized file name (invisible and bidi characters removed, case folded).
    pub name_normalized: String,
    /// Last extension of the normalized name, without the dot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extension: Option<String>,
    pub content_type: String,
    pub size: usize,
    /// SHA-256 of the decoded content, hex.
    pub hash: String,
    pub flags: AttachmentFlags,
}

/// An HTML anchor whose text names a domain: phishing rules compare the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anchor {
    pub text: String,
    /// Registrable domain named by the link text.
    pub text_domain: String,
    /// Registrable domain (or host, for IP hosts) of the target.
    pub target_domain: String,
    /// The text names a different domain than the link goes to.
    pub mismatch: bool,
}

/// Everything extracted from one message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Entities {
    pub urls: Vec<UrlEntity>,
    /// Distinct URL hosts, in order of first appearance.
    pub hosts: Vec<String>,
    /// Distinct registrable domains of URL hosts.
    pub domains: Vec<String>,
    pub emails: Vec<EmailEntity>,
    /// Client IP first, then Received hops top-down.
    pub ips: Vec<IpEntity>,
    /// Every Received header, top-down: `IpEntity::hop` indexes it.
    pub hops: Vec<ReceivedHop>,
    pub attachments: Vec<AttachmentEntity>,
    pub anchors: Vec<Anchor>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id_domain: Option<String>,
    /// X-Mailer, else User-Agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mailer: Option<String>,
    /// Anomalies met while extracting (`too_many_links`).
    #[serde(skip)]
    pub anomalies: Vec<Anomaly>,
}

impl Entities {
    /// The first From address.
    pub fn from(&self) -> Option<&EmailEntity> {
        self.emails_with(EmailRole::From).next()
    }

    /// Addresses with one role.
    pub fn emails_with(&self, role: EmailRole) -> impl Iterator<Item = &EmailEntity> {
        self.emails.iter().filter(move |e| e.role == role)
    }

    /// The Received header an address was read from, if any.
    pub fn hop_of(&self, ip: &IpEntity) -> Option<&ReceivedHop> {
        ip.hop.and_then(|h| self.hops.get(h))
    }

    /// Whether the client of the hop an address was read from greeted with its bare address
    /// (`helo_ip` of `msg:ips()`).
    pub fn helo_ip(&self, ip: &IpEntity) -> bool {
        self.hop_of(ip).is_some_and(|h| h.helo_ip)
    }

    /// Who the message is for: the envelope recipients, else (a message scanned without an
    /// envelope) the To and Cc addresses, in order (`msg:recipients()`).
    pub fn recipients(&self) -> impl Iterator<Item = &EmailEntity> {
        let envelope = self.emails_with(EmailRole::EnvelopeRcpt).next().is_some();
        self.emails.iter().filter(move |r| {
            if envelope {
                r.role == EmailRole::EnvelopeRcpt
            } else {
                matches!(r.role, EmailRole::To | EmailRole::Cc)
            }
        })
    }

    /// The registrable domains of the hosts of `ips`, each once, in the order first met
    /// (`msg:hop_domains()`).
    pub fn hop_domains(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for d in (self.ips.iter()).filter_map(|ip| ip.domain.as_deref()) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
        out
    }

    /// The hop (an index into `hops`) at which the first public address of `ips` read from a
    /// Received header handed the message over: where it entered a network that recorded it
    /// (`msg:received_time("public")`). None when every hop's address is private.
    pub fn first_public_hop(&self) -> Option<usize> {
        (self.ips.iter())
            .find(|ip| ip.hop.is_some() && !ip.private)
            .and_then(|ip| ip.hop)
    }
}

/// Extracts the entities of a parsed message and its envelope.
pub fn extract(message: &ParsedMessage<'_>, envelope: &Envelope) -> Entities {
    let mut x = Extractor::default();
    if let Some(ip) = envelope.client_ip {
        x.out.ips.push(IpEntity::new(
            canonical_ip(ip),
            IpSource::Client,
            None,
            envelope.helo.clone(),
        ));
    }
    if let Some(mime) = &message.mime {
        x.headers(mime);
    }
    if let Some(from) = &envelope.mail_from {
        x.email(from, None, EmailRole::EnvelopeFrom);
    }
    for rcpt in &envelope.rcpt_to {
        x.email(rcpt, None, EmailRole::EnvelopeRcpt);
    }
    x.urls(message);
    for part in &message.attachments {
        x.attachment(part);
    }
    x.out
}

/// The registrable domains of a message's URLs, in order of first appearance: `extract`'s
/// `Entities::domains`, by the same walk over the same sources, without the addresses, hops,
/// anchors and attachments (the DNS lists' URL targets, asked on the network side for every
/// message, need only these).
pub fn url_domains(message: &ParsedMessage<'_>) -> Vec<String> {
    let mut x = Extractor {
        urls_only: true,
        ..Extractor::default()
    };
    x.urls(message);
    x.out.domains
}

#[derive(Default)]
struct Extractor {
    out: Entities,
    /// Only URLs are wanted (`url_domains`): addresses and anchors are not collected.
    urls_only: bool,
    // These sets only deduplicate one message's items: keyed by 64-bit hashes of the canonical
    // strings (no copies) in FxHash sets.
    seen_urls: FxHashSet<(u64, UrlSource)>,
    seen_hosts: FxHashSet<u64>,
    seen_domains: FxHashSet<u64>,
    seen_emails: FxHashSet<(u64, EmailRole)>,
    /// Hashes of raw URL spellings already seen per source (the same link shows up in the plain
    /// part, the HTML part and its text).
    seen_raw_urls: FxHashSet<(u64, UrlSource)>,
    /// What each raw spelling canonicalized to, by its hash and whether it was a link target:
    /// a newsletter repeats its links, and the plain and HTML parts carry the same ones, while
    /// `url::Url::parse` costs ~5,000 instructions a URL.
    canonical_of: FxHashMap<(u64, bool), Canon>,
}

/// A raw URL spelling canonicalized before (`Extractor::canonical_of`).
#[derive(Clone, Copy)]
enum Canon {
    /// It is no web URL.
    Failed,
    /// It gave the URL at this index of `Entities::urls`.
    At(usize),
}

impl Extractor {
    fn headers(&mut self, mime: &mail_parser::Message<'_>) {
        for (header, role) in [
            (HeaderName::From, EmailRole::From),
            (HeaderName::Sender, EmailRole::Sender),
            (HeaderName::ReplyTo, EmailRole::ReplyTo),
            (HeaderName::To, EmailRole::To),
            (HeaderName::Cc, EmailRole::Cc),
        ] {
            for value in mime.header_values(header) {
                if let HeaderValue::Address(address) = value {
                    self.addresses(address, role);
                }
            }
        }
        match mime.header(HeaderName::ReturnPath) {
            Some(HeaderValue::Text(path)) => self.email(path, None, EmailRole::ReturnPath),
            Some(HeaderValue::TextList(paths)) => {
                for path in paths {
                    self.email(path, None, EmailRole::ReturnPath);
                }
            }
            _ => {}
        }
        for header in mime.headers() {
            if header.name != HeaderName::Received {
                continue;
            }
            // Every header's time and HELO (`msg:received_time(n)` reads any hop, and both are
            // cheap); the sender's address of the first `MAX_RECEIVED_HOPS` only.
            let hop = self.out.hops.len();
            let value = mime
                .raw_message
                .get(header.offset_start as usize..header.offset_end as usize)
                .unwrap_or_default();
            self.out.hops.push(ReceivedHop {
                time: crate::message::date::received_time_bytes(value),
                helo_ip: helo_is_bare_ip(value),
            });
            if hop >= MAX_RECEIVED_HOPS {
                continue;
            }
            let raw = mime
                .raw_message
                .get(header.offset_field as usize..header.offset_end as usize)
                .map(crate::message::utf8_lossy) // borrows when valid
                .unwrap_or_default();
            let text = memchr::memchr(b':', raw.as_bytes()).map_or(raw.as_ref(), |i| &raw[i + 1..]);
            if let Some((ip, host)) = received::sender(text) {
                (self.out.ips).push(IpEntity::new(ip, IpSource::Received, Some(hop), host));
            }
        }
        if let Some(id) = mime.message_id() {
            let id = id.trim().to_string();
            self.out.message_id_domain = id
                .rsplit_once('@')
                .and_then(|(_, d)| canonical_host(d.trim_end_matches('>')));
            self.out.message_id = Some(id);
        }
        self.out.mailer = [
            HeaderName::Other("X-Mailer".into()),
            HeaderName::Other("User-Agent".into()),
        ]
        .into_iter()
        .find_map(|h| {
            mime.header(h)
                .and_then(|v| v.as_text())
                .map(|t| t.trim().to_string())
        })
        .filter(|m| !m.is_empty());
    }

    /// Every URL of the message, in the order that fixes `Entities::urls`, `hosts` and
    /// `domains`: List-Unsubscribe, the body text, the HTML link targets, the HTML text; with
    /// the addresses met in the text and the anchors.
    fn urls(&mut self, message: &ParsedMessage<'_>) {
        if let Some(list) = message
            .mime
            .as_ref()
            .and_then(|m| m.header_raw(HeaderName::ListUnsubscribe))
        {
            for found in url::find_in_text(list) {
                match found {
                    url::Found::Url(u) => self.url(u, UrlSource::Header, None),
                    url::Found::Email(_) => {} // mailto: unsubscribe addresses are not senders
                }
            }
        }
        self.text(&message.body.display, UrlSource::Text);
        for link in &message.html_links {
            self.html_link(&link.target, link.attr, link.text.as_deref());
        }
        // An HTML-only message's body is its HTML text: read it once.
        if message.html_text != message.body.display {
            self.text(&message.html_text, UrlSource::HtmlText);
        }
    }

    fn addresses(&mut self, address: &Address<'_>, role: EmailRole) {
        for addr in address.iter() {
            if let Some(a) = &addr.address {
                self.email(a, addr.name.as_deref(), role);
            }
        }
    }

    fn email(&mut self, raw: &str, name: Option<&str>, role: EmailRole) {
        if self.urls_only || self.out.emails.len() >= MAX_EMAILS {
            return;
        }
        let Some((address, domain)) = canonical_email(raw) else {
            return;
        };
        if !self.seen_emails.insert((key(&address), role)) {
            return;
        }
        self.out.emails.push(EmailEntity {
            address,
            domain,
            name: name
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            role,
        });
    }

    fn text(&mut self, text: &str, source: UrlSource) {
        for found in url::find_in_text(text) {
            match found {
                url::Found::Url(u) => self.url(u, source, None),
                url::Found::Email(e) => self.email(e, None, EmailRole::Body),
            }
        }
    }

    /// The URL list is at `MAX_URLS` and a URL beyond it was seen (the anomaly is recorded), so
    /// no later URL changes the result: a link-stuffed message (a list of 3,000 weblogs in the
    /// dev corpus) need not pay ~5,000 instructions of URL parsing for each of the rest.
    fn urls_full(&self) -> bool {
        self.out.urls.len() >= MAX_URLS && self.out.anomalies.contains(&Anomaly::TooManyLinks)
    }

    fn html_link(&mut self, target: &str, attr: LinkAttr, text: Option<&str>) {
        let lower = target.get(..7).map(str::to_ascii_lowercase);
        if lower.as_deref() == Some("mailto:") {
            let address = target[7..].split('?').next().unwrap_or_default();
            self.email(address, None, EmailRole::Mailto);
            return;
        }
        let (k, canonical) = self.canonical(target, true);
        let Some(canonical) = canonical else {
            return;
        };
        if let (Some(text), LinkAttr::Href, false) = (text, attr, self.urls_only) {
            self.anchor(text, &canonical);
        }
        self.push_url_from(k, canonical, attr.into(), text);
    }

    fn anchor(&mut self, text: &str, target: &CanonicalUrl) {
        let text = text.trim();
        let Some(shown) = text
            .split_whitespace()
            .next()
            .filter(|w| w.contains('.'))
            .and_then(canonicalize)
        else {
            return;
        };
        let text_domain = shown.domain.unwrap_or(shown.host);
        let target_domain = target.domain.clone().unwrap_or_else(|| target.host.clone());
        self.out.anchors.push(Anchor {
            text: text.to_string(),
            mismatch: text_domain != target_domain,
            text_domain,
            target_domain,
        });
    }

    fn url(&mut self, raw: &str, source: UrlSource, text: Option<&str>) {
        if self.urls_full() || !self.seen_raw_urls.insert((key(raw), source)) {
            return;
        }
        let (k, canonical) = self.canonical(raw, false);
        if let Some(canonical) = canonical {
            self.push_url_from(k, canonical, source, text);
        }
    }

    /// `raw` canonicalized (as a link target when `link`), parsed once per message: a spelling
    /// seen before is rebuilt from the URL record it gave. Also returns the cache key, for
    /// `push_url_from`.
    fn canonical(&mut self, raw: &str, link: bool) -> ((u64, bool), Option<CanonicalUrl>) {
        let k = (key(raw), link);
        match self.canonical_of.get(&k) {
            Some(Canon::Failed) => return (k, None),
            Some(&Canon::At(i)) => {
                if let Some(u) = self.out.urls.get(i) {
                    return (
                        k,
                        Some(CanonicalUrl {
                            url: u.url.clone(),
                            host: u.host.clone(),
                            domain: u.domain.clone(),
                            ip: if u.host_is_ip {
                                u.host.parse().ok()
                            } else {
                                None
                            },
                        }),
                    );
                }
            }
            None => {}
        }
        let c = if link {
            canonicalize_link(raw)
        } else {
            canonicalize(raw)
        };
        if c.is_none() {
            self.canonical_of.insert(k, Canon::Failed);
        }
        (k, c)
    }

    /// `push_url`, remembering where the URL of raw spelling `k` went.
    fn push_url_from(
        &mut self,
        k: (u64, bool),
        c: CanonicalUrl,
        source: UrlSource,
        text: Option<&str>,
    ) {
        if self.push_url(c, source, text) {
            self.canonical_of
                .entry(k)
                .or_insert(Canon::At(self.out.urls.len() - 1));
        }
    }

    /// Adds a URL; false when it was there already (for this source) or there are too many.
    fn push_url(&mut self, c: CanonicalUrl, source: UrlSource, text: Option<&str>) -> bool {
        if !self.seen_urls.insert((key(&c.url), source)) {
            return false;
        }
        if self.out.urls.len() >= MAX_URLS {
            if !self.out.anomalies.contains(&Anomaly::TooManyLinks) {
                self.out.anomalies.push(Anomaly::TooManyLinks);
            }
            return false;
        }
        if self.seen_hosts.insert(key(&c.host)) {
            self.out.hosts.push(c.host.clone());
        }
        if let Some(d) = &c.domain {
            if self.seen_domains.insert(key(d)) {
                self.out.domains.push(d.clone());
            }
        }
        self.out.urls.push(UrlEntity {
            host_is_ip: c.ip.is_some(),
            userinfo: has_userinfo(&c.url),
            url: c.url,
            host: c.host,
            domain: c.domain,
            source,
            text: text.map(str::to_string),
        });
        true
    }

    fn attachment(&mut self, part: &crate::message::AttachmentPart) {
        let name = part.name.clone().unwrap_or_default();
        let name_normalized = normalize(&name);
        let (extension, flags) = attachment_flags(&name_normalized);
        self.out.attachments.push(AttachmentEntity {
            name,
            name_normalized,
            extension,
            content_type: part.content_type.clone(),
            size: part.size,
            hash: part.sha256.clone(),
            flags,
        });
    }
}

/// The dedupe key of a string (64-bit: a collision is astronomically unlikely).
fn key(s: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(s.as_bytes())
}

/// HTML targets may be relative or scheme-relative; only absolute ones name a host.
fn canonicalize_link(target: &str) -> Option<CanonicalUrl> {
    let t = target.trim();
    if t.starts_with("//") {
        return canonicalize(&format!("http:{t}"));
    }
    canonicalize(t)
}

/// Lower-case address with its domain in punycode; `None` when it is not an address.
pub fn canonical_email(raw: &str) -> Option<(String, String)> {
    let raw = raw.trim().trim_matches(|c| matches!(c, '<' | '>'));
    let (local, domain) = raw.rsplit_once('@')?;
    if local.is_empty() || domain.is_empty() || local.len() > 256 {
        return None;
    }
    let domain = canonical_host(domain)?;
    let mut address = String::with_capacity(local.len() + 1 + domain.len());
    if local.is_ascii() {
        address.push_str(local);
        address.make_ascii_lowercase();
    } else {
        address.push_str(&local.to_lowercase());
    }
    address.push('@');
    address.push_str(&domain);
    Some((address, domain))
}

/// An IP address as text without the formatting machinery: `Display` for `Ipv4Addr` costs
/// ~1,300 instructions an address (callgrind), and the IP records and the shingles write every
/// hop of every message.
pub struct IpText {
    buf: [u8; 15],
    len: usize,
    /// IPv6 addresses (rare in Received chains) take `Display`.
    v6: Option<String>,
}

impl IpText {
    pub fn new(ip: std::net::IpAddr) -> IpText {
        let mut t = IpText {
            buf: [0; 15],
            len: 0,
            v6: None,
        };
        match ip {
            std::net::IpAddr::V4(v4) => {
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        t.push(b'.');
                    }
                    if octet >= 100 {
                        t.push(b'0' + octet / 100);
                    }
                    if octet >= 10 {
                        t.push(b'0' + octet / 10 % 10);
                    }
                    t.push(b'0' + octet % 10);
                }
            }
            std::net::IpAddr::V6(_) => t.v6 = Some(ip.to_string()),
        }
        t
    }

    fn push(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    pub fn as_str(&self) -> &str {
        match &self.v6 {
            Some(s) => s,
            None => std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default(),
        }
    }
}

/// Loopback, private (RFC 1918), link-local, CGNAT, unspecified, and IPv6 unique-local,
/// link-local, loopback and unspecified addresses: hops inside someone's own network. An
/// IPv4-mapped IPv6 address is read as IPv4.
pub fn is_private(ip: IpAddr) -> bool {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || a == 0
                || (a == 100 && (64..=127).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// `is_private` of an address given as text (the rules' `util.is_private_ip`); false for
/// anything that is no IP address.
pub fn is_private_text(text: &[u8]) -> bool {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse::<IpAddr>().ok())
        .is_some_and(is_private)
}

/// IPv4-mapped IPv6 addresses become IPv4; everything else as is (Display is canonical).
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

const EXECUTABLE: &[&str] = &[
    "exe", "scr", "com", "pif", "bat", "cmd", "vbs", "vbe", "js", "jse", "wsf", "wsh", "msi",
    "msp", "jar", "ps1", "hta", "cpl", "lnk", "dll", "reg", "scf", "inf", "apk", "app", "gadget",
    "msc", "vb", "ws", "xll", "iso", "img", "vhd", "one",
];

const HARMLESS_LOOKING: &[&str] = &[
    "pdf", "doc", "docx", "xls", "xlsx", "ppt", "pptx", "txt", "rtf", "jpg", "jpeg", "png", "gif",
    "bmp", "tif", "tiff", "mp3", "mp4", "avi", "mov", "wav", "htm", "html", "zip", "rar", "csv",
    "odt", "ods",
];

/// Extension and flags of a normalized file name.
fn attachment_flags(name: &str) -> (Option<String>, AttachmentFlags) {
    let mut exts = name.rsplit('.').map(str::trim);
    let last = exts.next().filter(|_| name.contains('.'));
    let Some(last) = last.filter(|e| !e.is_empty() && e.len() <= 10) else {
        return (None, AttachmentFlags::default());
    };
    let executable = EXECUTABLE.contains(&last);
    let double_extension = executable && exts.next().is_some_and(|e| HARMLESS_LOOKING.contains(&e));
    (
        Some(last.to_string()),
        AttachmentFlags {
            double_extension,
            executable,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{parse, prepare, Limits};

    #[test]
    fn private_addresses() {
        for (ip, private) in [
            ("10.1.2.3", true),
            ("172.16.0.1", true),
            ("172.32.0.1", false),
            ("192.168.1.1", true),
            ("127.0.0.1", true),
            ("169.254.1.1", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("0.0.0.0", true),
            ("8.8.8.8", false),
            ("::1", true),
            ("::", true),
            ("fd00::1", true),
            ("fe80::1", true),
            ("2001:db8::1", false),
            ("::ffff:10.0.0.1", true),
        ] {
            assert_eq!(is_private(ip.parse().unwrap()), private, "{ip}");
            assert_eq!(is_private_text(ip.as_bytes()), private, "{ip}");
        }
        for text in ["", "10.0.0", "localhost", "10.0.0.1 ", "\u{ff}"] {
            assert!(!is_private_text(text.as_bytes()), "{text:?}");
        }
    }

    /// The hops' facts and the IP records' flags, as `extract` computes them once.
    #[test]
    fn received_hops_and_ip_flags() {
        let raw = "Received: from 192.0.2.7 ([192.0.2.7]) by mx.example; Thu, 22 Aug 2002 18:26:25 -0700\n\
                   Received: from relay.example.com (relay.example.com [10.0.0.5]) by a; 22 Aug 02 18:26 GMT\n\
                   Received: from x by y (no date)\n\
                   From: a@example.com\n\
                   Subject: hi\n\n\
                   see http://www.bank.example@198.51.100.7/login and http://example.com/a@b\n";
        let input = prepare(raw.as_bytes(), &Limits::default());
        let m = parse(&input, &Limits::default());
        let envelope = Envelope {
            client_ip: Some("203.0.113.9".parse().unwrap()),
            helo: Some("Mail.Example.CO.UK".into()),
            ..Envelope::default()
        };
        let e = extract(&m, &envelope);
        let hops: Vec<_> = e.hops.iter().map(|h| (h.time, h.helo_ip)).collect();
        assert_eq!(
            hops,
            [
                (Some(1_030_065_985), true),
                (Some(1_030_040_760), false),
                (None, false)
            ]
        );
        let ips: Vec<_> = (e.ips.iter())
            .map(|ip| {
                (
                    ip.ip.to_string(),
                    ip.private,
                    ip.domain.as_deref(),
                    e.helo_ip(ip),
                )
            })
            .collect();
        assert_eq!(
            ips,
            [
                ("203.0.113.9".into(), false, Some("example.co.uk"), false),
                ("192.0.2.7".into(), false, None, true),
                ("10.0.0.5".into(), true, Some("example.com"), false),
            ]
        );
        let urls: Vec<_> = e
            .urls
            .iter()
            .map(|u| (u.url.as_str(), u.userinfo))
            .collect();
        assert_eq!(
            urls,
            [
                ("http://www.bank.example@198.51.100.7/login", true),
                ("http://example.com/a@b", false)
            ]
        );
    }

    fn extract_str(raw: &str, envelope: &Envelope) -> Entities {
        let input = prepare(raw.as_bytes(), &Limits::default());
        extract(&parse(&input, &Limits::default()), envelope)
    }

    /// The envelope's recipients when it has any; else To and Cc in order, never From or
    /// Reply-To.
    #[test]
    fn recipients_are_the_envelopes_else_to_and_cc() {
        let raw = "From: f@example.org\nTo: a@example.com, b@example.com\nCc: c@example.net\n\
                   Reply-To: r@example.org\nSubject: s\n\nx\n";
        let addresses =
            |e: &Entities| -> Vec<String> { e.recipients().map(|r| r.address.clone()).collect() };
        let headers_only = extract_str(raw, &Envelope::default());
        assert_eq!(
            addresses(&headers_only),
            ["a@example.com", "b@example.com", "c@example.net"]
        );
        let envelope = Envelope {
            rcpt_to: vec!["z@example.com".into(), "y@example.com".into()],
            ..Envelope::default()
        };
        assert_eq!(
            addresses(&extract_str(raw, &envelope)),
            ["z@example.com", "y@example.com"]
        );
        let nobody = extract_str(
            "From: f@example.org\nSubject: s\n\nx\n",
            &Envelope::default(),
        );
        assert_eq!(nobody.recipients().count(), 0);
    }

    /// Each hop's registrable domain once, in the order of the hops; hosts without one skipped.
    #[test]
    fn hop_domains_are_distinct_in_order() {
        let raw = "Received: from a.mail.example.com (a.mail.example.com [192.0.2.1]) by x; 22 Aug 2002 18:26:25 +0000\n\
                   Received: from b.other.example.net (b.other.example.net [192.0.2.2]) by x; 22 Aug 2002 18:26:24 +0000\n\
                   Received: from c.example.com (c.example.com [192.0.2.3]) by x; 22 Aug 2002 18:26:23 +0000\n\
                   Received: from [192.0.2.4] by x; 22 Aug 2002 18:26:22 +0000\n\
                   Subject: s\n\nx\n";
        let envelope = Envelope {
            client_ip: Some("198.51.100.1".parse().unwrap()),
            helo: Some("Gate.Example.Org".into()),
            ..Envelope::default()
        };
        let e = extract_str(raw, &envelope);
        assert_eq!(
            e.hop_domains(),
            ["example.org", "example.com", "example.net"]
        );
        assert!(extract_str("Subject: s\n\nx\n", &Envelope::default())
            .hop_domains()
            .is_empty());
    }

    /// The first Received hop with a public address, past private ones; the client address
    /// (no hop) does not count; none when every hop is private.
    #[test]
    fn first_public_hop_skips_private_hops_and_the_client() {
        let raw = "Received: from in.example.com (in.example.com [10.0.0.1]) by x; 22 Aug 2002 18:26:25 +0000\n\
                   Received: from mid.example.com (mid.example.com [192.168.1.1]) by x; 22 Aug 2002 18:26:24 +0000\n\
                   Received: from out.example.net (out.example.net [192.0.2.9]) by x; 22 Aug 2002 18:26:23 +0000\n\
                   Subject: s\n\nx\n";
        let client = Envelope {
            client_ip: Some("198.51.100.1".parse().unwrap()),
            ..Envelope::default()
        };
        assert_eq!(extract_str(raw, &client).first_public_hop(), Some(2));
        let private_only = "Received: from in.example.com (in.example.com [10.0.0.1]) by x; 22 Aug 2002 18:26:25 +0000\n\
                            Subject: s\n\nx\n";
        assert_eq!(extract_str(private_only, &client).first_public_hop(), None);
    }

    /// More Received headers than `MAX_RECEIVED_HOPS`: every one has its hop record (rules read
    /// the time of the last), the addresses stop at the limit.
    #[test]
    fn hops_beyond_the_address_limit() {
        let mut raw = String::new();
        for i in 0..MAX_RECEIVED_HOPS + 5 {
            raw.push_str(&format!(
                "Received: from h{i}.example ([192.0.2.1]) by x; 22 Aug 2002 18:26:{:02} +0000\n",
                i % 60
            ));
        }
        raw.push_str("Subject: loop\n\nx\n");
        let input = prepare(raw.as_bytes(), &Limits::default());
        let e = extract(&parse(&input, &Limits::default()), &Envelope::default());
        assert_eq!(e.hops.len(), MAX_RECEIVED_HOPS + 5);
        assert_eq!(e.ips.len(), MAX_RECEIVED_HOPS);
        assert_eq!(e.hops.last().unwrap().time, Some(1_030_040_760 + 104 % 60));
    }

    #[test]
    fn ip_text_matches_display() {
        let mut ips: Vec<std::net::IpAddr> = [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.9.100",
            "192.168.1.1",
            "1.20.199.250",
            "::1",
            "2001:db8::7",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        ips.extend(
            (0..=255u8).map(|b| std::net::IpAddr::from([b, b.wrapping_mul(7), 255 - b, b / 3])),
        );
        for ip in ips {
            assert_eq!(IpText::new(ip).as_str(), ip.to_string());
        }
    }

    #[test]
    fn attachment_flags_catch_double_extensions() {
        let (ext, f) = attachment_flags("photo.jpg.exe");
        assert_eq!(ext.as_deref(), Some("exe"));
        assert!(f.executable && f.double_extension);
        let (_, f) = attachment_flags("setup.exe");
        assert!(f.executable && !f.double_extension);
        let (_, f) = attachment_flags("archive.tar.gz");
        assert!(!f.executable && !f.double_extension);
        assert_eq!(attachment_flags("README").0, None);
    }

    #[test]
    fn envelope_and_headers_give_addresses_and_ips() {
        let raw = "Received: from mx (mx [203.0.113.5]) by us\nFrom: \"Bob\" <Bob@Example.COM>\n\
                   Reply-To: other@example.net\nTo: a@example.org\nSubject: s\n\nwrite to x@example.org\n";
        let input = prepare(raw.as_bytes(), &Limits::default());
        let m = parse(&input, &Limits::default());
        let env = Envelope {
            client_ip: Some("::ffff:192.0.2.1".parse().unwrap()),
            mail_from: Some("bounce@example.com".into()),
            rcpt_to: vec!["A@Example.org".into()],
            ..Envelope::default()
        };
        let e = extract(&m, &env);
        let from = e.from().unwrap();
        assert_eq!(from.address, "bob@example.com");
        assert_eq!(from.name.as_deref(), Some("Bob"));
        assert_eq!(e.emails_with(EmailRole::ReplyTo).count(), 1);
        assert_eq!(
            e.emails_with(EmailRole::Body).next().unwrap().address,
            "x@example.org"
        );
        assert_eq!(
            e.emails_with(EmailRole::EnvelopeRcpt)
                .next()
                .unwrap()
                .address,
            "a@example.org"
        );
        assert_eq!(e.ips[0].ip.to_string(), "192.0.2.1");
        assert_eq!(e.ips[0].source, IpSource::Client);
        assert_eq!(e.ips[1].ip.to_string(), "203.0.113.5");
        assert_eq!(e.ips[1].hop, Some(0));
    }

    #[test]
    fn received_chain_is_bounded() {
        let mut raw = String::new();
        for i in 0..300 {
            raw.push_str(&format!(
                "Received: from h{i} ([192.0.2.{}]) by x\n",
                i % 250
            ));
        }
        raw.push_str("Subject: s\n\nbody\n");
        let input = prepare(raw.as_bytes(), &Limits::default());
        let m = parse(&input, &Limits::default());
        let e = extract(&m, &Envelope::default());
        assert_eq!(e.ips.len(), MAX_RECEIVED_HOPS);
        assert_eq!(e.ips[99].hop, Some(99));
    }

    #[test]
    fn urls_stop_at_the_cap_and_later_emails_still_count() {
        // Each URL twice (the repeats are no new URLs), then more past the cap, then addresses.
        let mut raw = String::from("Subject: s\n\n");
        for i in 0..MAX_URLS {
            raw.push_str(&format!(
                "http://h{i}.example.com/ http://h{i}.example.com/\n"
            ));
        }
        raw.push_str("http://h0.example.com/ and then http://past-the-cap.example.net/x\n");
        for i in 0..500 {
            raw.push_str(&format!("http://later{i}.example.org/\n"));
        }
        raw.push_str("write to someone@example.org or other@example.net\n");
        let input = prepare(raw.as_bytes(), &Limits::default());
        let m = parse(&input, &Limits::default());
        let e = extract(&m, &Envelope::default());
        assert_eq!(e.urls.len(), MAX_URLS);
        assert_eq!(
            e.urls[MAX_URLS - 1].host,
            format!("h{}.example.com", MAX_URLS - 1)
        );
        assert!(e.anomalies.contains(&Anomaly::TooManyLinks));
        let body: Vec<&str> = e
            .emails_with(EmailRole::Body)
            .map(|e| e.address.as_str())
            .collect();
        assert_eq!(body, ["someone@example.org", "other@example.net"]);

        // Exactly at the cap: no anomaly.
        let mut raw = String::from("Subject: s\n\n");
        for i in 0..MAX_URLS {
            raw.push_str(&format!("http://h{i}.example.com/\n"));
        }
        raw.push_str("http://h7.example.com/\n");
        let input = prepare(raw.as_bytes(), &Limits::default());
        let e = extract(&parse(&input, &Limits::default()), &Envelope::default());
        assert_eq!(e.urls.len(), MAX_URLS);
        assert!(!e.anomalies.contains(&Anomaly::TooManyLinks));
    }

    #[test]
    fn anchors_compare_text_and_target() {
        let raw = "Subject: s\nContent-Type: text/html\n\n<a href=\"https://bit.ly/3xyz\">www.sberbank.ru</a>\
                   <a href=\"https://online.sberbank.ru/x\">online.sberbank.ru</a>";
        let input = prepare(raw.as_bytes(), &Limits::default());
        let m = parse(&input, &Limits::default());
        let e = extract(&m, &Envelope::default());
        assert_eq!(e.anchors.len(), 2);
        assert_eq!(e.anchors[0].text_domain, "sberbank.ru");
        assert_eq!(e.anchors[0].target_domain, "bit.ly");
        assert!(e.anchors[0].mismatch);
        assert!(!e.anchors[1].mismatch);
        assert!(e.domains.contains(&"bit.ly".to_string()));
    }

    #[test]
    fn repeated_spellings_give_the_same_urls_as_a_first_parse() {
        // The same links in the plain part, as HTML targets (twice) and in the HTML text: each
        // spelling is parsed once, and every record built from the cache must equal a parse.
        let raw = "Subject: s\nContent-Type: multipart/alternative; boundary=b\n\n--b\n\
                   Content-Type: text/plain\n\nsee http://WWW.Example.co.uk./a#f and http://198.51.100.7/x \
                   and //nohost.invalid and mailto:x@example.org\n--b\nContent-Type: text/html\n\n\
                   <a href=\"http://WWW.Example.co.uk./a#f\">here</a> <a href=\"http://WWW.Example.co.uk./a#f\">again</a> \
                   <a href=\"http://198.51.100.7/x\">http://198.51.100.7/x</a> <a href=\"//cdn.example.net/i\">i</a> \
                   <a href=\"//nohost.invalid\">n</a> http://WWW.Example.co.uk./a#f\n--b--\n";
        let input = prepare(raw.as_bytes(), &Limits::default());
        let m = parse(&input, &Limits::default());
        let e = extract(&m, &Envelope::default());
        let sources: FxHashSet<UrlSource> = e.urls.iter().map(|u| u.source).collect();
        assert!(sources.len() >= 3, "{:?}", e.urls);
        let mut hosts = FxHashSet::default();
        for u in &e.urls {
            let direct = canonicalize(&u.url).expect("a canonical URL parses again");
            assert_eq!(
                (&u.url, &u.host, &u.domain, u.host_is_ip),
                (
                    &direct.url,
                    &direct.host,
                    &direct.domain,
                    direct.ip.is_some()
                ),
                "{u:?}"
            );
            hosts.insert(u.host.as_str());
        }
        assert_eq!(
            hosts,
            [
                "www.example.co.uk",
                "198.51.100.7",
                "cdn.example.net",
                "nohost.invalid"
            ]
            .into_iter()
            .collect()
        );
        // The same spelling as text and as a link target is cached apart: scheme-less text
        // needs a known public suffix, a link target does not.
        let nohost: Vec<UrlSource> = (e.urls.iter())
            .filter(|u| u.host == "nohost.invalid")
            .map(|u| u.source)
            .collect();
        assert_eq!(nohost, [UrlSource::HtmlHref]);
        let ip_records = e.urls.iter().filter(|u| u.host_is_ip).count();
        assert!(ip_records >= 2, "{:?}", e.urls);
        // One record per (URL, source), however often a spelling repeats.
        let mut seen = FxHashSet::default();
        assert!(e
            .urls
            .iter()
            .all(|u| seen.insert((u.url.clone(), u.source))));
    }
}
