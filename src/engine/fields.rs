//! The fields of the `msg` view: one table, from which the Rust dispatch (`view/mod.rs`), the raw
//! C functions (`ffi/fields.rs`) and the prelude's name table (handed to `prelude.lua` when a
//! state is built) all take their ids. Adding a field: one line here, its accessor in
//! `view/mod.rs` (the `match` of its kind), and, for a field that is not `Simple`, its method in
//! the prelude.

/// How a field's value is made, which decides the path that fetches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// One string, integer or nil: `MessageData::scalar`, pushed by the raw `fetch_scalar`.
    Scalar,
    /// An array of strings, numbers and booleans: `MessageData::array`, pushed by the raw
    /// `fetch_array`.
    Array,
    /// An array of records (or the anomaly set): the raw `fetch_table` pushes it when it needs
    /// no record (`MessageData::table_shape`), else `MessageData::tables` builds it.
    Records,
    /// A table only the mlua `fetch` builds (`MessageData::tables`): the raw path would never
    /// answer (a message nearly always has parts; `emails` and `shingles` take an argument),
    /// or the runner answers it (`classify` needs the hits so far).
    Built,
    /// A table the prelude assembles from other fields: only its cache slot.
    Composite,
}

/// How the prelude exposes a field as a method of `msg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `msg:name()`, the value cached for the scan (the prelude's `field`).
    Simple,
    /// `msg:name(arg)`: the raw C closure itself is the method (no Lua function between).
    Method,
    /// A method the prelude writes over the field (an argument, a default, a split value).
    Custom,
}

