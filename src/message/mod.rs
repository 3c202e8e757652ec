//! One message, parsed and decoded: MIME structure (mail-parser), decoded text parts, HTML turned
//! into visible text, attachments, normalized text, and the anomalies met on the way.
//!
//! Owns: MIME parsing, transfer and charset decoding, HTML to text, normalization, limits.
//! Never touches: the store, Lua, sockets or files. Parsing never fails: malformed input becomes
//! data (`anomalies`) that rules can score, never a panic or an error.

pub mod anomaly;
pub mod date;
pub mod html;
pub mod normalize;
pub mod parts;

use std::borrow::Cow;
use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::LazyLock;

use mail_parser::{Encoding, HeaderName, MessageParser, MessagePart, MimeHeaders, PartType};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use anomaly::{Anomalies, Anomaly};
pub use date::{DateFacts, ZoneProblem};
pub use html::{HtmlLink, LinkAttr};
pub use normalize::{normalize, Text};
pub use parts::{html_source, part_encoding, part_type};

/// Limits on the work done for one message. Beyond them the message is truncated and an anomaly
/// recorded; nothing fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Bytes of the raw message that are parsed; the rest is ignored (`message_truncated`).
    pub max_message_bytes: usize,
    /// MIME parts visited, nested messages included (`too_many_parts`).
    pub max_parts: usize,
    /// Nesting depth of multiparts and attached messages (`too_deep`).
    pub max_depth: usize,
    /// Bytes of decoded body text kept for normalization and matching (`text_truncated`).
    pub max_text_bytes: usize,
    /// Link targets collected from HTML (`too_many_links`).
    pub max_html_links: usize,
    /// Bytes of one field of the message's header block (name, value and folds) that are read;
    /// the rest of the field is dropped before parsing (`header_truncated`), as Postfix's
    /// `header_size_limit` (the same default) drops it. Rules read header values whole, so a
    /// field as long as the message (a 20 MB Subject) would otherwise cost each of them its
    /// budget.
    pub max_header_bytes: usize,
    /// Header fields read in one header block (the message's, a part's, an attached
    /// message's): past it only the last field of each name mail-parser knows (Subject,
    /// From, Content-Type, …) is kept (`too_many_headers`).
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 50 * 1024 * 1024,
            max_parts: 512,
            max_depth: 16,
            max_text_bytes: 2 * 1024 * 1024,
            max_html_links: 2_000,
            max_header_bytes: 102_400,
            max_headers: 1_000,
        }
    }
}

/// What the SMTP session said about the message, when the caller knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Envelope {
    pub client_ip: Option<IpAddr>,
    pub helo: Option<String>,
    pub mail_from: Option<String>,
    pub rcpt_to: Vec<String>,
    /// The client's reverse DNS name as the MTA resolved it (`Hostname`, milter connect).
    pub hostname: Option<String>,
    /// The authenticated sender (`User`, milter `{auth_authen}`).
    pub user: Option<String>,
    /// The MTA's queue id (`Queue-Id`, milter `i`): on every log line of the scan.
    pub queue_id: Option<String>,
    /// The final recipient of a local delivery (`Deliver-To`).
    pub deliver_to: Option<String>,
    /// The `[[settings]]` entry the client asked for by name (rspamd's `Settings-ID`), over
    /// what the recipients would match.
    pub settings_id: Option<String>,
}

/// An attachment (or any non-body part) as decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentPart {
    /// File name as declared (RFC 2047/2231 decoded), if any.
    pub name: Option<String>,
    /// Declared content type, lower-case (`application/octet-stream` when none).
    pub content_type: String,
    /// Decoded size in bytes (text content with LF line ends).
    pub size: usize,
    /// SHA-256 of the decoded content (text content with LF line ends), hex.
    pub sha256: String,
    /// MIME nesting depth of the part.
    pub depth: usize,
}

/// The parsed message. Borrows the raw bytes.
#[derive(Debug)]
pub struct ParsedMessage<'a> {
    /// The bytes that were parsed (see `Prepared`).
    pub raw: &'a [u8],
    /// The MIME tree; `None` when no header could be parsed at all.
    pub mime: Option<mail_parser::Message<'a>>,
    /// The decoded Subject.
    pub subject: Text,
    /// The body as a reader sees it: the inline text/plain parts, and the visible text of inline
    /// HTML parts that have no plain alternative; attached messages' bodies included.
    pub body: Text,
    /// Visible text of the inline HTML parts (display form; `normalize` it where needed).
    pub html_text: String,
    /// Link targets from the HTML parts, with anchor text.
    pub html_links: Vec<HtmlLink>,
    /// Source of the text/html parts that `mime` holds as plain text (cut off by an unterminated
    /// boundary, or with a broken transfer encoding), decoded, at most `max_text_bytes` in all;
    /// the other HTML parts' source is in `mime`.
    pub cut_off_html: Vec<String>,
    /// Non-body parts, and inline text parts that name a file.
    pub attachments: Vec<AttachmentPart>,
    /// Words mixing scripts (as displayed, case-folded), from subject and text.
    pub mixed_script_words: Vec<String>,
    /// Number of MIME parts visited.
    pub part_count: usize,
    /// The Date header's time and zone problem (`date::DateFacts`).
    pub date: DateFacts,
    pub anomalies: Anomalies,
    /// `header_key` of each top-level header's name, in the order of `mime`'s headers: a
    /// lookup by name compares these instead of every header's name.
    pub header_keys: Vec<u64>,
}

/// A header name's key for `ParsedMessage::header_keys`: FNV-1a over its bytes in ASCII lower
/// case (equal for names equal but for ASCII case).
pub fn header_key(name: &[u8]) -> u64 {
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b.to_ascii_lowercase())).wrapping_mul(0x0100_0000_01b3)
    })
}

/// mail-parser, told to parse what the pipeline reads and keep the rest raw. Received headers
/// stay raw: its Received parser costs more than all other MIME parsing together, and
/// `entities::received` takes what we need from them.
static PARSER: LazyLock<MessageParser> = LazyLock::new(|| {
    MessageParser::new()
        .with_mime_headers()
        .with_date_headers()
        .with_address_headers()
        .with_message_ids()
        .header_text(HeaderName::Subject)
        .header_text(HeaderName::Comments)
        .header_id(HeaderName::ReturnPath)
        .header_raw(HeaderName::Received)
        .default_header_raw()
});

/// Raw input made ready for parsing: cut at `max_message_bytes`, without an mbox separator
/// line, with CRLF line ends, and each field of the header block cut at `max_header_bytes`.
/// mail-parser is at home in the SMTP wire form; with bare LF its date parser swallows the line
/// end after a short obsolete zone ("UT") and reads the body as headers. Borrows the input when
/// it needs no change (CRLF mail, as MTAs deliver it).
#[derive(Debug)]
pub struct Prepared<'a> {
    bytes: Cow<'a, [u8]>,
    anomalies: Anomalies,
}

impl Prepared<'_> {
    /// An owned copy, free of the input's lifetime.
    pub fn into_owned(self) -> Prepared<'static> {
        Prepared {
            bytes: Cow::Owned(self.bytes.into_owned()),
            anomalies: self.anomalies,
        }
    }

    /// The bytes that will be parsed.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Prepares raw input for `parse`.
