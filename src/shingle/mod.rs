//! Shingles: typed, stable 64-bit hashes of the normalized pieces of a message — the keys under
//! which reputation is counted.
//!
//! Owns: the table of types (`kind`), the hash, canonical forms per type, fuzzy body sketches
//! and paired shingles. Never touches: sockets, Lua, the store.
//!
//! The hash is XXH3-64 with a fixed seed over the canonical UTF-8 bytes of the piece: stable
//! across runs, platforms and crate versions (pinned by test vectors below). The same canonical
//! form is computed for a message (`compute`) and for a raw value typed by an operator
//! (`of_value`, behind `/reputation?type=T&value=V`), so both find the same key.
//!
//! Paired shingles count distinct recipients per sender (Yandex's unique counts):
//! `pair_sender_rcpt = hash(sender ‖ 0x00 ‖ recipient)` and `unique_sender = hash(sender)`. The
//! store increments the unique key only when the pair key is still zero in the current period.
//! The sender is the envelope MAIL FROM, else the From address; recipients are the envelope RCPT
//! TOs, else To and Cc.

pub mod fuzzy;
pub mod kind;

use std::net::IpAddr;

use rustc_hash::FxHashSet;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::entities::{
    canonical_email, canonical_host, canonicalize, registrable_domain, EmailRole, Entities,
    IpSource, IpText,
};
use crate::message::{normalize, Envelope, ParsedMessage};

pub use kind::Kind;

/// The fixed seed of every shingle hash. Changing it invalidates all stored statistics.
pub const SEED: u64 = 0x5348_5249_4B45_0001; // "SHRIKE" v1

/// At most this many shingles of one type per message (URLs, recipients, ...).
pub const MAX_PER_KIND: usize = 64;

/// One typed hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shingle {
    pub kind: Kind,
    pub hash: u64,
}

impl Serialize for Shingle {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Shingle", 3)?;
        st.serialize_field("type", self.kind.name())?;
        st.serialize_field("id", &self.kind.id())?;
        st.serialize_field("hash", &format!("{:016x}", self.hash))?;
        st.end()
    }
}

/// XXH3-64 with the shingle seed.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, SEED)
}

/// The hash of an ordered pair of canonical strings.
pub fn hash_pair(a: &str, b: &str) -> u64 {
    let mut buf = Vec::with_capacity(a.len() + b.len() + 1);
    buf.extend_from_slice(a.as_bytes());
    buf.push(0);
    buf.extend_from_slice(b.as_bytes());
    hash_bytes(&buf)
}

/// MurmurHash3's 64-bit finalizer: a fast bijective mixer.
pub(crate) fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The normalized subject without reply and forward prefixes ("re:", "fwd:", "aw:", ...).
pub fn subject_key(normalized_subject: &str) -> &str {
    let mut s = normalized_subject.trim();
    loop {
        let lower = s;
        let stripped = [
            "re:",
            "fwd:",
            "fw:",
            "aw:",
            "wg:",
            "sv:",
            "vs:",
            "tr:",
            "rv:",
            "ответ:",
            "отв:",
        ]
        .iter()
        .find_map(|p| lower.strip_prefix(p));
        match stripped {
            Some(rest) => s = rest.trim_start(),
            None => return s,
        }
    }
}

/// The network of an IP used for `sender_net`: /24 for IPv4, /64 for IPv6.
pub fn ip_network(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            let mut net = IpText::new(IpAddr::from([a, b, c, 0])).as_str().to_owned();
            net.push_str("/24");
            net
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let net = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            format!("{net}/64")
        }
    }
}

/// Collects shingles, each (kind, hash) once, at most `MAX_PER_KIND` per kind.
struct Collector {
    out: Vec<Shingle>,
    seen: FxHashSet<(Kind, u64)>,
    /// Shingles so far per kind, indexed by kind number.
    per_kind: [u8; 128],
}

impl Default for Collector {
    fn default() -> Self {
        Collector {
            out: Vec::with_capacity(128),
            seen: FxHashSet::with_capacity_and_hasher(256, Default::default()),
            per_kind: [0; 128],
        }
    }
}

impl Collector {
    fn push_hash(&mut self, kind: Kind, hash: u64) {
        let count = &mut self.per_kind[usize::from(kind.id()) % 128];
        if usize::from(*count) >= MAX_PER_KIND || !self.seen.insert((kind, hash)) {
            return;
        }
        *count += 1;
        self.out.push(Shingle { kind, hash });
    }

    fn push(&mut self, kind: Kind, canonical: &str) {
        if !canonical.is_empty() {
            self.push_hash(kind, hash_bytes(canonical.as_bytes()));
        }
    }
}

