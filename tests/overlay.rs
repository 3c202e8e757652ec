//! Local changes over the shipped rules, through the binary: a local directory that adds a
//! rule and replaces a shipped file, `[scores]` that change and zero a score, `[rules]
//! disabled`; `shrike rules list` showing each; `shrike scan` with and without the shipped
//! set; and a daemon that takes a changed score from its configuration on SIGHUP and
//! `POST /reload` without a restart (and keeps the old scores when the file is broken).

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use daemon::{wait_until, Daemon, Options};
use serde_json::Value;

/// No Date, no Message-ID (MISSING_DATE, MISSING_MESSAGE_ID of the shipped HDR_MISSING),
/// `X-Priority: 1` (HDR_PRIORITY_HIGH), the GTUBE string (the shipped GTUBE, which forces a
/// reject) and the local trigger.
const MESSAGE: &str = "From: Alice <alice@example.org>\r\nTo: bob@example.net\r\n\
    Subject: overlay test\r\nX-Priority: 1\r\n\r\n\
    local-trigger\r\nXJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X\r\n";

/// A local directory: `00_gtube.lua` replaces the shipped file (GTUBE is gone, GTUBE_LOCAL
/// comes instead), `95_local.lua` adds LOCAL_ADDED and LOCAL_ZEROED.
fn local_rules(dir: &Path) -> PathBuf {
    let rules = dir.join("local");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("00_gtube.lua"),
        "rule { name = 'GTUBE_LOCAL', score = 1.25, description = 'local stand-in',\n\
           check = function(msg) return msg:text():find('local-trigger', 1, true) ~= nil end }\n",
    )
    .unwrap();
    std::fs::write(
        rules.join("95_local.lua"),
        "rule { name = 'LOCAL_ADDED', score = 0.5, check = function() return true end }\n\
         rule { name = 'LOCAL_ZEROED', score = 3, check = function() return true end }\n",
    )
    .unwrap();
    rules
}

fn config(priority_score: f64, disabled: &str) -> String {
    format!(
        "[dns]\nenabled = false\n\
         [scores]\nHDR_PRIORITY_HIGH = {priority_score}\nLOCAL_ZEROED = 0\nNO_SUCH_SYMBOL = 1\n\
         [rules]\ndisabled = [{disabled}]\n\
         [actions]\nreject = 40\n"
    )
}

fn shrike(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(args)
        .output()
        .expect("run shrike")
}

