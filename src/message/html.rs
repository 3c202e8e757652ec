//! HTML to visible text, with the link targets a reader could follow.
//!
//! One pass over the markup following the WHATWG tokenizer's rules for what matters here: start
//! and end tags with double-, single- and un-quoted attributes, comments (`<!-- -->`, and bogus
//! comments `<!...>`, `<?...>`, `</ ...>`), raw-text elements (`script`, `style`, `noscript`,
//! `iframe`, `xmp`, `noembed`, `noframes`, and `title` as escapable raw text) whose content runs
//! to their own end tag and is not shown, `plaintext`, and a `<` that starts no tag being text.
//! Character references are decoded by htmlize (the full WHATWG table, attribute rules in
//! attributes). Block elements become line breaks. `href`, `src`, `action` and `background`
//! targets are collected with the tag they came from, and for anchors the visible text of the
//! link, so later stages can compare "the text says sberbank.ru" with "the link goes to bit.ly".
//!
//! A purpose-built scanner rather than a general tokenizer because it runs on every HTML part at
//! tens of thousands of messages a second: a third of html5gum's instructions here. The test
//! module `oracle` drives the same walker with html5gum's tokens and requires identical output
//! on every HTML part of the corpus.

use std::borrow::Cow;

/// Which attribute a link target came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkAttr {
    /// `<a href>`, `<area href>`, `<link href>`
    Href,
    /// `<img src>`, `<iframe src>`, `<script src>`, ...
    Src,
    /// `<form action>`
    Action,
    /// `<body background>`, `<td background>`, ...
    Background,
}

impl LinkAttr {
    /// A short lower-case name for output.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkAttr::Href => "html_href",
            LinkAttr::Src => "html_src",
            LinkAttr::Action => "html_action",
            LinkAttr::Background => "html_background",
        }
    }
}

/// One link target found in markup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtmlLink {
    /// The attribute value as written (character references decoded).
    pub target: String,
    /// Where it came from.
    pub attr: LinkAttr,
    /// For anchors: the visible text between `<a>` and `</a>`, whitespace collapsed.
    pub text: Option<String>,
}

/// The visible text of an HTML document and its links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HtmlDocument {
    pub text: String,
    pub links: Vec<HtmlLink>,
    /// True when more links were present than `max_links`.
    pub links_truncated: bool,
}

/// Converts HTML to visible text and collects at most `max_links` link targets.
pub fn to_text(html: &str, max_links: usize) -> HtmlDocument {
    let mut w = Walker {
        max_links,
        ..Walker::default()
    };
    let bytes = html.as_bytes();
    let mut text_start = 0;
    let mut i = 0;
    while let Some(off) = memchr::memchr(b'<', &bytes[i..]) {
        let lt = i + off;
        let Some(&next) = bytes.get(lt + 1) else {
            break;
        };
        let markup_end = if next.is_ascii_alphabetic() {
            w.text(&html[text_start..lt]);
            match start_tag(html, lt + 1, &mut w) {
                Some(end) => {
                    w.start_tag();
                    match raw_text_end(html, end, &w.tag) {
                        RawText::No => Some(end),
                        RawText::Skip(resume) => Some(resume),
                        RawText::Visible(content_end, resume) => {
                            w.text(&html[end..content_end]);
                            Some(resume)
                        }
                        RawText::Rest => {
                            w.text(&html[end..]);
                            Some(html.len())
                        }
                    }
                }
                None => None, // end of input inside a tag: the tag is dropped
            }
        } else if next == b'/' && bytes.get(lt + 2).is_some_and(u8::is_ascii_alphabetic) {
            w.text(&html[text_start..lt]);
            let name_end = name_end(bytes, lt + 2);
            let name = bytes[lt + 2..name_end].to_ascii_lowercase();
            let close = memchr::memchr(b'>', &bytes[name_end..]).map(|o| name_end + o + 1);
            if close.is_some() {
                w.end_tag(&name);
            }
            close
        } else if next == b'!' || next == b'?' || next == b'/' {
            w.text(&html[text_start..lt]);
            if bytes[lt + 1..].starts_with(b"!--") {
                Some(comment_end(bytes, lt + 4))
            } else if next == b'/' && bytes.get(lt + 2) == Some(&b'>') {
                Some(lt + 3) // "</>" is dropped
            } else {
                memchr::memchr(b'>', &bytes[lt + 1..]).map(|o| lt + o + 2)
            }
        } else {
            // A '<' that starts no markup is text.
            i = lt + 1;
            continue;
        };
        match markup_end {
            Some(end) => {
                i = end;
                text_start = end;
            }
            None => {
                text_start = html.len();
                break;
            }
        }
        if i >= bytes.len() {
            break;
        }
    }
    if text_start < html.len() {
        w.text(&html[text_start..]);
    }
    w.finish()
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

/// End of a tag or attribute name starting at `from`.
fn name_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| is_space(b) || b == b'/' || b == b'>')
        .map_or(bytes.len(), |p| from + p)
}