/// All shingles of one message.
pub fn compute(
    message: &ParsedMessage<'_>,
    entities: &Entities,
    envelope: &Envelope,
) -> Vec<Shingle> {
    let mut c = Collector::default();
    c.push(Kind::Subject, subject_key(&message.subject.normalized));
    if let Some(from) = entities.from() {
        c.push(Kind::From, &from.address);
        c.push(Kind::FromDomain, &from.domain);
        if let Some(name) = &from.name {
            c.push(Kind::FromName, &normalize(name));
        }
    }
    for e in entities.emails_with(EmailRole::ReplyTo) {
        c.push(Kind::ReplyTo, &e.address);
    }
    let envelope_from = entities
        .emails_with(EmailRole::EnvelopeFrom)
        .chain(entities.emails_with(EmailRole::ReturnPath))
        .next();
    if let Some(e) = envelope_from {
        c.push(Kind::EnvelopeFrom, &e.address);
    }
    if let Some(sender) = entities.ips.first() {
        c.push(Kind::SenderIp, IpText::new(sender.ip).as_str());
        c.push(Kind::SenderNet, &ip_network(sender.ip));
    }
    if let Some(helo) = &envelope.helo {
        c.push(Kind::Helo, &helo_key(helo));
    }
    for ip in entities
        .ips
        .iter()
        .filter(|i| i.source == IpSource::Received)
    {
        c.push(Kind::ReceivedIp, IpText::new(ip.ip).as_str());
    }
    if let Some(d) = &entities.message_id_domain {
        c.push(Kind::MessageIdDomain, d);
    }
    if let Some(m) = &entities.mailer {
        c.push(Kind::Mailer, &normalize(m));
    }
    for u in &entities.urls {
        c.push(Kind::Url, &u.url);
        c.push(Kind::UrlHost, &u.host);
        if let Some(d) = &u.domain {
            c.push(Kind::UrlDomain, d);
        }
    }
    for e in entities
        .emails
        .iter()
        .filter(|e| matches!(e.role, EmailRole::Body | EmailRole::Mailto))
    {
        c.push(Kind::BodyEmail, &e.address);
    }
    for a in &entities.attachments {
        c.push(Kind::AttachmentName, &a.name_normalized);
        if let Some(ext) = &a.extension {
            c.push(Kind::AttachmentExt, ext);
        }
        c.push(Kind::AttachmentHash, &a.hash);
    }
    c.push(Kind::BodyExact, &message.body.normalized);
    for h in fuzzy::sketch(&message.body.normalized) {
        c.push_hash(Kind::BodyFuzzy, h);
    }
    let sender = entities
        .emails_with(EmailRole::EnvelopeFrom)
        .next()
        .or_else(|| entities.from())
        .map(|e| e.address.as_str());
    let mut recipients: Vec<&str> = entities
        .emails_with(EmailRole::EnvelopeRcpt)
        .map(|e| e.address.as_str())
        .collect();
    if recipients.is_empty() {
        recipients = entities
            .emails
            .iter()
            .filter(|e| matches!(e.role, EmailRole::To | EmailRole::Cc))
            .map(|e| e.address.as_str())
            .collect();
    }
    for r in &recipients {
        c.push(Kind::Recipient, r);
    }
    if let Some(sender) = sender {
        for r in &recipients {
            c.push_hash(Kind::PairSenderRcpt, hash_pair(sender, r));
        }
        c.push(Kind::UniqueSender, sender);
    }
    c.out
}

fn helo_key(helo: &str) -> String {
    canonical_host(helo).unwrap_or_else(|| normalize(helo))
}

