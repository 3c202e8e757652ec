//! Anomalies: the ways a message deviates from well-formed mail, as data rules can score.

use serde::{Serialize, Serializer};

/// One kind of malformation. The string names are stable: rules and outside tools match them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Anomaly {
    /// No header could be parsed; the whole input was scanned as text.
    NoHeaders,
    /// Headers only: no blank line and no body.
    NoBody,
    /// A body with no text and no attachments.
    EmptyBody,
    MissingDate,
    /// A Date header that does not parse.
    InvalidDate,
    MissingFrom,
    MissingMessageId,
    /// No To, Cc or Bcc.
    MissingTo,
    MultipleFrom,
    /// A header line whose name is not a valid field name; its text was scanned as body.
    InvalidHeader,
    /// Raw bytes ≥ 0x80 in the top-level header block.
    EightBitHeader,
    NulBytes,
    /// A multipart whose closing boundary never comes.
    UnterminatedMultipart,
    /// A multipart Content-Type without a boundary parameter.
    MissingBoundary,
    /// A base64 part with characters outside the alphabet, misplaced padding or a bad length.
    BadBase64,
    /// mail-parser could not decode a part as declared (other than base64).
    EncodingProblem,
    /// A charset that no decoder knows; the text was read as UTF-8.
    UnknownCharset,
    /// An RFC 2047 encoded word that could not be decoded.
    BadEncodedWord,
    /// Text that is not valid in its declared charset (replacement characters).
    InvalidUtf8,
    /// Words that mix scripts (e.g. Latin with Cyrillic look-alikes).
    MixedScript,
    /// The message exceeded `max_message_bytes`.
    MessageTruncated,
    /// A header field exceeded `max_header_bytes`; the rest of it was not read.
    HeaderTruncated,
    /// The message exceeded `max_parts`.
    TooManyParts,
    /// Multiparts or attached messages nested beyond `max_depth`.
    TooDeep,
    /// Decoded body text exceeded `max_text_bytes`.
    TextTruncated,
    /// More HTML links than `max_html_links`, or more URLs than the entity limit.
    TooManyLinks,
    /// A header block with more fields than `max_headers`; the rest were not read (but the last
    /// of each field name the parser knows).
    TooManyHeaders,
    /// The MIME parser panicked (a bug in it); the message was scanned as text.
    ParserPanic,
}

impl Anomaly {
    /// The stable name used in output and by rules.
    pub fn as_str(self) -> &'static str {
        match self {
            Anomaly::NoHeaders => "no_headers",
            Anomaly::NoBody => "no_body",
            Anomaly::EmptyBody => "empty_body",
            Anomaly::MissingDate => "missing_date",
            Anomaly::InvalidDate => "invalid_date",
            Anomaly::MissingFrom => "missing_from",
            Anomaly::MissingMessageId => "missing_message_id",
            Anomaly::MissingTo => "missing_to",
            Anomaly::MultipleFrom => "multiple_from",
            Anomaly::InvalidHeader => "invalid_header",
            Anomaly::EightBitHeader => "8bit_header",
            Anomaly::NulBytes => "nul_bytes",
            Anomaly::UnterminatedMultipart => "unterminated_multipart",
            Anomaly::MissingBoundary => "missing_boundary",
            Anomaly::BadBase64 => "bad_base64",
            Anomaly::EncodingProblem => "encoding_problem",
            Anomaly::UnknownCharset => "unknown_charset",
            Anomaly::BadEncodedWord => "bad_encoded_word",
            Anomaly::InvalidUtf8 => "invalid_utf8",
            Anomaly::MixedScript => "mixed_script",
            Anomaly::MessageTruncated => "message_truncated",
            Anomaly::HeaderTruncated => "header_truncated",
            Anomaly::TooManyParts => "too_many_parts",
            Anomaly::TooDeep => "too_deep",
            Anomaly::TextTruncated => "text_truncated",
            Anomaly::TooManyLinks => "too_many_links",
            Anomaly::TooManyHeaders => "too_many_headers",
            Anomaly::ParserPanic => "parser_panic",
        }
    }
}

impl Serialize for Anomaly {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The anomalies of one message, each once, in the order first met.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Anomalies(Vec<Anomaly>);

impl Anomalies {
    pub fn add(&mut self, anomaly: Anomaly) {
        if !self.0.contains(&anomaly) {
            self.0.push(anomaly);
        }
    }

    pub fn contains(&self, anomaly: Anomaly) -> bool {
        self.0.contains(&anomaly)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The anomalies found, in the order found.
    pub fn as_slice(&self) -> &[Anomaly] {
        &self.0
    }

    pub fn iter(&self) -> impl Iterator<Item = Anomaly> + '_ {
        self.0.iter().copied()
    }
}