/// Parses a start tag whose name begins at `from`; returns the index after its `>`, or `None`
/// when the input ends inside it.
fn start_tag(html: &str, from: usize, w: &mut Walker) -> Option<usize> {
    let bytes = html.as_bytes();
    let end = name_end(bytes, from);
    w.tag.clear();
    w.tag
        .extend(bytes[from..end].iter().map(u8::to_ascii_lowercase));
    w.found.clear();
    w.self_closing = false;
    let mut i = end;
    loop {
        while i < bytes.len() && (is_space(bytes[i]) || bytes[i] == b'/') {
            w.self_closing = bytes[i] == b'/';
            i += 1;
        }
        match bytes.get(i)? {
            b'>' => return Some(i + 1),
            _ => w.self_closing = false,
        }
        // Attribute name: a leading '=' belongs to the name (WHATWG).
        let name_start = i;
        i += 1;
        while i < bytes.len() && !is_space(bytes[i]) && !matches!(bytes[i], b'/' | b'>' | b'=') {
            i += 1;
        }
        let name = &bytes[name_start..i];
        while i < bytes.len() && is_space(bytes[i]) {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            continue;
        }
        i += 1;
        while i < bytes.len() && is_space(bytes[i]) {
            i += 1;
        }
        let (value, after) = match bytes.get(i)? {
            &q @ (b'"' | b'\'') => {
                let close = i + 1 + memchr::memchr(q, &bytes[i + 1..])?;
                (&html[i + 1..close], close + 1)
            }
            _ => {
                let end = bytes[i..]
                    .iter()
                    .position(|&b| is_space(b) || b == b'>')
                    .map_or(bytes.len(), |p| i + p);
                (&html[i..end], end)
            }
        };
        i = after;
        if let Some(attr) = link_attr(&w.tag, name) {
            let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
            if !value.is_empty() && !w.found.iter().any(|(a, _)| *a == attr) {
                let decoded = if value.contains('&') {
                    htmlize::unescape_attribute(value)
                } else {
                    Cow::Borrowed(value)
                };
                w.found.push((attr, decoded.into_owned()));
            }
        }
    }
}

/// End of a comment whose text starts at `from` (after `<!--`): after `-->` or `--!>`, or
/// right away for `<!-->` and `<!--->`; an unterminated comment runs to the end.
fn comment_end(bytes: &[u8], from: usize) -> usize {
    let rest = &bytes[from.min(bytes.len())..];
    if rest.starts_with(b">") {
        return from + 1;
    }
    if rest.starts_with(b"->") {
        return from + 2;
    }
    let mut at = 0;
    while let Some(off) = memchr::memchr(b'>', &rest[at..]) {
        let gt = at + off;
        if rest[..gt].ends_with(b"--") || rest[..gt].ends_with(b"--!") {
            return from + gt + 1;
        }
        at = gt + 1;
    }
    bytes.len()
}

enum RawText {
    /// Not a raw-text element.
    No,
    /// Content hidden; resume after the end tag.
    Skip(usize),
    /// Content visible up to the first index; resume at the second.
    Visible(usize, usize),
    /// `plaintext`: everything after is text.
    Rest,
}

