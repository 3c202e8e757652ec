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
    // Every copy A caught or greylisted by reputation is milder in B (the campaign links its
    // own domain, so a copy with few complaints yet stays under add header).
    assert_eq!(
        diffs.len() as u64,
        cmp["moves"]["spam"]["milder"].as_u64().unwrap()
    );
    assert!(diffs.len() as u64 >= a_caught - b_caught);
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
    assert_eq!(
        cmp["moves"]["spam"]["no_longer_caught"],
        a_caught - b_caught
    );
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

/// `fold,role,file,label` rows of `--folds` as (fold, role, file name, label).
fn read_roles(path: &Path) -> Vec<(usize, String, String, String)> {
    read_csv(path)
        .iter()
        .map(|r| {
            (
                r["fold"].parse().expect("fold number"),
                r["role"].clone(),
                file_name(r).to_string(),
                r["label"].clone(),
            )
        })
        .collect()
}

#[test]
fn cross_validation_scores_each_message_once_and_never_what_its_fold_learned() {
    use std::collections::{BTreeMap, BTreeSet};
    let tmp = tempfile::tempdir().unwrap();
    let fixture = fixture();
    let files = |label: &str| -> BTreeSet<String> {
        std::fs::read_dir(fixture.join(label))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let (spam, ham, hard) = (files("spam"), files("ham"), files("hard_ham"));
    let run = |k: &str, n: &str| {
        let csv_path = tmp.path().join(format!("cv{k}-{n}.csv"));
        let roles_path = tmp.path().join(format!("roles{k}-{n}.csv"));
        let json = replay(&[
            "--cross-validate",
            k,
            "--json",
            "--csv",
            csv_path.to_str().unwrap(),
            "--folds",
            roles_path.to_str().unwrap(),
            fixture.to_str().unwrap(),
        ]);
        (
            serde_json::from_str::<Value>(&json).expect("JSON"),
            std::fs::read(&csv_path).unwrap(),
            roles_path,
            csv_path,
        )
    };
    for k in [2usize, 3] {
        let (summary, csv_bytes, roles_path, csv_path) = run(&k.to_string(), "a");
        let roles = read_roles(&roles_path);
        let rows = read_csv(&csv_path);
        assert_eq!(summary["folds"], k);
        assert_eq!(summary["per_fold"].as_array().unwrap().len(), k);

        // Every spam and ham is scored in exactly one fold, every hard ham in each fold.
        let mut scored: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for row in &rows {
            let fold: usize = row["fold"].parse().unwrap();
            assert!(fold < k, "{row:?}");
            scored
                .entry(file_name(row).to_string())
                .or_default()
                .push(fold);
        }
        for name in spam.iter().chain(&ham) {
            assert_eq!(
                scored.get(name).map(Vec::len),
                Some(1),
                "{name}: {scored:?}"
            );
        }
        for name in &hard {
            let folds: BTreeSet<usize> = scored[name].iter().copied().collect();
            assert_eq!(folds, (0..k).collect(), "{name}");
        }
        // The per-message CSV and the roles agree on what each fold scored.
        let mut scored_roles: Vec<(usize, String)> = roles
            .iter()
            .filter(|r| r.1 == "scored")
            .map(|r| (r.0, r.2.clone()))
            .collect();
        let mut scored_csv: Vec<(usize, String)> = rows
            .iter()
            .map(|r| (r["fold"].parse().unwrap(), file_name(r).to_string()))
            .collect();
        scored_roles.sort();
        scored_csv.sort();
        assert_eq!(scored_roles, scored_csv);

        for fold in 0..k {
            let of = |role: &str| -> BTreeSet<String> {
                roles
                    .iter()
                    .filter(|r| r.0 == fold && r.1 == role)
                    .map(|r| r.2.clone())
                    .collect()
            };
            let (learned, scored_here) = (of("learned"), of("scored"));
            // Nothing a fold learned is scored in it; it learned all other spam and ham, and no
            // hard ham.
            assert!(
                learned.is_disjoint(&scored_here),
                "fold {fold}: {learned:?} ∩ {scored_here:?}"
            );
            let trained: BTreeSet<String> = spam.union(&ham).cloned().collect();
            let expected: BTreeSet<String> = trained.difference(&scored_here).cloned().collect();
            assert_eq!(learned, expected, "fold {fold}");
            assert!(learned.is_disjoint(&hard), "fold {fold} learned hard ham");
            // The classifier of the fold trained exactly what it learned.
            let f = &summary["per_fold"][fold];
            let learned_spam = learned.intersection(&spam).count();
            assert_eq!(f["classifier_spam"], learned_spam, "fold {fold}: {f}");
            assert_eq!(f["classifier_ham"], learned.len() - learned_spam);
            assert_eq!(label(f, "hard_ham")["messages"], hard.len());
        }
        // The totals add up the folds.
        let total = &summary["total"];
        assert_eq!(label(total, "spam")["messages"], spam.len());
        assert_eq!(label(total, "ham")["messages"], ham.len());
        assert_eq!(label(total, "hard_ham")["messages"], hard.len() * k);

        // The same run again gives the same folds and the same verdicts.
        let (_, again, _, _) = run(&k.to_string(), "b");
        assert_eq!(csv_bytes, again, "a cross-validation repeats exactly");
    }

    // Text tables: one row per fold and one for all.
    let text = replay(&["--cross-validate", "2", fixture.to_str().unwrap()]);
    assert!(text.starts_with("cross-validation: 2 folds"), "{text}");
    for row in ["\n0 ", "\n1 ", "\nall ", "\nall folds together:"] {
        assert!(text.contains(row), "{row:?} in {text}");
    }

    // Mistakes are refused with a message.
    for bad in [
        &["--cross-validate", "1"][..],
        &["--cross-validate", "21"],
        &["--cross-validate", "2", "--train", "all"],
        &["--folds", "x.csv"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("replay")
            .args(bad)
            .arg(&fixture)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} accepted");
        assert!(!out.stderr.is_empty(), "{bad:?}: no message");
    }
}

/// The temporal protocol: each label's earliest half by date is learned, only the later half
/// is scored, and everything scored came after everything learned.
#[test]
fn a_split_by_date_scores_only_what_came_after_what_it_learned() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = fixture();
    let csv_path = tmp.path().join("split.csv");
    let json = replay(&[
        "--split-by-date",
        "0.5",
        "--json",
        "--csv",
        csv_path.to_str().unwrap(),
        fixture.to_str().unwrap(),
    ]);
    let summary: Value = serde_json::from_str(&json).expect("JSON");
    let until = summary["split"][1]
        .as_str()
        .expect("learned until")
        .to_string();
    assert_eq!(summary["split"][0], 0.5);
    let rows = read_csv(&csv_path);
    assert!(!rows.is_empty());
    let count = |dir: &str| std::fs::read_dir(fixture.join(dir)).unwrap().count();
    let labelled = count("spam") + count("ham") + count("hard_ham");
    assert_eq!(rows.len(), labelled - labelled / 2, "the later half scored");
    for r in &rows {
        // RFC 3339 in UTC sorts as text.
        assert!(
            r["arrival"].as_str() >= until.as_str(),
            "{r:?} before {until}"
        );
    }
    // What was learned is what was not scored.
    let total = &summary["total"];
    let learned =
        total["classifier_spam"].as_u64().unwrap() + total["classifier_ham"].as_u64().unwrap();
    assert_eq!(learned as usize, labelled / 2, "{total}");
    let text = replay(&["--split-by-date", "0.5", fixture.to_str().unwrap()]);
    assert!(
        text.starts_with("split by date: learned the earliest 50%"),
        "{text}"
    );
    assert!(text.contains("spam against"), "{text}");
    for bad in [
        &["--split-by-date", "0"][..],
        &["--split-by-date", "1.5"],
        &["--split-by-date", "0.5", "--period", "1d"],
        &["--split-by-date", "0.5", "--cross-validate", "2"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("replay")
            .args(bad)
            .arg(&fixture)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} accepted");
    }
}
