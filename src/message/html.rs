//! HTML to visible text, with the link targets a reader could follow.
//!
//! A WHATWG tokenizer (html5gum) walks the markup once. Text inside `script`, `style`, `noscript`,
//! `iframe` and the like is skipped, as are comments; block elements become line breaks; entity
//! references are decoded by the tokenizer. `href`, `src`, `action` and `background` targets are
//! collected with the tag they came from, and for anchors the visible text of the link, so later
//! stages can compare "the text says sberbank.ru" with "the link goes to bit.ly".

use html5gum::emitters::callback::{CallbackEmitter, CallbackEvent};
use html5gum::{Span, Tokenizer};

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
    /// The attribute value as written (entities decoded).
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
    let mut walker = Walker {
        max_links,
        ..Walker::default()
    };
    {
        let mut emitter = CallbackEmitter::new(|event: CallbackEvent<'_>, _span: Span<()>| {
            walker.on_event(event);
            None::<()>
        });
        emitter.naively_switch_states(true);
        let tokenizer = Tokenizer::new_with_emitter(html, emitter);
        for _ in tokenizer {}
    }
    walker.finish()
}

#[derive(Default)]
struct Walker {
    max_links: usize,
    out: TextSink,
    links: Vec<HtmlLink>,
    links_truncated: bool,
    tag: Vec<u8>,
    attr: Option<LinkAttr>,
    attr_value: Vec<u8>,
    found: Vec<(LinkAttr, String)>,
    /// Name of the raw-text element whose content is being skipped.
    skipping: Option<&'static [u8]>,
    /// Index in `links` of the open anchor, and its text.
    anchor: Option<(usize, TextSink)>,
}

/// Elements whose content is never shown: the tokenizer reads them as raw text up to their own
/// end tag, so skipping them cannot hide the rest of a document.
const SKIPPED: &[&[u8]] = &[
    b"script",
    b"style",
    b"noscript",
    b"iframe",
    b"xmp",
    b"noembed",
    b"noframes",
    b"title",
];

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
    fn on_event(&mut self, event: CallbackEvent<'_>) {
        match event {
            CallbackEvent::OpenStartTag { name } => {
                self.tag.clear();
                self.tag.extend_from_slice(name);
                self.attr = None;
                self.found.clear();
            }
            CallbackEvent::AttributeName { name } => {
                self.flush_attr();
                self.attr = link_attr(&self.tag, name);
            }
            CallbackEvent::AttributeValue { value } => {
                if self.attr.is_some() && self.attr_value.len() < 64 * 1024 {
                    self.attr_value.extend_from_slice(value);
                }
            }
            CallbackEvent::CloseStartTag { self_closing } => {
                self.flush_attr();
                self.start_tag(self_closing);
            }
            CallbackEvent::EndTag { name } => self.end_tag(name),
            CallbackEvent::String { value } => {
                if self.skipping.is_none() {
                    let text = String::from_utf8_lossy(value);
                    self.out.push_text(&text);
                    if let Some((_, anchor_text)) = &mut self.anchor {
                        anchor_text.push_text(&text);
                    }
                }
            }
            CallbackEvent::Comment { .. } | CallbackEvent::Doctype { .. } => {}
            CallbackEvent::Error(_) => {}
        }
    }

    fn flush_attr(&mut self) {
        if let Some(attr) = self.attr.take() {
            let value = String::from_utf8_lossy(&self.attr_value).trim().to_string();
            if !value.is_empty() && !self.found.iter().any(|(a, _)| *a == attr) {
                self.found.push((attr, value));
            }
        }
        self.attr_value.clear();
    }

    fn start_tag(&mut self, self_closing: bool) {
        if let Some(skip) = SKIPPED.iter().find(|s| **s == self.tag.as_slice()) {
            if !self_closing && self.skipping.is_none() {
                self.skipping = Some(skip);
            }
        }
        if BLOCK.contains(&self.tag.as_slice()) {
            self.out.push_break();
        } else if self.tag == b"td" || self.tag == b"th" || self.tag == b"img" {
            self.out.push_text(" ");
        }
        let is_anchor = self.tag == b"a" && !self_closing;
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
        if let Some(skip) = self.skipping {
            if skip == name {
                self.skipping = None;
            }
            return;
        }
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
    match (attr, tag) {
        (b"href", b"a" | b"area" | b"link" | b"base") => Some(LinkAttr::Href),
        (
            b"src",
            b"img" | b"iframe" | b"frame" | b"script" | b"embed" | b"source" | b"input" | b"video"
            | b"audio",
        ) => Some(LinkAttr::Src),
        (b"action", b"form") => Some(LinkAttr::Action),
        (b"background", _) => Some(LinkAttr::Background),
        _ => None,
    }
}

/// Accumulates visible text: runs of whitespace become one space, block boundaries one newline.
#[derive(Default)]
struct TextSink {
    text: String,
    pending: Option<char>,
}

impl TextSink {
    fn push_text(&mut self, s: &str) {
        for c in s.chars() {
            if c.is_whitespace() {
                if self.pending.is_none() && !self.text.is_empty() {
                    self.pending = Some(' ');
                }
            } else {
                if let Some(p) = self.pending.take() {
                    self.text.push(p);
                }
                self.text.push(c);
            }
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
    fn unclosed_markup_does_not_hide_text() {
        let doc = to_text("<p>visible <a href='http://x.example/'>link", 10);
        assert_eq!(doc.text, "visible link");
        assert_eq!(doc.links[0].text.as_deref(), Some("link"));
    }
}
