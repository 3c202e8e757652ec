//! The data of one scan as rules see it (`msg`): borrowed from the analysis, converted to Lua
//! values on first use (the prelude caches them for the rest of the scan).

use std::borrow::Cow;

use mail_parser::{HeaderValue, MimeHeaders, PartType};
use mlua::{IntoLua, Lua, Result, Table, Value};

use crate::entities::{EmailRole, Entities, IpSource, UrlSource};
use crate::message::{Anomalies, Envelope, ParsedMessage};
use crate::shingle::{Kind, Shingle};
use crate::store::{Counter, WindowCounts};

/// Everything the rules may read about one message.
pub struct MessageData<'a> {
    pub message: &'a ParsedMessage<'a>,
    pub entities: &'a Entities,
    pub shingles: &'a [Shingle],
    /// Window sums for each shingle, aligned with `shingles` (empty when no store is used).
    pub stats: &'a [WindowCounts],
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
}

impl MessageData<'_> {
    /// The classifier's features of this message with the symbols hit so far.
    pub fn classifier_features<'s>(
        &self,
        symbols: impl IntoIterator<Item = &'s str>,
    ) -> crate::classify::Features {
        let mut f = crate::classify::extract(self.message, self.entities, self.anomalies);
        for s in symbols {
            f.add_symbol(s);
        }
        f.add_reputation(self.shingles, self.stats, self.reputation_window);
        f.finish();
        f
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

    pub fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
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

fn strings<'s>(lua: &Lua, items: impl Iterator<Item = &'s str>) -> Result<Value> {
    let t = lua.create_table()?;
    for (i, s) in items.enumerate() {
        t.raw_set(i + 1, s)?;
    }
    Ok(Value::Table(t))
}

fn opt_str(lua: &Lua, s: Option<&str>) -> Result<Value> {
    match s {
        Some(s) => s.into_lua(lua),
        None => Ok(Value::Nil),
    }
}