pub fn prepare<'a>(input: &'a [u8], limits: &Limits) -> Prepared<'a> {
    let mut anomalies = Anomalies::default();
    let raw = if input.len() > limits.max_message_bytes {
        anomalies.add(Anomaly::MessageTruncated);
        &input[..limits.max_message_bytes]
    } else {
        input
    };
    if memchr::memchr(0, raw).is_some() {
        anomalies.add(Anomaly::NulBytes);
    }
    let raw = without_mbox_separator(raw);
    let bare_lf = memchr::memchr_iter(b'\n', raw).any(|i| i == 0 || raw[i - 1] != b'\r');
    let bytes = if bare_lf {
        let mut out = Vec::with_capacity(raw.len() + raw.len() / 16);
        let mut last = 0;
        for i in memchr::memchr_iter(b'\n', raw) {
            if i == 0 || raw[i - 1] != b'\r' {
                out.extend_from_slice(&raw[last..i]);
                out.extend_from_slice(b"\r\n");
                last = i + 1;
            }
        }
        out.extend_from_slice(&raw[last..]);
        Cow::Owned(out)
    } else {
        Cow::Borrowed(raw)
    };
    let cuts = long_header_fields(&bytes, limits.max_header_bytes);
    let bytes = if cuts.is_empty() {
        bytes
    } else {
        anomalies.add(Anomaly::HeaderTruncated);
        let mut out = Vec::with_capacity(bytes.len());
        let mut last = 0;
        for cut in cuts {
            out.extend_from_slice(&bytes[last..cut.start]);
            last = cut.end;
        }
        out.extend_from_slice(&bytes[last..]);
        Cow::Owned(out)
    };
    Prepared { bytes, anomalies }
}

/// The excess of each field of the header block longer than `max` bytes (CRLF input): from
/// the cut to the end of the field's last line, its final CRLF kept. The cut falls on a
/// character boundary and never just after a line end, so the kept part cannot end the header
/// block early (a cut at the field's start drops it with its line end). The block ends at the
/// first line that is neither a field (a name, a colon) nor the fold of one: a message without
/// headers keeps all its text.
fn long_header_fields(bytes: &[u8], max: usize) -> Vec<std::ops::Range<usize>> {
    let mut cuts = Vec::new();
    // (start of the current field, end of its last line before the line end, start of the
    // line after it)
    let mut field: Option<(usize, usize, usize)> = None;
    let close = |field: Option<(usize, usize, usize)>, cuts: &mut Vec<_>| {
        if let Some((start, end, next)) = field {
            if end - start > max {
                let mut cut = start + max;
                while cut > start && bytes[cut] & 0xc0 == 0x80 {
                    cut -= 1;
                }
                while cut > start && matches!(bytes[cut - 1], b'\r' | b'\n') {
                    cut -= 1;
                }
                cuts.push(if cut == start { start..next } else { cut..end });
            }
        }
    };
    let mut line = 0;
    while line < bytes.len() {
        let next = memchr::memchr(b'\n', &bytes[line..]).map_or(bytes.len(), |i| line + i + 1);
        let mut end = next;
        while end > line && matches!(bytes[end - 1], b'\r' | b'\n') {
            end -= 1;
        }
        if matches!(bytes[line], b' ' | b'\t') && field.is_some() {
            field = field.map(|(start, _, _)| (start, end, next));
        } else if is_field_start(&bytes[line..end]) {
            close(field.take(), &mut cuts);
            field = Some((line, end, next));
        } else {
            break;
        }
        line = next;
    }
    close(field, &mut cuts);
    cuts
}

/// A header field's first line: a field name (printable ASCII but the colon), maybe spaces,
/// then a colon.
fn is_field_start(line: &[u8]) -> bool {
    let name = line
        .iter()
        .take_while(|&&b| (33..=126).contains(&b) && b != b':')
        .count();
    let colon = name
        + line[name..]
            .iter()
            .take_while(|&&b| matches!(b, b' ' | b'\t'))
            .count();
    name > 0 && line.get(colon) == Some(&b':')
}

/// Parses prepared input under `limits`. Never panics, never fails.
pub fn parse<'p>(input: &'p Prepared<'_>, limits: &Limits) -> ParsedMessage<'p> {
    parse_with(input, limits, true)
}

/// `parse` without what only the rules and the classifier read: the subject's and body's
/// normalized forms (left empty, so no mixed-script words either) and the attachments' SHA-256
/// (left empty). The MIME walk, the body text, the HTML text and links are `parse`'s, so the
/// URLs `entities` finds in it are the scan's: the DNS lists' URL targets, found on the network
/// side for every message, need no more (normalization and hashing were a third of the parse
/// there; docs/perf-log.md, "DNS lists' URL targets from entities").
pub fn parse_links<'p>(input: &'p Prepared<'_>, limits: &Limits) -> ParsedMessage<'p> {
    parse_with(input, limits, false)
}

fn parse_with<'p>(input: &'p Prepared<'_>, limits: &Limits, full: bool) -> ParsedMessage<'p> {
    let raw: &'p [u8] = &input.bytes;
    let mut anomalies = input.anomalies.clone();
    let mime = match catch_unwind(AssertUnwindSafe(|| PARSER.parse(raw))) {
        Ok(mime) => mime,
        Err(_) => {
            tracing::warn!(
                bytes = raw.len(),
                "mime parser panicked; message scanned as text"
            );
            anomalies.add(Anomaly::ParserPanic);
            None
        }
    };
    let mut walker = Walker {
        limits,
        anomalies,
        body: String::new(),
        html: String::new(),
        html_links: Vec::new(),
        cut_off_html: Vec::new(),
        cut_off_html_bytes: 0,
        attachments: Vec::new(),
        part_count: 0,
        hash_attachments: full,
    };
    // A parse with no valid header name read junk as a header: treat it as no headers at all.
    let mut mime = mime.filter(has_valid_header);
    if let Some(m) = &mut mime {
        if cap_headers(m, limits.max_headers) {
            walker.anomalies.add(Anomaly::TooManyHeaders);
        }
    }
    let subject = match &mime {
        Some(message) => {
            walker.check_headers(message, raw);
            let subject = message.subject().unwrap_or_default().to_string();
            if subject.contains("=?") && subject.contains("?=") {
                walker.anomalies.add(Anomaly::BadEncodedWord);
            }
            walker.walk_message(message, 0);
            subject
        }
        None => {
            walker.anomalies.add(Anomaly::NoHeaders);
            walker.push_text(&String::from_utf8_lossy(raw), true);
            String::new()
        }
    };
    if walker.body.trim().is_empty()
        && walker.html.trim().is_empty()
        && walker.attachments.is_empty()
        && !walker.anomalies.contains(Anomaly::NoBody)
    {
        walker.anomalies.add(Anomaly::EmptyBody);
    }
    let mut mixed = Vec::new();
    let (subject, body) = if full {
        let subject = Text::new(subject, &mut mixed);
        (subject, Text::new(walker.body, &mut mixed))
    } else {
        let display = |display| Text {
            display,
            normalized: String::new(),
        };
        (display(subject), display(walker.body))
    };
    let mut anomalies = walker.anomalies;
    if !mixed.is_empty() {
        anomalies.add(Anomaly::MixedScript);
    }
    let header_keys = (mime.iter())
        .flat_map(|m| m.headers())
        .map(|h| header_key(h.name.as_str().as_bytes()))
        .collect();
    let date = (mime.as_ref()).map_or_else(DateFacts::default, |m| DateFacts::of(m, raw));
    ParsedMessage {
        raw,
        mime,
        header_keys,
        subject,
        body,
        html_text: walker.html,
        html_links: walker.html_links,
        cut_off_html: walker.cut_off_html,
        attachments: walker.attachments,
        mixed_script_words: mixed,
        part_count: walker.part_count,
        date,
        anomalies,
    }
}