/// For raw-text elements, where their content ends.
fn raw_text_end(html: &str, from: usize, tag: &[u8]) -> RawText {
    let visible = match tag {
        b"script" | b"style" | b"noscript" | b"iframe" | b"xmp" | b"noembed" | b"noframes"
        | b"title" => false,
        b"textarea" => true,
        b"plaintext" => return RawText::Rest,
        _ => return RawText::No,
    };
    let bytes = html.as_bytes();
    let mut at = from;
    while let Some(off) = memchr::memchr(b'<', &bytes[at..]) {
        let lt = at + off;
        let name_start = lt + 2;
        let name_stop = name_start + tag.len();
        if bytes.get(lt + 1) == Some(&b'/')
            && bytes
                .get(name_start..name_stop)
                .is_some_and(|n| n.eq_ignore_ascii_case(tag))
            && bytes
                .get(name_stop)
                .is_none_or(|&b| is_space(b) || b == b'/' || b == b'>')
        {
            let resume = memchr::memchr(b'>', &bytes[name_stop..])
                .map_or(bytes.len(), |o| name_stop + o + 1);
            return if visible {
                RawText::Visible(lt, resume)
            } else {
                RawText::Skip(resume)
            };
        }
        at = lt + 1;
    }
    if visible {
        RawText::Visible(bytes.len(), bytes.len())
    } else {
        RawText::Skip(bytes.len())
    }
}

#[derive(Default)]
struct Walker {
    max_links: usize,
    out: TextSink,
    links: Vec<HtmlLink>,
    links_truncated: bool,
    tag: Vec<u8>,
    self_closing: bool,
    found: Vec<(LinkAttr, String)>,
    /// Index in `links` of the open anchor, and its text.
    anchor: Option<(usize, TextSink)>,
}

const BLOCK: &[&[u8]] = &[
    b"br",
    b"p",
    b"div",
    b"tr",
    b"li",
    b"ul",
    b"ol",
    b"table",
    b"h1",
    b"h2",
    b"h3",
    b"h4",
    b"h5",
    b"h6",
    b"blockquote",
    b"pre",
    b"hr",
    b"section",
    b"article",
    b"header",
    b"footer",
    b"center",
    b"dd",
    b"dt",
    b"dl",
    b"form",
    b"tbody",
    b"thead",
];

impl Walker {
    /// Text as written in the markup: character references still to decode.
    fn text(&mut self, raw: &str) {
        if raw.is_empty() {
            return;
        }
        if raw.contains('&') {
            self.decoded_text(&htmlize::unescape(raw));
        } else {
            self.decoded_text(raw);
        }
    }

    fn decoded_text(&mut self, text: &str) {
        self.out.push_text(text);
        if let Some((_, anchor_text)) = &mut self.anchor {
            anchor_text.push_text(text);
        }
    }

    fn start_tag(&mut self) {
        if BLOCK.contains(&self.tag.as_slice()) {
            self.out.push_break();
        } else if self.tag == b"td" || self.tag == b"th" || self.tag == b"img" {
            self.out.push_text(" ");
        }
        let is_anchor = self.tag == b"a" && !self.self_closing;
        let mut anchor_index = None;
        for (attr, target) in self.found.drain(..) {
            if self.links.len() >= self.max_links {
                self.links_truncated = true;
                break;
            }
            if attr == LinkAttr::Href && is_anchor {
                anchor_index = Some(self.links.len());
            }
            self.links.push(HtmlLink {
                target,
                attr,
                text: None,
            });
        }
        if is_anchor {
            self.close_anchor();
            if let Some(index) = anchor_index {
                self.anchor = Some((index, TextSink::default()));
            }
        }
    }

    fn end_tag(&mut self, name: &[u8]) {
        if name == b"a" {
            self.close_anchor();
        }
        if BLOCK.contains(&name) {
            self.out.push_break();
        }
    }

    fn close_anchor(&mut self) {
        if let Some((index, text)) = self.anchor.take() {
            let text = text.finish();
            if let Some(link) = self.links.get_mut(index) {
                if !text.is_empty() {
                    link.text = Some(text);
                }
            }
        }
    }

    fn finish(mut self) -> HtmlDocument {
        self.close_anchor();
        HtmlDocument {
            text: self.out.finish(),
            links: self.links,
            links_truncated: self.links_truncated,
        }
    }
}

fn link_attr(tag: &[u8], attr: &[u8]) -> Option<LinkAttr> {
    let is = |name: &[u8]| attr.eq_ignore_ascii_case(name);
    if is(b"href") && matches!(tag, b"a" | b"area" | b"link" | b"base") {
        Some(LinkAttr::Href)
    } else if is(b"src")
        && matches!(
            tag,
            b"img"
                | b"iframe"
                | b"frame"
                | b"script"
                | b"embed"
                | b"source"
                | b"input"
                | b"video"
                | b"audio"
        )
    {
        Some(LinkAttr::Src)
    } else if is(b"action") && tag == b"form" {
        Some(LinkAttr::Action)
    } else if is(b"background") {
        Some(LinkAttr::Background)
    } else {
        None
    }
}

