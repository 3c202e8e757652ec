//! What a message's MIME parts are, as one answer for every reader: a part's content type and
//! transfer encoding in canonical form, and the HTML source of the message within a byte budget.
//! The rules (`msg:parts()`, `msg:html()`) read these; the classifier's part-type features are
//! meant to (one definition, so the two cannot disagree on a part).

use std::borrow::Cow;

use mail_parser::{MessagePart, MimeHeaders, PartType};

use super::ParsedMessage;

/// A part's content type: `type/subtype` (or the type alone when it has no subtype), in ASCII
/// lower case; `text/plain` when the part has no Content-Type (RFC 2045's default).
pub fn part_type(part: &MessagePart<'_>) -> String {
    match part.content_type() {
        Some(c) => match c.subtype() {
            Some(s) => format!("{}/{}", c.ctype(), s).to_ascii_lowercase(),
            None => c.ctype().to_ascii_lowercase(),
        },
        None => "text/plain".to_string(),
    }
}

/// A part's Content-Transfer-Encoding, trimmed and in ASCII lower case; None without one.
pub fn part_encoding(part: &MessagePart<'_>) -> Option<String> {
    part.content_transfer_encoding()
        .map(|e| e.trim().to_ascii_lowercase())
}

/// The source of the message's HTML parts, at most `max_bytes` of it (cut at a character
/// boundary): the HTML parts of the MIME tree in order, then the cut-off ones the tree holds as
/// plain text (`ParsedMessage::cut_off_html`). Borrowed when one piece is all there is; empty
/// when the message did not parse.
pub fn html_source<'m>(message: &'m ParsedMessage<'_>, max_bytes: usize) -> Cow<'m, str> {
    let Some(mime) = &message.mime else {
        return Cow::Borrowed("");
    };
    let mut pieces: Vec<&str> = Vec::new();
    let mut room = max_bytes;
    let tree_html = mime.parts.iter().filter_map(|part| match &part.body {
        PartType::Html(h) => Some(h.as_ref()),
        _ => None,
    });
    for h in tree_html.chain(message.cut_off_html.iter().map(String::as_str)) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{parse, prepare, Limits};

    /// Parses `raw` and hands the message to `f` (the message borrows the prepared input).
    fn with_message<T>(raw: &str, f: impl FnOnce(&ParsedMessage<'_>) -> T) -> T {
        let limits = Limits::default();
        let input = prepare(raw.as_bytes(), &limits);
        f(&parse(&input, &limits))
    }

    fn types_and_encodings(raw: &str) -> Vec<(String, Option<String>)> {
        with_message(raw, |m| {
            (m.mime.iter().flat_map(|m| m.parts.iter()))
                .map(|p| (part_type(p), part_encoding(p)))
                .collect()
        })
    }

    #[test]
    fn part_type_is_lower_case_type_and_subtype_with_text_plain_by_default() {
        let raw = "Subject: t\r\nContent-Type: Multipart/MIXED; boundary=b\r\n\r\n\
                   --b\r\n\r\nno header\r\n\
                   --b\r\nContent-Type: TEXT/Html\r\n\
                   Content-Transfer-Encoding:  Quoted-Printable \r\n\r\n<p>x</p>\r\n\
                   --b\r\nContent-Type: application/PDF; name=a.pdf\r\n\
                   Content-Transfer-Encoding: BASE64\r\n\r\nJVBERi0xLjQK\r\n--b--\r\n";
        let got = types_and_encodings(raw);
        let want: Vec<(String, Option<String>)> = vec![
            ("multipart/mixed".into(), None),
            ("text/plain".into(), None),
            ("text/html".into(), Some("quoted-printable".into())),
            ("application/pdf".into(), Some("base64".into())),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_message_without_content_type_is_one_text_plain_part() {
        let got = types_and_encodings("Subject: t\r\n\r\nhello\r\n");
        assert_eq!(got, vec![("text/plain".to_string(), None)]);
    }

    const TWO_HTML: &str = "Subject: t\r\nContent-Type: multipart/alternative; boundary=b\r\n\r\n\
                            --b\r\nContent-Type: text/html\r\n\r\n<p>caf\u{e9}</p>\r\n\
                            --b\r\nContent-Type: text/html\r\n\r\n<b>two</b>\r\n--b--\r\n";

    #[test]
    fn html_source_joins_the_html_parts_in_order() {
        let all = with_message(TWO_HTML, |m| html_source(m, usize::MAX).into_owned());
        let first = all.find("<p>caf\u{e9}</p>").expect("first part");
        let second = all.find("<b>two</b>").expect("second part");
        assert!(first < second, "{all:?}");
    }

    #[test]
    fn html_source_stops_at_the_budget_on_a_character_boundary() {
        let one = "Subject: t\r\nContent-Type: text/html\r\n\r\n<p>caf\u{e9} au lait</p>\r\n";
        let all = with_message(one, |m| html_source(m, usize::MAX).into_owned());
        let e_acute = all.find('\u{e9}').expect("é");
        // a budget ending inside the two bytes of é keeps the bytes before it only
        let cut = with_message(one, |m| html_source(m, e_acute + 1).into_owned());
        assert_eq!(cut, all[..e_acute]);
        for budget in 0..all.len() + 2 {
            let got = with_message(one, |m| html_source(m, budget).into_owned());
            assert!(got.len() <= budget, "{budget}: {} bytes", got.len());
            assert!(all.starts_with(&got), "{budget}: {got:?}");
        }
        // over several parts the budget is the whole's: what is left after a part goes to the
        // next
        let both = with_message(TWO_HTML, |m| html_source(m, usize::MAX).into_owned());
        for budget in 0..both.len() + 2 {
            let got = with_message(TWO_HTML, |m| html_source(m, budget).into_owned());
            assert!(got.len() <= budget, "{budget}: {} bytes", got.len());
            assert!(got.len() + 1 >= budget.min(both.len()), "{budget}: {got:?}");
        }
        assert_eq!(
            with_message(TWO_HTML, |m| html_source(m, both.len()).into_owned()),
            both
        );
    }

    #[test]
    fn html_source_of_one_part_is_borrowed_and_of_none_is_empty() {
        let one = "Subject: t\r\nContent-Type: text/html\r\n\r\n<p>x</p>\r\n";
        with_message(one, |m| {
            let s = html_source(m, usize::MAX);
            assert!(matches!(s, Cow::Borrowed(_)), "{s:?}");
            assert!(s.contains("<p>x</p>"), "{s:?}");
        });
        with_message("Subject: t\r\n\r\nplain only\r\n", |m| {
            assert_eq!(html_source(m, usize::MAX), "");
        });
    }
}
