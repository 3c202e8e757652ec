//! The record arrays of `msg` (`msg:parts()`, `msg:urls()`, `msg:ips()`, ...): each field's
//! facts, already derived by `message/` and `entities/`, laid out as rows for `ffi::records`
//! (one protected call for the whole array).

use mail_parser::MimeHeaders;
use mlua::{Lua, Result, Table, Value};

use super::super::ffi::{self, Field, Row};
use super::{flag, int, opt_text, text, MessageData};
use crate::entities::{EmailRole, IpSource, IpText, UrlSource};
use crate::message::{part_encoding, part_type};

/// `source` of a `msg:urls()` record.
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

/// `role` of a `msg:emails()` record, and the role `msg:email_count(role)` counts.
pub(super) fn role_name(r: EmailRole) -> &'static str {
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

/// An array of records as a Lua value (see `ffi/records.rs`: one protected call for the whole
/// array).
fn records<const N: usize>(lua: &Lua, rows: &[Row<'_, N>]) -> Result<Value> {
    Ok(Value::Table(ffi::records(lua, rows)?))
}

impl MessageData<'_> {
    /// `msg:parts()`: each MIME part's content type, size, transfer encoding and whether it
    /// names a file.
    pub(super) fn parts(&self, lua: &Lua) -> Result<Value> {
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

    /// `msg:urls()`
    pub(super) fn urls(&self, lua: &Lua) -> Result<Value> {
        let e = self.entities;
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

    /// `msg:anchors()`
    pub(super) fn anchors(&self, lua: &Lua) -> Result<Value> {
        let e = self.entities;
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

    /// `msg:ips()`
    pub(super) fn ips(&self, lua: &Lua) -> Result<Value> {
        let e = self.entities;
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

    /// `msg:attachments()`
    pub(super) fn attachments(&self, lua: &Lua) -> Result<Value> {
        let e = self.entities;
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

    /// `msg:emails([role])`
    pub(super) fn emails(&self, lua: &Lua, a: &Value) -> Result<Value> {
        let e = self.entities;
        // all addresses, or those of one role
        let role = match a {
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

    /// `msg:dnsbl()`
    pub(super) fn dnsbl(&self, lua: &Lua) -> Result<Value> {
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

    /// `msg:auth()`: `{ ran, spf, helo, dkim = { ... }, dmarc, arc, from_domain,
    /// aligned_dkim_domain, list_failures }`, each method a table of `result` (RFC 8601's
    /// words), `domain`, `selector`, `policy`, `reason` (nil where none) and, for DKIM,
    /// `aligned`. Without checks (`ran` false) every method is `{ result = "none" }`.
    pub(super) fn auth_table(&self, lua: &Lua) -> Result<Value> {
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
}