/// A top-level header's value as text (`raw`: the bytes mail-parser read): decoded where
/// mail-parser decoded it, else the raw value unfolded and trimmed. What `msg:header(name)`
/// gives rules.
pub fn header_text<'h>(h: &'h mail_parser::Header<'_>, raw: &'h [u8]) -> Cow<'h, str> {
    match &h.value {
        mail_parser::HeaderValue::Text(t) => Cow::Borrowed(t.trim()),
        mail_parser::HeaderValue::TextList(l) => Cow::Owned(l.join(", ")),
        _ => {
            let value = raw
                .get(h.offset_start as usize..h.offset_end as usize)
                .unwrap_or_default();
            match utf8_lossy(value) {
                Cow::Borrowed(v) => date::unfold(v),
                Cow::Owned(v) => Cow::Owned(date::unfold(&v).into_owned()),
            }
        }
    }
}

/// `String::from_utf8_lossy`, validated by `str::from_utf8` first: the lossy decoder checks byte
/// by byte, the strict one skips ASCII a word at a time. The same result either way.
#[inline]
pub fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The lines of `text` (split at LF by memchr, not byte by byte), each without its LF:
/// what the network checks' raw-byte readers walk.
pub(crate) fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut ends = memchr::memchr_iter(b'\n', text);
    std::iter::from_fn(move || {
        if start > text.len() {
            return None;
        }
        let end = ends.next().unwrap_or(text.len());
        let line = &text[start..end];
        start = end + 1;
        Some(line)
    })
}

/// Drops a leading mbox "From sender date" separator line: files cut from mailboxes carry it,
/// and it is not a header (no colon after the name).
fn without_mbox_separator(raw: &[u8]) -> &[u8] {
    if !raw.starts_with(b"From ") {
        return raw;
    }
    match memchr::memchr(b'\n', raw) {
        Some(end) => &raw[end + 1..],
        None => raw,
    }
}

/// A header field name is printable ASCII without a colon (RFC 5322 §2.2).
fn is_valid_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
}

/// Cuts every header block of the tree to `max` fields, keeping after them the last field of
/// each name mail-parser knows (the one its lookups answer with), so that a message with more
/// headers than any mail needs still shows its Subject, From or Content-Type wherever they
/// were put. Without it every lookup by name (a few dozen a message, in mail-parser's accessors
/// and in the walk) scans every header: 100,000 junk fields cost 20 ms, and 800,000 (a 15 MB
/// header block) half a second. True when a block was cut.
fn cap_headers(message: &mut mail_parser::Message<'_>, max: usize) -> bool {
    let mut cut = false;
    // An explicit stack: attached messages may nest as deep as the sender likes.
    let mut stack = vec![message];
    while let Some(m) = stack.pop() {
        for part in m.parts.iter_mut() {
            if part.headers.len() > max {
                cut = true;
                let past = part.headers.split_off(max);
                let mut seen = [false; 256];
                let mut kept: Vec<_> = (past.into_iter().rev())
                    .filter(|h| {
                        !matches!(h.name, HeaderName::Other(_))
                            && !std::mem::replace(&mut seen[usize::from(h.name.id())], true)
                    })
                    .collect();
                kept.reverse();
                part.headers.extend(kept);
            }
            if let PartType::Message(nested) = &mut part.body {
                stack.push(nested);
            }
        }
    }
    cut
}

fn has_valid_header(message: &mail_parser::Message<'_>) -> bool {
    message.parts.first().is_some_and(|root| {
        root.headers
            .iter()
            .any(|h| is_valid_header_name(h.name.as_str()))
    })
}

struct Walker<'l> {
    limits: &'l Limits,
    anomalies: Anomalies,
    body: String,
    html: String,
    html_links: Vec<HtmlLink>,
    cut_off_html: Vec<String>,
    cut_off_html_bytes: usize,
    attachments: Vec<AttachmentPart>,
    part_count: usize,
    /// Whether attachments get their SHA-256 (`parse`) or an empty one (`parse_links`).
    hash_attachments: bool,
}

