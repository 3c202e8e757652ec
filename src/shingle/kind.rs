//! The table of shingle types. A type's number is part of every stored key and of outside tools'
//! queries: once released it never changes and is never reused. Add new types at free numbers.

use serde::{Serialize, Serializer};

macro_rules! kinds {
    ($( $(#[$doc:meta])* $variant:ident = $id:literal, $name:literal; )*) => {
        /// A shingle type: which normalized piece of a message a hash was computed from.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Kind {
            $( $(#[$doc])* $variant = $id, )*
        }

        impl Kind {
            /// Every kind, in table order.
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),*];

            /// The stable number.
            pub fn id(self) -> u16 {
                self as u16
            }

            /// The stable name (as in `scan` output and `/reputation?type=`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }

            /// The kind with this number.
            pub fn from_id(id: u16) -> Option<Kind> {
                match id {
                    $($id => Some(Kind::$variant),)*
                    _ => None,
                }
            }

            /// The kind with this name or number (as a query parameter would give it).
            pub fn parse(s: &str) -> Option<Kind> {
                // (a name as given first: rules ask by name, many times a scan)
                Kind::by_name(s).or_else(|| {
                    let s = s.trim();
                    match s.parse::<u16>() {
                        Ok(id) => Kind::from_id(id),
                        Err(_) => Kind::by_name(s),
                    }
                })
            }

            fn by_name(s: &str) -> Option<Kind> {
                match s {
                    $($name => Some(Kind::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    /// A whole URL in canonical form.
    Url = 1, "url";
    /// The host of a URL.
    UrlHost = 2, "url_host";
    /// The registrable domain of a URL host.
    UrlDomain = 3, "url_domain";
    /// The normalized subject, reply and forward prefixes removed.
    Subject = 8, "subject";
    /// The From address.
    From = 14, "from";
    /// The sending IP: the client IP when known, else the topmost Received hop's IP.
    SenderIp = 15, "sender_ip";
    /// The domain of the From address.
    FromDomain = 16, "from_domain";
    /// The normalized From display name.
    FromName = 17, "from_name";
    /// Each Reply-To address.
    ReplyTo = 18, "reply_to";
    /// The envelope sender (MAIL FROM), else Return-Path.
    EnvelopeFrom = 19, "envelope_from";
    /// The normalized HELO name of the client.
    Helo = 20, "helo";
    /// Each IP of the Received chain.
    ReceivedIp = 21, "received_ip";
    /// The domain of the Message-ID.
    MessageIdDomain = 22, "message_id_domain";
    /// The normalized X-Mailer or User-Agent.
    Mailer = 23, "mailer";
    /// Each address found in the body text or a mailto: link.
    BodyEmail = 24, "body_email";
    /// The whole normalized body text.
    BodyExact = 25, "body_exact";
    /// The /24 (IPv4) or /64 (IPv6) network of the sending IP.
    SenderNet = 26, "sender_net";
    /// Each recipient (envelope RCPT TO, else To and Cc).
    Recipient = 27, "recipient";
    /// The signing domain (`d=`) of a valid DKIM signature aligned with the From domain: a
    /// sender's reputation a forger cannot borrow, since he cannot sign for it. Only from the
    /// network checks (`serve`); offline scans have none.
    DkimDomain = 28, "dkim_domain";
    /// Each normalized attachment file name.
    AttachmentName = 42, "attachment_name";
    /// Each attachment's extension.
    AttachmentExt = 43, "attachment_ext";
    /// Each attachment's content hash (the lower-case SHA-256 hex of `scan` output).
    AttachmentHash = 62, "attachment_hash";
    /// Min-hash values of word 3-grams of the normalized body (32 per message).
    BodyFuzzy = 70, "body_fuzzy";
    /// hash(sender, recipient) for each recipient: the member of a unique-count pair.
    PairSenderRcpt = 71, "pair_sender_rcpt";
    /// hash(sender): the key counting distinct recipients of a sender.
    UniqueSender = 72, "unique_sender";
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_fit_the_collector_table() {
        assert!(Kind::ALL.iter().all(|k| k.id() < 128));
    }

    #[test]
    fn names_and_numbers_round_trip_and_are_unique() {
        let mut ids = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for &k in Kind::ALL {
            assert!(ids.insert(k.id()), "duplicate id {}", k.id());
            assert!(names.insert(k.name()), "duplicate name {}", k.name());
            assert_eq!(Kind::parse(k.name()), Some(k));
            assert_eq!(Kind::parse(&k.id().to_string()), Some(k));
        }
    }

    /// Released numbers are frozen: this list only ever grows.
    #[test]
    fn released_numbers_are_frozen() {
        assert_eq!(Kind::Subject.id(), 8);
        assert_eq!(Kind::From.id(), 14);
        assert_eq!(Kind::SenderIp.id(), 15);
        assert_eq!(Kind::AttachmentName.id(), 42);
        assert_eq!(Kind::AttachmentHash.id(), 62);
        assert_eq!(Kind::BodyFuzzy.id(), 70);
        assert_eq!(Kind::PairSenderRcpt.id(), 71);
        assert_eq!(Kind::UniqueSender.id(), 72);
    }
}
