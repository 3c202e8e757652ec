//! Golden tests: every `tests/data/*.eml` is scanned with LF and with CRLF line ends, and the
//! report must equal `tests/data/*.json`. After an intended change, bless the new output with
//! `SHRIKE_BLESS=1 cargo test --test golden` and review the diff.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};

use shrike::message::{prepare, Envelope, Limits};
use shrike::scan::analyze;
use shrike::verdict::Verdict;

fn report_json(name: &str, raw: &[u8]) -> serde_json::Value {
    let input = prepare(raw, &Limits::default());
    let analysis = analyze(&input, &Envelope::default(), &Limits::default());
    let verdict = Verdict::default();
    serde_json::to_value(analysis.report(name, &verdict)).expect("report serializes")
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/data exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "eml"))
        .collect();
    files.sort();
    files
}

#[test]
fn golden_reports_match_with_lf_and_crlf() {
    let bless = std::env::var_os("SHRIKE_BLESS").is_some();
    let files = fixtures();
    assert!(
        files.len() >= 15,
        "expected the fixture set, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for eml in &files {
        let name = eml.file_name().unwrap().to_string_lossy().into_owned();
        let raw = std::fs::read(eml).expect("fixture readable");
        let lf = report_json(&name, &common::to_lf(&raw));
        let crlf = report_json(&name, &common::to_crlf(&raw));
        let golden_path = eml.with_extension("json");
        if bless {
            let text = serde_json::to_string_pretty(&lf).unwrap() + "\n";
            std::fs::write(&golden_path, text).expect("write golden");
        }
        let golden: serde_json::Value = match std::fs::read_to_string(&golden_path) {
            Ok(text) => serde_json::from_str(&text).expect("golden is JSON"),
            Err(_) => {
                failures.push(format!("{name}: no golden file (run with SHRIKE_BLESS=1)"));
                continue;
            }
        };
        for (ending, got) in [("LF", &lf), ("CRLF", &crlf)] {
            if *got != golden {
                failures.push(format!(
                    "{name} ({ending}) differs from golden:\n{}",
                    serde_json::to_string_pretty(got).unwrap()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Reads one golden report (after the test above has checked it matches the scanner).
fn golden(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let raw = std::fs::read(path).expect("fixture");
    report_json(name, &raw)
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect()
}

fn anomalies(r: &serde_json::Value) -> Vec<String> {
    strings(&r["anomalies"])
}

// Beyond byte-equality with the golden files, the properties each fixture exists for:

#[test]
fn encoded_word_subjects_decode() {
    assert_eq!(
        golden("koi8r_subject.eml")["subject"],
        "Распродажа! Скидки до 70% только сегодня"
    );
    assert_eq!(
        golden("cp1251_subject.eml")["subject"],
        "Акция: бесплатная доставка до пятницы"
    );
    assert_eq!(
        golden("shiftjis_iso2022.eml")["subject"],
        "【重要】お得なキャンペーンのお知らせ"
    );
}

#[test]
fn homoglyph_subject_normalizes_like_latin() {
    let cyr = golden("homoglyph_subject.eml");
    let lat = golden("homoglyph_subject_latin.eml");
    assert_ne!(cyr["subject"], lat["subject"]);
    assert_eq!(cyr["subject_normalized"], lat["subject_normalized"]);
    let subject_hash = |r: &serde_json::Value| {
        r["shingles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["type"] == "subject")
            .map(|s| s["hash"].clone())
    };
    assert_eq!(subject_hash(&cyr), subject_hash(&lat));
    assert!(anomalies(&cyr).contains(&"mixed_script".to_string()));
    assert!(!strings(&cyr["mixed_script_words"]).is_empty());
}

#[test]
fn malformed_fixtures_carry_their_anomalies() {
    let cases = [
        (
            "broken_mime.eml",
            &["unterminated_multipart", "bad_base64"][..],
        ),
        (
            "missing_headers.eml",
            &["missing_date", "missing_from", "missing_message_id"][..],
        ),
        ("eightbit_headers.eml", &["8bit_header"][..]),
        ("nul_bytes.eml", &["nul_bytes"][..]),
        ("no_body.eml", &["no_body"][..]),
        ("empty_body.eml", &["empty_body"][..]),
        ("bad_encoded_words.eml", &["bad_encoded_word"][..]),
    ];
    for (file, expected) in cases {
        let got = anomalies(&golden(file));
        for a in expected {
            assert!(got.contains(&a.to_string()), "{file}: {a} not in {got:?}");
        }
    }
    assert!(anomalies(&golden("koi8r_subject.eml")).is_empty());
}

#[test]
fn urls_hosts_and_domains_are_canonical() {
    let r = golden("idn_urls.eml");
    let hosts = strings(&r["entities"]["hosts"]);
    for h in [
        "xn--e1afmkfd.xn--80akhbyknj4f",
        "xn--bcher-kva.example",
        "www.example.com",
        "example.com",
        "192.168.1.1",
        "shop.example.co.uk",
    ] {
        assert!(hosts.contains(&h.to_string()), "{h} not in {hosts:?}");
    }
    // The Unicode and the punycode spelling are one host, listed once.
    assert_eq!(
        hosts
            .iter()
            .filter(|h| h.starts_with("xn--e1afmkfd"))
            .count(),
        1
    );
    let domains = strings(&r["entities"]["domains"]);
    assert!(domains.contains(&"example.co.uk".to_string()));
    assert!(domains.contains(&"example.com.au".to_string()));
    assert!(hosts.iter().all(|h| *h == h.to_lowercase()));
}

#[test]
fn html_text_and_links() {
    let r = golden("html_only.eml");
    let anchors = r["entities"]["anchors"].as_array().unwrap();
    assert!(anchors.iter().any(|a| a["text_domain"] == "paypal.com"
        && a["target_domain"] == "bit.ly"
        && a["mismatch"] == true));
    let links = r["entities"]["links"].as_array().unwrap();
    let sources: Vec<&str> = links.iter().filter_map(|l| l["source"].as_str()).collect();
    for s in ["html_href", "html_src", "html_action"] {
        assert!(sources.contains(&s), "{s} not in {sources:?}");
    }
}

#[test]
fn attachments_have_names_hashes_and_flags() {
    let r = golden("nested_multipart.eml");
    let atts = r["entities"]["attachments"].as_array().unwrap();
    let by_name = |n: &str| {
        atts.iter()
            .find(|a| a["name"] == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    assert_eq!(by_name("invoice.pdf")["content_type"], "application/pdf");
    assert_eq!(by_name("invoice.pdf")["size"], 273);
    assert_eq!(by_name("photo.jpg.exe")["flags"]["double_extension"], true);
    assert_eq!(by_name("Счет.zip")["extension"], "zip");
    assert!(atts.iter().all(|a| a["hash"].as_str().unwrap().len() == 64));
    assert!(atts.iter().any(|a| a["content_type"] == "message/rfc822"));
    // The attached message's URL is an entity too.
    let urls = strings(&r["entities"]["urls"]);
    assert!(urls.len() >= 2, "{urls:?}");
}

#[test]
fn received_chain_keeps_hop_order_and_ipv6() {
    let r = golden("received_ipv6.eml");
    assert_eq!(
        strings(&r["entities"]["ips"]),
        ["2001:db8::2", "2001:db8::1", "192.0.2.10", "198.51.100.7"]
    );
}

/// Inline text parts mail-parser lists as attachments (a named inline text/html in a
/// multipart/mixed, the second part of a multipart/related, a text/html cut off by an
/// unterminated boundary, HTML after plain inside a multipart/alternative) give their links
/// and text; only a named one is an attachment too.
#[test]
fn inline_text_parts_give_links_and_text() {
    let link = |r: &serde_json::Value, url: &str, source: &str| {
        let links = r["entities"]["links"].as_array().unwrap();
        links
            .iter()
            .find(|l| l["url"] == url && l["source"] == source)
            .cloned()
            .unwrap_or_else(|| panic!("{url} ({source}) not in {links:?}"))
    };
    let mixed = golden("inline_html_mixed.eml");
    link(
        &mixed,
        "https://claim.example.net/reward?id=7781",
        "html_href",
    );
    link(
        &mixed,
        "http://www.rewards-center.example.org/",
        "html_text",
    );
    link(&mixed, "http://help.example.com/faq", "text");
    let atts = mixed["entities"]["attachments"].as_array().unwrap();
    let types: Vec<&str> = atts
        .iter()
        .filter_map(|a| a["content_type"].as_str())
        .collect();
    assert_eq!(types, ["text/html", "image/gif"], "{atts:?}");
    assert_eq!(atts[0]["name"], "statement.html");

    let cut = golden("inline_html_unterminated.eml");
    let href = link(&cut, "http://prize.example.com/claim?u=alice", "html_href");
    assert_eq!(href["text"], "https://www.paypal.com/prizes");
    let anchors = cut["entities"]["anchors"].as_array().unwrap();
    assert!(anchors.iter().any(|a| a["mismatch"] == true), "{anchors:?}");
    assert!(cut["entities"]["attachments"]
        .as_array()
        .unwrap()
        .is_empty());
    assert!(anomalies(&cut).contains(&"unterminated_multipart".to_string()));

    let alt = golden("inline_html_alternative.eml");
    link(&alt, "http://shop.seeds.example.org/", "html_text");
    assert!(alt["entities"]["attachments"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// Each hop greeted with a forged address literal (Postfix, Sendmail, Exim with and without
/// rDNS, qmail, Exchange, Gmail, Courier): the addresses are the ones the receiving MTAs saw,
/// a literal is never a host name, and the sender's reputation keys are those of the topmost
/// connection address.
#[test]
fn forged_helo_literals_give_the_connection_addresses() {
    use shrike::shingle::{of_value, Kind};
    let r = golden("received_forged_helo.eml");
    let ips = [
        "203.0.113.9",
        "2001:db8:5::9",
        "203.0.113.13",
        "2001:db8:8::4",
        "203.0.113.18",
        "2001:db8:7::17",
        "203.0.113.25",
        "203.0.113.26",
    ];
    assert_eq!(strings(&r["entities"]["ips"]), ips);
    let hosts: Vec<Option<&str>> = r["entities"]["received"]
        .as_array()
        .expect("received hops")
        .iter()
        .map(|h| h["host"].as_str())
        .collect();
    assert_eq!(
        hosts,
        [
            None,
            Some("relay.example.net"),
            None,
            Some("dsl.example.com"),
            None,
            None,
            Some("cpe.example.com"),
            None,
        ]
    );
    let shingles = |kind: &str| -> Vec<String> {
        let all = r["shingles"].as_array().expect("shingles");
        let of_kind = all.iter().filter(|s| s["type"] == kind);
        let mut hashes: Vec<String> = of_kind
            .map(|s| s["hash"].as_str().unwrap().into())
            .collect();
        hashes.sort();
        hashes
    };
    let keys = |kind, values: &[&str]| -> Vec<String> {
        let hashes = values.iter().flat_map(|v| of_value(kind, v));
        let mut hashes: Vec<String> = hashes.map(|h| format!("{h:016x}")).collect();
        hashes.sort();
        hashes
    };
    assert_eq!(shingles("sender_ip"), keys(Kind::SenderIp, &[ips[0]]));
    assert_eq!(
        shingles("sender_net"),
        keys(Kind::SenderNet, &["203.0.113.0/24"])
    );
    assert_eq!(shingles("received_ip"), keys(Kind::ReceivedIp, &ips));
}
