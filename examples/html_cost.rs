#[path = "../tests/common/mod.rs"]
mod common;
use html5gum::emitters::callback::{CallbackEmitter, CallbackEvent};
use html5gum::{Span, Tokenizer};
use std::time::Instant;
fn main() {
    let corpus = common::load_corpus();
    let parser = mail_parser::MessageParser::new();
    let mut htmls = Vec::new();
    for m in &corpus {
        if let Some(msg) = parser.parse(&m.raw) {
            for p in &msg.parts {
                if let mail_parser::PartType::Html(h) = &p.body { htmls.push(h.to_string()); }
            }
        }
    }
    let bytes: usize = htmls.iter().map(|h| h.len()).sum();
    println!("{} html parts, {} bytes", htmls.len(), bytes);
    let t = Instant::now();
    let mut n = 0;
    for h in &htmls {
        let mut emitter = CallbackEmitter::new(|_e: CallbackEvent<'_>, _s: Span<()>| { n += 1; None::<()> });
        emitter.naively_switch_states(true);
        for _ in Tokenizer::new_with_emitter(h.as_str(), emitter) {}
    }
    println!("html5gum no-op: {:.1} ms ({n} events) = {:.1} MB/s", t.elapsed().as_secs_f64()*1e3, bytes as f64 / t.elapsed().as_secs_f64() / 1e6);
    let t = Instant::now();
    let mut links = 0;
    for h in &htmls { links += shrike::message::html::to_text(h, 2000).links.len(); }
    println!("walker: {:.1} ms ({links} links) = {:.1} MB/s", t.elapsed().as_secs_f64()*1e3, bytes as f64 / t.elapsed().as_secs_f64() / 1e6);
    let t = Instant::now();
    for h in &htmls { links += mail_parser::decoders::html::html_to_text(h).len(); }
    println!("mail-parser html_to_text: {:.1} ms = {:.1} MB/s", t.elapsed().as_secs_f64()*1e3, bytes as f64 / t.elapsed().as_secs_f64() / 1e6);
}