fn listed(out: &std::process::Output) -> BTreeMap<String, Value> {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("one JSON object a line");
            (v["symbol"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

#[test]
fn rules_list_shows_every_change_and_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let rules = local_rules(dir.path());
    let cfg = dir.path().join("shrike.toml");
    std::fs::write(&cfg, config(4.25, "\"MISSING_DATE\"")).unwrap();
    let (c, r) = (cfg.to_str().unwrap(), rules.to_str().unwrap());
    let out = shrike(&["--config", c, "rules", "list", "--rules", r, "--json"]);
    let l = listed(&out);
    // added by the local directory
    let added = &l["LOCAL_ADDED"];
    assert_eq!(added["score"], 0.5);
    assert_eq!(added["enabled"], true);
    assert!(
        added["source"]
            .as_str()
            .unwrap()
            .ends_with("local/95_local.lua"),
        "{added}"
    );
    assert_eq!(added["overridden"], serde_json::json!([]));
    // the replacing file: its rule, and the shipped one is gone
    let local = &l["GTUBE_LOCAL"];
    assert!(local["source"]
        .as_str()
        .unwrap()
        .ends_with("local/00_gtube.lua"));
    assert_eq!(
        local["overridden"][0], "file replaces rules/00_gtube.lua",
        "{local}"
    );
    assert!(
        !l.contains_key("GTUBE"),
        "the replaced file's rule is not in the set"
    );
    // a shipped symbol with its score changed in the configuration
    let prio = &l["HDR_PRIORITY_HIGH"];
    assert_eq!(prio["source"], "shipped");
    assert_eq!(prio["score"], 4.25);
    assert_eq!(prio["declared"], 1.5);
    let why = prio["overridden"][0].as_str().unwrap();
    assert!(why.contains("score 1.5 -> 4.25 by [scores]"), "{why}");
    assert!(why.contains("shrike.toml"), "names the file: {why}");
    // switched off by [rules] disabled (one symbol of a rule that still runs) and by a 0 score
    assert_eq!(l["MISSING_DATE"]["enabled"], false);
    assert_eq!(l["MISSING_DATE"]["score"], 0.0);
    assert!(l["MISSING_DATE"]["overridden"][0]
        .as_str()
        .unwrap()
        .contains("[rules] disabled"));
    assert_eq!(l["MISSING_MESSAGE_ID"]["enabled"], true);
    assert_eq!(l["LOCAL_ZEROED"]["enabled"], false);
    assert!(l["LOCAL_ZEROED"]["overridden"][0]
        .as_str()
        .unwrap()
        .contains("[scores] LOCAL_ZEROED = 0"));
    // an untouched shipped symbol
    assert_eq!(l["MISSING_FROM"]["source"], "shipped");
    assert_eq!(l["MISSING_FROM"]["overridden"], serde_json::json!([]));
    // a name no rule declares is warned about
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NO_SUCH_SYMBOL"), "{err}");

    // The table form says the same.
    let out = shrike(&["--config", c, "rules", "list", "--rules", r]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |sym: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{sym} ")))
            .unwrap_or_else(|| panic!("no {sym} in\n{text}"))
            .to_string()
    };
    assert!(line("HDR_PRIORITY_HIGH").contains("4.25"), "{text}");
    assert!(line("LOCAL_ZEROED").contains(" off "), "{text}");
    assert!(line("GTUBE_LOCAL").contains("file replaces"), "{text}");

    // Without the shipped set, only the local rules.
    let out = shrike(&[
        "rules",
        "list",
        "--rules",
        r,
        "--no-default-rules",
        "--json",
    ]);
    let alone = listed(&out);
    assert_eq!(
        alone.keys().collect::<Vec<_>>(),
        ["GTUBE_LOCAL", "LOCAL_ADDED", "LOCAL_ZEROED"]
    );
    assert_eq!(alone["GTUBE_LOCAL"]["overridden"], serde_json::json!([]));
    // and --no-default-rules alone has nothing to load
    let out = shrike(&["rules", "list", "--no-default-rules"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs a rule directory"));
}

#[test]
fn rules_dirs_in_the_config_layer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for (d, score) in [(&a, 1), (&b, 2)] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(
            d.join("50_mine.lua"),
            format!("rule {{ name = 'MINE', score = {score}, check = function() end }}\n"),
        )
        .unwrap();
    }
    let cfg = dir.path().join("shrike.toml");
    std::fs::write(&cfg, format!("[engine]\nrules_dirs = [{:?}, {:?}]\n", a, b)).unwrap();
    let l = listed(&shrike(&[
        "--config",
        cfg.to_str().unwrap(),
        "rules",
        "list",
        "--json",
    ]));
    assert_eq!(l["MINE"]["score"], 2.0, "the later directory wins");
    assert!(l["MINE"]["overridden"][0]
        .as_str()
        .unwrap()
        .contains("a/50_mine.lua"));
    assert!(l.contains_key("GTUBE"), "over the shipped set");
}

#[test]
fn scan_runs_the_local_rules_over_the_shipped_ones() {
    let dir = tempfile::tempdir().unwrap();
    let rules = local_rules(dir.path());
    let msg = dir.path().join("m.eml");
    std::fs::write(&msg, MESSAGE).unwrap();
    let cfg = dir.path().join("shrike.toml");
    std::fs::write(&cfg, config(4.25, "\"MISSING_DATE\"")).unwrap();
    let scan = |extra: &[&str]| -> Value {
        let mut args = vec!["--config", cfg.to_str().unwrap(), "scan"];
        args.extend_from_slice(extra);
        args.push(msg.to_str().unwrap());
        let out = shrike(&args);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = scan(&["--rules", rules.to_str().unwrap()]);
    let s = &v["symbols"];
    assert_eq!(s["HDR_PRIORITY_HIGH"]["score"], 4.25);
    assert_eq!(s["LOCAL_ADDED"]["score"], 0.5);
    assert_eq!(s["GTUBE_LOCAL"]["score"], 1.25);
    assert_eq!(s["MISSING_MESSAGE_ID"]["score"], 1.5);
    for gone in ["GTUBE", "MISSING_DATE", "LOCAL_ZEROED"] {
        assert!(s.get(gone).is_none(), "{gone} must not fire: {s}");
    }
    assert_eq!(
        v["action"], "add header",
        "GTUBE's forced reject is gone: {v}"
    );
    // The shipped set alone still has GTUBE.
    let v = scan(&[]);
    assert_eq!(v["action"], "reject");
    assert!(v["symbols"].get("LOCAL_ADDED").is_none());
    // [actions] moved the reject threshold; the local rules alone:
    let v = scan(&["--rules", rules.to_str().unwrap(), "--no-default-rules"]);
    let names: Vec<&String> = v["symbols"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["GTUBE_LOCAL", "LOCAL_ADDED"]);
}

#[test]
fn a_reload_takes_changed_scores_from_the_config_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rules = local_rules(dir.path());
    let mut d = Daemon::start(
        dir.path(),
        Options {
            config: Some(config(4.25, "\"MISSING_DATE\"")),
            rules: Some(rules),
            overlay: true,
            ..Options::default()
        },
    );
    let pid = d.pid();
    let symbols = |d: &Daemon| -> Value {
        let v = d.post("/checkv2", &[], MESSAGE.as_bytes()).json();
        assert_eq!(v["required_score"], 40.0, "[actions] reject: {v}");
        v["symbols"].clone()
    };
    let s = symbols(&d);
    assert_eq!(s["HDR_PRIORITY_HIGH"]["score"], 4.25);
    assert_eq!(s["LOCAL_ADDED"]["score"], 0.5);
    assert!(s.get("MISSING_DATE").is_none(), "{s}");
    assert!(s.get("LOCAL_ZEROED").is_none(), "{s}");
    assert!(s.get("GTUBE").is_none(), "{s}");

    // SIGHUP: the new score, and MISSING_DATE back on.
    let cfg = dir.path().join("shrike.toml");
    std::fs::write(&cfg, config(2.75, "")).unwrap();
    d.signal("HUP");
    wait_until("SIGHUP reload", 30, || {
        d.get("/health").json()["generation"] == 2
    });
    let s = symbols(&d);
    assert_eq!(s["HDR_PRIORITY_HIGH"]["score"], 2.75);
    assert_eq!(s["MISSING_DATE"]["score"], 1.5);

    // POST /reload: another score.
    std::fs::write(&cfg, config(0.25, "\"LOCAL_ADDED\"")).unwrap();
    let r = d.post("/reload", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let s = symbols(&d);
    assert_eq!(s["HDR_PRIORITY_HIGH"]["score"], 0.25);
    assert!(s.get("LOCAL_ADDED").is_none(), "{s}");

    // A configuration that no longer parses: refused, the previous scores keep serving.
    std::fs::write(&cfg, "[scores]\nHDR_PRIORITY_HIGH = \"high\"\n").unwrap();
    let r = d.post("/reload", &[], b"");
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.json()["error"].as_str().unwrap().contains("shrike.toml"));
    let h = d.get("/health").json();
    assert_eq!(h["generation"], 3);
    assert!(h["last_reload_error"].as_str().is_some(), "{h}");
    assert_eq!(symbols(&d)["HDR_PRIORITY_HIGH"]["score"], 0.25);
    assert_eq!(d.pid(), pid, "no restart");
    d.stop();
}
