//! The default rule set (`rules/`, with `lua/`) passes its own tests (`tests/rules/*.test`):
//! every symbol has a message that hits it and one that does not.

use std::collections::BTreeSet;
use std::path::Path;

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::scan::ruletest;

#[test]
fn default_rules_pass_their_tests_and_every_symbol_is_tested_both_ways() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let location = RuleLocation::Dir(root.join("rules"));
    let config = Config::default();
    let results = ruletest::run_dir(
        &config.scan_settings(),
        &config.store,
        &location,
        &root.join("tests/rules"),
    )
    .expect("rules load");
    assert!(results.len() >= 10, "rule tests found: {}", results.len());
    let failures: Vec<String> = results
        .iter()
        .flat_map(|r| {
            r.failures
                .iter()
                .map(move |f| format!("{}: {f}", r.file.display()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "rule test failures:\n{}",
        failures.join("\n")
    );

    // Coverage: each declared symbol is expected somewhere and expected-not somewhere.
    let store: std::sync::Arc<dyn shrike::store::ReputationStore> = std::sync::Arc::new(
        shrike::store::Store::new(
            &config.store,
            std::sync::Arc::new(shrike::store::SystemClock),
        )
        .unwrap(),
    );
    let scanner = shrike::scan::Scanner::new(&config.scan_settings(), location, store).unwrap();
    let generation = scanner.engine().generation();
    let (mut hit, mut miss) = (BTreeSet::new(), BTreeSet::new());
    for r in &results {
        let t = ruletest::parse(&std::fs::read(&r.file).unwrap()).unwrap();
        hit.extend(t.expect);
        miss.extend(t.expect_not);
    }
    let mut untested = Vec::new();
    for rule in &generation.rules {
        for s in &rule.symbols {
            if !hit.contains(&s.name) || !miss.contains(&s.name) {
                untested.push(s.name.clone());
            }
        }
    }
    assert!(
        untested.is_empty(),
        "symbols without a hitting and a non-hitting test: {untested:?}"
    );
}

/// The negative tests can fail: every symbol's `expect-not` tests include a near miss (a
/// message that gets as far into the rule as its hits do), except for the few listed here,
/// where none can be written simply (a rate limit over 200 messages a known-good sender
/// reaches; rescues; an executable that is not one). A new symbol whose only negatives stop
/// where plain mail stops fails this test: add a near miss (docs/rules.md, "Rule tests").
#[test]
fn default_rules_negative_tests_are_near_misses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let location = RuleLocation::Dir(root.join("rules"));
    let config = Config::default();
    let settings = config.scan_settings();
    let results = ruletest::run_dir_traced(
        &settings,
        &config.store,
        &location,
        &root.join("tests/rules"),
    )
    .expect("rules load");
    assert!(results.iter().all(|r| r.trace.is_some()));
    let weak =
        shrike::scan::nearmiss::weak_negatives(&settings, &config.store, &location, &results)
            .expect("rules load");
    let known = [
        "ATTACH_EXECUTABLE",
        "REP_BODY_RESCUED",
        "REP_FROM_RESCUED",
        "SENDER_RATELIMIT",
    ];
    let new: Vec<String> = weak
        .iter()
        .filter(|w| !known.contains(&w.symbol.as_str()))
        .map(|w| {
            format!(
                "{} (rule {}, lines {})",
                w.symbol,
                w.rule,
                shrike::scan::nearmiss::ranges(&w.interesting)
            )
        })
        .collect();
    assert!(
        new.is_empty(),
        "symbols whose expect-not tests are no near misses: {new:?}"
    );
}

/// No pattern of the default set backtracks: each one the rule tests run, and each
/// pattern-like literal of the rule files and library, does work in proportion to its input on
/// inputs made from its own items (`engine::patterns`). A sender picks the subject, the anchor
/// texts and the header values these patterns read.
#[test]
fn default_rules_have_no_super_linear_patterns() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let location = RuleLocation::Dir(root.join("rules"));
    let config = Config::default();
    let (results, mut patterns) = shrike::engine::patterns::recording(|| {
        ruletest::run_dir(
            &config.scan_settings(),
            &config.store,
            &location,
            &root.join("tests/rules"),
        )
    });
    assert!(results.expect("rules load").len() >= 10);
    let ran = patterns.len();
    for dir in ["rules", "lua/shrike"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "lua") {
                let text = std::fs::read_to_string(&path).unwrap();
                for p in shrike::engine::patterns::literals(&text) {
                    if !patterns.contains(&p) {
                        patterns.push(p);
                    }
                }
            }
        }
    }
    // The recording and the scan both found something: the check cannot pass empty.
    assert!(ran >= 20, "patterns the rule tests ran: {ran}");
    assert!(patterns.len() >= 50, "patterns: {}", patterns.len());
    let costs = shrike::engine::patterns::measure(&patterns).unwrap();
    let bad: Vec<_> = costs.iter().filter(|c| c.super_linear()).collect();
    assert!(bad.is_empty(), "super-linear patterns: {bad:#?}");
}