/// The end of the run of words at `start` that are printable ASCII, each followed by whitespace
/// (or the end) and separated by single spaces; `start` if the first word is not such a word.
fn plain_run_end(bytes: &[u8], start: usize) -> usize {
    let word_byte = |b: u8| (b'!'..=b'~').contains(&b);
    let mut run_end = start;
    let mut j = start;
    loop {
        let (next, last_space) = super::normalize::skip_plain_chunks(bytes, j);
        if let Some(space) = last_space {
            run_end = space;
        }
        j = next;
        while j < bytes.len() && word_byte(bytes[j]) {
            j += 1;
        }
        match bytes.get(j) {
            None => return j,
            Some(&b) if matches!(b, b'\t'..=b'\r' | b' ') => {
                run_end = j;
                if b == b' ' && bytes.get(j + 1).is_some_and(|&n| word_byte(n)) {
                    j += 1;
                    continue;
                }
                return run_end;
            }
            // A word with a control or non-ASCII character: the run ends before it.
            Some(_) => return run_end,
        }
    }
}

/// Accumulates visible text: runs of whitespace become one space, block boundaries one newline.
#[derive(Default)]
struct TextSink {
    text: String,
    pending: Option<char>,
}

impl TextSink {
    /// Appends `s` with its runs of whitespace as single separators. Words are found by a byte
    /// loop (only non-ASCII characters are decoded to ask Unicode): `str::split` with
    /// `char::is_whitespace` decoded every character, a tenth of the HTML-to-text time.
    fn push_text(&mut self, s: &str) {
        let bytes = s.as_bytes();
        // Whether the character at byte `i` is whitespace, and its length.
        let space_at = |i: usize| -> (bool, usize) {
            let b = bytes[i];
            if b < 0x80 {
                (matches!(b, b'\t'..=b'\r' | b' '), 1)
            } else {
                let c = s[i..].chars().next().unwrap_or('x');
                (c.is_whitespace(), c.len_utf8())
            }
        };
        // Leading whitespace (an empty `s` counts as a separator) marks a space after text.
        if (s.is_empty() || space_at(0).0) && !self.text.is_empty() && self.pending.is_none() {
            self.pending = Some(' ');
        }
        let mut i = 0;
        while i < bytes.len() {
            let (space, len) = space_at(i);
            if space {
                i += len;
                continue;
            }
            let start = i;
            // Most text is words of printable ASCII with single spaces between them: such a run
            // goes in whole, up to the end of its last word.
            let run_end = plain_run_end(bytes, start);
            if run_end > start {
                if let Some(p) = self.pending.take() {
                    self.text.push(p);
                }
                self.text.push_str(&s[start..run_end]);
                self.pending = Some(' ');
                i = run_end;
                continue;
            }
            while i < bytes.len() {
                let (space, len) = space_at(i);
                if space {
                    break;
                }
                i += len;
            }
            if let Some(p) = self.pending.take() {
                self.text.push(p);
            }
            self.text.push_str(&s[start..i]);
            self.pending = Some(' ');
        }
        // A space after the last word only if `s` ended in whitespace.
        if s.chars().next_back().is_some_and(|c| !c.is_whitespace()) && self.pending == Some(' ') {
            self.pending = None;
        }
    }

    fn push_break(&mut self) {
        if !self.text.is_empty() {
            self.pending = Some('\n');
        }
    }

    fn finish(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pick, xorshift};

    /// The `str::split` version `push_text` replaced.
    fn push_text_by_split(sink: &mut TextSink, s: &str) {
        for piece in s.split(char::is_whitespace) {
            if piece.is_empty() {
                if !sink.text.is_empty() && sink.pending.is_none() {
                    sink.pending = Some(' ');
                }
                continue;
            }
            if let Some(p) = sink.pending.take() {
                sink.text.push(p);
            }
            sink.text.push_str(piece);
            sink.pending = Some(' ');
        }
        if s.chars().next_back().is_some_and(|c| !c.is_whitespace()) && sink.pending == Some(' ') {
            sink.pending = None;
        }
    }

