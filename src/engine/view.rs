//! The data of one scan as rules see it (`msg`): borrowed from the analysis, converted to Lua
//! values on first use (the prelude caches them for the rest of the scan).

use std::borrow::Cow;
use std::ffi::CStr;

use mail_parser::{MimeHeaders, PartType};
use mlua::{Lua, Result, Table, Value};

use super::ffi::{self, Field, Row};
use super::fields::FieldId;

use crate::entities::{EmailRole, Entities, IpSource, IpText, UrlSource};
use crate::message::{Anomalies, Anomaly, Envelope, ParsedMessage, ZoneProblem};
use crate::shingle::{Kind, Shingle};
use crate::store::{Counter, Counts, WindowCounts};

/// Everything the rules may read about one message.
pub struct MessageData<'a> {
    pub message: &'a ParsedMessage<'a>,
    pub entities: &'a Entities,
    pub shingles: &'a [Shingle],
    /// Window sums for each shingle, aligned with `shingles` (empty when no store is used).
    pub stats: &'a [WindowCounts],
    /// With a store that reads some kinds only when asked (`LateStats`): the stats, read as
    /// rules ask for them (`stats` is then not used).
    pub late: Option<&'a dyn LateStats>,
    pub anomalies: &'a Anomalies,
    pub envelope: &'a Envelope,
    /// The scan's clock, Unix seconds.
    pub now: u64,
    /// Bytes of HTML source handed to rules at most.
    pub max_html_bytes: usize,
    /// The classifier behind `msg:classify()`, if any.
    pub classifier: Option<&'a crate::classify::Classifier>,
    /// Index of the store window the classifier's reputation features read.
    pub reputation_window: usize,
    /// A learn's scan: the rules run for the symbols the classifier learns from, but record
    /// nothing (`ratelimit` answers without counting). Learning records feedback; it does not
    /// deliver the message again.
    pub observe: bool,
    /// What the network checks found (`msg:auth()`, `msg:dnsbl()`); None: not run (offline).
    pub net: Option<&'a crate::netcheck::NetChecks>,
    /// The message's direction and what our users' own mail says of it.
    pub traffic: TrafficFacts,
}

/// What the scan knows of a message's direction and of our users' own mail
/// (`msg:direction()`, `msg:reply()`, `msg:known_correspondent()`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficFacts {
    pub outbound: bool,
    /// Ids the message replies to that an outbound scan stored.
    pub replied: u32,
    /// Messages its recipient sent to its authenticated sender.
    pub correspondent: u64,
}

/// Window sums of a message's shingles read on first use: a backend where each key read is a
/// request (Redis) reads before the rules only the kinds rules have asked for, and a kind
/// asked for the first time here, all its keys at once.
pub trait LateStats {
    /// The stats of every shingle (aligned with `shingles`), those of `kinds` read.
    fn read(&self, kinds: &[Kind]) -> std::cell::Ref<'_, [WindowCounts]>;
}

/// Stats as `MessageData::stats_of` lends them.
enum StatsRef<'b> {
    Plain(&'b [WindowCounts]),
    Late(std::cell::Ref<'b, [WindowCounts]>),
}

impl std::ops::Deref for StatsRef<'_> {
    type Target = [WindowCounts];

    fn deref(&self) -> &[WindowCounts] {
        match self {
            StatsRef::Plain(s) => s,
            StatsRef::Late(s) => s,
        }
    }
}

impl MessageData<'_> {
    /// The shingles' stats with those of `kinds` read.
    fn stats_of(&self, kinds: &[Kind]) -> StatsRef<'_> {
        match self.late {
            Some(late) => StatsRef::Late(late.read(kinds)),
            None => StatsRef::Plain(self.stats),
        }
    }

    /// The classifier's features of this message with the symbols hit so far.
    pub fn classifier_features<'s>(
        &self,
        symbols: impl IntoIterator<Item = &'s str>,
    ) -> crate::classify::Features {
        let mut f = crate::classify::extract(self.message, self.entities, self.anomalies);
        for s in symbols {
            f.add_symbol(s);
        }
        let stats = self.stats_of(&crate::classify::features::REPUTATION_KINDS);
        f.add_reputation(self.shingles, &stats, self.reputation_window);
        f.finish();
        f
    }
}

/// The argument of a field lookup (a header name, a hop number), as the Lua stack holds it.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    None,
    Str(&'a [u8]),
    Int(i64),
    /// A value of another type (or a float that is no integer).
    Other,
}

impl<'a> Arg<'a> {
    /// The argument of a `Value` (what the mlua primitive receives).
    pub(super) fn of(v: &'a Value, bytes: Option<&'a [u8]>) -> Self {
        match v {
            Value::Nil => Arg::None,
            Value::Integer(n) => Arg::Int(*n),
            Value::String(_) => bytes.map_or(Arg::Other, Arg::Str),
            _ => Arg::Other,
        }
    }
}

/// The value of a field of kind `Scalar`: one string, integer or nil, which the raw
/// `fetch_scalar` pushes itself, without a table or a registry handle.
#[derive(Debug)]
pub enum Scalar<'a> {
    Nil,
    Int(i64),
    Str(Cow<'a, str>),
}

