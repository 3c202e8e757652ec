//! Every message of the development corpus (../shared/corpus) goes through the whole pure
//! pipeline, with LF and with CRLF line ends, and the results must look sane; the DNS lists'
//! URL targets of every message are the URL domains its rules see.

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;

use shrike::message::{prepare, Envelope, Limits};
use shrike::scan::analyze;

#[test]
fn corpus_scans_without_panic_and_looks_sane() {
    let corpus = common::load_corpus();
    assert!(
        corpus.len() >= 3_000,
        "corpus has {} messages",
        corpus.len()
    );
    let limits = Limits::default();
    let mut total: BTreeMap<&str, usize> = BTreeMap::new();
    let mut with_from: BTreeMap<&str, usize> = BTreeMap::new();
    let mut with_urls: BTreeMap<&str, usize> = BTreeMap::new();
    let mut with_subject = 0;
    let mut with_fuzzy = 0;
    let mut anomalies: BTreeMap<&'static str, usize> = BTreeMap::new();
    for m in &corpus {
        let label = m.label.as_str();
        *total.entry(label).or_default() += 1;
        let input = prepare(&m.raw, &limits);
        let a = analyze(&input, &Envelope::default(), &limits);
        if a.entities.from().is_some() {
            *with_from.entry(label).or_default() += 1;
        }
        if !a.entities.urls.is_empty() {
            *with_urls.entry(label).or_default() += 1;
        }
        if !a.message.subject.display.is_empty() {
            with_subject += 1;
        }
        if a.shingles
            .iter()
            .any(|s| s.kind == shrike::shingle::Kind::BodyFuzzy)
        {
            with_fuzzy += 1;
        }
        for an in a.anomalies.iter() {
            *anomalies.entry(an.as_str()).or_default() += 1;
        }
        // The same message with the other line ending gives the same entities and shingles.
        let other = if m.raw.contains(&b'\r') {
            common::to_lf(&m.raw)
        } else {
            common::to_crlf(&m.raw)
        };
        let other_input = prepare(&other, &limits);
        let b = analyze(&other_input, &Envelope::default(), &limits);
        assert_eq!(a.entities.urls, b.entities.urls, "{}/{}", m.label, m.name);
        assert_eq!(a.shingles, b.shingles, "{}/{}", m.label, m.name);
    }
    eprintln!("messages {total:?} with From {with_from:?} with URLs {with_urls:?}");
    eprintln!("with subject {with_subject}, with fuzzy shingles {with_fuzzy}");
    eprintln!("anomalies {anomalies:?}");
    let n = corpus.len();
    let from: usize = with_from.values().sum();
    assert!(
        from * 100 >= n * 98,
        "only {from} of {n} messages yield a From address"
    );
    let spam = total["spam"];
    let spam_urls = with_urls.get("spam").copied().unwrap_or(0);
    assert!(
        spam_urls * 100 >= spam * 80,
        "only {spam_urls} of {spam} spam yield URLs"
    );
    assert!(
        with_subject * 100 >= n * 95,
        "only {with_subject} of {n} have a subject"
    );
    assert!(
        with_fuzzy * 100 >= n * 80,
        "only {with_fuzzy} of {n} have fuzzy shingles"
    );
}

/// The DNS lists ask about the URL domains the rules see, and only those: on every message of
/// the corpus the lists' URL targets (`dnsbl::targets`, on the raw bytes as the network side
/// gets them) are the registrable domains of the scan's URL records, in order, up to the
/// lists' bound. (A scanner of the raw bytes of its own would miss scheme-less links, HTML
/// attributes and encoded parts the rules read, and ask about hosts they never see.)
#[test]
fn dns_list_url_targets_are_the_rules_url_domains() {
    use shrike::dnsbl::{targets, MAX_URL_DOMAINS};
    let corpus = common::load_corpus();
    let limits = Limits::default();
    let (mut with_urls, mut capped, mut asked) = (0, 0, 0);
    for m in &corpus {
        let envelope = Envelope::default();
        let input = prepare(&m.raw, &limits);
        let a = analyze(&input, &envelope, &limits);
        // What a rule sees: the domains of `msg:urls()`'s records, each once (`msg:domains()`).
        let mut seen: Vec<&str> = Vec::new();
        for d in a.entities.urls.iter().filter_map(|u| u.domain.as_deref()) {
            if !seen.contains(&d) {
                seen.push(d);
            }
        }
        assert_eq!(a.entities.domains, seen, "{}/{}", m.label, m.name);
        let t = targets(&m.raw, &envelope, Some(&limits));
        let rules = &seen[..seen.len().min(MAX_URL_DOMAINS)];
        assert_eq!(t.url_domains, rules, "{}/{}", m.label, m.name);
        with_urls += usize::from(!seen.is_empty());
        capped += usize::from(seen.len() > MAX_URL_DOMAINS);
        asked += t.url_domains.len();
        // Without a zone that asks for URL domains nothing is parsed for them.
        assert!(targets(&m.raw, &envelope, None).url_domains.is_empty());
    }
    eprintln!(
        "{with_urls} messages with URL domains, {asked} asked, {capped} over the bound of \
         {MAX_URL_DOMAINS}"
    );
    assert!(
        with_urls * 2 > corpus.len(),
        "{with_urls} messages with URLs"
    );
}
