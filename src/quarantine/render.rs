//! A kept message as a person reads it: the header fields as they came, the text of the body
//! (HTML turned into text by mail-parser: no markup survives, so nothing runs and nothing
//! remote loads wherever it is shown) and the attachments' names. Bounded: a field, the text
//! and the list are cut at fixed sizes.

use mail_parser::{MessageParser, MimeHeaders};

/// Most characters of body text rendered.
const MAX_TEXT: usize = 256 << 10;
/// Most header fields rendered, and characters of one.
const MAX_FIELDS: usize = 200;
const MAX_FIELD: usize = 4096;
const MAX_ATTACHMENTS: usize = 100;

fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push('…');
    }
    s
}

/// The header fields (name, unfolded raw value) of `raw`'s top header block.
pub fn header_fields(raw: &[u8]) -> Vec<(String, String)> {
    let end = memchr::memmem::find(raw, b"\r\n\r\n")
        .or_else(|| memchr::memmem::find(raw, b"\n\n"))
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut out: Vec<(String, String)> = Vec::new();
    for line in head.split('\n') {
        let line = line.trim_end_matches('\r');
        if line.starts_with([' ', '\t']) {
            if let Some(last) = out.last_mut() {
                if last.1.len() < MAX_FIELD {
                    last.1.push(' ');
                    last.1.push_str(line.trim());
                }
            }
            continue;
        }
        if out.len() == MAX_FIELDS {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            out.push((name.trim().to_string(), value.trim().to_string()));
        }
    }
    for f in &mut out {
        f.1 = cut(std::mem::take(&mut f.1), MAX_FIELD);
    }
    out
}

/// The view of a message: `headers` (name, value pairs), `subject`, `text`, `attachments`.
pub fn view(raw: &[u8]) -> serde_json::Value {
    let parsed = MessageParser::default().parse(raw);
    let (subject, text, attachments) = match &parsed {
        Some(m) => {
            let text = m
                .body_text(0)
                .map(|t| cut(t.into_owned(), MAX_TEXT))
                .unwrap_or_default();
            let attachments: Vec<serde_json::Value> = m
                .attachments()
                .take(MAX_ATTACHMENTS)
                .map(|a| {
                    serde_json::json!({
                        "name": a.attachment_name().map(|n| cut(n.to_string(), 256)),
                        "type": a.content_type().map(|c| match c.subtype() {
                            Some(s) => format!("{}/{}", c.ctype(), s),
                            None => c.ctype().to_string(),
                        }),
                        "size": a.len(),
                    })
                })
                .collect();
            (
                m.subject().map(|s| cut(s.to_string(), MAX_FIELD)),
                text,
                attachments,
            )
        }
        None => (None, String::new(), Vec::new()),
    };
    serde_json::json!({
        "headers": header_fields(raw),
        "subject": subject,
        "text": text,
        "attachments": attachments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_text_without_markup() {
        let raw = b"From: a@example.com\r\nSubject: =?utf-8?q?Hi_there?=\r\n  folded\r\n\
Content-Type: text/html\r\n\r\n<html><body><script>alert(1)</script>\
<p>Hello <b>you</b></p><img src=\"http://remote.example/x.png\"></body></html>\r\n";
        let v = view(raw);
        let text = v["text"].as_str().unwrap();
        assert!(text.contains("Hello"), "{text}");
        assert!(!text.contains('<'), "{text}");
        assert!(!text.contains("remote.example"), "{text}");
        assert_eq!(v["subject"], "Hi there folded");
        assert_eq!(v["headers"][1][1], "=?utf-8?q?Hi_there?= folded");
    }
}