/// What the raw `fetch_table` pushes for a field of kind `Records`.
#[derive(Debug)]
pub enum TableShape<'s> {
    /// An empty array.
    Empty,
    /// `{ [name] = true, ... }`.
    Set(&'s [Anomaly]),
    /// Records to build: left to `fetch`.
    Records,
}

/// An array field's values as the raw `fetch_array` pushes them: strings are ranges of `text`,
/// so both buffers are reused from call to call.
#[derive(Debug, Default)]
pub struct Cells {
    text: String,
    pub cells: Vec<Cell>,
}

/// One value of an array field; `Missing` becomes false in Lua (arrays have no holes).
#[derive(Debug, Clone, Copy)]
pub enum Cell {
    Missing,
    Bool(bool),
    Int(i64),
    Num(f64),
    /// `text[start..end]`
    Str(usize, usize),
}

impl Cells {
    fn clear(&mut self) {
        self.text.clear();
        self.cells.clear();
    }

    fn push(&mut self, f: Field<'_>) {
        let cell = match f {
            Field::Nil => Cell::Missing,
            Field::Bool(b) => Cell::Bool(b),
            Field::Int(i) => Cell::Int(i),
            Field::Num(n) => Cell::Num(n),
            Field::Str(s) => {
                let start = self.text.len();
                self.text.push_str(s);
                Cell::Str(start, self.text.len())
            }
        };
        self.cells.push(cell);
    }

    /// The string of a `Cell::Str`.
    pub fn str(&self, start: usize, end: usize) -> &str {
        self.text.get(start..end).unwrap_or_default()
    }

    /// The strings pushed so far.
    fn strs(&self) -> impl Iterator<Item = &str> {
        self.cells.iter().filter_map(|c| match *c {
            Cell::Str(s, e) => Some(self.str(s, e)),
            _ => None,
        })
    }
}

/// How `msg:stat` combines the counts of several keys, column by column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Combine {
    Max,
    Sum,
    Min,
    Median,
}

impl Combine {
    fn parse(s: &[u8]) -> Option<Self> {
        match s {
            b"max" => Some(Combine::Max),
            b"sum" => Some(Combine::Sum),
            b"min" => Some(Combine::Min),
            b"median" => Some(Combine::Median),
            _ => None,
        }
    }
}

/// How window names map to window indices (`10m`, `1h`, ...).
#[derive(Debug, Clone, Default)]
pub struct WindowNames {
    names: Vec<String>,
}

impl WindowNames {
    pub fn new(windows_secs: &[u64]) -> Self {
        WindowNames {
            names: windows_secs.iter().map(|&s| window_name(s)).collect(),
        }
    }

    pub fn index(&self, name: &[u8]) -> Option<usize> {
        self.names.iter().position(|n| n.as_bytes() == name)
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// `600` → `10m`, `3600` → `1h`, `86400` → `24h`, `604800` → `7d`.
pub fn window_name(secs: u64) -> String {
    if secs >= 2 * 86_400 && secs.is_multiple_of(86_400) {
        format!("{}d", secs / 86_400)
    } else if secs.is_multiple_of(3_600) {
        format!("{}h", secs / 3_600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

fn url_source(s: UrlSource) -> &'static str {
    match s {
        UrlSource::Text => "text",
        UrlSource::HtmlHref => "html_href",
        UrlSource::HtmlSrc => "html_src",
        UrlSource::HtmlAction => "html_action",
        UrlSource::HtmlBackground => "html_background",
        UrlSource::HtmlText => "html_text",
        UrlSource::Header => "header",
    }
}

pub fn role_name(r: EmailRole) -> &'static str {
    match r {
        EmailRole::From => "from",
        EmailRole::Sender => "sender",
        EmailRole::ReplyTo => "reply_to",
        EmailRole::ReturnPath => "return_path",
        EmailRole::To => "to",
        EmailRole::Cc => "cc",
        EmailRole::EnvelopeFrom => "envelope_from",
        EmailRole::EnvelopeRcpt => "envelope_rcpt",
        EmailRole::Body => "body",
        EmailRole::Mailto => "mailto",
    }
}

fn text(s: &str) -> Field<'_> {
    Field::Str(s)
}

fn opt_text(s: Option<&str>) -> Field<'_> {
    s.map_or(Field::Nil, Field::Str)
}

fn int(i: impl TryInto<i64>) -> Field<'static> {
    Field::Int(i.try_into().unwrap_or(i64::MAX))
}

fn flag(b: bool) -> Field<'static> {
    Field::Bool(b)
}

fn number(n: f64) -> Field<'static> {
    Field::Num(n)
}

/// An array of records as a Lua value (see `ffi/records.rs`: one protected call for the whole
/// array).
fn records<const N: usize>(lua: &Lua, rows: &[Row<'_, N>]) -> Result<Value> {
    Ok(Value::Table(ffi::records(lua, rows)?))
}

/// A string without its leading and trailing white space, borrowed where it was.
fn trim_cow(s: Cow<'_, str>) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
        Cow::Owned(o) if o.trim().len() == o.len() => Cow::Owned(o),
        Cow::Owned(o) => Cow::Owned(o.trim().to_string()),
    }
}

/// The index of a window given by name (`"1h"`).
fn window_arg(windows: &WindowNames, window: &Value) -> Result<usize> {
    match window {
        // Compared as bytes: `to_str` would validate UTF-8 on every `msg:stat` call.
        Value::String(s) => windows.index(&s.as_bytes()),
        _ => None,
    }
    .ok_or_else(|| {
        mlua::Error::runtime(format!(
            "unknown window {window:?}; configured: {}",
            windows.names().join(", ")
        ))
    })
}