impl Walker<'_> {
    /// Header-level anomalies of the top-level message.
    fn check_headers(&mut self, message: &mail_parser::Message<'_>, raw: &[u8]) {
        let header_end = message
            .parts
            .first()
            .map_or(raw.len(), |p| (p.offset_body as usize).min(raw.len()));
        let header_block = &raw[..header_end];
        if !header_block.is_ascii() {
            self.anomalies.add(Anomaly::EightBitHeader);
        }
        // Lines that are no header at all keep their text: it may be all a spammer wrote.
        if let Some(root) = message.parts.first() {
            for h in root
                .headers
                .iter()
                .filter(|h| !is_valid_header_name(h.name.as_str()))
            {
                self.anomalies.add(Anomaly::InvalidHeader);
                let line = raw.get(h.offset_field as usize..h.offset_end as usize);
                self.push_text(&String::from_utf8_lossy(line.unwrap_or_default()), true);
            }
        }
        let blank_line = header_block.ends_with(b"\n\n") || header_block.ends_with(b"\n\r\n");
        if !blank_line && header_end >= raw.len() {
            self.anomalies.add(Anomaly::NoBody);
        }
        if message.date().is_none() {
            if message.header_raw(HeaderName::Date).is_some() {
                self.anomalies.add(Anomaly::InvalidDate);
            } else {
                self.anomalies.add(Anomaly::MissingDate);
            }
        }
        let has_from = message
            .from()
            .is_some_and(|a| a.iter().any(|addr| addr.address.is_some()));
        if !has_from {
            self.anomalies.add(Anomaly::MissingFrom);
        }
        if message.message_id().is_none() {
            self.anomalies.add(Anomaly::MissingMessageId);
        }
        if message.to().is_none() && message.cc().is_none() && message.bcc().is_none() {
            self.anomalies.add(Anomaly::MissingTo);
        }
        if message.header_values(HeaderName::From).count() > 1 {
            self.anomalies.add(Anomaly::MultipleFrom);
        }
    }

    fn walk_message(&mut self, message: &mail_parser::Message<'_>, depth: usize) {
        if !message.parts.is_empty() {
            self.walk_part(message, 0, depth, false);
        }
    }

    /// `in_alternative`: the part is inside a multipart/alternative of this message.
    fn walk_part(
        &mut self,
        message: &mail_parser::Message<'_>,
        id: u32,
        depth: usize,
        in_alternative: bool,
    ) {
        let Some(part) = message.parts.get(id as usize) else {
            return;
        };
        if self.part_count >= self.limits.max_parts {
            self.anomalies.add(Anomaly::TooManyParts);
            return;
        }
        if depth > self.limits.max_depth {
            self.anomalies.add(Anomaly::TooDeep);
            return;
        }
        self.part_count += 1;
        self.check_part(message, part);
        match &part.body {
            PartType::Multipart(children) => {
                let in_alternative = in_alternative
                    || part.content_type().is_some_and(|ct| {
                        ct.c_subtype
                            .as_deref()
                            .is_some_and(|s| s.eq_ignore_ascii_case("alternative"))
                    });
                for &child in children {
                    // Children always follow their parent; anything else is a malformed tree.
                    if child > id {
                        self.walk_part(message, child, depth + 1, in_alternative);
                    }
                }
            }
            PartType::Text(content) | PartType::Html(content) => {
                self.text_part(message, part, id, content, depth, in_alternative);
            }
            PartType::Binary(bytes) | PartType::InlineBinary(bytes) => {
                self.push_attachment(part, bytes, false, depth);
            }
            PartType::Message(nested) => {
                self.push_attachment(part, &nested.raw_message, true, depth);
                self.walk_message(nested, depth + 1);
            }
        }
    }

    /// A text or HTML part. mail-parser's `text_body` and `html_body` decide first: in a
    /// multipart/alternative the plain part makes the body and the HTML part the HTML text. A
    /// part it left out of both (second part of a multipart/related, a file name on a
    /// text/html in a multipart/mixed, inline text after plain inside an alternative, a part cut
    /// off by an unterminated boundary) is still read when a mail client shows it: declared
    /// text/plain, text/html or nothing, and no `Content-Disposition: attachment` (rspamd's rule
    /// for text parts). Its plain text goes to the body; its HTML gives links and HTML text, and
    /// body text outside a multipart/alternative (as mail-parser does in a multipart/mixed).
    /// Such a part stays an attachment too when it has a file name (a named .html file is a
    /// risk of its own); other parts left out are attachments, as before (an attached HTML file
    /// still gives its links, no text).
    fn text_part(
        &mut self,
        message: &mail_parser::Message<'_>,
        part: &MessagePart<'_>,
        id: u32,
        content: &str,
        depth: usize,
        in_alternative: bool,
    ) {
        let markup = matches!(part.body, PartType::Html(_));
        let in_text = message.text_body.contains(&id);
        let in_html = markup && message.html_body.contains(&id);
        // (read as HTML, to the body, read at all)
        let (is_html, to_body, shown) = if in_text || in_html {
            (markup, in_text, true)
        } else {
            match inline_text_kind(part) {
                Some(InlineText::Html) => (true, !in_alternative, true),
                Some(InlineText::Plain) => (false, true, true),
                None => (markup, false, false),
            }
        };
        // mail-parser hands back undecoded text when a part is cut off (no closing boundary),
        // and reads a cut-off text/html as plain text: decode it here so a truncated spam
        // still shows its words and links (and an attachment hashes as its content).
        let recovered = if part.is_encoding_problem {
            recover_text(part, content)
        } else {
            None
        };
        let text = recovered.as_deref().unwrap_or(content);
        if is_html {
            let doc = html::to_text(
                text,
                self.limits
                    .max_html_links
                    .saturating_sub(self.html_links.len()),
            );
            if doc.links_truncated {
                self.anomalies.add(Anomaly::TooManyLinks);
            }
            self.html_links.extend(doc.links);
            if to_body {
                self.push_text(&doc.text, true);
            }
            if shown {
                self.push_text(&doc.text, false);
            }
        } else if to_body {
            self.push_text(text, true);
        }
        if (!shown || part.attachment_name().is_some()) && message.attachments.contains(&id) {
            self.push_attachment(part, text.as_bytes(), true, depth);
        }
        if is_html && !markup {
            // The tree has no HTML part for it: keep its source for the rules that read HTML.
            let room = self
                .limits
                .max_text_bytes
                .saturating_sub(self.cut_off_html_bytes);
            let mut cut = text.len().min(room);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            if cut > 0 {
                // the decoded text is moved, not copied; undecoded text is copied up to the room
                let source = match recovered {
                    Some(mut decoded) => {
                        decoded.truncate(cut);
                        decoded
                    }
                    None => content[..cut].to_string(),
                };
                self.cut_off_html_bytes += cut;
                self.cut_off_html.push(source);
            }
        }
    }

    /// Part-level anomalies: boundaries, transfer encodings, charsets.
    fn check_part(&mut self, message: &mail_parser::Message<'_>, part: &MessagePart<'_>) {
        let content_type = part.content_type();
        let raw = message.raw_message.as_ref();
        let body_start = (part.offset_body as usize).min(raw.len());
        if let Some(ct) = content_type {
            if ct.c_type.eq_ignore_ascii_case("multipart") {
                match ct.attribute("boundary") {
                    None => self.anomalies.add(Anomaly::MissingBoundary),
                    Some(boundary) => {
                        let mut close = Vec::with_capacity(boundary.len() + 4);
                        close.extend_from_slice(b"--");
                        close.extend_from_slice(boundary.as_bytes());
                        close.extend_from_slice(b"--");
                        if memchr::memmem::find(&raw[body_start..], &close).is_none() {
                            self.anomalies.add(Anomaly::UnterminatedMultipart);
                        }
                    }
                }
            }
            if let Some(charset) = ct.attribute("charset") {
                if !is_utf8_or_ascii(charset)
                    && mail_parser::decoders::charsets::map::charset_decoder(charset.as_bytes())
                        .is_none()
                {
                    self.anomalies.add(Anomaly::UnknownCharset);
                }
            }
        }
        let declared = part.content_transfer_encoding().unwrap_or_default();
        if declared.eq_ignore_ascii_case("base64") {
            let end = (part.offset_end as usize).clamp(body_start, raw.len());
            if !is_clean_base64(&raw[body_start..end]) {
                self.anomalies.add(Anomaly::BadBase64);
            }
        } else if part.is_encoding_problem
            && !matches!(part.body, PartType::Multipart(_))
            && !self.anomalies.contains(Anomaly::NoBody)
        {
            self.anomalies.add(Anomaly::EncodingProblem);
        }
        if let PartType::Text(t) | PartType::Html(t) = &part.body {
            if t.contains('\u{FFFD}') {
                self.anomalies.add(Anomaly::InvalidUtf8);
            }
        }
    }

    /// Appends decoded text to the body (`to_body`) or to the HTML text, within the limit.
    fn push_text(&mut self, text: &str, to_body: bool) {
        let max = self.limits.max_text_bytes;
        let target = if to_body {
            &mut self.body
        } else {
            &mut self.html
        };
        if target.len() >= max {
            self.anomalies.add(Anomaly::TextTruncated);
            return;
        }
        if !target.is_empty() {
            target.push('\n');
        }
        let room = max - target.len();
        if text.len() > room {
            let mut cut = room;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            target.push_str(&text[..cut]);
            self.anomalies.add(Anomaly::TextTruncated);
        } else {
            target.push_str(text);
        }
    }

    /// Records a non-body part. Content that travelled as lines (text parts, attached messages,
    /// parts mail-parser fell back to reading as text, anything not base64) is hashed in its LF
    /// form, so a relay that rewrites line ends changes nothing.
    fn push_attachment(
        &mut self,
        part: &MessagePart<'_>,
        content: &[u8],
        is_text: bool,
        depth: usize,
    ) {
        let content_type = part.content_type().map_or_else(
            || "application/octet-stream".to_string(),
            |ct| match &ct.c_subtype {
                Some(sub) => format!("{}/{}", ct.c_type, sub).to_ascii_lowercase(),
                None => ct.c_type.to_ascii_lowercase(),
            },
        );
        // Without base64 (or "binary"), content travelled as lines: its line ends are transport.
        let line_based = part.encoding != Encoding::Base64
            && !part
                .content_transfer_encoding()
                .is_some_and(|e| e.eq_ignore_ascii_case("binary"));
        let canonical: Cow<'_, [u8]> =
            if (is_text || line_based) && memchr::memchr(b'\r', content).is_some() {
                Cow::Owned(without_cr_before_lf(content))
            } else {
                Cow::Borrowed(content)
            };
        self.attachments.push(AttachmentPart {
            name: part.attachment_name().map(str::to_string),
            content_type,
            size: canonical.len(),
            sha256: if self.hash_attachments {
                hex_digest(&canonical)
            } else {
                String::new()
            },
            depth,
        });
    }
}

/// How a mail client shows a part inline as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InlineText {
    Plain,
    Html,
}