    #[test]
    fn text_sink_splits_like_str_split() {
        let pieces = [
            "a", "Bé", " ", "\t", "\n", "\u{a0}", "\u{3000}", "\u{2028}", "x\u{85}y", "", "\r",
            "\x0b", "word", "x.y", "  ", "\x01", "~",
        ];
        let mut x: u64 = 0xD1B5_4A32_D192_ED03;
        for _ in 0..30_000 {
            let (mut a, mut b) = (TextSink::default(), TextSink::default());
            for round in 0..4 {
                // Short chunks, and long ones that cross the eight-byte steps.
                let n = if round % 2 == 0 { x % 6 } else { x % 40 };
                let chunk = pick(&mut x, &pieces, n);
                if xorshift(&mut x).is_multiple_of(5) {
                    a.push_break();
                    b.push_break();
                }
                a.push_text(&chunk);
                push_text_by_split(&mut b, &chunk);
                assert_eq!((&a.text, a.pending), (&b.text, b.pending), "{chunk:?}");
            }
        }
    }

    #[test]
    fn skips_script_style_and_comments() {
        let doc = to_text(
            "<html><head><style>p{color:red}</style><title>T</title></head><body>\
             <script>var x = 'hidden';</script><!-- secret --><p>Hello&nbsp;&amp; welcome</p>\
             <p>second</p></body></html>",
            10,
        );
        assert_eq!(doc.text, "Hello & welcome\nsecond");
    }

    #[test]
    fn collects_links_with_anchor_text() {
        let doc = to_text(
            "<a href=\"http://bit.ly/abc\">www.<b>sberbank</b>.ru</a> <img src='http://img.example.com/x.png'>\
             <form action=\"https://evil.example/post\"></form>",
            10,
        );
        assert_eq!(doc.links.len(), 3);
        assert_eq!(doc.links[0].target, "http://bit.ly/abc");
        assert_eq!(doc.links[0].attr, LinkAttr::Href);
        assert_eq!(doc.links[0].text.as_deref(), Some("www.sberbank.ru"));
        assert_eq!(doc.links[1].attr, LinkAttr::Src);
        assert_eq!(doc.links[2].attr, LinkAttr::Action);
        assert_eq!(doc.links[2].target, "https://evil.example/post");
    }

    #[test]
    fn link_limit_is_enforced() {
        let html = "<a href='http://a.example/'>x</a>".repeat(5);
        let doc = to_text(&html, 3);
        assert_eq!(doc.links.len(), 3);
        assert!(doc.links_truncated);
    }

    #[test]
    fn tokenizer_edge_cases() {
        let cases = [
            ("a < b and c<3", "a < b and c<3"),
            ("x<!-- hidden -- still --> y", "x y"),
            ("x<!--> y", "x y"),
            ("x<!DOCTYPE html><?php echo ?> y", "x y"),
            ("x</ bogus> y", "x y"),
            ("x<script>document.write('<p>no</p>')</script > y", "x y"),
            ("x<STYLE>p{}</sTyLe>y", "xy"),
            ("<textarea>typed &amp; shown</textarea>", "typed & shown"),
            ("x<plaintext><b>all text", "x<b>all text"),
            ("caf&eacute; &notit; &#x41;&#66;", "café ¬it; AB"),
            ("<p>one</p><p>two</p>", "one\ntwo"),
            ("x<!-- never closed", "x"),
            ("x<b", "x"),
        ];
        for (html, want) in cases {
            assert_eq!(to_text(html, 10).text, want, "{html}");
        }
    }

    #[test]
    fn attribute_quoting_and_references() {
        let doc = to_text(
            "<a HREF=http://u.example/a?x=1&amp;y=2>u</a><a href='http://s.example/'>s</a>\
             <img alt=\"x > y\" src = \"http://i.example/p.png\"><a =href=x href=\"http://e.example/\">e</a>\
             <td background=http://b.example/bg.gif>",
            10,
        );
        let targets: Vec<&str> = doc.links.iter().map(|l| l.target.as_str()).collect();
        assert_eq!(
            targets,
            [
                "http://u.example/a?x=1&y=2",
                "http://s.example/",
                "http://i.example/p.png",
                "http://e.example/",
                "http://b.example/bg.gif"
            ]
        );
        assert_eq!(doc.links[4].attr, LinkAttr::Background);
    }

    #[test]
    fn unclosed_markup_does_not_hide_text() {
        let doc = to_text("<p>visible <a href='http://x.example/'>link", 10);
        assert_eq!(doc.text, "visible link");
        assert_eq!(doc.links[0].text.as_deref(), Some("link"));
    }
}