/// `shrike rules check` fails a rule directory whose pattern backtracks, naming it and the
/// input that shows it, and passes the same rule written without the nested repetition.
#[test]
fn rules_check_fails_a_backtracking_pattern() {
    let check = |pattern: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tests")).unwrap();
        std::fs::write(
            dir.path().join("local.lua"),
            format!(
                "rule {{ name = 'LOCAL_SUBJECT', score = 1, check = function(msg)\n\
                 return string.find(msg:subject(), {pattern:?}) ~= nil end }}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("tests/local.test"),
            "expect LOCAL_SUBJECT\n\nFrom: a@example.com\nSubject: win big x\n\nhi\n",
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args(["rules", "check", "--no-default-rules"])
            .arg(dir.path())
            .env("PATH", "/nonexistent") // luacheck's verdict is tests/lint.rs's business
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, out) = check("^(.-)(.-)x$");
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL pattern \"^(.-)(.-)x$\" backtracks"),
        "{out}"
    );
    let (ok, out) = check("x$");
    assert!(ok, "{out}");
    assert!(out.contains("0 super-linear"), "{out}");
}

/// The fenced blocks of a Markdown text, fences indented or not: (language, text).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, usize, String)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), indent, String::new())),
            (Some(_), Some("")) => {
                let (lang, _, text) = open.take().unwrap();
                blocks.push((lang, text));
            }
            (Some((_, indent, text)), _) => {
                text.push_str(line.get(*indent..).unwrap_or(line.trim_start()));
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed fence");
    blocks
}

/// `shrike rules list --json`, over the shipped rules, with `dir` laid over them when given.
fn listed(dir: Option<&Path>) -> Vec<serde_json::Value> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_shrike"));
    cmd.args(["rules", "list", "--json"]);
    if let Some(dir) = dir {
        cmd.arg("--rules").arg(dir);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// docs/rules.md's examples load and fire as printed: every ```lua block (but the editor
/// setup) is a rule file that `shrike rules check` takes over the shipped rules (luacheck
/// included when installed), and the rule tests it prints pass. None collides with a shipped
/// symbol or replaces a shipped file: the shipped set is whole beside them, and the layout's
/// file names are not shipped ones.
#[test]
fn the_examples_of_docs_rules_md_load_and_fire_as_printed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/rules.md")).unwrap();
    let blocks = fenced_blocks(&doc);
    let lua: Vec<&String> = blocks
        .iter()
        .filter(|(lang, _)| lang == "lua")
        .map(|(_, text)| text)
        .collect();
    // The Neovim setup is the one Lua block that is no rule file.
    let rules: Vec<&&String> = lua
        .iter()
        .filter(|t| !t.contains("require(\"lspconfig\")"))
        .collect();
    assert_eq!(lua.len() - rules.len(), 1);
    assert!(rules.len() >= 3, "rule examples: {}", rules.len());
    let tests: Vec<&String> = blocks
        .iter()
        .filter(|(lang, text)| lang.is_empty() && text.starts_with("expect "))
        .map(|(_, text)| text)
        .collect();
    assert!(!tests.is_empty(), "a message an example fires on");

    let dir = tempfile::tempdir().unwrap();
    let myrules = dir.path().join("myrules");
    std::fs::create_dir_all(myrules.join("tests")).unwrap();
    for (i, text) in rules.iter().enumerate() {
        std::fs::write(myrules.join(format!("5{i}_doc_example.lua")), text).unwrap();
    }
    for (i, text) in tests.iter().enumerate() {
        std::fs::write(myrules.join(format!("tests/doc_{i}.test")), text).unwrap();
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(["rules", "check"])
        .arg(&myrules)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    let n = tests.len();
    assert!(
        said.contains(&format!("{n} tests, {n} passed, 0 failed")),
        "{said}"
    );

    let shipped = |list: &[serde_json::Value]| -> Vec<String> {
        list.iter()
            .filter(|l| l["source"] == "shipped")
            .map(|l| l["symbol"].as_str().unwrap().to_string())
            .collect()
    };
    let alone = listed(None);
    let with_examples = listed(Some(&myrules));
    assert_eq!(shipped(&with_examples), shipped(&alone));
    assert!(with_examples.len() > alone.len());
    assert!(with_examples.iter().all(|l| l["overridden"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| !o.as_str().unwrap().contains("replaces"))));

    let layout = blocks
        .iter()
        .find(|(lang, text)| lang.is_empty() && text.starts_with("myrules/"))
        .map(|(_, text)| text)
        .expect("the layout example");
    let names: Vec<&str> = layout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.ends_with(".lua"))
        .collect();
    assert!(names.len() >= 2, "{layout}");
    for name in names {
        assert!(
            !root.join("rules").join(name).exists(),
            "the layout names the shipped file {name}: copied, it would replace it"
        );
    }
}