/// A part declared text/plain, text/html or nothing (text/plain by default), without
/// `Content-Disposition: attachment`.
fn inline_text_kind(part: &MessagePart<'_>) -> Option<InlineText> {
    let kind = match part.content_type() {
        None => InlineText::Plain,
        Some(ct) if ct.c_type.eq_ignore_ascii_case("text") => match ct.c_subtype.as_deref() {
            Some(s) if s.eq_ignore_ascii_case("plain") => InlineText::Plain,
            Some(s) if s.eq_ignore_ascii_case("html") => InlineText::Html,
            _ => return None,
        },
        Some(_) => return None,
    };
    let attachment = part
        .content_disposition()
        .is_some_and(|cd| cd.is_attachment());
    (!attachment).then_some(kind)
}

/// Decodes the transfer encoding and charset of a part mail-parser returned undecoded.
fn recover_text(part: &MessagePart<'_>, text: &str) -> Option<String> {
    use mail_parser::decoders::{base64::base64_decode, quoted_printable::quoted_printable_decode};
    let cte = part.content_transfer_encoding()?;
    let bytes = if cte.eq_ignore_ascii_case("base64") {
        // Decode the clean lines; stop at a boundary-like line.
        let data: Vec<u8> = text
            .lines()
            .take_while(|l| !l.starts_with("--"))
            .flat_map(|l| l.trim().bytes())
            .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
            .collect();
        base64_decode(&data)?
    } else if cte.eq_ignore_ascii_case("quoted-printable") {
        quoted_printable_decode(text.as_bytes())?
    } else {
        return None;
    };
    let decoder = part
        .content_type()
        .and_then(|ct| ct.attribute("charset"))
        .and_then(|c| mail_parser::decoders::charsets::map::charset_decoder(c.as_bytes()));
    Some(match decoder {
        Some(decode) => decode(&bytes),
        None => String::from_utf8_lossy(&bytes).into_owned(),
    })
}

fn without_cr_before_lf(content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len());
    for (i, &b) in content.iter().enumerate() {
        if !(b == b'\r' && content.get(i + 1) == Some(&b'\n')) {
            out.push(b);
        }
    }
    out
}

/// UTF-8 and ASCII need no decoder, so mail-parser's decoder map does not list them.
fn is_utf8_or_ascii(charset: &str) -> bool {
    let c = charset.trim().trim_matches('"');
    [
        "utf-8",
        "utf8",
        "us-ascii",
        "ascii",
        "ansi_x3.4-1968",
        "iso646-us",
    ]
    .iter()
    .any(|k| c.eq_ignore_ascii_case(k))
}

fn hex_digest(content: &[u8]) -> String {
    let digest = Sha256::digest(content);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 15), 16).unwrap_or('0'));
    }
    out
}

/// Byte classes of a base64 body (line ends are split off first).
const B64_DATA: u8 = 0;
const B64_PAD: u8 = 1;
const B64_SPACE: u8 = 2;
const B64_BAD: u8 = 3;
static B64_CLASS: [u8; 256] = {
    let mut t = [B64_BAD; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || c == b'+' || c == b'/' {
            t[b] = B64_DATA;
        }
        b += 1;
    }
    t[b'=' as usize] = B64_PAD;
    t[b' ' as usize] = B64_SPACE;
    t[b'\t' as usize] = B64_SPACE;
    t[b'\r' as usize] = B64_SPACE;
    t
};