/// The index of a window given by name (`"1h"`).
fn window_arg(windows: &WindowNames, window: &Value) -> Result<usize> {
    match window {
        Value::String(s) => windows.index(&s.to_str()?),
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
        Value::String(s) => Kind::parse(&s.to_str()?),
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
        let raw = self.message.raw;
        let (s, e) = (h.offset_start as usize, h.offset_end as usize);
        if s <= e && e <= raw.len() {
            String::from_utf8_lossy(&raw[s..e])
        } else {
            Cow::Borrowed("")
        }
    }

    /// A header's value as text: decoded where mail-parser decoded it, else the raw value
    /// unfolded and trimmed.
    fn header_text(&self, h: &mail_parser::Header<'_>) -> String {
        match &h.value {
            HeaderValue::Text(t) => t.trim().to_string(),
            HeaderValue::TextList(l) => l.join(", "),
            _ => unfold(&self.raw_value(h)),
        }
    }

    fn named<'h>(
        &'h self,
        name: &'h str,
    ) -> impl Iterator<Item = &'h mail_parser::Header<'h>> + 'h {
        self.mime_headers()
            .iter()
            .filter(move |h| h.name.as_str().eq_ignore_ascii_case(name))
    }

    /// The value of field `id` (see the prelude), with its argument where it takes one.
    pub fn fetch(&self, lua: &Lua, id: u8, a: Value) -> Result<Value> {
        let m = self.message;
        let e = self.entities;
        match id {
            1 => m.subject.display.as_str().into_lua(lua),
            2 => m.subject.normalized.as_str().into_lua(lua),
            3 => match e.from() {
                Some(f) => {
                    let t = lua.create_table()?;
                    t.raw_set(1, f.address.as_str())?;
                    t.raw_set(2, f.domain.as_str())?;
                    if let Some(n) = &f.name {
                        t.raw_set(3, n.as_str())?;
                    }
                    Ok(Value::Table(t))
                }
                None => Ok(Value::Boolean(false)),
            },
            4 => match e.emails_with(EmailRole::ReplyTo).next() {
                Some(r) => {
                    let t = lua.create_table()?;
                    t.raw_set(1, r.address.as_str())?;
                    t.raw_set(2, r.domain.as_str())?;
                    Ok(Value::Table(t))
                }
                None => Ok(Value::Boolean(false)),
            },
            5 => {
                if e.emails_with(EmailRole::EnvelopeRcpt).next().is_some() {
                    strings(
                        lua,
                        e.emails_with(EmailRole::EnvelopeRcpt)
                            .map(|r| r.address.as_str()),
                    )
                } else {
                    strings(
                        lua,
                        e.emails
                            .iter()
                            .filter(|r| matches!(r.role, EmailRole::To | EmailRole::Cc))
                            .map(|r| r.address.as_str()),
                    )
                }
            }
            6 => match self.envelope.client_ip {
                Some(ip) => ip.to_string().into_lua(lua),
                None => Ok(Value::Nil),
            },
            7 => opt_str(lua, self.envelope.helo.as_deref()),
            8 => opt_str(lua, self.envelope.mail_from.as_deref()),
            9 => strings(lua, self.envelope.rcpt_to.iter().map(String::as_str)),
            10 => m.body.display.as_str().into_lua(lua),
            11 => m.body.normalized.as_str().into_lua(lua),
            12 => m.html_text.as_str().into_lua(lua),
            13 => self.html_source().into_lua(lua),
            14 => self.parts(lua),
            15 => {
                let t = lua.create_table_with_capacity(e.urls.len(), 0)?;
                for (i, u) in e.urls.iter().enumerate() {
                    let r = lua.create_table_with_capacity(0, 6)?;
                    r.raw_set("url", u.url.as_str())?;
                    r.raw_set("host", u.host.as_str())?;
                    if let Some(d) = &u.domain {
                        r.raw_set("domain", d.as_str())?;
                    }
                    r.raw_set("is_ip", u.host_is_ip)?;
                    r.raw_set("source", url_source(u.source))?;
                    if let Some(text) = &u.text {
                        r.raw_set("text", text.as_str())?;
                    }
                    t.raw_set(i + 1, r)?;
                }
                Ok(Value::Table(t))
            }
            16 => strings(lua, e.hosts.iter().map(String::as_str)),
            17 => strings(lua, e.domains.iter().map(String::as_str)),
            18 => {
                let t = lua.create_table_with_capacity(e.anchors.len(), 0)?;
                for (i, a) in e.anchors.iter().enumerate() {
                    let r = lua.create_table_with_capacity(0, 4)?;
                    r.raw_set("text", a.text.as_str())?;
                    r.raw_set("text_domain", a.text_domain.as_str())?;
                    r.raw_set("target_domain", a.target_domain.as_str())?;
                    r.raw_set("mismatch", a.mismatch)?;
                    t.raw_set(i + 1, r)?;
                }
                Ok(Value::Table(t))
            }
            19 => {
                let t = lua.create_table_with_capacity(e.ips.len(), 0)?;
                for (i, ip) in e.ips.iter().enumerate() {
                    let r = lua.create_table_with_capacity(0, 5)?;
                    r.raw_set("ip", ip.ip.to_string())?;
                    r.raw_set(
                        "source",
                        match ip.source {
                            IpSource::Client => "client",
                            IpSource::Received => "received",
                        },
                    )?;
                    if let Some(h) = ip.hop {
                        r.raw_set("hop", h)?;
                    }
                    if let Some(h) = &ip.host {
                        r.raw_set("host", h.as_str())?;
                        let lower = h.to_ascii_lowercase();
                        if let Some(d) = crate::entities::url::registrable_domain(&lower) {
                            r.raw_set("domain", d)?;
                        }
                    }
                    t.raw_set(i + 1, r)?;
                }
                Ok(Value::Table(t))
            }
            20 => Ok(Value::Integer(self.named("received").count() as i64)),
            21 => {
                let t = lua.create_table_with_capacity(e.attachments.len(), 0)?;
                for (i, a) in e.attachments.iter().enumerate() {
                    let r = lua.create_table_with_capacity(0, 7)?;
                    r.raw_set("name", a.name.as_str())?;
                    if let Some(x) = &a.extension {
                        r.raw_set("ext", x.as_str())?;
                    }
                    r.raw_set("content_type", a.content_type.as_str())?;
                    r.raw_set("size", a.size)?;
                    r.raw_set("hash", a.hash.as_str())?;
                    r.raw_set("executable", a.flags.executable)?;
                    r.raw_set("double_extension", a.flags.double_extension)?;
                    t.raw_set(i + 1, r)?;
                }
                Ok(Value::Table(t))
            }
            22 => {
                let t = lua.create_table()?;
                for a in self.anomalies.iter() {
                    t.raw_set(a.as_str(), true)?;
                }
                Ok(Value::Table(t))
            }
            23 => strings(lua, m.mixed_script_words.iter().map(String::as_str)),
            24 => match m.mime.as_ref().and_then(|x| x.date()) {
                Some(d) if d.is_valid() => Ok(Value::Integer(d.to_timestamp())),
                _ => Ok(Value::Nil),
            },
            25 => opt_str(lua, e.message_id.as_deref()),
            26 => opt_str(lua, e.message_id_domain.as_deref()),
            27 => opt_str(lua, e.mailer.as_deref()),
            28 => Ok(Value::Integer(m.raw.len() as i64)),
            29 => Ok(Value::Integer(self.now as i64)),
            30 => {
                let t = lua.create_table_with_capacity(e.emails.len(), 0)?;
                for (i, x) in e.emails.iter().enumerate() {
                    let r = lua.create_table_with_capacity(0, 4)?;
                    r.raw_set("address", x.address.as_str())?;
                    r.raw_set("domain", x.domain.as_str())?;
                    if let Some(n) = &x.name {
                        r.raw_set("name", n.as_str())?;
                    }
                    r.raw_set("role", role_name(x.role))?;
                    t.raw_set(i + 1, r)?;
                }
                Ok(Value::Table(t))
            }
            40..=43 => {
                let Value::String(name) = a else {
                    return Err(mlua::Error::runtime("header name must be a string"));
                };
                let name = name.to_str()?;
                match id {
                    40 => match self.named(&name).next() {
                        Some(h) => self.header_text(h).into_lua(lua),
                        None => Ok(Value::Nil),
                    },
                    41 => {
                        let t = lua.create_table()?;
                        for (i, h) in self.named(&name).enumerate() {
                            t.raw_set(i + 1, self.header_text(h))?;
                        }
                        Ok(Value::Table(t))
                    }
                    42 => match self.named(&name).next() {
                        Some(h) => self.raw_value(h).trim().into_lua(lua),
                        None => Ok(Value::Nil),
                    },
                    _ => Ok(Value::Integer(self.named(&name).count() as i64)),
                }
            }
            46 => {
                let kind = kind_arg(&a)?;
                let t = lua.create_table()?;
                for (i, sh) in self.shingles.iter().filter(|s| s.kind == kind).enumerate() {
                    t.raw_set(i + 1, format!("{:016x}", sh.hash))?;
                }
                Ok(Value::Table(t))
            }
            _ => Err(mlua::Error::runtime(format!("unknown msg field {id}"))),
        }
    }

    /// `msg:stat(type, window[, how])`: the elementwise max (or sum, min, median) of the
    /// window counts of this message's keys of a type.
    pub fn stat(
        &self,
        windows: &WindowNames,
        kind: &Value,
        window: &Value,
        how: &Value,
    ) -> Result<[u64; 5]> {
        let kind = kind_arg(kind)?;
        let w = window_arg(windows, window)?;
        let bad_how = || {
            mlua::Error::runtime("msg:stat: `how` must be \"max\", \"sum\", \"min\" or \"median\"")
        };
        let how = match how {
            Value::Nil => Combine::Max,
            Value::String(s) => match &*s.to_str()? {
                "max" => Combine::Max,
                "sum" => Combine::Sum,
                "min" => Combine::Min,
                "median" => Combine::Median,
                _ => return Err(bad_how()),
            },
            _ => return Err(bad_how()),
        };
        let rows = self
            .shingles
            .iter()
            .zip(self.stats)
            .filter(|(s, _)| s.kind == kind)
            .map(|(_, c)| c.windows.get(w).copied().unwrap_or_default());
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
        Ok(out)
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
        let t = lua.create_table()?;
        let mut n = 0;
        for (s, c) in self.shingles.iter().zip(self.stats) {
            if s.kind != kind {
                continue;
            }
            let k = lua.create_table()?;
            k.raw_set("hash", format!("{:016x}", s.hash))?;
            match only {
                Some(w) => set_counts(&k, &c.windows.get(w).copied().unwrap_or_default())?,
                None => {
                    for (name, counts) in windows.names().iter().zip(&c.windows) {
                        let w = lua.create_table_with_capacity(0, 6)?;
                        set_counts(&w, counts)?;
                        k.raw_set(name.as_str(), w)?;
                    }
                }
            }
            n += 1;
            t.raw_set(n, k)?;
        }
        Ok(t)
    }

    fn html_source(&self) -> String {
        let mut out = String::new();
        let Some(mime) = &self.message.mime else {
            return out;
        };
        for part in &mime.parts {
            if let PartType::Html(h) = &part.body {
                let room = self.max_html_bytes.saturating_sub(out.len());
                if room == 0 {
                    break;
                }
                let mut end = h.len().min(room);
                while !h.is_char_boundary(end) {
                    end -= 1;
                }
                out.push_str(&h[..end]);
            }
        }
        out
    }

    fn parts(&self, lua: &Lua) -> Result<Value> {
        let t = lua.create_table()?;
        let Some(mime) = &self.message.mime else {
            return Ok(Value::Table(t));
        };
        for (i, part) in mime.parts.iter().enumerate() {
            let r = lua.create_table_with_capacity(0, 2)?;
            let ct = match part.content_type() {
                Some(c) => match c.subtype() {
                    Some(s) => format!("{}/{}", c.ctype(), s).to_ascii_lowercase(),
                    None => c.ctype().to_ascii_lowercase(),
                },
                None => "text/plain".to_string(),
            };
            r.raw_set("content_type", ct)?;
            r.raw_set("size", part.len())?;
            t.raw_set(i + 1, r)?;
        }
        Ok(Value::Table(t))
    }
}