macro_rules! fields {
    ($($(#[$doc:meta])* $variant:ident = $id:literal, $name:literal, $kind:ident, $access:ident;)*) => {
        /// A field of `msg`; the discriminant is its id in the prelude's cache and the raw
        /// functions' first argument.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum FieldId {
            $($(#[$doc])* $variant = $id,)*
        }

        impl FieldId {
            /// Every field, in id order.
            pub const ALL: &'static [FieldId] = &[$(FieldId::$variant),*];

            /// The field of an id the prelude passed.
            #[inline]
            pub const fn from_id(id: u8) -> Option<FieldId> {
                match id {
                    $($id => Some(FieldId::$variant),)*
                    _ => None,
                }
            }

            /// Its name in the prelude (the method's, for `Simple` and `Method` fields).
            pub const fn name(self) -> &'static str {
                match self {
                    $(FieldId::$variant => $name,)*
                }
            }

            pub const fn kind(self) -> FieldKind {
                match self {
                    $(FieldId::$variant => FieldKind::$kind,)*
                }
            }

            pub const fn access(self) -> Access {
                match self {
                    $(FieldId::$variant => Access::$access,)*
                }
            }
        }
    };
}

fields! {
    Subject = 1, "subject", Scalar, Simple;
    SubjectNormalized = 2, "subject_normalized", Scalar, Simple;
    /// From: address, domain, display name (false when none); empty without a From.
    From = 3, "from", Array, Custom;
    /// Reply-To: address, domain; empty without one.
    ReplyTo = 4, "reply_to", Array, Custom;
    Recipients = 5, "recipients", Array, Simple;
    Ip = 6, "ip", Scalar, Simple;
    Helo = 7, "helo", Scalar, Simple;
    MailFrom = 8, "mail_from", Scalar, Simple;
    Rcpt = 9, "rcpt", Array, Simple;
    Text = 10, "text", Scalar, Simple;
    TextNormalized = 11, "text_normalized", Scalar, Simple;
    HtmlText = 12, "html_text", Scalar, Simple;
    Html = 13, "html", Scalar, Simple;
    Parts = 14, "parts", Built, Simple;
    Urls = 15, "urls", Records, Simple;
    Hosts = 16, "hosts", Array, Simple;
    Domains = 17, "domains", Array, Simple;
    Anchors = 18, "anchors", Records, Simple;
    Ips = 19, "ips", Records, Simple;
    ReceivedCount = 20, "received_count", Scalar, Simple;
    Attachments = 21, "attachments", Records, Simple;
    /// `{ [name] = true, ... }`.
    Anomalies = 22, "anomalies", Records, Simple;
    MixedScriptWords = 23, "mixed_script_words", Array, Simple;
    Date = 24, "date", Scalar, Simple;
    MessageId = 25, "message_id", Scalar, Simple;
    MessageIdDomain = 26, "message_id_domain", Scalar, Simple;
    Mailer = 27, "mailer", Scalar, Simple;
    Size = 28, "size", Scalar, Simple;
    Now = 29, "now", Scalar, Simple;
    /// Argument: a role ("" for all).
    Emails = 30, "emails", Built, Custom;
    /// Argument: the hop (1-based) or "public".
    ReceivedTime = 31, "received_time", Scalar, Custom;
    /// Argument: a role ("" for all).
    EmailCount = 32, "email_count", Scalar, Custom;
    /// "b:" + an impossible offset, "m:" + a malformed zone; the prelude splits it.
    DateZone = 33, "date_zone", Scalar, Custom;
    /// Argument: "is_ip" or "userinfo".
    FirstUrl = 34, "first_url", Scalar, Custom;
    SenderIp = 35, "sender_ip", Scalar, Simple;
    BareHeloIp = 36, "bare_helo_ip", Scalar, Simple;
    HopDomains = 37, "hop_domains", Array, Simple;
    PartTypes = 38, "part_types", Array, Simple;
    PartEncodings = 39, "part_encodings", Array, Simple;
    /// Argument: the header's name (also for the next three).
    Header = 40, "header", Scalar, Method;
    Headers = 41, "headers", Array, Custom;
    RawHeader = 42, "raw_header", Scalar, Method;
    HeaderCount = 43, "header_count", Scalar, Method;
    /// Argument: the shingle type.
    Shingles = 46, "shingles", Built, Custom;
    /// The classifier's probability (answered by the runner's `fetch`).
    Classify = 47, "classify", Built, Custom;
    Hostname = 48, "hostname", Scalar, Simple;
    User = 49, "user", Scalar, Simple;
    QueueId = 50, "queue_id", Scalar, Simple;
    DeliverTo = 51, "deliver_to", Scalar, Simple;
    /// `msg:envelope()`: the SMTP envelope in one table.
    Envelope = 52, "envelope", Composite, Custom;
    /// `msg:auth()`: SPF, DKIM, DMARC and ARC results (the network checks'; offline: not run).
    Auth = 53, "auth", Built, Simple;
    /// `msg:dnsbl()`: DNS list hits, `{ symbol, zone, name, check, code, blocked }` each.
    Dnsbl = 54, "dnsbl", Built, Simple;
    /// Naive Bayes' probability (answered by the runner's `fetch`, like `classify`).
    Bayes = 55, "bayes", Built, Custom;
    /// "inbound", or "outbound" (an authenticated client or one of `[outbound] networks`).
    Direction = 56, "direction", Scalar, Simple;
    /// Ids of In-Reply-To/References that our users' outbound mail carried (0: none).
    Reply = 57, "reply", Scalar, Simple;
    /// Messages the recipient sent to this sender, counted only when the sender
    /// authenticated its From domain (aligned DKIM or SPF pass); 0 otherwise.
    KnownCorrespondent = 58, "known_correspondent", Scalar, Simple;
}

impl FieldId {
    /// The id the prelude and the raw functions use.
    #[inline]
    pub const fn id(self) -> u8 {
        self as u8
    }

    /// The ids of the fields of one kind.
    pub fn ids_of(kind: FieldKind) -> impl Iterator<Item = u8> {
        Self::ALL
            .iter()
            .filter(move |f| f.kind() == kind)
            .map(|f| f.id())
    }

    /// The largest id: the prelude's field cache has this many slots.
    pub fn max_id() -> u8 {
        Self::ALL.iter().map(|f| f.id()).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_unique_and_round_trip() {
        let mut names = std::collections::HashSet::new();
        for &f in FieldId::ALL {
            assert_eq!(FieldId::from_id(f.id()), Some(f));
            assert!(names.insert(f.name()), "{} twice", f.name());
        }
        assert_eq!(FieldId::from_id(0), None);
        assert_eq!(FieldId::from_id(44), None);
    }
}