/// An argument given as a shingle type name or number.
fn kind_arg(v: &Value) -> Result<Kind> {
    let k = match v {
        Value::String(s) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(Kind::parse),
        Value::Integer(i) => u16::try_from(*i).ok().and_then(Kind::from_id),
        Value::Number(n) => Kind::from_id(*n as u16),
        _ => None,
    };
    k.ok_or_else(|| mlua::Error::runtime(format!("unknown shingle type {v:?}")))
}

impl MessageData<'_> {
    fn mime_headers(&self) -> &[mail_parser::Header<'_>] {
        self.message
            .mime
            .as_ref()
            .map(|m| m.headers())
            .unwrap_or_default()
    }

    fn raw_value(&self, h: &mail_parser::Header<'_>) -> Cow<'_, str> {
        crate::message::utf8_lossy(self.raw_bytes(h))
    }

    /// A header's raw value, undecoded.
    fn raw_bytes(&self, h: &mail_parser::Header<'_>) -> &[u8] {
        let raw = self.message.raw;
        let (s, e) = (h.offset_start as usize, h.offset_end as usize);
        raw.get(s..e).unwrap_or_default()
    }

    /// A header's value as text (`message::header_text`).
    fn header_text<'s>(&'s self, h: &'s mail_parser::Header<'_>) -> Cow<'s, str> {
        crate::message::header_text(h, self.message.raw)
    }

    /// The headers called `name` (in any case), in order. The headers borrow from `self` only,
    /// not from `name`.
    fn named<'h, 'n>(
        &'h self,
        name: &'n str,
    ) -> impl Iterator<Item = &'h mail_parser::Header<'h>> + use<'h, 'n> {
        // (the keys say which names can be equal; only those are compared)
        let key = crate::message::header_key(name.as_bytes());
        (self.mime_headers().iter())
            .zip(&self.message.header_keys)
            .filter(move |(h, &k)| k == key && h.name.as_str().eq_ignore_ascii_case(name))
            .map(|(h, _)| h)
    }

    /// The MIME parts, as `msg:parts()` lists them (none when the message did not parse).
    fn mime_parts(&self) -> impl Iterator<Item = &mail_parser::MessagePart<'_>> {
        self.message.mime.iter().flat_map(|m| m.parts.iter())
    }

    /// The value of a field of kind `Array` into `out` (cleared first); `Ok(false)` for the
    /// other fields.
    pub fn array(
        &self,
        id: FieldId,
        a: Arg<'_>,
        out: &mut Cells,
    ) -> std::result::Result<bool, &'static CStr> {
        use FieldId as F;
        out.clear();
        let e = self.entities;
        let mut strings =
            |items: &mut dyn Iterator<Item = &str>| items.for_each(|s| out.push(text(s)));
        match id {
            F::Recipients => {
                // envelope recipients, else the To and Cc addresses
                if e.emails_with(EmailRole::EnvelopeRcpt).next().is_some() {
                    strings(
                        &mut e
                            .emails_with(EmailRole::EnvelopeRcpt)
                            .map(|r| r.address.as_str()),
                    );
                } else {
                    strings(
                        &mut (e.emails.iter())
                            .filter(|r| matches!(r.role, EmailRole::To | EmailRole::Cc))
                            .map(|r| r.address.as_str()),
                    );
                }
            }
            // From: address, domain, display name (false when none); empty without a From
            F::From => {
                if let Some(f) = e.from() {
                    out.push(text(&f.address));
                    out.push(text(&f.domain));
                    out.push(opt_text(f.name.as_deref()));
                }
            }
            // Reply-To: address, domain; empty without one
            F::ReplyTo => {
                if let Some(r) = e.emails_with(EmailRole::ReplyTo).next() {
                    out.push(text(&r.address));
                    out.push(text(&r.domain));
                }
            }
            F::Rcpt => strings(&mut self.envelope.rcpt_to.iter().map(String::as_str)),
            F::Hosts => strings(&mut e.hosts.iter().map(String::as_str)),
            F::Domains => strings(&mut e.domains.iter().map(String::as_str)),
            F::MixedScriptWords => {
                strings(&mut self.message.mixed_script_words.iter().map(String::as_str))
            }
            // `content_type` and `encoding` of the `msg:parts()` records, without the records
            F::PartTypes => (self.mime_parts()).for_each(|p| out.push(text(&part_type(p)))),
            F::PartEncodings => {
                (self.mime_parts()).for_each(|p| out.push(opt_text(part_encoding(p).as_deref())))
            }
            F::Headers => {
                let Arg::Str(name) = a else {
                    return Err(c"header name must be a string");
                };
                let Ok(name) = std::str::from_utf8(name) else {
                    return Err(c"header name must be UTF-8");
                };
                for h in self.named(name) {
                    out.push(text(&self.header_text(h)));
                }
            }
            F::HopDomains => {
                // the registrable domains of the `msg:ips()` hosts, each once, in order
                for d in (e.ips.iter()).filter_map(|ip| ip.domain.as_deref()) {
                    if !out.strs().any(|x| x == d) {
                        out.push(text(d));
                    }
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The value of a field of kind `Scalar`; `Ok(None)` for the other fields. Errors are
    /// static, so the raw `fetch_scalar` can raise them without owning anything.
    pub fn scalar<'s>(
        &'s self,
        id: FieldId,
        a: Arg<'_>,
    ) -> std::result::Result<Option<Scalar<'s>>, &'static CStr> {
        use FieldId as F;
        let m = self.message;
        let e = self.entities;
        let s = |s: &'s str| Scalar::Str(Cow::Borrowed(s));
        let opt = |s: Option<&'s str>| s.map_or(Scalar::Nil, |s| Scalar::Str(Cow::Borrowed(s)));
        Ok(Some(match id {
            F::Subject => s(&m.subject.display),
            F::SubjectNormalized => s(&m.subject.normalized),
            F::Ip => match self.envelope.client_ip {
                Some(ip) => Scalar::Str(Cow::Owned(IpText::new(ip).as_str().to_string())),
                None => Scalar::Nil,
            },
            F::Helo => opt(self.envelope.helo.as_deref()),
            F::MailFrom => opt(self.envelope.mail_from.as_deref()),
            F::Hostname => opt(self.envelope.hostname.as_deref()),
            F::User => opt(self.envelope.user.as_deref()),
            F::QueueId => opt(self.envelope.queue_id.as_deref()),
            F::DeliverTo => opt(self.envelope.deliver_to.as_deref()),
            F::Text => s(&m.body.display),
            F::TextNormalized => s(&m.body.normalized),
            F::HtmlText => s(&m.html_text),
            F::Html => Scalar::Str(self.html_source()),
            F::ReceivedCount => Scalar::Int(self.named("received").count() as i64),
            F::Date => m.date.time.map_or(Scalar::Nil, Scalar::Int),
            F::MessageId => opt(e.message_id.as_deref()),
            F::MessageIdDomain => opt(e.message_id_domain.as_deref()),
            F::Mailer => opt(e.mailer.as_deref()),
            F::Size => Scalar::Int(m.raw.len() as i64),
            F::Direction => s(if self.traffic.outbound {
                "outbound"
            } else {
                "inbound"
            }),
            F::Reply => Scalar::Int(i64::from(self.traffic.replied)),
            F::KnownCorrespondent => {
                Scalar::Int(i64::try_from(self.traffic.correspondent).unwrap_or(i64::MAX))
            }
            F::Now => Scalar::Int(self.now as i64),
            F::ReceivedTime => {
                let n = match a {
                    Arg::Int(n) if n >= 1 => n as usize,
                    Arg::None => 1,
                    // the hop where the first public address of `msg:ips()` handed it over
                    Arg::Str(b"public") => {
                        let first_public = (e.ips.iter())
                            .find(|ip| ip.hop.is_some() && !ip.private)
                            .and_then(|ip| ip.hop);
                        match first_public {
                            Some(hop) => hop + 1,
                            None => return Ok(Some(Scalar::Nil)),
                        }
                    }
                    _ => return Err(c"msg:received_time: n must be >= 1 or \"public\""),
                };
                (e.hops.get(n - 1))
                    .and_then(|h| h.time)
                    .map_or(Scalar::Nil, Scalar::Int)
            }
            F::DateZone => {
                // the Date's zone when it is wrong: "b:" + an impossible offset, "m:" + a zone
                // in no RFC 5322 form (the prelude splits it for `msg:date_zone()`)
                match &m.date.zone_problem {
                    Some(ZoneProblem::BadOffset(z)) => Scalar::Str(Cow::Owned(format!("b:{z}"))),
                    Some(ZoneProblem::Malformed(z)) => Scalar::Str(Cow::Owned(format!("m:{z}"))),
                    None => Scalar::Nil,
                }
            }
            F::SenderIp => match e.ips.first() {
                Some(ip) => Scalar::Str(Cow::Owned(IpText::new(ip.ip).as_str().to_string())),
                None => Scalar::Nil,
            },
            F::BareHeloIp => {
                // the first `msg:ips()` record with `helo_ip`, without the records
                match e.ips.iter().find(|ip| e.helo_ip(ip)) {
                    Some(ip) => Scalar::Str(Cow::Owned(IpText::new(ip.ip).as_str().to_string())),
                    None => Scalar::Nil,
                }
            }
            F::FirstUrl => {
                // the first URL with a flag of its `msg:urls()` record, without the records
                let test: fn(&crate::entities::UrlEntity) -> bool = match a {
                    Arg::Str(b"is_ip") => |u| u.host_is_ip,
                    Arg::Str(b"userinfo") => |u| u.userinfo,
                    _ => return Err(c"msg:first_url: flag must be \"is_ip\" or \"userinfo\""),
                };
                opt(e.urls.iter().find(|u| test(u)).map(|u| u.url.as_str()))
            }
            F::EmailCount => {
                // addresses of one role ("" or none: all), as `msg:emails(role)` lists them
                let role = match a {
                    Arg::None => None,
                    Arg::Str(b"") => None,
                    Arg::Str(r) => Some(r),
                    _ => return Err(c"msg:email_count: role must be a string"),
                };
                let n = e
                    .emails
                    .iter()
                    .filter(|x| role.is_none_or(|r| role_name(x.role).as_bytes() == r))
                    .count();
                Scalar::Int(n as i64)
            }
            F::Header | F::RawHeader | F::HeaderCount => {
                let Arg::Str(name) = a else {
                    return Err(c"header name must be a string");
                };
                let Ok(name) = std::str::from_utf8(name) else {
                    return Err(c"header name must be UTF-8");
                };
                let mut named = self.named(name);
                match id {
                    F::Header => named
                        .next()
                        .map_or(Scalar::Nil, |h| Scalar::Str(self.header_text(h))),
                    F::RawHeader => named
                        .next()
                        .map_or(Scalar::Nil, |h| Scalar::Str(trim_cow(self.raw_value(h)))),
                    _ => Scalar::Int(named.count() as i64),
                }
            }
            _ => return Ok(None),
        }))
    }

    /// How the raw `fetch_table` answers a field of kind `Records`; `None` for other fields.
    pub fn table_shape(&self, id: FieldId) -> Option<TableShape<'_>> {
        use FieldId as F;
        let e = self.entities;
        let empty = match id {
            F::Urls => e.urls.is_empty(),
            F::Anchors => e.anchors.is_empty(),
            F::Ips => e.ips.is_empty(),
            F::Attachments => e.attachments.is_empty(),
            F::Anomalies => return Some(TableShape::Set(self.anomalies.as_slice())),
            _ => return None,
        };
        Some(if empty {
            TableShape::Empty
        } else {
            TableShape::Records
        })
    }

    /// The value of a field of kind `Records` or `Built`, with its argument where it takes
    /// one: arrays of records through `ffi::records` (one protected call each).
    pub fn tables(&self, lua: &Lua, id: FieldId, a: Value) -> Result<Value> {
        use FieldId as F;
        let e = self.entities;
        match id {
            F::Parts => self.parts(lua),
            F::Urls => {
                let rows: Vec<_> = (e.urls.iter())
                    .map(|u| {
                        [
                            (c"url", text(&u.url)),
                            (c"host", text(&u.host)),
                            (c"domain", opt_text(u.domain.as_deref())),
                            (c"is_ip", flag(u.host_is_ip)),
                            (c"source", text(url_source(u.source))),
                            (c"text", opt_text(u.text.as_deref())),
                            (c"userinfo", flag(u.userinfo)),
                        ]
                    })
                    .collect();
                records(lua, &rows)
            }
            F::Anchors => {
                let rows: Vec<_> = (e.anchors.iter())
                    .map(|a| {
                        [
                            (c"text", text(&a.text)),
                            (c"text_domain", text(&a.text_domain)),
                            (c"target_domain", text(&a.target_domain)),
                            (c"mismatch", flag(a.mismatch)),
                        ]
                    })
                    .collect();
                records(lua, &rows)
            }
            F::Ips => {
                // what the rows borrow: the address as text
                let owned: Vec<_> = e.ips.iter().map(|ip| IpText::new(ip.ip)).collect();
                let rows: Vec<_> = (e.ips.iter().zip(&owned))
                    .map(|(ip, addr)| {
                        [
                            (c"ip", text(addr.as_str())),
                            (
                                c"source",
                                text(match ip.source {
                                    IpSource::Client => "client",
                                    IpSource::Received => "received",
                                }),
                            ),
                            (c"hop", ip.hop.map_or(Field::Nil, int)),
                            (c"host", opt_text(ip.host.as_deref())),
                            (c"domain", opt_text(ip.domain.as_deref())),
                            (c"private", flag(ip.private)),
                            (c"helo_ip", flag(e.helo_ip(ip))),
                        ]
                    })
                    .collect();
                records(lua, &rows)
            }
            F::Attachments => {
                let rows: Vec<_> = (e.attachments.iter())
                    .map(|a| {
                        [
                            (c"name", text(&a.name)),
                            (c"ext", opt_text(a.extension.as_deref())),
                            (c"content_type", text(&a.content_type)),
                            (c"size", int(a.size)),
                            (c"hash", text(&a.hash)),
                            (c"executable", flag(a.flags.executable)),
                            (c"double_extension", flag(a.flags.double_extension)),
                        ]
                    })
                    .collect();
                records(lua, &rows)
            }
            F::Anomalies => Ok(Value::Table(
                lua.create_table_from(self.anomalies.iter().map(|a| (a.as_str(), true)))?,
            )),
            F::Emails => {
                // all addresses, or those of one role
                let role = match &a {
                    Value::Nil => None,
                    Value::String(r) if r.as_bytes().is_empty() => None,
                    Value::String(r) => Some(r.to_str()?),
                    _ => return Err(mlua::Error::runtime("msg:emails: role must be a string")),
                };
                let mut rows = Vec::new();
                for x in &e.emails {
                    let name = role_name(x.role);
                    if role.as_deref().is_some_and(|r| r != name) {
                        continue;
                    }
                    rows.push([
                        (c"address", text(&x.address)),
                        (c"domain", text(&x.domain)),
                        (c"name", opt_text(x.name.as_deref())),
                        (c"role", text(name)),
                    ]);
                }
                records(lua, &rows)
            }
            F::Auth => self.auth_table(lua),
            F::Dnsbl => {
                let hits = self.net.map_or(&[][..], |n| &n.lists[..]);
                let rows: Vec<_> = hits
                    .iter()
                    .map(|h| {
                        [
                            (c"symbol", text(&h.symbol)),
                            (c"zone", text(&h.zone)),
                            (c"name", text(&h.name)),
                            (c"check", text(h.check)),
                            (c"code", text(&h.code)),
                            (c"blocked", flag(h.blocked)),
                        ]
                    })
                    .collect();
                records(lua, &rows)
            }
            F::Shingles => {
                let kind = kind_arg(&a)?;
                Ok(Value::Table(
                    lua.create_sequence_from(
                        self.shingles
                            .iter()
                            .filter(|s| s.kind == kind)
                            .map(|sh| format!("{:016x}", sh.hash)),
                    )?,
                ))
            }
            _ => Err(mlua::Error::runtime(format!(
                "unknown msg field {}",
                id.id()
            ))),
        }
    }

    /// `msg:auth()`: `{ ran, spf, helo, dkim = { ... }, dmarc, arc, from_domain,
    /// aligned_dkim_domain, list_failures }`, each method a table of `result` (RFC 8601's
    /// words), `domain`, `selector`, `policy`, `reason` (nil where none) and, for DKIM,
    /// `aligned`. Without checks (`ran` false) every method is `{ result = "none" }`.
    fn auth_table(&self, lua: &Lua) -> Result<Value> {
        use crate::auth::MethodResult;
        // Absent values are left unset rather than set to nil (the same to a reader, and a
        // message's table is mostly absent values: each set is a call into Lua).
        let method = |m: Option<&MethodResult>| -> Result<Table> {
            let t = lua.create_table_with_capacity(0, 6)?;
            let none = MethodResult::default();
            let m = m.unwrap_or(&none);
            t.raw_set("result", m.result.as_str())?;
            for (k, v) in [
                ("domain", &m.domain),
                ("selector", &m.selector),
                ("policy", &m.policy),
                ("reason", &m.reason),
            ] {
                if let Some(v) = v {
                    t.raw_set(k, v.as_str())?;
                }
            }
            t.raw_set("aligned", m.aligned)?;
            Ok(t)
        };
        let t = lua.create_table_with_capacity(0, 10)?;
        let net = self.net;
        let a = net.map(|n| &n.auth);
        t.raw_set("ran", net.is_some_and(|n| n.ran))?;
        t.raw_set("spf", method(a.and_then(|a| a.spf.as_ref()))?)?;
        t.raw_set("helo", method(a.and_then(|a| a.helo.as_ref()))?)?;
        t.raw_set("dmarc", method(a.and_then(|a| a.dmarc.as_ref()))?)?;
        t.raw_set("arc", method(a.and_then(|a| a.arc.as_ref()))?)?;
        let dkim = lua.create_table()?;
        for (i, d) in a.map_or(&[][..], |a| &a.dkim[..]).iter().enumerate() {
            dkim.raw_set(i + 1, method(Some(d))?)?;
        }
        t.raw_set("dkim", dkim)?;
        if let Some(d) = a.and_then(|a| a.from_domain.as_deref()) {
            t.raw_set("from_domain", d)?;
        }
        if let Some(d) = a.and_then(|a| a.aligned_dkim_domain()) {
            t.raw_set("aligned_dkim_domain", d)?;
        }
        let failures = lua.create_sequence_from(
            net.map_or(&[][..], |n| &n.list_failures[..])
                .iter()
                .map(String::as_str),
        )?;
        t.raw_set("list_failures", failures)?;
        Ok(Value::Table(t))
    }

    /// `msg:stat(type, window[, how[, min_seen]])`: the elementwise max (or sum, min, median) of
    /// the window counts of this message's keys of a type that were seen at least `min_seen`
    /// times in the window (default 0: all of them), then the number of keys combined and the
    /// number of keys of the type.
    pub fn stat(
        &self,
        windows: &WindowNames,
        kind: &Value,
        window: &Value,
        how: &Value,
        min_seen: &Value,
    ) -> Result<[u64; 7]> {
        let kind = kind_arg(kind)?;
        let w = window_arg(windows, window)?;
        let how = match how {
            Value::Nil => Some(Combine::Max),
            Value::String(s) => Combine::parse(&s.as_bytes()),
            _ => None,
        }
        .ok_or_else(|| {
            mlua::Error::runtime("msg:stat: `how` must be \"max\", \"sum\", \"min\" or \"median\"")
        })?;
        let min_seen = match min_seen {
            Value::Nil => Some(0),
            Value::Integer(i) => u64::try_from(*i).ok(),
            Value::Number(n) if n.fract() == 0.0 && *n >= 0.0 => Some(*n as u64),
            _ => None,
        }
        .ok_or_else(|| mlua::Error::runtime("msg:stat: `min_seen` must be a whole number >= 0"))?;
        Ok(self.combined(0..self.shingles.len(), kind, w, how, min_seen))
    }

    /// `stat` from arguments as the raw C function reads them; None for any bad argument (the
    /// caller then asks `stat` for the error).
    pub fn stat_args(
        &self,
        windows: &WindowNames,
        index: &KindIndex,
        kind: Arg<'_>,
        window: Arg<'_>,
        how: Arg<'_>,
        min_seen: Arg<'_>,
    ) -> Option<[u64; 7]> {
        let kind = match kind {
            Arg::Str(s) => std::str::from_utf8(s).ok().and_then(Kind::parse),
            Arg::Int(i) => u16::try_from(i).ok().and_then(Kind::from_id),
            _ => None,
        }?;
        let Arg::Str(window) = window else {
            return None;
        };
        let w = windows.index(window)?;
        let how = match how {
            Arg::None => Combine::Max,
            Arg::Str(s) => Combine::parse(s)?,
            _ => return None,
        };
        let min_seen = match min_seen {
            Arg::None => 0,
            Arg::Int(i) => u64::try_from(i).ok()?,
            _ => return None,
        };
        let rows = index.rows(kind).iter().map(|&i| i as usize);
        Some(self.combined(rows, kind, w, how, min_seen))
    }

    /// `combine` over window `w` of the shingles of `kind` among the `candidates` (indices
    /// into `shingles`; others are skipped, as is a shingle without stats) seen at least
    /// `min_seen` times there, then how many were combined and how many there were.
    fn combined(
        &self,
        candidates: impl Iterator<Item = usize>,
        kind: Kind,
        w: usize,
        how: Combine,
        min_seen: u64,
    ) -> [u64; 7] {
        let mut all = 0u64;
        let mut taken = 0u64;
        let stats = self.stats_of(&[kind]);
        let rows = candidates
            .filter_map(|i| Some((self.shingles.get(i)?, stats.get(i)?)))
            .filter(|(s, _)| s.kind == kind)
            .map(|(_, c)| c.windows.get(w).copied().unwrap_or_default())
            .filter(|r| {
                all += 1;
                let keep = r[0] >= min_seen;
                taken += u64::from(keep);
                keep
            });
        let [a, b, c, d, e] = combine(rows, how);
        [a, b, c, d, e, taken, all]
    }

    /// `msg:stats(type[, window])`: one table per key, with a table per window, or with
    /// the counts of the one window asked for.
    pub fn stats_table(
        &self,
        lua: &Lua,
        windows: &WindowNames,
        kind: &Value,
        window: &Value,
    ) -> Result<Table> {
        let kind = kind_arg(kind)?;
        let only = match window {
            Value::Nil => None,
            w => Some(window_arg(windows, w)?),
        };
        let stats = self.stats_of(&[kind]);
        let keys: Vec<_> = (self.shingles.iter().zip(stats.iter()))
            .filter(|(s, _)| s.kind == kind)
            .map(|(s, c)| (format!("{:016x}", s.hash), c))
            .collect();
        if let Some(w) = only {
            let rows: Vec<_> = (keys.iter())
                .map(|(hash, c)| {
                    counts_row(c.windows.get(w).unwrap_or(&Counts::default()), Some(hash))
                })
                .collect();
            return ffi::records(lua, &rows);
        }
        let mut rows = Vec::new();
        for (hash, c) in keys {
            let k = lua.create_table_from(
                windows
                    .names()
                    .iter()
                    .zip(&c.windows)
                    .map(|(name, counts)| {
                        Ok::<_, mlua::Error>((
                            name.as_str(),
                            ffi::record(lua, &counts_row(counts, None))?,
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?,
            )?;
            k.raw_set("hash", hash)?;
            rows.push(k);
        }
        lua.create_sequence_from(rows)
    }

    /// The HTML parts' source, up to `max_html_bytes` (borrowed when there is one part): the
    /// tree's HTML parts, then the cut-off ones the tree holds as plain text.
    fn html_source(&self) -> Cow<'_, str> {
        let Some(mime) = &self.message.mime else {
            return Cow::Borrowed("");
        };
        let mut pieces: Vec<&str> = Vec::new();
        let mut room = self.max_html_bytes;
        let tree_html = mime.parts.iter().filter_map(|part| match &part.body {
            PartType::Html(h) => Some(h.as_ref()),
            _ => None,
        });
        for h in tree_html.chain(self.message.cut_off_html.iter().map(String::as_str)) {
            if room == 0 {
                break;
            }
            let mut end = h.len().min(room);
            while !h.is_char_boundary(end) {
                end -= 1;
            }
            pieces.push(&h[..end]);
            room -= end;
        }
        match pieces.as_slice() {
            [] => Cow::Borrowed(""),
            [one] => Cow::Borrowed(one),
            many => Cow::Owned(many.concat()),
        }
    }

    fn parts(&self, lua: &Lua) -> Result<Value> {
        // what the rows borrow: the lower-cased content type and transfer encoding
        let owned: Vec<_> = (self.mime_parts())
            .map(|part| (part_type(part), part_encoding(part)))
            .collect();
        let rows: Vec<_> = (self.mime_parts().zip(&owned))
            .map(|(part, (ct, encoding))| {
                [
                    (c"content_type", text(ct)),
                    (c"size", int(part.len())),
                    (c"encoding", opt_text(encoding.as_deref())),
                    (c"attachment", flag(part.attachment_name().is_some())),
                ]
            })
            .collect();
        records(lua, &rows)
    }
}

/// The counters of one window as a record, with the spam ratio (and the key's hash).
fn counts_row<'s>(counts: &[u64; 5], hash: Option<&'s str>) -> Row<'s, 7> {
    let judged = counts[Counter::Spam as usize] + counts[Counter::Ham as usize];
    let ratio = if judged == 0 {
        0.0
    } else {
        counts[Counter::Spam as usize] as f64 / judged as f64
    };
    [
        (c"seen", int(counts[Counter::Seen as usize])),
        (c"spam", int(counts[Counter::Spam as usize])),
        (c"ham", int(counts[Counter::Ham as usize])),
        (c"complaints", int(counts[Counter::Complaint as usize])),
        (c"rescues", int(counts[Counter::Rescue as usize])),
        (c"spam_ratio", number(ratio)),
        (c"hash", opt_text(hash)),
    ]
}

/// `msg:parts()`'s `content_type` of a part: type/subtype, lower-cased (text/plain when none).
fn part_type(part: &mail_parser::MessagePart<'_>) -> String {
    match part.content_type() {
        Some(c) => match c.subtype() {
            Some(s) => format!("{}/{}", c.ctype(), s).to_ascii_lowercase(),
            None => c.ctype().to_ascii_lowercase(),
        },
        None => "text/plain".to_string(),
    }
}

/// `msg:parts()`'s `encoding` of a part: its Content-Transfer-Encoding, lower-cased, or None.
fn part_encoding(part: &mail_parser::MessagePart<'_>) -> Option<String> {
    part.content_transfer_encoding()
        .map(|e| e.trim().to_ascii_lowercase())
}

/// The elementwise max (or sum, min, median) of the window counts of some keys.
fn combine(rows: impl Iterator<Item = Counts>, how: Combine) -> [u64; 5] {
    let mut out = [0u64; 5];
    match how {
        Combine::Max | Combine::Sum => {
            for r in rows {
                for (o, v) in out.iter_mut().zip(r) {
                    *o = if how == Combine::Max {
                        (*o).max(v)
                    } else {
                        o.saturating_add(v)
                    };
                }
            }
        }
        Combine::Min | Combine::Median => {
            let rows: Vec<[u64; 5]> = rows.collect();
            if !rows.is_empty() {
                for (i, o) in out.iter_mut().enumerate() {
                    let mut col: Vec<u64> = rows.iter().map(|r| r[i]).collect();
                    col.sort_unstable();
                    *o = if how == Combine::Min {
                        col[0]
                    } else {
                        col[col.len() / 2]
                    };
                }
            }
        }
    }
    out
}

/// A message's shingles grouped by kind, for `msg:stat`: the indices of its shingles in
/// order of (kind number modulo `KIND_BUCKETS`, position), and where each bucket starts. A
/// counting sort per scan, built at its first `msg:stat`; a lookup then reads one kind's rows
/// instead of testing every shingle's kind (~700 instructions a call before).
#[derive(Debug, Default)]
pub struct KindIndex {
    order: Vec<u32>,
    start: Vec<u32>,
    next: Vec<u32>,
}

const KIND_BUCKETS: usize = 64;

impl KindIndex {
    /// Rebuilds the index over `shingles`, reusing its buffers.
    pub fn build(&mut self, shingles: &[Shingle]) {
        let bucket = |s: &Shingle| usize::from(s.kind.id()) % KIND_BUCKETS;
        self.start.clear();
        self.start.resize(KIND_BUCKETS + 1, 0);
        for s in shingles {
            self.start[bucket(s) + 1] += 1;
        }
        for b in 0..KIND_BUCKETS {
            self.start[b + 1] += self.start[b];
        }
        self.order.clear();
        self.order.resize(shingles.len(), 0);
        self.next.clear();
        self.next.extend_from_slice(&self.start[..KIND_BUCKETS]);
        for (i, s) in shingles.iter().enumerate() {
            let slot = &mut self.next[bucket(s)];
            self.order[*slot as usize] = i as u32;
            *slot += 1;
        }
    }

    /// The indices of the shingles in `kind`'s bucket, in order.
    fn rows(&self, kind: Kind) -> &[u32] {
        let b = usize::from(kind.id()) % KIND_BUCKETS;
        match (self.start.get(b), self.start.get(b + 1)) {
            (Some(&a), Some(&e)) => self.order.get(a as usize..e as usize).unwrap_or_default(),
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The index gives each kind's shingles, in their order: what testing every shingle's
        /// kind gives. Fails when a bucket is cut short or a row is placed out of order.
        #[test]
        fn kind_index_rows_are_each_kinds_shingles_in_order(
            kinds in proptest::collection::vec(0..Kind::ALL.len(), 0..300),
        ) {
            let shingles: Vec<Shingle> = (kinds.iter().enumerate())
                .map(|(i, &k)| Shingle { kind: Kind::ALL[k], hash: i as u64 })
                .collect();
            let mut index = KindIndex::default();
            // built twice: a rebuild reuses the buffers of a larger message's index
            index.build(&shingles[..shingles.len() / 2]);
            index.build(&shingles);
            for &kind in Kind::ALL {
                let got: Vec<usize> = (index.rows(kind).iter())
                    .map(|&i| i as usize)
                    .filter(|&i| shingles[i].kind == kind)
                    .collect();
                let expected: Vec<usize> =
                    (0..shingles.len()).filter(|&i| shingles[i].kind == kind).collect();
                proptest::prop_assert_eq!(got, expected);
            }
        }
    }

    #[test]
    fn window_names() {
        let w: Vec<String> = [600, 3600, 86_400, 604_800, 1_209_600, 90]
            .iter()
            .map(|&s| window_name(s))
            .collect();
        assert_eq!(w, ["10m", "1h", "24h", "7d", "14d", "90s"]);
    }
}