/// The hashes of type `kind` that the pipeline computes for the raw value `value`: what an
/// operator types into `/reputation?type=T&value=V`. For `pair_sender_rcpt` the value is
/// "sender recipient" (whitespace or comma between); for `body_fuzzy`, a body text (all its
/// sketch values). Empty when the value is not valid for the type.
pub fn of_value(kind: Kind, value: &str) -> Vec<u64> {
    let canonical: Option<String> = match kind {
        Kind::Url => canonicalize(value).map(|u| u.url),
        Kind::UrlHost => canonical_host(value),
        Kind::UrlDomain => canonical_host(value).map(|h| registrable_domain(&h).unwrap_or(h)),
        Kind::Subject => Some(subject_key(&normalize(value)).to_string()),
        Kind::From
        | Kind::ReplyTo
        | Kind::EnvelopeFrom
        | Kind::BodyEmail
        | Kind::Recipient
        | Kind::UniqueSender => canonical_email(value).map(|(a, _)| a),
        Kind::FromDomain | Kind::MessageIdDomain | Kind::DkimDomain => canonical_host(value),
        Kind::FromName | Kind::Mailer | Kind::AttachmentName | Kind::BodyExact => {
            Some(normalize(value))
        }
        Kind::SenderIp | Kind::ReceivedIp => value
            .trim()
            .parse::<IpAddr>()
            .ok()
            .map(|ip| crate::entities::canonical_ip(ip).to_string()),
        Kind::SenderNet => {
            let ip = value.trim().split('/').next().unwrap_or_default();
            ip.parse::<IpAddr>()
                .ok()
                .map(|ip| ip_network(crate::entities::canonical_ip(ip)))
        }
        Kind::Helo => Some(helo_key(value)),
        Kind::AttachmentExt => Some(value.trim().trim_start_matches('.').to_lowercase()),
        Kind::AttachmentHash => Some(value.trim().to_ascii_lowercase()),
        Kind::BodyFuzzy => return fuzzy::sketch(&normalize(value)),
        Kind::PairSenderRcpt => {
            let mut it = value
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .filter_map(canonical_email);
            return match (it.next(), it.next()) {
                (Some((s, _)), Some((r, _))) => vec![hash_pair(&s, &r)],
                _ => Vec::new(),
            };
        }
    };
    canonical
        .filter(|c| !c.is_empty())
        .map(|c| vec![hash_bytes(c.as_bytes())])
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::extract;
    use crate::message::{parse, prepare, Limits};

    /// The hash must never change: stored statistics and outside tools depend on it.
    #[test]
    fn hash_test_vectors_are_pinned() {
        assert_eq!(format!("{:016x}", hash_bytes(b"")), "09939b6e1d3b4f35");
        assert_eq!(format!("{:016x}", hash_bytes(b"hello")), "35c0307868801f17");
        assert_eq!(
            format!("{:016x}", hash_bytes("ваш paypal".as_bytes())),
            "27c266ebae072e79"
        );
        assert_eq!(
            format!("{:016x}", hash_pair("a@example.com", "b@example.org")),
            "d15175c9ab583f48"
        );
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
    }

    #[test]
    fn subject_prefixes_are_stripped() {
        assert_eq!(subject_key("re: fwd: re:  hello"), "hello");
        assert_eq!(subject_key("ответ: привет"), "привет");
        assert_eq!(subject_key("regarding"), "regarding");
    }

    #[test]
    fn value_lookups_match_the_pipeline() {
        let raw = "From: \"Bob Smith\" <Bob@Example.com>\nTo: a@example.org, c@example.org\n\
                   Reply-To: r@example.net\nSubject: Re: Cheap  WATCHES\nX-Mailer: Mailer 1.0\n\
                   Message-ID: <x@mid.example.com>\n\
                   Received: from h (h [192.0.2.77]) by us\n\n\
                   Visit http://Shop.Example.co.uk/deal?id=1 now\n";
        let input = prepare(raw.as_bytes(), &Limits::default());
        let m = parse(&input, &Limits::default());
        let env = Envelope {
            helo: Some("Mail.Example.com".into()),
            ..Envelope::default()
        };
        let e = extract(&m, &env);
        let shingles = compute(&m, &e, &env);
        let has = |kind: Kind, value: &str| {
            let hashes = of_value(kind, value);
            assert!(!hashes.is_empty(), "{kind:?} {value}");
            hashes
                .iter()
                .all(|h| shingles.contains(&Shingle { kind, hash: *h }))
        };
        assert!(has(Kind::Subject, "cheap watches"));
        assert!(has(Kind::Subject, "RE: Cheap Watches"));
        assert!(has(Kind::From, "bob@example.com"));
        assert!(has(Kind::FromDomain, "EXAMPLE.com"));
        assert!(has(Kind::FromName, "Bob Smith"));
        assert!(has(Kind::ReplyTo, "r@example.net"));
        assert!(has(Kind::SenderIp, "192.0.2.77"));
        assert!(has(Kind::SenderNet, "192.0.2.0/24"));
        assert!(has(Kind::ReceivedIp, "192.0.2.77"));
        assert!(has(Kind::Helo, "mail.example.com"));
        assert!(has(Kind::MessageIdDomain, "mid.example.com"));
        assert!(has(Kind::Mailer, "Mailer 1.0"));
        assert!(has(Kind::Url, "http://shop.example.co.uk/deal?id=1"));
        assert!(has(Kind::UrlHost, "SHOP.example.co.uk"));
        assert!(has(Kind::UrlDomain, "example.co.uk"));
        assert!(has(Kind::UrlDomain, "shop.example.co.uk"));
        assert!(has(Kind::Recipient, "c@example.org"));
        assert!(has(Kind::PairSenderRcpt, "bob@example.com a@example.org"));
        assert!(has(Kind::UniqueSender, "bob@example.com"));
        assert!(has(
            Kind::BodyExact,
            "Visit http://Shop.Example.co.uk/deal?id=1 now"
        ));
        assert!(!has(Kind::From, "someone@example.com"));
    }
}
