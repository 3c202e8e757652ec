//! Differential test: the message module's HTML scanner against html5gum, a WHATWG-compliant
//! tokenizer, on every HTML part of the development corpus and of the fixtures. Both must find
//! the same link targets and the same visible text.

mod common;

use html5gum::emitters::callback::{CallbackEmitter, CallbackEvent};
use html5gum::{Span, Tokenizer};
use shrike::message::html::{to_text, HtmlDocument, HtmlLink, LinkAttr};

// The reference walker: the same walk as the scanner, driven by html5gum's tokenizer.

/// Converts HTML to visible text and collects at most `max_links` link targets.
pub fn oracle_to_text(html: &str, max_links: usize) -> HtmlDocument {
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

fn html_parts(raw: &[u8]) -> Vec<String> {
    let Some(message) = mail_parser::MessageParser::new().parse(raw) else {
        return Vec::new();
    };
    let mut parts = Vec::new();
    collect(&message, &mut parts);
    parts
}

fn collect(message: &mail_parser::Message<'_>, out: &mut Vec<String>) {
    for part in &message.parts {
        match &part.body {
            mail_parser::PartType::Html(h) => out.push(h.to_string()),
            mail_parser::PartType::Message(m) => collect(m, out),
            _ => {}
        }
    }
}

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

#[test]
fn scanner_agrees_with_html5gum_on_the_corpus() {
    let mut htmls: Vec<String> = common::load_corpus()
        .iter()
        .flat_map(|m| html_parts(&m.raw))
        .collect();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for entry in std::fs::read_dir(fixtures).expect("tests/data") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "eml") {
            htmls.extend(html_parts(&std::fs::read(&path).expect("fixture")));
        }
    }
    assert!(htmls.len() >= 300, "only {} HTML parts", htmls.len());
    let mut link_diffs = Vec::new();
    let mut text_diffs = Vec::new();
    for (i, html) in htmls.iter().enumerate() {
        let ours = to_text(html, 10_000);
        let reference = oracle_to_text(html, 10_000);
        let targets = |d: &HtmlDocument| -> Vec<(String, LinkAttr, Option<String>)> {
            d.links
                .iter()
                .map(|l| (l.target.clone(), l.attr, l.text.clone()))
                .collect()
        };
        if targets(&ours) != targets(&reference) {
            link_diffs.push(i);
        }
        if words(&ours.text) != words(&reference.text) {
            text_diffs.push(i);
        }
    }
    let show = |diffs: &[usize]| {
        diffs
            .iter()
            .take(3)
            .map(|&i| {
                let (a, b) = (to_text(&htmls[i], 10_000), oracle_to_text(&htmls[i], 10_000));
                let first = words(&a.text)
                    .iter()
                    .zip(words(&b.text))
                    .position(|(x, y)| *x != y)
                    .unwrap_or(0);
                format!(
                    "part {i}: ours {:?}\n  html5gum {:?}\n  links ours {:?}\n  links html5gum {:?}",
                    words(&a.text).get(first.saturating_sub(3)..(first + 8).min(words(&a.text).len())),
                    words(&b.text).get(first.saturating_sub(3)..(first + 8).min(words(&b.text).len())),
                    a.links.len(),
                    b.links.len()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        link_diffs.is_empty(),
        "{} parts differ in links:\n{}",
        link_diffs.len(),
        show(&link_diffs)
    );
    assert!(
        text_diffs.is_empty(),
        "{} parts differ in text:\n{}",
        text_diffs.len(),
        show(&text_diffs)
    );
}
