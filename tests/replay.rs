//! `shrike replay` as a real process: a small labelled fixture corpus with known outcomes (a
//! bulk campaign that reputation catches once users complain about its first copies), the CSV
//! and JSON reports, two rule sets compared, a seeded spread, and the development corpus.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/replay")
}

/// Runs `shrike replay ARGS`, asserts success and returns standard output.
fn replay(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("replay")
        .args(args)
        .output()
        .expect("run shrike replay");
    assert!(
        out.status.success(),
        "shrike replay {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// CSV rows as header → value maps.
fn read_csv(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).expect("csv");
    let header = reader.headers().expect("csv header").clone();
    reader
        .records()
        .map(|r| {
            let r = r.expect("csv row");
            header
                .iter()
                .map(String::from)
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect()
}

fn file_name(row: &std::collections::HashMap<String, String>) -> &str {
    row["file"].rsplit('/').next().unwrap()
}

fn label<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["labels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["label"] == name)
        .unwrap_or_else(|| panic!("no label {name} in {summary}"))
}

fn caught(action: &str) -> bool {
    matches!(
        action,
        "add header" | "rewrite subject" | "soft reject" | "quarantine" | "discard" | "reject"
    )
}

#[test]
fn campaign_is_caught_by_reputation_after_complaints() {
    let tmp = tempfile::tempdir().unwrap();
    let csv_path = tmp.path().join("out.csv");
    let fixture = fixture();
    let json = replay(&[
        "--complain",
        "1",
        "--feedback-delay",
        "10m",
        "--json",
        "--csv",
        csv_path.to_str().unwrap(),
        fixture.to_str().unwrap(),
    ]);
    let summary: Value = serde_json::from_str(&json).expect("JSON summary");
    assert_eq!(summary["messages"], 20);
    assert_eq!(label(&summary, "spam")["messages"], 13);
    assert_eq!(label(&summary, "ham")["messages"], 6);
    assert_eq!(label(&summary, "hard_ham")["messages"], 1);
    assert_eq!(label(&summary, "ham")["caught"], 0, "{summary}");
    assert_eq!(label(&summary, "hard_ham")["caught"], 0, "{summary}");
    // Every uncaught campaign copy drew a complaint (probability 1); none of the caught ones.
    let rows = read_csv(&csv_path);
    assert_eq!(rows.len(), 20);
    for column in ["file", "label", "action", "score", "symbols"] {
        assert!(rows[0].contains_key(column), "CSV column {column}");
    }
    let campaign: Vec<_> = rows
        .iter()
        .filter(|r| file_name(r).starts_with("campaign-"))
        .collect();
    assert_eq!(campaign.len(), 12);
    // Arrival order: the copies come in the order they were sent.
    let order: Vec<&str> = campaign.iter().map(|r| file_name(r)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    // The first copies pass: the rules alone see nothing, and there is no history yet.
    for r in &campaign[..3] {
        assert_eq!(r["action"], "no action", "{r:?}");
        assert!(!r["symbols"].contains("REP_"), "{r:?}");
        assert_eq!(r["feedback"], "complaint", "{r:?}");
    }
    // Complaints about them reach the sender, its IP and its URL domain: later copies are caught.
    for r in &campaign[6..] {
        assert!(caught(&r["action"]), "{r:?}");
        assert!(r["symbols"].contains("REP_FROM_COMPLAINTS"), "{r:?}");
        assert!(r["symbols"].contains("REP_URL_COMPLAINTS"), "{r:?}");
        assert_eq!(r["feedback"], "", "{r:?}");
    }
    assert_eq!(
        summary["complaints"],
        campaign
            .iter()
            .filter(|r| r["feedback"] == "complaint")
            .count()
    );
    let gtube = rows.iter().find(|r| file_name(r) == "gtube.eml").unwrap();
    assert_eq!(gtube["action"], "reject");
    for r in rows.iter().filter(|r| r["label"] != "spam") {
        assert_eq!(r["action"], "no action", "{r:?}");
    }
    // Per-rule hits by label.
    let rep = summary["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["symbol"] == "REP_FROM_COMPLAINTS")
        .expect("REP_FROM_COMPLAINTS in the rule table");
    assert!(rep["spam"].as_u64().unwrap() >= 6);
    assert_eq!(rep["ham"], 0);
}

#[test]
fn without_complaints_the_campaign_gets_through() {
    let tmp = tempfile::tempdir().unwrap();
    let csv_path = tmp.path().join("out.csv");
    let fixture = fixture();
    let text = replay(&[
        "--complain",
        "0",
        "--csv",
        csv_path.to_str().unwrap(),
        fixture.to_str().unwrap(),
    ]);
    assert!(text.contains("feedback: 0 complaints"), "{text}");
    assert!(text.contains("≥ add header"), "{text}");
    let rows = read_csv(&csv_path);
    for r in rows
        .iter()
        .filter(|r| file_name(r).starts_with("campaign-"))
    {
        assert_eq!(r["action"], "no action", "{r:?}");
        assert_eq!(r["feedback"], "");
    }
}

#[test]
fn compare_rules_lists_what_changed() {
    // B: the default rules without the reputation file.
    let tmp = tempfile::tempdir().unwrap();
    let rules_b = tmp.path().join("rules-b");
    std::fs::create_dir(&rules_b).unwrap();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    for entry in std::fs::read_dir(&rules).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".lua") && name != "50_reputation.lua" {
            std::fs::copy(&path, rules_b.join(&name)).unwrap();
        }
    }
    let fixture = fixture();
    let json = replay(&[
        "--no-default-rules",
        "--rules",
        rules.to_str().unwrap(),
        "--compare-rules",
        rules_b.to_str().unwrap(),
        "--complain",
        "1",
        "--feedback-delay",
        "10m",
        "--json",
        fixture.to_str().unwrap(),
    ]);
    let cmp: Value = serde_json::from_str(&json).expect("JSON comparison");
    let diffs = cmp["differences"].as_array().unwrap();
    // B has no reputation, so every campaign copy A caught goes back to no action in B.
    let a_caught = label(&cmp["a"], "spam")["caught"].as_u64().unwrap();
    let b_caught = label(&cmp["b"], "spam")["caught"].as_u64().unwrap();
    assert_eq!(b_caught, 1, "only GTUBE: {}", cmp["b"]);
    assert_eq!(diffs.len() as u64, a_caught - b_caught);
    for d in diffs {
        assert!(d["file"].as_str().unwrap().contains("campaign-"), "{d}");
        assert_eq!(d["action_b"], "no action");
        let removed: Vec<&str> = d["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[0].as_str().unwrap())
            .collect();
        assert!(removed.contains(&"REP_FROM_COMPLAINTS"), "{d}");
    }
    assert_eq!(cmp["moves"]["spam"]["no_longer_caught"], diffs.len());
    // The text form lists each difference with its symbols.
    let text = replay(&[
        "--no-default-rules",
        "--rules",
        rules.to_str().unwrap(),
        "--compare-rules",
        rules_b.to_str().unwrap(),
        "--complain",
        "1",
        "--feedback-delay",
        "10m",
        fixture.to_str().unwrap(),
    ]);
    assert!(
        text.contains(&format!("{} messages change action", diffs.len())),
        "{text}"
    );
    assert!(text.contains("-REP_URL_COMPLAINTS"), "{text}");
}

#[test]
fn a_seeded_spread_repeats_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = fixture();
    let run = |seed: &str, name: &str| {
        let path = tmp.path().join(name);
        replay(&[
            "--period",
            "2d",
            "--start",
            "2026-03-01T00:00:00Z",
            "--seed",
            seed,
            "--csv",
            path.to_str().unwrap(),
            fixture.to_str().unwrap(),
        ]);
        std::fs::read_to_string(path).unwrap()
    };
    let first = run("5", "a.csv");
    assert_eq!(first, run("5", "b.csv"));
    assert_ne!(first, run("6", "c.csv"));
    let rows = read_csv(&tmp.path().join("a.csv"));
    assert_eq!(rows[0]["arrival"], "2026-03-01T00:00:00Z");
    assert!(rows.iter().all(|r| r["arrival"].as_str() < "2026-03-03"));
}

#[test]
fn dev_corpus_replay_keeps_ham_and_catches_spam() {
    let tmp = tempfile::tempdir().unwrap();
    for m in common::load_corpus() {
        let dir = tmp.path().join(&m.label);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&m.name), &m.raw).unwrap();
    }
    // Progressive validation: every message is scored, then its label trains the classifier.
    let json = replay(&["--json", "--train", "all", tmp.path().to_str().unwrap()]);
    let summary: Value = serde_json::from_str(&json).expect("JSON summary");
    assert_eq!(label(&summary, "spam")["messages"], 500);
    assert_eq!(label(&summary, "ham")["messages"], 2500);
    assert_eq!(label(&summary, "hard_ham")["messages"], 125);
    // Regression floors for the default rules (BENCHMARKS.md has the figures).
    let ham_fp = label(&summary, "ham")["caught_pct"].as_f64().unwrap();
    assert!(ham_fp <= 0.1, "ham over add header: {ham_fp}%");
    let spam = label(&summary, "spam")["caught_pct"].as_f64().unwrap();
    assert!(spam >= 50.0, "spam at or over add header: {spam}%");
    assert_eq!(summary["over_time"].as_array().unwrap().len(), 10);
    assert!(summary["complaints"].as_u64().unwrap() > 0);
    assert!(summary["messages_per_sec"].as_f64().unwrap() > 0.0);
    // The classifier learned every spam and (Message-IDs repeat a little) nearly all ham, and
    // its confident spam symbol fires on spam, at most on 0.1% of ham.
    assert_eq!(summary["classifier_spam"], 500);
    assert!(summary["classifier_ham"].as_u64().unwrap() > 2_500);
    let clf = summary["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["symbol"] == "CLF_SPAM_HIGH")
        .expect("CLF_SPAM_HIGH hits");
    assert!(clf["spam"].as_u64().unwrap() >= 100, "{clf}");
    assert!(clf["ham"].as_u64().unwrap() <= 2, "{clf}");
}