/// The counters of one window as fields of `t`, and the spam ratio.
fn set_counts(t: &Table, counts: &[u64; 5]) -> Result<()> {
    t.raw_set("seen", counts[Counter::Seen as usize])?;
    t.raw_set("spam", counts[Counter::Spam as usize])?;
    t.raw_set("ham", counts[Counter::Ham as usize])?;
    t.raw_set("complaints", counts[Counter::Complaint as usize])?;
    t.raw_set("rescues", counts[Counter::Rescue as usize])?;
    let judged = counts[Counter::Spam as usize] + counts[Counter::Ham as usize];
    let ratio = if judged == 0 {
        0.0
    } else {
        counts[Counter::Spam as usize] as f64 / judged as f64
    };
    t.raw_set("spam_ratio", ratio)
}

fn unfold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.trim().chars() {
        if c == '\r' || c == '\n' {
            space = true;
            continue;
        }
        if space && (c == ' ' || c == '\t') {
            if !out.ends_with(' ') {
                out.push(' ');
            }
            continue;
        }
        space = false;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_names() {
        let w: Vec<String> = [600, 3600, 86_400, 604_800, 1_209_600, 90]
            .iter()
            .map(|&s| window_name(s))
            .collect();
        assert_eq!(w, ["10m", "1h", "24h", "7d", "14d", "90s"]);
        assert_eq!(unfold(" a\r\n\tb\r\n  c "), "a b c");
    }
}