/// True when a base64 body holds only the alphabet, padding after the data and whitespace,
/// and its data length is a possible one. Branch-free per byte (a class table and flags checked
/// at the end of each line): a `match` on the byte ranges mispredicted on every few bytes of
/// base64, whose letters, digits and signs come in no order.
fn is_clean_base64(body: &[u8]) -> bool {
    let mut data = 0usize;
    let mut padded = false;
    for line in body.split(|&b| b == b'\n') {
        if line.starts_with(b"--") {
            break; // a boundary line ends the part
        }
        let mut bad = false;
        for &b in line {
            let c = B64_CLASS[usize::from(b)];
            // a byte outside the alphabet, or data after padding
            bad |= (c == B64_BAD) | (padded & (c == B64_DATA));
            padded |= c == B64_PAD;
            data += usize::from(c == B64_DATA);
        }
        if bad {
            return false;
        }
    }
    // Only a data length of 4n+1 cannot be decoded; stray extra padding is common and harmless.
    data % 4 != 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::xorshift;

    fn parse_bytes(raw: &[u8], limits: &Limits) -> ParsedMessage<'static> {
        // Tests leak the prepared input so the parsed message can outlive this helper.
        let prepared = Box::leak(Box::new(prepare(raw, limits).into_owned()));
        parse(prepared, limits)
    }

    fn parse_str(s: &str) -> ParsedMessage<'static> {
        parse_bytes(s.as_bytes(), &Limits::default())
    }

    /// `parse_links` is `parse` without the normalized text and the attachments' hashes: the
    /// rest, which the URLs are found in, is the same.
    #[test]
    fn parse_links_is_parse_without_normalized_text_and_hashes() {
        let raw = "Subject: Caf\u{e9} OFFER\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n\
                   --b\r\nContent-Type: text/plain\r\n\r\nSee WWW.Example.com now\r\n\
                   --b\r\nContent-Type: text/html\r\n\r\n<a href=\"http://a.example/\">x</a> y\r\n\
                   --b\r\nContent-Type: application/pdf; name=a.pdf\r\n\
                   Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--b--\r\n";
        let limits = Limits::default();
        let input = prepare(raw.as_bytes(), &limits);
        let (full, links) = (parse(&input, &limits), parse_links(&input, &limits));
        assert_eq!(links.body.display, full.body.display);
        assert_eq!(links.subject.display, full.subject.display);
        assert_eq!(links.html_text, full.html_text);
        assert_eq!(links.html_links, full.html_links);
        assert_eq!(links.part_count, full.part_count);
        assert!(!full.body.normalized.is_empty());
        assert!(links.body.normalized.is_empty() && links.subject.normalized.is_empty());
        assert_eq!(full.attachments.len(), 1);
        assert_eq!(links.attachments.len(), 1);
        assert_eq!(links.attachments[0].size, full.attachments[0].size);
        assert_eq!(full.attachments[0].sha256.len(), 64);
        assert!(links.attachments[0].sha256.is_empty());
    }

    /// Found by the `scan` fuzz target (minimized): a message/rfc822 part holding another,
    /// empty one, closed by the outer boundary. mail-parser's state machine loses the part's
    /// parent there and a `debug_assert!` fired (vendor patch 7 removes it); shrike then
    /// scanned the message as text (`parser_panic`). Test builds compile mail-parser without
    /// debug assertions (Cargo.toml), the fuzz build with them: there the seed
    /// `fuzz/seeds/scan/regress-nested-rfc822` replays this input.
    #[test]
    fn nested_empty_rfc822_parts_do_not_panic_the_mime_parser() {
        let raw = "Content-Type:multipart;boundary=outer-b1\n\n\
                   --outer-b1Content-Type:message/rfc822\n\n\
                   Content-Type:message/rfc822\n\n\n--outer-b1--";
        for raw in [raw.to_string(), raw.replace('\n', "\r\n")] {
            let m = parse_str(&raw);
            assert!(
                !m.anomalies.contains(Anomaly::ParserPanic),
                "{:?}",
                m.anomalies.as_slice()
            );
            assert!(m.mime.is_some());
        }
    }

    /// The vendored mail-parser's single-byte decoder (vendor/README.md): ASCII runs copied
    /// whole, other bytes through the charset's table, as before the patch.
    #[test]
    fn single_byte_charsets_decode_as_their_tables_say() {
        let decode = |charset: &str, body: &[u8]| {
            let mut raw = format!(
                "Subject: t\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset={charset}\r\n\
                 Content-Transfer-Encoding: 8bit\r\n\r\n"
            )
            .into_bytes();
            raw.extend_from_slice(body);
            let m = mail_parser::MessageParser::default()
                .parse(&raw[..])
                .unwrap();
            m.body_text(0).unwrap().into_owned()
        };
        // pure ASCII
        assert_eq!(
            decode("us-ascii", b"plain words, 7 bit"),
            "plain words, 7 bit"
        );
        // the Latin-1 half, euro sign and an unassigned byte of windows-1252, among ASCII runs
        let mut body = b"caf\xe9 \x80 \x81|".to_vec();
        body.extend(0xa0..=0xffu8);
        body.extend_from_slice(b"|end");
        let mut want = String::from("caf\u{e9} \u{20ac} \u{fffd}|");
        want.extend((0xa0..=0xffu8).map(char::from));
        want.push_str("|end");
        assert_eq!(decode("iso-8859-1", &body), want);
        // another table: KOI8-R maps 0xc1 to Cyrillic a
        assert_eq!(decode("koi8-r", b"x\xc1y"), "x\u{430}y");
    }

    #[test]
    fn plain_message_has_no_anomalies() {
        let m = parse_str(
            "From: A <a@example.com>\nTo: b@example.org\nSubject: Hi\nDate: Mon, 2 Jan 2023 10:00:00 +0000\n\
             Message-ID: <1@example.com>\n\nHello there\n",
        );
        assert_eq!(m.subject.display, "Hi");
        assert_eq!(m.body.normalized, "hello there");
        assert!(m.anomalies.is_empty(), "{:?}", m.anomalies);
    }

    #[test]
    fn missing_headers_are_reported() {
        let m = parse_str("Subject: x\n\nbody\n");
        for a in [
            Anomaly::MissingDate,
            Anomaly::MissingFrom,
            Anomaly::MissingMessageId,
            Anomaly::MissingTo,
        ] {
            assert!(m.anomalies.contains(a), "{a:?} in {:?}", m.anomalies);
        }
    }

    #[test]
    fn no_blank_line_is_no_body() {
        let m = parse_str("Subject: x\nFrom: a@example.com");
        assert!(m.anomalies.contains(Anomaly::NoBody), "{:?}", m.anomalies);
        assert!(!m.anomalies.contains(Anomaly::EmptyBody));
    }

    #[test]
    fn garbage_still_yields_text() {
        let m = parse_bytes(b"\x00\x01 see http://x.example/ \xff", &Limits::default());
        assert!(m.anomalies.contains(Anomaly::NulBytes));
        assert!(m.body.display.contains("http://x.example/"));
    }

    #[test]
    fn size_limit_truncates() {
        let limits = Limits {
            max_message_bytes: 40,
            ..Limits::default()
        };
        let raw = format!("Subject: x\n\n{}", "a ".repeat(100));
        let m = parse_bytes(raw.as_bytes(), &limits);
        assert!(m.raw.len() <= 44);
        assert!(m.anomalies.contains(Anomaly::MessageTruncated));
    }

    #[test]
    fn part_and_depth_limits_hold() {
        let mut raw = String::from("Subject: x\nContent-Type: multipart/mixed; boundary=b0\n\n");
        for i in 0..20 {
            raw.push_str(&format!(
                "--b{i}\nContent-Type: multipart/mixed; boundary=b{}\n\n",
                i + 1
            ));
        }
        raw.push_str("--b20\nContent-Type: text/plain\n\ndeep\n");
        let limits = Limits {
            max_depth: 5,
            ..Limits::default()
        };
        let m = parse_bytes(raw.as_bytes(), &limits);
        assert!(m.anomalies.contains(Anomaly::TooDeep));
        assert!(m.anomalies.contains(Anomaly::UnterminatedMultipart));
        let limits = Limits {
            max_parts: 3,
            ..Limits::default()
        };
        let m = parse_bytes(raw.as_bytes(), &limits);
        assert!(m.anomalies.contains(Anomaly::TooManyParts));
        assert_eq!(m.part_count, 3);
    }

    /// Past `max_headers` a header block keeps only the last field of each known name: the
    /// Subject, From and Content-Type put after 5,000 junk fields are still read, in the message
    /// and in an attached one, and the junk is not.
    #[test]
    fn header_blocks_are_cut_at_the_limit_keeping_known_fields() {
        let junk: String = (0..5_000).map(|i| format!("X-Junk-{i}: {i}\n")).collect();
        let raw = format!(
            "{junk}Subject: first\nSubject: last\nFrom: a@example.com\n\
             Content-Type: multipart/mixed; boundary=b\n\n\
             --b\nContent-Type: text/plain\n\nHello\n\
             --b\nContent-Type: message/rfc822\n\n\
             {junk}Subject: inner\nContent-Type: text/plain\n\nInner words\n--b--\n"
        );
        let limits = Limits {
            max_headers: 100,
            ..Limits::default()
        };
        let m = parse_bytes(raw.as_bytes(), &limits);
        assert!(m.anomalies.contains(Anomaly::TooManyHeaders));
        assert!(!m.anomalies.contains(Anomaly::MissingFrom));
        assert_eq!(m.subject.display, "last");
        assert_eq!(m.body.normalized, "hello inner words");
        let mime = m.mime.as_ref().unwrap();
        let root = &mime.parts[0].headers;
        assert_eq!(
            root.len(),
            100 + 3,
            "the cut block and Subject, From, Content-Type"
        );
        assert_eq!(m.header_keys.len(), root.len());
        let inner = mime
            .parts
            .iter()
            .find_map(|p| match &p.body {
                PartType::Message(nested) => Some(nested),
                _ => None,
            })
            .expect("the attached message");
        assert_eq!(inner.parts[0].headers.len(), 100 + 2);
        assert_eq!(inner.subject(), Some("inner"));
        // The default limit cuts it too; a block under it is left whole, repeats included.
        let m = parse_bytes(raw.as_bytes(), &Limits::default());
        assert!(m.anomalies.contains(Anomaly::TooManyHeaders));
        let small = parse_str("Subject: x\nX-A: 1\nX-A: 2\n\nbody\n");
        assert!(!small.anomalies.contains(Anomaly::TooManyHeaders));
        assert_eq!(small.mime.unwrap().parts[0].headers.len(), 3);
    }

    /// A header field over `max_header_bytes` is cut, folded or not, on a character boundary;
    /// the fields after it, the body and short fields are read as before, and a cut that would
    /// land just after a fold's line end does not end the header block there.
    #[test]
    fn long_header_fields_are_cut() {
        let limits = Limits {
            max_header_bytes: 100,
            ..Limits::default()
        };
        let long = "é".repeat(500);
        let folded: String = (0..40).map(|i| format!(" w{i:02}\r\n")).collect();
        let raw = format!(
            "Subject: {long}\r\nX-Folded: start\r\n{folded}From: a@example.com\r\n\
             To: b@example.org\r\n\r\nBody {long}\r\n"
        );
        let m = parse_bytes(raw.as_bytes(), &limits);
        assert!(m.anomalies.contains(Anomaly::HeaderTruncated));
        assert_eq!(
            m.subject.display,
            "é".repeat(45),
            "100 bytes less \"Subject: \""
        );
        assert!(!m.anomalies.contains(Anomaly::MissingFrom));
        assert!(!m.anomalies.contains(Anomaly::MissingTo));
        assert!(m.body.display.ends_with(&format!("{long}\r\n")));
        let mime = m.mime.as_ref().unwrap();
        let folded = mime.header_raw("X-Folded").unwrap();
        let folded = folded.trim_end();
        assert!(folded.ends_with(" w13"), "{folded:?}");
        assert!("X-Folded:".len() + folded.len() <= 100, "{folded:?}");
        // Every cut point of a folded field (some land on a line end) keeps the block whole.
        for max in 20..80 {
            let limits = Limits {
                max_header_bytes: max,
                ..Limits::default()
            };
            let raw = "X-F: a\r\n b\r\n\tc\r\n d\r\n e\r\n f\r\n g\r\n h\r\n i\r\n j\r\n k\r\n\
                       From: a@example.com\r\n\r\nbody\r\n";
            let m = parse_bytes(raw.as_bytes(), &limits);
            assert!(!m.anomalies.contains(Anomaly::MissingFrom), "{max}");
            assert_eq!(m.body.normalized, "body", "{max}");
        }
        // A cut at a field's start (only a limit of 0 makes one) drops the field with its line
        // end, not leaving a blank line that would end the block and turn the rest into body.
        let zero = Limits {
            max_header_bytes: 0,
            ..Limits::default()
        };
        let prepared = prepare(b"X-A: 1\r\nX-B: 2\r\n\r\nbody\r\n", &zero);
        assert_eq!(prepared.bytes(), b"\r\nbody\r\n");
        // Random header-like input under small limits: no panic, and only header bytes go.
        let pieces = [
            "X-A: ", "Subject:", "é", "\r\n", "\n", " ", "\t", "a", ":", "\r\n\r\n", "=?x?=",
        ];
        let mut x: u64 = 0x51_7CC1_B727_220A;
        for round in 0..5_000u64 {
            let n = 1 + xorshift(&mut x) % 30;
            let text = crate::testing::pick(&mut x, &pieces, n);
            let limits = Limits {
                max_header_bytes: (round % 24) as usize,
                ..Limits::default()
            };
            let whole = prepare(text.as_bytes(), &Limits::default());
            let cut = prepare(text.as_bytes(), &limits);
            assert!(cut.bytes().len() <= whole.bytes().len(), "{text:?}");
            parse(&cut, &limits);
        }
        // Short fields are left alone, and the input is still borrowed.
        let raw = b"Subject: x\r\nFrom: a@example.com\r\n\r\nbody\r\n";
        let prepared = prepare(raw, &limits);
        assert!(matches!(prepared.bytes, Cow::Borrowed(_)));
        assert!(prepared.anomalies.is_empty());
        // Without headers the text is not a field: nothing is cut.
        let text = "no header here ".repeat(100);
        let m = parse_bytes(text.as_bytes(), &limits);
        assert!(!m.anomalies.contains(Anomaly::HeaderTruncated));
        assert_eq!(m.body.display.len(), text.len());
    }

    #[test]
    fn short_obsolete_zone_does_not_eat_the_body() {
        // mail-parser with bare LF would read the first body lines as headers here.
        let m = parse_str(
            "Subject: x\nDate: Sun, 25 Aug 2002 16:50:54 UT\n\nfirst line\nsaid:\n> quoted\n",
        );
        assert_eq!(m.body.normalized, "first line said: > quoted");
    }

    #[test]
    fn prepare_borrows_crlf_input() {
        let raw = b"Subject: x\r\n\r\nbody\r\n";
        assert!(matches!(
            prepare(raw, &Limits::default()).bytes,
            Cow::Borrowed(_)
        ));
        let lf = prepare(b"Subject: x\n\nbody\n", &Limits::default());
        assert_eq!(lf.bytes(), b"Subject: x\r\n\r\nbody\r\n");
    }

    #[test]
    fn cut_off_base64_part_is_still_decoded() {
        let m = parse_str(
            "Subject: x\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\
             Content-Type: text/plain\nContent-Transfer-Encoding: base64\n\n\
             VmlzaXQgaHR0cDovL3NwYW0uZXhhbXBsZS8gbm93\n",
        );
        assert!(m.anomalies.contains(Anomaly::UnterminatedMultipart));
        assert!(!m.anomalies.contains(Anomaly::BadBase64));
        assert_eq!(m.body.display.trim(), "Visit http://spam.example/ now");
    }

    fn link_targets<'m>(m: &'m ParsedMessage<'_>) -> Vec<&'m str> {
        m.html_links.iter().map(|l| l.target.as_str()).collect()
    }

    fn attachment_types<'m>(m: &'m ParsedMessage<'_>) -> Vec<&'m str> {
        m.attachments
            .iter()
            .map(|a| a.content_type.as_str())
            .collect()
    }

    /// Inline text parts mail-parser lists as attachments: a second plain part, a named
    /// text/html shown inline in a multipart/mixed, and the parts after the first of a
    /// multipart/related. All give text and links; only the named one is an attachment too.
    #[test]
    fn inline_text_parts_give_text_and_links() {
        let m = parse_str(
            "Subject: x\nContent-Type: multipart/mixed; boundary=b\n\n\
             --b\nContent-Type: text/plain\n\nplain one\n\
             --b\nContent-Type: text/plain\n\nplain two http://p2.example/\n\
             --b\nContent-Type: text/html; name=\"offer.html\"\n\
             Content-Disposition: inline; filename=\"offer.html\"\n\n\
             <p>named html <a href=\"http://named.example/x\">click</a></p>\n\
             --b\nContent-Type: multipart/related; boundary=r\n\n\
             --r\nContent-Type: text/html\n\n<p>first related <a href=\"http://r1.example/\">one</a></p>\n\
             --r\nContent-Type: text/plain\n\nsecond related http://r2.example/\n\
             --r\nContent-Type: text/html\n\n<p>third related <a href=\"http://r3.example/\">two</a></p>\n\
             --r--\n--b--\n",
        );
        let body = &m.body.display;
        for words in [
            "plain one",
            "plain two http://p2.example/",
            "named html click",
            "first related one",
            "second related http://r2.example/",
            "third related two",
        ] {
            assert!(body.contains(words), "{words:?} not in {body:?}");
        }
        assert_eq!(
            m.html_text,
            "named html click\nfirst related one\nthird related two"
        );
        assert!(!m.html_text.contains("plain"));
        assert_eq!(
            link_targets(&m),
            [
                "http://named.example/x",
                "http://r1.example/",
                "http://r3.example/"
            ]
        );
        assert_eq!(m.html_links[0].text.as_deref(), Some("click"));
        // the named file is still an attachment (a .html file is a risk of its own)
        assert_eq!(attachment_types(&m), ["text/html"]);
        assert_eq!(m.attachments[0].name.as_deref(), Some("offer.html"));
    }

    /// A text/html part cut off by an unterminated boundary (mail-parser hands it back as
    /// plain text, undecoded) is read as HTML: visible text, links, and an anchor never closed
    /// keeps its text; no markup in the body, no attachment.
    #[test]
    fn cut_off_html_part_is_read_as_html() {
        for (cte, html) in [
            (
                "7bit",
                "<p>cut off <a href=\"http://cut.example/x\">claim your prize\n",
            ),
            (
                "quoted-printable",
                "<p>cut off <a href=3D\"http://cut.example/x\">claim your =\nprize\n",
            ),
            (
                "base64",
                "PHA+Y3V0IG9mZiA8YSBocmVmPSJodHRwOi8vY3V0LmV4YW1wbGUveCI+Y2xhaW0geW91ciBwcml6ZQo=\n",
            ),
        ] {
            let m = parse_str(&format!(
                "Subject: x\nContent-Type: multipart/mixed; boundary=b\n\n\
                 --b\nContent-Type: text/plain\n\nhello\n\
                 --b\nContent-Type: text/html; charset=us-ascii\n\
                 Content-Transfer-Encoding: {cte}\n\n{html}"
            ));
            assert!(m.anomalies.contains(Anomaly::UnterminatedMultipart), "{cte}");
            assert_eq!(m.body.normalized, "hello cut off claim your prize", "{cte}");
            assert_eq!(m.html_text, "cut off claim your prize", "{cte}");
            assert_eq!(link_targets(&m), ["http://cut.example/x"], "{cte}");
            assert_eq!(
                m.html_links[0].text.as_deref(),
                Some("claim your prize"),
                "{cte}"
            );
            assert!(m.attachments.is_empty(), "{cte}: {:?}", m.attachments);
            // its decoded source, for the rules that read HTML
            let sources: Vec<&str> = m.cut_off_html.iter().map(|h| h.trim_end()).collect();
            assert_eq!(
                sources,
                ["<p>cut off <a href=\"http://cut.example/x\">claim your prize"],
                "{cte}"
            );
        }
        // the source kept stays within max_text_bytes
        let limits = Limits {
            max_text_bytes: 8,
            ..Limits::default()
        };
        let m = parse_bytes(
            b"Subject: x\nContent-Type: multipart/mixed; boundary=b\n\n\
              --b\nContent-Type: text/html\n\n<p>caf\xc3\xa9 caf\xc3\xa9</p>\n",
            &limits,
        );
        assert_eq!(m.cut_off_html, ["<p>caf\u{e9}"]);
    }

    /// Inside a multipart/alternative the body stays the plain text (as mail-parser chooses);
    /// HTML that mail-parser left out there still gives its links and HTML text.
    #[test]
    fn html_in_an_alternative_gives_links_and_html_text_not_body() {
        let m = parse_str(
            "Subject: x\nContent-Type: multipart/alternative; boundary=a\n\n\
             --a\nContent-Type: text/plain\n\nplain alternative\n\
             --a\nContent-Type: multipart/mixed; boundary=m\n\n\
             --m\nContent-Type: text/plain\n\nplain in mixed\n\
             --m\nContent-Type: text/html\n\n<p>html in mixed <a href=\"http://alt.example/\">go</a></p>\n\
             --m--\n--a--\n",
        );
        assert_eq!(m.body.normalized, "plain alternative plain in mixed");
        assert_eq!(m.html_text, "html in mixed go");
        assert_eq!(link_targets(&m), ["http://alt.example/"]);
        assert!(m.attachments.is_empty(), "{:?}", m.attachments);
        // the plain-and-HTML alternative as before: plain body, HTML text and links
        let m = parse_str(
            "Subject: x\nContent-Type: multipart/alternative; boundary=a\n\n\
             --a\nContent-Type: text/plain\n\nplain words\n\
             --a\nContent-Type: text/html\n\n<p>html words <a href=\"http://alt.example/\">go</a></p>\n\
             --a--\n",
        );
        assert_eq!(m.body.normalized, "plain words");
        assert_eq!(m.html_text, "html words go");
        assert_eq!(link_targets(&m), ["http://alt.example/"]);
    }

    /// Text parts sent as attachments, and text types no client shows as the message, stay
    /// attachments: no body text.
    #[test]
    fn attached_text_parts_stay_attachments() {
        let m = parse_str(
            "Subject: x\nContent-Type: multipart/mixed; boundary=b\n\n\
             --b\nContent-Type: text/plain\n\nbody words\n\
             --b\nContent-Type: text/plain\nContent-Disposition: attachment; filename=\"a.txt\"\n\n\
             attached plain http://att.example/\n\
             --b\nContent-Type: text/html\nContent-Disposition: attachment\n\n<p>attached html</p>\n\
             --b\nContent-Type: text/csv\n\nsome,cells\n\
             --b\nContent-Type: text/html\nContent-Disposition: attachment\n\n<p>cut off attached html\n",
        );
        assert_eq!(m.body.normalized, "body words");
        assert_eq!(m.html_text, "");
        assert_eq!(
            attachment_types(&m),
            ["text/plain", "text/html", "text/csv", "text/html"]
        );
    }

    /// The text of extra parts counts against the same limits.
    #[test]
    fn inline_parts_respect_the_limits() {
        let mut raw = String::from("Subject: x\nContent-Type: multipart/related; boundary=r\n\n");
        for i in 0..40 {
            raw.push_str(&format!(
                "--r\nContent-Type: text/html\n\n<p>part {i} {}<a href=\"http://l{i}.example/\">x</a></p>\n",
                "words ".repeat(20)
            ));
        }
        raw.push_str("--r--\n");
        let limits = Limits {
            max_text_bytes: 1_000,
            max_html_links: 10,
            max_parts: 30,
            ..Limits::default()
        };
        let m = parse_bytes(raw.as_bytes(), &limits);
        assert!(m.body.display.len() <= 1_000);
        assert!(m.html_text.len() <= 1_000);
        assert_eq!(m.html_links.len(), 10);
        assert_eq!(m.part_count, 30);
        for a in [
            Anomaly::TextTruncated,
            Anomaly::TooManyLinks,
            Anomaly::TooManyParts,
        ] {
            assert!(m.anomalies.contains(a), "{a:?} in {:?}", m.anomalies);
        }
    }

    #[test]
    fn mbox_separator_is_not_a_header() {
        let m = parse_str("From bob@example.com Mon Aug 26 15:32:28 2002\nFrom: bob@example.com\nSubject: s\n\nbody\n");
        assert_eq!(m.subject.display, "s");
        assert_eq!(m.body.normalized, "body");
        assert!(!m.anomalies.contains(Anomaly::InvalidHeader));
    }

    /// The per-byte `match` that `is_clean_base64` replaced.
    fn is_clean_base64_by_match(body: &[u8]) -> bool {
        let mut data = 0usize;
        let mut padded = false;
        for line in body.split(|&b| b == b'\n') {
            if line.starts_with(b"--") {
                break;
            }
            for &b in line {
                match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' => {
                        if padded {
                            return false;
                        }
                        data += 1;
                    }
                    b'=' => padded = true,
                    b' ' | b'\t' | b'\r' => {}
                    _ => return false,
                }
            }
        }
        data % 4 != 1
    }

    #[test]
    fn base64_checker_agrees_with_the_match() {
        let alphabet = b"AZaz09+/=\r\n \t-*\x80";
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..50_000 {
            let len = (xorshift(&mut x) % 24) as usize;
            let body: Vec<u8> = (0..len)
                .map(|_| {
                    let r = xorshift(&mut x);
                    // mostly data, so that clean bodies come up too
                    if !r.is_multiple_of(4) {
                        b"QUJD"[(r >> 8) as usize % 4]
                    } else {
                        alphabet[(r >> 8) as usize % alphabet.len()]
                    }
                })
                .collect();
            assert_eq!(
                is_clean_base64(&body),
                is_clean_base64_by_match(&body),
                "{:?}",
                String::from_utf8_lossy(&body)
            );
        }
        for b in 0..=255u8 {
            let body = [b'Q', b'Q', b'Q', b];
            assert_eq!(
                is_clean_base64(&body),
                is_clean_base64_by_match(&body),
                "byte {b}"
            );
        }
    }

    #[test]
    fn base64_checker() {
        assert!(is_clean_base64(b"SGVsbG8gd29ybGQ=\r\n"));
        assert!(is_clean_base64(b"SGVs\nbG8=\n--boundary--\n"));
        assert!(!is_clean_base64(b"SGVs*bG8=\n"));
        assert!(!is_clean_base64(b"SGVsbG8=QQ==\n"));
        assert!(!is_clean_base64(b"SGVsb\n"));
        assert!(is_clean_base64(b"SGVsbG8gd29ybGQ==\n")); // stray padding, as Outlook writes it
    }
}