/// Differential test: the scanner against html5gum, a general WHATWG tokenizer, driving the same
/// `Walker`, on every HTML part of the development corpus and of the fixtures. The two
/// tokenizers must give the same link targets and the same visible text.
#[cfg(test)]
mod oracle {
    use html5gum::emitters::callback::{CallbackEmitter, CallbackEvent};
    use html5gum::{Span, Tokenizer};

    use super::*;

    #[allow(dead_code)]
    mod common {
        include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/mod.rs"));
    }

    /// Elements whose content html5gum (with naive state switching) reads as raw text.
    const HIDDEN: &[&[u8]] = &[
        b"script",
        b"style",
        b"noscript",
        b"iframe",
        b"xmp",
        b"noembed",
        b"noframes",
        b"title",
    ];

    fn html5gum_to_text(html: &str) -> HtmlDocument {
        let mut w = Walker {
            max_links: usize::MAX,
            ..Walker::default()
        };
        let mut attr: Option<LinkAttr> = None;
        let mut value = Vec::new();
        let mut hidden: Option<Vec<u8>> = None;
        {
            let mut emitter = CallbackEmitter::new(|event: CallbackEvent<'_>, _: Span<()>| {
                let flush = |w: &mut Walker, attr: &mut Option<LinkAttr>, value: &mut Vec<u8>| {
                    if let Some(a) = attr.take() {
                        let v = String::from_utf8_lossy(value).trim().to_string();
                        if !v.is_empty() && !w.found.iter().any(|(f, _)| *f == a) {
                            w.found.push((a, v));
                        }
                    }
                    value.clear();
                };
                match event {
                    CallbackEvent::OpenStartTag { name } => {
                        w.tag = name.to_vec();
                        w.found.clear();
                        attr = None;
                    }
                    CallbackEvent::AttributeName { name } => {
                        flush(&mut w, &mut attr, &mut value);
                        attr = link_attr(&w.tag, name);
                    }
                    CallbackEvent::AttributeValue { value: v } => value.extend_from_slice(v),
                    CallbackEvent::CloseStartTag { self_closing } => {
                        flush(&mut w, &mut attr, &mut value);
                        w.self_closing = self_closing;
                        if HIDDEN.contains(&w.tag.as_slice()) && hidden.is_none() {
                            hidden = Some(w.tag.clone());
                        }
                        w.start_tag();
                    }
                    CallbackEvent::EndTag { name } => match &hidden {
                        Some(h) if h.as_slice() == name => hidden = None,
                        Some(_) => {}
                        None => w.end_tag(name),
                    },
                    CallbackEvent::String { value: v } if hidden.is_none() => {
                        w.decoded_text(&String::from_utf8_lossy(v));
                    }
                    _ => {}
                }
                None::<()>
            });
            emitter.naively_switch_states(true);
            for _ in Tokenizer::new_with_emitter(html, emitter) {}
        }
        w.finish()
    }

    fn html_parts(message: &mail_parser::Message<'_>, out: &mut Vec<String>) {
        for part in &message.parts {
            match &part.body {
                mail_parser::PartType::Html(h) => out.push(h.to_string()),
                mail_parser::PartType::Message(m) => html_parts(m, out),
                _ => {}
            }
        }
    }

    #[test]
    fn scanner_agrees_with_html5gum_on_the_corpus() {
        let parser = mail_parser::MessageParser::new();
        let mut raws: Vec<Vec<u8>> = common::load_corpus().into_iter().map(|m| m.raw).collect();
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        for entry in std::fs::read_dir(fixtures).expect("tests/data") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "eml") {
                raws.push(std::fs::read(&path).expect("fixture"));
            }
        }
        let mut htmls = Vec::new();
        for raw in &raws {
            if let Some(message) = parser.parse(raw) {
                html_parts(&message, &mut htmls);
            }
        }
        assert!(htmls.len() >= 300, "only {} HTML parts", htmls.len());
        let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let mut differ = Vec::new();
        for (i, html) in htmls.iter().enumerate() {
            let (ours, reference) = (to_text(html, usize::MAX), html5gum_to_text(html));
            if ours.links != reference.links || words(&ours.text) != words(&reference.text) {
                differ.push(i);
            }
        }
        assert!(
            differ.is_empty(),
            "{} of {} HTML parts differ, first: {:?}",
            differ.len(),
            htmls.len(),
            differ
                .first()
                .map(|&i| (to_text(&htmls[i], usize::MAX), html5gum_to_text(&htmls[i])))
        );
    }
}
