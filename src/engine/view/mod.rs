//! The data of one scan as rules see it (`msg`): borrowed from the analysis, converted to Lua
//! values on first use (the prelude caches them for the rest of the scan).
//!
//! The view maps; it does not derive. Each field's value is a fact `message/`, `entities/` or
//! the store already computed (the recipients, the hops' domains, the part types, the HTML
//! source, the combined counts), put in the form the rules read: this file dispatches a
//! `FieldId` to its value, `records.rs` lays out the arrays of records (`msg:parts()`,
//! `msg:urls()`, ...), `stats.rs` reads the shingles' window counts (`msg:stat`, `msg:stats`).

use std::borrow::Cow;
use std::ffi::CStr;

use mlua::{Lua, Result, Value};

use super::ffi::Field;
use super::fields::FieldId;

use crate::entities::{EmailRole, Entities, IpText};
use crate::message::{
    part_encoding, part_type, Anomalies, Anomaly, Envelope, ParsedMessage, ZoneProblem,
};
use crate::shingle::{Kind, Shingle};
use crate::store::WindowCounts;

mod records;
mod stats;

pub use stats::{window_name, KindIndex, WindowNames};

use records::role_name;

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

/// A string without its leading and trailing white space, borrowed where it was.
fn trim_cow(s: Cow<'_, str>) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
        Cow::Owned(o) if o.trim().len() == o.len() => Cow::Owned(o),
        Cow::Owned(o) => Cow::Owned(o.trim().to_string()),
    }
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
            F::Recipients => strings(&mut e.recipients().map(|r| r.address.as_str())),
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
            F::HopDomains => strings(&mut e.hop_domains().into_iter()),
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
            F::Html => Scalar::Str(crate::message::html_source(m, self.max_html_bytes)),
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
                    Arg::Str(b"public") => match e.first_public_hop() {
                        Some(hop) => hop + 1,
                        None => return Ok(Some(Scalar::Nil)),
                    },
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
        match id {
            F::Parts => self.parts(lua),
            F::Urls => self.urls(lua),
            F::Anchors => self.anchors(lua),
            F::Ips => self.ips(lua),
            F::Attachments => self.attachments(lua),
            F::Anomalies => Ok(Value::Table(
                lua.create_table_from(self.anomalies.iter().map(|a| (a.as_str(), true)))?,
            )),
            F::Emails => self.emails(lua, &a),
            F::Auth => self.auth_table(lua),
            F::Dnsbl => self.dnsbl(lua),
            F::Shingles => self.shingle_hashes(lua, &a),
            _ => Err(mlua::Error::runtime(format!(
                "unknown msg field {}",
                id.id()
            ))),
        }
    }
}
